"""Kafka's group and producer admin APIs (OffsetDelete, ConsumerGroupDescribe, DescribeProducers;
kraftlite/kafka/group_apis.py) from real clients against a real cluster (issue 25):
librdkafka (its DeleteConsumerGroupOffsets through ctypes, as confluent-kafka 2.16 does not
wrap it; `describe_consumer_groups`, which asks ConsumerGroupDescribe first), kafka-python's
KafkaAdminClient (`delete_group_offsets`, `describe_producers`), raw requests through
kraftlite's own codec, the HTTP edge and the CLI. A deletion survives the kill of the
group's coordinator.
"""

from __future__ import annotations

import ctypes
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kraftlite.cli import main
from kraftlite.protocol.kafka.messages import ApiKey
from tests.harness.kafka_wire import call
from tests.harness.observe import described_on, wait_until
from tests.harness.processes import FAST_SESSIONS, Cluster, http, http_retry

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # kafka-python 3.0.12 reads its schemas with a deprecated importlib call
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

GROUP_SUBSCRIBED_TO_TOPIC = 86
GROUP_ID_NOT_FOUND = 69
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("group-admin"), controller_config=FAST_SESSIONS, kafka=True
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def created(cluster: Cluster, topic: str, partitions: int) -> None:
    """`topic` made (led as broker 1 sees it) and known to every broker: a group's
    coordinator, whichever broker it is, checks the partitions committed or deleted against
    its own metadata (groups/offsets.py rule 3), which follows the controllers' a moment
    after the creation is answered."""
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    for broker in cluster.urls:
        wait_until(
            lambda b=broker: described_on(cluster, b, topic),
            timeout_s=15,
            what=f"{topic} known to broker {broker}",
        )


def commit_http(cluster: Cluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Offsets committed for a group with no members (an admin tool's commit)."""
    entries = [{"topic": topic, "partition": p, "offset": o} for p, o in offsets.items()]
    status, answer = http_retry(
        "POST", cluster.urls[1] + f"/v1/groups/{group}/offsets", {"offsets": entries}
    )
    assert status == 204, answer


def committed_http(cluster: Cluster, group: str, broker: int = 1) -> dict[tuple[str, int], int]:
    status, answer = http("GET", cluster.urls[broker] + f"/v1/groups/{group}/offsets")
    assert status == 200, answer
    return {(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]}


def coordinator_of(cluster: Cluster, group: str, via: int = 1) -> int:
    """The group's coordinator, as broker `via` names it (FindCoordinator v4)."""
    found = call(
        cluster.kafka_addresses[via],
        ApiKey.FIND_COORDINATOR,
        4,
        {"key_type": 0, "coordinator_keys": [group]},
    )
    (coordinator,) = found["coordinators"]
    assert coordinator["error_code"] == 0, coordinator
    return int(coordinator["node_id"])


def live_consumer(cluster: Cluster, group: str, topic: str, **settings: Any) -> Consumer:
    """A consumer in `group` that holds an assignment of `topic`."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **settings,
        }
    )
    consumer.subscribe([topic])
    wait_until(
        lambda: consumer.poll(0.1) is None and consumer.assignment(),
        timeout_s=60,
        what=f"an assignment in {group}",
    )
    return consumer


# -- librdkafka's DeleteConsumerGroupOffsets, through ctypes ---------------------------------


class _TopicPartition(ctypes.Structure):
    _fields_ = [
        ("topic", ctypes.c_char_p),
        ("partition", ctypes.c_int32),
        ("offset", ctypes.c_int64),
        ("metadata", ctypes.c_void_p),
        ("metadata_size", ctypes.c_size_t),
        ("opaque", ctypes.c_void_p),
        ("err", ctypes.c_int),
        ("_private", ctypes.c_void_p),
    ]


class _TopicPartitionList(ctypes.Structure):
    _fields_ = [
        ("cnt", ctypes.c_int),
        ("size", ctypes.c_int),
        ("elems", ctypes.POINTER(_TopicPartition)),
    ]


def _librdkafka() -> ctypes.CDLL:
    """The librdkafka confluent-kafka ships (the one its AdminClient runs)."""
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    (path,) = libs.glob("librdkafka-*.so*")
    lib = ctypes.CDLL(str(path))
    pointer, text = ctypes.c_void_p, ctypes.c_char_p
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "rd_kafka_conf_new": (pointer, []),
        "rd_kafka_conf_set": (ctypes.c_int, [pointer, text, text, text, ctypes.c_size_t]),
        "rd_kafka_new": (pointer, [ctypes.c_int, pointer, text, ctypes.c_size_t]),
        "rd_kafka_queue_new": (pointer, [pointer]),
        "rd_kafka_topic_partition_list_new": (pointer, [ctypes.c_int]),
        "rd_kafka_topic_partition_list_add": (pointer, [pointer, text, ctypes.c_int32]),
        "rd_kafka_topic_partition_list_destroy": (None, [pointer]),
        "rd_kafka_DeleteConsumerGroupOffsets_new": (pointer, [text, pointer]),
        "rd_kafka_DeleteConsumerGroupOffsets_destroy": (None, [pointer]),
        "rd_kafka_DeleteConsumerGroupOffsets": (
            None,
            [pointer, ctypes.POINTER(pointer), ctypes.c_size_t, pointer, pointer],
        ),
        "rd_kafka_queue_poll": (pointer, [pointer, ctypes.c_int]),
        "rd_kafka_event_error": (ctypes.c_int, [pointer]),
        "rd_kafka_event_DeleteConsumerGroupOffsets_result": (pointer, [pointer]),
        "rd_kafka_DeleteConsumerGroupOffsets_result_groups": (
            ctypes.POINTER(pointer),
            [pointer, ctypes.POINTER(ctypes.c_size_t)],
        ),
        "rd_kafka_group_result_error": (pointer, [pointer]),
        "rd_kafka_error_code": (ctypes.c_int, [pointer]),
        "rd_kafka_group_result_partitions": (ctypes.POINTER(_TopicPartitionList), [pointer]),
        "rd_kafka_event_destroy": (None, [pointer]),
        "rd_kafka_queue_destroy": (None, [pointer]),
        "rd_kafka_destroy": (None, [pointer]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


def librdkafka_delete_offsets(
    bootstrap: str, group: str, partitions: list[tuple[str, int]]
) -> tuple[int, dict[tuple[str, int], int]]:
    """rd_kafka_DeleteConsumerGroupOffsets (what librdkafka-based tools call): (the
    request's error code, each partition's error code)."""
    lib = _librdkafka()
    errors = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    assert lib.rd_kafka_conf_set(conf, b"bootstrap.servers", bootstrap.encode(), errors, 512) == 0
    client = lib.rd_kafka_new(0, conf, errors, 512)  # a producer handle: admin calls need one
    assert client, errors.value
    queue = lib.rd_kafka_queue_new(client)
    wanted = lib.rd_kafka_topic_partition_list_new(len(partitions))
    for topic, partition in partitions:
        lib.rd_kafka_topic_partition_list_add(wanted, topic.encode(), partition)
    request = lib.rd_kafka_DeleteConsumerGroupOffsets_new(group.encode(), wanted)
    event = None
    try:
        requests = (ctypes.c_void_p * 1)(request)
        lib.rd_kafka_DeleteConsumerGroupOffsets(client, requests, 1, None, queue)
        event = lib.rd_kafka_queue_poll(queue, 30_000)
        assert event, "no DeleteConsumerGroupOffsets result within 30 s"
        code = lib.rd_kafka_event_error(event)
        if code:
            return code, {}
        result = lib.rd_kafka_event_DeleteConsumerGroupOffsets_result(event)
        count = ctypes.c_size_t()
        groups = lib.rd_kafka_DeleteConsumerGroupOffsets_result_groups(result, ctypes.byref(count))
        assert count.value == 1
        error = lib.rd_kafka_group_result_error(groups[0])
        if error:
            return lib.rd_kafka_error_code(error), {}
        answered = lib.rd_kafka_group_result_partitions(groups[0]).contents
        return 0, {
            (answered.elems[i].topic.decode(), answered.elems[i].partition): answered.elems[i].err
            for i in range(answered.cnt)
        }
    finally:
        if event:
            lib.rd_kafka_event_destroy(event)
        lib.rd_kafka_DeleteConsumerGroupOffsets_destroy(request)
        lib.rd_kafka_topic_partition_list_destroy(wanted)
        lib.rd_kafka_queue_destroy(queue)
        lib.rd_kafka_destroy(client)


# -- OffsetDelete ------------------------------------------------------------------------------


def test_librdkafka_deletes_offsets_and_keeps_those_a_live_group_consumes(
    cluster: Cluster,
) -> None:
    """librdkafka (classic consumers): a live member's subscribed topic keeps its offsets
    (GROUP_SUBSCRIBED_TO_TOPIC: the coordinator read its JoinGroup subscription), the
    other topic's go; unknown groups and partitions answer Kafka's codes."""
    consumed, idle = unique("consumed"), unique("idle")
    created(cluster, consumed, partitions=2)
    created(cluster, idle, partitions=2)
    group = unique("g-rdk-del")
    commit_http(cluster, group, consumed, {0: 3, 1: 4})
    commit_http(cluster, group, idle, {0: 5, 1: 6})
    code, answered = librdkafka_delete_offsets(cluster.bootstrap, group, [(idle, 0)])
    assert (code, answered) == (0, {(idle, 0): 0})
    assert committed_http(cluster, group) == {(consumed, 0): 3, (consumed, 1): 4, (idle, 1): 6}
    consumer = live_consumer(cluster, group, consumed)
    try:
        code, answered = librdkafka_delete_offsets(
            cluster.bootstrap, group, [(consumed, 0), (idle, 1), (unique("nope"), 0)]
        )
        assert code == 0
        assert sorted(answered.values()) == [
            0,
            UNKNOWN_TOPIC_OR_PARTITION,
            GROUP_SUBSCRIBED_TO_TOPIC,
        ]
        assert answered[(consumed, 0)] == GROUP_SUBSCRIBED_TO_TOPIC
        assert answered[(idle, 1)] == 0
    finally:
        consumer.close()
    assert committed_http(cluster, group) == {(consumed, 0): 3, (consumed, 1): 4}
    code, _ = librdkafka_delete_offsets(cluster.bootstrap, unique("nobody"), [(idle, 0)])
    assert code == GROUP_ID_NOT_FOUND


def test_kafka_python_deletes_offsets_of_an_emptied_kip848_group(cluster: Cluster) -> None:
    """kafka-python's delete_group_offsets, on a group whose librdkafka KIP-848 member
    subscribes to the topic (GroupSubscribedToTopicError) and then leaves."""
    from kafka import TopicPartition as KafkaTopicPartition  # noqa: PLC0415 - test-only client
    from kafka import errors as kafka_errors  # noqa: PLC0415
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415

    topic, group = unique("k848-del"), unique("g-848-del")
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    consumer = live_consumer(cluster, group, topic, **{"group.protocol": "consumer"})
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    closed = False
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        both = [KafkaTopicPartition(topic, 0), KafkaTopicPartition(topic, 1)]
        kept = admin.delete_group_offsets(group, both)
        assert set(kept.values()) == {kafka_errors.GroupSubscribedToTopicError}
        assert committed_http(cluster, group) == {(topic, 0): 7}
        consumer.close()
        closed = True
        deleted = admin.delete_group_offsets(group, both)
        assert set(deleted.values()) == {kafka_errors.NoError}
        assert committed_http(cluster, group) == {}
        with pytest.raises(kafka_errors.GroupIdNotFoundError):
            admin.delete_group_offsets(group, both)  # no offsets, no members: no group
    finally:
        admin.close()
        if not closed:
            consumer.close()


def test_the_http_api_and_the_cli_delete_offsets(cluster: Cluster) -> None:
    topic, group = unique("cli-del"), unique("g-cli")
    created(cluster, topic, partitions=3)
    commit_http(cluster, group, topic, {0: 1, 1: 2, 2: 3})
    body = {"partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 9}]}
    status, answer = http("DELETE", cluster.urls[2] + f"/v1/groups/{group}/offsets", body)
    assert status == 200, answer
    assert [p.get("error_code") for p in answer["partitions"]] == [
        None,
        "UNKNOWN_TOPIC_OR_PARTITION",
    ]
    runner = CliRunner()
    bootstrap = ["--bootstrap", cluster.urls[3], "--output", "json"]
    done = runner.invoke(main, ["groups", "delete-offsets", group, f"{topic}:1", *bootstrap])
    assert done.exit_code == 0, done.output
    assert committed_http(cluster, group) == {(topic, 2): 3}
    # a live member subscribed to the topic keeps it: exit code 1, the code on stderr
    joined = http("POST", cluster.urls[1] + f"/v1/groups/{group}/members", {"topics": [topic]})
    assert joined[0] == 200, joined
    kept = runner.invoke(main, ["groups", "delete-offsets", group, topic, *bootstrap])
    assert kept.exit_code == 1
    assert "GROUP_SUBSCRIBED_TO_TOPIC" in kept.output
    assert committed_http(cluster, group) == {(topic, 2): 3}
    gone = runner.invoke(main, ["groups", "delete-offsets", unique("nobody"), topic, *bootstrap])
    assert gone.exit_code == 1 and "GROUP_ID_NOT_FOUND" in gone.output
    bad = runner.invoke(main, ["groups", "delete-offsets", group, f"{topic}:x", *bootstrap])
    assert bad.exit_code == 2


# -- ConsumerGroupDescribe -----------------------------------------------------------------


def test_librdkafka_describes_kip848_and_classic_groups(cluster: Cluster) -> None:
    """librdkafka asks ConsumerGroupDescribe first: a KIP-848 group is answered by it (type
    CONSUMER, kraftlite's uniform assignor, each member's assignment and target), a classic
    group is GROUP_ID_NOT_FOUND there and librdkafka asks DescribeGroups (type CLASSIC)."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType  # noqa: PLC0415
    from confluent_kafka.admin import AclOperation  # noqa: PLC0415

    topic = unique("describe")
    cluster.create_topic(topic, partitions=4, replication_factor=3)
    modern, classic = unique("g-848"), unique("g-classic")
    members = [
        Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": modern,
                "group.protocol": "consumer",
                "enable.auto.commit": False,
            }
        )
        for _ in range(2)
    ]
    for consumer in members:
        consumer.subscribe([topic])
    old = live_consumer(cluster, classic, topic)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    try:

        def settled() -> Any:
            for consumer in members:
                consumer.poll(0.1)
            found = admin.describe_consumer_groups([modern])[modern].result(30)
            owned = [len(m.assignment.topic_partitions) for m in found.members]
            return found if len(owned) == 2 and sorted(owned) == [2, 2] else None

        described = wait_until(settled, timeout_s=90, what="two members with two each")
        assert described.type == ConsumerGroupType.CONSUMER
        assert described.partition_assignor == "uniform"
        assert described.state in (ConsumerGroupState.STABLE, ConsumerGroupState.UNKNOWN)
        assert described.coordinator.id == coordinator_of(cluster, modern)
        assert sorted(
            (tp.topic, tp.partition)
            for m in described.members
            for tp in m.assignment.topic_partitions
        ) == [(topic, p) for p in range(4)]
        for member in described.members:
            assert member.target_assignment is not None
            assert {
                (tp.topic, tp.partition) for tp in member.target_assignment.topic_partitions
            } == {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions}
        with_operations = admin.describe_consumer_groups(
            [modern], include_authorized_operations=True
        )[modern].result(30)
        assert set(with_operations.authorized_operations) == {
            AclOperation.READ,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
        }
        legacy = admin.describe_consumer_groups([classic])[classic].result(30)
        assert legacy.type == ConsumerGroupType.CLASSIC
        assert legacy.state == ConsumerGroupState.STABLE
        assert len(legacy.members) == 1
        # the same KIP-848 group through kraftlite's own codec: its epochs, its members
        raw = call(
            cluster.kafka_addresses[coordinator_of(cluster, modern)],
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": [modern], "include_authorized_operations": False},
        )
        (group,) = raw["groups"]
        assert (group["error_code"], len(group["members"])) == (0, 2)
        assert group["group_epoch"] == max(m["member_epoch"] for m in group["members"]) > 0
        nobody = unique("nobody")  # asked of its own coordinator (another answers NOT_COORDINATOR)
        raw = call(
            cluster.kafka_addresses[coordinator_of(cluster, nobody)],
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": [nobody], "include_authorized_operations": False},
        )
        assert raw["groups"][0]["error_code"] == GROUP_ID_NOT_FOUND
    finally:
        for consumer in [*members, old]:
            consumer.close()


# -- DescribeProducers ---------------------------------------------------------------------


def test_kafka_python_describes_a_partitions_idempotent_producers(cluster: Cluster) -> None:
    """librdkafka's idempotent producer writes; kafka-python's describe_producers (to the
    leader) lists its producer id, epoch and last sequence; a broker that does not lead the
    partition answers NOT_LEADER_OR_FOLLOWER (raw request, kraftlite's codec)."""
    from kafka import TopicPartition as KafkaTopicPartition  # noqa: PLC0415 - test-only client
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415

    topic = unique("producers")
    leaders = cluster.create_topic(topic, partitions=1, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(5):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
        producer.flush(30)  # one batch each: sequences 0..4
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        described = admin.describe_producers([KafkaTopicPartition(topic, 0)])
    finally:
        admin.close()
    (state,) = described[KafkaTopicPartition(topic, 0)].active_producers
    assert (state.producer_epoch, state.last_sequence) == (0, 4)
    assert (state.coordinator_epoch, state.current_transaction_start_offset) == (-1, -1)
    assert state.producer_id >= 0
    assert abs(state.last_timestamp - time.time() * 1000) < 120_000
    leader = leaders[0]
    follower = next(b for b in cluster.kafka_addresses if b != leader)
    wanted = {"topics": [{"name": topic, "partition_indexes": [0]}]}
    (answer,) = call(cluster.kafka_addresses[follower], ApiKey.DESCRIBE_PRODUCERS, 0, wanted)[
        "topics"
    ]
    assert answer["partitions"][0]["error_code"] == NOT_LEADER_OR_FOLLOWER
    (answer,) = call(cluster.kafka_addresses[leader], ApiKey.DESCRIBE_PRODUCERS, 0, wanted)[
        "topics"
    ]
    assert [p["producer_id"] for p in answer["partitions"][0]["active_producers"]] == [
        state.producer_id
    ]


# -- last: a coordinator killed (its offsets partitions' new leaders freeze assignments) ---


def test_a_deletion_survives_the_kill_of_the_groups_coordinator(cluster: Cluster) -> None:
    """The deletion is tombstones acknowledged by the offsets partition's ISR: the broker
    that leads it next replays them and still answers the offsets deleted."""
    topic, group = unique("durable"), unique("g-durable")
    created(cluster, topic, partitions=3)
    commit_http(cluster, group, topic, {0: 10, 1: 11, 2: 12})
    code, answered = librdkafka_delete_offsets(cluster.bootstrap, group, [(topic, 0), (topic, 2)])
    assert (code, answered) == (0, {(topic, 0): 0, (topic, 2): 0})
    coordinator = coordinator_of(cluster, group)
    cluster.processes[coordinator].kill()
    try:
        survivor = next(b for b in cluster.urls if b != coordinator)

        def moved() -> bool:
            try:
                return coordinator_of(cluster, group, via=survivor) != coordinator
            except (AssertionError, OSError):
                return False

        wait_until(moved, timeout_s=60, what="a new coordinator")

        def offsets_now() -> dict[tuple[str, int], int] | None:
            status, answer = http("GET", cluster.urls[survivor] + f"/v1/groups/{group}/offsets")
            if status != 200:
                return None
            return {(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]}

        assert wait_until(offsets_now, timeout_s=60, what="the offsets") == {(topic, 1): 11}
        # and over Kafka, from the new coordinator
        fetched = call(
            cluster.kafka_addresses[coordinator_of(cluster, group, via=survivor)],
            ApiKey.OFFSET_FETCH,
            8,
            {"groups": [{"group_id": group, "topics": None}], "require_stable": False},
        )
        assert [
            (p["partition_index"], p["committed_offset"])
            for t in fetched["groups"][0]["topics"]
            for p in t["partitions"]
        ] == [(1, 11)]
    finally:
        cluster.start_broker(coordinator)
