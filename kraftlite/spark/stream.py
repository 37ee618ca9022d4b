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
   `minOffsetsPerTrigger` holds a trigger back (its end stays its start, so Spark runs no
   micro-batch) while fewer records wait, until `maxTriggerDelay` (15m) has passed since
   the last micro-batch; as in Kafka's source the first micro-batch of a run is never held
   back, and neither is AvailableNow (it would wait for records it must not read) nor a
   trigger that must reset a topic created again (rule 4).
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

from kraftlite.clock import Clock, SystemClock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.spark import offsets
from kraftlite.spark.cluster import LOG, Cluster, DataLossError
from kraftlite.spark.offsets import Positions, SourceOffset
from kraftlite.spark.options import OptionError, Options, duration_ms, positive_option
from kraftlite.spark.source import (
    OffsetRange,
    ReadSettings,
    lost_to_retention,
    read_range,
    selected_topics,
    starting_positions,
)

if TYPE_CHECKING:

    class SupportsTriggerAvailableNow:
        def prepareForTriggerAvailableNow(self) -> None: ...

    class ReadAllAvailable:
        pass

    class ReadMaxRows:
        max_rows: int

        def __init__(self, max_rows: int) -> None: ...

    class ReadMinRows:
        min_rows: int

        def __init__(self, min_rows: int) -> None: ...

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
    try:  # with read limits, but imported on its own in case a version lacks it
        from pyspark.sql.streaming.datasource import ReadMinRows
    except ImportError:
        ReadMinRows = None


class KraftliteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options, settings: ReadSettings) -> None:
        self.options = options
        self.settings = settings
        self.max_rows = positive_option(options, "maxOffsetsPerTrigger", 0) or None
        self.min_rows = positive_option(options, "minOffsetsPerTrigger", 0) or None
        self.max_trigger_delay_ms = duration_ms(options, "maxTriggerDelay", "15m")
        has_min_rows = HAS_READ_LIMITS and ReadMinRows is not None
        for name, wanted, served in [
            ("maxOffsetsPerTrigger", self.max_rows, HAS_READ_LIMITS),
            ("minOffsetsPerTrigger", self.min_rows, has_min_rows),
        ]:
            if wanted is not None and not served:
                raise OptionError(
                    f"{name} needs pyspark 4.2 or newer (read limits for Python sources); "
                    f"this is pyspark {pyspark.__version__}"
                )
        if (
            self.min_rows is not None
            and self.max_rows is not None
            and self.min_rows > self.max_rows
        ):
            raise OptionError(
                f"minOffsetsPerTrigger {self.min_rows} is above maxOffsetsPerTrigger "
                f"{self.max_rows}"
            )
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name in options:
                raise OptionError(f"{name} is for batch reads only (spark.read)")
        self.group = options.get("commitToGroup")
        self.initial: Positions | None = None  # Spark may ask twice: one answer
        self.known: Positions = {}  # the furthest positions Spark has shown this reader
        self.topic_ids: dict[str, str] = {}  # to notice a topic deleted and created again
        self.target: Positions | None = None  # rule 5: AvailableNow's end
        self.in_group: Positions = {}  # rule 6: what the group holds already
        self.group_retry_ms = 0  # rule 6: no retry storm after a failed commit
        self.recreated: set[str] = set()  # topics created again, seen by this trigger
        self.gone: set[str] = set()  # deleted topics already reported
        self.last_trigger_ms: int | None = None  # rule 5: the last micro-batch let through
        self.clock: Clock = SystemClock()

    def _learn(self, *seen: Positions) -> None:
        for positions in seen:
            for tp, offset in positions.items():
                self.known[tp] = max(self.known.get(tp, offset), offset)

    def _available(self, *, wait: bool) -> Positions:
        """Each selected partition's high watermark (rule 2); topics that vanished or were
        created again under their name are data loss (rule 4).
        """
        selected = selected_topics(self.options, self.settings.cluster(), wait=wait)
        for topic, state in selected.items():
            if self.topic_ids.setdefault(topic, state.topic_id) != state.topic_id:
                self._lost(f"topic {topic} was deleted and created again")
                self.topic_ids[topic] = state.topic_id
                self.known = {tp: o for tp, o in self.known.items() if tp[0] != topic}
                self.recreated.add(topic)
        for topic in {t for t, _ in self.known} - set(selected) - self.gone:
            self._lost(f"topic {topic} was deleted")
            self.gone.add(topic)
        return {
            (topic, s.partition): s.high_watermark
            for topic, state in selected.items()
            for s in state.partitions
        }

    def _lost(self, what: str) -> None:
        if self.settings.fail_on_data_loss:
            raise DataLossError(
                f"{what} while this query read it: records it had not read are gone "
                "(set failOnDataLoss=false to go on without them)"
            )
        LOG.warning("%s; going on without what was not read (failOnDataLoss=false)", what)

    def initialOffset(self) -> SourceOffset:
        if self.initial is None:
            cluster = self.settings.cluster()
            selected = selected_topics(self.options, cluster)
            self.topic_ids = {t: state.topic_id for t, state in selected.items()}
            partitions = {t: state.partitions for t, state in selected.items()}
            self.initial = starting_positions(self.options, cluster, partitions, "latest")
            self._learn(self.initial)
        return offsets.canonical(self.initial)

    def getDefaultReadLimit(self) -> Any:
        """Python sources have no composite limit: with both bounds Spark is handed the upper
        one, and the lower one is kept here (rule 5)."""
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        if self.min_rows is not None:
            return ReadMinRows(self.min_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._available(wait=True)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> SourceOffset:
        """Rules 2-5. Spark before 4.2 calls this with no arguments: then the furthest
        positions it has shown this reader stand in for the start.
        """
        if start is not None:
            begin = offsets.parse(start)
            self._learn(begin)
            if begin != self.initial:  # the end of a batch in Spark's commit log (rule 6)
                self._commit_to_group(begin)
        else:
            begin = dict(self.known)
        self.recreated = set()
        # Without any position known yet, wait for unknown offsets rather than leave a
        # partition out (it would later count as new and start again from 0).
        available = self.target if self.target is not None else self._available(wait=not begin)
        end = offsets.advance(begin, available)
        for tp in end:
            if tp[0] in self.recreated:  # rule 4: the new topic, from its beginning
                end[tp] = available.get(tp, 0) if tp not in begin else 0
        if self._hold_back(begin, end, limit):
            return offsets.canonical(begin)
        if HAS_READ_LIMITS and isinstance(limit, ReadMaxRows):
            end = offsets.cap(begin, end, limit.max_rows)
        return offsets.canonical(end)

    def _hold_back(self, begin: Positions, end: Positions, limit: Any) -> bool:
        """Rule 5: whether minOffsetsPerTrigger holds this trigger back."""
        if (
            self.min_rows is None
            or limit is None
            or (HAS_READ_LIMITS and isinstance(limit, ReadAllAvailable))
        ):
            return False  # no lower bound, no read limits (pyspark < 4.2), or Trigger.Once
        now = self.clock.monotonic_ms()
        waiting = sum(end[tp] - offsets.start_of(begin, tp) for tp in end)
        if (
            self.target is None
            and not self.recreated
            and self.last_trigger_ms is not None
            and now - self.last_trigger_ms < self.max_trigger_delay_ms
            and waiting < self.min_rows
        ):
            return True
        if waiting > 0:
            self.last_trigger_ms = now
        return False

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[OffsetRange]:
        begin, finish = offsets.parse(start), offsets.parse(end)
        self._learn(finish)
        wanted = {
            tp: (offsets.start_of(begin, tp), stop)
            for tp, stop in finish.items()
            if stop > offsets.start_of(begin, tp)
        }
        cluster = self.settings.cluster()
        log_starts: dict[tuple[str, int], int] = {}
        for topic in sorted({t for t, _ in wanted}):
            try:  # a partition without a leader now: read() checks it instead
                state = cluster.topic(topic, wait=False)
            except KraftliteError as exc:
                if exc.code is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise
                self._lost(f"topic {topic} was deleted")
                wanted = {tp: r for tp, r in wanted.items() if tp[0] != topic}
                continue
            log_starts.update({(topic, s.partition): s.log_start_offset for s in state.partitions})
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
        return self.settings.split(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        yield from read_range(partition)

    def commit(self, end: dict[str, Any]) -> None:
        done = offsets.parse(end)
        self._learn(done)
        self._commit_to_group(done)

    def _commit_to_group(self, done: Positions) -> None:
        """Rule 6: one short try; after a failure, none for a while."""
        changed = {tp: o for tp, o in done.items() if self.in_group.get(tp) != o}
        now = self.clock.monotonic_ms()
        if not self.group or not changed or now < self.group_retry_ms:
            return
        body = {
            "offsets": [
                {"topic": topic, "partition": partition, "offset": offset}
                for (topic, partition), offset in sorted(changed.items())
            ]
        }
        path = f"/v1/groups/{urllib.parse.quote(self.group, safe='')}/offsets"
        try:
            cluster = Cluster(self.settings.bootstrap, timeout_s=5, clock=self.clock)
            cluster.call(path, body, attempts=1)
        except (KraftliteError, OSError) as exc:
            self.group_retry_ms = now + GROUP_RETRY_MS
            LOG.warning("could not commit offsets to group %s: %s", self.group, exc)
        else:
            self.in_group.update(changed)


GROUP_RETRY_MS = 10_000
