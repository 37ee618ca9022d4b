"""DeleteRecords on a real cluster (issue 25): librdkafka's and kafka-python's admin clients,
the HTTP API and the CLI move a partition's log start; once it is acknowledged no replica
holds a log start below it (each broker's own `kraftlite_log_start_offset`), and after
the leader is killed with SIGKILL the new leader serves nothing below it either."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.harness.observe import wait_for_brokers_metadata
from tests.harness.processes import FAST_SESSIONS, Cluster, http, http_retry

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # kafka-python 3.0.12 reads its schemas with a deprecated importlib call
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("delete-records"), controller_config=FAST_SESSIONS, kafka=True
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def create_topic(cluster: Cluster, name: str, partitions: int) -> None:
    status, answer = http_retry(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": name, "partitions": partitions, "replication_factor": 3},
    )
    assert status == 201, answer
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status, described = http("GET", cluster.urls[2] + f"/v1/topics/{name}")
        if status == 200 and all(p["high_watermark"] is not None for p in described["partitions"]):
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} has no leaders")


def produce(cluster: Cluster, topic: str, partition: int, count: int) -> None:
    for start in range(0, count, 25):  # several batches: the log start falls inside one
        records = [{"value": f"r{i}"} for i in range(start, min(count, start + 25))]
        status, answer = http_retry(
            "POST",
            cluster.urls[1] + f"/v1/topics/{topic}/partitions/{partition}/records",
            {"records": records},
        )
        assert status == 200, answer


def log_starts(cluster: Cluster, topic: str, partition: int) -> dict[int, int]:
    """Each live broker's own replica's log start (its metrics)."""
    pattern = re.compile(
        rf'^kraftlite_log_start_offset\{{partition="{partition}",topic="{re.escape(topic)}"\}} '
        r"([0-9.e+]+)$",
        re.MULTILINE,
    )
    starts = {}
    for broker_id, url in cluster.urls.items():
        if not cluster.processes[broker_id].alive:
            continue
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        found = pattern.search(text)
        assert found is not None, f"broker {broker_id} has no replica of {topic}-{partition}"
        starts[broker_id] = int(float(found.group(1)))
    return starts


def leader_of(cluster: Cluster, topic: str, partition: int, via: int) -> int | None:
    status, described = http("GET", cluster.urls[via] + f"/v1/topics/{topic}")
    if status != 200:
        return None
    leader = described["partitions"][partition]["leader"]
    return int(leader) if leader is not None and leader >= 0 else None


def earliest(cluster: Cluster, topic: str, partition: int, via: int) -> int:
    status, answer = http_retry(
        "GET",
        cluster.urls[via] + f"/v1/topics/{topic}/partitions/{partition}/offsets?at=earliest",
    )
    assert status == 200, answer
    return int(answer["offset"])


def test_both_admin_clients_delete_records_on_every_replica(cluster: Cluster) -> None:
    create_topic(cluster, "pruned", partitions=3)
    for partition in range(3):
        produce(cluster, "pruned", partition, 100)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.delete_records(
        [TopicPartition("pruned", 0, 40), TopicPartition("pruned", 2, 250)]
    )
    deleted = futures[TopicPartition("pruned", 0, 40)].result(30)
    assert deleted.low_watermark == 40
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE"):  # above the high watermark
        futures[TopicPartition("pruned", 2, 250)].result(30)
    # acknowledged: every replica's log starts there, not only the leader's
    assert set(log_starts(cluster, "pruned", 0).values()) == {40}
    assert set(log_starts(cluster, "pruned", 2).values()) == {0}

    from kafka import KafkaAdminClient  # noqa: PLC0415 - warns on import (pytestmark)
    from kafka import TopicPartition as KafkaPythonPartition  # noqa: PLC0415

    kafka_python = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        answer = kafka_python.delete_records({KafkaPythonPartition("pruned", 1): 63})
    finally:
        kafka_python.close()
    assert answer[KafkaPythonPartition("pruned", 1)]["low_watermark"] == 63
    assert set(log_starts(cluster, "pruned", 1).values()) == {63}

    # consumers start at the new log start, and below it is out of range, on both edges
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "pruned-readers",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("pruned", 0), timeout=10)
        assert (low, high) == (40, 100)
        consumer.assign([TopicPartition("pruned", 0)])
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                first = message
        assert first is not None and (first.offset(), first.value()) == (40, b"r40")
    finally:
        consumer.close()
    status, refused = http(
        "GET", cluster.urls[2] + "/v1/topics/pruned/partitions/0/records?offset=39"
    )
    assert (status, refused["error_code"]) == (416, "OFFSET_OUT_OF_RANGE"), refused
    status, fetched = http(
        "GET", cluster.urls[2] + "/v1/topics/pruned/partitions/0/records?offset=40"
    )
    assert status == 200 and fetched["records"][0]["offset"] == 40


def test_the_http_api_and_the_cli_delete_records(cluster: Cluster) -> None:
    create_topic(cluster, "trimmed", partitions=2)
    produce(cluster, "trimmed", 0, 30)
    produce(cluster, "trimmed", 1, 30)
    # any broker: the request is relayed to the leader
    for via in cluster.urls:
        status, answer = http(
            "POST",
            cluster.urls[via] + "/v1/topics/trimmed/partitions/0/delete-records",
            {"offset": 10 + via},
        )
        assert status == 200, answer
        assert answer == {"topic": "trimmed", "partition": 0, "low_watermark": 10 + via}
    status, bad = http(
        "POST", cluster.urls[1] + "/v1/topics/trimmed/partitions/0/delete-records", {"offset": "1"}
    )
    assert (status, bad["error_code"]) == (400, "INVALID_REQUEST")
    status, bad = http(
        "POST", cluster.urls[1] + "/v1/topics/trimmed/partitions/0/delete-records", {"offset": 31}
    )
    assert (status, bad["error_code"]) == (416, "OFFSET_OUT_OF_RANGE")
    assert earliest(cluster, "trimmed", 0, via=1) == 13
    result = subprocess.run(
        [
            sys.executable, "-m", "kraftlite", "topics", "delete-records", "trimmed",
            "--offset", "-1", "--bootstrap", cluster.urls[3], "--output", "json",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"partition": 0, "low_watermark": 30},
        {"partition": 1, "low_watermark": 30},
    ]


def test_no_replica_serves_below_the_new_start_after_the_leader_is_killed(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "doomed", partitions=1)
    produce(cluster, "doomed", 0, 200)
    leader = leader_of(cluster, "doomed", 0, via=1)
    assert leader is not None
    status, answer = http(
        "POST",
        cluster.urls[leader] + "/v1/topics/doomed/partitions/0/delete-records",
        {"offset": 137},
    )
    assert status == 200, answer
    cluster.processes[leader].kill()  # at once, as the acknowledgement arrives
    survivors = [b for b in cluster.urls if b != leader]
    deadline = time.monotonic() + 30
    while (new_leader := leader_of(cluster, "doomed", 0, via=survivors[0])) in (None, leader):
        assert time.monotonic() < deadline, "no new leader"
        time.sleep(0.05)
    assert new_leader is not None
    wait_for_brokers_metadata(cluster)  # the other survivor knows it too
    assert earliest(cluster, "doomed", 0, via=survivors[1]) == 137
    status, refused = http(
        "GET", cluster.urls[new_leader] + "/v1/topics/doomed/partitions/0/records?offset=136"
    )
    assert (status, refused["error_code"]) == (416, "OFFSET_OUT_OF_RANGE"), refused
    # the killed replica comes back with its log start where it was acknowledged
    cluster.start_broker(leader)
    cluster.wait_ready([leader])
    deadline = time.monotonic() + 30
    while True:
        starts = log_starts(cluster, "doomed", 0)
        if len(starts) == 3:
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert min(starts.values()) >= 137, starts


def test_a_replica_that_has_not_deleted_holds_the_acknowledgement(cluster: Cluster) -> None:
    """A follower that does not fetch (SIGSTOP) could still lead while it is in the ISR:
    DeleteRecords is not acknowledged until it is fenced and out of the ISR."""
    create_topic(cluster, "held", partitions=1)
    produce(cluster, "held", 0, 100)
    leader = leader_of(cluster, "held", 0, via=1)
    assert leader is not None
    follower = next(b for b in cluster.urls if b != leader)
    url = cluster.urls[leader] + "/v1/topics/held/partitions/0/delete-records"
    cluster.processes[follower].pause()
    try:
        status, answer = http("POST", url + "?timeout_ms=1000", {"offset": 50})
        assert answer["error_code"] == "REQUEST_TIMED_OUT", (status, answer)
        status, answer = http("POST", url + "?timeout_ms=30000", {"offset": 50}, timeout=40)
        assert status == 200, answer  # once the controllers fenced it, and the ISR shrank
        status, described = http("GET", cluster.urls[leader] + "/v1/topics/held")
        assert follower not in described["partitions"][0]["isr"]
    finally:
        cluster.processes[follower].resume()
    deadline = time.monotonic() + 30
    while (
        follower
        not in http("GET", cluster.urls[leader] + "/v1/topics/held")[1]["partitions"][0]["isr"]
    ):
        assert time.monotonic() < deadline, "the follower never rejoined"
        time.sleep(0.2)
    assert log_starts(cluster, "held", 0)[follower] == 50


def test_a_replica_added_after_a_deletion_inside_a_batch_catches_up(cluster: Cluster) -> None:
    """A new replica starts at the leader's log start, inside the batch holding it: it takes
    that batch whole and joins the ISR (the move completes)."""
    status, answer = http_retry(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": "moved", "partitions": 1, "replica_assignment": [[1, 2]]},
    )
    assert status == 201, answer
    produce(cluster, "moved", 0, 100)  # batches of 25
    status, answer = http(
        "POST", cluster.urls[1] + "/v1/topics/moved/partitions/0/delete-records", {"offset": 60}
    )
    assert status == 200, answer
    status, answer = http(
        "POST",
        cluster.urls[1] + "/v1/reassignments",
        {"partitions": [{"topic": "moved", "partition": 0, "replicas": [1, 2, 3]}]},
    )
    assert status == 202, answer
    deadline = time.monotonic() + 30
    while True:
        status, described = http("GET", cluster.urls[3] + "/v1/topics/moved")
        partition = described["partitions"][0] if status == 200 else {}
        if sorted(partition.get("isr", [])) == [1, 2, 3] and not partition.get("adding_replicas"):
            break
        assert time.monotonic() < deadline, f"the new replica never caught up: {partition}"
        time.sleep(0.2)
    assert log_starts(cluster, "moved", 0) == {1: 60, 2: 60, 3: 60}
