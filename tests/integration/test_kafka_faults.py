"""Kafka clients through faults (issue 16): an idempotent librdkafka producer keeps
sending while its link to the partition's leader is cut (requests the leader appended, and
its followers copied, go unanswered and are sent again), and then the leader is killed
with SIGKILL; every message it sent is in the
log exactly once, in order (the new leader rebuilt the producer's state from its log)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.harness.checker import assert_no_violations, lost_acknowledged, written_once
from tests.harness.network import CLIENT
from tests.harness.processes import FAST_SESSIONS, Cluster, http, http_retry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("kafka-faults"),
        controller_config=FAST_SESSIONS,
        kafka=True,
        faults=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.close()


def _leader(cluster: Cluster, topic: str, via: int) -> int | None:
    status, described = http("GET", cluster.urls[via] + f"/v1/topics/{topic}")
    if status != 200:
        return None
    leader = described["partitions"][0]["leader"]
    return int(leader) if leader is not None and leader >= 0 else None


def _read_all(cluster: Cluster, topic: str, via: int, until: int) -> list[tuple[int, bytes]]:
    records: list[tuple[int, bytes]] = []
    offset = 0
    deadline = time.monotonic() + 60
    while offset < until and time.monotonic() < deadline:
        status, answer = http(
            "GET",
            cluster.urls[via] + f"/v1/topics/{topic}/partitions/0/records?offset={offset}"
            "&max_records=10000",
        )
        if status != 200:
            time.sleep(0.2)
            continue
        records += [(r["offset"], r["value"].encode()) for r in answer["records"]]
        offset = answer["next_offset"]
        if not answer["records"]:
            time.sleep(0.1)
    return records


def test_an_idempotent_producer_writes_each_message_once_through_a_leader_kill(
    cluster: Cluster,
) -> None:
    status, answer = http_retry(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {
            "name": "once",
            "partitions": 1,
            "replication_factor": 3,
            "configs": {"min.insync.replicas": 2},
        },
    )
    assert status == 201, answer
    deadline = time.monotonic() + 20
    while (leader := _leader(cluster, "once", 1)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 100,
            "request.timeout.ms": 3000,  # a paused leader's requests are sent again soon
        }
    )
    acked: dict[int, bytes] = {}
    failed: list[Any] = []

    def delivered(err: Any, message: Any) -> None:
        if err is None:
            acked[message.offset()] = message.value()
        else:
            failed.append(err)

    network = cluster.network
    assert network is not None
    sent = [b"m%05d" % i for i in range(3000)]
    followers = [b for b in cluster.processes if b != leader]
    for n, value in enumerate(sent):
        if n == 1000:
            # The leader appends what comes next, but with its followers paused nothing
            # commits: the requests wait for acks=all. Their answers are then lost (the
            # link cut), the followers resume and copy them (committed), and the leader
            # dies: the producer sends them again, to a new leader that already has them.
            producer.flush(30)
            for follower in followers:
                cluster.processes[follower].pause()
        producer.produce("once", value=value, partition=0, on_delivery=delivered)
        producer.poll(0)
        if n == 1100:
            time.sleep(0.5)  # the leader has appended them
            network.cut(CLIENT, f"broker-{leader}-kafka")
            for follower in followers:
                cluster.processes[follower].resume()
            time.sleep(1.0)  # they catch up: the records are committed, unanswered
            cluster.processes[leader].kill()
            network.heal()
        if n % 50 == 0:
            time.sleep(0.01)
    assert producer.flush(120) == 0
    assert failed == []
    survivor = next(b for b in cluster.urls if b != leader)
    readable = _read_all(cluster, "once", survivor, until=len(sent))
    assert_no_violations(lost_acknowledged(acked, readable) + written_once(sent, readable))
    assert len(readable) == len(sent)
