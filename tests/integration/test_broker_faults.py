"""Brokers under failure: kill -9 of a leader under acks=all load, a paused follower, a
diverged replica, a full-cluster kill -9 and restart. Invariant checked every time: every
acknowledged record is readable at the offset it was acknowledged with, offsets are dense,
replicas in the ISR hold identical logs, one writer per leader epoch (the checker of
tests/harness/checker.py, as in test_chaos.py).
"""

from __future__ import annotations

import base64
import os
import secrets
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from kraftlite.clock import SystemClock
from kraftlite.protocol import batch as fmt
from kraftlite.security.cluster_auth import HEADER, Signer, derive_key
from tests.harness.checker import assert_no_violations, one_writer_per_epoch
from tests.harness.observe import (
    Producer,
    check_partition,
    describe,
    read_partition,
    replica_logs,
    serving_urls,
    wait_until,
)
from tests.harness.observe import create as create_topic
from tests.harness.processes import CLUSTER_SECRET, FAST_SESSIONS, Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(300)]


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """`replica.lag.time.max.ms` 2 s, or the test's own (indirect parametrization)."""
    lag_ms = getattr(request, "param", 2000)
    running = Cluster(
        tmp_path, broker_config={"replica.lag.time.max.ms": lag_ms}, controller_config=FAST_SESSIONS
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def create(cluster: Cluster, topic: str, **configs: Any) -> dict[str, Any]:
    """Partition 0 of a new one-partition topic, once it has a leader."""
    return create_topic(cluster, topic, **configs)["partitions"][0]


def check(cluster: Cluster, topic: str, producer: Producer) -> None:
    """Every invariant of tests/harness/checker.py (stops the cluster to read its disks)."""
    assert_no_violations(check_partition(cluster, topic, producer.acked, refused=producer.refused))


@pytest.mark.parametrize("victim", [pytest.param("leader", marks=pytest.mark.slice), "follower"])
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
    producer.stop()
    check(cluster, "load", producer)


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
    producer.stop()
    check(cluster, "pause", producer)


# paused followers stay in the ISR through the test's second of waiting, however slow the
# machine: the old leader must die with them in it, or no one could take over
@pytest.mark.parametrize("cluster", [10_000], indirect=True, ids=["lag-10s"])
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
        serving_urls(cluster)[0] + "/v1/topics/diverge/records?acks=all",
        {"records": [{"value": f"new{i}"} for i in range(4)]},
    )
    assert status == 200 and [o["offset"] for o in body["offsets"]] == [5, 6, 7, 8], body
    cluster.processes[leader].start()
    wait_until(
        lambda: sorted(describe(cluster, "diverge")["partitions"][0]["isr"]) == [1, 2, 3],
        what="the old leader back in the ISR",
    )
    _, readable = read_partition(cluster, "diverge")
    expected = [f"c{i}".encode() for i in range(5)] + [f"new{i}".encode() for i in range(4)]
    assert [v for _, v in readable] == expected
    topic_id = str(describe(cluster, "diverge")["topic_id"])
    cluster.stop()
    logs = replica_logs(cluster, topic_id)
    values = {b: [r.value for r in log] for b, log in logs.items()}
    assert all(v == values[leader] for v in values.values()), values
    assert b"lost0" not in values[leader]
    assert_no_violations(one_writer_per_epoch(logs))


def test_a_full_cluster_kill_9_and_restart_keeps_everything(cluster: Cluster) -> None:
    create(cluster, "durable", **{"min.insync.replicas": 2})
    producer = Producer(cluster, "durable")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 300, what="acks")
    for process in [*cluster.processes.values(), *cluster.quorum.processes.values()]:
        process.kill()  # all at once, mid-load
    producer.stop()
    cluster.quorum.start()
    for process in cluster.processes.values():
        process.start()
    cluster.wait_ready()
    wait_until(  # None while the restarted leader's offsets are not known yet
        lambda: (
            (describe(cluster, "durable")["partitions"][0]["high_watermark"] or 0)
            >= max(producer.acked) + 1
        ),
        what="the high watermark back above every ack",
    )
    check(cluster, "durable", producer)


def _stalled_stream(url: str, request: dict[str, Any]) -> socket.socket:
    """A replica stream (signed with the cluster secret, as a node) that sends one fetch and
    then never reads: a follower whose process or link hangs mid-answer. Its receive buffer
    is tiny, so the leader's answer cannot drain into the kernel."""
    host, port = url.removeprefix("http://").split(":")
    path = "/v1/internal/replica-stream"
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    signer = Signer(derive_key(CLUSTER_SECRET, "internal http"), "stalled")
    signature = signer.header(
        "GET", path, b"", now_ms=SystemClock().now_ms(), nonce=secrets.token_hex(8)
    )
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
            f"{HEADER}: {signature}\r\n\r\n"
        ).encode()
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    payload, mask = orjson.dumps(request), os.urandom(4)
    assert len(payload) < 1 << 16
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(b"\x82" + bytes([0x80 | 126]) + len(payload).to_bytes(2, "big") + mask + masked)
    return sock


def test_a_leader_stops_at_once_while_a_follower_that_does_not_read_holds_its_stream(
    cluster: Cluster,
) -> None:
    """SIGTERM must not wait on a replica stream whose follower stopped reading an 8 MiB
    answer (the review of issue 15: closing it waited for its socket to drain, forever)."""
    created = create(cluster, "stalled")
    leader = created["leader"]
    url = cluster.urls[leader]
    batch = fmt.encode_records([fmt.Record(value=os.urandom(1000))] * 900, now_ms=0)
    for _ in range(12):  # ~11 MB, more than one answer carries
        request = urllib.request.Request(
            url + "/v1/topics/stalled/partitions/0/records?acks=1",
            data=batch,
            headers={"Content-Type": "application/vnd.kraftlite.batch"},
        )
        with urllib.request.urlopen(request, timeout=15) as response:
            assert response.status == 200
    topic = describe(cluster, "stalled")
    follower = next(b for b in created["replicas"] if b != leader)
    brokers = http("GET", url + "/v1/cluster")[1]["brokers"]
    epoch = next(b["broker_epoch"] for b in brokers if b["id"] == follower)
    fetch = {"v": 1, "replica_id": follower, "broker_epoch": epoch, "max_wait_ms": 0,
             "max_bytes": 8 << 20, "session_id": 0, "session_epoch": 0, "forgotten": [],
             "partitions": [{"topic_id": topic["topic_id"], "partition": 0,
                             "leader_epoch": created["leader_epoch"], "fetch_offset": 0,
                             "last_fetched_epoch": -1}]}  # fmt: skip
    stalled = _stalled_stream(url, fetch)
    try:
        time.sleep(1.0)  # the leader is writing its answer into a socket that does not drain
        started = time.monotonic()
        code = cluster.processes[leader].terminate()  # SIGKILL after 20 s
        assert code == 0 and time.monotonic() - started < 15, (code, time.monotonic() - started)
    finally:
        stalled.close()
