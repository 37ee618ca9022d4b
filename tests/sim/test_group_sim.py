"""A seeded simulation of a consumer group (KIP-848's heartbeat) on the in-process broker:
many clients join, heartbeat, stall past their session, resume, leave and commit, in an
order a seeded `random.Random` picks, while a `ManualClock` moves time. After every step:

- no partition is held by two clients the coordinator still counts as members (a client
  lets go of revoked partitions only later, as a KIP-848 client does, and reports what it
  holds; group.py rules 2, 3 and 9);
- a commit is accepted only from a member for partitions it holds, and refused from a client
  whose session expired while it stalled (the zombie: rule 7);
and once the faults stop and every client heartbeats a few rounds, every partition of the
topic is held by exactly one client (the group converges).

A failing seed replays exactly: `pytest tests/sim -k "seed_7"`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition
from kraftlite.groups.offsets import CommittedOffset
from tests.harness.inprocess import InProcessBroker

pytestmark = pytest.mark.sim

GROUP = "sim-group"
TOPIC = "events"
PARTITIONS = 12
SESSION_MS = 10_000  # the coordinator's default session timeout (GroupSettings)
FENCED = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH}


@dataclass
class Client:
    """A KIP-848 consumer as the coordinator sees it through its heartbeats."""

    member_id: str
    epoch: int = 0  # 0: not a member (joins at its next heartbeat)
    held: set[TopicPartition] = field(default_factory=set)
    to_release: set[TopicPartition] = field(default_factory=set)  # revoked, not yet let go
    last_heard_ms: int = 0
    stalled: bool = False

    def drop_everything(self) -> None:
        self.epoch, self.held, self.to_release = 0, set(), set()


def _partitions(answer: dict[str, object]) -> set[TopicPartition]:
    assignment = answer["assignment"]
    assert isinstance(assignment, list)
    return {(a["topic"], p) for a in assignment for p in a["partitions"]}


class Simulation:
    def __init__(self, node: InProcessBroker, rng: random.Random) -> None:
        self.node, self.rng = node, rng
        self.clients = [Client(f"member-{i}") for i in range(6)]
        self.accepted_commits = 0
        self.fenced_zombies = 0

    def now(self) -> int:
        return self.node.clock.monotonic_ms()

    def heartbeat(self, client: Client) -> None:
        coordinator = self.node.coordinator
        if client.to_release and self.rng.random() < 0.6:  # lets go of revoked ones later
            client.held -= client.to_release
            client.to_release = set()
        try:
            answer = coordinator.consumer_heartbeat(
                GROUP,
                client.member_id,
                client.epoch,
                "sim",
                [TOPIC] if client.epoch == 0 else None,
                frozenset(client.held) if client.epoch else None,
            )
        except KraftliteError as exc:
            assert exc.code in FENCED, exc
            client.drop_everything()  # fenced: it lets go of everything and joins again
            return
        target = _partitions(answer)
        client.epoch = int(answer["member_epoch"])
        client.to_release |= client.held - target
        client.held |= target  # takes the new ones at once
        client.last_heard_ms = self.now()

    async def commit(self, client: Client) -> None:
        if not client.held or not client.epoch:
            return
        tp = self.rng.choice(sorted(client.held))
        zombie = self.now() - client.last_heard_ms > SESSION_MS
        try:
            await self.node.coordinator.commit(
                GROUP, client.member_id, client.epoch, [(tp, CommittedOffset(0, ""))]
            )
        except KraftliteError as exc:
            assert exc.code in FENCED | {ErrorCode.STALE_MEMBER_EPOCH}, exc
            self.fenced_zombies += zombie
            return
        assert not zombie, f"{client.member_id} committed {tp} after its session expired"
        self.accepted_commits += 1

    def leave(self, client: Client) -> None:
        if not client.epoch:
            return
        try:
            self.node.coordinator.leave(GROUP, client.member_id)
        except KraftliteError as exc:  # it had expired while it stalled
            assert exc.code is ErrorCode.UNKNOWN_MEMBER_ID, exc
        client.drop_everything()

    def members(self) -> set[str]:
        try:
            described = self.node.coordinator.describe(GROUP)
        except KraftliteError as exc:  # every member gone, nothing committed yet
            assert exc.code is ErrorCode.GROUP_ID_NOT_FOUND, exc
            return set()
        return {m["member_id"] for m in described.get("members", [])}

    def check_one_holder(self) -> None:
        members = self.members()
        holders: dict[TopicPartition, str] = {}
        for client in self.clients:
            if client.member_id not in members or not client.epoch:
                continue  # expired (a zombie until it hears so) or never joined
            for tp in client.held:
                assert tp not in holders, f"{tp} held by {holders[tp]} and {client.member_id}"
                holders[tp] = client.member_id

    async def step(self) -> None:
        client = self.rng.choice(self.clients)
        roll = self.rng.random()
        if roll < 0.08:
            client.stalled = not client.stalled  # a GC pause, a SIGSTOP; or its end
        elif roll < 0.13:
            self.leave(client)
        elif roll < 0.3:
            await self.commit(client)
        elif not client.stalled:
            self.heartbeat(client)
        self.advance(self.rng.choice((50, 200, 1000, 3000)))
        self.check_one_holder()

    def advance(self, ms: int) -> None:
        self.node.clock.advance(ms)
        self.node.heartbeat()  # the broker's own lease with the controllers: not under test

    async def settle(self) -> None:
        for client in self.clients:
            client.stalled = False
        for _ in range(12):
            for client in self.clients:
                self.heartbeat(client)
                self.check_one_holder()
            self.advance(500)
        for client in self.clients:  # the last revocations let go of
            client.held -= client.to_release
            client.to_release = set()
            self.heartbeat(client)
        held = [tp for c in self.clients if c.epoch for tp in c.held]
        assert sorted(held) == [(TOPIC, p) for p in range(PARTITIONS)], held


@pytest.mark.parametrize("seed", range(24), ids=lambda s: f"seed_{s}")
async def test_a_group_under_seeded_joins_stalls_and_leaves_never_double_assigns(
    seed: int,
) -> None:
    async with InProcessBroker() as node:
        node.create_topic(TOPIC, partitions=PARTITIONS)
        simulation = Simulation(node, random.Random(seed))
        for _ in range(400):
            await simulation.step()
        await simulation.settle()
        # both sides of rule 7 were tried: members' commits taken, zombies' refused
        assert simulation.accepted_commits > 0 and simulation.fenced_zombies > 0
