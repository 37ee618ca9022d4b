"""The `kraftlite` PySpark data source: batch reads (`spark.read.format("kraftlite")`),
options and rows as Spark's own Kafka source, so a Kafka job ports by changing the format.

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
`failOnDataLoss`; `includeHeaders`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kraftlite.spark.arrow import HEADERS_DDL, SPARK_DDL, to_record_batch
from kraftlite.spark.cluster import Cluster, PartitionState

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

    bootstrap: tuple[str, ...]
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
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


def topic_partitions(
    options: Mapping[str, str], cluster: Cluster
) -> dict[str, list[PartitionState]]:
    """The topic partitions the options select, with their current offsets."""
    chosen = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
    if len(chosen) != 1:
        raise OptionError("set exactly one of subscribe, subscribePattern, assign")
    if chosen[0] == "subscribe":
        wanted: dict[str, set[int] | None] = {
            t.strip(): None for t in options["subscribe"].split(",") if t.strip()
        }
    elif chosen[0] == "subscribePattern":
        pattern = re.compile(options["subscribePattern"])
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
        states = cluster.partitions(topic)
        if subset is not None:
            missing = subset - {s.partition for s in states}
            if missing:
                raise OptionError(f"assign: {topic} has no partitions {sorted(missing)}")
            states = [s for s in states if s.partition in subset]
        result[topic] = states
    return result


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


def plan(raw_options: Mapping[str, str]) -> list[OffsetRange]:
    """Rule 1: the offset ranges of a batch read."""
    options = Options(raw_options)
    bootstrap = tuple(
        u.strip().rstrip("/")
        for u in options.get("kraftlite.bootstrap", "").split(",")
        if u.strip()
    )
    cluster = Cluster(bootstrap)
    include_headers = _flag(options, "includeHeaders", False)
    fail_on_data_loss = _flag(options, "failOnDataLoss", True)
    starting = _offsets_option(options, "startingOffsets", "earliest")
    ending = _offsets_option(options, "endingOffsets", "latest")
    by_time = options.get("startingOffsetsByTimestamp")
    at_time = options.get("startingTimestamp")
    ranges = []
    for topic, states in topic_partitions(options, cluster).items():
        for state in states:
            if by_time is not None:
                stamps = _json(options, "startingOffsetsByTimestamp")
                stamp = stamps.get(topic, {}).get(str(state.partition))
                if not isinstance(stamp, int):
                    raise OptionError(
                        f"startingOffsetsByTimestamp misses {topic} {state.partition}"
                    )
                start = cluster.offset_for_time(topic, state.partition, stamp)
            elif at_time is not None:
                if not at_time.isdigit():
                    raise OptionError("startingTimestamp must be unix milliseconds")
                start = cluster.offset_for_time(topic, state.partition, int(at_time))
            else:
                start = _resolve(starting, topic, state, "startingOffsets")
            end = _resolve(ending, topic, state, "endingOffsets")
            if end > state.high_watermark:
                raise OptionError(
                    f"endingOffsets {end} for {topic}-{state.partition} is past its high "
                    f"watermark {state.high_watermark}"
                )
            if not fail_on_data_loss and end <= state.log_start_offset:
                continue  # all of it was lost to retention, and we were told to skip that
            if start < state.log_start_offset:
                if fail_on_data_loss:  # rule 4
                    raise OptionError(
                        f"{topic}-{state.partition}: offsets {start}-{state.log_start_offset - 1}"
                        " were deleted by retention before they were read (set failOnDataLoss="
                        "false to skip them)"
                    )
                start = state.log_start_offset
            if start > end:
                raise OptionError(
                    f"{topic}-{state.partition}: starting offset {start} is after the ending "
                    f"offset {end}"
                )
            if end > start:
                ranges.append(
                    OffsetRange(
                        bootstrap, topic, state.partition, start, end, include_headers,
                        fail_on_data_loss,
                    )
                )  # fmt: skip
    minimum = options.get("minPartitions", "0") or "0"
    if not minimum.isdigit():
        raise OptionError(f"minPartitions must be a positive integer, not {minimum!r}")
    return split(ranges, int(minimum))


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
            _with(biggest, end=middle),
            _with(biggest, start=middle),
        ]
    return result


def _with(r: OffsetRange, **changes: int) -> OffsetRange:
    values = {f: getattr(r, f) for f in r.__dataclass_fields__}
    return OffsetRange(**{**values, **changes})


def read_range(part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Rules 2 and 3: the records of [start, end), as Arrow record batches."""
    cluster = Cluster(part.bootstrap)
    pages = cluster.fetch(
        part.topic, part.partition, part.start, part.end, skip_lost=not part.fail_on_data_loss
    )
    for body, _ in pages:
        from kraftlite.protocol.batch import split_batches  # noqa: PLC0415

        for view in split_batches(body):
            batch = to_record_batch(
                view,
                topic=part.topic,
                partition=part.partition,
                start=part.start,
                end=part.end,
                include_headers=part.include_headers,
            )
            if batch is not None:
                yield batch


class KraftliteBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[OffsetRange]:
        return plan(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, OffsetRange):  # with nothing planned Spark still reads once,
            yield from read_range(partition)  # from a bare InputPartition: no rows


class KraftliteDataSource(DataSource):
    """`format("kraftlite")`."""

    @classmethod
    def name(cls) -> str:
        return "kraftlite"

    def schema(self) -> str:
        headers = _flag(Options(self.options), "includeHeaders", False)
        return SPARK_DDL + (HEADERS_DDL if headers else "")

    def reader(self, schema: StructType) -> KraftliteBatchReader:
        return KraftliteBatchReader(self.options)
