"""The pysyncobj adapter: three voters in one process on loopback, real journals in tmp."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kraftlite.metadata import records as r
from kraftlite.raft.pysyncobj_log import (
    Outcome,
    ProposeError,
    RaftMetadataLog,
    RaftSettings,
)
from tests.harness.processes import free_ports

pytestmark = pytest.mark.integration


class Quorum:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
        self.nodes: dict[int, RaftMetadataLog] = {}
        self.fatal: list[Exception] = []

    def start(self, index: int) -> RaftMetadataLog:
        settings = RaftSettings(
            self_address=self.addresses[index],
            peer_addresses=tuple(a for i, a in enumerate(self.addresses) if i != index),
            data_dir=self.root / f"c{index}",
            password="test-secret",
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
