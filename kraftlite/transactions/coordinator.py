"""The transaction coordinator on a broker (issue 27): the transactional ids whose
`__transaction_state` partition this broker leads, their state (records in that
partition), and the markers that end their transactions in every partition they wrote.
The decisions are metadata.py's; this module runs them against the log, the clock and the
partitions' leaders. docs/design/kafka-transactions.md has Kafka's rules (ids in brackets).

Rules:
1. A transactional id's coordinator is the leader of `__transaction_state` partition
   murmur2(id) % N (every broker agrees; Kafka hashes with Java's String.hashCode, which no
   client computes: they ask FindCoordinator). The topic is created on first use,
   replicated min(3, brokers), min.insync.replicas min(2, factor), compacted: each
   partition keeps the last record of each id [C2-C4].
2. The coordinator epoch is the partition's leader epoch [C5]. A write is one record, the
   id's whole metadata, appended with acks=all; the in-memory view changes only once it is
   acknowledged and this broker still leads the partition in the same epoch, else the
   answer is NOT_COORDINATOR [C12-C14]. While a write for an id is in flight its other
   requests are answered CONCURRENT_TRANSACTIONS [C12].
3. A broker that becomes the partition's leader (a new epoch) replays the partition (last
   record of each id wins, a tombstone deletes) and finishes every transaction it finds
   prepared: it sends its markers again and writes its completion [C23]; it answers the
   partition's requests COORDINATOR_LOAD_IN_PROGRESS until then (a small partition loads
   at once).
4. Once a Prepare state is written the client is answered, and the markers go out: one
   per partition, written by the partition's leader (`MarkerWriter`), retried until each
   partition took it, was deleted, or answered that a newer coordinator or producer epoch
   exists (this coordinator then stops: its successor finishes it) [C25-C29]. Then the
   Complete state is written. A request for the id meanwhile waits up to SETTLE_WAIT_S
   for that to finish before it is decided, rather than being told
   CONCURRENT_TRANSACTIONS at once: a client's next transaction begins with an
   AddPartitionsToTxn right after its commit, and librdkafka and Java retry it only after
   20 ms, longer than the markers take.
5. A transaction older than its timeout is aborted by the coordinator at the next epoch,
   fencing its producer [C20]; an id idle past transactional.id.expiration.ms is deleted
   with a tombstone [C21]. Both run in `run`'s rounds.
6. Verification (KIP-890 part 1, [P8-P9]): a partition's leader asks whether a partition
   is in an id's transaction before the producer's first transactional batch there
   (`verify`, which writes nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import orjson
import structlog

from kraftlite.broker.log_store import ReplicaLog
from kraftlite.broker.partition import Acks, Partition, Role
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.partitioner import partition_for_key
from kraftlite.transactions import metadata as txn
from kraftlite.transactions.metadata import TopicPartition, TxnMetadata, TxnState

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker

log = structlog.get_logger(__name__)
TXN_TOPIC = "__transaction_state"
_KEY_PREFIX = b"txn\x00"
INLINE_LOAD_BYTES = 128 << 10
_READ_BYTES = 8 << 20
_RUN_INTERVAL_S = 0.5
SETTLE_WAIT_S = 0.5  # rule 4: how long a request waits for its id's markers


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    partitions: int = 10  # transaction.state.log.num.partitions (Kafka: 50)
    max_timeout_ms: int = txn.DEFAULT_MAX_TIMEOUT_MS  # transaction.max.timeout.ms
    id_expiration_ms: int = txn.DEFAULT_ID_EXPIRATION_MS  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_check_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    expire_check_interval_ms: int = 3_600_000
    write_timeout_s: float = 10.0
    marker_retry_ms: int = 100  # between rounds of markers some partitions did not take


class MarkerWriter(Protocol):
    """Writes a marker to partitions through their leaders: each partition's error (None
    for written). The broker's writes locally led ones itself and asks the others' leaders
    (service.py)."""

    def __call__(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> Awaitable[dict[TopicPartition, ErrorCode | None]]: ...


# -- records --------------------------------------------------------------------------


def state_key(transactional_id: str) -> bytes:
    return _KEY_PREFIX + transactional_id.encode()


def state_value(m: TxnMetadata) -> bytes:
    return orjson.dumps(
        {
            "producer_id": m.producer_id,
            "producer_epoch": m.producer_epoch,
            "timeout_ms": m.timeout_ms,
            "state": int(m.state),
            "partitions": sorted([t, p] for t, p in m.partitions),
            "start_ms": m.start_ms,
            "last_update_ms": m.last_update_ms,
            "previous_producer_id": m.previous_producer_id,
            **({} if m.commit_tag is None else {"commit_tag": m.commit_tag}),
        }
    )


def parse_state_record(
    key: bytes | None, value: bytes | None
) -> tuple[str, TxnMetadata | None] | None:
    """(id, metadata or None for a tombstone); None for a record that is not one of ours.
    ValueError for one that cannot be read."""
    if key is None or not key.startswith(_KEY_PREFIX):
        return None
    transactional_id = key[len(_KEY_PREFIX) :].decode()
    if value is None:
        return transactional_id, None
    try:
        data = orjson.loads(value)
        return transactional_id, TxnMetadata(
            transactional_id,
            int(data["producer_id"]),
            int(data["producer_epoch"]),
            int(data["timeout_ms"]),
            TxnState(int(data["state"])),
            frozenset(TopicPartition(str(t), int(p)) for t, p in data["partitions"]),
            int(data["start_ms"]),
            int(data["last_update_ms"]),
            previous_producer_id=int(data.get("previous_producer_id", txn.NO_PRODUCER_ID)),
            commit_tag=None if (tag := data.get("commit_tag")) is None else str(tag),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"unreadable transaction state record: {exc!r}") from None


class LoadStoppedError(Exception):
    pass


def replay(
    log_: ReplicaLog, stopping: Callable[[], bool] = lambda: False
) -> dict[str, TxnMetadata]:
    """Rule 3's replay of a state partition to its log end; an unreadable record is
    skipped (logged)."""
    found: dict[str, TxnMetadata] = {}
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        if stopping():
            raise LoadStoppedError
        data = log_.read(offset, _READ_BYTES)
        if not data:
            break
        for decoded in batch_format.decode_stream(data):
            offset = decoded.header.next_offset
            if batch_format.is_control(decoded.header):
                continue
            for record in decoded.records():
                try:
                    parsed = parse_state_record(record.key, record.value)
                except ValueError as exc:
                    log.warning("txn_record_skipped", offset=record.offset, error=str(exc))
                    continue
                if parsed is None:
                    continue
                transactional_id, metadata = parsed
                if metadata is None:
                    found.pop(transactional_id, None)
                else:
                    found[transactional_id] = metadata
    return found


@dataclass
class TxnShard:
    """What this broker coordinates for one state partition, in one leader epoch."""

    coordinator_epoch: int
    txns: dict[str, TxnMetadata] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # rule 2: ids with a write in flight
    completing: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # rule 4

    def close(self) -> None:
        for task in self.completing.values():
            task.cancel()


# Errors a partition may answer a marker with that mean "try again" [C27]
_RETRY_MARKER = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.BROKER_NOT_AVAILABLE,
    }
)
# ... and that mean a newer coordinator or producer epoch exists: stop [C27]
_STOP_MARKERS = frozenset(
    {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}
)
# A failed state write, as the client is told [C13]
_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}


@dataclass(frozen=True, slots=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: TxnState
    start_ms: int  # when its transaction began (NO_TIMESTAMP: never)


class TransactionCoordinator:
    def __init__(
        self,
        broker: Broker,
        markers: MarkerWriter,
        new_producer_id: Callable[[str], int],
        settings: TransactionSettings | None = None,
    ) -> None:
        self.broker = broker
        self.settings = settings or TransactionSettings()
        self._write_markers = markers
        self._new_producer_id = new_producer_id
        self._shards: dict[int, TxnShard] = {}
        self._loading: dict[int, tuple[int, asyncio.Task[None]]] = {}
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="txn-loader")
        self._stopping = threading.Event()
        self._runners: list[asyncio.Task[None]] = []

    # -- routing (rule 1) --------------------------------------------------------------------

    def state_partition(self, transactional_id: str) -> int:
        """Rule 1, over the topic's partitions once it exists (a changed
        `transaction.state.log.num.partitions` must not give an id two coordinators)."""
        topic = self.broker.replicas.image.topic(TXN_TOPIC)
        count = self.settings.partitions if topic is None else len(topic.partitions)
        return partition_for_key(transactional_id.encode(), count)

    async def ensure_state_topic(self) -> None:
        """Create `__transaction_state` on first use (any broker may; one wins)."""
        if await self.broker.ensure_internal_topic(TXN_TOPIC, self.settings.partitions):
            log.info("transaction_state_topic_created", partitions=self.settings.partitions)

    def coordinator_partition(self, transactional_id: str) -> Partition:
        index = self.state_partition(transactional_id)
        try:
            return self.broker.replicas.leader_partition(TXN_TOPIC, index)
        except KraftliteError as exc:
            if exc.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise KraftliteError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction state topic is not ready"
                ) from None
            raise KraftliteError(
                ErrorCode.NOT_COORDINATOR,
                f"broker {self.broker.broker_id} does not coordinate this transactional id",
                leader_id=exc.details.get("leader_id"),
                leader_url=exc.details.get("leader_url"),
            ) from None

    def _shard(self, transactional_id: str) -> tuple[Partition, TxnShard]:
        if not transactional_id:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, "a transactional id is not empty")
        partition = self.coordinator_partition(transactional_id)
        return partition, self._shard_of(partition)

    def _shard_of(self, partition: Partition) -> TxnShard:
        """Rule 3: the partition's shard for its leader epoch, loaded at once when small,
        else COORDINATOR_LOAD_IN_PROGRESS while the loader replays it."""
        index, epoch = partition.index, partition.leader_epoch
        shard = self._shards.get(index)
        if shard is not None and shard.coordinator_epoch == epoch:
            return shard
        if shard is not None:
            shard.close()
            del self._shards[index]
        loading = self._loading.get(index)
        if loading is None and partition.log.size_bytes <= INLINE_LOAD_BYTES:
            return self._install(partition, replay(partition.log))
        if loading is None or loading[0] != epoch:
            task = asyncio.get_running_loop().create_task(self._load(partition, epoch))
            self._loading[index] = (epoch, task)
        raise KraftliteError(
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            f"broker {self.broker.broker_id} is loading {TXN_TOPIC}-{index}",
        )

    async def _load(self, partition: Partition, epoch: int) -> None:
        index = partition.index

        def current() -> bool:
            return partition.role is Role.LEADER and partition.leader_epoch == epoch

        try:
            if not current():
                return
            found = await asyncio.get_running_loop().run_in_executor(
                self._loader,
                replay,
                partition.log,
                lambda: self._stopping.is_set() or not current(),
            )
        except LoadStoppedError:
            return
        except Exception:
            log.exception("txn_state_load_failed", partition=index, leader_epoch=epoch)
            return
        finally:
            mine = self._loading.get(index)
            if mine is not None and mine[1] is asyncio.current_task():
                del self._loading[index]
        existing = self._shards.get(index)
        if current() and (existing is None or existing.coordinator_epoch != epoch):
            if existing is not None:
                existing.close()
            self._install(partition, found)

    def _install(self, partition: Partition, found: dict[str, TxnMetadata]) -> TxnShard:
        shard = TxnShard(partition.leader_epoch, found)
        self._shards[partition.index] = shard
        for transactional_id, metadata in found.items():
            if metadata.state in txn.PREPARED:  # rule 3 [C23]
                self._start_completing(partition, shard, transactional_id, metadata)
        log.info(
            "txn_state_loaded",
            partition=partition.index,
            coordinator_epoch=partition.leader_epoch,
            transactional_ids=len(found),
        )
        return shard

    def _current(self, partition: Partition, shard: TxnShard) -> bool:
        return (
            self._shards.get(partition.index) is shard
            and partition.role is Role.LEADER
            and partition.leader_epoch == shard.coordinator_epoch
        )

    # -- requests ----------------------------------------------------------------------------

    def _now(self) -> int:
        return self.broker.clock.now_ms()

    async def _settled(self, transactional_id: str) -> tuple[Partition, TxnShard]:
        """The id's partition and shard once the id's markers in flight, if any, are
        written, or SETTLE_WAIT_S has passed (rule 4); nothing else is awaited after it, so
        the caller decides on the state as it is."""
        partition, shard = self._shard(transactional_id)
        completing = shard.completing.get(transactional_id)
        if completing is not None and not completing.done():
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(completing), SETTLE_WAIT_S)
            partition, shard = self._shard(transactional_id)
        return partition, shard

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[int, int]:
        """Kafka's InitProducerId for a transactional id [I3-I8]: (producer id, epoch)."""
        partition, shard = await self._settled(transactional_id)
        decision = txn.init_producer_id(
            shard.txns.get(transactional_id),
            transactional_id,
            timeout_ms,
            expected,
            self._now(),
            lambda: self._new_producer_id(transactional_id),
            pending=transactional_id in shard.pending,
            max_timeout_ms=self.settings.max_timeout_ms,
        )
        return await self._carry_out(partition, shard, transactional_id, decision)

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> None:
        """AddPartitionsToTxn and AddOffsetsToTxn [A4, O2], once the caller's rights and the
        partitions were checked."""
        partition, shard = await self._settled(transactional_id)
        decision = txn.add_partitions(
            shard.txns.get(transactional_id),
            producer_id,
            producer_epoch,
            partitions,
            self._now(),
            pending=transactional_id in shard.pending,
        )
        await self._carry_out(partition, shard, transactional_id, decision)

    async def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        tag: str | None = None,
    ) -> None:
        """EndTxn [E2-E4]: answered once the Prepare state is written (rule 4); a commit's
        `tag` is metadata.py rule 6."""
        partition, shard = await self._settled(transactional_id)
        decision = txn.end_txn(
            shard.txns.get(transactional_id),
            producer_id,
            producer_epoch,
            commit,
            self._now(),
            pending=transactional_id in shard.pending,
            tag=tag,
        )
        await self._carry_out(partition, shard, transactional_id, decision)

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode | None:
        """Rule 6 [A5]: None when `tp` is in the id's ongoing transaction of that producer."""
        try:
            _, shard = self._shard(transactional_id)
        except KraftliteError as exc:
            return exc.code
        current = shard.txns.get(transactional_id)
        if current is None or current.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if current.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if current.state in txn.PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if current.state is not TxnState.ONGOING or tp not in current.partitions:
            return ErrorCode.TRANSACTION_ABORTABLE
        return None

    def describe(self, transactional_id: str) -> TxnMetadata:
        """DescribeTransactions [X1]: TRANSACTIONAL_ID_NOT_FOUND for an id this coordinator
        does not have."""
        _, shard = self._shard(transactional_id)
        found = shard.txns.get(transactional_id)
        if found is None:
            raise KraftliteError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "no such transactional id")
        return found

    def listing(self) -> list[TxnListing]:
        """ListTransactions [X2]: every id of the state partitions this broker leads and has
        loaded (a partition still loading raises COORDINATOR_LOAD_IN_PROGRESS)."""
        found: list[TxnListing] = []
        for partition in self._led_partitions():
            shard = self._shard_of(partition)
            found += [
                TxnListing(tid, m.producer_id, m.state, m.start_ms)
                for tid, m in sorted(shard.txns.items())
            ]
        return found

    def _led_partitions(self) -> list[Partition]:
        topic = self.broker.replicas.image.topic(TXN_TOPIC)
        if topic is None:
            return []
        led = []
        for index in topic.partitions:
            with contextlib.suppress(KraftliteError):
                led.append(self.broker.replicas.leader_partition(TXN_TOPIC, index))
        return led

    # -- carrying out a decision (rule 2) ------------------------------------------------------

    async def _carry_out(
        self, partition: Partition, shard: TxnShard, transactional_id: str, decision: txn.Decision
    ) -> tuple[int, int]:
        match decision:
            case txn.Refused(error):
                raise KraftliteError(error, _WHY.get(error, error.name.lower()))
            case txn.Answered(producer_id, producer_epoch):
                return producer_id, producer_epoch
            case txn.Write(metadata, answer, markers):
                await self._write(partition, shard, transactional_id, metadata)
                if markers:
                    self._start_completing(partition, shard, transactional_id, metadata)
                if answer is not None:
                    raise KraftliteError(answer, _WHY.get(answer, answer.name.lower()))
                return metadata.producer_id, metadata.producer_epoch
        raise AssertionError(decision)

    async def _write(
        self,
        partition: Partition,
        shard: TxnShard,
        transactional_id: str,
        metadata: TxnMetadata | None,
    ) -> None:
        """Rule 2: one record (a tombstone for None), acks=all, then installed."""
        shard.pending.add(transactional_id)
        try:
            now = self._now()
            value = None if metadata is None else state_value(metadata)
            batch = batch_format.encode_records(
                [batch_format.Record(value=value, key=state_key(transactional_id), timestamp=now)],
                now,
            )
            try:
                await partition.produce(batch, Acks.ALL, self.settings.write_timeout_s)
            except KraftliteError as exc:
                code = _WRITE_ERRORS.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR)
                raise KraftliteError(
                    code, f"the transaction state was not written: {exc}"
                ) from None
            if not self._current(partition, shard):
                raise KraftliteError(
                    ErrorCode.NOT_COORDINATOR, "this broker stopped coordinating the id"
                )
            if metadata is None:
                shard.txns.pop(transactional_id, None)
            else:
                shard.txns[transactional_id] = metadata
        finally:
            shard.pending.discard(transactional_id)

    # -- markers (rule 4) ----------------------------------------------------------------------

    def _start_completing(
        self, partition: Partition, shard: TxnShard, transactional_id: str, prepared: TxnMetadata
    ) -> None:
        running = shard.completing.get(transactional_id)
        if running is not None and not running.done():
            return
        task = asyncio.get_running_loop().create_task(
            self._complete(partition, shard, transactional_id, prepared),
            name=f"txn-markers-{transactional_id}",
        )
        shard.completing[transactional_id] = task
        task.add_done_callback(
            lambda done: (
                shard.completing.pop(transactional_id, None)
                if shard.completing.get(transactional_id) is done
                else None
            )
        )

    async def _complete(
        self, partition: Partition, shard: TxnShard, transactional_id: str, prepared: TxnMetadata
    ) -> None:
        """Rule 4 [C25-C29]: every partition's marker, then the Complete state."""
        commit = prepared.state is TxnState.PREPARE_COMMIT
        remaining = set(prepared.partitions)
        image_topics = self.broker.replicas.image
        while remaining:
            if not self._current(partition, shard) or self._stopping.is_set():
                return  # the next coordinator finishes it [C29]
            remaining = {tp for tp in remaining if _exists(image_topics.topic(tp.topic), tp)}
            if not remaining:  # deleted topics take no marker [C28]
                break
            try:
                results = await self._write_markers(
                    prepared.producer_id,
                    prepared.producer_epoch,
                    commit,
                    shard.coordinator_epoch,
                    sorted(remaining),
                )
            except Exception:
                log.exception("txn_markers_failed", transactional_id=transactional_id)
                results = {}
            for tp, error in results.items():
                if error is None:
                    remaining.discard(tp)  # (a deleted topic's are dropped above [C28])
                elif error in _STOP_MARKERS:
                    log.warning(
                        "txn_markers_fenced",
                        transactional_id=transactional_id,
                        partition=f"{tp.topic}-{tp.partition}",
                        error=error.name,
                    )
                    return
            if remaining:
                await asyncio.sleep(self.settings.marker_retry_ms / 1000)
            image_topics = self.broker.replicas.image
        while self._current(partition, shard) and not self._stopping.is_set():
            current = shard.txns.get(transactional_id)
            if current != prepared:
                return  # superseded (cannot happen while prepared: every request waits)
            if transactional_id in shard.pending:
                await asyncio.sleep(self.settings.marker_retry_ms / 1000)
                continue
            try:
                await self._write(
                    partition, shard, transactional_id, txn.completed(prepared, self._now())
                )
            except KraftliteError as exc:
                if exc.code is not ErrorCode.COORDINATOR_NOT_AVAILABLE:
                    return  # NOT_COORDINATOR: the next coordinator finishes it [C29]
                await asyncio.sleep(self.settings.marker_retry_ms / 1000)
            else:
                return

    # -- rounds (rule 5) -----------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._runners = [loop.create_task(self._rounds(), name="transactions")]

    async def stop(self) -> None:
        self._stopping.set()
        tasks = [*self._runners, *(task for _, task in self._loading.values())]
        for shard in self._shards.values():
            tasks += shard.completing.values()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.to_thread(self._loader.shutdown, wait=True)

    async def _rounds(self) -> None:
        last_abort = last_expiry = 0
        while True:
            await asyncio.sleep(_RUN_INTERVAL_S)
            now = self.broker.clock.monotonic_ms()
            try:
                for partition in self._led_partitions():
                    with contextlib.suppress(KraftliteError):
                        self._shard_of(partition)  # loads a new leadership's (rule 3)
                if now - last_abort >= self.settings.abort_check_interval_ms:
                    last_abort = now
                    await self.abort_timed_out()
                if now - last_expiry >= self.settings.expire_check_interval_ms:
                    last_expiry = now
                    await self.expire_ids()
            except Exception:  # the next round tries again
                log.exception("txn_round_failed")

    async def abort_timed_out(self) -> int:
        """Rule 5 [C20]: fence and abort each ongoing transaction past its timeout."""
        aborted = 0
        for partition in self._led_partitions():
            shard = self._shards.get(partition.index)
            if shard is None or not self._current(partition, shard):
                continue
            for transactional_id in list(shard.txns):
                # read now, not from the list: each write below lets requests run, and
                # the decision must be on what is there with no await before its write
                current, now = shard.txns.get(transactional_id), self._now()
                if (
                    current is None
                    or transactional_id in shard.pending
                    or not txn.timed_out(current, now)
                    or not self._current(partition, shard)
                ):
                    continue
                try:
                    await self._carry_out(
                        partition, shard, transactional_id, txn.fence(current, now)
                    )
                except KraftliteError as exc:
                    if exc.code is not ErrorCode.CONCURRENT_TRANSACTIONS:  # the fence's own
                        continue  # not written: the next round tries again
                aborted += 1
                log.info("txn_timed_out", transactional_id=transactional_id)
        return aborted

    async def expire_ids(self) -> int:
        """Rule 5 [C21]: tombstones for ids idle past transactional.id.expiration.ms."""
        expired = 0
        for partition in self._led_partitions():
            shard = self._shards.get(partition.index)
            if shard is None or not self._current(partition, shard):
                continue
            for transactional_id in list(shard.txns):
                current, now = shard.txns.get(transactional_id), self._now()  # as above
                if (
                    current is None
                    or transactional_id in shard.pending
                    or not txn.expired(current, now, self.settings.id_expiration_ms)
                    or not self._current(partition, shard)
                ):
                    continue
                with contextlib.suppress(KraftliteError):
                    await self._write(partition, shard, transactional_id, None)
                    expired += 1
        return expired


def _exists(topic: object, tp: TopicPartition) -> bool:
    """[C28]: a partition that is still there (its topic not deleted, nor recreated with
    fewer partitions)."""
    partitions = getattr(topic, "partitions", None)
    return partitions is not None and tp.partition in partitions


_WHY = {
    ErrorCode.CONCURRENT_TRANSACTIONS: "the transaction is being changed: retry",
    ErrorCode.PRODUCER_FENCED: "a newer producer with this transactional id exists",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "the producer id is not this transactional id's",
    ErrorCode.INVALID_TXN_STATE: "not allowed in the transaction's state",
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: "transaction.timeout.ms is out of range",
    ErrorCode.INVALID_REQUEST: "a transactional id is not empty",
}
