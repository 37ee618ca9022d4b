"""Prometheus metrics of a broker: counters on the produce/fetch paths, and the replication
state and group lag read at scrape time (collectors, so the hot paths pay nothing for
gauges). The families every node has are in kraftlite/observability.py.

Names follow Kafka's JMX metrics where one exists (UnderReplicatedPartitions, ...), in
Prometheus style; docs/metrics.md maps each to its Kafka counterpart.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kraftlite.broker.partition import Partition, Role

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker
    from kraftlite.broker.cleaner import CleanerState, CleanResult

# A broker's own counters (a controller process imports this module too, and shows none).
REGISTRY = CollectorRegistry(auto_describe=True)
PRODUCED_RECORDS = Counter(
    "kraftlite_produced_records", "Records appended as leader", ["topic"], registry=REGISTRY
)
PRODUCED_BYTES = Counter(
    "kraftlite_produced_bytes", "Batch bytes appended as leader", ["topic"], registry=REGISTRY
)
FETCHED_BYTES = Counter(
    "kraftlite_fetched_bytes", "Batch bytes served to consumers", ["topic"], registry=REGISTRY
)
FETCHED_RECORDS = Counter(
    "kraftlite_fetched_records", "Records served to consumers", ["topic"], registry=REGISTRY
)

REPLICA_FETCHES = Counter(
    "kraftlite_replica_fetch_requests",
    "Follower fetch requests served, by whether they carried records",
    ["with_records"],
    registry=REGISTRY,
)


ISR_SHRINKS = Counter(
    "kraftlite_isr_shrinks", "ISR changes that removed a replica, as leader", registry=REGISTRY
)
ISR_EXPANDS = Counter(
    "kraftlite_isr_expands", "ISR changes that added a replica, as leader", registry=REGISTRY
)


# The log cleaner's work (Kafka's LogCleaner metrics count the same per cleaner thread)
CLEANER_PASSES = Counter(
    "kraftlite_log_cleaner_passes", "Passes of the log cleaner over a partition", registry=REGISTRY
)
CLEANER_REWRITTEN = Counter(
    "kraftlite_log_cleaner_rewritten_batches",
    "Stored batches the log cleaner rewrote or removed",
    registry=REGISTRY,
)
CLEANER_FREED = Counter(
    "kraftlite_log_cleaner_freed_bytes",
    "Bytes of stored batches the log cleaner removed",
    registry=REGISTRY,
)


def record_clean(result: CleanResult) -> None:
    CLEANER_PASSES.inc()
    CLEANER_REWRITTEN.inc(result.rewritten)
    CLEANER_FREED.inc(max(0, result.freed_bytes))  # a pass that split batches may grow one


def record_isr_change(before: tuple[int, ...], after: tuple[int, ...]) -> None:
    """A committed ISR change of a partition led here, against the ISR it was proposed
    from (counted once per change, whoever learns of the commit first)."""
    if set(before) - set(after):
        ISR_SHRINKS.inc()
    if set(after) - set(before):
        ISR_EXPANDS.inc()


def record_replica_fetch(with_records: bool) -> None:
    REPLICA_FETCHES.labels("true" if with_records else "false").inc()


def record_produce(partition: Partition, records: int, size: int) -> None:
    PRODUCED_RECORDS.labels(partition.topic).inc(records)
    PRODUCED_BYTES.labels(partition.topic).inc(size)


def forget_topic(topic: str) -> None:
    """A deleted topic's per-topic series (topic churn would otherwise grow them for ever)."""
    for counter in (PRODUCED_RECORDS, PRODUCED_BYTES, FETCHED_BYTES, FETCHED_RECORDS):
        with contextlib.suppress(KeyError):
            counter.remove(topic)


def record_fetch(topic: str, data: bytes, records: int = 0) -> None:
    FETCHED_BYTES.labels(topic).inc(len(data))
    if records:
        FETCHED_RECORDS.labels(topic).inc(records)


# Above this many replicas a broker exports totals only, not the per-partition families:
# rendering 400,000 series takes seconds of CPU per scrape (docs/metrics.md).
MAX_PARTITION_SERIES_REPLICAS = 10_000


@dataclass(frozen=True, slots=True)
class ReplicaFigures:
    """What a scrape reports of the replicas, read on the event loop (where they change)
    in one pass, so that the text is written off it."""

    fenced: bool
    metadata_version: int
    leaders: int
    replicas: int
    under_replicated: int
    under_min_isr: int
    offline: int
    size_bytes: int
    data_dir: str
    # (topic, partition, log end, high watermark, log start, size); empty over the cap
    per_partition: tuple[tuple[str, int, int, int, int, int], ...]
    # compacted replicas whose oldest dirty record waited past max.compaction.lag.ms
    compaction_overdue: int = 0
    # ms since the cleaner began its last complete round, or started (None: no cleaner)
    since_cleaner_round_ms: int | None = None
    # (topic, partition, cleaner state, lag ms, ms since the last pass or None); empty over
    # the cap
    compacted: tuple[tuple[str, int, CleanerState, int, int | None], ...] = ()


def overdue(lag_ms: int, max_compaction_lag_ms: int, backoff_ms: int) -> bool:
    """A compacted replica whose oldest dirty record waited longer than its topic's
    max.compaction.lag.ms, with two cleaner rounds of grace (a pass it makes due starts at
    the next round and may wait behind another partition's): the cleaner is behind."""
    return lag_ms - 2 * backoff_ms > max_compaction_lag_ms


def replica_figures(broker: Broker) -> ReplicaFigures:
    image = broker.replicas.image
    partitions = list(broker.replicas.partitions.values())
    leaders = under = under_min = offline = size = late = 0
    rows = []
    detailed = len(partitions) <= MAX_PARTITION_SERIES_REPLICAS
    now = broker.clock.now_ms()
    compacted = []
    for p in broker.replicas.compacted_partitions():
        if p.role is Role.OFFLINE:  # the cleaner skips it: what it saw last is stale
            continue
        seen = p.cleaner
        lag = 0 if seen.dirtiness is None else seen.dirtiness.lag_ms(now)
        max_lag = p.config_int("max.compaction.lag.ms")
        late += overdue(lag, max_lag, broker.replicas.settings.cleaner_backoff_ms)
        if detailed:
            since = None if seen.last_pass_ms is None else max(0, now - seen.last_pass_ms)
            compacted.append((p.topic, p.index, seen, lag, since))
    for p in partitions:
        log_ = p.log
        size += log_.size_bytes
        offline += p.role is Role.OFFLINE
        state = p.state
        if p.role is Role.LEADER and state is not None:
            leaders += 1
            topic = image.topics.get(p.topic_id)
            registration = None if topic is None else topic.partitions.get(p.index)
            adding = 0 if registration is None else len(registration.adding)
            under += len(state.isr) < len(state.replicas) - adding
            under_min += len(state.isr) < p.config_int("min.insync.replicas")
        if detailed:
            rows.append(
                (
                    p.topic,
                    p.index,
                    log_.log_end_offset,
                    log_.high_watermark,
                    log_.log_start_offset,
                    log_.size_bytes,
                )
            )
    return ReplicaFigures(
        fenced=broker.fenced,
        metadata_version=image.version,
        leaders=leaders,
        replicas=len(partitions),
        under_replicated=under,
        under_min_isr=under_min,
        offline=offline,
        size_bytes=size,
        data_dir=str(broker.replicas.storage.config.path),
        per_partition=tuple(rows),
        compaction_overdue=late,
        since_cleaner_round_ms=(
            None if (began := broker.replicas.cleaner_round_ms) is None else max(0, now - began)
        ),
        compacted=tuple(compacted),
    )


class ReplicationCollector(Collector):
    """The replicas this broker holds, as the scrape that asked read them (`figures`)."""

    def __init__(self) -> None:
        self.figures: ReplicaFigures | None = None

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        f = self.figures
        if f is None:
            return
        yield GaugeMetricFamily("kraftlite_broker_fenced", "1 while fenced", value=f.fenced)
        yield GaugeMetricFamily(
            "kraftlite_metadata_version",
            "Version of the metadata image this broker applied",
            value=f.metadata_version,
        )
        yield GaugeMetricFamily("kraftlite_leader_partitions", "Partitions led", value=f.leaders)
        yield GaugeMetricFamily("kraftlite_replicas", "Replicas held", value=f.replicas)
        yield GaugeMetricFamily(
            "kraftlite_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replication factor "
            "(replicas a reassignment is still adding do not count)",
            value=f.under_replicated,
        )
        yield GaugeMetricFamily(
            "kraftlite_under_min_isr_partitions",
            "Partitions led here whose ISR is smaller than min.insync.replicas (acks=all fails)",
            value=f.under_min_isr,
        )
        yield GaugeMetricFamily(
            "kraftlite_offline_replicas",
            "Replicas here whose partition has no leader",
            value=f.offline,
        )
        yield GaugeMetricFamily(
            "kraftlite_log_dir_size_bytes",
            "Bytes in every log this broker holds (the disk it uses for partitions)",
            value=f.size_bytes,
        )
        disk = os.statvfs(f.data_dir)  # off the event loop: a hung mount holds only this
        yield GaugeMetricFamily(
            "kraftlite_log_dir_free_bytes",
            "Bytes free to this broker on the filesystem of its data directory",
            value=disk.f_bavail * disk.f_frsize,
        )
        yield GaugeMetricFamily(
            "kraftlite_log_dir_capacity_bytes",
            "Size of the filesystem of this broker's data directory",
            value=disk.f_blocks * disk.f_frsize,
        )
        labels = ["topic", "partition"]
        end = GaugeMetricFamily("kraftlite_log_end_offset", "Log end offset", labels=labels)
        hw = GaugeMetricFamily("kraftlite_high_watermark", "High watermark", labels=labels)
        start = GaugeMetricFamily("kraftlite_log_start_offset", "Log start offset", labels=labels)
        size = GaugeMetricFamily("kraftlite_log_size_bytes", "Bytes in the log", labels=labels)
        for topic, index, leo, high, low, bytes_ in f.per_partition:
            key = [topic, str(index)]
            end.add_metric(key, leo)
            hw.add_metric(key, high)
            start.add_metric(key, low)
            size.add_metric(key, bytes_)
        yield from (end, hw, start, size)
        yield from _cleaner_families(f)


def _cleaner_families(f: ReplicaFigures) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The log cleaner's view of each compacted replica (Kafka's LogCleaner and
    LogCleanerManager metrics, per partition) and the overdue count to alert on."""
    yield GaugeMetricFamily(
        "kraftlite_log_cleaner_overdue_partitions",
        "Compacted replicas whose oldest dirty record has waited longer than "
        "max.compaction.lag.ms (and two cleaner rounds): the cleaner is behind",
        value=f.compaction_overdue,
    )
    if f.since_cleaner_round_ms is not None:
        yield GaugeMetricFamily(
            "kraftlite_log_cleaner_seconds_since_last_round",
            "Time since the cleaner began its last complete round over the compacted "
            "replicas (one each log.cleaner.backoff.ms), or started: every per-partition "
            "figure is at least this fresh; growing without bound, the cleaner is stuck",
            value=f.since_cleaner_round_ms / 1000,
        )
    labels = ["topic", "partition"]
    ratio = GaugeMetricFamily(
        "kraftlite_log_cleaner_dirty_ratio",
        "Dirty bytes over the bytes of the cleanable range, at the cleaner's last look",
        labels=labels,
    )
    dirty = GaugeMetricFamily(
        "kraftlite_log_cleaner_dirty_bytes",
        "Bytes of the cleanable range not cleaned yet, at the cleaner's last look",
        labels=labels,
    )
    lag = GaugeMetricFamily(
        "kraftlite_log_cleaner_lag_seconds",
        "How long the oldest dirty record of the cleanable range has waited",
        labels=labels,
    )
    since = GaugeMetricFamily(
        "kraftlite_log_cleaner_seconds_since_last_pass",
        "Time since the cleaner's last pass over the partition (absent: none since start)",
        labels=labels,
    )
    freed = CounterMetricFamily(
        "kraftlite_log_cleaner_partition_freed_bytes",
        "Bytes the cleaner's passes removed from the partition since start",
        labels=labels,
    )
    for topic, index, state, lag_ms, since_ms in f.compacted:
        key = [topic, str(index)]
        if state.dirtiness is not None:
            ratio.add_metric(key, state.dirtiness.ratio)
            dirty.add_metric(key, state.dirtiness.dirty_bytes)
        lag.add_metric(key, lag_ms / 1000)
        if since_ms is not None:
            since.add_metric(key, since_ms / 1000)
        freed.add_metric(key, state.freed_bytes)
    yield from (ratio, dirty, lag, since, freed)


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    topic: str
    partition: int
    committed: int
    lag: int | None  # None: the partition's leader did not answer


class GroupLagCollector(Collector):
    """Lag of the groups this broker coordinates, as the scrape that asked computed it
    (kafka_exporter's kafka_consumergroup_lag, from the coordinator itself)."""

    def __init__(self) -> None:
        self.lags: list[GroupLag] = []
        self.groups: int | None = None  # groups coordinated here; None: the scrape failed

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.groups is not None:
            yield GaugeMetricFamily(
                "kraftlite_consumergroups",
                "Groups with committed offsets this broker coordinates (lag is exported "
                "for the first 1,000 by name)",
                value=self.groups,
            )
        labels = ["consumergroup", "topic", "partition"]
        committed = GaugeMetricFamily(
            "kraftlite_consumergroup_committed_offset",
            "A group's committed offset, from its coordinator",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "kraftlite_consumergroup_lag",
            "High watermark minus a group's committed offset, from its coordinator",
            labels=labels,
        )
        for entry in self.lags:
            key = [entry.group, entry.topic, str(entry.partition)]
            committed.add_metric(key, entry.committed)
            if entry.lag is not None:
                lag.add_metric(key, entry.lag)
        yield from (committed, lag)


@dataclass(frozen=True, slots=True)
class BrokerCollectors:
    """A broker app's scrape-time families, on a registry of their own (`REGISTRY` holds
    the counters): filled by the scrape on the event loop, written out off it."""

    registry: CollectorRegistry
    replicas: ReplicationCollector
    lags: GroupLagCollector


def broker_collectors() -> BrokerCollectors:
    registry = CollectorRegistry(auto_describe=False)
    replicas, lags = ReplicationCollector(), GroupLagCollector()
    registry.register(replicas)
    registry.register(lags)
    return BrokerCollectors(registry, replicas, lags)
