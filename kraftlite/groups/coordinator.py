"""The group coordinator on a broker: groups whose `__consumer_offsets` partition this broker
leads, their membership (soft state) and their committed offsets (records in that partition).

Rules:
1. A group's coordinator is the leader of `__consumer_offsets` partition
   murmur2(group) % N (murmur2, not Python's hash(): every broker must agree). The topic is
   created on first use, replicated min(3, brokers) with retention off.
2. Committed offsets are records in that partition, appended with acks=all; the in-memory
   view changes only after the append is acknowledged, so what a client saw committed
   survives the loss of a broker.
3. A broker that becomes leader of an offsets partition (a new leader epoch) rebuilds its
   offsets by replaying the partition up to its log end (every record there was written by
   an ISR leader and stays), and starts every group with the assignment freeze of
   `group.Group` rule 6: members rejoin and get partitions one session later.
4. Reads create no state: describe, offsets, heartbeat, leave and a refused commit never
   make a group. A group exists while it has members or committed offsets; a `Group` with
   no members is dropped at once (it holds nothing a new one would not), and silent members
   are expired by a sweep at most every `min_session_timeout_ms`, so an abandoned group goes
   too. A group unknown to describe is GROUP_ID_NOT_FOUND (KIP-848's
   ConsumerGroupDescribe); its offsets are an empty list (Kafka's OffsetFetch).
5. A commit is checked before anything is written, in Kafka's order: what (`offsets`:
   count, metadata size, partitions that exist), who (`group.Group` rule 7), then
   0 <= offset <= high watermark (which may ask a leader), then who again (membership may
   have moved meanwhile); the batch must fit `max.message.bytes` of the offsets topic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from kraftlite.broker.partition import Acks, Partition, Role
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition
from kraftlite.groups.classic import ClassicGroup
from kraftlite.groups.group import DEFAULT_MAX_SIZE, Group, MemberAnswer
from kraftlite.groups.offsets import (
    DEFAULT_OFFSET_METADATA_MAX_BYTES,
    CommittedOffset,
    check_count,
    check_in_range,
    check_metadata,
    check_partitions,
)
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.admin import CreateTopicRequest
from kraftlite.protocol.internal import GroupListing
from kraftlite.protocol.partitioner import partition_for_key

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker

log = structlog.get_logger(__name__)
OFFSETS_TOPIC = "__consumer_offsets"
_KEY_PREFIX = b"offset\x00"


@dataclass(frozen=True, slots=True)
class GroupSettings:
    offsets_partitions: int = 10  # offsets.topic.num.partitions (Kafka: 50)
    heartbeat_interval_ms: int = 1000
    default_session_timeout_ms: int = 10_000
    min_session_timeout_ms: int = 1_000
    max_session_timeout_ms: int = 30_000
    commit_timeout_s: float = 10.0
    offset_metadata_max_bytes: int = DEFAULT_OFFSET_METADATA_MAX_BYTES  # offset.metadata.max.bytes
    max_size: int = DEFAULT_MAX_SIZE  # group.consumer.max.size
    # classic groups (Kafka clients' JoinGroup protocol), with Kafka's names and defaults
    classic_min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    classic_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms


@dataclass
class Shard:
    """What this broker coordinates for one offsets partition, in one leader epoch.
    Invariant (rule 4): every `Group` in `groups` has members, once `drop_if_empty` or
    `sweep` has run after the request that changed it.
    """

    leader_epoch: int
    frozen_until_ms: int
    max_size: int = DEFAULT_MAX_SIZE
    groups: dict[str, Group] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    swept_ms: int = 0
    classic: dict[str, ClassicGroup] = field(default_factory=dict)  # Kafka clients' groups

    def group(self, name: str) -> Group:
        """The group, made if new: only for a join, the one request that adds a member."""
        existing = self.groups.get(name)
        if existing is None:
            existing = Group(name, frozen_until_ms=self.frozen_until_ms, max_size=self.max_size)
            self.groups[name] = existing
        return existing

    def existing(self, name: str, now_ms: int) -> Group:
        """The group's membership, or an empty one that is not kept (reads create nothing)."""
        group = self.groups.get(name)
        if group is None:
            return Group(name, frozen_until_ms=self.frozen_until_ms, max_size=self.max_size)
        group.expire(now_ms)
        self.drop_if_empty(name)
        return group

    def exists(self, name: str) -> bool:
        return name in self.groups or name in self.classic or bool(self.offsets.get(name))

    def drop_if_empty(self, name: str) -> None:
        group = self.groups.get(name)
        if group is not None and not group.members:
            del self.groups[name]

    def maybe_sweep(self, now_ms: int, interval_ms: int) -> None:
        """Expire silent members of every group, dropping groups left empty (rule 4)."""
        if now_ms - self.swept_ms < interval_ms:
            return
        self.swept_ms = now_ms
        for name, group in list(self.groups.items()):
            group.expire(now_ms)
            if not group.members:
                del self.groups[name]
        for name, classic in list(self.classic.items()):
            classic.expire()
            if not classic.members:  # its offsets, if any, stay in `offsets`
                classic.close()
                del self.classic[name]

    def close(self) -> None:
        """This broker stopped coordinating the partition: answer every waiting member."""
        for classic in self.classic.values():
            classic.close()


def offset_key(group: str, topic: str, partition: int) -> bytes:
    """The record key of a commit: a JSON array, so no name can break its parsing."""
    return _KEY_PREFIX + orjson.dumps([group, topic, partition])


class BadOffsetRecordError(ValueError):
    pass


def parse_offset_record(
    key: bytes | None, value: bytes | None
) -> tuple[str, TopicPartition, CommittedOffset | None] | None:
    """(group, partition, committed offset or None for a deletion); None for records that
    are not commits; BadOffsetRecordError for a commit record that cannot be read.
    """
    if key is None or not key.startswith(_KEY_PREFIX):
        return None
    try:
        group, topic, partition = orjson.loads(key[len(_KEY_PREFIX) :])
        tp = (str(topic), int(partition))
        if value is None:
            return str(group), tp, None
        data = orjson.loads(value)
        return str(group), tp, CommittedOffset(int(data["offset"]), str(data.get("metadata", "")))
    except (ValueError, TypeError, KeyError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise BadOffsetRecordError(f"unreadable offset commit record: {exc!r}") from None


class GroupCoordinator:
    def __init__(self, broker: Broker, settings: GroupSettings | None = None) -> None:
        self.broker = broker
        self.settings = settings or GroupSettings()
        self._shards: dict[int, Shard] = {}

    # -- routing ----------------------------------------------------------------------------

    def offsets_partition(self, group: str) -> int:
        return partition_for_key(group.encode(), self.settings.offsets_partitions)

    async def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use (any broker may; one wins)."""
        if self.broker.replicas.image.topic(OFFSETS_TOPIC) is not None:
            return
        live = len(self.broker.replicas.image.live_broker_ids())
        factor = max(1, min(3, live))
        wanted = CreateTopicRequest(
            OFFSETS_TOPIC,
            self.settings.offsets_partitions,
            factor,
            {"retention.ms": -1, "min.insync.replicas": min(2, factor)},
            internal=True,
        )
        try:
            await self.broker.admin_call(wanted)  # answered once this broker has it
        except KraftliteError as exc:
            if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            version = self.broker.replicas.image.version + 1
            await self.broker.wait_for_metadata(version, timeout_s=5.0)
        log.info("offsets_topic_created", partitions=self.settings.offsets_partitions)

    def coordinator_partition(self, group: str) -> Partition:
        """This broker's leader replica of the group's offsets partition, or
        NOT_COORDINATOR naming the coordinator.
        """
        index = self.offsets_partition(group)
        try:
            return self.broker.replicas.leader_partition(OFFSETS_TOPIC, index)
        except KraftliteError as exc:
            if exc.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise KraftliteError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, "the offsets topic is not ready yet"
                ) from None
            raise KraftliteError(
                ErrorCode.NOT_COORDINATOR,
                f"broker {self.broker.broker_id} does not coordinate group {group}",
                leader_id=exc.details.get("leader_id"),
                leader_url=exc.details.get("leader_url"),
            ) from None

    def _shard(self, group: str) -> tuple[Partition, Shard]:
        partition = self.coordinator_partition(group)
        shard = self._shard_of(partition)
        shard.maybe_sweep(self._now(), self.settings.min_session_timeout_ms)
        return partition, shard

    def _shard_of(self, partition: Partition) -> Shard:
        index = partition.index
        shard = self._shards.get(index)
        if shard is None or shard.leader_epoch != partition.leader_epoch:
            if shard is not None:
                shard.close()
            shard = self._load(partition)
            self._shards[index] = shard
        return shard

    def _load(self, partition: Partition) -> Shard:
        """Rule 3: replay the offsets partition."""
        now = self.broker.clock.monotonic_ms()
        # The first leader of the partition (epoch 0) has no predecessor whose members could
        # still hold partitions; any later one waits out the longest session first.
        freeze = self.settings.max_session_timeout_ms if partition.leader_epoch > 0 else 0
        shard = Shard(partition.leader_epoch, now + freeze, self.settings.max_size)
        log_ = partition.log
        offset, records = log_.log_start_offset, 0
        while offset < log_.log_end_offset:
            data = log_.read(offset, 8 << 20)
            if not data:
                break
            for decoded in batch_format.decode_stream(data):
                for record in decoded.records():
                    records += 1
                    try:
                        parsed = parse_offset_record(record.key, record.value)
                    except BadOffsetRecordError as exc:  # one bad record must not take
                        log.warning("offset_record_skipped", offset=record.offset, error=str(exc))
                        continue  # every group of this partition down
                    if parsed is None:
                        continue
                    group, tp, committed = parsed
                    offsets = shard.offsets.setdefault(group, {})
                    if committed is None:
                        offsets.pop(tp, None)
                        if not offsets:  # no offsets left: the group is gone (rule 4)
                            del shard.offsets[group]
                    else:
                        offsets[tp] = committed
                offset = decoded.header.next_offset
        log.info(
            "group_offsets_loaded",
            partition=partition.index,
            leader_epoch=partition.leader_epoch,
            records=records,
            groups=len(shard.offsets),
        )
        return shard

    # -- membership -------------------------------------------------------------------------

    def _counts(self, topics: Iterable[str]) -> dict[str, int]:
        image = self.broker.replicas.image
        counts = {}
        for name in topics:
            topic = image.topic(name)
            if topic is not None:
                counts[name] = len(topic.partitions)
        return counts

    def _now(self) -> int:
        return self.broker.clock.monotonic_ms()

    def join(
        self,
        group: str,
        member_id: str,
        client_id: str,
        topics: list[str],
        session_timeout_ms: int | None,
        *,
        reports: bool = False,
    ) -> dict[str, Any]:
        timeout = (
            min(self.settings.default_session_timeout_ms, self.settings.max_session_timeout_ms)
            if session_timeout_ms is None
            else session_timeout_ms
        )
        if (
            not self.settings.min_session_timeout_ms
            <= timeout
            <= self.settings.max_session_timeout_ms
        ):
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST,
                f"session_timeout_ms must be {self.settings.min_session_timeout_ms}-"
                f"{self.settings.max_session_timeout_ms}",
            )
        _, shard = self._shard(group)
        classic = shard.classic.get(group)
        if classic is not None and classic.members:
            raise KraftliteError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {group} is a classic group of Kafka clients (JoinGroup)",
            )
        try:
            answer = shard.group(group).join(
                member_id,
                client_id,
                topics,
                timeout,
                self._now(),
                self._counts(topics),
                reports=reports,
            )
        finally:  # a refused join leaves no group behind
            shard.drop_if_empty(group)
        return {**self._answer(answer), "session_timeout_ms": timeout}

    def heartbeat(self, group: str, member_id: str, member_epoch: int) -> dict[str, Any]:
        _, shard = self._shard(group)
        state = shard.existing(group, self._now())  # unknown group: UNKNOWN_MEMBER_ID
        topics = {t for m in state.members.values() for t in m.topics}
        answer = state.heartbeat(member_id, member_epoch, self._now(), self._counts(topics))
        return self._answer(answer)

    def consumer_heartbeat(  # noqa: PLR0917 - the heartbeat's fields
        self,
        group: str,
        member_id: str,
        member_epoch: int,
        client_id: str,
        topics: list[str] | None,
        reported: frozenset[TopicPartition] | None,
    ) -> dict[str, Any]:
        """KIP-848's heartbeat (group.py rule 9): epoch 0 joins, or rejoins a member that
        exists (a fenced client keeps its member id); any other epoch heartbeats."""
        _, shard = self._shard(group)
        state = shard.existing(group, self._now())
        if member_epoch == 0 and member_id not in state.members:
            return self.join(group, member_id, client_id, topics or [], None, reports=True)
        subscribed = {t for m in state.members.values() for t in m.topics} | set(topics or [])
        result = state.heartbeat(
            member_id,
            member_epoch,
            self._now(),
            self._counts(subscribed),
            topics=topics,
            reported=reported,
        )
        return self._answer(result)

    def leave(self, group: str, member_id: str) -> None:
        _, shard = self._shard(group)
        try:
            shard.existing(group, self._now()).leave(member_id, self._now())
        finally:
            shard.drop_if_empty(group)

    def _answer(self, answer: MemberAnswer) -> dict[str, Any]:
        return answer.to_json(self.settings.heartbeat_interval_ms)

    # -- classic groups (classic.py) --------------------------------------------------------

    def classic_for_join(self, group: str, session_timeout_ms: int) -> ClassicGroup:
        """The classic group a JoinGroup joins, made if new; a group name in use by
        kraftlite's own protocol is INCONSISTENT_GROUP_PROTOCOL."""
        low = self.settings.classic_min_session_timeout_ms
        high = self.settings.classic_max_session_timeout_ms
        if not low <= session_timeout_ms <= high:
            raise KraftliteError(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout {session_timeout_ms} ms is outside [{low}, {high}]",
            )
        partition, shard = self._shard(group)
        if shard.existing(group, self._now()).members:
            raise KraftliteError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {group} has members using kraftlite's consumer group protocol",
            )
        classic = shard.classic.get(group)
        if classic is None:
            classic = ClassicGroup(
                group,
                self._now,
                self.settings.max_size,
                self.settings.initial_rebalance_delay_ms,
                frozen_until_ms=shard.frozen_until_ms,
                still_coordinating=lambda: (
                    self._shards.get(partition.index) is shard
                    and partition.role is Role.LEADER
                    and partition.leader_epoch == shard.leader_epoch
                ),
            )
            shard.classic[group] = classic
        return classic

    def classic(self, group: str) -> ClassicGroup:
        """The classic group, for SyncGroup, Heartbeat and LeaveGroup: UNKNOWN_MEMBER_ID if
        there is none (the member must join)."""
        _, shard = self._shard(group)
        classic = shard.classic.get(group)
        if classic is None:
            raise KraftliteError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group} has no members")
        return classic

    def describe_classic(self, group: str) -> dict[str, Any] | None:
        """Kafka's DescribeGroups answer for a classic group, None if it is not one."""
        _, shard = self._shard(group)
        classic = shard.classic.get(group)
        return None if classic is None else classic.describe()

    # -- offsets ----------------------------------------------------------------------------

    async def commit(
        self,
        group: str,
        member_id: str | None,
        member_epoch: int | None,
        offsets: list[tuple[TopicPartition, CommittedOffset]],
        *,
        generation: int | None = None,
    ) -> None:
        """Rule 5, then rule 2: append the commit (acks=all), then make it visible.
        `generation` is a classic member's (Kafka's OffsetCommit), checked by its group."""
        partition, shard = self._shard(group)
        partitions = [tp for tp, _ in offsets]
        check_count(len(offsets))
        check_metadata(offsets, self.settings.offset_metadata_max_bytes)
        check_partitions(partitions, self._counts({topic for topic, _ in partitions}))
        self._check_member(shard, group, member_id, member_epoch, generation, partitions)
        check_in_range(offsets)
        now = self.broker.clock.now_ms()
        records = [
            batch_format.Record(
                value=orjson.dumps({"offset": c.offset, "metadata": c.metadata, "ts": now}),
                key=offset_key(group, tp[0], tp[1]),
                timestamp=now,
            )
            for tp, c in offsets
        ]
        batch = batch_format.encode_records(records, now)
        limit = partition.config_int("max.message.bytes")
        if len(batch) > limit:  # Kafka: INVALID_COMMIT_OFFSET_SIZE
            raise KraftliteError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"the commit is {len(batch)} bytes, over max.message.bytes of {OFFSETS_TOPIC} "
                f"({limit}): commit fewer partitions or less metadata",
            )
        try:
            await partition.produce(batch, Acks.ALL, self.settings.commit_timeout_s)
        except KraftliteError as exc:
            if exc.code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise KraftliteError(
                    ErrorCode.NOT_COORDINATOR, f"coordinator moved during the commit: {exc.message}"
                ) from None
            raise
        if self._shards.get(partition.index) is shard and partition.role is Role.LEADER:
            target = shard.offsets.setdefault(group, {})
            for tp, committed in offsets:
                target[tp] = committed

    def _check_member(  # noqa: PLR0917 - the commit's parts, as commit() has them
        self,
        shard: Shard,
        group: str,
        member_id: str | None,
        member_epoch: int | None,
        generation: int | None,
        partitions: list[TopicPartition],
    ) -> None:
        """Who may commit: a classic group's member of its generation (classic.py rule 5),
        else kraftlite's rule (group.Group rule 7). A commit outside any membership
        (generation -1, no member) is for a group with no members of either kind."""
        classic = shard.classic.get(group)
        if generation is not None and classic is not None and classic.members:
            classic.check_commit(member_id or "", generation)
            return
        if generation is not None:  # Kafka's OffsetCommit
            if member_id and member_id in shard.existing(group, self._now()).members:
                member_epoch = generation  # a KIP-848 member: its member epoch
            elif generation >= 0 or member_id:
                raise KraftliteError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id} is not a member of {group}"
                )
            else:
                member_id = member_epoch = None
        elif classic is not None and classic.members:
            raise KraftliteError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"group {group} is a classic group of Kafka clients: commit as one of them",
            )
        shard.existing(group, self._now()).check_commit(
            member_id, member_epoch, partitions, self._now()
        )

    async def delete_group(self, group: str) -> None:
        """Kafka's DeleteGroups: a group with no members loses its committed offsets (one
        tombstone per partition, appended with acks=all before the view forgets them).
        GROUP_ID_NOT_FOUND if it has none, GROUP_NOT_EMPTY while it has members."""
        partition, shard = self._shard(group)
        classic = shard.classic.get(group)
        if shard.existing(group, self._now()).members or (classic and classic.members):
            raise KraftliteError(ErrorCode.GROUP_NOT_EMPTY, f"group {group} has members")
        committed = sorted(shard.offsets.get(group, {}))
        if not committed:
            raise KraftliteError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group} does not exist")
        now = self.broker.clock.now_ms()
        tombstones = [
            batch_format.Record(value=None, key=offset_key(group, t, p), timestamp=now)
            for t, p in committed
        ]
        try:
            await partition.produce(
                batch_format.encode_records(tombstones, now),
                Acks.ALL,
                self.settings.commit_timeout_s,
            )
        except KraftliteError as exc:
            if exc.code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise KraftliteError(ErrorCode.NOT_COORDINATOR, exc.message) from None
            raise
        if self._shards.get(partition.index) is shard and partition.role is Role.LEADER:
            remaining = shard.offsets.get(group, {})
            for tp in committed:  # only what was tombstoned: a commit meanwhile stays
                remaining.pop(tp, None)
            if not remaining:
                shard.offsets.pop(group, None)
            if classic is not None and not classic.members:
                classic.close()
                shard.classic.pop(group, None)

    def committed(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        _, shard = self._shard(group)
        return dict(shard.offsets.get(group, {}))

    def describe(self, group: str) -> dict[str, Any]:
        _, shard = self._shard(group)
        state = shard.existing(group, self._now())
        if not shard.exists(group):
            raise KraftliteError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"group {group} does not exist (no members and no committed offsets)",
            )
        return state.describe()

    def coordinated_offsets(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """The committed offsets of every group this broker coordinates now."""
        result: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        for index in range(self.settings.offsets_partitions):
            try:
                partition = self.broker.replicas.leader_partition(OFFSETS_TOPIC, index)
            except KraftliteError:
                continue
            for name, offsets in self._shard_of(partition).offsets.items():
                if offsets:
                    result[name] = dict(offsets)
        return result

    def local_groups(self) -> list[GroupListing]:
        """Groups this broker coordinates now, as `GET /v1/groups` lists them (each typed:
        protocol/internal.py; another broker asks for them with `GET /v1/internal/groups`,
        a GroupListResponse) and the Kafka edge's ListGroups answers them."""
        result: list[GroupListing] = []
        for index in range(self.settings.offsets_partitions):
            try:
                partition = self.broker.replicas.leader_partition(OFFSETS_TOPIC, index)
            except KraftliteError:
                continue
            shard = self._shard_of(partition)
            now = self._now()
            shard.maybe_sweep(now, 0)
            names = (
                set(shard.groups) | set(shard.classic) | {n for n, o in shard.offsets.items() if o}
            )
            for name in sorted(names):
                classic = shard.classic.get(name)
                if classic is not None and classic.members:
                    result.append(
                        {
                            "group": name,
                            "state": classic.state.value,
                            "members": len(classic.members),
                            "type": "classic",
                        }
                    )
                    continue
                state = shard.existing(name, now)
                result.append(
                    {
                        "group": name,
                        "state": state.state,
                        "members": len(state.members),
                        "type": "consumer",
                    }
                )
        return result
