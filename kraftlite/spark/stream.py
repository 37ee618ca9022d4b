"""`spark.readStream.format("kraftlite")`: micro-batches of exact offset ranges, with the
positions in Spark's checkpoint (`offsets.py` has the layout and its rules).

Rules:
1. Spark's checkpoint is the truth: a restarted query continues from its last committed
   end, with no gap and no duplicate; `startingOffsets` applies to a new query only.
2. Every micro-batch is planned from the cluster's high watermarks, so it holds only
   committed records; a partition whose offsets are unknown right now waits a trigger.
3. New partitions (a topic grown, or a new topic matching `subscribePattern`) are read from
   their beginning.
4. Records deleted by retention before they were read fail the query (`failOnDataLoss`,
   the default) or are skipped with a warning.
5. `maxOffsetsPerTrigger` caps each micro-batch (Spark 4.2+, through read limits); with
   `Trigger.AvailableNow` the query ends at the high watermarks seen when it started.
6. `commitToGroup`: the end of each micro-batch Spark has committed is also committed to that
   kraftlite consumer group, so lag tools show the job's progress. Spark says so through
   `commit(end)` only when it starts the next batch; but the `start` it hands
   `latestOffset` is always the end of a batch already in its commit log, so that is
   committed too (else the last batch of an AvailableNow run would never show; before 4.2
   there is no start, and the group stays one micro-batch behind). Best effort: Spark's
   checkpoint stays the truth, and a failed group commit logs a warning.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyspark
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from kraftlite.errors import KraftliteError
from kraftlite.spark import offsets
from kraftlite.spark.offsets import Positions, SourceOffset
from kraftlite.spark.source import (
    LOG,
    OffsetRange,
    OptionError,
    Options,
    ReadSettings,
    _positive,
    lost_to_retention,
    read_range,
    split,
    starting_positions,
    topic_partitions,
)

if TYPE_CHECKING:

    class SupportsTriggerAvailableNow:
        def prepareForTriggerAvailableNow(self) -> None: ...

    class ReadAllAvailable:
        pass

    class ReadMaxRows:
        max_rows: int

        def __init__(self, max_rows: int) -> None: ...

    HAS_READ_LIMITS = True
else:
    try:  # Spark 4.2+: read limits and Trigger.AvailableNow for Python sources
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadMaxRows,
            SupportsTriggerAvailableNow,
        )

        HAS_READ_LIMITS = True
    except ImportError:  # 4.0/4.1: Spark wraps the source for AvailableNow itself

        class SupportsTriggerAvailableNow:
            pass

        ReadAllAvailable = ReadMaxRows = None
        HAS_READ_LIMITS = False


class KraftliteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options, settings: ReadSettings) -> None:
        self.options = options
        self.settings = settings
        self.max_rows = _positive(options, "maxOffsetsPerTrigger", 0) or None
        if self.max_rows is not None and not HAS_READ_LIMITS:
            raise OptionError(
                f"maxOffsetsPerTrigger needs pyspark 4.2 or newer (read limits for Python "
                f"sources); this is pyspark {pyspark.__version__}"
            )
        if "endingOffsets" in options:
            raise OptionError("endingOffsets is for batch reads only")
        self.group = options.get("commitToGroup")
        self.target: Positions | None = None  # rule 5: AvailableNow's end
        self.in_group: Positions = {}  # rule 6: what the group holds already

    def _available(self, *, wait: bool) -> Positions:
        """Each selected partition's high watermark (rule 2)."""
        selected = topic_partitions(self.options, self.settings.cluster(), wait=wait)
        return {(t, s.partition): s.high_watermark for t, ss in selected.items() for s in ss}

    def initialOffset(self) -> SourceOffset:
        cluster = self.settings.cluster()
        selected = topic_partitions(self.options, cluster)
        return offsets.canonical(starting_positions(self.options, cluster, selected, "latest"))

    def getDefaultReadLimit(self) -> Any:
        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._available(wait=True)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> SourceOffset:
        """Rules 2, 3 and 5. Spark before 4.2 calls this with no arguments."""
        # Before 4.2 there is no start to keep a partition's place while its offsets are
        # unknown, so wait for them rather than leave it out (it would restart from 0).
        available = self.target
        if available is None:
            available = self._available(wait=start is None)
        begin = offsets.parse(start)
        self._commit_to_group(begin)
        end = offsets.advance(begin, available)
        if HAS_READ_LIMITS and isinstance(limit, ReadMaxRows):
            end = offsets.cap(begin, end, limit.max_rows)
        return offsets.canonical(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[OffsetRange]:
        begin, finish = offsets.parse(start), offsets.parse(end)
        wanted = {
            tp: (offsets.start_of(begin, tp), stop)
            for tp, stop in finish.items()
            if stop > offsets.start_of(begin, tp)
        }
        if not wanted:
            return []
        cluster = self.settings.cluster()
        log_starts = {  # a partition without a leader now: read() checks it instead
            (topic, state.partition): state.log_start_offset
            for topic in sorted({t for t, _ in wanted})
            for state in cluster.partitions(topic, wait=False)
        }
        ranges = []
        for (topic, partition), (planned, stop) in sorted(wanted.items()):
            log_start = log_starts.get((topic, partition), 0)
            if stop <= log_start and not self.settings.fail_on_data_loss:
                lost_to_retention(topic, partition, planned, stop, fail_on_data_loss=False)
                continue  # rule 4: every record of it is gone, and we skip that
            first = lost_to_retention(
                topic, partition, planned, log_start, self.settings.fail_on_data_loss
            )
            ranges.append(self.settings.offset_range(topic, partition, first, stop))
        return split(ranges, self.settings.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        yield from read_range(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_to_group(offsets.parse(end))

    def _commit_to_group(self, done: Positions) -> None:
        """Rule 6."""
        changed = {tp: o for tp, o in done.items() if self.in_group.get(tp) != o}
        if not self.group or not changed:
            return
        body = {
            "offsets": [
                {"topic": topic, "partition": partition, "offset": offset}
                for (topic, partition), offset in sorted(changed.items())
            ]
        }
        path = f"/v1/groups/{urllib.parse.quote(self.group, safe='')}/offsets"
        try:
            self.settings.cluster().call(path, body)
        except (KraftliteError, OSError) as exc:
            LOG.warning("could not commit offsets to group %s: %s", self.group, exc)
        else:
            self.in_group.update(changed)
