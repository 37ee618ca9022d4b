"""`spark.read.format("kraftlite")` against a real cluster: exact rows, Kafka's options,
offset ranges, splitting, and data lost to retention.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.harness.processes import Cluster, http
from tests.spark.support import BASE_MS, produce, reader

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]


def test_a_batch_read_returns_exactly_the_records_in_kafkas_schema(
    spark: Any, cluster: Cluster
) -> None:
    acked = produce(cluster, "events", 3, 120)
    df = reader(spark, cluster, subscribe="events", includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    rows = {(r.partition, r.offset): r for r in df.collect()}
    assert len(rows) == 120
    for i, meta in enumerate(acked):
        row = rows[(meta.partition, meta.offset)]
        assert row.topic == "events"
        assert row.key == (f"k{i}".encode() if i % 3 else None)
        assert row.value == (f"value-{i}".encode() if i % 7 else None)
        stamp = datetime.fromtimestamp((BASE_MS + i) / 1000, UTC)
        assert row.timestamp.astimezone(UTC) == stamp and row.timestampType == 0
        if i % 2:
            expected = [("n", str(i).encode()), ("bin", b"\x00\xff")]
            assert [(h.key, bytes(h.value)) for h in row.headers] == expected
        else:
            assert row.headers is None  # as Kafka's source: no headers, null
    strings = df.selectExpr("CAST(value AS STRING) AS v").where("v IS NOT NULL").count()
    assert strings == sum(1 for i in range(120) if i % 7)  # a Kafka recipe carries over


def test_assign_offsets_and_min_partitions(spark: Any, cluster: Cluster) -> None:
    produce(cluster, "ranges", 2, 100)  # 50 per partition
    df = reader(
        spark,
        cluster,
        assign='{"ranges": [1]}',
        startingOffsets='{"ranges": {"1": 10}}',
        endingOffsets='{"ranges": {"1": 40}}',
        minPartitions="4",
    )
    assert df.rdd.getNumPartitions() == 4
    offsets = sorted(r.offset for r in df.select("offset", "partition").collect())
    assert offsets == list(range(10, 40))
    everything = reader(spark, cluster, subscribePattern="rang.*", startingOffsets="earliest")
    assert everything.count() == 100
    latest = reader(spark, cluster, subscribe="ranges", startingOffsets="latest")
    assert latest.count() == 0
    by_time = reader(
        spark,
        cluster,
        subscribe="ranges",
        startingOffsetsByTimestamp=f'{{"ranges": {{"0": {BASE_MS + 90}, "1": 0}}}}',
    )
    assert sorted(r.offset for r in by_time.where("partition = 0").collect()) == [
        45,
        46,
        47,
        48,
        49,
    ]


def test_records_lost_to_retention_fail_the_read_unless_told_otherwise(
    spark: Any, cluster: Cluster
) -> None:
    produce(cluster, "short", 1, 200, **{"retention.bytes": 4000})
    deadline = time.monotonic() + 20
    while True:
        start = http("GET", cluster.urls[1] + "/v1/topics/short")[1]["partitions"][0][
            "log_start_offset"
        ]
        if start > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert start > 0
    lost = reader(spark, cluster, subscribe="short", startingOffsets='{"short": {"0": 0}}')
    with pytest.raises(Exception, match="deleted by retention"):
        lost.count()
    skipped = reader(
        spark,
        cluster,
        subscribe="short",
        startingOffsets='{"short": {"0": 0}}',
        failOnDataLoss="false",
    )
    assert skipped.count() == 200 - start


def test_bad_options_say_what_is_wrong(spark: Any, cluster: Cluster) -> None:
    for options, message in [
        ({}, "exactly one of subscribe"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of subscribe"),
        ({"assign": "[1"}, "assign is not valid JSON"),
        ({"subscribe": "events", "startingOffsets": "soon"}, "startingOffsets"),
        ({"subscribe": "events", "includeHeaders": "yes"}, "includeHeaders must be true"),
        ({"subscribe": "events", "startingOffsets": '{"events": {"0": -5}}'}, "offsets >= 0"),
        ({"subscribe": "events", "endingOffsets": '{"events": {"0": -2}}'}, "-1 latest"),
        ({"subscribe": "events", "startingOffsets": '{"events": {"0": true}}'}, "offsets >= 0"),
        ({"subscribe": "events", "minPartitions": "many"}, "minPartitions must be"),
    ]:
        with pytest.raises(Exception, match=message):
            reader(spark, cluster, **options).count()


def test_a_range_deleted_after_planning_fails_or_is_skipped(cluster: Cluster) -> None:
    """failOnDataLoss inside read(): retention ran between planning and reading."""
    from kraftlite.spark.cluster import Cluster as SparkCluster  # noqa: PLC0415
    from kraftlite.spark.cluster import DataLossError  # noqa: PLC0415

    produce(cluster, "shrinking", 1, 200, **{"retention.bytes": 4000})
    reader_side = SparkCluster(tuple(cluster.urls.values()))
    deadline = time.monotonic() + 20
    while reader_side.partitions("shrinking")[0].log_start_offset == 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    start = reader_side.partitions("shrinking")[0].log_start_offset
    with pytest.raises(DataLossError, match="deleted by retention"):
        list(reader_side.fetch("shrinking", 0, 0, 200))
    pages = list(reader_side.fetch("shrinking", 0, 0, 200, skip_lost=True))
    assert pages and pages[-1][1] == 200
    from kraftlite.protocol import batch as fmt  # noqa: PLC0415

    first = fmt.read_header(next(fmt.split_batches(pages[0][0]))).base_offset
    assert first == start
