"""Issue 12's Raft-port flood, replayed against real processes: strangers stream into the
active controller's Raft port (a declared 64 MiB message, a declared 2 GiB one, random
bytes, idle connections past the pending cap) while metadata commits and a broker produces.
Each stranger is cut off after a few bytes; commits go on; the broker keeps its lease.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kraftlite.raft.transport import MAX_PENDING_CONNECTIONS
from tests.harness.processes import FAST_SESSIONS, Cluster, http
from tests.security.raft_strangers import HEADERS, Stranger, idle_connections, wait_closed

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]

FLOOD_S = 8


def raft_address(cluster: Cluster, node_id: int) -> str:
    args = cluster.quorum.processes[node_id].args
    return args[args.index("--raft") + 1]


def brokers(cluster: Cluster, controller: int) -> list[dict[str, Any]]:
    status, body = http("GET", cluster.quorum.urls[controller] + "/v1/cluster")
    assert status == 200, body
    return list(body["brokers"])


def commit_config(cluster: Cluster, controller: int, value: int) -> float | None:
    """One Raft commit through the controller's API: its latency in ms, None if it failed."""
    started = time.monotonic()
    try:
        status, _ = http(
            "PUT",
            cluster.quorum.urls[controller] + "/v1/topics/probe/configs",
            {"configs": {"retention.ms": str(3_600_000 + value)}},
            timeout=10,
        )
    except OSError:
        return None
    return (time.monotonic() - started) * 1000 if status == 200 else None


def produce(cluster: Cluster) -> bool:
    try:
        status, _ = http(
            "POST",
            cluster.urls[1] + "/v1/topics/probe/partitions/0/records?acks=all&timeout_ms=2000",
            {"records": [{"value": "x"}]},
            timeout=10,
        )
    except OSError:
        return False
    return status == 200


def test_the_raft_port_listens_on_the_given_address_only(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "bind", brokers=0)
    try:
        cluster.quorum.start()
        active = cluster.quorum.leader()
        for node_id in cluster.quorum.processes:
            host, port = raft_address(cluster, node_id).rsplit(":", 1)
            assert host == "127.0.0.1"
            socket.create_connection((host, int(port)), timeout=5).close()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.2", int(port)), timeout=5)
        assert cluster.quorum.leader() == active
    finally:
        cluster.close()


def test_a_flooded_active_controller_keeps_committing_and_the_broker_its_lease(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path / "flood", brokers=1, controller_config=FAST_SESSIONS)
    stop = threading.Event()
    idle: list[socket.socket] = []
    try:
        cluster.start()
        status, body = http(
            "POST",
            cluster.urls[1] + "/v1/topics",
            {"name": "probe", "partitions": 1, "replication_factor": 1},
        )
        assert status == 201, body
        deadline = time.monotonic() + 30
        while not produce(cluster):
            assert time.monotonic() < deadline, "no first produce"
            time.sleep(0.1)
        active = cluster.quorum.leader()
        (broker,) = brokers(cluster, active)
        assert not broker["fenced"]
        before = [commit_config(cluster, active, i) for i in range(20)]

        address = raft_address(cluster, active)
        strangers = [Stranger(address, header, stop) for header in HEADERS.values()]
        threads = [stranger.start() for stranger in strangers]
        idle = idle_connections(address, 2 * MAX_PENDING_CONNECTIONS)
        during: list[float | None] = []
        produced: list[bool] = []
        fenced = False
        started = time.monotonic()
        # for FLOOD_S, and 25 commits at least however slowly a loaded machine makes them
        while time.monotonic() - started < FLOOD_S or len(during) < 25:
            during.append(commit_config(cluster, active, len(during) + 100))
            produced.append(produce(cluster))
            fenced |= any(b["fenced"] for b in brokers(cluster, active))
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

        committed = [ms for ms in during if ms is not None]
        print(
            f"\ncommit ms before: p50 {statistics.median(x for x in before if x):.1f}, "
            f"max {max(x for x in before if x):.1f}; during the flood: "
            f"{len(committed)} of {len(during)} committed, p50 {statistics.median(committed):.1f}"
            f", max {max(committed):.1f}; produced {sum(produced)} of {len(produced)}; "
            f"stranger connections {[len(s.attempts) for s in strangers]}"
        )
        assert all(x is not None for x in before)
        assert len(committed) >= 20, during
        assert all(produced), produced  # the broker's lease never lapsed
        assert not fenced
        (after,) = brokers(cluster, active)
        assert after["broker_epoch"] == broker["broker_epoch"]  # never re-registered
        for stranger in strangers:
            assert stranger.attempts, stranger.header
            assert sum(not a.closed_by_server for a in stranger.attempts) <= 1  # stop's
            assert all(a.sent < stranger.total for a in stranger.attempts)
        assert all(wait_closed(sock) for sock in idle)
        log = cluster.quorum.processes[active].log_path.read_text(errors="replace")
        assert "raft port: closed" in log
    finally:
        stop.set()
        for sock in idle:
            sock.close()
        cluster.close()
