"""The pysyncobj adapter: three voters in one process on loopback, real journals in tmp."""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from kraftlite.metadata import records as r
from kraftlite.raft.pysyncobj_log import (
    Outcome,
    ProposeError,
    RaftMetadataLog,
    RaftSettings,
)
from kraftlite.raft.transport import MAX_PENDING_CONNECTIONS, PRE_AUTH_MAX_MESSAGE_BYTES
from tests.harness.processes import free_ports
from tests.security.raft_strangers import HEADERS, Stranger, idle_connections, wait_closed

pytestmark = pytest.mark.integration


class Quorum:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
        self.nodes: dict[int, RaftMetadataLog] = {}
        self.fatal: list[Exception] = []

    def start(self, index: int, password: str = "test-secret") -> RaftMetadataLog:
        settings = RaftSettings(
            self_address=self.addresses[index],
            peer_addresses=tuple(a for i, a in enumerate(self.addresses) if i != index),
            data_dir=self.root / f"c{index}",
            password=password,
        )
        node = RaftMetadataLog(settings, asyncio.get_running_loop(), self.fatal.append)
        self.nodes[index] = node
        return node

    def stop(self, index: int) -> None:
        self.nodes.pop(index).close()

    async def leader(self, timeout_s: float = 15) -> int:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            for index, node in self.nodes.items():
                if node.is_leader() and node.status()["has_quorum"]:
                    return index
            await asyncio.sleep(0.05)
        raise AssertionError("no leader elected")

    def close(self) -> None:
        for index in list(self.nodes):
            self.stop(index)


def topic_batch(version: int, name: str, request_id: str | None = None) -> r.RecordBatch:
    return r.RecordBatch(version, (r.TopicRecord(name=name, topic_id=f"id-{name}"),), request_id)


async def converged(quorum: Quorum, version: int, timeout_s: float = 10) -> None:
    for node in quorum.nodes.values():
        image = await node.wait_for_change(version - 1, timeout_s)
        assert image.version >= version


@pytest.mark.timeout(120)
async def test_commit_forward_cas_dedup_restart_and_majority_loss(tmp_path: Path) -> None:
    quorum = Quorum(tmp_path)
    try:
        for index in range(3):
            quorum.start(index)
        leader = await quorum.leader()
        node = quorum.nodes[leader]

        first = await node.propose(topic_batch(0, "a", "req-a"), timeout_s=5)
        assert (first.outcome, first.version) == (Outcome.COMMITTED, 1)
        await converged(quorum, 1)
        assert all(n.image.topic("a") is not None for n in quorum.nodes.values())

        # a follower forwards to the leader
        follower = quorum.nodes[(leader + 1) % 3]
        second = await follower.propose(topic_batch(1, "b"), timeout_s=5)
        assert (second.outcome, second.version) == (Outcome.COMMITTED, 2)
        assert follower.image.topic("b") is not None

        # decided against an old version: rejected whole
        stale = await node.propose(topic_batch(1, "c"), timeout_s=5)
        assert stale.outcome is Outcome.STALE
        assert node.image.topic("c") is None

        # a retry of a committed request id answers the first commit's version
        again = await node.propose(topic_batch(2, "a2", "req-a"), timeout_s=5)
        assert (again.outcome, again.version) == (Outcome.DUPLICATE, 1)

        assert await node.barrier(timeout_s=5) == 2

        # all three stop and come back: the same metadata, from their journals
        quorum.close()
        for index in range(3):
            quorum.start(index)
        await quorum.leader()
        await converged(quorum, 2)
        for n in quorum.nodes.values():
            assert sorted(n.image.topic_ids) == ["a", "b"]

        # majority lost: writes fail within their timeout instead of hanging
        leader = await quorum.leader()
        survivor = (leader + 1) % 3
        for index in range(3):
            if index != survivor:
                quorum.stop(index)
        started = asyncio.get_running_loop().time()
        with pytest.raises(ProposeError):
            await quorum.nodes[survivor].propose(topic_batch(2, "d"), timeout_s=2)
        assert asyncio.get_running_loop().time() - started < 5
        assert not quorum.fatal
    finally:
        quorum.close()


async def propose_topics(node: RaftMetadataLog, prefix: str, count: int) -> list[float]:
    """Commit `count` topics one after another; their commit latencies in ms."""
    latencies = []
    for index in range(count):
        started = time.monotonic()
        while True:
            try:
                result = await node.propose(
                    topic_batch(node.image.version, f"{prefix}-{index}"), timeout_s=5
                )
            except ProposeError:
                continue
            if result.outcome is Outcome.COMMITTED:
                break
        latencies.append((time.monotonic() - started) * 1000)
    return latencies


def summary(latencies: list[float]) -> str:
    p50, worst = statistics.median(latencies), max(latencies)
    return f"{len(latencies)} commits, p50 {p50:.1f} ms, max {worst:.1f} ms"


def stats_line(node: RaftMetadataLog) -> str:
    stats = node.port_stats
    return (
        f"accepted {stats.accepted}, closed {dict(stats.closed)}, "
        f"most read before a close {stats.most_read_before_close} bytes"
    )


@pytest.mark.timeout(180)
async def test_the_raft_port_binds_only_the_given_address(tmp_path: Path) -> None:
    quorum = Quorum(tmp_path)
    try:
        node = quorum.start(0)
        port = int(quorum.addresses[0].rsplit(":", 1)[1])
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, node._syncobj.waitBinded)
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), timeout=5)
    finally:
        quorum.close()


@pytest.mark.timeout(180)
async def test_a_flooded_leader_keeps_committing(tmp_path: Path) -> None:
    """Strangers stream into the leader's Raft port (a declared 64 MiB message, a declared
    2 GiB one, random bytes, and more idle connections than the pending cap) while it commits:
    every flooding connection is closed after a few bytes, and commits go on."""
    quorum = Quorum(tmp_path)
    stop = threading.Event()
    threads = []
    idle: list[socket.socket] = []
    try:
        for index in range(3):
            quorum.start(index)
        leader = await quorum.leader()
        node = quorum.nodes[leader]
        before = await propose_topics(node, "before", 30)

        address = quorum.addresses[leader]
        strangers = [Stranger(address, header, stop) for header in HEADERS.values()]
        threads = [stranger.start() for stranger in strangers]
        idle = idle_connections(address, 2 * MAX_PENDING_CONNECTIONS)
        started = time.monotonic()
        during = await asyncio.wait_for(propose_topics(node, "during", 30), timeout=120)
        while time.monotonic() - started < 4:  # past the pre-auth deadline of the idle ones
            during += await propose_topics(node, f"more-{len(during)}", 1)
        stop.set()
        for thread in threads:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 30)
        print(f"\nbefore the flood: {summary(before)}\nduring the flood: {summary(during)}")
        print(f"stranger connections: {[len(s.attempts) for s in strangers]}, {stats_line(node)}")

        assert quorum.nodes[leader] is node and node.is_leader()
        stats = node.port_stats
        for stranger in strangers:
            assert stranger.attempts, stranger.header
            # every connection was closed by the leader, but one that stop may have cut short
            assert sum(not a.closed_by_server for a in stranger.attempts) <= 1
            assert all(a.sent < stranger.total for a in stranger.attempts)
        assert stats.most_read_before_close <= 4 + PRE_AUTH_MAX_MESSAGE_BYTES
        assert stats.closed["too many unauthenticated connections"] >= MAX_PENDING_CONNECTIONS
        assert stats.closed["not authenticated in time"] >= 1
        # every idle stranger was closed: at once, or at the deadline
        assert all(wait_closed(sock) for sock in idle)
        # the voters' own links still stand, and every voter has every commit
        assert all(node.status()["connected"].values())
        await converged(quorum, node.image.version)
        assert not quorum.fatal
    finally:
        stop.set()
        for sock in idle:
            sock.close()
        quorum.close()


@pytest.mark.timeout(120)
async def test_a_voter_with_the_wrong_password_never_gets_in(tmp_path: Path) -> None:
    quorum = Quorum(tmp_path)
    try:
        for index in range(2):
            quorum.start(index)
        outsider = quorum.start(2, password="not-the-secret")
        leader = await quorum.leader()
        assert leader != 2
        result = await quorum.nodes[leader].propose(topic_batch(0, "a"), timeout_s=5)
        assert result.outcome is Outcome.COMMITTED
        await asyncio.sleep(2)  # several reconnects at 0.5 s
        assert outsider.image.version == 0
        assert not any(outsider.status()["connected"].values())
        closed = sum(
            (node.port_stats.closed for node in quorum.nodes.values()), start=Counter[str]()
        )
        assert closed["invalid token"] >= 2
    finally:
        quorum.close()
