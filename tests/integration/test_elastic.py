"""The elastic cluster on real processes: partitions move between brokers (KIP-455
reassignment) under acks=all load, and the checker finds nothing acknowledged lost, offsets
dense and in-sync logs identical (tests/harness/checker.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftlite.storage.log import LogStorage, StorageConfig
from tests.harness.checker import assert_no_violations
from tests.harness.observe import (
    Producer,
    check_partition,
    describe,
    error_code,
    partition_0,
    wait_until,
)
from tests.harness.processes import FAST_SESSIONS, Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(180)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Four brokers, three started: the fourth joins during the test."""
    running = Cluster(
        tmp_path,
        brokers=4,
        broker_config={"replica.lag.time.max.ms": 2000},
        controller_config=FAST_SESSIONS,
    )
    running.start([1, 2, 3])
    try:
        yield running
    finally:
        running.close()


def create_topic(cluster: Cluster, name: str, **configs: Any) -> dict[str, Any]:
    status, body = http(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": name, "partitions": 1, "replication_factor": 3, "configs": configs},
    )
    assert status == 201, body
    wait_until(lambda: partition_0(cluster, name)["high_watermark"] is not None, what="a leader")
    return partition_0(cluster, name)


def reassign(cluster: Cluster, topic: str, replicas: list[int] | None, via: int = 2) -> Any:
    status, body = http(
        "POST",
        cluster.urls[via] + "/v1/reassignments",
        {"partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]},
    )
    assert status == 202, body
    return body


def moves(cluster: Cluster, via: int = 1) -> list[dict[str, Any]]:
    status, body = http("GET", cluster.urls[via] + "/v1/reassignments")
    assert status == 200, body
    return body["reassignments"]  # type: ignore[no-any-return]


def settled(cluster: Cluster, topic: str, target: list[int]) -> dict[str, Any] | None:
    """Partition 0 once every serving broker sees the move complete on `target`."""
    views = [
        partition_0(cluster, topic, among=[b]) for b, p in cluster.processes.items() if p.serving
    ]
    done = all(
        v["replicas"] == target and not v["adding_replicas"] and sorted(v["isr"]) == sorted(target)
        for v in views
    )
    return views[0] if done else None


def test_a_partition_moves_to_a_new_broker_under_load_and_loses_nothing(cluster: Cluster) -> None:
    """The leader's replica moves to a broker that joined after the topic was created:
    broker 4 catches up as a follower, joins the ISR, then the final list commits with
    leadership moved off the leaving broker, which deletes its log."""
    before = create_topic(cluster, "moving", **{"min.insync.replicas": 2})
    leaving = before["leader"]
    target = [4, *(b for b in before["replicas"] if b != leaving)]
    producer = Producer(cluster, "moving")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 200, what="acks before the move")
    cluster.start_broker(4)
    answer = reassign(cluster, "moving", target)
    [started] = answer["reassignments"]
    assert started["adding"] == [4] and started["removing"] == [leaving], started
    after = wait_until(lambda: settled(cluster, "moving", target), what="the move to complete")
    assert after["leader"] != leaving and after["leader"] in target
    assert moves(cluster) == []
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 200, what="acks after the move")
    producer.stop()
    state = describe(cluster, "moving")
    assert state["partitions"][0]["replicas"] == target
    cluster.processes[leaving].terminate()
    storage = LogStorage(StorageConfig(path=cluster.root / f"broker-{leaving}"))
    try:
        assert f"{state['topic_id']}-0" not in storage.partition_names(), "its copy is deleted"
    finally:
        storage.close()
    assert_no_violations(check_partition(cluster, "moving", producer.acked))


def test_a_move_onto_a_dead_broker_stalls_visibly_and_can_be_cancelled(cluster: Cluster) -> None:
    before = create_topic(cluster, "stalled", **{"min.insync.replicas": 2})
    cluster.start_broker(4)
    producer = Producer(cluster, "stalled")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 100, what="acks before the move")
    cluster.processes[4].kill()  # dies before the move starts: the controller still lists it
    replicas = before["replicas"]
    target = [4, *replicas[1:]]
    status, body = http(
        "POST",
        cluster.urls[1] + "/v1/reassignments",
        {"partitions": [{"topic": "stalled", "partition": 0, "replicas": target}]},
    )
    if status == 400:  # already fenced: no new replica on a dead broker
        assert error_code(body) == "INVALID_REPLICA_ASSIGNMENT", body
    else:
        assert status == 202, body
        wait_until(lambda: moves(cluster), what="the move to be listed")
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= acked + 100, what="acks while it stalls")
        [stuck] = moves(cluster)
        assert stuck["adding"] == [4], stuck
        reassign(cluster, "stalled", None, via=3)
        wait_until(lambda: not moves(cluster), what="the cancel")
    wait_until(
        lambda: sorted(partition_0(cluster, "stalled")["replicas"]) == sorted(replicas),
        what="the original replicas",
    )
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 100, what="acks after the cancel")
    producer.stop()
    assert_no_violations(check_partition(cluster, "stalled", producer.acked))


def test_bad_reassignment_requests_change_nothing(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "checked")
    url = cluster.urls[1] + "/v1/reassignments"
    for body, status, code in [
        (
            {"partitions": [{"topic": "checked", "partition": 0, "replicas": [1, 1]}]},
            400,
            "INVALID_REPLICA_ASSIGNMENT",
        ),
        (
            {"partitions": [{"topic": "checked", "partition": 0, "replicas": [9]}]},
            400,
            "INVALID_REPLICA_ASSIGNMENT",
        ),
        (
            {"partitions": [{"topic": "checked", "partition": 0, "replicas": []}]},
            400,
            "INVALID_REPLICA_ASSIGNMENT",
        ),
        (
            {"partitions": [{"topic": "nope", "partition": 0, "replicas": [1]}]},
            404,
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        (
            {"partitions": [{"topic": "checked", "partition": 5, "replicas": [1]}]},
            404,
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        ({"partitions": "all"}, 400, "INVALID_REQUEST"),
    ]:
        answer_status, answer = http("POST", url, body)
        assert (answer_status, error_code(answer)) == (status, code), (body, answer)
    assert partition_0(cluster, "checked")["partition_epoch"] == 0, "nothing changed"
    status, body = http(
        "POST", url, {"partitions": [{"topic": "checked", "partition": 0, "replicas": None}]}
    )
    assert status == 202, body
    assert body["reassignments"][0]["error_code"] == "NO_REASSIGNMENT_IN_PROGRESS"
