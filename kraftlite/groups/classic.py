"""Kafka's classic consumer group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
for the Kafka clients that use it (every client's default): the members agree on a
generation, one of them (the leader) computes the assignment with a client-side assignor,
and the coordinator hands each member its share. kraftlite's own groups (group.py, served
over HTTP and by KIP-848's heartbeat) assign on the server instead; a group name is one
kind or the other, never both (INCONSISTENT_GROUP_PROTOCOL).

Rules (Kafka's GroupCoordinator, trimmed to what clients rely on):
1. States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to
   PreparingRebalance whenever membership changes (a join, a leave, an expired session).
2. A JoinGroup waits until every known member has joined again, or the longest rebalance
   timeout passes, plus `initial_delay_ms` when the group starts from Empty (Kafka's
   group.initial.rebalance.delay.ms), so consumers starting together land in one
   generation. Then dynamic members that did not join again are removed (static ones stay:
   rule 8), the generation goes up by one, the protocol every member supports that most
   members prefer is chosen, the leader stays if it joined again (else one that did), and
   every waiting join is answered; only the leader's answer lists the members and their
   subscription metadata. A member that joins again with its member id while nothing
   changed for it (Stable and not the leader, or CompletingRebalance, with the same
   protocols and metadata) is told the current generation and starts no rebalance.
3. SyncGroup: the leader's carries the assignment; it makes the group Stable and answers
   every member's waiting SyncGroup with its share. A sync of a past generation is
   ILLEGAL_GENERATION; one while a rebalance is being prepared is REBALANCE_IN_PROGRESS.
4. Heartbeats keep a member's session; a member silent for its session timeout is removed,
   which starts a rebalance. A heartbeat during one answers REBALANCE_IN_PROGRESS, so the
   member joins again.
5. Offsets are committed by a member of the current generation, while the group is Stable
   or preparing a rebalance (a member commits what it processed before it gives its
   partitions up), not while the new assignment is in flux (REBALANCE_IN_PROGRESS); or,
   while the group has no members, by anyone with generation -1 (a consumer that assigns
   its own partitions).
6. Every wait is bounded: joins by the rebalance timeout; syncs by the leader, which must
   send the assignment within the rebalance timeout, or it is removed and the others
   join again. A ticker runs while a rebalance is under way; when this broker no longer
   coordinates the group it answers every waiter NOT_COORDINATOR (`close`).
7. Each generation is recorded (`record`, members_log.py rule 8, Kafka's GroupMetadata)
   once the leader's SyncGroup brings its assignment, before any member is answered: a
   coordinator that takes the group over (`restore`) has it Stable in that generation, and
   its members heartbeat on. While the record is written the generation is still being
   completed; a join meanwhile starts the next, and the leader is told
   REBALANCE_IN_PROGRESS. A record that fails fails the generation: everyone joins again.
8. Static membership (KIP-345, Kafka's ClassicGroup and GroupMetadataManager): a member
   with a `group.instance.id` keeps its place in the group while it is away (a restart
   sends no LeaveGroup), until its session times out. When it joins again with no member
   id it gets a new one that replaces the old (the old one's waiting join or sync, and any
   later request naming it with that instance id, is FENCED_INSTANCE_ID). A follower back
   in a Stable group whose protocol would not change, subscribing to the same topics,
   starts no rebalance: the join is answered at once with the current generation and its
   SyncGroup gets the assignment its old self had; the other members notice nothing.
   That holds for the leader too, as in Kafka (KIP-814): it leads again, and a JoinGroup
   v9+ answer says so with `skip_assignment` (the members listed, so its client watches
   their topics, but nothing to assign). Before v9 there is no such field, and the answer
   names its old member id as the leader, so it syncs as a follower; the next rebalance
   tells it it leads (until then no client watches the subscribed topics' partition
   counts: Kafka's trade-off too; a member that sees a new topic matching its subscription
   joins again, which rebalances). Otherwise (another state, another protocol or
   subscription) it rebalances as any join. Every
   request that names an instance id is checked against the member holding it (unknown:
   UNKNOWN_MEMBER_ID; another member id: FENCED_INSTANCE_ID); LeaveGroup may name members
   by instance id alone.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.members_log import ClassicMemberState, ClassicState

EMPTY_ASSIGNMENT = b""
_TICK_S = 0.25  # how often a group mid-rebalance checks for expired members and deadlines


class State(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]  # (assignor name, subscription metadata), preferred first
    last_seen_ms: int
    assignment: bytes = EMPTY_ASSIGNMENT
    join_waiter: asyncio.Future[dict[str, Any]] | None = None
    sync_waiter: asyncio.Future[tuple[ErrorCode | None, bytes]] | None = None

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class ClassicGroup:
    name: str
    now_ms: Callable[[], int]  # a monotonic clock
    max_size: int
    initial_delay_ms: int = 0
    # a new coordinator's members may still hold partitions from the old one: no generation
    # forms before this (the coordinator's assignment freeze, coordinator.py rule 3)
    frozen_until_ms: int = 0
    # asked by the ticker: does this broker still coordinate the group? (rule 6)
    still_coordinating: Callable[[], bool] = lambda: True
    # rule 7: records a generation before any member is told its assignment
    record: Callable[[ClassicState], Awaitable[None]] | None = None
    state: State = State.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    _deadline_ms: int = 0  # the join phase ends by then, whoever has not joined
    _earliest_ms: int = 0  # and not before (the initial delay)
    _ticker: asyncio.TimerHandle | None = None
    _closed: bool = False
    _recording: asyncio.Future[None] | None = None  # a generation's record being written

    # -- joining ---------------------------------------------------------------------------

    async def join(
        self,
        *,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        skip_assignment: bool = False,
    ) -> dict[str, Any]:
        """Rules 2 and 8: the JoinGroup answer once the generation is formed, or at once
        when nothing changes for the group (or a refusal). `skip_assignment`: the client
        reads JoinGroup v9's field of that name (rule 8)."""
        self._check_open()
        if not protocols or not protocol_type:
            raise KraftliteError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "no protocols offered")
        if self.members and protocol_type != self.protocol_type:
            raise KraftliteError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {self.name} uses protocol type {self.protocol_type}, not {protocol_type}",
            )
        # a static member back without its member id (rule 8): its old self is replaced
        replaced = None if member_id or instance_id is None else self.static_member(instance_id)
        offered = {name for name, _ in protocols}
        others = [
            m for m in self.members.values() if m.member_id != member_id and m is not replaced
        ]
        if others and not offered & self._common(offered, others):
            raise KraftliteError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"none of {sorted(offered)} is supported by every member of {self.name}",
            )
        now = self.now_ms()
        if member_id:
            member = self._validated(member_id, instance_id)
            unchanged = member.protocols == protocols
            self._update(member, protocols, session_timeout_ms, rebalance_timeout_ms, now)
            if unchanged and (
                self.state is State.COMPLETING_REBALANCE
                or (self.state is State.STABLE and member_id != self.leader)
            ):  # rule 2: nothing changed for the group; the current generation
                return self._join_answer(member, self.leader)
        elif replaced is not None:
            old_leader = self.leader
            same_topics = self.protocol_name is not None and same_subscription(
                protocol_type,
                replaced.metadata(self.protocol_name),
                next((m for name, m in protocols if name == self.protocol_name), None),
            )
            member = self._replace(replaced, client_id, client_host)
            self._update(member, protocols, session_timeout_ms, rebalance_timeout_ms, now)
            if (
                self.state is State.STABLE
                and same_topics
                and self._choose_protocol() == self.protocol_name
            ):  # rule 8: back, no rebalance; recorded before it is answered (rule 7), or
                # a new coordinator would bring the fenced member id back
                if self.record is not None:
                    await self._record_replacement(member)
                if old_leader == replaced.member_id and skip_assignment:
                    return {**self._join_answer(member, member.member_id), "skip_assignment": True}
                return self._join_answer(member, old_leader)
        else:
            if len(self.members) >= self.max_size:
                raise KraftliteError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {self.name} has {self.max_size}"
                )
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            member = Member(
                member_id,
                instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocols,
                now,
            )
            self.members[member_id] = member
        self.protocol_type = protocol_type
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_exception(
                KraftliteError(ErrorCode.REBALANCE_IN_PROGRESS, "joined again meanwhile")
            )
        member.join_waiter = asyncio.get_running_loop().create_future()
        waiter = member.join_waiter
        if self.state is not State.PREPARING_REBALANCE:
            self._prepare_rebalance(from_empty=self.state is State.EMPTY)
        self._maybe_complete_join()
        return await waiter

    @staticmethod
    def _update(
        member: Member,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        now: int,
    ) -> None:
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.last_seen_ms = now

    def static_member(self, instance_id: str) -> Member | None:
        """The member holding this group.instance.id, if any (at most one: rule 8)."""
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def _replace(self, old: Member, client_id: str, client_host: str) -> Member:
        """Rule 8: a new member id for a static member; the old one is fenced, its
        assignment (and leadership) carried over."""
        del self.members[old.member_id]
        self._fail_waiters(old, ErrorCode.FENCED_INSTANCE_ID)
        member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        member = Member(
            member_id,
            old.instance_id,
            client_id,
            client_host,
            old.session_timeout_ms,
            old.rebalance_timeout_ms,
            old.protocols,
            old.last_seen_ms,
            assignment=old.assignment,
        )
        self.members[member_id] = member
        if self.leader == old.member_id:
            self.leader = member_id
        return member

    def _validated(self, member_id: str, instance_id: str | None) -> Member:
        """Kafka's ClassicGroup.validateMember: the member, if the request may speak for it."""
        if instance_id is not None:
            holder = self.static_member(instance_id)
            if holder is None:
                raise KraftliteError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"no member of {self.name} has group.instance.id {instance_id}",
                )
            if holder.member_id != member_id:
                raise KraftliteError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"group.instance.id {instance_id} of {self.name} is held by a newer member",
                )
        member = self.members.get(member_id)
        if member is None:
            raise KraftliteError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id} is not a member of {self.name}"
            )
        return member

    def _join_answer(self, member: Member, leader: str | None) -> dict[str, Any]:
        """The JoinGroup answer of the current generation; the member list for the leader."""
        everyone = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "metadata": m.metadata(self.protocol_name or ""),
            }
            for m in self.members.values()
        ]
        return {
            "generation_id": self.generation,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "leader": leader,
            "member_id": member.member_id,
            "members": everyone if member.member_id == leader else [],
        }

    @staticmethod
    def _common(offered: set[str], members: list[Member]) -> set[str]:
        common = set(offered)
        for member in members:
            common &= {name for name, _ in member.protocols}
        return common

    def _prepare_rebalance(self, *, from_empty: bool = False) -> None:
        """Rule 1: everyone must join again; a pending sync learns it must too."""
        for member in self.members.values():
            self._answer_sync(member, ErrorCode.REBALANCE_IN_PROGRESS, EMPTY_ASSIGNMENT)
        self.state = State.PREPARING_REBALANCE
        longest = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        delay = self.initial_delay_ms if from_empty else 0
        now = self.now_ms()
        self._earliest_ms = max(now + delay, self.frozen_until_ms)
        self._deadline_ms = max(now + longest, self._earliest_ms)
        self._tick_later()

    def _maybe_complete_join(self) -> None:
        if self.state is not State.PREPARING_REBALANCE:
            return
        now = self.now_ms()
        everyone = all(m.join_waiter is not None for m in self.members.values())
        if (everyone and now >= self._earliest_ms) or now >= self._deadline_ms:
            self._complete_join()

    def _complete_join(self) -> None:
        """Rule 2: form the next generation from the members that joined (and the static
        members away, rule 8)."""
        for member_id in [
            m.member_id
            for m in self.members.values()
            if m.join_waiter is None and m.instance_id is None
        ]:
            del self.members[member_id]
        joined = [m for m in self.members.values() if m.join_waiter is not None]
        if self.members and not joined:  # only static members away: no one to lead yet;
            # wait on (Kafka does too) until one is back or their sessions end (`expire`)
            longest = max(m.rebalance_timeout_ms for m in self.members.values())
            self._deadline_ms = self.now_ms() + longest
            self._tick_later()
            return
        self.generation += 1
        if not self.members:
            self._to_empty()
            return
        self.protocol_name = self._choose_protocol()
        if self.leader not in self.members or self.members[self.leader].join_waiter is None:
            self.leader = joined[0].member_id
        self.state = State.COMPLETING_REBALANCE
        now = self.now_ms()
        longest = max(m.rebalance_timeout_ms for m in self.members.values())
        self._deadline_ms = now + longest  # by then the leader has sent the assignment
        for member in self.members.values():
            member.assignment = EMPTY_ASSIGNMENT
            waiter, member.join_waiter = member.join_waiter, None
            if waiter is not None:
                member.last_seen_ms = now
                if not waiter.done():
                    waiter.set_result(self._join_answer(member, self.leader))
        self._tick_later()

    def _choose_protocol(self) -> str:
        members = list(self.members.values())
        candidates = self._common({n for n, _ in members[0].protocols}, members)
        votes: dict[str, int] = dict.fromkeys(candidates, 0)
        for member in members:
            first = next(name for name, _ in member.protocols if name in candidates)
            votes[first] += 1
        return max(sorted(votes), key=lambda name: votes[name])

    def _to_empty(self) -> None:
        self.state = State.EMPTY
        self.protocol_name = None
        self.protocol_type = None
        self.leader = None

    # -- syncing ---------------------------------------------------------------------------

    async def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes],
        instance_id: str | None = None,
    ) -> tuple[str | None, str | None, bytes]:
        """Rule 3: (protocol type, protocol name, this member's assignment)."""
        self._check_open()
        self._validated(member_id, instance_id)
        member = self._member(member_id, generation)
        if self.state is State.STABLE:
            return self.protocol_type, self.protocol_name, member.assignment
        if member_id == self.leader:
            if self._recording is not None:  # the leader's sync again, while the first's
                await asyncio.shield(self._recording)  # record is written: its outcome
                self._member(member_id, generation)
                if not self._stable():  # (the first's record failed, or a join came)
                    raise KraftliteError(
                        ErrorCode.REBALANCE_IN_PROGRESS,
                        f"group {self.name} is rebalancing: join again",
                    )
                return self.protocol_type, self.protocol_name, member.assignment
            given = {m: assignments.get(m, EMPTY_ASSIGNMENT) for m in self.members}
            if self.record is not None:  # rule 7: in the log before anyone is told
                self._recording = asyncio.get_running_loop().create_future()
                try:
                    await self._record(generation, given)
                finally:
                    self._recording.set_result(None)
                    self._recording = None
            for other in self.members.values():
                other.assignment = given.get(other.member_id, EMPTY_ASSIGNMENT)
            self.state = State.STABLE
            for other in self.members.values():
                self._answer_sync(other, None, other.assignment)
            return self.protocol_type, self.protocol_name, member.assignment
        if member.sync_waiter is None or member.sync_waiter.done():
            member.sync_waiter = asyncio.get_running_loop().create_future()
        code, assignment = await member.sync_waiter
        if code is not None:
            raise KraftliteError(code, f"group {self.name} is rebalancing: join again")
        return self.protocol_type, self.protocol_name, assignment

    async def _record(self, generation: int, given: dict[str, bytes]) -> None:
        """Rule 7: the generation's snapshot recorded; then it must still be the one being
        completed (a join meanwhile starts another: REBALANCE_IN_PROGRESS). A snapshot not
        recorded fails the generation: every member joins again."""
        assert self.record is not None
        snapshot = self.snapshot(given)
        try:
            await self.record(snapshot)
        except KraftliteError:
            if self.generation == generation and self.state is State.COMPLETING_REBALANCE:
                self._prepare_rebalance()
            raise
        self._check_open()
        if self.generation != generation or self.state is not State.COMPLETING_REBALANCE:
            raise KraftliteError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.name} is rebalancing: join again"
            )
        if set(given) != set(self.members):  # someone left or expired meanwhile
            self._prepare_rebalance()
            raise KraftliteError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.name} is rebalancing: join again"
            )

    def _stable(self) -> bool:
        return self.state is State.STABLE

    async def _record_replacement(self, member: Member) -> None:
        """Rule 8 with rule 7: a static member's new member id, recorded before its join
        is answered. Not recorded: the group rebalances (its members join again)."""
        assert self.record is not None
        generation = self.generation
        try:
            await self.record(self.snapshot())
        except KraftliteError:
            if self.generation == generation and self.state is State.STABLE:
                self._prepare_rebalance()
            raise
        self._check_open()
        if (
            self.generation != generation
            or self.state is not State.STABLE
            or self.members.get(member.member_id) is not member
        ):
            raise KraftliteError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.name} is rebalancing: join again"
            )

    def snapshot(self, given: dict[str, bytes] | None = None) -> ClassicState:
        """Rule 7: this generation as a record holds it (`given`: its assignments)."""
        return ClassicState(
            self.generation,
            self.protocol_type or "",
            self.protocol_name or "",
            self.leader or "",
            tuple(
                ClassicMemberState(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    tuple(m.protocols),
                    (given or {}).get(m.member_id, m.assignment),
                )
                for m in self.members.values()
            ),
        )

    def restore(self, state: ClassicState) -> None:
        """Rule 7: a recorded generation, Stable, its members heard now."""
        now = self.now_ms()
        self.state = State.STABLE
        self.generation = state.generation
        self.protocol_type = state.protocol_type
        self.protocol_name = state.protocol_name
        self.leader = state.leader
        self.members = {
            m.member_id: Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                list(m.protocols),
                now,
                assignment=m.assignment,
            )
            for m in state.members
        }

    @staticmethod
    def _answer_sync(member: Member, code: ErrorCode | None, assignment: bytes) -> None:
        waiter, member.sync_waiter = member.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((code, assignment))

    def _member(self, member_id: str, generation: int) -> Member:
        member = self.members.get(member_id)
        if member is None:
            raise KraftliteError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id} is not a member of {self.name}"
            )
        if self.state is State.PREPARING_REBALANCE:
            raise KraftliteError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.name} is rebalancing: join again"
            )
        if generation != self.generation:
            raise KraftliteError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not {self.name}'s current {self.generation}",
            )
        member.last_seen_ms = self.now_ms()
        return member

    # -- heartbeats, leaving, expiry -------------------------------------------------------

    def heartbeat(self, member_id: str, generation: int, instance_id: str | None = None) -> None:
        """Rule 4; raises the error the heartbeat answers."""
        self._check_open()
        self.expire()
        member = self._validated(member_id, instance_id)
        if self.state is State.PREPARING_REBALANCE:
            member.last_seen_ms = self.now_ms()
        self._member(member_id, generation)

    def leave(self, member_id: str, instance_id: str | None = None) -> None:
        """A member leaves, named by its member id or (a static member, LeaveGroup v3+) by
        its instance id alone; both named must agree (rule 8)."""
        self._check_open()
        if member_id:
            member = self._validated(member_id, instance_id)
        else:
            found = None if instance_id is None else self.static_member(instance_id)
            if found is None:
                raise KraftliteError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"no member of {self.name} has group.instance.id {instance_id}",
                )
            member = found
        del self.members[member.member_id]
        self._removed([member])

    def expire(self) -> None:
        """Remove members whose session ran out (a member waiting in a join is alive)."""
        now = self.now_ms()
        gone = [
            m
            for m in self.members.values()
            if m.join_waiter is None and now - m.last_seen_ms > m.session_timeout_ms
        ]
        if (
            self.state is State.COMPLETING_REBALANCE
            and now > self._deadline_ms
            and self.leader in self.members
        ):  # the leader never sent the assignment: it goes, the others join again
            gone.append(self.members[self.leader])
        for member in gone:
            self.members.pop(member.member_id, None)
        if gone:
            self._removed(gone)
        self._maybe_complete_join()

    def _fail_waiters(self, member: Member, code: ErrorCode) -> None:
        self._answer_sync(member, code, EMPTY_ASSIGNMENT)
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_exception(KraftliteError(code, "no longer a member"))

    def _removed(self, gone: list[Member]) -> None:
        for member in gone:
            self._fail_waiters(member, ErrorCode.UNKNOWN_MEMBER_ID)
        if not self.members:
            if self.state is not State.EMPTY:
                self.generation += 1
            self._to_empty()
        elif self.state is not State.PREPARING_REBALANCE:
            self._prepare_rebalance()
        else:
            self._maybe_complete_join()

    def _tick_later(self) -> None:
        """Rule 6: while mid-rebalance, look again soon (deadlines, silent members)."""
        if self._ticker is None and not self._closed:
            self._ticker = asyncio.get_running_loop().call_later(_TICK_S, self._tick)

    def _tick(self) -> None:
        self._ticker = None
        if self._closed:
            return
        if not self.still_coordinating():
            self.close()
            return
        self.expire()
        if self.state in {State.PREPARING_REBALANCE, State.COMPLETING_REBALANCE}:
            self._tick_later()

    # -- offsets, description, shutdown ------------------------------------------------------

    def check_commit(self, member_id: str, generation: int, instance_id: str | None = None) -> None:
        """Rule 5 (and rule 8's check of the instance id)."""
        self._check_open()
        self.expire()
        if generation < 0 and not member_id and instance_id is None:
            if self.members:  # Kafka's ClassicGroup.validateOffsetCommit: UNKNOWN_MEMBER_ID
                raise KraftliteError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"group {self.name} has members: commit as one of them",
                )
            return
        member = self._validated(member_id, instance_id)
        if generation != self.generation:
            raise KraftliteError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not {self.name}'s current {self.generation}",
            )
        if self.state is State.COMPLETING_REBALANCE:  # Kafka's: assignments are in flux
            raise KraftliteError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.name} is rebalancing: join again"
            )
        # Stable, or PreparingRebalance with the generation that owns the partitions: a
        # member commits what it processed before giving them up (Kafka allows it)
        member.last_seen_ms = self.now_ms()

    def describe(self) -> dict[str, Any]:
        self.expire()
        return {
            "group_state": self.state.value,
            "protocol_type": self.protocol_type or "",
            "protocol_data": self.protocol_name or "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(self.protocol_name)
                    if self.protocol_name
                    else b"",
                    "member_assignment": m.assignment,
                }
                for m in self.members.values()
            ],
        }

    def close(self) -> None:
        """Rule 6: this broker no longer coordinates the group."""
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for member in self.members.values():
            self._answer_sync(member, ErrorCode.NOT_COORDINATOR, EMPTY_ASSIGNMENT)
            if member.join_waiter is not None and not member.join_waiter.done():
                member.join_waiter.set_exception(
                    KraftliteError(ErrorCode.NOT_COORDINATOR, "the coordinator moved")
                )

    def _check_open(self) -> None:
        if self._closed:
            raise KraftliteError(ErrorCode.NOT_COORDINATOR, "the coordinator moved")


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a consumer's subscription metadata (Kafka's ConsumerProtocolSubscription,
    every version: int16 version, then the topics as an array of strings; what follows, user
    data, owned partitions, generation and rack, changes from one join to the next), or None
    when it cannot be read so."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        if not 0 <= count <= len(metadata):
            return None
        position, topics = 6, set()
        for _ in range(count):
            (size,) = struct.unpack_from(">h", metadata, position)
            position += 2
            if size < 0 or position + size > len(metadata):
                return None
            topics.add(metadata[position : position + size].decode())
            position += size
    except (struct.error, UnicodeDecodeError):
        return None
    return frozenset(topics)


def same_subscription(protocol_type: str, before: bytes, after: bytes | None) -> bool:
    """Rule 8: does a static member that joins again subscribe as it did? For consumers, the
    same topics; for any other protocol type (Kafka Connect's, say), the same metadata."""
    if after is None:
        return False
    if protocol_type == "consumer":
        topics_before, topics_after = subscribed_topics(before), subscribed_topics(after)
        if topics_before is not None and topics_after is not None:
            return topics_before == topics_after
    return before == after
