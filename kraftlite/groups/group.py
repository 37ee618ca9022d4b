"""One consumer group's membership and assignment, on the coordinator. Pure: time is an
argument, ids come from the caller.

Rules (server-side assignment in the spirit of KIP-848):
1. The target assignment comes from the uniform sticky assignor over live members.
2. A member *owns* what it was last given plus what it was told to release but has not yet
   confirmed releasing. A heartbeat carrying the epoch of the last answer confirms that it
   holds exactly that answer's partitions.
3. A partition goes to a member only while no other member owns it: at most one owner per
   partition in a group, at any time.
4. Each answer that changes a member's assignment bumps its member epoch. A heartbeat from
   an epoch above the current one, or for an unknown member, is refused (join again).
5. A member unheard for its session timeout is removed; what it owned is free.
6. A coordinator that just took over does not know who owned what: it hands out no
   partition before `frozen_until_ms` (one session timeout), by which time every member of
   the previous coordinator has either joined again (holding nothing) or expired.
7. Commits are fenced: a member may commit only partitions it owns; a commit without a
   member id is accepted only for partitions no member owns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition, assign


@dataclass
class Member:
    member_id: str
    client_id: str
    topics: frozenset[str]
    session_timeout_ms: int
    last_seen_ms: int
    epoch: int = 0
    assignment: frozenset[TopicPartition] = frozenset()
    owned: frozenset[TopicPartition] = frozenset()
    confirmed_epoch: int = 0  # the last epoch the member confirmed holding


@dataclass(frozen=True, slots=True)
class MemberAnswer:
    member_id: str
    member_epoch: int
    assignment: frozenset[TopicPartition]

    def to_json(self, heartbeat_interval_ms: int) -> dict[str, object]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.assignment):
            by_topic.setdefault(topic, []).append(partition)
        return {
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "assignment": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }


@dataclass
class Group:
    name: str
    frozen_until_ms: int = 0
    members: dict[str, Member] = field(default_factory=dict)

    # -- membership -----------------------------------------------------------------------

    def join(  # noqa: PLR0917 - a join request's fields
        self,
        member_id: str,
        client_id: str,
        topics: Iterable[str],
        session_timeout_ms: int,
        now_ms: int,
        partition_counts: Mapping[str, int],
    ) -> MemberAnswer:
        self.expire(now_ms)
        existing = self.members.get(member_id)
        if existing is not None:  # a retried join (its answer was lost): the same member
            existing.last_seen_ms = now_ms
            return MemberAnswer(member_id, existing.epoch, existing.assignment)
        self.members[member_id] = Member(
            member_id, client_id, frozenset(topics), session_timeout_ms, now_ms
        )
        return self._answer(member_id, now_ms, partition_counts)

    def heartbeat(
        self, member_id: str, member_epoch: int, now_ms: int, partition_counts: Mapping[str, int]
    ) -> MemberAnswer:
        self.expire(now_ms)
        member = self._member(member_id)
        if member_epoch > member.epoch:
            raise KraftliteError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member {member_id} sent epoch {member_epoch}; the current one is {member.epoch}",
            )
        member.last_seen_ms = now_ms
        if member_epoch == member.epoch:  # rule 2: it holds exactly its last answer
            member.owned = member.assignment
            member.confirmed_epoch = member_epoch
        return self._answer(member_id, now_ms, partition_counts)

    def leave(self, member_id: str, now_ms: int) -> None:
        self.expire(now_ms)
        self._member(member_id)
        del self.members[member_id]

    def expire(self, now_ms: int) -> list[str]:
        """Rule 5: remove members whose session ran out; their ids."""
        gone = [
            m.member_id
            for m in self.members.values()
            if now_ms - m.last_seen_ms > m.session_timeout_ms
        ]
        for member_id in gone:
            del self.members[member_id]
        return gone

    def _member(self, member_id: str) -> Member:
        member = self.members.get(member_id)
        if member is None:
            raise KraftliteError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"{member_id} is not a member of group {self.name} (expired or left): join again",
            )
        return member

    def _answer(
        self, member_id: str, now_ms: int, partition_counts: Mapping[str, int]
    ) -> MemberAnswer:
        member = self.members[member_id]
        target = assign(
            {m.member_id: m.topics for m in self.members.values()},
            partition_counts,
            {m.member_id: m.assignment for m in self.members.values()},
        )[member_id]
        owned_elsewhere = {
            tp for m in self.members.values() if m.member_id != member_id for tp in m.owned
        }
        kept = member.assignment & target
        if now_ms < self.frozen_until_ms:  # rule 6
            added: frozenset[TopicPartition] = frozenset()
        else:  # rule 3
            added = frozenset(tp for tp in target - kept if tp not in owned_elsewhere)
        new = kept | added
        if new != member.assignment or member.epoch == 0:
            member.epoch += 1  # rule 4
            member.assignment = new
            member.owned = member.owned | new  # what it is told to release it still owns
        return MemberAnswer(member_id, member.epoch, member.assignment)

    # -- commits ----------------------------------------------------------------------------

    def check_commit(
        self,
        member_id: str | None,
        member_epoch: int | None,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> None:
        """Rule 7: raise unless this commit may be applied."""
        self.expire(now_ms)
        wanted = set(partitions)
        if member_id is None:
            owned = {tp for m in self.members.values() for tp in m.owned}
            if wanted & owned:
                raise KraftliteError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"partitions {sorted(wanted & owned)} are owned by members of {self.name}; "
                    "commit as the member that owns them",
                )
            return
        member = self._member(member_id)
        foreign = wanted - member.owned
        if foreign:
            raise KraftliteError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member {member_id} (epoch {member_epoch}, current {member.epoch}) does not own "
                f"{sorted(foreign)}",
            )

    # -- views ------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        if not self.members:
            return "empty"
        settled = all(
            m.owned == m.assignment and m.confirmed_epoch == m.epoch for m in self.members.values()
        )
        return "stable" if settled else "reconciling"

    def describe(self) -> dict[str, object]:
        return {
            "group": self.name,
            "state": self.state,
            "members": [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "member_epoch": m.epoch,
                    "topics": sorted(m.topics),
                    "assignment": MemberAnswer(m.member_id, m.epoch, m.assignment).to_json(0)[
                        "assignment"
                    ],
                }
                for m in sorted(self.members.values(), key=lambda m: m.member_id)
            ],
        }
