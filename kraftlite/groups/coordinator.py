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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from kraftlite.api.headers import METADATA_VERSION
from kraftlite.broker.partition import Acks, Partition, Role
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition
from kraftlite.groups.group import Group, MemberAnswer
from kraftlite.protocol import batch as batch_format
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


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str


@dataclass
class Shard:
    """What this broker coordinates for one offsets partition, in one leader epoch."""

    leader_epoch: int
    frozen_until_ms: int
    groups: dict[str, Group] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)

    def group(self, name: str) -> Group:
        return self.groups.setdefault(name, Group(name, frozen_until_ms=self.frozen_until_ms))


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
        body = {
            "name": OFFSETS_TOPIC,
            "internal": True,
            "partitions": self.settings.offsets_partitions,
            "replication_factor": factor,
            "configs": {"retention.ms": -1, "min.insync.replicas": min(2, factor)},
        }
        try:
            _, _, headers = await self.broker.controllers.call_with_headers(
                "POST", "/v1/topics", body
            )
            version = int(headers.get(METADATA_VERSION, "0"))
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
        return partition, self._shard_of(partition)

    def _shard_of(self, partition: Partition) -> Shard:
        index = partition.index
        shard = self._shards.get(index)
        if shard is None or shard.leader_epoch != partition.leader_epoch:
            shard = self._load(partition)
            self._shards[index] = shard
        return shard

    def _load(self, partition: Partition) -> Shard:
        """Rule 3: replay the offsets partition."""
        now = self.broker.clock.monotonic_ms()
        # The first leader of the partition (epoch 0) has no predecessor whose members could
        # still hold partitions; any later one waits out the longest session first.
        freeze = self.settings.max_session_timeout_ms if partition.leader_epoch > 0 else 0
        shard = Shard(partition.leader_epoch, now + freeze)
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
    ) -> dict[str, Any]:
        timeout = session_timeout_ms or self.settings.default_session_timeout_ms
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
        answer = shard.group(group).join(
            member_id, client_id, topics, timeout, self._now(), self._counts(topics)
        )
        return {**self._answer(answer), "session_timeout_ms": timeout}

    def heartbeat(self, group: str, member_id: str, member_epoch: int) -> dict[str, Any]:
        _, shard = self._shard(group)
        state = shard.group(group)
        topics = {t for m in state.members.values() for t in m.topics}
        answer = state.heartbeat(member_id, member_epoch, self._now(), self._counts(topics))
        return self._answer(answer)

    def leave(self, group: str, member_id: str) -> None:
        _, shard = self._shard(group)
        shard.group(group).leave(member_id, self._now())

    def _answer(self, answer: MemberAnswer) -> dict[str, Any]:
        return answer.to_json(self.settings.heartbeat_interval_ms)

    # -- offsets ----------------------------------------------------------------------------

    async def commit(
        self,
        group: str,
        member_id: str | None,
        member_epoch: int | None,
        offsets: list[tuple[TopicPartition, CommittedOffset]],
    ) -> None:
        """Rule 2: append the commit (acks=all), then make it visible."""
        partition, shard = self._shard(group)
        shard.group(group).check_commit(
            member_id, member_epoch, [tp for tp, _ in offsets], self._now()
        )
        now = self.broker.clock.now_ms()
        records = [
            batch_format.Record(
                value=orjson.dumps({"offset": c.offset, "metadata": c.metadata, "ts": now}),
                key=offset_key(group, tp[0], tp[1]),
                timestamp=now,
            )
            for tp, c in offsets
        ]
        try:
            await partition.produce(
                batch_format.encode_records(records, now), Acks.ALL, self.settings.commit_timeout_s
            )
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

    def committed(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        _, shard = self._shard(group)
        return dict(shard.offsets.get(group, {}))

    def describe(self, group: str) -> dict[str, Any]:
        _, shard = self._shard(group)
        state = shard.group(group)
        state.expire(self._now())
        return state.describe()

    def local_groups(self) -> list[dict[str, Any]]:
        """Groups this broker coordinates now (for GET /v1/groups)."""
        result = []
        for index in range(self.settings.offsets_partitions):
            try:
                partition = self.broker.replicas.leader_partition(OFFSETS_TOPIC, index)
            except KraftliteError:
                continue
            shard = self._shard_of(partition)
            names = set(shard.groups) | set(shard.offsets)
            for name in sorted(names):
                state = shard.group(name)
                state.expire(self._now())
                result.append({"group": name, "state": state.state, "members": len(state.members)})
        return result
