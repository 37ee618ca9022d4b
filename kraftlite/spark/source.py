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

Options: `kraftlite.bootstrap` (broker URLs, comma-separated), one of `subscribe`
(comma-separated topics), `subscribePattern` (a regex) or `assign` (JSON
`{"topic": [0, 1]}`); `startingOffsets` / `endingOffsets` (`earliest`, `latest`, or JSON
`{"topic": {"0": 23, "1": -2}}` with -2 earliest and -1 latest); `startingTimestamp` or
`startingOffsetsByTimestamp` (JSON `{"topic": {"0": ms}}`); `minPartitions`;
`failOnDataLoss`; `includeHeaders`; `fetchMaxBytes` (bytes per fetch, default 4 MiB).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from kraftlite.client.credentials import Credentials
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol.batch import split_batches
from kraftlite.spark.arrow import Columns, to_record_batch
from kraftlite.spark.cluster import (
    LOG,
    Brokers,
    Cluster,
    DataLossError,
    PartitionState,
    TopicState,
)

EARLIEST, LATEST = -2, -1


class OptionError(ValueError):
    """A bad option: the message names it."""


class Options(dict[str, str]):
    """Spark's option names are case-insensitive (it hands them over lower-cased)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__({k.lower(): v for k, v in options.items()})

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


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


def flag_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.lower() not in {"true", "false"}:
        raise OptionError(f"{name} must be true or false, not {value!r}")
    return value.lower() == "true"


def _json(options: Mapping[str, str], name: str) -> Any:
    try:
        return json.loads(options[name])
    except ValueError as exc:
        raise OptionError(f"{name} is not valid JSON: {exc}") from None


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
        assigned = _json(options, "assign")
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
    parsed = _json(options, name)
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

    @classmethod
    def of(cls, options: Options, columns: Columns) -> ReadSettings:
        return cls(
            bootstrap_urls(options),
            columns,
            flag_option(options, "failOnDataLoss", True),
            positive_option(options, "fetchMaxBytes", 4 << 20),
            positive_option(options, "minPartitions", 0),
        )

    def cluster(self) -> Cluster:
        return Cluster(self.bootstrap)

    def offset_range(self, topic: str, partition: int, start: int, end: int) -> OffsetRange:
        return OffsetRange(
            self.bootstrap, topic, partition, start, end, self.columns,
            self.fail_on_data_loss, self.fetch_max_bytes,
        )  # fmt: skip


def bootstrap_urls(options: Mapping[str, str]) -> Brokers:
    """`kraftlite.bootstrap`, and the `kraftlite.auth.*` options: `user` and `password`,
    or `token`; `ca.file` for https:// brokers; `cert.file` and `key.file` for a client
    certificate (docs/spark.md)."""
    urls = tuple(
        u.strip().rstrip("/")
        for u in options.get("kraftlite.bootstrap", "").split(",")
        if u.strip()
    )
    if not urls:
        raise OptionError("kraftlite.bootstrap is required (broker URLs, comma-separated)")
    try:
        credentials = Credentials.from_options(options, "kraftlite.auth.")
    except ValueError as exc:
        raise OptionError(f"kraftlite.auth.*: {exc}") from None
    return Brokers(urls, credentials)


def positive_option(options: Mapping[str, str], name: str, default: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit() or int(raw) < 1:
        raise OptionError(f"{name} must be a positive integer, not {raw!r}")
    return int(raw)


def starting_positions(
    options: Mapping[str, str],
    cluster: Cluster,
    selected: dict[str, list[PartitionState]],
    default: str,
) -> dict[tuple[str, int], int]:
    """Where a read begins in each selected partition: startingOffsetsByTimestamp,
    startingTimestamp or startingOffsets (`default` when none is given).
    """
    starting = _offsets_option(options, "startingOffsets", default)
    by_time = options.get("startingOffsetsByTimestamp")
    stamps = _json(options, "startingOffsetsByTimestamp") if by_time is not None else None
    at_time = options.get("startingTimestamp")
    if at_time is not None and not at_time.isdigit():
        raise OptionError("startingTimestamp must be unix milliseconds")
    positions = {}
    for topic, states in selected.items():
        for state in states:
            if stamps is not None:
                stamp = stamps.get(topic, {}).get(str(state.partition))
                if not isinstance(stamp, int) or isinstance(stamp, bool):
                    raise OptionError(
                        f"startingOffsetsByTimestamp misses {topic} {state.partition}"
                    )
                start = cluster.offset_for_time(topic, state.partition, stamp)
            elif at_time is not None:
                start = cluster.offset_for_time(topic, state.partition, int(at_time))
            else:
                start = _resolve(starting, topic, state, "startingOffsets")
            positions[(topic, state.partition)] = start
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
    ending = _offsets_option(options, "endingOffsets", "latest")
    selected = topic_partitions(options, cluster)
    starts = starting_positions(options, cluster, selected, "earliest")
    ranges = []
    for topic, states in selected.items():
        for state in states:
            start = starts[(topic, state.partition)]
            end = _resolve(ending, topic, state, "endingOffsets")
            if end > state.high_watermark:
                raise OptionError(
                    f"endingOffsets {end} for {topic}-{state.partition} is past its high "
                    f"watermark {state.high_watermark}"
                )
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
    return split(ranges, settings.min_partitions)


def split(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """At least `min_partitions` ranges, by cutting the biggest ones (Kafka's minPartitions)."""
    result = list(ranges)
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
    """Rules 2 and 3: the records of [start, end), as Arrow record batches."""
    cluster = Cluster(part.bootstrap)
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
