"""Data for the Spark tests: records produced with the Python client, read back through
`format("kraftlite")`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kraftlite.client import Admin, Producer
from tests.harness.processes import Cluster

# Recent enough that time-based retention (7 days) keeps them; fixed within a run.
BASE_MS = int(time.time() * 1000) - 3_600_000


def bootstrap(cluster: Cluster) -> str:
    return ",".join(cluster.urls.values())


def produce(cluster: Cluster, topic: str, partitions: int, count: int, **configs: Any) -> list:
    """Create `topic` and send `count` records of every shape (null keys and values, headers)."""

    async def create() -> None:
        async with Admin(bootstrap(cluster)) as admin:
            await admin.create_topic(topic, partitions=partitions, configs=configs)

    asyncio.run(create())
    return send(cluster, topic, partitions, count)


def send(cluster: Cluster, topic: str, partitions: int, count: int, first: int = 0) -> list:
    """Records `first`..`first + count - 1`, record i to partition i % `partitions`."""

    async def go() -> list:
        async with Producer(bootstrap(cluster), linger_ms=1, max_batch_bytes=2048) as producer:
            futures = [
                await producer.send(
                    topic,
                    f"value-{i}".encode() if i % 7 else None,
                    key=f"k{i}".encode() if i % 3 else None,
                    headers=(("n", str(i).encode()), ("bin", b"\x00\xff")) if i % 2 else (),
                    partition=i % partitions,
                    timestamp=BASE_MS + i,
                )
                for i in range(first, first + count)
            ]
            await producer.flush()
            return [f.result() for f in futures]

    return asyncio.run(go())


def reader(spark: Any, cluster: Cluster, **options: str) -> Any:
    read = spark.read.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster))
    for name, value in options.items():
        read = read.option(name, value)
    return read.load()


def stream(spark: Any, cluster: Cluster, **options: str) -> Any:
    read = spark.readStream.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster))
    for name, value in options.items():
        read = read.option(name, value)
    return read.load()


def run_available_now(writer: Any, checkpoint: Path, timeout_s: float = 180) -> list[int]:
    """Run a stream with Trigger.AvailableNow to its end; the rows of each micro-batch."""
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(timeout_s), "the query did not finish"
        return [progress["numInputRows"] for progress in query.recentProgress]
    finally:
        query.stop()
