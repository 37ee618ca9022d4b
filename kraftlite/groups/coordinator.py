"""The group coordinator on a broker: groups whose `__consumer_offsets` partition this broker
leads, their membership (soft state) and their committed offsets (records in that partition).

Rules:
1. A group's coordinator is the leader of `__consumer_offsets` partition
   murmur2(group) % N (murmur2, not Python's hash(): every broker must agree). The topic is
   created on first use, replicated min(3, brokers) and compacted (`cleanup.policy`
   compact, as Kafka's): each partition keeps the last record of each group's partition,
   so it grows with live offsets, not with commits. One made before compaction (a data
   directory of an older kraftlite, retention off) is altered to compact by the broker
   leading its partition 0 (`run`).
2. Committed offsets are records in that partition, appended with acks=all; the in-memory
   view changes only after the append is acknowledged, so what a client saw committed
   survives the loss of a broker.
3. A broker that becomes leader of an offsets partition (a new leader epoch) rebuilds its
   offsets and its groups (rule 10) by replaying the partition up to its log end (every
   record there was written by an ISR leader and stays); groups it cannot trust start
   with the assignment freeze of `group.Group` rule 6: members rejoin and get partitions
   one session later. The replay
   reads what compaction left (live offsets, and what was committed since the last clean).
   A partition of at most INLINE_LOAD_BYTES is replayed at once; a larger one on the
   coordinator's loader thread, off the event loop, while its groups' requests are
   answered COORDINATOR_LOAD_IN_PROGRESS (retriable, as Kafka's); `run` starts it as soon
   as the leadership shows, and the result is kept only if the leadership is still the
   one it was read for. A replay that meets the cleaner reads each key's tombstone as any
   reader of a compacted log does: within `delete.retention.ms` (offsets.py's records are
   never older than that when they matter: a day by default).
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
6. Deleting a group's offsets (Kafka's OffsetDelete, `delete_offsets`), for both edges: the
   group must exist (GROUP_ID_NOT_FOUND); a classic group with members of a protocol type
   other than "consumer" is GROUP_NOT_EMPTY (Kafka's ClassicGroup.validateOffsetDelete).
   The topics it consumes are its KIP-848 members' subscriptions, or its classic members'
   read from their subscription metadata for the chosen protocol (unreadable, or no
   protocol chosen yet: every topic). Then offsets.py rule 6 decides; the tombstones are
   one batch appended with acks=all, as a commit is (rule 2), so the deletion survives a
   coordinator move; the view forgets an offset only once they are acknowledged. The log
   and the view must agree on what comes last, so a deletion waits for the group's commits
   in flight, and the group's new commits wait for the deletion (`_CommitGate`): without
   that, a commit appended before the tombstones but acknowledged after them would stay in
   the view while the log says deleted, and a coordinator move would lose it.
7. KIP-848's ConsumerGroupDescribe (`describe_consumer`): a group that does not exist, or
   is a classic group with members, is GROUP_ID_NOT_FOUND (Kafka: "not a consumer
   group"); a group with committed offsets and no members is an empty one. Each member
   with its subscription, its assignment and its target assignment (what the assignor
   would give it now, assignor.py). kraftlite keeps no group epoch: the group's epoch and
   its assignment epoch are its members' highest epoch (0 when it has none). The assignor
   runs over every subscribed partition, so a caller with a budget of items gets
   INVALID_REQUEST before it runs for a group whose answer may not fit
   (`description_bound`: members, their topics and assignments, and the subscribed
   topics' partitions).
9. Transactions (issue 27; docs/design/kafka-transactions.md [T5-T7, G1-G3]): a
   transactional commit (Kafka's TxnOffsetCommit) is a transactional batch of the
   producer's, appended as any commit is (rule 2), but its offsets stay pending under the
   producer id until the transaction's marker on the offsets partition: a commit marker
   makes them the group's committed offsets, an abort drops them. A replay does the same
   from the log's batches and markers. A read that must be stable (KIP-447's
   RequireStable) is told UNSTABLE_OFFSET_COMMIT for a partition with an offset pending.
8. Expiry (offsets.py rule 8): every `offsets.retention.check.interval.ms`, `run` expires
   the offsets of groups without members that have been idle past the retention,
   with tombstones appended as a deletion's are (rule 6: inside the group's gate, acks=all,
   the view changed once they are acknowledged); the compaction of the topic then drops
   the commits and, after `delete.retention.ms`, the tombstones. What this coordinator
   knows of the group's last member is in `Shard.last_member_ms`.
10. Groups are records of the offsets partition (members_log.py). KIP-848 members: every
   change of a member (join, heartbeat, leave, expiry) makes its records at once, in the
   order of the changes, and a shard's `_MemberWriter` appends them in that order with
   acks=all, many requests' in one batch; an answer goes out once every record made
   before it is acknowledged. A coordinator writes its marker first; one whose records
   cannot be written (not enough replicas, a timeout) drops its shard, whose view may be
   ahead of the log, and the next request replays the log. A new coordinator takes the
   members over when its predecessor recorded them (members_log.py rule 4): their
   epochs, assignments and what they own, so a move costs them nothing. Classic groups'
   generations are recorded too (members_log.py rule 8, classic.py rule 7).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from kraftlite.broker.log_store import ReplicaLog
from kraftlite.broker.partition import Acks, Partition, Role
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups import members_log
from kraftlite.groups.assignor import TopicPartition, assign
from kraftlite.groups.classic import ClassicGroup, State, subscribed_topics
from kraftlite.groups.group import DEFAULT_MAX_SIZE, Group, MemberAnswer
from kraftlite.groups.members_log import ClassicState, CoordinatorMarker, MemberState
from kraftlite.groups.offsets import (
    DEFAULT_OFFSET_METADATA_MAX_BYTES,
    CommittedOffset,
    OffsetDeletion,
    check_count,
    check_deletion_count,
    check_in_range,
    check_metadata,
    check_partitions,
    expired,
    plan_deletion,
)
from kraftlite.metadata.topics import is_compacted
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.admin import AlterConfigsRequest
from kraftlite.protocol.internal import GroupKind, GroupListing
from kraftlite.protocol.partitioner import partition_for_key

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker

log = structlog.get_logger(__name__)
OFFSETS_TOPIC = "__consumer_offsets"
_KEY_PREFIX = b"offset\x00"
CONSUMER_PROTOCOL = "consumer"  # the classic protocol type of consumers (Kafka's ConsumerProtocol)
ASSIGNOR_NAME = "uniform"  # Kafka's name for the uniform assignor, which assignor.py follows
INLINE_LOAD_BYTES = 128 << 10  # rule 3: larger offsets partitions load off the event loop
LOAD_RETRY_MS = 5_000  # rule 3: a failed load is tried again this much later
_READ_BYTES = 8 << 20
_TOMBSTONES_PER_BATCH = 1000  # rule 8: one expiry's tombstones, a batch at a time
_RUN_INTERVAL_S = 1.0
_MAX_MARKERS_KEPT = 100_000  # rule 9: producers whose last marker a shard remembers
_CLASSIC_ATTEMPTS = 3  # classic_for_join: shards replayed meanwhile before it gives up


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
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes (rule 8)
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms


class _CommitGate:
    """Rule 6 for one group: commits run together, a deletion alone. A deletion waits for
    the commits in flight to be acknowledged and holds new ones until its tombstones are,
    so the view and the log agree on which came last. `users`: the coordinator's count of
    those holding or waiting for it (it forgets the gate at 0)."""

    def __init__(self) -> None:
        self.users = 0
        self._commits = 0
        self._deleting = False
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def committing(self) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: not self._deleting)
            self._commits += 1
        try:
            yield
        finally:
            async with self._changed:
                self._commits -= 1
                self._changed.notify_all()

    @contextlib.asynccontextmanager
    async def deleting(self) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: not self._deleting and not self._commits)
            self._deleting = True
        try:
            yield
        finally:
            async with self._changed:
                self._deleting = False
                self._changed.notify_all()


def _record_cost(record: tuple[bytes, bytes | None]) -> int:
    """About what a record adds to a batch (key, value, framing)."""
    return len(record[0]) + len(record[1] or b"") + 32


class _MemberWriter:
    """Rule 10 for one shard: member records appended in the order they were made, as
    many writes per batch as fit (what is made while one batch is written goes in the
    next: a group commit), each batch acknowledged by every in-sync replica;
    `flushed` returns once everything made before the call is. A failed append fails every
    waiter and calls `failed`: the coordinator replays the log in the shard's place, since
    its view may be ahead of the log."""

    def __init__(
        self,
        append: Callable[[list[tuple[bytes, bytes | None]]], Awaitable[None]],
        failed: Callable[[], None],
        batch_bytes: Callable[[], int],
    ) -> None:
        self._append = append
        self._failed = failed
        self._batch_bytes = batch_bytes
        self._queue: list[list[tuple[bytes, bytes | None]]] = []
        self._made = self._written = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._error: KraftliteError | None = None

    def max_record_bytes(self) -> int:
        """The largest record (key and value) that still fits a batch of its own."""
        return self._batch_bytes() * 3 // 4

    def write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if not records or self._error is not None:
            return
        self._queue.append(records)
        self._made += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="group-members")

    async def flushed(self) -> None:
        if self._error is not None:
            raise self._error
        if self._written >= self._made:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((self._made, future))
        await future

    def _next_batch(self) -> tuple[list[tuple[bytes, bytes | None]], int]:
        """Whole writes from the queue's head, as many as fit a batch, and how many; a
        write too large for one batch goes a batch at a time, split between records (in
        order: its tombstones first, so no batch grants what a later one removes), and
        counts as written with its last."""
        budget = self.max_record_bytes()
        batch: list[tuple[bytes, bytes | None]] = []
        size = writes = 0
        while self._queue:
            head = self._queue[0]
            cost = sum(_record_cost(r) for r in head)
            if size + cost <= budget or (not batch and len(head) == 1):
                batch += self._queue.pop(0)
                writes += 1
                size += cost
                continue
            if batch:
                break
            taken = 0  # the head alone is over a batch: as much of it as fits
            while taken < len(head) - 1 and size + _record_cost(head[taken]) <= budget:
                size += _record_cost(head[taken])
                taken += 1
            taken = max(taken, 1)
            batch, self._queue[0] = head[:taken], head[taken:]
            break
        return batch, writes

    async def _run(self) -> None:
        try:
            while self._queue and self._error is None:
                batch, writes = self._next_batch()
                upto = self._written + writes
                await self._append(batch)
                self._written = upto
                waiting, self._waiters = self._waiters, []
                for mark, future in waiting:
                    if mark > upto:
                        self._waiters.append((mark, future))
                    elif not future.done():
                        future.set_result(None)
        except KraftliteError as exc:
            self._fail(exc)
            self._failed()
        except Exception as exc:  # the log decides what was written: the shard is replayed
            log.exception("group_member_records_failed")
            self._fail(KraftliteError(ErrorCode.COORDINATOR_NOT_AVAILABLE, repr(exc)))
            self._failed()
        finally:
            self._task = None

    def _fail(self, exc: KraftliteError) -> None:
        if exc.code not in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            exc = KraftliteError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"the group's membership was not recorded: {exc.message}",
            )
        self._error = exc
        waiting, self._waiters = self._waiters, []
        for _, future in waiting:
            if not future.done():
                future.set_exception(exc)

    def close(self) -> None:
        """The shard is gone: waiters are told to find the coordinator again."""
        if self._error is None:
            self._fail(KraftliteError(ErrorCode.NOT_COORDINATOR, "the coordinator moved"))
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()


@dataclass
class Shard:
    """What this broker coordinates for one offsets partition, in one leader epoch.
    Invariant (rule 4): every `Group` in `groups` has members, once `drop_if_empty` or
    `sweep` has run after the request that changed it.
    """

    leader_epoch: int
    frozen_until_ms: int  # KIP-848 groups' freeze (group.py rule 6; members_log.py rule 5)
    max_size: int = DEFAULT_MAX_SIZE
    classic_frozen_until_ms: int = 0  # classic groups' (trusted apart: members_log.py rule 8)
    groups: dict[str, Group] = field(default_factory=dict)
    # rule 10: what the log says of each group's members, and the writer of their records
    stored: dict[str, dict[str, MemberState]] = field(default_factory=dict)
    writer: _MemberWriter | None = None
    # members_log.py rule 8: the classic groups the log has (name or generation)
    classic_recorded: set[str] = field(default_factory=set)
    freeze_recorded: bool = False  # a marker with this freeze's end went out (rule 10)
    classic_making: set[str] = field(default_factory=set)  # names being recorded, no group yet
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    swept_ms: int = 0
    classic: dict[str, ClassicGroup] = field(default_factory=dict)  # Kafka clients' groups
    loaded_ms: int = 0  # when this coordinator loaded the partition (monotonic)
    # rule 8: group -> when this coordinator last saw it with members (monotonic)
    last_member_ms: dict[str, int] = field(default_factory=dict)
    # rule 9: producer id -> (group, partition) -> the offset its open transaction commits
    pending_txns: dict[int, dict[tuple[str, TopicPartition], CommittedOffset]] = field(
        default_factory=dict
    )

    # rule 9: producer id -> (offset, commit) of its last marker here, for a commit whose
    # acknowledgement comes after its transaction's marker (a coordinator's timeout abort)
    last_markers: dict[int, tuple[int, bool]] = field(default_factory=dict)

    def end_transaction(self, producer_id: int, commit: bool, offset: int = -1) -> None:
        """Rule 9: a producer's marker on this partition, at `offset`."""
        pending = self.pending_txns.pop(producer_id, {})
        if commit:
            for (group, tp), committed in pending.items():
                self.offsets.setdefault(group, {})[tp] = committed
        if len(self.last_markers) >= _MAX_MARKERS_KEPT:
            del self.last_markers[next(iter(self.last_markers))]
        self.last_markers.pop(producer_id, None)
        self.last_markers[producer_id] = (offset, commit)

    def add_pending(
        self,
        producer_id: int,
        appended_at: int,
        offsets: Mapping[tuple[str, TopicPartition], CommittedOffset],
    ) -> None:
        """Rule 9: a transactional commit appended at `appended_at` is pending, or settled
        at once when its transaction's marker came first (its acknowledgement waited)."""
        marker = self.last_markers.get(producer_id)
        if marker is not None and marker[0] > appended_at:
            if marker[1]:
                for (group, tp), committed in offsets.items():
                    self.offsets.setdefault(group, {})[tp] = committed
            return
        self.pending_txns.setdefault(producer_id, {}).update(offsets)

    def unstable(self, group: str, tp: TopicPartition) -> bool:
        """Rule 9: an open transaction commits an offset of the group's partition."""
        return any((group, tp) in pending for pending in self.pending_txns.values())

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
        self.drop_if_empty(name, now_ms)
        return group

    def exists(self, name: str) -> bool:
        return name in self.groups or name in self.classic or bool(self.offsets.get(name))

    def drop_if_empty(self, name: str, now_ms: int) -> None:
        group = self.groups.get(name)
        if group is not None and not group.members:
            del self.groups[name]
            self._emptied(name, now_ms)

    def idle_ms(self, name: str, now_ms: int) -> int:
        """Rule 8: how long the group has had no members, as far as this coordinator knows
        (0 while it has some); `maybe_sweep` first, or silent members count as members."""
        group = self.groups.get(name)
        if (group is not None and group.members) or name in self.classic:
            # (a classic group's object stays until the sweep after its last member went)
            self._emptied(name, now_ms)
            return 0
        return now_ms - self.last_member_ms.get(name, self.loaded_ms)

    def _emptied(self, name: str, now_ms: int) -> None:
        """Rule 8: the group's last member went now; kept for a group with offsets only
        (one that commits later is kept by its commit's own time)."""
        if self.offsets.get(name):
            self.last_member_ms[name] = now_ms

    def forget_idle(self, now_ms: int, retention_ms: int) -> None:
        """Rule 8: entries of groups idle past the retention say no more than their
        absence does (idle since the load, at least as long: every entry is from after
        it), so they go."""
        for name, seen in list(self.last_member_ms.items()):
            if now_ms - seen >= retention_ms:
                del self.last_member_ms[name]

    def kind(self, name: str) -> GroupKind:
        """What a group with no members is: what its commits say (rule 2: a classic
        member's, or one outside any membership over Kafka's protocol, makes it classic, as
        Kafka's simple groups are), else consumer (kraftlite's own, and KIP-848's)."""
        offsets = self.offsets.get(name, {})
        return "classic" if any(c.kind == "classic" for c in offsets.values()) else "consumer"

    def maybe_sweep(self, now_ms: int, interval_ms: int) -> None:
        """Expire silent members of every group, dropping groups left empty (rule 4)."""
        if now_ms - self.swept_ms < interval_ms:
            return
        self.swept_ms = now_ms
        for name, group in list(self.groups.items()):
            group.expire(now_ms)
            if not group.members:
                del self.groups[name]
                self._emptied(name, now_ms)
        self.record_all()
        ended = now_ms >= max(self.frozen_until_ms, self.classic_frozen_until_ms)
        if not self.freeze_recorded and ended and self.writer:
            # members_log.py rule 3: the freeze is over, so the next coordinator has none
            self.freeze_recorded = True
            marker = CoordinatorMarker(self.leader_epoch, 0)
            self.writer.write([(members_log.COORDINATOR_KEY, marker.value())])
        for name, classic in list(self.classic.items()):
            classic.expire()
            if not classic.members:  # its offsets, if any, stay in `offsets`
                classic.close()
                del self.classic[name]
                self._emptied(name, now_ms)
        self.record_classic()

    def close(self) -> None:
        """This broker stopped coordinating the partition: answer every waiting member."""
        for classic in self.classic.values():
            classic.close()
        if self.writer is not None:
            self.writer.close()

    def record(self, names: Iterable[str]) -> None:
        """Rule 10: the records of what changed in these groups' members, to the writer
        (at once: records go out in the order the members changed). A member whose record
        would not fit a batch goes back to its recorded state (or out, if it has none) and
        the request is refused (members_log.py rule 7)."""
        if self.writer is None:
            return
        records: list[tuple[bytes, bytes | None]] = []
        too_large: list[str] = []
        max_bytes = self.writer.max_record_bytes()
        for name in names:
            group = self.groups.get(name)
            stored = self.stored.get(name)
            if group is None and stored is None:
                continue
            if stored is None:
                stored = self.stored[name] = {}
            touched: Iterable[str] = ()
            if group is not None:
                touched, group.touched = group.touched, set()
            made, refused = members_log.changes(
                name, {} if group is None else group.members, touched, stored, max_bytes
            )
            records += made
            if refused and group is not None:  # the group goes back to what the log says:
                # one request changes one member, and whom it removed comes back with it
                seen = {m: member.last_seen_ms for m, member in group.members.items()}
                group.members = {
                    m: state.restore(m, seen.get(m, self.loaded_ms)) for m, state in stored.items()
                }
                too_large += refused
                if not group.members:
                    del self.groups[name]
            if not stored:
                del self.stored[name]
        self.writer.write(records)
        if too_large:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST,
                f"the assignment of {too_large[0]} is too large to record in {OFFSETS_TOPIC} "
                "(over its max.message.bytes): subscribe to fewer partitions, or add members",
            )

    def record_classic_name(self, name: str) -> None:
        """members_log.py rule 8: the name of a classic group about to be made."""
        if self.writer is not None and name not in self.classic_recorded:
            self.classic_recorded.add(name)
            self.writer.write([(members_log.classic_key(name), b"{}")])

    def record_classic(self) -> None:
        """members_log.py rule 8: a tombstone for each classic group gone."""
        if self.writer is None:
            return
        gone = self.classic_recorded - self.classic.keys() - self.classic_making
        self.classic_recorded -= gone
        self.writer.write([(members_log.classic_key(name), None) for name in sorted(gone)])

    def record_all(self) -> None:
        self.record(self.groups.keys() | self.stored.keys())


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
        return (
            str(group),
            tp,
            CommittedOffset(
                int(data["offset"]),
                str(data.get("metadata", "")),
                int(data.get("leader_epoch", -1)),
                "classic" if data.get("kind") == "classic" else "consumer",
                int(data.get("ts", -1)),
            ),
        )
    except (ValueError, TypeError, KeyError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise BadOffsetRecordError(f"unreadable offset commit record: {exc!r}") from None


def _offset_value(committed: CommittedOffset, now: int) -> dict[str, object]:
    """A commit record's value; `leader_epoch` only when known and `kind` only when
    classic, so records of commits without them read the same in older brokers' code."""
    value: dict[str, object] = {
        "offset": committed.offset,
        "metadata": committed.metadata,
        "ts": now,
    }
    if committed.leader_epoch >= 0:
        value["leader_epoch"] = committed.leader_epoch
    if committed.kind == "classic":
        value["kind"] = "classic"
    return value


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A KIP-848 member as ConsumerGroupDescribe shows it (rule 7)."""

    member_id: str
    instance_id: str | None
    client_id: str
    member_epoch: int
    topics: tuple[str, ...]  # its subscription, sorted
    assignment: frozenset[TopicPartition]  # what its last answer gave it
    target: frozenset[TopicPartition]  # what the assignor would give it now


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """A KIP-848 group as ConsumerGroupDescribe shows it (rule 7)."""

    group: str
    state: str  # group.py's: "empty", "reconciling", "stable" (the Kafka edge capitalizes)
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[MemberDescription, ...]  # by member id


def description_bound(group: Group, partition_counts: Mapping[str, int]) -> int:
    """Rule 7, pure: at least the items `describe_consumer_group` would show (each member,
    its topics, its assignment and its target: targets are one assignor answer, so together
    at most the subscribed topics' partitions), found without running the assignor."""
    members = group.members.values()
    subscribed = {t for m in members for t in m.topics}
    return (
        sum(1 + len(m.topics) + len(m.assignment) for m in members)
        + sum(partition_counts.get(t, 0) for t in subscribed)
        or 1
    )


def describe_consumer_group(
    group: Group, partition_counts: Mapping[str, int]
) -> ConsumerGroupDescription:
    """Rule 7, pure: `partition_counts` holds the members' subscribed topics that exist."""
    members = sorted(group.members.values(), key=lambda m: m.member_id)
    targets = assign(
        {m.member_id: m.topics for m in members},
        partition_counts,
        {m.member_id: m.assignment for m in members},
    )
    epoch = max((m.epoch for m in members), default=0)
    return ConsumerGroupDescription(
        group.name,
        group.state,
        epoch,
        epoch,
        ASSIGNOR_NAME,
        tuple(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.epoch,
                tuple(sorted(m.topics)),
                m.assignment,
                targets.get(m.member_id, frozenset()),
            )
            for m in members
        ),
    )


class LoadStoppedError(Exception):
    """The coordinator is stopping: a replay ends between two reads."""


@dataclass
class Replayed:
    """What a replay found (rule 3, and rule 9's open transactions' offsets)."""

    groups: dict[str, dict[TopicPartition, CommittedOffset]]
    records: int
    pending_txns: dict[int, dict[tuple[str, TopicPartition], CommittedOffset]]
    # rule 10: each group's members as the log has them, and the last coordinator marker
    members: dict[str, dict[str, MemberState]] = field(default_factory=dict)
    marker: CoordinatorMarker | None = None
    unreadable_members: bool = False  # a member record or marker could not be read
    classic_names: set[str] = field(default_factory=set)  # members_log.py rule 8
    classic_states: dict[str, ClassicState] = field(default_factory=dict)


def replay(log_: ReplicaLog, stopping: Callable[[], bool] = lambda: False) -> Replayed:
    """Rule 3's replay of an offsets partition up to its log end: group -> partition ->
    committed offset, the records read, and (rule 9) the offsets of transactions still open.
    Blocking; a record that cannot be read is skipped (one bad record must not take every
    group of the partition down)."""
    groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
    pending_txns: dict[int, dict[tuple[str, TopicPartition], CommittedOffset]] = {}
    members: dict[str, dict[str, MemberState]] = {}
    marker: CoordinatorMarker | None = None
    unreadable = False
    classic_names: set[str] = set()
    classic_states: dict[str, ClassicState] = {}
    offset, records = log_.log_start_offset, 0
    while offset < log_.log_end_offset:
        if stopping():
            raise LoadStoppedError
        data = log_.read(offset, _READ_BYTES)
        if not data:
            break
        for decoded in batch_format.decode_stream(data):
            header = decoded.header
            if batch_format.is_control(header):  # rule 9: a transaction's marker
                pending = pending_txns.pop(header.producer_id, {})
                if header.attributes & batch_format.ATTR_COMMIT:
                    for (txn_group, txn_tp), txn_committed in pending.items():
                        groups.setdefault(txn_group, {})[txn_tp] = txn_committed
                offset = header.next_offset
                continue
            transactional = batch_format.is_transactional(header)
            for record in decoded.records():
                records += 1
                try:
                    if not transactional and _replay_membership(record, members):
                        continue
                    classic = members_log.parse_classic_record(record.key, record.value)
                    if not transactional and classic is not None:
                        name, present, state = classic
                        (classic_names.add if present else classic_names.discard)(name)
                        if state is None:
                            classic_states.pop(name, None)
                        else:
                            classic_states[name] = state
                        continue
                    if not transactional and record.key == members_log.COORDINATOR_KEY:
                        marker = members_log.parse_coordinator_record(record.key, record.value)
                        continue
                    parsed = parse_offset_record(record.key, record.value)
                except members_log.BadMemberRecordError as exc:  # members not to be trusted
                    log.warning("member_record_unreadable", offset=record.offset, error=str(exc))
                    unreadable = True
                    continue
                except BadOffsetRecordError as exc:
                    log.warning("offset_record_skipped", offset=record.offset, error=str(exc))
                    continue
                if parsed is None:
                    continue
                group, tp, committed = parsed
                if transactional and committed is not None:
                    pending_txns.setdefault(header.producer_id, {})[(group, tp)] = committed
                    continue
                offsets = groups.setdefault(group, {})
                if committed is None:
                    offsets.pop(tp, None)
                    if not offsets:  # no offsets left: the group is gone (rule 4)
                        del groups[group]
                else:
                    offsets[tp] = committed
            offset = decoded.header.next_offset
    return Replayed(
        groups, records, pending_txns, members, marker, unreadable, classic_names, classic_states
    )


def _replay_membership(
    record: batch_format.ConsumedRecord, members: dict[str, dict[str, MemberState]]
) -> bool:
    """Rule 10: a member record applied to `members`; False for any other record."""
    parsed = members_log.parse_member_record(record.key, record.value)
    if parsed is None:
        return False
    group, member_id, state = parsed
    if state is not None:
        members.setdefault(group, {})[member_id] = state
    elif member_id in members.get(group, {}):
        del members[group][member_id]
        if not members[group]:
            del members[group]
    return True


# a transactional commit's append errors, as the client is told them (Kafka's
# GroupMetadataManager): retriable ones it retries after finding the coordinator again
_TXN_COMMIT_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


class GroupCoordinator:
    def __init__(self, broker: Broker, settings: GroupSettings | None = None) -> None:
        self.broker = broker
        self.settings = settings or GroupSettings()
        self._shards: dict[int, Shard] = {}
        self._gates: dict[str, _CommitGate] = {}  # rule 6: per group, while in use
        # rule 3: partition -> (leader epoch, its load), while one runs on the loader
        self._loading: dict[int, tuple[int, asyncio.Task[None]]] = {}
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="group-loader")
        self._failed: dict[int, tuple[int, int]] = {}  # partition -> (epoch, retry after)
        self._stopping = threading.Event()
        self._runners: list[asyncio.Task[None]] = []
        self._expiring: set[str] = set()  # rule 8: groups whose tombstones are being written
        # rule 10: shards whose member record failed, until replayed in their place
        self._orphans: dict[int, Shard] = {}

    # -- routing ----------------------------------------------------------------------------

    def offsets_partition(self, group: str) -> int:
        """Rule 1, over the topic's partitions once it exists (every broker then agrees,
        whatever its `offsets.topic.num.partitions`)."""
        topic = self.broker.replicas.image.topic(OFFSETS_TOPIC)
        count = self.settings.offsets_partitions if topic is None else len(topic.partitions)
        return partition_for_key(group.encode(), count)

    async def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use (any broker may; one wins)."""
        if await self.broker.ensure_internal_topic(OFFSETS_TOPIC, self.settings.offsets_partitions):
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

    def _current(self, partition: Partition, shard: Shard) -> Shard | None:
        """The shard coordinating now what `shard` did: itself, or the one replayed in its
        place within the same leadership (rule 10); None once the leadership moved."""
        current = self._shards.get(partition.index)
        if (
            current is None
            or current.leader_epoch != shard.leader_epoch
            or partition.role is not Role.LEADER
            or partition.leader_epoch != shard.leader_epoch
        ):
            return None
        return current

    def _shard(self, group: str) -> tuple[Partition, Shard]:
        partition = self.coordinator_partition(group)
        shard = self._shard_of(partition)
        shard.maybe_sweep(self._now(), self.settings.min_session_timeout_ms)
        return partition, shard

    def _shard_of(self, partition: Partition) -> Shard:
        """The partition's shard for its leader epoch: loaded at once when small, else
        COORDINATOR_LOAD_IN_PROGRESS while the loader replays it (rule 3)."""
        index, epoch = partition.index, partition.leader_epoch
        shard = self._shards.get(index)
        if shard is not None and shard.leader_epoch == epoch:
            return shard
        if shard is not None:
            shard.close()
            del self._shards[index]
        loading = self._loading.get(index)
        if loading is None and partition.log.size_bytes <= INLINE_LOAD_BYTES:
            return self._install(partition, replay(partition.log))
        failed = self._failed.get(index)
        retry = failed is None or failed[0] != epoch or self._now() >= failed[1]
        if (loading is None or loading[0] != epoch) and retry:
            task = asyncio.get_running_loop().create_task(self._load(partition, epoch))
            self._loading[index] = (epoch, task)
        raise KraftliteError(
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            f"broker {self.broker.broker_id} is loading the groups of {OFFSETS_TOPIC}-{index}",
        )

    async def _load(self, partition: Partition, epoch: int) -> None:
        """Rule 3 off the event loop, for the leadership of `epoch`: the replay stops once
        this broker no longer has it, and the shard is installed only if it still does. A
        failed load is tried again LOAD_RETRY_MS later (its requests answered
        COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        index = partition.index

        def current() -> bool:
            return partition.role is Role.LEADER and partition.leader_epoch == epoch

        def stopping() -> bool:
            return self._stopping.is_set() or not current()

        started = self._now()
        try:
            if not current():
                return
            replayed = await asyncio.get_running_loop().run_in_executor(
                self._loader, replay, partition.log, stopping
            )
        except LoadStoppedError:
            return
        except Exception:  # tried again later: a request after LOAD_RETRY_MS starts it
            log.exception("group_offsets_load_failed", partition=index, leader_epoch=epoch)
            self._failed[index] = (epoch, self._now() + LOAD_RETRY_MS)
            return
        finally:
            mine = self._loading.get(index)
            if mine is not None and mine[1] is asyncio.current_task():
                del self._loading[index]
        current_shard = self._shards.get(index)
        if current() and (current_shard is None or current_shard.leader_epoch != epoch):
            if current_shard is not None:
                current_shard.close()
            self._failed.pop(index, None)
            self._install(partition, replayed)
            log.info("group_offsets_load_took", partition=index, ms=self._now() - started)

    def _install(self, partition: Partition, replayed: Replayed) -> Shard:
        offsets, records = replayed.groups, replayed.records
        now = self.broker.clock.monotonic_ms()
        epoch, index = partition.leader_epoch, partition.index
        # The first leader of the partition (epoch 0) has no predecessor whose members could
        # still hold partitions; any later one waits out the longest session first, unless
        # its predecessor recorded every member (rule 10, members_log.py rule 4).
        freeze = self.settings.max_session_timeout_ms if epoch > 0 else 0
        marker = replayed.marker
        trusted = (
            members_log.trusted(epoch, marker)
            and not replayed.unreadable_members
            and partition.config("unclean.leader.election.enable") != "true"
        )
        # members_log.py rule 8: classic generations, only if the predecessor recorded them
        classic_trusted = trusted and members_log.trusted_classic(epoch, marker)
        if trusted:
            left = 0 if marker is None else marker.frozen_for_ms
            frozen_until = now + min(left, self.settings.max_session_timeout_ms)
        else:
            frozen_until = now + freeze
        shard = Shard(epoch, frozen_until, self.settings.max_size, offsets=offsets)
        shard.classic_frozen_until_ms = frozen_until if classic_trusted else now + freeze
        shard.loaded_ms = shard.swept_ms = now
        shard.pending_txns = replayed.pending_txns
        records_now: list[tuple[bytes, bytes | None]] = []
        # A replay in place of a shard whose member record failed (same leadership): its
        # classic groups go on as they were (in memory they may be mid-rebalance), and
        # each Stable one is recorded again (the log may have lost its last generation).
        orphan = self._orphans.pop(index, None)
        carried: set[str] = set()
        if orphan is not None and orphan.leader_epoch == epoch:
            shard.classic = orphan.classic
            shard.classic_frozen_until_ms = orphan.classic_frozen_until_ms
            shard.last_member_ms = orphan.last_member_ms
            shard.loaded_ms = orphan.loaded_ms
            carried = set(shard.classic)
            for name, classic in sorted(shard.classic.items()):
                if classic.state is State.STABLE:
                    records_now.append((members_log.classic_key(name), classic.snapshot().value()))
        else:
            if orphan is not None:
                orphan.close()
            if classic_trusted:  # each classic group in its last generation
                for name, classic_state in replayed.classic_states.items():
                    classic = shard.classic[name] = self._classic_group(partition, shard, name)
                    classic.restore(classic_state)
        shard.classic_recorded = set(replayed.classic_names) | carried
        stale: list[tuple[bytes, bytes | None]] = []
        if trusted:
            for name, states in replayed.members.items():
                group = shard.groups[name] = Group(
                    name, frozen_until_ms=frozen_until, max_size=self.settings.max_size
                )
                group.members = {m: state.restore(m, now) for m, state in states.items()}
            shard.stored = replayed.members
        else:  # rule 10: stale members, whom a later trusting coordinator must not see
            stale = [
                (members_log.member_key(name, m), None)
                for name, states in replayed.members.items()
                for m in states
            ]
        if not classic_trusted:  # and stale classic groups (not those carried over)
            stale += [
                (members_log.classic_key(n), None) for n in sorted(replayed.classic_names - carried)
            ]
            shard.classic_recorded = set(carried)
        stale += records_now

        async def append(records: list[tuple[bytes, bytes | None]]) -> None:
            now = self.broker.clock.now_ms()
            batch = [batch_format.Record(value=v, key=k, timestamp=now) for k, v in records]
            await self._append(
                partition, batch, now, "the group's membership", "subscribe to fewer partitions"
            )

        def failed() -> None:
            if self._shards.get(index) is shard:
                del self._shards[index]
                self._orphans[index] = shard

        shard.writer = _MemberWriter(
            append, failed, lambda: partition.config_int("max.message.bytes")
        )
        # Always a marker, first (members_log.py rule 3): every answer waits for it, so none
        # rests on a record this replay read that no in-sync replica had yet.
        # (its freeze: the longer of both kinds', which its successor takes over for both)
        until = max(frozen_until, shard.classic_frozen_until_ms)
        mark = CoordinatorMarker(epoch, max(0, until - now))
        shard.freeze_recorded = mark.frozen_for_ms == 0
        shard.writer.write([*stale, (members_log.COORDINATOR_KEY, mark.value())])
        self._shards[index] = shard
        log.info(
            "group_offsets_loaded",
            partition=index,
            leader_epoch=epoch,
            records=records,
            groups=len(offsets),
            members_trusted=trusted,
            members=sum(len(g.members) for g in shard.groups.values()),
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

    async def join(
        self,
        group: str,
        member_id: str,
        client_id: str,
        topics: list[str],
        session_timeout_ms: int | None,
        *,
        reports: bool = False,
        instance_id: str | None = None,
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
        self._check_not_expiring(group)
        if group in shard.classic:  # (one being made, or left empty until the next sweep,
            raise KraftliteError(  # counts: its first member may be joining now)
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
                instance_id=instance_id,
            )
        finally:  # a refused join leaves no group behind
            shard.drop_if_empty(group, self._now())
            shard.record((group,))
        await self._recorded(shard)
        return {**self._answer(answer), "session_timeout_ms": timeout}

    async def heartbeat(self, group: str, member_id: str, member_epoch: int) -> dict[str, Any]:
        _, shard = self._shard(group)
        state = shard.existing(group, self._now())  # unknown group: UNKNOWN_MEMBER_ID
        topics = {t for m in state.members.values() for t in m.topics}
        try:
            answer = state.heartbeat(member_id, member_epoch, self._now(), self._counts(topics))
        finally:
            shard.record((group,))
        await self._recorded(shard)
        return self._answer(answer)

    @staticmethod
    async def _recorded(shard: Shard) -> None:
        """Rule 10: an answer goes out once the records it may rest on are acknowledged."""
        if shard.writer is not None:
            await shard.writer.flushed()

    async def consumer_heartbeat(  # noqa: PLR0917 - the heartbeat's fields
        self,
        group: str,
        member_id: str,
        member_epoch: int,
        client_id: str,
        topics: list[str] | None,
        reported: frozenset[TopicPartition] | None,
        *,
        instance_id: str | None = None,
    ) -> dict[str, Any]:
        """KIP-848's heartbeat (group.py rule 9): epoch 0 joins a member id the group does
        not have, takes over an away static member (group.py rule 10), or is refused for an
        instance id held by another member or for an away member's id without its instance
        (all `Group.join`'s); epoch 0 of an active member, with its own instance id if any
        (a fenced client keeps its member id), and any other epoch heartbeat, which takes a
        new subscription and checks the instance id."""
        _, shard = self._shard(group)
        state = shard.existing(group, self._now())
        member = state.members.get(member_id)
        if member_epoch == 0 and (
            member is None
            or member.away
            or (instance_id is not None and state.static_member(instance_id) is not member)
        ):
            return await self.join(
                group,
                member_id,
                client_id,
                topics or [],
                None,
                reports=True,
                instance_id=instance_id,
            )
        subscribed = {t for m in state.members.values() for t in m.topics} | set(topics or [])
        try:
            result = state.heartbeat(
                member_id,
                member_epoch,
                self._now(),
                self._counts(subscribed),
                topics=topics,
                reported=reported,
                instance_id=instance_id,
            )
        finally:
            shard.record((group,))
        await self._recorded(shard)
        return self._answer(result)

    async def leave(
        self,
        group: str,
        member_id: str,
        *,
        instance_id: str | None = None,
        temporary: bool = False,
    ) -> None:
        """A member leaves; a static one leaving `temporary` (KIP-848's epoch -2) keeps its
        assignment for its session (group.py rule 10)."""
        _, shard = self._shard(group)
        try:
            shard.existing(group, self._now()).leave(
                member_id, self._now(), instance_id=instance_id, temporary=temporary
            )
        finally:
            shard.drop_if_empty(group, self._now())
            shard.record((group,))
        await self._recorded(shard)

    def _answer(self, answer: MemberAnswer) -> dict[str, Any]:
        return answer.to_json(self.settings.heartbeat_interval_ms)

    # -- classic groups (classic.py) --------------------------------------------------------

    async def classic_for_join(self, group: str, session_timeout_ms: int) -> ClassicGroup:
        """The classic group a JoinGroup joins, made if new; a group name in use by
        kraftlite's own protocol is INCONSISTENT_GROUP_PROTOCOL."""
        low = self.settings.classic_min_session_timeout_ms
        high = self.settings.classic_max_session_timeout_ms
        if not low <= session_timeout_ms <= high:
            raise KraftliteError(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout {session_timeout_ms} ms is outside [{low}, {high}]",
            )
        for _ in range(_CLASSIC_ATTEMPTS):
            partition, shard = self._shard(group)
            self._check_not_expiring(group)
            self._check_no_consumer_members(shard, group)
            classic = shard.classic.get(group)
            if classic is not None:
                return classic
            # members_log.py rule 8: the name recorded before the group's first join
            shard.record_classic_name(group)
            shard.classic_making.add(group)
            try:
                await self._recorded(shard)
            finally:
                shard.classic_making.discard(group)
            if self._current(partition, shard) is not shard:
                continue  # replayed or moved meanwhile: again, on the shard of now
            self._check_no_consumer_members(shard, group)  # (one may have joined meanwhile)
            classic = shard.classic.get(group)
            if classic is None:
                classic = shard.classic[group] = self._classic_group(partition, shard, group)
            return classic
        raise KraftliteError(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group}'s coordinator keeps changing"
        )

    def _classic_group(self, partition: Partition, shard: Shard, group: str) -> ClassicGroup:
        return ClassicGroup(
            group,
            self._now,
            self.settings.max_size,
            self.settings.initial_rebalance_delay_ms,
            frozen_until_ms=shard.classic_frozen_until_ms,
            still_coordinating=functools.partial(self._leading, partition, shard.leader_epoch),
            record=functools.partial(self._record_classic, partition, shard, group),
        )

    async def _record_classic(
        self, partition: Partition, shard: Shard, group: str, state: ClassicState
    ) -> None:
        """members_log.py rule 8: a classic group's generation, acknowledged, before its
        members are told their assignments; without their subscriptions if it would not
        fit a batch, refused if it would not even so."""
        current = self._current(partition, shard)
        if current is None or current.writer is None:
            raise KraftliteError(ErrorCode.NOT_COORDINATOR, "the coordinator moved")
        key = members_log.classic_key(group)
        limit = current.writer.max_record_bytes()
        value = state.value()
        if len(key) + len(value) > limit:
            value = state.value(metadata=False)
        if len(key) + len(value) > limit:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST,
                f"group {group}'s assignment is too large to record in {OFFSETS_TOPIC} "
                "(over its max.message.bytes): assign fewer partitions per member",
            )
        current.classic_recorded.add(group)
        current.writer.write([(key, value)])
        await current.writer.flushed()

    def _check_no_consumer_members(self, shard: Shard, group: str) -> None:
        if shard.existing(group, self._now()).members:
            raise KraftliteError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {group} has members using kraftlite's consumer group protocol",
            )

    @staticmethod
    def _leading(partition: Partition, epoch: int) -> bool:
        """Whether this broker still leads the partition in `epoch` (a shard replayed in
        the same leadership coordinates on: its classic groups carry over, rule 10)."""
        return partition.role is Role.LEADER and partition.leader_epoch == epoch

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
        instance_id: str | None = None,
    ) -> None:
        """Rule 5, then rule 2: append the commit (acks=all), then make it visible.
        `generation` is a classic member's (Kafka's OffsetCommit), checked by its group, as
        is its `instance_id` (classic.py rule 8)."""
        partition, shard = self._shard(group)
        partitions = [tp for tp, _ in offsets]
        check_count(len(offsets))
        check_metadata(offsets, self.settings.offset_metadata_max_bytes)
        check_partitions(partitions, self._counts({topic for topic, _ in partitions}))
        kind = self._check_member(
            shard, group, member_id, member_epoch, generation, partitions, instance_id
        )
        check_in_range(offsets)
        offsets = [(tp, replace(c, kind=kind)) for tp, c in offsets]
        async with self._gated(group, deleting=False):
            await self._append_commit(partition, shard, group, offsets)

    async def _append_commit(
        self,
        partition: Partition,
        shard: Shard,
        group: str,
        offsets: list[tuple[TopicPartition, CommittedOffset]],
    ) -> None:
        now = self.broker.clock.now_ms()
        records = [
            batch_format.Record(
                value=orjson.dumps(_offset_value(c, now)),
                key=offset_key(group, tp[0], tp[1]),
                timestamp=now,
            )
            for tp, c in offsets
        ]
        await self._append(
            partition, records, now, "the commit", "commit fewer partitions or less metadata"
        )
        if (current := self._current(partition, shard)) is not None:
            target = current.offsets.setdefault(group, {})
            for tp, committed in offsets:
                target[tp] = replace(committed, commit_ms=now)

    async def commit_transactional(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        offsets: list[tuple[TopicPartition, CommittedOffset]],
        verification: object | None,
        *,
        member_id: str | None = None,
        generation: int | None = None,
        instance_id: str | None = None,
    ) -> None:
        """Rule 9 [T5-T7]: checked as a commit is, except that a member need not be named
        (Kafka's v0-2 clients name none) and a rebalance does not refuse it; appended as the
        producer's transactional batch (`verification`: its token for the offsets
        partition, service.py); pending until the transaction's marker."""
        partition, shard = self._shard(group)
        partitions = [tp for tp, _ in offsets]
        check_count(len(offsets))
        check_metadata(offsets, self.settings.offset_metadata_max_bytes)
        check_partitions(partitions, self._counts({topic for topic, _ in partitions}))
        self._check_transactional_member(
            shard,
            group,
            member_id,
            -1 if generation is None else generation,
            instance_id,
            partitions,
        )
        check_in_range(offsets)
        now = self.broker.clock.now_ms()
        kind = self._transactional_kind(shard, group)
        records = [
            batch_format.Record(
                value=orjson.dumps(_offset_value(replace(c, kind=kind), now)),
                key=offset_key(group, tp[0], tp[1]),
                timestamp=now,
            )
            for tp, c in offsets
        ]
        batch = batch_format.encode_batch(
            [r.value for r in records],
            keys=[r.key for r in records],
            timestamps=[now] * len(records),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=0,
            transactional=True,
        )
        limit = partition.config_int("max.message.bytes")
        if len(batch) > limit:
            raise KraftliteError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"the commit is {len(batch)} bytes, over max.message.bytes of {OFFSETS_TOPIC}",
            )
        try:
            info = await partition.produce(
                batch,
                Acks.ALL,
                self.settings.commit_timeout_s,
                verification=verification,
                sequenced=False,
            )
        except KraftliteError as exc:
            # [C13]'s mapping, as Kafka's group coordinator answers its clients
            code = _TXN_COMMIT_ERRORS.get(exc.code, exc.code)
            raise KraftliteError(code, f"the commit was not written: {exc.message}") from None
        if (current := self._current(partition, shard)) is not None:
            current.add_pending(
                producer_id,
                info.first_offset,
                {(group, tp): replace(c, kind=kind, commit_ms=now) for tp, c in offsets},
            )

    def _check_transactional_member(  # noqa: PLR0917 - the commit's parts
        self,
        shard: Shard,
        group: str,
        member_id: str | None,
        generation: int,
        instance_id: str | None,
        partitions: list[TopicPartition],
    ) -> None:
        """[T5]: a commit naming a member, an instance or a generation comes from a member
        of the group's current generation (a KIP-848 member's generation is its epoch, and
        it must own the partitions, as its plain commits must: a zombie of an older epoch
        cannot overwrite its successor's progress); a classic group's rebalance does not
        refuse it; one naming none is accepted, but for a KIP-848 group with members."""
        now = self._now()
        if generation < 0 and not member_id and instance_id is None:
            shard.existing(group, now).check_commit(None, None, partitions, now)
            return
        classic = shard.classic.get(group)
        if classic is not None and classic.members:
            try:
                classic.check_commit(member_id or "", generation, instance_id)
            except KraftliteError as exc:
                if exc.code is not ErrorCode.REBALANCE_IN_PROGRESS:
                    raise
            return
        state = shard.existing(group, now)
        if member_id and member_id in state.members:
            state.check_commit(member_id, generation, partitions, now)
            return
        if member_id and state.members:
            raise KraftliteError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id} is not a member of {group}"
            )
        if generation >= 0:
            raise KraftliteError(
                ErrorCode.ILLEGAL_GENERATION, f"group {group} has no generation {generation}"
            )
        if member_id:
            raise KraftliteError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id} is not a member of {group}"
            )

    @staticmethod
    def _transactional_kind(shard: Shard, group: str) -> GroupKind:
        """The kind a transactional commit keeps a group as: its members' (a kraftlite or
        KIP-848 group's stays consumer), else what its commits made it, else classic
        (Kafka's simple groups, as a plain commit outside any membership makes them)."""
        classic = shard.classic.get(group)
        if classic is not None and classic.members:
            return "classic"
        members = shard.groups.get(group)
        if members is not None and members.members:
            return "consumer"
        return shard.kind(group) if group in shard.offsets else "classic"

    def transaction_ended(self, index: int, producer_id: int, commit: bool, offset: int) -> None:
        """Rule 9: the producer's marker was written at `offset` of offsets partition
        `index` by this broker, its leader; a shard of an older leadership is left alone
        (its successor replays the marker)."""
        shard = self._shards.get(index)
        if shard is None:
            return
        try:
            partition = self.broker.replicas.leader_partition(OFFSETS_TOPIC, index)
        except KraftliteError:
            return
        if partition.leader_epoch == shard.leader_epoch:
            shard.end_transaction(producer_id, commit, offset)

    def unstable(self, group: str, tp: TopicPartition) -> bool:
        """Rule 9: whether an open transaction commits an offset of the group's `tp`."""
        _, shard = self._shard(group)
        return shard.unstable(group, tp)

    def _check_member(  # noqa: PLR0917 - the commit's parts, as commit() has them
        self,
        shard: Shard,
        group: str,
        member_id: str | None,
        member_epoch: int | None,
        generation: int | None,
        partitions: list[TopicPartition],
        instance_id: str | None = None,
    ) -> GroupKind:
        """Who may commit: a classic group's member of its generation (classic.py rule 5),
        else kraftlite's rule (group.Group rule 7). A commit outside any membership
        (generation -1, whatever member id it names: a KIP-848 client names its own before
        it joins) is for a group with no members of either kind, as Kafka's. The kind of
        group the commit makes it (Shard.kind): a commit outside any membership over
        Kafka's protocol keeps a group's kind, or makes a new one classic (Kafka's simple
        groups)."""
        classic = shard.classic.get(group)
        if generation is not None and classic is not None and classic.members:
            classic.check_commit(member_id or "", generation, instance_id)
            return "classic"
        kind: GroupKind = "consumer"
        if generation is not None:  # Kafka's OffsetCommit
            if member_id and member_id in shard.existing(group, self._now()).members:
                member_epoch = generation  # a KIP-848 member: its member epoch
            elif generation >= 0:
                raise KraftliteError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id} is not a member of {group}"
                )
            else:
                member_id = member_epoch = None
                kind = shard.kind(group) if shard.offsets.get(group) else "classic"
        elif classic is not None and classic.members:
            raise KraftliteError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"group {group} is a classic group of Kafka clients: commit as one of them",
            )
        shard.existing(group, self._now()).check_commit(
            member_id, member_epoch, partitions, self._now()
        )
        return kind

    async def delete_group(self, group: str) -> None:
        """Kafka's DeleteGroups: a group with no members loses its committed offsets (one
        tombstone per partition, appended with acks=all before the view forgets them).
        GROUP_ID_NOT_FOUND if it has none, GROUP_NOT_EMPTY while it has members. As a
        deletion of offsets (rule 6), after the group's commits in flight."""
        self._shard(group)  # NOT_COORDINATOR before waiting for anything
        async with self._gated(group, deleting=True):
            await self._delete_group(group)

    async def _delete_group(self, group: str) -> None:
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
        await self._append(partition, tombstones, now, "the deletion", "commit less first")
        if (current := self._current(partition, shard)) is not None:
            remaining = current.offsets.get(group, {})
            for tp in committed:  # only what was tombstoned: a commit meanwhile stays
                remaining.pop(tp, None)
            if not remaining:
                current.offsets.pop(group, None)
                current.last_member_ms.pop(group, None)
            if classic is not None and not classic.members:
                classic.close()
                current.classic.pop(group, None)

    async def delete_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> OffsetDeletion:
        """Rule 6 (Kafka's OffsetDelete): each partition's outcome, the tombstones
        acknowledged; or the group's refusal, raised, with nothing deleted (GROUP_ID_NOT_FOUND,
        GROUP_NOT_EMPTY, NOT_COORDINATOR, INVALID_REQUEST past offsets.py's bound)."""
        check_deletion_count(len(partitions))
        self._shard(group)  # NOT_COORDINATOR before waiting for anything
        async with self._gated(group, deleting=True):  # no commit of the group in flight
            return await self._delete_offsets(group, partitions)

    async def _delete_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> OffsetDeletion:
        partition, shard = self._shard(group)
        state = shard.existing(group, self._now())
        if not shard.exists(group):
            raise KraftliteError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group} does not exist")
        deletion = plan_deletion(
            partitions,
            shard.offsets.get(group, {}),
            self._counts({topic for topic, _ in partitions}),
            self._consumed_topics(shard, group, state),
        )
        if not deletion.tombstoned:
            return deletion
        now = self.broker.clock.now_ms()
        tombstones = [
            batch_format.Record(value=None, key=offset_key(group, t, p), timestamp=now)
            for t, p in deletion.tombstoned
        ]
        await self._append(
            partition, tombstones, now, "the deletion", "name fewer partitions at once"
        )
        if (current := self._current(partition, shard)) is not None:
            remaining = current.offsets.get(group, {})
            for tp in deletion.tombstoned:  # no commit of the group ran meanwhile (rule 6)
                remaining.pop(tp, None)
            if not remaining:
                current.offsets.pop(group, None)
                if not current.exists(group):
                    current.last_member_ms.pop(group, None)
        return deletion

    async def _append(
        self,
        partition: Partition,
        records: list[batch_format.Record],
        now: int,
        what: str,
        instead: str,
    ) -> None:
        """Rule 2: records appended to the group's offsets partition as one batch, with
        acks=all; RECORD_LIST_TOO_LARGE past its max.message.bytes (Kafka's
        INVALID_COMMIT_OFFSET_SIZE), NOT_COORDINATOR if it stopped leading meanwhile."""
        batch = batch_format.encode_records(records, now)
        limit = partition.config_int("max.message.bytes")
        if len(batch) > limit:
            raise KraftliteError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"{what} is {len(batch)} bytes, over max.message.bytes of {OFFSETS_TOPIC} "
                f"({limit}): {instead}",
            )
        try:
            await partition.produce(batch, Acks.ALL, self.settings.commit_timeout_s)
        except KraftliteError as exc:
            if exc.code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise KraftliteError(
                    ErrorCode.NOT_COORDINATOR, f"coordinator moved during {what}: {exc.message}"
                ) from None
            raise

    @contextlib.asynccontextmanager
    async def _gated(self, group: str, *, deleting: bool) -> AsyncIterator[None]:
        """Rule 6: inside the group's gate, as a deletion or as a commit."""
        gate = self._gates.get(group)
        if gate is None:
            gate = self._gates[group] = _CommitGate()
        gate.users += 1  # with the lookup, before any wait: never a second gate for a group
        try:
            async with gate.deleting() if deleting else gate.committing():
                yield
        finally:
            gate.users -= 1
            if not gate.users and self._gates.get(group) is gate:
                del self._gates[group]

    @staticmethod
    def _consumed_topics(shard: Shard, group: str, state: Group) -> frozenset[str] | None:
        """Rule 6: the topics the group's members consume; None when that cannot be known
        (every topic then counts as consumed); GROUP_NOT_EMPTY for a classic group whose
        members are not consumers."""
        classic = shard.classic.get(group)
        if classic is None or not classic.members:
            return frozenset(t for m in state.members.values() for t in m.topics)
        if classic.protocol_type != CONSUMER_PROTOCOL:
            raise KraftliteError(
                ErrorCode.GROUP_NOT_EMPTY,
                f"group {group} has members of protocol type {classic.protocol_type!r}: "
                "its offsets can be deleted once it has none",
            )
        if classic.protocol_name is None:  # no generation yet: nothing says what they read
            return None
        topics: set[str] = set()
        for member in classic.members.values():
            read = subscribed_topics(member.metadata(classic.protocol_name))
            if read is None:
                return None
            topics |= read
        return frozenset(topics)

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

    def describe_consumer(
        self, group: str, max_items: int | None = None
    ) -> ConsumerGroupDescription:
        """Rule 7: KIP-848's ConsumerGroupDescribe of one group; INVALID_REQUEST, before the
        assignor runs, when it may show more than `max_items` items (`description_bound`)."""
        _, shard = self._shard(group)
        state = shard.existing(group, self._now())
        classic = shard.classic.get(group)
        if classic is not None and classic.members:
            raise KraftliteError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"group {group} is not a consumer group: its members use the classic "
                "protocol (DescribeGroups describes it)",
            )
        if not shard.exists(group):
            raise KraftliteError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group} does not exist")
        topics = {t for m in state.members.values() for t in m.topics}
        counts = self._counts(topics)
        if max_items is not None and description_bound(state, counts) > max_items:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST,
                f"group {group} may be more than the {max_items} items left in this answer: "
                "ask for fewer groups at once",
            )
        return describe_consumer_group(state, counts)

    def _loaded_shard(self, partition: Partition) -> Shard | None:
        try:
            return self._shard_of(partition)
        except KraftliteError as exc:
            if exc.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return None
            raise

    def _led_shards(self) -> Iterator[Shard | None]:
        """The shard of each offsets partition this broker leads, None while it loads."""
        for index in range(self.settings.offsets_partitions):
            try:
                partition = self.broker.replicas.leader_partition(OFFSETS_TOPIC, index)
            except KraftliteError:
                continue
            yield self._loaded_shard(partition)

    def coordinated_offsets(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """The committed offsets of every group this broker coordinates now."""
        result: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        for shard in self._led_shards():
            for name, offsets in shard.offsets.items() if shard else ():
                if offsets:
                    result[name] = dict(offsets)
        return result

    def local_groups(self) -> list[GroupListing]:
        """Groups this broker coordinates now, as `GET /v1/groups` lists them (each typed:
        protocol/internal.py; another broker asks for them with `GET /v1/internal/groups`,
        a GroupListResponse); those of partitions still loading (rule 3) are not listed."""
        return self.listed_groups()[0]

    def listed_groups(self) -> tuple[list[GroupListing], bool]:
        """`local_groups`, and whether a partition's groups are still loading (the Kafka
        edge's ListGroups then answers COORDINATOR_LOAD_IN_PROGRESS, as Kafka's)."""
        result: list[GroupListing] = []
        loading = False
        for shard in self._led_shards():
            if shard is None:  # loading (rule 3): listed once loaded
                loading = True
                continue
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
                        "state": (
                            State.EMPTY.value
                            if not state.members and shard.kind(name) == "classic"
                            else state.state
                        ),
                        "members": len(state.members),
                        "type": "consumer" if state.members else shard.kind(name),
                    }
                )
        return result, loading

    # -- background: loads, expiry, the offsets topic's policy (rules 1, 3, 8) ---------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._runners = [
            loop.create_task(self._every(_RUN_INTERVAL_S * 1000, self._round), name="groups"),
            loop.create_task(
                self._every(self.settings.offsets_retention_check_interval_ms, self.expire_offsets),
                name="group-offsets-expiry",
            ),
        ]

    async def stop(self) -> None:
        """Stop the background rounds and any load (a replay ends at its next read)."""
        self._stopping.set()
        tasks = [*self._runners, *(task for _, task in self._loading.values())]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.to_thread(self._loader.shutdown, wait=True)

    @staticmethod
    async def _every(interval_ms: float, work: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await work()
            except Exception:  # the next round tries again
                log.exception("group_coordinator_round_failed")

    async def _round(self) -> None:
        self.load_led()
        await self.compact_offsets_topic()

    def load_led(self) -> None:
        """Rule 3 at once: a shard (or its load) for every offsets partition this broker
        leads; the shards of partitions it no longer leads closed. One partition's failure
        stops no other's."""
        for index in range(self.settings.offsets_partitions):
            try:
                partition = self.broker.replicas.leader_partition(OFFSETS_TOPIC, index)
            except KraftliteError:
                for gone in (self._shards.pop(index, None), self._orphans.pop(index, None)):
                    if gone is not None:
                        gone.close()
                continue
            try:
                shard = self._loaded_shard(partition)
                if shard is not None:  # expiries and the freeze's end recorded, unasked
                    shard.maybe_sweep(self._now(), self.settings.min_session_timeout_ms)
            except Exception:
                log.exception("group_offsets_load_failed", partition=index)

    async def expire_offsets(self) -> int:
        """Rule 8: one expiry round over the groups this broker coordinates; the offsets
        expired."""
        count = 0
        for shard in list(self._led_shards()):
            if shard is None:  # loading: the next round
                continue
            now = self._now()
            shard.maybe_sweep(now, 0)
            shard.forget_idle(now, self.settings.offsets_retention_ms)
            candidates = [
                group
                for group, offsets in shard.offsets.items()
                if expired(
                    offsets,
                    shard.idle_ms(group, now),
                    self.broker.clock.now_ms(),
                    self.settings.offsets_retention_ms,
                )
            ]
            for group in candidates:
                try:
                    async with self._gated(group, deleting=True):
                        count += await self._expire(group)
                except KraftliteError as exc:  # moved, or not acknowledged: next round
                    log.info("group_offsets_not_expired", group=group, error=exc.message)
        return count

    async def _expire(self, group: str) -> int:
        """Rule 8 for one group, inside its gate: what expires now (a member may have
        joined, or a commit come, while it waited), tombstoned a batch at a time while the
        group takes no member (`_check_not_expiring`), so none sees offsets the log has
        deleted. The offsets dropped from the view."""
        partition, shard = self._shard(group)
        now = self._now()
        shard.maybe_sweep(now, 0)  # a member gone since the round began counts from now
        gone = expired(
            shard.offsets.get(group, {}),
            shard.idle_ms(group, now),
            self.broker.clock.now_ms(),
            self.settings.offsets_retention_ms,
        )
        if not gone:
            return 0
        dropped = 0
        self._expiring.add(group)
        try:
            for start in range(0, len(gone), _TOMBSTONES_PER_BATCH):
                chunk = gone[start : start + _TOMBSTONES_PER_BATCH]
                stamp = self.broker.clock.now_ms()
                tombstones = [
                    batch_format.Record(value=None, key=offset_key(group, t, p), timestamp=stamp)
                    for t, p in chunk
                ]
                try:
                    await self._append(partition, tombstones, stamp, "the expiry", "expire fewer")
                except KraftliteError as exc:
                    current = self._current(partition, shard)
                    if exc.code is not ErrorCode.NOT_COORDINATOR and current is not None:
                        # appended or not, unknown: the view forgets them as meant (a move
                        self._forget(current, group, chunk)  # replays what the log says)
                    raise
                if (current := self._current(partition, shard)) is None:
                    break  # moved: the next coordinator replays the tombstones
                self._forget(current, group, chunk)
                dropped += len(chunk)
        finally:
            self._expiring.discard(group)
            if dropped:
                log.info("group_offsets_expired", group=group, partitions=dropped)
        return dropped

    @staticmethod
    def _forget(shard: Shard, group: str, partitions: Sequence[TopicPartition]) -> None:
        """Rule 8: expired offsets out of the view (the group with its last one)."""
        remaining = shard.offsets.get(group, {})
        for tp in partitions:
            remaining.pop(tp, None)
        if not remaining:
            shard.offsets.pop(group, None)
            shard.last_member_ms.pop(group, None)

    def _check_not_expiring(self, group: str) -> None:
        """Rule 8: a group whose offsets are being expired takes no member until they are
        (retriable: Kafka's clients join again after COORDINATOR_LOAD_IN_PROGRESS)."""
        if group in self._expiring:
            raise KraftliteError(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                f"group {group}'s expired offsets are being deleted: join again shortly",
            )

    async def compact_offsets_topic(self) -> None:
        """Rule 1: an offsets topic made before compaction is altered to compact, by the
        broker leading its partition 0 (one asker; a lost answer asks again next round)."""
        topic = self.broker.replicas.image.topic(OFFSETS_TOPIC)
        if topic is None or is_compacted(topic.configs):
            return
        try:
            self.broker.replicas.leader_partition(OFFSETS_TOPIC, 0)
        except KraftliteError:
            return
        await self.broker.admin_call(
            AlterConfigsRequest(OFFSETS_TOPIC, {"cleanup.policy": "compact", "retention.ms": None})
        )
        log.info("offsets_topic_compacted")
