"""Brokers under failure: kill -9 of a leader under acks=all load, a paused follower, a
diverged replica, a full-cluster kill -9 and restart. Invariant checked every time: every
acknowledged record is readable at the offset it was acknowledged with, offsets are dense,
and replicas in the ISR hold identical logs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftlite.protocol import batch as batch_format
from kraftlite.storage.log import LogStorage, StorageConfig
from tests.harness.observe import create as create_topic
from tests.harness.observe import describe, serving_urls, wait_until
from tests.harness.processes import Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(300)]
FAST = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path, broker_config={"replica.lag.time.max.ms": 2000}, controller_config=FAST
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def live_url(cluster: Cluster) -> str:
    return serving_urls(cluster)[0]


def create(cluster: Cluster, topic: str, **configs: Any) -> dict[str, Any]:
    """Partition 0 of a new one-partition topic, once it has a leader."""
    return create_topic(cluster, topic, **configs)["partitions"][0]


class Producer(threading.Thread):
    """Produces acks=all in a loop through live brokers, retrying, recording what was acked."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic = cluster, topic
        self.acked: dict[int, str] = {}
        self.stop_flag = threading.Event()
        self.failures = 0

    def run(self) -> None:
        n = 0
        while not self.stop_flag.is_set():
            values = [f"r{n}-{i}" for i in range(5)]
            try:
                status, body = http(
                    "POST",
                    live_url(self.cluster)
                    + f"/v1/topics/{self.topic}/records?acks=all&timeout_ms=5000",
                    {"records": [{"value": v, "partition": 0} for v in values]},
                    timeout=10,
                )
            except (OSError, StopIteration):  # a node down, or none serving right now
                status, body = 0, None
            if status == 200 and all("offset" in o for o in body["offsets"]):
                for value, answer in zip(values, body["offsets"], strict=True):
                    self.acked[answer["offset"]] = value
            else:
                self.failures += 1
                time.sleep(0.05)
            n += 1


def read_all(cluster: Cluster, topic: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    offset = 0
    while True:
        status, body = http(
            "GET", live_url(cluster) + f"/v1/topics/{topic}/partitions/0/records?offset={offset}"
        )
        assert status == 200, body
        out += [(r["offset"], r["value"]) for r in body["records"]]
        if body["next_offset"] >= body["high_watermark"]:
            return out
        offset = body["next_offset"]


def check_acked(cluster: Cluster, topic: str, acked: dict[int, str]) -> None:
    log = read_all(cluster, topic)
    assert [offset for offset, _ in log] == list(range(len(log)))  # dense, ordered
    stored = dict(log)
    lost = {o: v for o, v in acked.items() if stored.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records lost or changed: {sorted(lost)[:10]}"


def replica_logs(cluster: Cluster, topic_id: str) -> dict[int, list[tuple[int, int, bytes]]]:
    """Every broker's copy of partition 0 as (offset, epoch, value), read from its data dir."""
    logs = {}
    for broker_id in cluster.processes:
        storage = LogStorage(StorageConfig(path=cluster.root / f"broker-{broker_id}"))
        try:
            log = storage.open_partition(f"{topic_id}-0")
            data = log.read(log.log_start_offset, 1 << 30)
            logs[broker_id] = [
                (r.offset, b.header.leader_epoch, r.value or b"")
                for b in batch_format.decode_stream(data)
                for r in b.records()
            ]
        finally:
            storage.close()
    return logs


@pytest.mark.parametrize("victim", ["leader", "follower"])
def test_kill_9_any_broker_under_acks_all_load_loses_nothing(cluster: Cluster, victim: str) -> None:
    created = create(cluster, "load", **{"min.insync.replicas": 2})
    leader = created["leader"]
    killed = leader if victim == "leader" else next(b for b in created["replicas"] if b != leader)
    producer = Producer(cluster, "load")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 200, what="acks before the kill")
    cluster.processes[killed].kill()
    if victim == "leader":
        wait_until(
            lambda: describe(cluster, "load")["partitions"][0]["leader"] not in (leader, -1),
            what="a new leader",
        )
    acked_before = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked_before + 200, what="acks after the kill")
    cluster.processes[killed].start()  # comes back, truncates if needed, rejoins the ISR
    wait_until(
        lambda: sorted(describe(cluster, "load")["partitions"][0]["isr"]) == [1, 2, 3],
        what="the killed broker back in the ISR",
    )
    producer.stop_flag.set()
    producer.join()
    check_acked(cluster, "load", producer.acked)
    topic_id = created_topic_id(cluster, "load")
    hw = describe(cluster, "load")["partitions"][0]["high_watermark"]
    cluster.stop()
    logs = replica_logs(cluster, topic_id)
    reference = [entry for entry in logs[1] if entry[0] < hw]
    for broker_id, log in logs.items():  # every ISR member holds the same log below the HW
        assert [entry for entry in log if entry[0] < hw] == reference, broker_id


def created_topic_id(cluster: Cluster, topic: str) -> str:
    return str(describe(cluster, topic)["topic_id"])


def test_a_paused_follower_leaves_the_isr_and_comes_back(cluster: Cluster) -> None:
    created = create(cluster, "pause", **{"min.insync.replicas": 2})
    follower = next(b for b in created["replicas"] if b != created["leader"])
    cluster.processes[follower].pause()
    try:
        producer = Producer(cluster, "pause")
        producer.start()
        wait_until(
            lambda: follower not in describe(cluster, "pause")["partitions"][0]["isr"],
            what="the paused follower to leave the ISR",
        )
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= acked + 100, what="writes with ISR 2")
    finally:
        cluster.processes[follower].resume()
    wait_until(
        lambda: follower in describe(cluster, "pause")["partitions"][0]["isr"],
        what="the follower back in the ISR",
    )
    producer.stop_flag.set()
    producer.join()
    check_acked(cluster, "pause", producer.acked)


def test_a_diverged_replica_truncates_to_the_new_leaders_history(cluster: Cluster) -> None:
    """The leader takes acks=1 writes its followers never see, then dies; a follower takes
    over and writes its own history at the same offsets; the old leader comes back and must
    throw its divergent suffix away (leader-epoch lineage, KIP-101), not keep it.
    """
    created = create(cluster, "diverge")
    leader = created["leader"]
    url = cluster.urls[leader] + "/v1/topics/diverge/partitions/0/records"
    status, _ = http("POST", url + "?acks=all", {"records": [{"value": f"c{i}"} for i in range(5)]})
    assert status == 200
    followers = [b for b in created["replicas"] if b != leader]
    for b in followers:
        cluster.processes[b].pause()
    # Their long-polls in flight answer empty after replica.fetch.wait.max.ms (500): from then
    # on nothing reaches them (an answer already sent would land once they resume).
    time.sleep(1.0)
    status, body = http(
        "POST", url + "?acks=1", {"records": [{"value": f"lost{i}"} for i in range(3)]}
    )
    assert status == 200 and body["offsets"][0]["offset"] == 5
    cluster.processes[leader].kill()
    for b in followers:
        cluster.processes[b].resume()
    wait_until(
        lambda: describe(cluster, "diverge")["partitions"][0]["leader"] in followers,
        what="a follower to take over",
    )
    status, body = http(
        "POST",
        live_url(cluster) + "/v1/topics/diverge/records?acks=all",
        {"records": [{"value": f"new{i}"} for i in range(4)]},
    )
    assert status == 200 and [o["offset"] for o in body["offsets"]] == [5, 6, 7, 8], body
    cluster.processes[leader].start()
    wait_until(
        lambda: sorted(describe(cluster, "diverge")["partitions"][0]["isr"]) == [1, 2, 3],
        what="the old leader back in the ISR",
    )
    assert [v for _, v in read_all(cluster, "diverge")] == [f"c{i}" for i in range(5)] + [
        f"new{i}" for i in range(4)
    ]
    topic_id = created_topic_id(cluster, "diverge")
    cluster.stop()
    logs = replica_logs(cluster, topic_id)
    values = {b: [v for _, _, v in log] for b, log in logs.items()}
    assert all(v == values[leader] for v in values.values()), values
    assert b"lost0" not in values[leader]


def test_a_full_cluster_kill_9_and_restart_keeps_everything(cluster: Cluster) -> None:
    create(cluster, "durable", **{"min.insync.replicas": 2})
    producer = Producer(cluster, "durable")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 300, what="acks")
    for process in [*cluster.processes.values(), *cluster.quorum.processes.values()]:
        process.kill()  # all at once, mid-load
    producer.stop_flag.set()
    producer.join()
    cluster.quorum.start()
    for process in cluster.processes.values():
        process.start()
    cluster.wait_ready()
    wait_until(
        lambda: (
            describe(cluster, "durable")["partitions"][0]["high_watermark"]
            >= max(producer.acked) + 1
        ),
        what="the high watermark back above every ack",
    )
    check_acked(cluster, "durable", producer.acked)
