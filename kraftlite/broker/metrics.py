"""Prometheus metrics of a broker: counters on the produce/fetch paths, and the replication
state read at scrape time (a custom collector, so the hot paths pay nothing for gauges).

Names follow Kafka's JMX metrics where one exists (UnderReplicatedPartitions, ...), in
Prometheus style.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from kraftlite.broker.partition import Partition, Role

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker

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
    "kraftlite_fetched_records", "Records served as JSON to consumers", ["topic"], registry=REGISTRY
)

REPLICA_FETCHES = Counter(
    "kraftlite_replica_fetch_requests",
    "Follower fetch requests served, by whether they carried records",
    ["with_records"],
    registry=REGISTRY,
)


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
    def __init__(self) -> None:
        self.broker: Broker | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        broker = self.broker
        if broker is None:
            return
        partitions = list(broker.replicas.partitions.values())
        led = [p for p in partitions if p.role is Role.LEADER and p.state is not None]
        yield GaugeMetricFamily("kraftlite_broker_fenced", "1 while fenced", value=broker.fenced)
        yield GaugeMetricFamily(
            "kraftlite_metadata_version",
            "Version of the metadata image this broker applied",
            value=broker.replicas.image.version,
        )
        yield GaugeMetricFamily("kraftlite_leader_partitions", "Partitions led", value=len(led))
        yield GaugeMetricFamily(
            "kraftlite_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than the replica set",
            value=sum(1 for p in led if p.state and len(p.state.isr) < len(p.state.replicas)),
        )
        yield GaugeMetricFamily(
            "kraftlite_offline_replicas",
            "Replicas here whose partition has no leader",
            value=sum(1 for p in partitions if p.role is Role.OFFLINE),
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


_COLLECTOR = ReplicationCollector()
REGISTRY.register(_COLLECTOR)


def render(broker: Broker) -> tuple[bytes, str]:
    _COLLECTOR.broker = broker
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
