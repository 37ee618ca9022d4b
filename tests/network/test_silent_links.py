"""Silent links (issue 28, controller/liveness.py rule 4): a broker whose host goes silent,
or whose cable is pulled, is fenced once its heartbeats are `broker.unreachable.timeout.ms`
late, not after its session, and its partitions take writes through new leaders; a broker
behind a slow, lossy link is not fenced. The session here is 20 s: a fence within it is
the fast path's."""

from __future__ import annotations

import contextlib
import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.hosts import TestNet
from tests.harness.observe import PartitionWriters
from tests.harness.processes import Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.network, pytest.mark.timeout(180)]
SESSION_MS = 20_000


@pytest.fixture
def cluster(tmp_path: Path, net: TestNet) -> Iterator[Cluster]:
    net.shape_all(delay_ms=1)
    running = Cluster(
        tmp_path,
        net=net,
        broker_config={"replica.lag.time.max.ms": 30_000},  # only fencing shrinks ISRs here
        controller_config={"broker.session.timeout.ms": SESSION_MS},
    )
    running.start()
    try:
        yield running
    finally:
        running.close()


def brokers(cluster: Cluster, via: int) -> dict[int, dict[str, object]]:
    status, body = http("GET", cluster.urls[via] + "/v1/brokers")
    assert status == 200, body
    return {b["id"]: b for b in body["brokers"]}


def events(cluster: Cluster, name: str, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of process `name` (e.g. "controller-1") with this event."""
    found = []
    for line in (cluster.root / f"{name}.log").read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("event") == event:
                found.append(entry)
    return found


def moment(timestamp: str) -> float:
    """A log line's ISO timestamp as seconds since the epoch."""
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def fences(cluster: Cluster) -> list[dict[str, Any]]:
    return [e for n in (1, 2, 3) for e in events(cluster, f"controller-{n}", "brokers_fenced")]


def broker_epoch(cluster: Cluster, broker_id: int) -> int:
    status, body = http("GET", cluster.urls[broker_id] + "/readyz")
    assert status == 200, body
    return int(body["broker_epoch"])


@pytest.mark.parametrize(
    "fault", ["silence", pytest.param("pulled cable", marks=pytest.mark.chaos)]
)
def test_a_silent_leader_is_fenced_fast_and_its_partitions_move(
    cluster: Cluster, net: TestNet, fault: str
) -> None:
    leaders = cluster.create_topic("t", 3, 3, configs={"min.insync.replicas": 2})
    victim = leaders[0]
    survivor = next(b for b in cluster.urls if b != victim)
    with PartitionWriters(cluster, "t", leaders, avoid=victim) as writers:
        time.sleep(1)
        start = time.monotonic()
        fault_at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if fault == "silence":
            net.silence(f"broker-{victim}")
        else:
            net.cut_link(f"broker-{victim}")
        deadline = start + SESSION_MS / 1000 - 5
        while not brokers(cluster, survivor)[victim]["fenced"]:
            assert time.monotonic() < deadline, "not fenced before the session: the slow path"
            time.sleep(0.1)
        fenced_after = time.monotonic() - start
        # every partition, the victim's included, takes writes again through the others
        while not all(writers.acked_since(start + fenced_after).values()):
            assert time.monotonic() < deadline, writers.acked_since(start)
            time.sleep(0.1)
    # fenced by rule 4, after the victim had stopped leading (its lease lapsed first)
    (fence,) = [f for f in fences(cluster) if f["brokers"] == [victim]]
    assert fence["reason"] == "it is unreachable", fence
    lapsed = [
        e
        for e in events(cluster, f"broker-{victim}", "leadership_lease_lapsed")
        if e["timestamp"] > fault_at
    ]
    assert lapsed, "the cut-off broker never noticed its lease lapse"
    # when it lapsed, not when the heartbeat loop noticed (same machine, same clock)
    lapsed_at = moment(lapsed[0]["timestamp"]) - lapsed[0]["lapsed_ms_ago"] / 1000
    assert lapsed_at < moment(fence["timestamp"]), (lapsed[0], fence)
    status, topic = http("GET", cluster.urls[survivor] + "/v1/topics/t")
    assert status == 200, topic
    for partition in topic["partitions"]:
        assert partition["leader"] != victim
        assert victim not in partition["isr"]
    net.heal()
    deadline = time.monotonic() + 30
    while brokers(cluster, survivor)[victim]["fenced"]:  # it comes back, and is let in
        assert time.monotonic() < deadline, "the healed broker stays fenced"
        time.sleep(0.2)


@pytest.mark.chaos  # in the rotating quarter of the chaos layer (tests/conftest.py)
def test_a_slow_lossy_link_fences_no_one(cluster: Cluster, net: TestNet) -> None:
    """200 +- 200 ms on the link of a leader, 5 % of its packets lost, for 30 s: heartbeats
    arrive late and out of order, probes go unanswered now and then, but its host answers:
    nobody is fenced, and every partition keeps taking writes."""
    leaders = cluster.create_topic("t", 3, 3, configs={"min.insync.replicas": 2})
    victim = leaders[0]
    epochs = {b: broker_epoch(cluster, b) for b in cluster.urls}
    with PartitionWriters(cluster, "t", leaders, avoid=victim) as writers:
        start = time.monotonic()
        net.shape(f"broker-{victim}", delay_ms=200, jitter_ms=200, loss_pct=5)
        while time.monotonic() - start < 30:
            seen = brokers(cluster, next(b for b in cluster.urls if b != victim))
            assert not any(info["fenced"] for info in seen.values()), seen
            time.sleep(1)
        assert all(writers.acked_since(start).values()), writers.acked_since(start)
    net.heal(shapes=True)
    assert {b: broker_epoch(cluster, b) for b in cluster.urls} == epochs  # none registered again
    assert not fences(cluster), fences(cluster)  # not even for a moment
