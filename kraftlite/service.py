"""What a broker does for a client, whatever edge the request came in on (issue 16).

The HTTP edge (api/broker_app.py, api/group_handlers.py) and the Kafka edge (kafka/) are
thin translators: they parse their protocol, call one method here, and encode the answer.
Everything a request costs beyond parsing happens here, once: the produce checks and the
append, the fetch and its long-poll, offset lookups, the sticky partition choice, the
offsets of a topic's partitions asked of their leaders, group lag, the list of every
broker's groups, and admin calls passed to the controller quorum.

Rules:
1. No forwarding here. A partition this broker does not lead raises NOT_LEADER_OR_FOLLOWER
   naming the leader (id and URL); a group it does not coordinate raises NOT_COORDINATOR.
   The HTTP edge relays such a request to the leader (one hop, api/relay.py); the Kafka
   edge answers the error and the client refreshes its metadata, as Kafka's brokers do.
2. The edges get values, never a replica: `leader` answers a `Leadership` (the topic's
   limits and this leader's epoch), and every call that acts on a partition names it by
   topic and index and finds the leader itself, so a leader that moved in between is
   NOT_LEADER_OR_FOLLOWER, never a write to a replica that no longer leads. KIP-320's
   leader epoch checks live here, for both edges.
3. Authorization is the gate's (security/gate.py), which each edge asks before it calls
   here; the service trusts that a call it gets is allowed. It knows a caller's principal
   only where data is bound to one: a producer id (security/producer_ids.py).
4. Clients never write internal topics: the brokers write their own (a forged commit would
   bypass the coordinator's checks).
5. Offsets another broker knows (high watermarks, log starts) are asked with one
   `/v1/internal/offsets` call per (leader, topic), bounded in time; a leader that does not
   answer leaves its partitions out rather than failing the whole answer.
6. A client's request naming a topic that does not exist creates it, as Kafka's
   `auto.create.topics.enable` (on by default, as Kafka's): a Kafka Metadata request that
   allows it, and an HTTP produce. With `num.partitions` partitions and
   `default.replication.factor` replicas (unset: min(3, live brokers), as any new topic);
   never a name starting with "__"; only for a caller that may CREATE on the cluster or the
   topic (the edge asks the gate, and the controllers authorize the call again).
8. A compacted topic reads as a table (issue 26): a key's latest value is its partition
   leader's, from the key index (storage/log.py rule 8) once the index has caught up with
   the high watermark the read began at, so never a value not yet committed, and never an
   older one than the log held then; a record the index names that is no longer there
   (the cleaner took it for a newer one meanwhile) sends the read round again. A page of
   the table (`table_page`) is the index's entries after a cursor (an index key,
   storage/keys.py) read the same way: at most `limit` rows and `max_bytes` of keys and
   values (one row at least), with the cursor to go on from while the index has more.
7. A partition's idempotent producers (Kafka's DescribeProducers) are its leader's state
   (broker/producer_state.py), as values: id, epoch, last sequence, and the broker's time
   of its last batch there, which stands in for Kafka's last batch timestamp (a new
   leader's state counts every producer as seen when it was rebuilt).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, NoReturn, TypeVar

import aiohttp
import structlog

from kraftlite.broker import metrics
from kraftlite.broker.broker import Broker
from kraftlite.broker.notifier import wait_any
from kraftlite.broker.offsets import Offsets, leader_offsets, local_offsets
from kraftlite.broker.partition import Acks, Partition
from kraftlite.broker.producer_state import AbortedTxn
from kraftlite.broker.replica_manager import KEY_INDEX_CHUNK_BYTES
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition
from kraftlite.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator
from kraftlite.groups.offsets import CommittedOffset
from kraftlite.metadata.topics import INTERNAL_TOPICS, has_retention, validate_topic_name
from kraftlite.protocol import admin
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import stored as stored_batch
from kraftlite.protocol.admin import AdminRequest
from kraftlite.protocol.internal import (
    GroupListing,
    GroupListResponse,
    MessageError,
    TxnMarkersRequest,
    TxnMarkersResponse,
    TxnPartition,
    TxnVerifyRequest,
    TxnVerifyResponse,
)
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.protocol.kafka.wire import WireError
from kraftlite.protocol.partitioner import partition_for_key
from kraftlite.security import producer_ids
from kraftlite.storage import keys as key_index
from kraftlite.transactions.coordinator import TransactionCoordinator, TransactionSettings
from kraftlite.transactions.metadata import TopicPartition as TxnPartitionKey

log = structlog.get_logger(__name__)
A = TypeVar("A")
MAX_WAIT_MS = 30_000  # the longest a fetch long-polls, whatever it asks
MAX_FETCH_PARTITIONS = 10_000  # partitions one Kafka Fetch may name
MAX_RECORD_ERRORS = stored_batch.KEYLESS_KEPT  # the records an INVALID_RECORD names, at most
KEY_READ_TIMEOUT_S = 5.0  # how long a key's read waits for the index to catch up
# a key read decodes its record on the event loop from a batch up to this size (its cost
# is the batch's CRC and column sums, not its other records), else on a worker thread
INLINE_RECORD_BYTES = 256 << 10
KEY_INDEX_MAX_BEHIND = 100_000  # offsets a read catches the index up by; more: try later
_GROUPS_TIMEOUT_S = 5.0
# what one produce request's Kafka batches may decompress to (from_kafka_batch); never
# above what a kept batch may be read back at (protocol/stored.py)
REQUEST_DECOMPRESSED_MAX_BYTES = stored_batch.READ_DECOMPRESSED_MAX_BYTES
# An uncompressed Kafka batch of up to 1 MiB is checked on the event loop when its work is
# bounded near the GIL's switch interval (5 ms, the longest a worker thread running Python
# holds the loop off anyway): up to 4,096 records the packed parser reads (1.6 ms for
# records of 100 B; 4.2 ms if every varint is padded to its longest), or 512 records and
# 1,024 headers the reference parser reads (records with headers, or fewer than 96: 2.1 ms
# for 512 records of 2 headers, 5.8 ms padded), conversion included where it is not kept
# as sent. Anything else, or compressed, is checked on a worker thread. And such checks
# take INLINE_CHECK_PER_PASS_S of the loop at once, plus one (`LoopShare`; a pass at most
# about twice that): a produce naming many partitions starts each one's check in the same
# pass. Handing a 1,000-record batch to a thread and back cost the brokers 0.9 us a record
# more than checking it on the loop (docs/perf/README.md).
_INLINE_CONVERT_BYTES = 1 << 20
_INLINE_CONVERT_RECORDS = 4096
_INLINE_REFERENCE = kafka_records.ReferenceBound(records=512, headers=1024)
INLINE_CHECK_PER_PASS_S = 0.005
_ATTRIBUTES_LOW = 22  # the low byte of a v2 batch's attributes: bits 0-2 are compression
# Lag is exported for at most this many groups per coordinator (their names are labels:
# clients choose them), and a scrape within LAGS_FRESH_S of the last gets its answer.
MAX_LAG_GROUPS = 1000
LAGS_FRESH_S = 1.0


class LoopShare:
    """How much of the event loop's time some kind of inline work may take at once: past
    `per_pass_s` of it, the next piece waits for the reset (`call_soon`, from the window's
    first piece: the next pass), so the loop polls its sockets and runs its timers in
    between. A window can straddle two passes (pieces queued before its reset still count
    against it), so a pass holds at most about twice `per_pass_s` plus two pieces."""

    def __init__(self, per_pass_s: float) -> None:
        self._per_pass_s = per_pass_s
        self._spent_s = 0.0
        self._reset_due = False

    async def turn(self) -> None:
        """Once this pass has room (at once while it has)."""
        while self._spent_s >= self._per_pass_s:  # noqa: ASYNC110 - a pass, not an event
            await asyncio.sleep(0)  # (the reset, scheduled before this wake-up, runs first)

    def spent(self, seconds: float) -> None:
        if not self._reset_due:
            self._reset_due = True
            asyncio.get_running_loop().call_soon(self._reset)
        self._spent_s += seconds

    def _reset(self) -> None:
        self._spent_s, self._reset_due = 0.0, False


class Produced(NamedTuple):
    """Where a batch went: its first and last offsets (None for acks=0, not waited on)."""

    first_offset: int | None
    last_offset: int | None
    log_start_offset: int


class ActiveProducer(NamedTuple):
    """An idempotent producer a partition's leader keeps state for (Kafka's DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # of its last batch here (-1: none since a marker raised its epoch)
    last_seen_ms: int  # when the leader last appended for it (or rebuilt its state: rule 7)
    coordinator_epoch: int = -1  # of its last marker here (-1: none)
    txn_start_offset: int = -1  # the first offset of its open transaction here (-1: none)


class FetchWanted(NamedTuple):
    topic: str
    partition: int
    offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """Topics a client's produce or metadata request creates (Kafka's
    `auto.create.topics.enable`, `num.partitions`, `default.replication.factor`)."""

    auto_create: bool = True
    partitions: int = 1
    replication_factor: int | None = None  # None: min(3, live brokers), as any new topic


@dataclass(frozen=True, slots=True)
class Leadership:
    """This broker leads a partition (rule 2): what an edge may know of it, as a value."""

    topic: str
    partition: int
    leader_epoch: int
    max_message_bytes: int  # the topic's max.message.bytes


@dataclass(frozen=True, slots=True)
class Fetched:
    topic: str
    partition: int
    data: bytes  # zero or more whole stored batches, the first holding `offset` or later
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1  # -1: as the high watermark (no transaction state built)
    # read_committed: the aborted transactions `data` holds records of (None: read_uncommitted)
    aborted: tuple[AbortedTxn, ...] | None = None


class BrokerService:
    def __init__(  # noqa: PLR0917 - the service's parts
        self,
        broker: Broker,
        coordinator: GroupCoordinator,
        producer_id_key: bytes,
        nonces: Callable[[], int] = lambda: secrets.randbits(producer_ids.NONCE_BITS),
        topic_defaults: TopicDefaults = TopicDefaults(),
        transaction_settings: TransactionSettings | None = None,
    ) -> None:
        self.broker = broker
        self.coordinator = coordinator
        # conversions of Kafka batches off the loop (produced ones decoded, kept ones read
        # or fetched, protocol/stored.py), one at a time per broker on either edge: each may
        # hold a batch's records, up to 64 MiB, in memory
        self.converting = asyncio.Semaphore(1)
        self.inline_checks = LoopShare(INLINE_CHECK_PER_PASS_S)  # and those on the loop
        # issue 27: the transactional ids this broker coordinates; their producer ids are
        # bound to no principal (WRITE on the transactional id and the coordinator's
        # verification stand for it), made as any producer id is
        self.transactions = TransactionCoordinator(
            broker,
            self.write_markers,
            lambda tid: producer_ids.mint(producer_id_key, TXN_PRINCIPAL + tid, self._nonces()),
            transaction_settings,
        )
        self.topic_defaults = topic_defaults
        self._sticky = itertools.count()
        self._producer_id_key = producer_id_key
        self._nonces = nonces
        # The last group lags a scrape computed (loop time, groups coordinated, lags), and
        # the lock that makes concurrent scrapes share one computation.
        self._lags: tuple[float, int, list[metrics.GroupLag]] | None = None
        self._lags_lock = asyncio.Lock()
        # one key-index catch-up at a time per partition (rule 8); weak: a deleted
        # partition's goes with it
        self._index_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    # -- partitions ------------------------------------------------------------------------

    def leader(self, topic: str, index: int) -> Leadership:
        """Rule 2: that this broker leads the partition, and what an edge may know of it;
        or NOT_LEADER_OR_FOLLOWER (with `leader_id` and `leader_url`: the HTTP edge relays
        there), UNKNOWN_TOPIC_OR_PARTITION, or the lease's error."""
        partition = self._leader(topic, index)
        return Leadership(
            topic, index, partition.leader_epoch, partition.config_int("max.message.bytes")
        )

    def keeps_kafka_batches(self, topic: str, index: int) -> bool:
        """Whether a Kafka batch may be stored as sent (format 3, protocol/stored.py) in a
        partition this broker leads: only while every other replica's broker, in its
        current registration, said it reads format 3 (fetch_sessions.py rule 5). During a
        rolling upgrade a follower on older code could not follow it."""
        partition = self._leader(topic, index)
        registration = partition.registration
        if registration is None:
            return False
        replicas = self.broker.replicas
        brokers = replicas.image.brokers
        for replica in registration.replicas:
            if replica == self.broker.broker_id:
                continue
            found = brokers.get(replica)
            if found is None or (
                replicas.fetch_sessions.reads_format(replica, found.broker_epoch)
                < batch_format.MAGIC_KAFKA
            ):
                return False
        return True

    async def from_kafka_batch(
        self,
        leadership: Leadership,
        data: bytes,
        budget: list[int],
        transactional_id: str | None = None,
    ) -> bytes:
        """A partition's records as a produce sent them on either edge (the Kafka listener;
        the HTTP edge's `KAFKA_BATCHES_TYPE`): exactly one Kafka record batch, as Kafka's
        produce takes from v3 on (else INVALID_RECORD). Checked from its header first (its
        size against `max.message.bytes`, no marker, a transactional batch only with its
        transactional id), then decoded whole; answered as the batch to store: kept as sent
        where it can be (protocol/stored.py rule 1: in the codec the topic's
        `compression.type` names, or any for `producer`, and while every replica reads
        format 3), else its records as one kraftlite batch. Inline when small and
        uncompressed, else on a worker thread, one conversion at a time per broker, so a
        large or highly compressed batch cannot stall the event loop. `budget[0]`, shared
        by a request's partitions, is what they may still decompress to: decreased by what
        this batch's records came to, and to 0 when a compressed batch does not decompress
        within it (the work was done: the caller charges it). Bytes that are not a Kafka
        batch, or decompress past the budget, are CORRUPT_MESSAGE."""
        try:
            return await self._checked_kafka_batch(leadership, data, budget, transactional_id)
        except WireError as exc:
            raise KraftliteError(ErrorCode.CORRUPT_MESSAGE, str(exc)[:1024]) from None

    async def _checked_kafka_batch(
        self,
        leadership: Leadership,
        data: bytes,
        budget: list[int],
        transactional_id: str | None,
    ) -> bytes:
        size = kafka_records.batch_size_at(data)
        if size != len(data):
            raise KraftliteError(
                ErrorCode.INVALID_RECORD,
                "a produce carries exactly one record batch per partition",
            )
        limit = leadership.max_message_bytes
        if size > limit:
            raise KraftliteError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"a batch of {size} bytes; max.message.bytes of {leadership.topic} is {limit}",
            )
        attributes = data[_ATTRIBUTES_LOW]
        if attributes & kafka_records.ATTR_CONTROL:  # markers are the coordinator's
            raise KraftliteError(ErrorCode.INVALID_RECORD, "clients write no markers")
        if attributes & kafka_records.ATTR_TRANSACTIONAL and transactional_id is None:
            raise KraftliteError(
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "a transactional batch comes with its transactional id",
            )
        compressed = attributes & kafka_records.ATTR_COMPRESSION
        partition = self._leader(leadership.topic, leadership.partition)
        codec = stored_batch.topic_codec(partition.config("compression.type"))
        keeps = self.keeps_kafka_batches(leadership.topic, leadership.partition)

        def convert(reference_bound: kafka_records.ReferenceBound | None = None) -> bytes:
            try:
                (batch,) = kafka_records.decode_batches(
                    data, shared_budget=budget, reference_bound=reference_bound
                )
            except WireError:
                if compressed:
                    budget[0] = 0
                raise
            if keeps and (kept := stored_batch.kafka_form(data, batch, codec)) is not None:
                return kept
            return kafka_records.kafka_to_kraftlite(batch)

        if (
            not compressed
            and len(data) <= _INLINE_CONVERT_BYTES
            and kafka_records.claimed_count(data) <= _INLINE_CONVERT_RECORDS
        ):
            await self.inline_checks.turn()
            started = time.perf_counter()
            try:
                return convert(_INLINE_REFERENCE)
            except kafka_records.ReferenceParseDeclined:
                pass  # the reference parser's work is past its bound here: a worker's
            finally:
                self.inline_checks.spent(time.perf_counter() - started)
        async with self.converting:
            return await asyncio.to_thread(convert)

    def _leader(self, topic: str, index: int) -> Partition:
        if index < 0:
            raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "partition must be >= 0")
        return self.broker.replicas.leader_partition(topic, index)

    def check_leader_epoch(self, topic: str, index: int, current_leader_epoch: int) -> None:
        """KIP-320: a client that names the leader epoch it knows (>= 0) is told when it is
        behind (FENCED_LEADER_EPOCH) or ahead (UNKNOWN_LEADER_EPOCH) of this leader's."""
        leader_epoch = self._leader(topic, index).leader_epoch
        if current_leader_epoch < 0 or current_leader_epoch == leader_epoch:
            return
        if current_leader_epoch < leader_epoch:
            raise KraftliteError(
                ErrorCode.FENCED_LEADER_EPOCH, "the client's leader epoch is stale"
            )
        raise KraftliteError(ErrorCode.UNKNOWN_LEADER_EPOCH, "this leader's epoch is behind")

    def end_offset_for(
        self, topic: str, index: int, leader_epoch: int, *, current_leader_epoch: int = -1
    ) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch for a client (KIP-320: a consumer checks for
        truncation after the leader changed): (the epoch, where it ends), the end capped at
        the high watermark, the most a client was ever given; (-1, -1) for an epoch older
        than the log."""
        self.check_leader_epoch(topic, index, current_leader_epoch)
        log_ = self._leader(topic, index).log
        epoch, end = log_.end_offset_for(leader_epoch)
        return epoch, (min(end, log_.high_watermark) if end >= 0 else end)

    def partition_count(self, topic: str) -> int:
        return len(self.broker.replicas.topic(topic).partitions)

    def sticky_partition(self, count: int) -> int:
        """The partition for keyless records of one request (Kafka's sticky partitioner:
        one partition per request, the next one for the next request)."""
        return next(self._sticky) % count

    @staticmethod
    def partition_for(key: bytes | None, count: int, sticky: int) -> int:
        return sticky if key is None else partition_for_key(key, count)

    # -- produce ---------------------------------------------------------------------------

    def new_producer_id(self, principal: str) -> int:
        """A new producer id for `principal` (Kafka's InitProducerId for an idempotent
        producer; epoch 0): random, and bound to the principal (security/producer_ids.py),
        so only its batches may name it. The caller has asked the gate whether it may have
        one."""
        return producer_ids.mint(self._producer_id_key, principal, self._nonces())

    @staticmethod
    def refuse_internal(topic: str) -> None:
        """Rule 3."""
        if topic in INTERNAL_TOPICS:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST, f"{topic} is internal: clients cannot write to it"
            )

    def _check_batch(
        self, partition: Partition, batch: bytes, *, sent_size: int | None = None
    ) -> batch_format.BatchHeader:
        """The topic's size limit and the broker's timestamp window (Kafka's
        `log.message.timestamp.after.max.ms` / `before.max.ms`: a far-future timestamp would
        pin time-based retention), checked before anything is appended. The batch itself is
        validated by the append. `max.message.bytes` bounds the batch as the client sent it:
        `sent_size` when an edge converted it (Kafka's record batches are a little smaller
        than the columnar ones they become).
        """
        limit = partition.config_int("max.message.bytes")
        if sent_size is not None and sent_size > limit:
            raise KraftliteError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"the batch is {sent_size} bytes; max.message.bytes of {partition.topic} "
                f"is {limit}",
            )
        if sent_size is None and len(batch) > limit:
            raise KraftliteError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"the batch is {len(batch)} bytes; max.message.bytes of {partition.topic} "
                f"is {limit}",
            )
        try:
            header = batch_format.read_header(batch)
        except batch_format.CorruptBatchError as exc:
            raise KraftliteError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
        if header.magic == batch_format.MAGIC_KAFKA and not isinstance(
            batch, stored_batch.KeptKafkaBatch
        ):  # stored.py rule 1: the log checks no format 3 batch's records
            raise KraftliteError(
                ErrorCode.CORRUPT_MESSAGE,
                "format 3 batches are the Kafka listener's own: send format 1 or 2",
            )
        now = self.broker.clock.now_ms()
        limits = self.broker.settings.limits
        if header.max_timestamp - now > limits.timestamp_after_max_ms:
            raise KraftliteError(
                ErrorCode.INVALID_TIMESTAMP,
                f"timestamp {header.max_timestamp} is more than "
                f"{limits.timestamp_after_max_ms} ms ahead of the broker's clock",
            )
        if now - header.first_timestamp > limits.timestamp_before_max_ms:
            raise KraftliteError(
                ErrorCode.INVALID_TIMESTAMP,
                f"timestamp {header.first_timestamp} is more than "
                f"{limits.timestamp_before_max_ms} ms behind the broker's clock",
            )
        return header

    async def produce(
        self,
        topic: str,
        index: int,
        batch: bytes,
        acks: Acks,
        timeout_s: float,
        *,
        principal: str,
        sent_size: int | None = None,
        appended: Callable[[], None] | None = None,
    ) -> Produced:
        """Check and append one batch as the partition's leader, for `principal`. With
        acks=0 the batch is still appended before this returns (bad input is still
        refused), but not waited on. `sent_size`: the largest batch's size as the client
        sent it (see `_check_batch`). A batch naming a producer id that was not given to
        `principal` is UNKNOWN_PRODUCER_ID (producer_ids.py rule 2). `appended` is called
        once the batch is in the leader's log, before the wait for `acks` (Partition.produce).
        """
        self.refuse_internal(topic)
        partition = self._leader(topic, index)
        header = self._check_batch(partition, batch, sent_size=sent_size)
        if batch_format.is_transactional(header):
            # markers are the leader's alone; a transaction's batches come with the
            # transaction they belong to (issue 27), which this path does not name
            raise KraftliteError(
                ErrorCode.INVALID_RECORD,
                "a control batch or a transactional batch cannot be produced here",
            )
        if partition.compacted and (keyless := stored_batch.null_keys(batch, header)):
            raise KraftliteError(  # Kafka's words, and the records (its record_errors)
                ErrorCode.INVALID_RECORD,
                f"compacted topic cannot accept message without key in topic partition "
                f"{topic}-{index}",
                record_indexes=keyless[:MAX_RECORD_ERRORS],
            )
        if header.producer_id >= 0 and not producer_ids.belongs_to(
            self._producer_id_key, header.producer_id, principal
        ):
            raise KraftliteError(ErrorCode.UNKNOWN_PRODUCER_ID, "unknown producer id")
        metrics.record_produce(partition, header.record_count, len(batch))
        if acks is Acks.NONE:
            await partition.produce(batch, Acks.LEADER, timeout_s, appended=appended)
            return Produced(None, None, partition.log.log_start_offset)
        info = await partition.produce(batch, acks, timeout_s, appended=appended)
        return Produced(info.first_offset, info.last_offset, partition.log.log_start_offset)

    async def delete_records(self, topic: str, index: int, offset: int, timeout_s: float) -> int:
        """Kafka's DeleteRecords for one partition this broker leads: its log start moves
        to `offset` (-1: the high watermark) on every replica that could lead
        (broker/partition.py); answers the low watermark once they all have. Never an
        internal topic (rule 4): the coordinator keeps the offsets topic's history. Nor a
        topic whose cleanup.policy lacks `delete` (POLICY_VIOLATION, as Kafka's)."""
        self.refuse_internal(topic)
        partition = self._leader(topic, index)
        if not has_retention(partition.configs):
            raise KraftliteError(
                ErrorCode.POLICY_VIOLATION,
                f"records of {topic}-{index} cannot be deleted: its cleanup.policy "
                f"({partition.config('cleanup.policy')!r}) has no delete",
            )
        return await partition.delete_records(offset, timeout_s)

    async def active_producers(
        self, topic: str, index: int, max_listed: int | None = None
    ) -> list[ActiveProducer]:
        """Rule 7: the idempotent producers of a partition this broker leads, by id, as its
        next batch would find them (producers silent past producer.id.expiration.ms left
        out); rebuilt from the log the first time a leader epoch needs them. A partition
        keeping state for more than `max_listed` producers (expired ones too) is
        INVALID_REQUEST before any is listed. The list is made on a worker thread (a
        partition keeps up to 100,000) while the partition's producer state is locked, as
        its idempotent appends lock it: they wait, so what is listed is one moment's."""
        partition = self._leader(topic, index)
        async with partition.locked_producer_states() as states:
            kept = len(states.entries)
            if max_listed is not None and kept > max_listed:
                raise KraftliteError(
                    ErrorCode.INVALID_REQUEST,
                    f"{topic}-{index} keeps state for {kept} producers, more than the "
                    f"{max_listed} this answer has room for: ask for fewer partitions",
                )
            now = self.broker.clock.now_ms()

            def listed() -> list[ActiveProducer]:
                return sorted(
                    ActiveProducer(
                        pid,
                        e.epoch,
                        e.batches[-1].last_sequence if e.batches else -1,
                        e.last_seen_ms,
                        e.coordinator_epoch,
                        -1 if e.txn_first_offset is None else e.txn_first_offset,
                    )
                    for pid, e in states.entries.items()
                    if (e.batches or e.coordinator_epoch >= 0)
                    and (
                        now - e.last_seen_ms <= states.expiration_ms
                        or e.txn_first_offset is not None
                    )
                )

            return listed() if kept <= 1_000 else await asyncio.to_thread(listed)

    # -- transactions (issue 27) -------------------------------------------------------------

    async def produce_transactional(  # noqa: PLR0917 - produce's parameters, and the id
        self,
        topic: str,
        index: int,
        batch: bytes,
        acks: Acks,
        timeout_s: float,
        transactional_id: str,
        *,
        sent_size: int | None = None,
        appended: Callable[[], None] | None = None,
    ) -> Produced:
        """Rule 9: a transactional producer's batch, for a caller the edge found may WRITE
        the transactional id. A producer's first batch in the partition is verified with the
        id's coordinator first (Kafka's KIP-890 part 1): the partition must be in the
        producer's ongoing transaction, at its epoch."""
        self.refuse_internal(topic)
        partition = self._leader(topic, index)
        header = self._check_batch(partition, batch, sent_size=sent_size)
        if not batch_format.is_transactional(header) or batch_format.is_control(header):
            raise KraftliteError(
                ErrorCode.INVALID_RECORD, "a transactional producer's batch says it is one"
            )
        if partition.compacted and (keyless := stored_batch.null_keys(batch, header)):
            raise KraftliteError(
                ErrorCode.INVALID_RECORD,
                f"compacted topic cannot accept message without key in topic partition "
                f"{topic}-{index}",
                record_indexes=keyless[:MAX_RECORD_ERRORS],
            )
        self._check_transactional_producer(transactional_id, header.producer_id)
        token = await partition.begin_verification(header.producer_id)
        if token is not None:
            error = await self.verify_transaction(
                transactional_id,
                header.producer_id,
                header.producer_epoch,
                TxnPartitionKey(topic, index),
            )
            if error is not None:
                raise _verification_error(error)
        metrics.record_produce(partition, header.record_count, len(batch))
        info = await partition.produce(
            batch,
            Acks.LEADER if acks is Acks.NONE else acks,
            timeout_s,
            verification=token,
            appended=appended,
        )
        return Produced(info.first_offset, info.last_offset, partition.log.log_start_offset)

    async def txn_offset_commit(
        self,
        transactional_id: str,
        group: str,
        producer_id: int,
        producer_epoch: int,
        offsets: list[tuple[TopicPartition, CommittedOffset]],
        *,
        member_id: str | None = None,
        generation: int = -1,
        instance_id: str | None = None,
    ) -> None:
        """Rule 9: offsets committed inside a transaction (Kafka's TxnOffsetCommit), on the
        group's coordinator: verified with the transaction's coordinator first [T4], then
        written as the producer's transactional batch, pending until its marker."""
        self._check_transactional_producer(transactional_id, producer_id)
        partition = self.coordinator.coordinator_partition(group)
        token = await partition.begin_verification(producer_id)
        if token is not None:
            error = await self.verify_transaction(
                transactional_id,
                producer_id,
                producer_epoch,
                TxnPartitionKey(OFFSETS_TOPIC, partition.index),
            )
            if error is not None:
                raise _verification_error(error, retry=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        await self.coordinator.commit_transactional(
            group,
            producer_id,
            producer_epoch,
            offsets,
            token,
            member_id=member_id,
            generation=generation,
            instance_id=instance_id,
        )

    def _check_transactional_producer(self, transactional_id: str, producer_id: int) -> None:
        """Rule 9: a transactional id's producer ids are minted for it (the coordinator's
        `new_producer_id`), so a caller that may write one id cannot write under another's:
        its own transaction would be wedged (an epoch raised, records slipped in)."""
        if not producer_ids.belongs_to(
            self._producer_id_key, producer_id, TXN_PRINCIPAL + transactional_id
        ):
            raise KraftliteError(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                "the producer id is not this transactional id's",
            )

    async def verify_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TxnPartitionKey
    ) -> ErrorCode | None:
        """Rule 9: the coordinator's answer (coordinator.py rule 6), asked of this broker's
        own coordinator or of the broker leading the id's state partition."""
        coordinator = self.transactions
        try:
            coordinator.coordinator_partition(transactional_id)
        except KraftliteError as exc:
            if exc.code is not ErrorCode.NOT_COORDINATOR:
                return exc.code
            url = self._broker_url(exc.details.get("leader_id"))
            if url is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            wanted = TxnVerifyRequest(
                transactional_id, producer_id, producer_epoch, tp.topic, tp.partition
            )
            answer = await self._internal_post(url, "/v1/internal/txn-verify", wanted.encode())
            if answer is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            try:
                code = TxnVerifyResponse.decode(answer).error_code
            except MessageError:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            return None if code == 0 else _error_code(code)
        return coordinator.verify(transactional_id, producer_id, producer_epoch, tp)

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TxnPartitionKey],
    ) -> dict[TxnPartitionKey, ErrorCode | None]:
        """coordinator.py rule 4's MarkerWriter: the partitions this broker leads written
        here, the others asked of their leaders, all at once. A partition whose leader
        could not be reached answers NOT_LEADER_OR_FOLLOWER (tried again)."""
        results: dict[TxnPartitionKey, ErrorCode | None] = {}
        remote: dict[int, list[TxnPartitionKey]] = {}
        local: list[TxnPartitionKey] = []
        for tp in partitions:
            try:
                self._leader(tp.topic, tp.partition)
                local.append(tp)
            except KraftliteError as exc:
                leader = exc.details.get("leader_id")
                if exc.code is ErrorCode.NOT_LEADER_OR_FOLLOWER and isinstance(leader, int):
                    remote.setdefault(leader, []).append(tp)
                else:
                    results[tp] = exc.code

        async def ask(leader: int, tps: list[TxnPartitionKey]) -> None:
            url = self._broker_url(leader)
            wanted = TxnMarkersRequest(
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch,
                tuple(TxnPartition(tp.topic, tp.partition) for tp in tps),
            )
            answer = None
            if url is not None:
                answer = await self._internal_post(url, "/v1/internal/txn-markers", wanted.encode())
            found: dict[TxnPartitionKey, ErrorCode | None] = {}
            with contextlib.suppress(MessageError):
                if answer is not None:
                    for r in TxnMarkersResponse.decode(answer).results:
                        found[TxnPartitionKey(r.topic, r.partition)] = (
                            None if r.error_code == 0 else _error_code(r.error_code)
                        )
            for tp in tps:
                results[tp] = found.get(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)

        local_results = await self.write_local_markers(
            producer_id, producer_epoch, commit, coordinator_epoch, local
        )
        results.update(local_results)
        await asyncio.gather(*(ask(leader, tps) for leader, tps in remote.items()))
        return results

    async def write_local_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TxnPartitionKey],
    ) -> dict[TxnPartitionKey, ErrorCode | None]:
        """Kafka's WriteTxnMarkers on a partition leader (the internal route's, and this
        broker's coordinator's): each partition's marker, answered once its ISR holds it;
        an offsets partition's also settles the group offsets committed in the
        transaction (groups/coordinator.py)."""

        async def one(tp: TxnPartitionKey) -> ErrorCode | None:
            try:
                partition = self._leader(tp.topic, tp.partition)
                offset = await partition.write_marker(
                    producer_id,
                    producer_epoch,
                    commit,
                    coordinator_epoch,
                    _MARKER_TIMEOUT_S,
                )
            except KraftliteError as exc:
                return exc.code
            if tp.topic == OFFSETS_TOPIC:
                self.coordinator.transaction_ended(tp.partition, producer_id, commit, offset)
            return None

        answers = await asyncio.gather(*(one(tp) for tp in partitions))
        return dict(zip(partitions, answers, strict=True))

    def _broker_url(self, broker_id: object) -> str | None:
        if not isinstance(broker_id, int) or broker_id < 0:
            return None
        return self.broker.replicas.broker_url(broker_id)

    async def _internal_post(self, url: str, path: str, body: bytes) -> bytes | None:
        """A node-to-node call's answer body, None when the node did not answer (200)."""
        try:
            async with self.broker.session.post(
                url + path,
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=_INTERNAL_TIMEOUT_S),
            ) as response:
                if response.status != 200:
                    log.info("internal_call_refused", url=url, path=path, status=response.status)
                    return None
                return await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("internal_call_failed", url=url, path=path, error=repr(exc))
            return None

    # -- the table view of a compacted topic (rule 8) -------------------------------------

    async def latest_of_key(
        self,
        topic: str,
        key: bytes,
        partition_index: int | None = None,
        timeout_s: float = KEY_READ_TIMEOUT_S,
    ) -> tuple[int, batch_format.ConsumedRecord] | None:
        """(partition, record) of `key`'s latest record in compacted `topic`, from the
        leader of `partition_index`, by default the partition Kafka's default partitioner
        (the Java client's murmur2) sends the key to; None when it has none or its latest
        is a tombstone. OFFSET_NOT_AVAILABLE (retriable) while the index catches up with
        the high watermark (a new leader's, or a topic just made compacted) for longer
        than `timeout_s`."""
        count = len(self.broker.replicas.topic(topic).partitions)
        index = partition_for_key(key, count) if partition_index is None else partition_index
        partition = self._table_leader(topic, index)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        missing = None  # the offset the index named last round, whose record was gone
        while True:
            if missing is not None and loop.time() >= deadline:  # a hot key, cleaned as read
                _not_available(partition, "the key is being written faster than it reads")
            await self._index_up_to_high_watermark(partition, deadline)
            offset = partition.log.key_offset(key)
            if offset is None:
                return None
            high_watermark = partition.high_watermark()
            if offset >= high_watermark:  # indexed before a restart or a new leader's HW
                _not_available(partition, f"its high watermark {high_watermark} is behind")
            data = _batch_bytes_at(partition, offset, high_watermark)  # inline, as a fetch
            record = (  # (a Kafka batch kept as sent is decompressed: off the loop)
                _record_in(data, offset)
                if len(data) <= INLINE_RECORD_BYTES and not stored_batch.is_kafka(data)
                else await asyncio.to_thread(_record_in, data, offset)
            )
            if record is not None and record.key == key:
                return None if record.value is None else (index, record)
            if offset == missing or offset < partition.log.log_start_offset:
                # gone, and the index caught up past the HW it went by: a tombstone the
                # cleaner took before the index saw it, or retention (compact,delete)
                return None
            missing = offset  # the cleaner took it for a newer one: catch up, look again

    async def table_page(  # noqa: PLR0917 - a page's bounds
        self,
        topic: str,
        index: int,
        after: bytes | None,
        limit: int,
        max_bytes: int,
        timeout_s: float = KEY_READ_TIMEOUT_S,
    ) -> TablePage:
        """Rule 8: up to `limit` live keys of compacted partition `index` in index order,
        after the index key `after` (None: from the first), each with its latest record;
        from the partition's leader (NOT_LEADER_OR_FOLLOWER elsewhere)."""
        partition = self._table_leader(topic, index)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await self._index_up_to_high_watermark(partition, deadline)
        page = await asyncio.to_thread(_table_rows, partition, after, limit, max_bytes, None)
        while page.gone:  # again after a catch-up: what is gone twice at one offset is deleted
            if loop.time() >= deadline:
                _not_available(partition, "its keys are being written faster than it reads")
            await self._index_up_to_high_watermark(partition, deadline)
            page = await asyncio.to_thread(
                _table_rows, partition, after, limit, max_bytes, page.gone
            )
        return page

    def _table_leader(self, topic: str, index: int) -> Partition:
        """Rule 8: the leader replica of a compacted topic's partition (a topic that is not
        compacted has no table: INVALID_REQUEST)."""
        partition = self._leader(topic, index)
        if not partition.compacted:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST, f"{topic} is not compacted: it has no table"
            )
        return partition

    async def _index_up_to_high_watermark(self, partition: Partition, deadline: float) -> None:
        """The leader's key index caught up with its high watermark as it is now: one
        catch-up at a time per partition (the others wait for it, not repeat it), and not
        at all when it is far behind (the replica manager's rounds catch it up). With
        transactions, up to the last stable offset: the index takes decided records only
        (storage/txn_headers.py), so a key reads as a read_committed consumer sees it."""
        partition.high_watermark()  # as leader
        await partition.transactions()
        goal = partition.last_stable_offset()
        state = partition.state
        if state is not None and goal < state.epoch_start_offset:  # a new leader's HW
            _not_available(partition, "a new leader's high watermark is catching up")
        if goal - partition.log.indexed_offset > KEY_INDEX_MAX_BEHIND:
            _not_available(partition, f"its key index is at {partition.log.indexed_offset}")
        lock = self._index_locks.get(partition.name)
        if lock is None:
            self._index_locks[partition.name] = lock = asyncio.Lock()
        async with lock:
            while partition.log.indexed_offset < goal:
                if asyncio.get_running_loop().time() >= deadline:
                    _not_available(partition, f"its key index is at {partition.log.indexed_offset}")
                before = partition.log.indexed_offset
                after = await asyncio.to_thread(partition.log.index_keys, KEY_INDEX_CHUNK_BYTES)
                if after <= before:  # no whole batch below the HW yet, or a truncation
                    await asyncio.sleep(0.01)

    # -- fetch and offsets -----------------------------------------------------------------

    async def fetch(  # noqa: PLR0917 - a fetch's parameters, as the HTTP edge has them
        self,
        topic: str,
        index: int,
        offset: int,
        max_bytes: int,
        max_wait_ms: int,
        count_records: bool = True,
        *,
        committed: bool = False,
    ) -> Fetched:
        """One partition's `fetch_many` (the HTTP edge's fetch): batches from `offset` on,
        at least one, waiting up to `max_wait_ms` when there are none yet; its error raised.
        `count_records` and `committed`: as `fetch_many`'s."""
        wanted = FetchWanted(topic, index, offset, max_bytes)
        (result,) = await self.fetch_many(
            [wanted], 1, max_bytes, max_wait_ms, count_records=count_records, committed=committed
        )
        if isinstance(result, KraftliteError):
            raise result
        return result

    async def fetch_many(
        self,
        wanted: Sequence[FetchWanted],
        min_bytes: int,
        max_bytes: int,
        max_wait_ms: int,
        *,
        count_records: bool = True,
        committed: bool = False,
    ) -> list[Fetched | KraftliteError]:
        """Kafka's Fetch: each partition's batches from its offset, at most its own
        `max_bytes` and `max_bytes` in all (capped at `fetch.max.bytes`; the first
        partition with data gets at least one batch, so a reader always progresses).

        Answers at once when `min_bytes` <= 0, once `min_bytes` (or `max_bytes`) are there,
        when a partition fails, or when `max_wait_ms` (at most MAX_WAIT_MS) has passed;
        meanwhile it sleeps until a partition that is caught up (its offset at the high
        watermark) sees its high watermark move. A partition named twice, or more than
        MAX_FETCH_PARTITIONS partitions, is INVALID_REQUEST for the whole fetch.

        The bytes served are counted (metrics), and the records of the batches served unless
        the caller serves fewer than the batches hold and counts them itself
        (`count_records=False`: the HTTP edge's JSON fetch).

        `committed` (read_committed): each partition is read below its last stable offset,
        and answered with the aborted transactions its batches hold records of (Kafka's
        Fetch with isolation level 1; the reader skips those producers' batches).
        """
        if len(wanted) > MAX_FETCH_PARTITIONS:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST,
                f"a fetch may name at most {MAX_FETCH_PARTITIONS} partitions",
            )
        if len({(w.topic, w.partition) for w in wanted}) != len(wanted):
            raise KraftliteError(ErrorCode.INVALID_REQUEST, "a partition is named twice")
        max_bytes = max(1, min(max_bytes, self.broker.settings.limits.fetch_max_bytes))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(max_wait_ms, 0), MAX_WAIT_MS) / 1000
        while True:
            results: list[Fetched | KraftliteError] = []
            total, failed = 0, False
            caught_up: list[Partition] = []
            partitions: list[Partition | KraftliteError] = []
            for want in wanted:
                try:
                    partition = self._leader(want.topic, want.partition)
                    if committed:
                        await partition.transactions()  # built once per leader epoch
                    partitions.append(partition)
                except KraftliteError as exc:
                    partitions.append(exc)
            for want, found in zip(wanted, partitions, strict=True):
                try:
                    if isinstance(found, KraftliteError):
                        raise found
                    partition = found
                    budget = min(want.max_bytes, max_bytes - total)
                    data = b""
                    if total == 0 or budget > 0:
                        data = partition.read(want.offset, max(budget, 1), committed=committed)
                    stable = partition.last_stable_offset(known=committed)
                except KraftliteError as exc:
                    results.append(exc)
                    failed = True
                    continue
                log_ = partition.log
                total += len(data)
                if not data and want.offset >= (stable if committed else log_.high_watermark):
                    caught_up.append(partition)
                aborted = None
                if committed:
                    upper = batch_format.next_offset_after(data) if data else want.offset
                    aborted = tuple(partition.aborted_transactions(want.offset, upper))
                results.append(
                    Fetched(
                        want.topic,
                        want.partition,
                        data,
                        log_.high_watermark,
                        log_.log_start_offset,
                        stable,
                        aborted,
                    )
                )
            remaining = deadline - loop.time()
            enough = total >= min(min_bytes, max_bytes)
            if enough or failed or remaining <= 0 or not caught_up:
                for result in results:
                    if isinstance(result, Fetched) and result.data:
                        metrics.record_fetch(
                            result.topic,
                            result.data,
                            _records_in(result.data) if count_records else 0,
                        )
                return results
            await wait_any([p.hw_moved for p in caught_up], remaining)

    async def list_offset(
        self,
        topic: str,
        index: int,
        at: str | int,
        *,
        current_leader_epoch: int = -1,
        committed: bool = False,
    ) -> tuple[int, int | None]:
        """(offset, timestamp) for "earliest", "latest" or a time in unix ms: the first
        record at or after it (Kafka's ListOffsets), or the high watermark with no
        timestamp when there is none yet (the next record will be there). A client's
        `current_leader_epoch` is checked first (KIP-320). `committed` (read_committed):
        the last stable offset takes the high watermark's place [P21]."""
        self.check_leader_epoch(topic, index, current_leader_epoch)
        partition = self._leader(topic, index)
        log_ = partition.log
        if committed:
            await partition.transactions()
        bound = partition.last_stable_offset(known=True) if committed else log_.high_watermark
        if at == "earliest":
            return log_.log_start_offset, None
        if at == "latest":
            return bound, None
        if not isinstance(at, int) or at < 0:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST, "at must be earliest, latest or unix milliseconds >= 0"
            )
        # off the loop: the batch holding the time may be a Kafka batch kept compressed,
        # whose timestamps are read by decompressing it (protocol/stored.py)
        async with self.converting:
            found = await asyncio.to_thread(log_.offset_for_time, at, max_offset=bound)
        return (bound, None) if found is None else found

    async def local_offsets(self, topic: str, *, committed: bool = False) -> dict[int, Offsets]:
        return await local_offsets(self.broker, topic, committed=committed)

    async def offsets(
        self, partitions: Iterable[TopicPartition], *, committed: bool = False
    ) -> dict[TopicPartition, Offsets]:
        """Rule 4: each partition's offsets from its leader (offsets.leader_offsets);
        `committed` adds their last stable offsets."""
        return await leader_offsets(self.broker, partitions, committed=committed)

    async def topic_offsets(self, topic: str, *, committed: bool = False) -> dict[int, Offsets]:
        indexes = self.broker.replicas.topic(topic).partitions
        found = await self.offsets(((topic, index) for index in indexes), committed=committed)
        return {index: offsets for (_, index), offsets in found.items()}

    # -- groups ----------------------------------------------------------------------------

    async def group_offsets(
        self, group: str, visible: Callable[[str], bool]
    ) -> list[dict[str, Any]]:
        """The group's committed offsets of the topics `visible` lets through, with each
        partition's high watermark and lag (None where the leader did not answer)."""
        committed = {tp: c for tp, c in self.coordinator.committed(group).items() if visible(tp[0])}
        ends = await self.offsets(committed)
        answer = []
        for (topic, partition), c in sorted(committed.items()):
            found = ends.get((topic, partition))
            answer.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "offset": c.offset,
                    "metadata": c.metadata,
                    "high_watermark": None if found is None else found.high_watermark,
                    "lag": _lag(found, c.offset),
                }
            )
        return answer

    async def group_lags(self) -> tuple[int, list[metrics.GroupLag]]:
        """(groups coordinated here, the lag of each partition of the first MAX_LAG_GROUPS
        of them by name), for /metrics: one round of offset requests to the leaders,
        whatever the number of groups; scrapes at the same moment share it. Neither holds
        the event loop for long: the leaders' offsets are looked up a chunk at a time
        (offsets.py rule 3), and many rows are made on a thread (`_lag_rows`)."""
        async with self._lags_lock:
            now = asyncio.get_running_loop().time()
            if self._lags is not None and now - self._lags[0] < LAGS_FRESH_S:
                return self._lags[1], self._lags[2]
            committed = self.coordinator.coordinated_offsets()
            shown = {group: committed[group] for group in sorted(committed)[:MAX_LAG_GROUPS]}
            ends = await self.offsets({tp for offsets in shown.values() for tp in offsets})
            if sum(len(offsets) for offsets in shown.values()) > _LAG_ROWS_ON_LOOP:
                lags = await asyncio.to_thread(_lag_rows, shown, ends)
            else:
                lags = _lag_rows(shown, ends)
            self._lags = (asyncio.get_running_loop().time(), len(committed), lags)
            return len(committed), lags

    async def all_groups(self) -> list[GroupListing]:
        """Every live broker's coordinated groups, by name: this one's, and each other's
        asked with one node call (`GET /v1/internal/groups`, answered with a
        GroupListResponse: protocol/internal.py). A broker that does not answer in time,
        or answers anything else, adds no groups (as rule 4's leaders add no offsets)."""
        broker = self.broker
        urls = [
            b.url
            for b in broker.replicas.image.brokers.values()
            if not b.fenced and b.broker_id != broker.broker_id
        ]

        async def ask(url: str) -> tuple[GroupListing, ...]:
            try:
                async with broker.session.get(
                    url + "/v1/internal/groups",
                    timeout=aiohttp.ClientTimeout(total=_GROUPS_TIMEOUT_S),
                ) as response:
                    if response.status != 200:
                        log.info("groups_not_learned", url=url, status=response.status)
                        return ()
                    body = await response.read()
                return GroupListResponse.decode(body).groups
            except (aiohttp.ClientError, TimeoutError, MessageError) as exc:
                log.info("groups_not_learned", url=url, error=repr(exc))
                return ()

        groups = self.coordinator.local_groups()
        for part in await asyncio.gather(*(ask(u) for u in urls)):
            groups.extend(part)
        return sorted(groups, key=lambda g: g["group"])

    # -- admin -----------------------------------------------------------------------------

    async def admin(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """An admin call passed to the controller quorum as it came (the HTTP edge's relay
        of a client's call), answered once this broker's metadata holds its change too
        (read your writes on this broker). `headers` say for whom the call is made (the
        controllers authorize that principal)."""
        status, answer, answered = await self.broker.controllers.call_with_headers(
            method, path, body, headers=headers
        )
        await self.broker.read_your_writes(answered)
        return status, answer

    async def admin_call(
        self, request: AdminRequest[A], *, headers: dict[str, str] | None = None
    ) -> A:
        """A typed admin call (protocol/admin.py: CreateTopicRequest, DeleteTopicRequest,
        CreatePartitionsRequest, AlterConfigsRequest) to the controller quorum, with read
        your writes as `admin`; its typed answer (a TopicAnswer; None for a delete), or
        KraftliteError with the controllers' error code."""
        return await self.broker.admin_call(request, headers=headers)

    # -- auto topic creation ---------------------------------------------------------------

    def auto_creates(self, topic: str) -> bool:
        """Whether a client's request naming `topic`, which does not exist, creates it
        (rule 6; the edge checks the caller may CREATE it first)."""
        return (
            self.topic_defaults.auto_create
            and not topic.startswith("__")  # Kafka's internal names are never auto-created
            and self.broker.replicas.image.topic(topic) is None
        )

    async def auto_create(self, topic: str, *, headers: dict[str, str] | None) -> None:
        """Rule 6: create `topic` with the defaults, for the caller `headers` name (the
        controllers authorize it again); done when this broker's metadata holds it (or a
        moment later, when another request created it first). A name no topic may have is
        INVALID_TOPIC_EXCEPTION here, before any call."""
        validate_topic_name(topic)
        defaults = self.topic_defaults
        wanted = admin.CreateTopicRequest(
            topic, partitions=defaults.partitions, replication_factor=defaults.replication_factor
        )
        try:
            await self.admin_call(wanted, headers=headers)
        except KraftliteError as exc:
            if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            await self.until_known(topic)  # another's creation: its metadata is coming
            return
        log.info("topic_auto_created", topic=topic)

    async def until_known(self, topic: str, timeout_s: float = 2.0) -> None:
        """Until this broker's metadata holds `topic`, for at most `timeout_s`."""
        replicas = self.broker.replicas
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while replicas.image.topic(topic) is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            await replicas.image_changed.wait(remaining)


def _lag(found: Offsets | None, committed: int) -> int | None:
    """A group's lag on a partition: None where its leader did not answer."""
    return None if found is None else max(found.high_watermark - committed, 0)


# Lag rows a scrape makes on the event loop; more are made on a thread (`group_lags`).
_LAG_ROWS_ON_LOOP = 10_000


def _lag_rows(
    shown: dict[str, dict[TopicPartition, CommittedOffset]],
    ends: dict[TopicPartition, Offsets],
) -> list[metrics.GroupLag]:
    """Each shown group's partitions with their lag, by group then partition. Pure, and its
    arguments are this scrape's own (coordinated_offsets copies the offsets; `ends` is the
    answer of this scrape's offset requests), so a thread may make them."""
    lags = []
    for group, offsets in shown.items():
        for (topic, partition), c in sorted(offsets.items()):
            lag = _lag(ends.get((topic, partition)), c.offset)
            lags.append(metrics.GroupLag(group, topic, partition, c.offset, lag))
    return lags


def _records_in(data: bytes) -> int:
    """The records of the batches served (for metrics): a batch the log holds damaged
    is the client's to find by its CRC, not a reason to fail the fetch."""
    try:
        return batch_format.record_count(data)
    except batch_format.CorruptBatchError:
        return 0


__all__ = ["MAX_WAIT_MS", "BrokerService", "FetchWanted", "Fetched", "Offsets", "Produced"]


_MARKER_TIMEOUT_S = 10.0
_INTERNAL_TIMEOUT_S = 15.0
TXN_PRINCIPAL = "transactional-id:"  # whom a transactional id's producer ids are minted for


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


# the coordinator's verification answers, as the producer is told them [P9]
_VERIFICATION_ANSWERS = {
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    ErrorCode.TRANSACTION_ABORTABLE: ErrorCode.TRANSACTION_ABORTABLE,
}


def _verification_error(
    code: ErrorCode, retry: ErrorCode = ErrorCode.NOT_ENOUGH_REPLICAS
) -> KraftliteError:
    """[P9, T4]: what a produce (or a transactional offset commit) is answered when its
    verification failed; a coordinator that cannot answer now is `retry` (retriable, and
    for a produce no metadata refresh)."""
    answer = _VERIFICATION_ANSWERS.get(code, retry)
    return KraftliteError(answer, "the partition is not in the producer's transaction")


def _record_in(data: bytes, offset: int) -> batch_format.ConsumedRecord | None:
    """The record at `offset` in the first batch of `data`, if it holds one there."""
    for view in batch_format.split_batches(data):
        return stored_batch.record_in(view, offset)
    return None


@dataclass(frozen=True, slots=True)
class TablePage:
    """Rule 8's page of one partition's table: (index key, latest record) of each live key
    in index order, and the index key to go on after (None: the index has no more)."""

    rows: tuple[tuple[bytes, batch_format.ConsumedRecord], ...]
    next_after: bytes | None
    # entries whose record was no longer there, not known deleted: index key -> the offset
    # the index named (the caller reads the page again)
    gone: Mapping[bytes, int] = field(default_factory=dict)


TABLE_READ_FACTOR = 8  # a page reads at most this many times max_bytes of batches


def _table_rows(
    partition: Partition,
    after: bytes | None,
    limit: int,
    max_bytes: int,
    suspect: Mapping[bytes, int] | None,
) -> TablePage:
    """Rule 8's page from the index as it is (on a thread), its entries taken in index order
    and each one's batch read when its entry is reached (the last batch kept for the next
    entries), until `limit` rows, `max_bytes` of keys, values and headers, or
    TABLE_READ_FACTOR times that of batches read (one row at least). An entry whose record
    is gone (the cleaner took it for a newer one after the index caught up) is skipped and
    named in `gone`, for the caller to read the page again after another catch-up
    (`suspect`: what the last reading found gone), unless it is known deleted: gone at the
    same offset twice, or below the log start, as `latest_of_key` decides."""
    entries = partition.log.index_page(after, limit)
    high_watermark = partition.high_watermark()  # after the index: it is never above this
    log_start = partition.log.log_start_offset
    if any(offset >= high_watermark for _, offset in entries):
        _not_available(partition, f"its high watermark {high_watermark} is behind its index")
    rows: list[tuple[bytes, batch_format.ConsumedRecord]] = []
    gone: dict[bytes, int] = {}
    held: batch_format.DecodedBatch | None = None  # the last batch read
    size = read = 0
    last = after
    for index_key, offset in entries:
        if last != after and (size > max_bytes or read > TABLE_READ_FACTOR * max_bytes):
            return TablePage(tuple(rows), last, gone)  # (one entry looked at, at least)
        if held is None or not held.header.base_offset <= offset < held.header.next_offset:
            held, data_size = _batch_at(partition, offset, high_watermark)
            read += data_size
        record = None if held is None else held.record_at(offset)
        if (
            record is None
            or record.value is None
            or key_index.index_key(record.key or b"") != index_key
        ):
            deleted = suspect is not None and (
                suspect.get(index_key) == offset or offset < log_start
            )
            if not deleted:
                gone[index_key] = offset
            last = index_key
            continue
        size += len(record.key or b"") + len(record.value)
        size += sum(len(name) + len(value or b"") for name, value in record.headers)
        rows.append((index_key, record))
        last = index_key
    return TablePage(tuple(rows), last if len(entries) >= limit else None, gone)


def _batch_bytes_at(partition: Partition, offset: int, high_watermark: int) -> bytes:
    """The stored batch holding `offset` below the high watermark, or the next one after it
    (b"" when none is left: retention took it)."""
    try:
        return partition.log.read(offset, 1, max_offset=high_watermark)
    except KraftliteError as exc:
        if exc.code is not ErrorCode.OFFSET_OUT_OF_RANGE:
            raise
        return b""


def _batch_at(
    partition: Partition, offset: int, high_watermark: int
) -> tuple[batch_format.DecodedBatch | None, int]:
    """The batch holding `offset` below the high watermark (None when it is gone), and the
    bytes read."""
    data = _batch_bytes_at(partition, offset, high_watermark)
    for batch in stored_batch.decode_stream(data):
        if batch.header.base_offset <= offset < batch.header.next_offset:
            return batch, len(data)
        break
    return None, len(data)


def _not_available(partition: Partition, why: str) -> NoReturn:
    raise KraftliteError(
        ErrorCode.OFFSET_NOT_AVAILABLE, f"{partition.name}: {why}; try again shortly"
    )
