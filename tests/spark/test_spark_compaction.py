"""A compacted topic through real Spark (issue 26): the cleaner leaves gaps between the
offsets it keeps, and the source reads across them, in a batch read and in a stream whose
micro-batches cover cleaned ranges (`maxOffsetsPerTrigger` counts offsets, so they hold
fewer rows): every row kept, each once, at the offset it was written at, and no data loss
reported, since nothing was lost that compaction did not mean to drop.
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path
from typing import Any

import pytest

from kraftlite.client import Admin, Producer
from kraftlite.spark.stream import HAS_READ_LIMITS
from tests.harness.processes import Cluster, http
from tests.spark.support import BASE_MS, bootstrap, reader, run_available_now, stream

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]

TOPIC = "compacted-profiles"


def compacted_rows(cluster: Cluster) -> list[tuple[int, str, str]]:
    """(offset, key, value) of the partition as the leader serves it, over HTTP."""
    offset, rows = 0, []
    while True:
        status, answer = http(
            "GET", cluster.urls[1] + f"/v1/topics/{TOPIC}/partitions/0/records?offset={offset}"
        )
        assert status == 200, answer
        rows += [(r["offset"], r["key"], r["value"]) for r in answer["records"]]
        if answer["next_offset"] >= answer["high_watermark"]:
            return rows
        offset = answer["next_offset"]


@pytest.fixture(scope="module")
def compacted(cluster: Cluster) -> list[tuple[int, str, str]]:
    """The topic, 30 keys each written 10 times (a batch per round), cleaned."""

    async def write() -> None:
        async with Admin(bootstrap(cluster)) as admin:
            await admin.create_topic(
                TOPIC,
                partitions=1,
                configs={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"},
            )
        async with Producer(bootstrap(cluster), linger_ms=1) as producer:
            for n in range(10):
                for k in range(30):
                    await producer.send(
                        TOPIC, f"{n}".encode(), key=b"user-%d" % k, timestamp=BASE_MS + n
                    )
                await producer.flush()
            await producer.send(TOPIC, b"tail", key=b"tail", timestamp=BASE_MS + 10)
            await producer.flush()

    asyncio.run(write())
    expected = [(270 + k, f"user-{k}", "9") for k in range(30)] + [(300, "tail", "tail")]
    deadline = time.monotonic() + 60
    while (rows := compacted_rows(cluster)) != expected:
        assert time.monotonic() < deadline, rows[:5]
        time.sleep(0.2)
    return expected


def test_a_batch_read_of_a_compacted_topic_has_every_kept_row_at_its_offset(
    spark: Any, cluster: Cluster, compacted: list[tuple[int, str, str]]
) -> None:
    rows = reader(spark, cluster, subscribe=TOPIC).collect()
    got = sorted((r.offset, bytes(r.key).decode(), bytes(r.value).decode()) for r in rows)
    assert got == compacted
    # a range that starts and ends in cleaned offsets is complete too
    ranged = reader(
        spark,
        cluster,
        subscribe=TOPIC,
        startingOffsets=f'{{"{TOPIC}": {{"0": 100}}}}',
        endingOffsets=f'{{"{TOPIC}": {{"0": 290}}}}',
    ).collect()
    assert sorted(r.offset for r in ranged) == [o for o, _, _ in compacted if 100 <= o < 290]


def test_a_stream_over_a_compacted_topic_reads_each_kept_row_once(
    spark: Any, cluster: Cluster, compacted: list[tuple[int, str, str]], tmp_path: Path
) -> None:
    capped = {"maxOffsetsPerTrigger": "100"} if HAS_READ_LIMITS else {}
    frame = stream(spark, cluster, subscribe=TOPIC, startingOffsets="earliest", **capped)
    out = tmp_path / "out"
    batches = run_available_now(
        frame.writeStream.format("parquet").option("path", str(out)), tmp_path / "checkpoint"
    )
    if HAS_READ_LIMITS:  # offsets 0-99 and 100-199 were all cleaned away: empty batches
        assert [n for n in batches if n] == [30, 1]
    rows = spark.read.parquet(str(out)).select("offset").collect()
    seen = collections.Counter(r.offset for r in rows)
    assert max(seen.values()) == 1
    assert sorted(seen) == [o for o, _, _ in compacted]


def test_latest_per_key_reads_each_partition_as_a_table(spark: Any, cluster: Cluster) -> None:
    """`latestPerKey=true` (source.py rule 5): the latest record of each key of each
    partition, tombstoned keys and keyless records left out, whatever `minPartitions` asks
    (a key's records stay in one Spark partition); on any topic, compacted or not."""
    topic = "latest-per-key"
    written: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}

    async def write() -> None:
        async with Admin(bootstrap(cluster)) as admin:
            await admin.create_topic(topic, partitions=3)
        async with Producer(bootstrap(cluster), linger_ms=1) as producer:
            sent = []
            for n in range(5):
                for k in range(20):
                    value = None if (k == 7 and n == 4) else f"{k}-{n}".encode()
                    sent.append(
                        (b"key-%d" % k, value, await producer.send(topic, value, b"key-%d" % k))
                    )
                await producer.send(topic, b"keyless", partition=0)
            await producer.flush()
            for key, value, future in sent:  # in the order sent: the latest of a key last
                metadata = await future
                written[metadata.partition, key] = (metadata.offset, value)

    asyncio.run(write())
    rows = reader(
        spark, cluster, subscribe=topic, latestPerKey="true", minPartitions="10"
    ).collect()
    got = sorted((r.partition, bytes(r.key), r.offset, bytes(r.value)) for r in rows)
    expected = sorted(
        (partition, key, offset, value)
        for (partition, key), (offset, value) in written.items()
        if value is not None
    )
    assert got == expected
    assert len(got) == 19  # key-7's latest is a tombstone
