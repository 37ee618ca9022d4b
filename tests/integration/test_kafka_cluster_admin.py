"""Kafka's cluster admin APIs (kraftlite/kafka/cluster_apis.py) from real clients against a
real, secured cluster (3 controllers, 3 brokers, SASL SCRAM, ACLs): confluent-kafka's
AdminClient (librdkafka: the legacy alter_configs, elect_leaders) and kafka-python's
KafkaAdminClient (alter_configs, describe_log_dirs, elect_leaders,
alter/list_partition_reassignments, describe_metadata_quorum). Each API's change is
checked on the HTTP side, which is the same machinery; each is refused to a user with no
ACLs with Kafka's code, changing nothing; where a client hides the code, our own codec
asks on an authenticated connection (tests/harness/kafka_wire.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaException
from confluent_kafka import TopicPartition as RdTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from kraftlite.protocol.kafka.messages import ApiKey
from tests.harness.auth import ADMIN, as_admin, auth_cluster
from tests.harness.kafka_wire import Connection, plain_login
from tests.harness.observe import described_on, wait_until
from tests.harness.processes import FAST_SESSIONS, Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    # kafka-python 3.0.12 reads its schemas with a deprecated importlib call
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning"),
]

MALLORY = ("mallory", "mallory-pw-1")  # a user with no ACLs at all
CLUSTER_AUTHORIZATION_FAILED = 31
TOPIC_AUTHORIZATION_FAILED = 29


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = auth_cluster(
        tmp_path_factory.mktemp("kafka-cluster-admin"),
        kafka=True,
        # no automatic preferred election racing the tests' own
        controller_config={**FAST_SESSIONS, "leader.imbalance.check.interval.ms": 3_600_000},
    )
    running.start()
    try:
        status, answer = as_admin(
            "POST", running.urls[1] + "/v1/users", {"name": MALLORY[0], "password": MALLORY[1]}
        )
        assert status == 201, answer
        yield running
    finally:
        running.stop()


def rdkafka_config(cluster: Cluster, user: tuple[str, str] = ADMIN) -> dict[str, str]:
    return {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user[0],
        "sasl.password": user[1],
    }


def rdkafka(cluster: Cluster, user: tuple[str, str] = ADMIN) -> AdminClient:
    return AdminClient(rdkafka_config(cluster, user))


def kafka_python(cluster: Cluster, user: tuple[str, str] = ADMIN) -> Any:
    """kafka-python's KafkaAdminClient (imported here: it warns on import, which pytestmark
    lets pass only inside tests)."""
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415

    return KafkaAdminClient(
        bootstrap_servers=cluster.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=user[0],
        sasl_plain_password=user[1],
        request_timeout_ms=30_000,
    )


def raw(cluster: Cluster, broker_id: int, user: tuple[str, str]) -> Connection:
    """A connection to a broker's Kafka listener, authenticated (SASL PLAIN) as `user`."""
    return plain_login(cluster.kafka_addresses[broker_id], *user)


def topic(cluster: Cluster, name: str, broker_id: int = 1) -> dict[str, Any]:
    status, described = as_admin("GET", cluster.urls[broker_id] + f"/v1/topics/{name}")
    assert status == 200, described
    return described


def create(cluster: Cluster, name: str, **body: Any) -> None:
    """A topic (over HTTP, as the admin), led everywhere before it returns: broker 1 holds
    it when it answers, brokers 2 and 3 once their metadata follows (404 until then)."""
    status, answer = as_admin("POST", cluster.urls[1] + "/v1/topics", {"name": name, **body})
    assert status == 201, answer

    def led_on(broker_id: int) -> bool:
        described = described_on(cluster, broker_id, name, send=as_admin)
        return described is not None and all(p["leader"] >= 0 for p in described["partitions"])

    for broker_id in cluster.urls:
        wait_until(lambda b=broker_id: led_on(b), what=f"{name} led on broker {broker_id}")


def produce(cluster: Cluster, name: str, partition: int, count: int, size: int = 1000) -> None:
    records = [{"value": "x" * size} for _ in range(count)]
    status, answer = as_admin(
        "POST",
        cluster.urls[1] + f"/v1/topics/{name}/partitions/{partition}/records",
        {"records": records},
    )
    assert status == 200, answer


def configs_of(cluster: Cluster, name: str) -> dict[str, str]:
    return dict(topic(cluster, name)["configs"])


def settles(cluster: Cluster, name: str, configs: dict[str, str]) -> None:
    """Until broker 1 shows `configs` (a client's call may have gone to another broker,
    which answered once its own metadata held the change)."""
    wait_until(lambda: configs_of(cluster, name) == configs, what=f"{name}'s configs {configs}")


# -- AlterConfigs (legacy) -----------------------------------------------------------------------


def test_legacy_alter_configs_replaces_from_librdkafka_and_kafka_python(cluster: Cluster) -> None:
    """librdkafka's alter_configs replaces a topic's configs (those not given go back to
    their defaults; kafka-python re-sends the dynamic configs it describes first, so with
    it only the named one changes); a broker's too; validate_only changes nothing; a user
    without ALTER_CONFIGS is refused with Kafka's codes and nothing changes."""
    create(cluster, "legacy", partitions=1, configs={"retention.ms": "1000000"})
    admin = rdkafka(cluster)
    wanted = ConfigResource("topic", "legacy", set_config={"max.message.bytes": "2048"})
    for future in admin.alter_configs([wanted]).values():
        future.result(timeout=30)
    settles(cluster, "legacy", {"max.message.bytes": "2048"})  # retention.ms reset
    # validate_only: checked, nothing changed
    bad = ConfigResource("topic", "legacy", set_config={"min.insync.replicas": "0"})
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        admin.alter_configs([bad], validate_only=True)[bad].result(timeout=30)
    good = ConfigResource("topic", "legacy", set_config={"retention.ms": "5"})
    admin.alter_configs([good], validate_only=True)[good].result(timeout=30)
    assert configs_of(cluster, "legacy") == {"max.message.bytes": "2048"}

    from kafka.admin import ConfigResource as KpConfigResource  # noqa: PLC0415
    from kafka.admin import ConfigResourceType  # noqa: PLC0415

    client = kafka_python(cluster)
    try:
        result = client.alter_configs(
            [
                KpConfigResource(
                    ConfigResourceType.TOPIC, "legacy", configs={"retention.ms": "7000"}
                )
            ],
            raise_on_unknown=False,
            incremental=False,
        )
        assert result == {"topic": {"legacy": "OK"}}
        # (kafka-python adds the dynamic configs it described, so nothing else is reset)
        settles(cluster, "legacy", {"max.message.bytes": "2048", "retention.ms": "7000"})
        broker = KpConfigResource(
            ConfigResourceType.BROKER, "2", configs={"replication.throttled.rate": "1048576"}
        )
        result = client.alter_configs([broker], raise_on_unknown=False, incremental=False)
        assert result == {"broker": {"2": "OK"}}
        status, answer = as_admin("GET", cluster.urls[1] + "/v1/brokers/2/configs")
        assert (status, answer["configs"]) == (200, {"replication.throttled.rate": "1048576"})
    finally:
        client.close()
    # librdkafka on the broker: replaced by nothing, the throttle is gone
    reset = ConfigResource("broker", "2", set_config={})
    admin.alter_configs([reset])[reset].result(timeout=30)
    status, answer = as_admin("GET", cluster.urls[1] + "/v1/brokers/2/configs")
    assert (status, answer["configs"]) == (200, {})

    refused = rdkafka(cluster, MALLORY)
    attempt = ConfigResource("topic", "legacy", set_config={"retention.ms": "1"})
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        refused.alter_configs([attempt])[attempt].result(timeout=30)
    attempt = ConfigResource("broker", "1", set_config={"replication.throttled.rate": "1"})
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        refused.alter_configs([attempt])[attempt].result(timeout=30)
    assert configs_of(cluster, "legacy") == {"max.message.bytes": "2048", "retention.ms": "7000"}
    status, answer = as_admin("GET", cluster.urls[1] + "/v1/brokers/1/configs")
    assert (status, answer["configs"]) == (200, {})


# -- DescribeLogDirs -----------------------------------------------------------------------------


def test_describe_log_dirs_reports_each_brokers_logs_and_disk(cluster: Cluster) -> None:
    create(cluster, "dirs", partitions=2, replication_factor=3)
    produce(cluster, "dirs", 0, 50)
    client = kafka_python(cluster)
    try:
        wait_until(
            lambda: all(
                sizes(answer).get(("dirs", 0), 0) > 0 for answer in client.describe_log_dirs()
            ),
            what="partition 0's records on every replica",
        )
        answers = client.describe_log_dirs()
        asked = client.describe_log_dirs({"dirs": [1]}, brokers=[3])
    finally:
        client.close()
    assert sorted(a["broker"] for a in answers) == [1, 2, 3]
    for answer in answers:
        (log_dir,) = answer["log_dirs"]
        assert log_dir["error_code"] == 0
        # the broker's data directory, absolute; the disk it is on
        assert Path(log_dir["log_dir"]).is_absolute() and Path(log_dir["log_dir"]).exists()
        assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
        assert sizes(answer)[("dirs", 1)] == 0
        assert all(not t["name"].startswith("__") for t in log_dir["topics"])
    ((only),) = asked
    assert sizes(only) == {("dirs", 1): 0}

    refused = kafka_python(cluster, MALLORY)
    try:
        assert [a["log_dirs"] for a in refused.describe_log_dirs({"dirs": [0]})] == [[]] * 3
    finally:
        refused.close()
    with raw(cluster, 1, MALLORY) as connection:
        answer = connection.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert (answer["error_code"], answer["results"]) == (CLUSTER_AUTHORIZATION_FAILED, [])


def sizes(answer: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (t["name"], p["partition_index"]): p["partition_size"]
        for log_dir in answer["log_dirs"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }


# -- ElectLeaders --------------------------------------------------------------------------------


def test_preferred_elections_from_librdkafka_and_kafka_python(cluster: Cluster) -> None:
    """A partition whose replica list was reordered (its preferred replica no longer
    leads) is elected by librdkafka; asked again it needs none (kafka-python); a user
    without ALTER on the cluster is refused and nothing moves."""
    create(cluster, "elect", replica_assignment=[[1, 2, 3], [2, 3, 1]])
    as_admin(
        "POST",
        cluster.urls[1] + "/v1/reassignments",
        {"partitions": [{"topic": "elect", "partition": 0, "replicas": [3, 1, 2]}]},
    )
    wait_until(
        lambda: topic(cluster, "elect")["partitions"][0]["replicas"] == [3, 1, 2], what="order"
    )
    assert topic(cluster, "elect")["partitions"][0]["leader"] == 1  # not its preferred

    refused = rdkafka(cluster, MALLORY)
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        refused.elect_leaders(ElectionType.PREFERRED, [RdTopicPartition("elect", 0)]).result(30)
    assert topic(cluster, "elect")["partitions"][0]["leader"] == 1

    admin = rdkafka(cluster)
    wanted = [
        RdTopicPartition("elect", 0),
        RdTopicPartition("elect", 1),
        RdTopicPartition("nope", 0),
    ]
    result = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(timeout=30)
    outcomes = {(tp.topic, tp.partition): error for tp, error in result.items()}
    assert outcomes[("elect", 0)] is None
    assert "ELECTION_NOT_NEEDED" in str(outcomes[("elect", 1)])
    assert "UNKNOWN_TOPIC_OR_PART" in str(outcomes[("nope", 0)])
    wait_until(lambda: topic(cluster, "elect")["partitions"][0]["leader"] == 3, what="elected")

    from kafka.errors import ClusterAuthorizationFailedError  # noqa: PLC0415

    client = kafka_python(cluster)
    try:
        response = client.elect_leaders(0, {"elect": [0]})  # ELECTION_NOT_NEEDED is no error
        ((result_topic),) = response.replica_election_results
        assert [(p.partition_id, p.error_code) for p in result_topic.partition_result] == [(0, 84)]
    finally:
        client.close()
    refused_kp = kafka_python(cluster, MALLORY)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            refused_kp.elect_leaders(0, {"elect": [1]})
    finally:
        refused_kp.close()


# -- reassignments -------------------------------------------------------------------------------


def test_partition_reassignments_from_kafka_python(cluster: Cluster) -> None:
    """A move held back by the replication throttle is listed while it runs, cancelled
    (back to the original replicas), then made; bad items get their own codes; a user
    without ALTER (DESCRIBE) on the cluster is refused."""
    from kafka import TopicPartition  # noqa: PLC0415
    from kafka.admin import ConfigResource as KpConfigResource  # noqa: PLC0415
    from kafka.admin import ConfigResourceType  # noqa: PLC0415
    from kafka.errors import (  # noqa: PLC0415
        ClusterAuthorizationFailedError,
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
        UnknownTopicOrPartitionError,
    )

    create(cluster, "moves", replica_assignment=[[1, 2], [2, 3]])
    produce(cluster, "moves", 0, 300)  # 300 KB to copy
    client = kafka_python(cluster)
    mover = TopicPartition("moves", 0)
    try:
        throttle = KpConfigResource(
            ConfigResourceType.BROKER, "1", configs={"replication.throttled.rate": "10240"}
        )
        client.alter_configs([throttle], raise_on_unknown=False, incremental=False)
        results = client.alter_partition_reassignments(
            {
                mover: [2, 3],
                TopicPartition("moves", 1): None,  # not moving
                TopicPartition("moves", 9): [1],
                TopicPartition("moves-not", 0): [1],
            }
        )
        assert results == {
            mover: None,
            TopicPartition("moves", 1): NoReassignmentInProgressError,
            TopicPartition("moves", 9): UnknownTopicOrPartitionError,
            TopicPartition("moves-not", 0): UnknownTopicOrPartitionError,
        }
        assert client.list_partition_reassignments() == {
            mover: {"replicas": [2, 3, 1], "adding_replicas": [3], "removing_replicas": [1]}
        }
        assert client.list_partition_reassignments({"moves": [1]}) == {}
        assert client.alter_partition_reassignments({mover: None}) == {mover: None}
        # back to the original replicas (in the moving list's order, as Kafka's revert)
        wait_until(
            lambda: topic(cluster, "moves")["partitions"][0]["replicas"] == [2, 1], what="undone"
        )
        assert client.list_partition_reassignments() == {}
        bad = client.alter_partition_reassignments({mover: [2, 99]})
        assert bad == {mover: InvalidReplicationAssignmentError}
        # the throttle lifted (librdkafka's legacy call replaces the broker's configs with
        # none: kafka-python's would send the throttle it describes back), the move is made
        lifted = ConfigResource("broker", "1", set_config={})
        librdkafka = rdkafka(cluster)
        librdkafka.alter_configs([lifted])[lifted].result(timeout=30)
        assert client.alter_partition_reassignments({mover: [2, 3]}) == {mover: None}
        wait_until(
            lambda: topic(cluster, "moves")["partitions"][0]["replicas"] == [2, 3], what="move"
        )
        wait_until(lambda: client.list_partition_reassignments() == {}, what="listed as done")
    finally:
        client.close()

    refused = kafka_python(cluster, MALLORY)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            refused.alter_partition_reassignments({mover: [1, 2]})
        with pytest.raises(ClusterAuthorizationFailedError):
            refused.list_partition_reassignments()
    finally:
        refused.close()
    assert topic(cluster, "moves")["partitions"][0]["replicas"] == [2, 3]


# -- DescribeQuorum ------------------------------------------------------------------------------


def test_describe_metadata_quorum_from_kafka_python(cluster: Cluster) -> None:
    """kafka-python's describe_metadata_quorum() (DescribeQuorum v2, KIP-853: the voters'
    listeners as nodes) as its own codec reads it. A user without DESCRIBE on the cluster
    is refused."""
    from kafka.errors import ClusterAuthorizationFailedError  # noqa: PLC0415

    client = kafka_python(cluster)
    try:
        answer = client.describe_metadata_quorum()
    finally:
        client.close()
    ((metadata),) = answer["topics"]
    ((partition),) = metadata["partitions"]
    assert (metadata["topic_name"], partition["error"]) == ("__cluster_metadata", None)
    status, quorum = as_admin("GET", cluster.quorum.urls[1] + "/v1/quorum")
    assert status == 200, quorum
    assert (partition["leader_id"], partition["leader_epoch"]) == (
        quorum["leader_id"],
        quorum["term"],
    )
    assert partition["high_watermark"] > 0
    voters = {v["replica_id"]: v for v in partition["current_voters"]}
    assert sorted(voters) == [1, 2, 3]
    leader = voters[partition["leader_id"]]
    assert leader["log_end_offset"] == partition["high_watermark"]
    assert leader["last_fetch_timestamp"] > 0  # (v1+: the leader's are now)
    assert all(0 <= v["log_end_offset"] <= partition["high_watermark"] for v in voters.values())
    # the brokers, following the metadata, are its observers
    observers = {o["replica_id"]: o for o in partition["observers"]}
    assert sorted(observers) == [1, 2, 3]
    assert all(0 <= o["log_end_offset"] <= partition["high_watermark"] for o in observers.values())
    # v2: each voter's listener, its HTTP API as the quorum announced it
    nodes = {n["node_id"]: n["listeners"] for n in answer["nodes"]}
    assert sorted(nodes) == [1, 2, 3]
    for node_id, listeners in nodes.items():
        ((listener,),) = [listeners]
        assert f"{listener['host']}:{listener['port']}" in cluster.quorum.urls[node_id]

    refused = kafka_python(cluster, MALLORY)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            refused.describe_metadata_quorum()
    finally:
        refused.close()


# -- an unclean election, last: it stops and restarts brokers ------------------------------------


def test_an_unclean_election_from_librdkafka_brings_an_offline_partition_back(
    cluster: Cluster,
) -> None:
    """Replicas [2, 3]: 3 stops (the ISR is [2]), then 2 (the partition is offline, its ISR
    [2]), then 3 comes back: not in sync, so with unclean election off nothing leads.
    librdkafka's UNCLEAN election makes 3 lead (while the partition had a leader, it needed
    none). The client asking last bootstraps from broker 1 alone: Metadata names the broker
    answering as the controller, and librdkafka keeps sending admin requests to the one it
    was told of, even once that broker is gone."""
    create(cluster, "unclean", replica_assignment=[[2, 3]])
    admin = rdkafka(cluster)
    tp = RdTopicPartition("unclean", 0)
    result = admin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(timeout=30)
    assert "ELECTION_NOT_NEEDED" in str(result[next(iter(result))])
    cluster.processes[3].kill()
    wait_until(lambda: topic(cluster, "unclean")["partitions"][0]["isr"] == [2], what="ISR [2]")
    cluster.processes[2].kill()
    wait_until(lambda: topic(cluster, "unclean")["partitions"][0]["leader"] == -1, what="offline")
    try:
        cluster.start_broker(3)
        time.sleep(1)  # (an election the controllers would make on their own has had its chance)
        assert topic(cluster, "unclean")["partitions"][0]["leader"] == -1
        survivor = AdminClient(
            {**rdkafka_config(cluster), "bootstrap.servers": cluster.kafka_addresses[1]}
        )
        result = survivor.elect_leaders(ElectionType.UNCLEAN, [tp]).result(timeout=30)
        assert [error for error in result.values()] == [None]
        wait_until(lambda: led_by(cluster, "unclean") == (3, [3]), what="3 leading alone")
    finally:
        cluster.start_broker(2)


def led_by(cluster: Cluster, name: str) -> tuple[int, list[int]]:
    """Partition 0's leader and ISR, as broker 1 sees them."""
    partition = topic(cluster, name)["partitions"][0]
    return partition["leader"], partition["isr"]
