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
6. A coordinator that took over without knowing who owned what (its predecessor did not
   record its members: members_log.py rule 4) hands out no partition before
   `frozen_until_ms` (one session timeout), by which time every member of the previous
   coordinator has either joined again (holding nothing) or expired.
7. Commits are fenced (KIP-848's OffsetCommit rules, Kafka's ConsumerGroup
   .validateOffsetCommit): a commit naming a member must come from a live member
   (UNKNOWN_MEMBER_ID), with an epoch no newer than its current one (FENCED_MEMBER_EPOCH),
   for partitions it owns (FENCED_MEMBER_EPOCH, the contract's answer to a zombie), and with
   an epoch no older than the one at which it was given each of them (STALE_MEMBER_EPOCH:
   Kafka's assignment-epoch check). An older epoch is fine otherwise: our epochs move on as
   soon as an answer changes the assignment, so a member commits what it is told to release
   with the epoch it consumed under. A commit without a member id (an admin tool, a
   standalone consumer, a Spark job) is accepted only while the group has no members, as
   Kafka accepts a commit with member epoch -1 only for an empty group (UNKNOWN_MEMBER_ID).
9. A KIP-848 client (Kafka's ConsumerGroupHeartbeat) takes a new epoch's assignment at
   once but lets go of revoked partitions only later, while it keeps heartbeating; it says
   what it holds (its heartbeat's partitions). For such a member a partition it was told
   to release stays its own until a heartbeat lists what it holds without it; a heartbeat
   that lists nothing confirms nothing. So rule 3 holds for it too.
8. A group holds at most `max_size` members (`group.consumer.max.size`): a new member of a
   full group is refused with GROUP_MAX_SIZE_REACHED; a retried join of a member is not new.
10. Static members (KIP-848's InstanceId, Kafka's GroupMetadataManager): a member may carry
   an instance id, held by one member at a time. Leaving with epoch -2 (a static member's
   leave, its process restarting) is temporary: the member stays `away`, owning its
   assignment (what it was told to release is released: it holds nothing now) until its
   session times out (rule 5), so nobody else gets those partitions meanwhile. A join
   (epoch 0) naming that instance id takes the away member over, under its own member id:
   the same assignment, owned since the same epochs, and the same member epoch, so nothing
   moves unless the target moved. While the holder is active, a join naming its instance
   id under another member id is UNRELEASED_INSTANCE_ID (the same member id joining again
   is a retry); a heartbeat or leave naming the instance id with another member id is
   FENCED_INSTANCE_ID, an instance id nobody holds UNKNOWN_MEMBER_ID. An away member's
   heartbeats and commits are FENCED_MEMBER_EPOCH (it must join again), and so is a join
   naming its member id but not its instance id (Kafka's answer to an epoch-0 heartbeat
   for a member at epoch -2), which changes nothing: only its instance takes it over, so
   nobody else extends its session and its partitions are freed when that ends. Epoch -1
   leaves for good.
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
    # What the member owns (rule 2), each partition with the member epoch at which it was
    # given and owned without a break since (its "assignment epoch", rule 7).
    owned_since: dict[TopicPartition, int] = field(default_factory=dict)
    confirmed_epoch: int = 0  # the last epoch the member confirmed holding
    reports: bool = False  # a KIP-848 client: it says what it holds (rule 9)
    instance_id: str | None = None  # a static member's group.instance.id (rule 10)
    away: bool = False  # left with epoch -2: keeps its assignment for its session (rule 10)

    @property
    def owned(self) -> frozenset[TopicPartition]:
        return frozenset(self.owned_since)


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


DEFAULT_MAX_SIZE = 200  # group.consumer.max.size (Kafka: unbounded; see docs/design/groups.md)


@dataclass
class Group:
    """Mutated only by `join`, `heartbeat` (which takes new subscriptions too), `leave` and
    `expire`; `check_commit` and the
    views change nothing but expire silent members. Invariants: no partition is in two
    members' `owned`; `len(members) <= max_size`.
    """

    name: str
    frozen_until_ms: int = 0
    max_size: int = DEFAULT_MAX_SIZE
    members: dict[str, Member] = field(default_factory=dict)
    # members changed since the coordinator last recorded them (members_log.py rule 1;
    # members removed it finds by their absence)
    touched: set[str] = field(default_factory=set)

    # -- membership -----------------------------------------------------------------------

    def join(  # noqa: PLR0917 - a join request's fields
        self,
        member_id: str,
        client_id: str,
        topics: Iterable[str],
        session_timeout_ms: int,
        now_ms: int,
        partition_counts: Mapping[str, int],
        *,
        reports: bool = False,
        instance_id: str | None = None,
    ) -> MemberAnswer:
        self.expire(now_ms)
        holder = None if instance_id is None else self.static_member(instance_id)
        if holder is not None and (holder.away or holder.member_id != member_id):  # rule 10
            if not holder.away:
                raise KraftliteError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"instance id {instance_id} of group {self.name} is held by an active "
                    "member: it must leave (epoch -2) or time out first",
                )
            return self._take_over(
                holder,
                member_id,
                client_id,
                topics,
                session_timeout_ms,
                now_ms,
                partition_counts,
                reports=reports,
            )
        existing = self.members.get(member_id)
        if existing is not None and existing.away:  # rule 10: not its instance (else taken
            raise KraftliteError(  # over above); its session is not this request's to keep
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member {member_id} of group {self.name} left (epoch -2) as a static member: "
                "only a join naming its instance id takes it over; join with another member id",
            )
        if existing is not None:  # a retried join (its answer was lost): the same member
            existing.last_seen_ms = now_ms
            return MemberAnswer(member_id, existing.epoch, existing.assignment)
        if len(self.members) >= self.max_size:  # rule 8
            raise KraftliteError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"group {self.name} has {len(self.members)} members, its maximum "
                "(group.consumer.max.size)",
            )
        self.members[member_id] = Member(
            member_id,
            client_id,
            frozenset(topics),
            session_timeout_ms,
            now_ms,
            reports=reports,
            instance_id=instance_id,
        )
        self.touched.add(member_id)
        return self._answer(member_id, now_ms, partition_counts)

    def _take_over(  # noqa: PLR0917 - a join request's fields
        self,
        away: Member,
        member_id: str,
        client_id: str,
        topics: Iterable[str],
        session_timeout_ms: int,
        now_ms: int,
        partition_counts: Mapping[str, int],
        *,
        reports: bool,
    ) -> MemberAnswer:
        """Rule 10: a static member back under `member_id` (new or its old one) takes over
        what its away self owned, at the same epoch."""
        if member_id != away.member_id and member_id in self.members:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST,
                f"member id {member_id} is another member's in group {self.name}",
            )
        del self.members[away.member_id]
        self.members[member_id] = Member(
            member_id,
            client_id,
            frozenset(topics),
            session_timeout_ms,
            now_ms,
            epoch=away.epoch,
            assignment=away.assignment,
            owned_since=dict(away.owned_since),
            confirmed_epoch=away.confirmed_epoch,
            reports=reports,
            instance_id=away.instance_id,
        )
        self.touched.add(member_id)
        return self._answer(member_id, now_ms, partition_counts)

    def static_member(self, instance_id: str) -> Member | None:
        """The member holding this instance id, if any (rule 10)."""
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def _check_instance(self, member_id: str, instance_id: str | None) -> None:
        """Rule 10: a request naming an instance id speaks for the member holding it."""
        if instance_id is None:
            return
        holder = self.static_member(instance_id)
        if holder is None:
            raise KraftliteError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"no member of group {self.name} holds instance id {instance_id}: join again",
            )
        if holder.member_id != member_id:
            raise KraftliteError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"instance id {instance_id} of group {self.name} is held by another member",
            )

    def heartbeat(
        self,
        member_id: str,
        member_epoch: int,
        now_ms: int,
        partition_counts: Mapping[str, int],
        *,
        topics: Iterable[str] | None = None,
        reported: frozenset[TopicPartition] | None = None,
        instance_id: str | None = None,
    ) -> MemberAnswer:
        """Rule 2, and 9 for a member that reports what it holds (`reported`, KIP-848's
        heartbeat; None: nothing said). `topics`: a new subscription, taken once the epoch
        checked out."""
        self.expire(now_ms)
        self._check_instance(member_id, instance_id)
        member = self._member(member_id)
        self._check_present(member)
        if member_epoch > member.epoch:
            raise KraftliteError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member {member_id} sent epoch {member_epoch}; the current one is {member.epoch}",
            )
        member.last_seen_ms = now_ms
        self.touched.add(member_id)
        if topics is not None:
            member.topics = frozenset(topics)
        if member.reports:  # rule 9: released is what it says it no longer holds
            if reported is not None:
                member.owned_since = {
                    tp: since
                    for tp, since in member.owned_since.items()
                    if tp in member.assignment or tp in reported
                }
                if reported == member.assignment:
                    member.confirmed_epoch = member.epoch
        elif member_epoch == member.epoch:  # rule 2: it holds exactly its last answer
            member.owned_since = {
                tp: since for tp, since in member.owned_since.items() if tp in member.assignment
            }
            member.confirmed_epoch = member_epoch
        return self._answer(member_id, now_ms, partition_counts)

    def leave(
        self,
        member_id: str,
        now_ms: int,
        *,
        instance_id: str | None = None,
        temporary: bool = False,
    ) -> None:
        """The member leaves; a static member (`instance_id`) leaving `temporary` (epoch -2)
        stays away, owning its assignment, until its session ends (rule 10)."""
        self.expire(now_ms)
        self._check_instance(member_id, instance_id)
        member = self._member(member_id)
        if instance_id is not None and temporary:
            self.touched.add(member_id)
            member.away = True
            member.last_seen_ms = now_ms
            member.owned_since = {
                tp: since for tp, since in member.owned_since.items() if tp in member.assignment
            }
            return
        del self.members[member_id]

    @staticmethod
    def _check_present(member: Member) -> None:
        if member.away:
            raise KraftliteError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member {member.member_id} left the group (epoch -2): join again with epoch 0",
            )

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
            tp for m in self.members.values() if m.member_id != member_id for tp in m.owned_since
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
            for tp in new:  # what it is told to release it still owns, since it was given
                member.owned_since.setdefault(tp, member.epoch)
        return MemberAnswer(member_id, member.epoch, member.assignment)

    # -- commits ----------------------------------------------------------------------------

    def check_commit(
        self,
        member_id: str | None,
        member_epoch: int | None,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> None:
        """Rule 7: raise unless this commit may be applied. Changes nothing but expiry."""
        self.expire(now_ms)
        wanted = sorted(set(partitions))
        if member_id is None:
            if self.members:
                raise KraftliteError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"group {self.name} has {len(self.members)} members: commit as a member "
                    "(member_id and member_epoch); a commit without one is only for a group "
                    "with no members",
                )
            return
        member = self._member(member_id)
        self._check_present(member)
        if member_epoch is None:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST, "a commit with member_id needs its member_epoch"
            )
        if member_epoch > member.epoch:
            raise KraftliteError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member {member_id} sent epoch {member_epoch}; the current one is {member.epoch}",
            )
        foreign = [tp for tp in wanted if tp not in member.owned_since]
        if foreign:
            raise KraftliteError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member {member_id} (epoch {member_epoch}, current {member.epoch}) does not own "
                f"{foreign}",
            )
        older = [tp for tp in wanted if member_epoch < member.owned_since[tp]]
        if older:
            raise KraftliteError(
                ErrorCode.STALE_MEMBER_EPOCH,
                f"member {member_id} sent epoch {member_epoch}, older than the epoch at which "
                f"it was given {older} (current {member.epoch}): a commit from before it "
                "owned them",
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
