"""Prometheus metrics of a broker: counters on the produce/fetch paths, and the replication
state and group lag read at scrape time (collectors, so the hot paths pay nothing for
gauges). The families every node has are in kraftlite/observability.py.

Names follow Kafka's JMX metrics where one exists (UnderReplicatedPartitions, ...), in
Prometheus style; docs/metrics.md maps each to its Kafka counterpart.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kraftlite.broker.partition import Partition, Role

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker

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


def record_isr_change(before: tuple[int, ...], after: tuple[int, ...]) -> None:
    if len(after) < len(before):
        ISR_SHRINKS.inc()
    elif len(after) > len(before):
        ISR_EXPANDS.inc()


def record_replica_fetch(with_records: bool) -> None:
    REPLICA_FETCHES.labels("true" if with_records else "false").inc()


def record_produce(partition: Partition, records: int, size: int) -> None:
    PRODUCED_RECORDS.labels(partition.topic).inc(records)
    PRODUCED_BYTES.labels(partition.topic).inc(size)


def record_fetch(partition: Partition, data: bytes, records: int = 0) -> None:
    FETCHED_BYTES.labels(partition.topic).inc(len(data))
    if records:
        FETCHED_RECORDS.labels(partition.topic).inc(records)


class ReplicationCollector(Collector):
    """The replicas this broker holds, read at scrape time."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        broker = self.broker
        partitions = list(broker.replicas.partitions.values())
        led = [p for p in partitions if p.role is Role.LEADER and p.state is not None]
        yield GaugeMetricFamily("kraftlite_broker_fenced", "1 while fenced", value=broker.fenced)
        yield GaugeMetricFamily(
            "kraftlite_metadata_version",
            "Version of the metadata image this broker applied",
            value=broker.replicas.image.version,
        )
        yield GaugeMetricFamily("kraftlite_leader_partitions", "Partitions led", value=len(led))
        yield GaugeMetricFamily("kraftlite_replicas", "Replicas held", value=len(partitions))
        yield GaugeMetricFamily(
            "kraftlite_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than the replica set",
            value=sum(1 for p in led if p.state and len(p.state.isr) < len(p.state.replicas)),
        )
        yield GaugeMetricFamily(
            "kraftlite_under_min_isr_partitions",
            "Partitions led here whose ISR is smaller than min.insync.replicas (acks=all fails)",
            value=sum(
                1 for p in led if p.state and len(p.state.isr) < p.config_int("min.insync.replicas")
            ),
        )
        yield GaugeMetricFamily(
            "kraftlite_offline_replicas",
            "Replicas here whose partition has no leader",
            value=sum(1 for p in partitions if p.role is Role.OFFLINE),
        )
        yield GaugeMetricFamily(
            "kraftlite_log_dir_size_bytes",
            "Bytes in every log this broker holds (the disk it uses for partitions)",
            value=sum(p.log.size_bytes for p in partitions),
        )
        disk = os.statvfs(broker.replicas.storage.config.path)  # one syscall, no I/O
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
        for p in partitions:
            key = [p.topic, str(p.index)]
            end.add_metric(key, p.log.log_end_offset)
            hw.add_metric(key, p.log.high_watermark)
            start.add_metric(key, p.log.log_start_offset)
            size.add_metric(key, p.log.size_bytes)
        yield from (end, hw, start, size)


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

    def collect(self) -> Iterator[GaugeMetricFamily]:
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


def broker_registry(broker: Broker) -> tuple[CollectorRegistry, GroupLagCollector]:
    """A broker app's scrape-time families: its replicas, and the lag its scrapes compute
    (`REGISTRY` holds the counters)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReplicationCollector(broker))
    lags = GroupLagCollector()
    registry.register(lags)
    return registry, lags
