"""`df.write.format("kraftlite")` and `writeStream`: rows become records, as with Spark's
Kafka sink, written exactly once with transactions (Spark's Kafka sink is at-least-once).

Rules:
1. Columns: `value` (required, binary or string), `key` (binary or string), `topic` (string;
   the `topic` option wins over it), `partition` (int), `headers`
   (`array<struct<key:string,value:binary>>`; a header's value may be null, its key may not).
   Other columns are ignored. Checked on the driver before any task runs.
2. The partition: the row's `partition` if set; else Kafka's murmur2 of the key; else one
   partition per batch, moving on with each batch (Kafka's sticky partitioner).
3. Records go in binary batches (at most `batchMaxBytes` encoded, default 512 KiB; split
   further if the topic's max.message.bytes is smaller) to the partition's leader with
   acks=all, in row order per partition; a task returns only once everything it wrote is
   acknowledged.
4. `deliveryGuarantee=exactly-once` (the default): each task writes inside a transaction
   of its own transactional id, `{transactionalIdPrefix}{query id}-{task's partition}` for
   a stream (the query id survives restarts from the checkpoint) and
   `{prefix}{write id}-{partition}` for a batch write (a fresh id per write). Its
   InitProducerId fences any earlier attempt of the task and aborts what it left open. The
   task does not commit: it hands its producer id and epoch to the driver, which commits
   every task's transaction once Spark has them all (`commit`), tagged with the
   micro-batch (the coordinator keeps the tag with the commit that decides it:
   transactions/metadata.py rule 6), or aborts them (`abort`). A micro-batch replayed after
   the driver died halfway through its commits finds the transactions it had committed
   tagged with it and aborts their replays instead: each row is committed once, provided a
   replayed micro-batch gives each task the rows it gave it before (Spark's own condition
   for exactly-once sinks: a deterministic query over a replayable source). Readers see a
   micro-batch's records when the driver commits them, with read_committed.
5. `deliveryGuarantee=at-least-once`: plain batches, no transaction; any failure fails the
   task and Spark retries it, so a retried task, or a batch sent again after a lost answer,
   can write records twice; nothing is ever lost.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from kraftlite.clock import SystemClock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import names
from kraftlite.protocol.partitioner import partition_for_key
from kraftlite.spark.arrow import COLUMN_TYPES
from kraftlite.spark.cluster import LOG, Brokers, Cluster
from kraftlite.spark.options import OptionError, Options, positive_option, same_option
from kraftlite.spark.source import brokers_of

if TYPE_CHECKING:
    StreamWriterBase = DataSourceStreamWriter
else:  # Spark 4.1+ hands a stream writer Arrow batches, as the batch writer; 4.0 gives Rows
    from pyspark.sql import datasource as _datasource

    StreamWriterBase = getattr(_datasource, "DataSourceStreamArrowWriter", DataSourceStreamWriter)

EXACTLY_ONCE, AT_LEAST_ONCE = "exactly-once", "at-least-once"
DEFAULT_PREFIX = "kraftlite-spark-"
MAX_PREFIX = 200  # the rest of the id: a query id (36) and a partition
DEFAULT_TRANSACTION_TIMEOUT_MS = 300_000  # a micro-batch's tasks and its commit, within it
QUERY_ID = "sql.streaming.queryId"  # the local property Spark gives a streaming query's tasks
MAX_PARALLEL_ENDS = 16
T = TypeVar("T")
# header, the most padding the 13 sections can take (12, and 13 with a null header value), slack
BATCH_OVERHEAD = 48 + 13 * 7 + 8
SINK_TYPES: dict[str, set[str]] = {
    "value": {"binary", "string"},
    "key": {"binary", "string"},
    "topic": {"string"},
    "partition": {"int"},
    "headers": {COLUMN_TYPES["headers"]},
}


@dataclass(frozen=True)
class SinkSettings:
    """What every write task needs, checked once on the driver (rule 1)."""

    bootstrap: Brokers
    topic: str | None
    batch_max_bytes: int
    request_timeout_ms: int
    exactly_once: bool = True  # rule 4, else rule 5
    transactional_id_prefix: str = DEFAULT_PREFIX
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS

    @classmethod
    def of(cls, options: Options, fields: Iterable[tuple[str, str]]) -> SinkSettings:
        """`fields`: each input column's (name, Spark simpleString type)."""
        types = dict(fields)
        if "value" not in types:
            raise OptionError("the kraftlite sink needs a value column (binary or string)")
        for name, allowed in SINK_TYPES.items():
            if name in types and types[name] not in allowed:
                raise OptionError(
                    f"column {name} must be {' or '.join(sorted(allowed))}, not {types[name]}"
                )
        topic = options.get("topic")
        if topic is None and "topic" not in types:
            raise OptionError("set the topic option or give the rows a topic column")
        acks = options.get("kafka.acks")
        if acks is not None and acks.strip().lower() not in {"all", "-1"}:
            raise OptionError(
                f"kafka.acks {acks}: the kraftlite sink always writes with acks=all and waits "
                "for it (at-least-once); it offers nothing weaker"
            )
        timeout_ms = same_option(options, ["requestTimeoutMs", "kafka.request.timeout.ms"], 30_000)
        guarantee = options.get("deliveryGuarantee", EXACTLY_ONCE).strip().lower()
        if guarantee not in {EXACTLY_ONCE, AT_LEAST_ONCE}:
            raise OptionError(
                f"deliveryGuarantee must be {EXACTLY_ONCE} or {AT_LEAST_ONCE}, not {guarantee!r}"
            )
        prefix = options.get("transactionalIdPrefix", DEFAULT_PREFIX)
        if not names.is_name(prefix, MAX_PREFIX):
            raise OptionError(
                f"transactionalIdPrefix is 1-{MAX_PREFIX} characters, no control characters"
            )
        return cls(
            brokers_of(options, timeout_ms),
            topic,
            positive_option(options, "batchMaxBytes", 512 << 10),
            timeout_ms,
            guarantee == EXACTLY_ONCE,
            prefix,
            same_option(
                options,
                ["transactionTimeoutMs", "kafka.transaction.timeout.ms"],
                DEFAULT_TRANSACTION_TIMEOUT_MS,
            ),
        )


@dataclass(frozen=True)
class SinkTransaction:
    """A task's open transaction (rule 4), for the driver to end."""

    transactional_id: str
    producer_id: int
    producer_epoch: int

    @property
    def producer(self) -> tuple[int, int]:
        return self.producer_id, self.producer_epoch


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What one task wrote: records per topic, and the transaction they are in (rule 4;
    None when the task wrote nothing, or at-least-once)."""

    records: dict[str, int]
    transaction: SinkTransaction | None = None


def _bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{what} must be binary or string, not {type(value).__name__}")


@dataclass
class _Pending:
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[batch_format.Headers] = field(default_factory=list)
    size: int = 0


class RecordSender:
    """One task's writer: rows in, acknowledged batches out (rules 2-4)."""

    def __init__(self, settings: SinkSettings, transactional_id: str | None = None) -> None:
        """`transactional_id`: write inside a transaction of that id (rule 4)."""
        self.settings = settings
        # a margin over the broker's own acks=all wait, so its answer (even a timeout) arrives
        self.cluster = Cluster(settings.bootstrap, timeout_s=settings.request_timeout_ms / 1000 + 5)
        self.counts: dict[str, int] = {}  # partitions per topic
        self.sticky: dict[str, int] = {}
        self.pending: dict[tuple[str, int], _Pending] = {}
        self.written: dict[str, int] = {}
        self.rng = random.Random()  # noqa: S311 - spreads load, nothing secret
        self.clock = SystemClock()
        self.transactional_id = transactional_id
        self.transaction: SinkTransaction | None = None
        self.sequences: dict[tuple[str, int], int] = {}  # next base sequence per partition

    def _partition_count(self, topic: str) -> int:
        if topic not in self.counts:  # every partition counts, with a leader now or not
            self.counts[topic] = self.cluster.topic(topic, wait=False).partition_count
        return self.counts[topic]

    def add(self, row: Mapping[str, Any]) -> None:
        topic = self.settings.topic or row.get("topic")
        if not topic:
            raise ValueError("a row has no topic (null topic column and no topic option)")
        key = _bytes(row.get("key"), "key")
        value = _bytes(row["value"], "value")
        headers = tuple(_header(h) for h in row.get("headers") or ())
        count = self._partition_count(topic)
        partition = row.get("partition")
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, count)
            else:
                partition = self.sticky.setdefault(topic, self.rng.randrange(count))
        elif not 0 <= partition < count:
            raise ValueError(f"{topic} has partitions 0-{count - 1}, a row asks for {partition}")
        size = encoded_size(key, value, headers)
        pending = self.pending.setdefault((topic, partition), _Pending())
        if pending.values and BATCH_OVERHEAD + pending.size + size > self.settings.batch_max_bytes:
            self._send(topic, partition)
            pending = self.pending.setdefault((topic, partition), _Pending())
        pending.keys.append(key)
        pending.values.append(value)
        pending.headers.append(headers)
        pending.size += size

    def _send(self, topic: str, partition: int) -> None:
        pending = self.pending.pop((topic, partition))
        self._produce(topic, partition, pending, 0, len(pending.values))
        self.written[topic] = self.written.get(topic, 0) + len(pending.values)
        if self.sticky.get(topic) == partition:  # rule 2: the next batch goes elsewhere
            self.sticky[topic] = (partition + 1) % self._partition_count(topic)

    def _produce(self, topic: str, partition: int, pending: _Pending, low: int, high: int) -> None:
        """Records [low, high) of `pending` in one batch, or in halves if the topic's
        max.message.bytes is below batchMaxBytes, in order either way.
        """
        now = self.clock.now_ms()
        txn = self._in_transaction(topic, partition)
        body = batch_format.encode_batch(
            pending.values[low:high],
            keys=pending.keys[low:high],
            timestamps=[now] * (high - low),
            headers=pending.headers[low:high],
            producer_id=-1 if txn is None else txn.producer_id,
            producer_epoch=-1 if txn is None else txn.producer_epoch,
            base_sequence=-1 if txn is None else self.sequences[(topic, partition)],
            transactional=txn is not None,
        )
        timeout_ms = self.settings.request_timeout_ms
        try:
            if txn is None:
                self.cluster.produce(topic, partition, body, timeout_ms)
            else:
                self.cluster.produce_transactional(
                    topic, partition, body, txn.transactional_id, timeout_ms
                )
                self.sequences[(topic, partition)] += high - low
        except KraftliteError as exc:
            if exc.code is not ErrorCode.MESSAGE_TOO_LARGE:
                raise
            if high - low == 1:
                raise KraftliteError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"a record of {len(body)} bytes encoded is more than {topic} takes "
                    f"({exc.message})",
                ) from None
            middle = (low + high) // 2
            self._produce(topic, partition, pending, low, middle)
            self._produce(topic, partition, pending, middle, high)

    def _in_transaction(self, topic: str, partition: int) -> SinkTransaction | None:
        """Rule 4: the task's transaction, begun with its first batch, with `partition` in
        it; None at-least-once."""
        if self.transactional_id is None:
            return None
        if self.transaction is None:
            try:
                producer_id, epoch = self.cluster.init_transactions(
                    self.transactional_id, self.settings.transaction_timeout_ms
                )
            except KraftliteError as exc:
                if exc.code is not ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                    raise
                raise KraftliteError(
                    exc.code,
                    f"the exactly-once sink writes as transactional id {self.transactional_id}: "
                    "grant the job's user WRITE on the TRANSACTIONAL_ID resources prefixed "
                    f"{self.settings.transactional_id_prefix!r} (a PREFIXED ACL), or set "
                    f"deliveryGuarantee={AT_LEAST_ONCE} ({exc.message})",
                ) from None
            self.transaction = SinkTransaction(self.transactional_id, producer_id, epoch)
        if (topic, partition) not in self.sequences:
            self.cluster.add_partitions(
                self.transactional_id, self.transaction.producer, topic, partition
            )
            self.sequences[(topic, partition)] = 0
        return self.transaction

    def flush(self) -> SinkCommit:
        for topic, partition in list(self.pending):
            self._send(topic, partition)
        return SinkCommit(dict(self.written), self.transaction)


def encoded_size(key: bytes | None, value: bytes | None, headers: batch_format.Headers) -> int:
    """An upper bound of what one record adds to an encoded batch: a timestamp, a length and
    a validity bit for key and value, a header count (every record has one once any record
    of the batch has headers), two lengths per header and a byte for its validity bit (once
    any header value of the batch is null) (docs/batch-format.md). With `BATCH_OVERHEAD`
    it bounds the whole batch.
    """
    size = 8 + 4 + 4 + 1 + 4 + len(key or b"") + len(value or b"")  # a header count always:
    return size + sum(9 + len(name.encode()) + len(data or b"") for name, data in headers)


def _header(pair: Mapping[str, Any]) -> batch_format.Header:
    """A header from its row: a null value is kept (Kafka's null header value)."""
    name = pair["key"]
    if name is None:
        raise ValueError("header keys must not be null")
    return name, _bytes(pair["value"], "a header value")


def _rows(items: Iterator[Any]) -> Iterator[Mapping[str, Any]]:
    """Rows from Arrow batches (Spark 4.1+ writers) or from Spark Rows (4.0 stream writer)."""
    for item in items:
        if isinstance(item, pa.RecordBatch):
            yield from item.to_pylist()
        else:
            yield item.asDict()


def write_task(
    settings: SinkSettings, items: Iterator[Any], write_id: str | None = None
) -> SinkCommit:
    """One task's rows written. `write_id`: a batch write's id (rule 4); None in a stream,
    whose query id the task reads from its context."""
    transactional_id = None
    if settings.exactly_once:
        context = TaskContext.get()
        if context is None:
            raise RuntimeError("the kraftlite sink's write runs in a Spark task")
        owner = write_id if write_id is not None else context.getLocalProperty(QUERY_ID)
        if not owner:
            raise RuntimeError("a streaming write's task does not know its query id")
        transactional_id = f"{settings.transactional_id_prefix}{owner}-{context.partitionId()}"
    sender = RecordSender(settings, transactional_id)
    for row in _rows(items):
        sender.add(row)
    return sender.flush()


def _transactions(messages: list[WriterCommitMessage | None]) -> list[SinkTransaction]:
    return [
        m.transaction for m in messages if isinstance(m, SinkCommit) and m.transaction is not None
    ]


def end_all(
    settings: SinkSettings, messages: list[WriterCommitMessage | None], *, commit: bool, tag: str
) -> None:
    """Rule 4, on the driver: every task's transaction committed with `tag`, except one
    whose id's last commit already carries `tag` (a replayed micro-batch: its records are
    in), which is aborted; or, without `commit`, all aborted. Each id has its own
    coordinator, asked in parallel; the first failure is raised once all were tried."""
    transactions = _transactions(messages)
    if not transactions:
        return
    cluster = Cluster(settings.bootstrap)

    def end(txn: SinkTransaction) -> None:
        decided = commit
        if commit:
            found = cluster.transaction(txn.transactional_id)
            if found is None:  # its task just began a transaction under it: gone since?
                raise KraftliteError(
                    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                    f"{txn.transactional_id} is unknown to its coordinator: its records are "
                    "not committed",
                )
            decided = found.get("commit_tag") != tag
        cluster.end_transaction(
            txn.transactional_id, txn.producer, commit=decided, tag=tag if decided else None
        )

    _in_parallel(end, transactions)


def _in_parallel(call: Callable[[T], None], items: Sequence[T]) -> None:
    """`call` on every item, MAX_PARALLEL_ENDS at a time; the first failure is raised once
    all were tried."""
    if not items:
        return
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_ENDS, len(items))) as pool:
        outcomes = [pool.submit(call, item) for item in items]
    errors = [e for f in outcomes if (e := f.exception()) is not None]
    if errors:
        raise errors[0]


def fence_unfinished(
    settings: SinkSettings, messages: list[WriterCommitMessage | None], owner: str | None
) -> None:
    """Rule 4, on a failed write: the ids of the tasks that gave no commit message (failed,
    or cancelled) and have a transaction open are taken once more, which aborts it at once,
    rather than by its timeout while read_committed readers of their partitions wait (an
    attempt still running may begin one after this: its timeout ends that). `owner`: the
    write id or query id of the ids (None: unknown, nothing to do)."""
    if owner is None or not settings.exactly_once:
        return
    cluster = Cluster(settings.bootstrap)
    prefix = settings.transactional_id_prefix
    unfinished = [f"{prefix}{owner}-{i}" for i, m in enumerate(messages) if m is None]

    def fence(transactional_id: str) -> None:
        try:
            found = cluster.transaction(transactional_id)
            if found is not None and found["state"] == "Ongoing":  # else nothing is open
                cluster.init_transactions(transactional_id, settings.transaction_timeout_ms)
        except KraftliteError as exc:  # best effort: its timeout aborts it otherwise
            LOG.warning("could not fence %s: %s", transactional_id, exc)

    _in_parallel(fence, unfinished)


def _query_of(settings: SinkSettings, messages: list[WriterCommitMessage | None]) -> str | None:
    """The query id in the transactional ids the tasks that finished used."""
    for txn in _transactions(messages):
        owner, _, _ = txn.transactional_id.removeprefix(
            settings.transactional_id_prefix
        ).rpartition("-")
        return owner
    return None


class KraftliteWriter(DataSourceArrowWriter):
    """A batch write: tasks' transactions are committed together by the driver once every
    task succeeded, or aborted (rule 4)."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self.write_id = uuid.uuid4().hex  # made on the driver, the same in every task

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_task(self.settings, iterator, self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        end_all(self.settings, messages, commit=True, tag=self.write_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            end_all(self.settings, messages, commit=False, tag=self.write_id)
        finally:
            fence_unfinished(self.settings, messages, self.write_id)


class KraftliteStreamWriter(StreamWriterBase):
    """Rule 4: each micro-batch's transactions are committed by the driver, tagged with
    the batch id; at-least-once (rule 5), its records are acknowledged before the batch
    commits and nothing is left to do."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_task(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        end_all(self.settings, messages, commit=True, tag=str(batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        try:
            end_all(self.settings, messages, commit=False, tag=str(batchId))
        finally:
            fence_unfinished(self.settings, messages, _query_of(self.settings, messages))
