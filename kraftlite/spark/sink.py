"""`df.write.format("kraftlite")` and `writeStream`: rows become records, as with Spark's
Kafka sink.

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
4. Any failure fails the task and Spark retries it: at-least-once. A retried task, or a batch
   sent again after a lost answer, can write records twice; nothing is ever lost.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from kraftlite.clock import SystemClock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.partitioner import partition_for_key
from kraftlite.spark.arrow import COLUMN_TYPES
from kraftlite.spark.cluster import Brokers, Cluster
from kraftlite.spark.options import OptionError, Options, positive_option, same_option
from kraftlite.spark.source import brokers_of

if TYPE_CHECKING:
    StreamWriterBase = DataSourceStreamWriter
else:  # Spark 4.1+ hands a stream writer Arrow batches, as the batch writer; 4.0 gives Rows
    from pyspark.sql import datasource as _datasource

    StreamWriterBase = getattr(_datasource, "DataSourceStreamArrowWriter", DataSourceStreamWriter)

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
        return cls(
            brokers_of(options, timeout_ms),
            topic,
            positive_option(options, "batchMaxBytes", 512 << 10),
            timeout_ms,
        )


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What one task wrote: records per topic."""

    records: dict[str, int]


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

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        # a margin over the broker's own acks=all wait, so its answer (even a timeout) arrives
        self.cluster = Cluster(settings.bootstrap, timeout_s=settings.request_timeout_ms / 1000 + 5)
        self.counts: dict[str, int] = {}  # partitions per topic
        self.sticky: dict[str, int] = {}
        self.pending: dict[tuple[str, int], _Pending] = {}
        self.written: dict[str, int] = {}
        self.rng = random.Random()  # noqa: S311 - spreads load, nothing secret
        self.clock = SystemClock()

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
        body = batch_format.encode_batch(
            pending.values[low:high],
            keys=pending.keys[low:high],
            timestamps=[now] * (high - low),
            headers=pending.headers[low:high],
        )
        try:
            self.cluster.produce(topic, partition, body, self.settings.request_timeout_ms)
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

    def flush(self) -> SinkCommit:
        for topic, partition in list(self.pending):
            self._send(topic, partition)
        return SinkCommit(dict(self.written))


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


def write_task(settings: SinkSettings, items: Iterator[Any]) -> SinkCommit:
    sender = RecordSender(settings)
    for row in _rows(items):
        sender.add(row)
    return sender.flush()


class KraftliteWriter(DataSourceArrowWriter):
    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_task(self.settings, iterator)


class KraftliteStreamWriter(StreamWriterBase):
    """Each micro-batch's records are acknowledged before the batch commits (rule 3);
    nothing is left to do in commit, and nothing can be undone in abort (rule 4).
    """

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_task(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
