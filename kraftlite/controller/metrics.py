"""Prometheus metrics of a controller: Raft and the metadata it holds, read at scrape time,
and the time writes wait for the controller and for the quorum to commit them. The
families every node has are in kraftlite/observability.py; docs/metrics.md maps each to its
Kafka counterpart (ActiveControllerCount, OfflinePartitionsCount, EventQueueTimeMs, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kraftlite.metadata.views import PartitionCounts, partition_counts

if TYPE_CHECKING:
    from kraftlite.controller.quorum_controller import QuorumController

# A controller's own histograms (a broker process imports this module too, and shows none).
REGISTRY = CollectorRegistry(auto_describe=True)
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
EVENT_QUEUE_TIME = Histogram(
    "kraftlite_controller_event_queue_time_seconds",
    "Time a metadata write waited for the controller's earlier writes (Kafka's EventQueueTimeMs)",
    buckets=_SECONDS,
    registry=REGISTRY,
)
COMMIT_LATENCY = Histogram(
    "kraftlite_controller_commit_latency_seconds",
    "Time from proposing a batch of metadata records to knowing it committed",
    buckets=_SECONDS,
    registry=REGISTRY,
)


class ControllerCollector(Collector):
    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller
        self._counted: tuple[int, PartitionCounts] | None = None  # by image version

    async def refresh(self) -> None:
        """Count the partitions of the current image, on a thread (an image never changes),
        once per metadata version: a scrape of 100,000 partitions walks them only when
        they changed, and never on the event loop."""
        image = self.controller.image
        if self._counted is None or self._counted[0] != image.version:
            self._counted = (image.version, await asyncio.to_thread(partition_counts, image))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        controller = self.controller
        image = controller.image
        status = controller.log.status()
        active = controller.is_active()
        yield GaugeMetricFamily(
            "kraftlite_controller_active", "1 on the active controller", value=active
        )
        yield GaugeMetricFamily("kraftlite_raft_term", "Current Raft term", value=status["term"])
        yield GaugeMetricFamily(
            "kraftlite_raft_commit_index", "Raft commit index", value=status["commit_index"]
        )
        yield GaugeMetricFamily(
            "kraftlite_raft_has_quorum",
            "1 while a majority of voters is reachable",
            value=status["has_quorum"],
        )
        yield GaugeMetricFamily(
            "kraftlite_controller_metadata_offset",
            "Version (offset) of the last metadata batch this controller applied",
            value=image.version,
        )
        if self._counted is None:
            return
        counts = self._counted[1]
        yield GaugeMetricFamily("kraftlite_topics", "Topics in the metadata", value=counts.topics)
        yield GaugeMetricFamily(
            "kraftlite_partitions", "Partitions in the metadata", value=counts.partitions
        )
        yield GaugeMetricFamily(
            "kraftlite_offline_partitions", "Partitions with no leader", value=counts.offline
        )
        yield GaugeMetricFamily(
            "kraftlite_cluster_under_replicated_partitions",
            "Partitions whose ISR is smaller than their replication factor, cluster-wide",
            value=counts.under_replicated,
        )
        yield GaugeMetricFamily(
            "kraftlite_reassigning_partitions",
            "Partitions with a reassignment in progress",
            value=counts.reassigning,
        )
        brokers = list(image.brokers.values())
        yield GaugeMetricFamily(
            "kraftlite_registered_brokers", "Brokers registered", value=len(brokers)
        )
        yield GaugeMetricFamily(
            "kraftlite_fenced_brokers",
            "Registered brokers that are fenced",
            value=sum(1 for b in brokers if b.fenced),
        )
        lag = GaugeMetricFamily(
            "kraftlite_controller_broker_metadata_lag",
            "Metadata versions a broker's last heartbeat was behind (active controller only)",
            labels=["broker"],
        )
        if active:
            for broker_id, version in sorted(controller.broker_metadata_versions.items()):
                registration = image.brokers.get(broker_id)
                if registration is not None and not registration.fenced:
                    lag.add_metric([str(broker_id)], max(image.version - version, 0))
        yield lag


def controller_registry(
    controller: QuorumController,
) -> tuple[CollectorRegistry, ControllerCollector]:
    registry = CollectorRegistry(auto_describe=False)
    collector = ControllerCollector(controller)
    registry.register(collector)
    return registry, collector
