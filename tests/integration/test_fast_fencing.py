"""Fast failure detection (controller/liveness.py) on real processes: a broker killed with
kill -9 is fenced long before its session would expire, while a paused one, which still
holds its port, is not fenced before its session ends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.checker import assert_no_violations
from tests.harness.observe import Producer, check_partition, create, partition_0, wait_until
from tests.harness.processes import Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(120)]
SESSION_MS = 20_000  # long: anything fenced well within it was fenced by the fast path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path,
        broker_config={"replica.lag.time.max.ms": 2000},
        controller_config={
            "broker.session.timeout.ms": SESSION_MS,
            "broker.heartbeat.interval.ms": 500,
        },
    )
    running.start()
    try:
        yield running
    finally:
        running.close()


def fenced(cluster: Cluster, broker_id: int, via: int) -> bool:
    status, body = http("GET", cluster.urls[via] + "/v1/brokers")
    assert status == 200, body
    return any(b["id"] == broker_id and b["fenced"] for b in body["brokers"])


@pytest.mark.slice
def test_a_killed_leader_is_fenced_at_once_and_writes_resume(cluster: Cluster) -> None:
    leader = create(cluster, "fast", **{"min.insync.replicas": 2})["partitions"][0]["leader"]
    rest = [b for b in cluster.processes if b != leader]
    producer = Producer(cluster, "fast", target=lambda: cluster.urls[rest[0]])
    producer.start()
    wait_until(lambda: len(producer.acked) >= 100, what="acks before the kill")
    cluster.processes[leader].kill()
    killed_at = time.monotonic()
    wait_until(lambda: fenced(cluster, leader, rest[0]), timeout_s=SESSION_MS / 2000, what="fenced")
    wait_until(
        lambda: partition_0(cluster, "fast", among=rest)["leader"] in rest,
        timeout_s=SESSION_MS / 2000,
        what="a new leader",
    )
    wait_until(
        lambda: producer.acks_after(killed_at), timeout_s=SESSION_MS / 2000, what="acks again"
    )
    producer.stop()
    assert_no_violations(check_partition(cluster, "fast", producer.acked))


def test_a_paused_broker_is_not_fenced_before_its_session_ends(cluster: Cluster) -> None:
    """SIGSTOP keeps the port open (the kernel accepts): no probe may take that as death."""
    leader = create(cluster, "paused")["partitions"][0]["leader"]
    rest = [b for b in cluster.processes if b != leader]
    epoch = partition_0(cluster, "paused", among=rest)["leader_epoch"]
    cluster.processes[leader].pause()
    try:
        time.sleep(SESSION_MS / 4000)  # many heartbeats late, and followers' fetches hang
        assert not fenced(cluster, leader, rest[0])
        assert partition_0(cluster, "paused", among=rest)["leader_epoch"] == epoch
    finally:
        cluster.processes[leader].resume()
    wait_until(lambda: not fenced(cluster, leader, rest[0]), what="it carries on")
