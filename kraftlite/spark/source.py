"""Reading kraftlite from Spark: options and rows as Spark's own Kafka source (so a Kafka job
ports by changing the format), batch planning, and the executor-side read shared with
streaming (`stream.py`).

Rules:
1. The driver plans exact offset ranges from the cluster's metadata; each Spark partition is
   an offset range of one topic partition, and `read()` sees only that partition object
   (it runs on an executor, in another process).
2. A read never goes past the end it planned (a DataFrame is a fixed set of records), and the
   same range always returns the same records (Spark re-runs failed tasks).
3. `read()` yields Arrow record batches built from the stored batches' buffers.
4. Records deleted by retention before the job read them fail the job with
   `failOnDataLoss=true` (the default), saying what was lost; with false they are skipped.
5. `latestPerKey=true` (batch; kraftlite's own) reads each topic partition as a table: of
   the records in its planned range, only the latest of each key, unless that one is a
   tombstone (null value); records without a key are no rows. One Spark partition per topic
   partition (a key's records are all in it), its keys folded as the range is read, so a
   task holds about twice the partition's live keys (`latest_of_each_key`). On a compacted
   topic a key written again after the plan may have had its record in the range cleaned
   away before the task read it: that key is then missing from the result (read without an
   `endingOffsets`, a batch ends at the latest offset, which leaves the window small).
6. `kafka.isolation.level` is read_committed unless set to read_uncommitted (Spark's Kafka
   source defaults to read_uncommitted): a read plans to each partition's last stable
   offset and sees only what transactions committed, never an aborted record or a
   transaction's marker (docs/spark.md). A topic without transactions reads the same
   either way, its last stable offset being its high watermark.

Options (options.py checks them; docs/spark.md has the table): the brokers
(`kafka.bootstrap.servers` or `kraftlite.bootstrap`) and credentials; one of `subscribe`,
`subscribePattern` or `assign`; where to start (`startingOffsets`, `startingTimestamp`,
`startingOffsetsByTimestamp`, with `startingOffsetsByTimestampStrategy`) and, for a batch,
where to end (`endingOffsets`, `endingTimestamp`, `endingOffsetsByTimestamp`) and
`latestPerKey`; how to split (`minPartitions`, `maxRecordsPerPartition`); `failOnDataLoss`;
`includeHeaders`; `fetchMaxBytes`; `requestTimeoutMs`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol.batch import split_batches
from kraftlite.spark.arrow import Columns, arrow_schema, to_record_batch
from kraftlite.spark.cluster import (
    LOG,
    Brokers,
    Cluster,
    DataLossError,
    PartitionState,
    TopicState,
)
from kraftlite.spark.options import (
    OptionError,
    Options,
    bootstrap_entries,
    check_scheme,
    flag_option,
    isolation_option,
    json_option,
    positive_option,
    same_option,
    security_of,
    smallest_option,
    timestamp_option,
    timestamp_strategy,
    timestamps_option,
)
from kraftlite.spark.resolve import resolve

EARLIEST, LATEST = -2, -1


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark partition: [start, end) of one topic partition, and all `read()` needs."""

    bootstrap: Brokers
    topic: str
    partition: int
    start: int
    end: int
    columns: Columns
    fail_on_data_loss: bool
    fetch_max_bytes: int
    latest_per_key: bool = False
    committed: bool = True  # kafka.isolation.level=read_committed


def selected_topics(
    options: Mapping[str, str], cluster: Cluster, *, wait: bool = True
) -> dict[str, TopicState]:
    """The topics the options select, with their partitions' current offsets (only those
    partitions the options assign). Without `wait`, partitions whose offsets are unknown right
    now are left out, and so are topics that do not exist (a stream decides what that means).
    """
    chosen = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
    if len(chosen) != 1:
        raise OptionError("set exactly one of subscribe, subscribePattern, assign")
    if chosen[0] == "subscribe":
        wanted: dict[str, set[int] | None] = {
            t.strip(): None for t in options["subscribe"].split(",") if t.strip()
        }
    elif chosen[0] == "subscribePattern":
        try:
            pattern = re.compile(options["subscribePattern"])
        except re.error as exc:
            raise OptionError(f"subscribePattern is not a valid regex: {exc}") from None
        wanted = {t: None for t in cluster.topics() if pattern.fullmatch(t)}
    else:
        assigned = json_option(options, "assign")
        if not isinstance(assigned, dict) or not all(
            isinstance(v, list) and all(isinstance(p, int) for p in v) for v in assigned.values()
        ):
            raise OptionError('assign must be JSON like {"topic": [0, 1]}')
        wanted = {t: set(ps) for t, ps in assigned.items()}
    result = {}
    for topic, subset in sorted(wanted.items()):
        try:
            state = cluster.topic(topic, wait=wait)
        except KraftliteError as exc:
            if wait or exc.code is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            continue
        if subset is not None:
            missing = {p for p in subset if not 0 <= p < state.partition_count}
            if missing:
                raise OptionError(f"assign: {topic} has no partitions {sorted(missing)}")
            state = replace(
                state, partitions=[s for s in state.partitions if s.partition in subset]
            )
        result[topic] = state
    return result


def topic_partitions(
    options: Mapping[str, str], cluster: Cluster
) -> dict[str, list[PartitionState]]:
    """The partitions the options select, all with their current offsets."""
    return {t: state.partitions for t, state in selected_topics(options, cluster).items()}


def _offsets_option(
    options: Mapping[str, str], name: str, default: str
) -> str | dict[str, dict[str, int]]:
    raw = options.get(name, default)
    if raw in {"earliest", "latest"}:
        return raw
    parsed = json_option(options, name)
    allowed = {LATEST} if name == "endingOffsets" else {EARLIEST, LATEST}
    if not isinstance(parsed, dict) or not all(
        isinstance(v, dict)
        and all(
            isinstance(o, int) and not isinstance(o, bool) and (o >= 0 or o in allowed)
            for o in v.values()
        )
        for v in parsed.values()
    ):
        special = "-1 latest" if name == "endingOffsets" else "-2 earliest, -1 latest"
        raise OptionError(
            f'{name} must be JSON like {{"t": {{"0": 5}}}} with offsets >= 0 or {special}'
        )
    return parsed


def _resolve(
    spec: str | dict[str, dict[str, int]], topic: str, state: PartitionState, name: str
) -> int:
    if spec == "earliest":
        return state.log_start_offset
    if spec == "latest":
        return state.high_watermark
    assert isinstance(spec, dict)
    value = spec.get(topic, {}).get(str(state.partition))
    if value is None:
        raise OptionError(f"{name} has no offset for {topic} partition {state.partition}")
    return {EARLIEST: state.log_start_offset, LATEST: state.high_watermark}.get(value, value)


@dataclass(frozen=True)
class ReadSettings:
    """The options every read uses, checked once on the driver."""

    bootstrap: Brokers
    columns: Columns
    fail_on_data_loss: bool
    fetch_max_bytes: int
    min_partitions: int
    max_records_per_partition: int = 0
    latest_per_key: bool = False
    committed: bool = True  # rule 6

    @classmethod
    def of(cls, options: Options, columns: Columns) -> ReadSettings:
        timeout_ms = same_option(options, ["requestTimeoutMs", "kafka.request.timeout.ms"], 30_000)
        fetch_bytes = ["fetchMaxBytes", "kafka.fetch.max.bytes", "kafka.max.partition.fetch.bytes"]
        latest = flag_option(options, "latestPerKey", False)
        if latest and not {"key", "value", "offset"} <= {name for name, _ in columns}:
            raise OptionError("latestPerKey needs the key, value and offset columns")
        return cls(
            brokers_of(options, timeout_ms),
            columns,
            flag_option(options, "failOnDataLoss", True),
            smallest_option(options, fetch_bytes, 4 << 20),
            positive_option(options, "minPartitions", 0),
            positive_option(options, "maxRecordsPerPartition", 0),
            latest,
            isolation_option(options),
        )

    def cluster(self) -> Cluster:
        return Cluster(self.bootstrap, committed=self.committed)

    def offset_range(self, topic: str, partition: int, start: int, end: int) -> OffsetRange:
        return OffsetRange(
            self.bootstrap, topic, partition, start, end, self.columns,
            self.fail_on_data_loss, self.fetch_max_bytes, self.latest_per_key, self.committed,
        )  # fmt: skip

    def split(self, ranges: list[OffsetRange]) -> list[OffsetRange]:
        if self.latest_per_key:  # rule 5: a key's records stay in one Spark partition
            return ranges
        return split(ranges, self.min_partitions, self.max_records_per_partition)


def brokers_of(options: Mapping[str, str], timeout_ms: int = 30_000) -> Brokers:
    """The brokers' HTTP URLs (`kraftlite.bootstrap` or `kafka.bootstrap.servers`; bare
    host:port entries resolved, resolve.py) and the credentials (`kraftlite.auth.*` and
    Kafka's security options, options.py)."""
    entries = bootstrap_entries(options)
    security = security_of(options)
    check_scheme(entries, options, security.tls)
    return Brokers(resolve(entries, security), security.credentials, timeout_ms)


def _by_time(
    options: Mapping[str, str], kind: str
) -> tuple[dict[str, dict[str, int]] | None, int | None]:
    """`{kind}OffsetsByTimestamp` (per partition) and `{kind}Timestamp` (for all)."""
    return (
        timestamps_option(options, f"{kind}OffsetsByTimestamp"),
        timestamp_option(options, f"{kind}Timestamp"),
    )


def _stamp_of(
    per_partition: dict[str, dict[str, int]] | None,
    for_all: int | None,
    kind: str,
    topic: str,
    partition: int,
) -> int | None:
    """The time a partition's start or end is asked at, if any (Kafka's precedence:
    per partition, then for all). Per partition, every selected partition needs one."""
    if per_partition is None:
        return for_all
    stamp = per_partition.get(topic, {}).get(str(partition))
    if stamp is None:
        raise OptionError(f"{kind}OffsetsByTimestamp has no time for {topic} partition {partition}")
    return stamp


def starting_positions(
    options: Mapping[str, str],
    cluster: Cluster,
    selected: dict[str, list[PartitionState]],
    default: str,
) -> dict[tuple[str, int], int]:
    """Where a read begins in each selected partition: startingOffsetsByTimestamp,
    startingTimestamp or startingOffsets (`default` when none is given), in Kafka's order.
    By time, the first offset whose record is at or after it; with none,
    startingOffsetsByTimestampStrategy says: `error` (the default) fails, `latest` starts at
    the high watermark.
    """
    starting = _offsets_option(options, "startingOffsets", default)
    per_partition, for_all = _by_time(options, "starting")
    strategy = timestamp_strategy(options)
    positions = {}
    for topic, states in selected.items():
        for state in states:
            stamp = _stamp_of(per_partition, for_all, "starting", topic, state.partition)
            if stamp is None:
                start = _resolve(starting, topic, state, "startingOffsets")
            else:
                found = cluster.offset_for_time(topic, state.partition, stamp)
                if found is None and strategy == "error":
                    raise OptionError(
                        f"{topic}-{state.partition} has no record at or after the starting "
                        f"timestamp {stamp} (startingOffsetsByTimestampStrategy=latest starts "
                        "such partitions at their latest offset)"
                    )
                start = state.high_watermark if found is None else found
            positions[(topic, state.partition)] = start
    return positions


def ending_positions(
    options: Mapping[str, str], cluster: Cluster, selected: dict[str, list[PartitionState]]
) -> dict[tuple[str, int], int]:
    """Where a batch read ends (exclusive): endingOffsetsByTimestamp, endingTimestamp or
    endingOffsets (default latest), in Kafka's order. By time, the first offset whose record
    is at or after it, or the high watermark if none is; never past the high watermark the
    read planned with (records written since are not part of it).
    """
    ending = _offsets_option(options, "endingOffsets", "latest")
    per_partition, for_all = _by_time(options, "ending")
    positions = {}
    for topic, states in selected.items():
        for state in states:
            stamp = _stamp_of(per_partition, for_all, "ending", topic, state.partition)
            if stamp is None:
                end = _resolve(ending, topic, state, "endingOffsets")
                if end > state.high_watermark:
                    raise OptionError(
                        f"endingOffsets {end} for {topic}-{state.partition} is past its high "
                        f"watermark {state.high_watermark}"
                    )
            else:
                found = cluster.offset_for_time(topic, state.partition, stamp)
                end = state.high_watermark if found is None else min(found, state.high_watermark)
            positions[(topic, state.partition)] = end
    return positions


def lost_to_retention(
    topic: str, partition: int, start: int, log_start: int, fail_on_data_loss: bool
) -> int:
    """Rule 4: where reading from `start` can really begin, or DataLossError."""
    if start >= log_start:
        return start
    lost = f"{topic}-{partition}: offsets {start}-{log_start - 1} were deleted by retention"
    if fail_on_data_loss:
        raise DataLossError(f"{lost} before they were read (set failOnDataLoss=false to skip them)")
    LOG.warning("%s before they were read; skipping them (failOnDataLoss=false)", lost)
    return log_start


def plan(options: Options, settings: ReadSettings) -> list[OffsetRange]:
    """Rule 1: the offset ranges of a batch read."""
    cluster = settings.cluster()
    selected = topic_partitions(options, cluster)
    starts = starting_positions(options, cluster, selected, "earliest")
    ends = ending_positions(options, cluster, selected)
    ranges = []
    for topic, states in selected.items():
        for state in states:
            start, end = starts[(topic, state.partition)], ends[(topic, state.partition)]
            if not settings.fail_on_data_loss and end <= state.log_start_offset:
                continue  # all of it was lost to retention, and we were told to skip that
            start = lost_to_retention(
                topic, state.partition, start, state.log_start_offset, settings.fail_on_data_loss
            )
            if start > end:
                raise OptionError(
                    f"{topic}-{state.partition}: starting offset {start} is after the ending "
                    f"offset {end}"
                )
            if end > start:
                ranges.append(settings.offset_range(topic, state.partition, start, end))
    return settings.split(ranges)


def split(
    ranges: list[OffsetRange], min_partitions: int, max_records: int = 0
) -> list[OffsetRange]:
    """Kafka's maxRecordsPerPartition, then its minPartitions: each range cut into equal
    pieces of at most `max_records` records, then the biggest cut in halves until there are
    at least `min_partitions`."""
    result = []
    for whole in ranges:
        size = whole.end - whole.start
        pieces = -(-size // max_records) if max_records else 1
        bounds = [whole.start + size * i // pieces for i in range(pieces + 1)]
        result += [replace(whole, start=a, end=b) for a, b in itertools.pairwise(bounds)]
    while result and len(result) < min_partitions:
        biggest = max(result, key=lambda r: r.end - r.start)
        if biggest.end - biggest.start < 2:
            break
        middle = biggest.start + (biggest.end - biggest.start) // 2
        index = result.index(biggest)
        result[index : index + 1] = [
            replace(biggest, end=middle),
            replace(biggest, start=middle),
        ]
    return result


def read_range(part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Rules 2, 3 and 5: the records of [start, end) (or the latest of each key), as Arrow
    record batches."""
    batches = _read_batches(part)
    if part.latest_per_key:
        yield from latest_of_each_key(batches, arrow_schema(part.columns))
    else:
        yield from batches


def latest_of_each_key(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    fold_rows: int = 100_000,
    fold_bytes: int = 256 << 20,
) -> Iterator[pa.RecordBatch]:
    """Rule 5: the latest record of each key among `batches` (in offset order), in offset
    order (filters keep the order: nothing is sorted, so no column is concatenated past
    Arrow's 2 GiB), its tombstones and keyless records dropped. Folded whenever the rows
    held pass `fold_rows`, or their bytes `fold_bytes`, or twice what the last fold kept,
    so memory follows the live keys."""
    held: list[pa.RecordBatch] = []
    rows = size = 0
    row_threshold, byte_threshold = fold_rows, fold_bytes
    for batch in batches:
        held.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= row_threshold or size >= byte_threshold:
            folded = _fold(pa.Table.from_batches(held, schema))
            held = folded.to_batches()
            rows, size = folded.num_rows, folded.nbytes
            row_threshold = max(fold_rows, 2 * rows)
            byte_threshold = max(fold_bytes, 2 * size)
    table = _fold(pa.Table.from_batches(held, schema))
    yield from table.filter(pc.is_valid(table["value"])).to_batches()


def _fold(table: pa.Table) -> pa.Table:
    """The last record of each key in `table` (tombstones kept: a later one may still come)."""
    keyed = table.filter(pc.is_valid(table["key"]))
    last = keyed.group_by("key").aggregate([("offset", "max")])["offset_max"]
    return keyed.filter(pc.is_in(keyed["offset"], value_set=last))


def _read_batches(part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Rules 2 and 3: the records of [start, end), as Arrow record batches."""
    cluster = Cluster(part.bootstrap, committed=part.committed)
    pages = cluster.fetch(
        part.topic,
        part.partition,
        part.start,
        part.end,
        skip_lost=not part.fail_on_data_loss,
        max_bytes=part.fetch_max_bytes,
    )
    for body, _ in pages:
        for view in split_batches(body):
            batch = to_record_batch(
                view,
                topic=part.topic,
                partition=part.partition,
                start=part.start,
                end=part.end,
                columns=part.columns,
            )
            if batch is not None:
                yield batch


class KraftliteBatchReader(DataSourceReader):
    def __init__(self, options: Options, settings: ReadSettings) -> None:
        self.options = options
        self.settings = settings

    def partitions(self) -> list[OffsetRange]:
        return plan(self.options, self.settings)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, OffsetRange):  # with nothing planned Spark still reads once,
            yield from read_range(partition)  # from a bare InputPartition: no rows
