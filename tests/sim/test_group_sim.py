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

With static members (group.py rule 10; `test_static_members_...`), half the clients carry an
instance id and also restart: cleanly (a leave with epoch -2, then a new process, under a new
member id, joins with the same instance id and takes the assignment over), by crashing (no
leave: the new process is UNRELEASED_INSTANCE_ID until the old member's session ends), or
split-brained (the old process pauses holding its partitions while a new one starts: the new
one waits as after a crash, and the old one, once it resumes, is FENCED_INSTANCE_ID, a fatal
error, as librdkafka has it). After every step, also:

- every member's owned set is disjoint from every other's, and what a client holds is within
  what its member owns (rules 2, 3 and 9);
- a member away after a temporary leave keeps exactly the assignment it left with, so nobody
  else is given its partitions;
- UNRELEASED_INSTANCE_ID is answered only while another member, present, holds the instance,
  FENCED_INSTANCE_ID only to a process whose instance another member id holds.

A failing seed replays exactly: `pytest tests/sim -k "seed_7"`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition
from kraftlite.groups.group import Group, Member
from kraftlite.groups.members_log import MemberState
from kraftlite.groups.offsets import CommittedOffset
from tests.harness.inprocess import InProcessBroker

pytestmark = pytest.mark.sim

GROUP = "sim-group"
TOPIC = "events"
PARTITIONS = 12
SESSION_MS = 10_000  # the coordinator's default session timeout (GroupSettings)
FENCED = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH}
MAX_PROCESSES = 10  # clients, split-brain twins included


@dataclass
class Client:
    """A KIP-848 consumer as the coordinator sees it through its heartbeats."""

    member_id: str
    epoch: int = 0  # 0: not a member (joins at its next heartbeat)
    held: set[TopicPartition] = field(default_factory=set)
    to_release: set[TopicPartition] = field(default_factory=set)  # revoked, not yet let go
    last_heard_ms: int = 0
    stalled: bool = False
    instance_id: str | None = None  # a static member's (group.py rule 10)
    dead: bool = False  # fenced by a newer process with its instance id: a fatal error

    def drop_everything(self) -> None:
        self.epoch, self.held, self.to_release = 0, set(), set()


def _partitions(answer: dict[str, object]) -> set[TopicPartition]:
    assignment = answer["assignment"]
    assert isinstance(assignment, list)
    return {(a["topic"], p) for a in assignment for p in a["partitions"]}


class Simulation:
    def __init__(self, node: InProcessBroker, rng: random.Random, static: int = 0) -> None:
        self.node, self.rng = node, rng
        self.clients = [Client(f"member-{i}") for i in range(6)]
        for i, client in enumerate(self.clients[:static]):
            client.instance_id = f"pod-{i}"
        self.accepted_commits = 0
        self.fenced_zombies = 0
        self.processes = 0  # processes started for static members (each a new member id)
        self.away: dict[str, frozenset[TopicPartition]] = {}  # member id -> its assignment
        self.counts = {"takeovers": 0, "unreleased": 0, "fenced_instances": 0}
        self.moves = 0

    def now(self) -> int:
        return self.node.clock.monotonic_ms()

    def group(self) -> Group | None:
        """The coordinator's state of the group (read, never changed, by the checks)."""
        _, shard = self.node.coordinator._shard(GROUP)
        return shard.groups.get(GROUP)

    def holder(self, instance_id: str) -> Member | None:
        group = self.group()
        return None if group is None else group.static_member(instance_id)

    async def heartbeat(self, client: Client) -> None:
        if client.dead:
            return
        coordinator = self.node.coordinator
        if client.to_release and self.rng.random() < 0.6:  # lets go of revoked ones later
            client.held -= client.to_release
            client.to_release = set()
        away = None if client.instance_id is None else self.holder(client.instance_id)
        taking_over = client.epoch == 0 and away is not None and away.away
        try:
            answer = await coordinator.consumer_heartbeat(
                GROUP,
                client.member_id,
                client.epoch,
                "sim",
                [TOPIC] if client.epoch == 0 else None,
                frozenset(client.held) if client.epoch else None,
                instance_id=client.instance_id,
            )
        except KraftliteError as exc:
            if exc.code is ErrorCode.UNRELEASED_INSTANCE_ID:  # another process has it: wait
                assert client.instance_id is not None and client.epoch == 0, exc
                holder = self.holder(client.instance_id)
                assert holder is not None and holder.member_id != client.member_id, exc
                assert not holder.away, exc
                self.counts["unreleased"] += 1
                return
            if exc.code is ErrorCode.FENCED_INSTANCE_ID:  # a newer process took its place
                assert client.instance_id is not None, exc
                holder = self.holder(client.instance_id)
                assert holder is not None and holder.member_id != client.member_id, exc
                self.counts["fenced_instances"] += 1
                client.drop_everything()
                client.dead = True  # fatal, as librdkafka has it
                return
            assert exc.code in FENCED, exc
            client.drop_everything()  # fenced: it lets go of everything and joins again
            return
        if taking_over:
            assert away is not None
            self.counts["takeovers"] += 1
            assert answer["member_epoch"] >= away.epoch  # an instance's epochs never go back
            self.away.pop(away.member_id, None)
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

    async def leave(self, client: Client, *, temporary: bool = False) -> None:
        if not client.epoch or client.dead:
            return
        group = self.group()
        member = None if group is None else group.members.get(client.member_id)
        try:
            await self.node.coordinator.leave(
                GROUP, client.member_id, instance_id=client.instance_id, temporary=temporary
            )
        except KraftliteError as exc:  # it had expired while it stalled (or, a static
            # member, its instance was taken over meanwhile)
            assert exc.code in {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID}, exc
        else:
            if temporary and member is not None:
                self.away[member.member_id] = member.assignment
        client.drop_everything()

    async def restart(self, client: Client) -> None:
        """A static member's process restarts: cleanly (a leave with epoch -2), by crashing
        (no leave), or split-brained (the old process pauses, keeping what it holds, while a
        new one starts). The new process has a new member id and joins at its next
        heartbeat with the same instance id."""
        assert client.instance_id is not None
        self.processes += 1
        roll = self.rng.random()
        if roll < 0.15 and len(self.clients) < MAX_PROCESSES:  # split brain
            client.stalled = True
            self.clients.append(
                Client(f"{client.instance_id}-p{self.processes}", instance_id=client.instance_id)
            )
            return
        if roll < 0.7:
            await self.leave(client, temporary=True)
        client.drop_everything()  # a new process holds nothing
        client.member_id = f"{client.instance_id}-p{self.processes}"
        client.stalled = False
        if self.rng.random() < 0.6:  # up again at once (else at one of its later steps)
            await self.heartbeat(client)

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
            if not client.epoch or client.dead:
                continue  # never joined, or let go of everything
            if client.member_id not in members and self.now() - client.last_heard_ms > SESSION_MS:
                continue  # expired (a zombie until it hears so: commits fence it, rule 7)
            for tp in client.held:
                assert tp not in holders, f"{tp} held by {holders[tp]} and {client.member_id}"
                holders[tp] = client.member_id
        group = self.group()
        if group is None:
            return
        owners: dict[TopicPartition, str] = {}
        for member in group.members.values():
            for tp in member.owned:
                assert tp not in owners, f"{tp} owned by {owners[tp]} and {member.member_id}"
                owners[tp] = member.member_id
        for client in self.clients:
            member = group.members.get(client.member_id)
            if member is not None and client.epoch and not client.dead:
                assert client.held <= member.owned, (client.member_id, client.held, member.owned)
        for member_id, assignment in list(self.away.items()):
            member = group.members.get(member_id)
            if member is None or not member.away:  # expired, or taken over
                del self.away[member_id]
            else:  # away: it keeps exactly what it left with, nobody else gets it
                assert member.assignment == assignment == member.owned, member

    def move(self) -> None:
        """The coordinator moves to one that replays the members its predecessor recorded
        (members_log.py): every member comes back as it was, with its session counted from
        the load, and so does one whose expiry had not been recorded yet (it owned its
        partitions until then, and nobody else was given them)."""
        before = self.group()
        snapshot = {} if before is None else before.members
        states = {m: MemberState.of(member) for m, member in snapshot.items()}
        self.node.move_coordinator(GROUP, predecessor_recorded=True)
        self.moves += 1
        after = self.group()
        restored = {} if after is None else after.members
        for member_id, state in states.items():
            assert MemberState.of(restored[member_id]) == state, member_id
        for client in self.clients:  # the new coordinator heard of its members now
            if client.member_id in restored:
                client.last_heard_ms = max(client.last_heard_ms, self.now())

    async def step(self) -> None:
        if self.rng.random() < 0.03:
            self.move()
        client = self.rng.choice(self.clients)
        roll = self.rng.random()
        if roll < 0.08:
            client.stalled = not client.stalled  # a GC pause, a SIGSTOP; or its end
        elif roll < 0.18 and client.instance_id is not None:
            if roll < 0.16:
                await self.restart(client)
            else:
                await self.leave(client)
        elif roll < 0.13:
            await self.leave(client)
        elif roll < 0.3:
            await self.commit(client)
        elif not client.stalled:
            await self.heartbeat(client)
        self.advance(self.rng.choice((50, 200, 1000, 3000)))
        self.check_one_holder()

    def advance(self, ms: int) -> None:
        self.node.clock.advance(ms)
        self.node.heartbeat()  # the broker's own lease with the controllers: not under test

    async def settle(self) -> None:
        for client in self.clients:
            client.stalled = False
        for _ in range(12 if len(self.clients) == 6 else 24):  # (past a session: an instance
            for client in self.clients:  # a crashed process held is free by then)
                await self.heartbeat(client)
                self.check_one_holder()
            self.advance(500)
        for client in self.clients:  # the last revocations let go of
            client.held -= client.to_release
            client.to_release = set()
            await self.heartbeat(client)
        held = [tp for c in self.clients if c.epoch and not c.dead for tp in c.held]
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
        # both sides of rule 7 were tried: members' commits taken, zombies' refused; and
        # the coordinator moved
        assert simulation.accepted_commits > 0 and simulation.fenced_zombies > 0
        assert simulation.moves > 0


async def run_static(seed: int) -> Simulation:
    async with InProcessBroker() as node:
        node.create_topic(TOPIC, partitions=PARTITIONS)
        simulation = Simulation(node, random.Random(seed), static=3)
        for _ in range(400):
            await simulation.step()
        await simulation.settle()
        assert simulation.accepted_commits > 0 and simulation.processes > 0
        return simulation


@pytest.mark.parametrize("seed", range(24), ids=lambda s: f"seed_{s}")
async def test_static_members_restarting_cleanly_crashing_and_split_brained_never_double_assign(
    seed: int,
) -> None:
    await run_static(seed)


async def test_the_static_simulation_takes_over_refuses_and_fences() -> None:
    """Over a few seeds, every path of rule 10 is taken: a restarted process taking its
    assignment over, a process refused while another holds its instance, a paused one
    fenced by its successor."""
    totals = {"takeovers": 0, "unreleased": 0, "fenced_instances": 0}
    for seed in range(6):
        for kind, count in (await run_static(seed)).counts.items():
            totals[kind] += count
    assert all(totals.values()), totals
