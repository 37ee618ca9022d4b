"""`spark.read.format("kraftlite")` against a real cluster: exact rows, Kafka's options
(brokers by their Kafka listener addresses, reads bounded by time), offset ranges,
splitting, data lost to retention, and options refused.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.harness.observe import wait_for_brokers_metadata
from tests.harness.processes import Cluster, http
from tests.spark.support import BASE_MS, produce, reader

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.timeout(600),
]


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


def test_bad_options_say_what_is_wrong(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    for options, message in [
        ({"subscribe": "events", "colour": "blue"}, "unknown option 'colour'.*subscribePattern"),
        ({"subscribe": "events", "endingTimestamp": "soon"}, "endingTimestamp must be unix"),
        ({"subscribe": "events", "kafka.bootstrap.servers": "h:1"}, "name different brokers"),
        ({"subscribe": "events", "maxOffsetsPerTrigger": "5"}, "for streaming reads only"),
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
    with pytest.raises(Exception, match="kraftlite takes no path"):
        spark.read.format("kraftlite").options(
            **{"kraftlite.bootstrap": cluster.urls[1], "subscribe": "events"}
        ).load("events").count()
    frame = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match=r"unknown option 'kafka\.linger\.ms'.*batchMaxBytes"):
        frame.write.format("kraftlite").mode("append").options(
            **{"kraftlite.bootstrap": cluster.urls[1], "topic": "events", "kafka.linger.ms": "5"}
        ).save()
    query = (
        spark.readStream.format("kraftlite")
        .options(**{"kraftlite.bootstrap": cluster.urls[1], "subscribe": "events"})
        .option("endingTimestamp", "1")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "refused"))
        .start()
    )
    try:
        with pytest.raises(Exception, match="endingTimestamp is for batch reads only"):
            query.awaitTermination(60)
    finally:
        query.stop()


def test_a_batch_read_ends_at_a_time(spark: Any, cluster: Cluster) -> None:
    """Kafka's semantics: the first offset whose record is at or after the time ends the
    read (exclusive); with none, the read goes to the latest offset."""
    produce(cluster, "timed", 2, 100)  # record i at BASE_MS + i, offset i // 2 of i % 2

    def offsets(**options: str) -> dict[int, list[int]]:
        rows = reader(spark, cluster, subscribe="timed", **options).collect()
        found: dict[int, list[int]] = {0: [], 1: []}
        for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
            found[row.partition].append(row.offset)
        return found

    assert offsets(endingTimestamp=str(BASE_MS + 50)) == {0: list(range(25)), 1: list(range(25))}
    per_partition = f'{{"timed": {{"0": {BASE_MS + 10}, "1": {BASE_MS + 10**9}}}}}'
    assert offsets(endingOffsetsByTimestamp=per_partition, endingOffsets="latest") == {
        0: list(range(5)),
        1: list(range(50)),  # no record that late: to the latest offset
    }
    window = offsets(startingTimestamp=str(BASE_MS + 20), endingTimestamp=str(BASE_MS + 40))
    assert window == {0: list(range(10, 20)), 1: list(range(10, 20))}
    later = str(BASE_MS + 10**9)  # after every record
    with pytest.raises(Exception, match="no record at or after the starting timestamp"):
        offsets(startingTimestamp=later)
    assert offsets(startingTimestamp=later, startingOffsetsByTimestampStrategy="latest") == {
        0: [],
        1: [],
    }


def test_kafka_bootstrap_servers_takes_http_urls_and_addresses(
    spark: Any, cluster: Cluster
) -> None:
    produce(cluster, "ported-http", 2, 30)
    urls = ",".join(cluster.urls.values())
    bare = ",".join(url.removeprefix("http://") for url in cluster.urls.values())
    for servers in (urls, bare):  # a bare host:port is found to be a broker's HTTP side
        frame = (
            spark.read.format("kraftlite")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", "ported-http")
            .load()
        )
        assert frame.count() == 30


def test_kafka_bootstrap_servers_takes_kafka_listener_addresses(
    spark: Any, cluster: Cluster
) -> None:
    """A Kafka job's bootstrap.servers, unchanged: each Kafka listener names its broker's
    HTTP URL (DescribeConfigs `kraftlite.http.url`); a dead entry is left out."""
    acked = produce(cluster, "ported", 2, 40)
    servers = f"127.0.0.1:1,{cluster.bootstrap}"
    kafka_job = {"kafka.bootstrap.servers": servers, "subscribe": "ported"}
    frame = spark.read.format("kraftlite").options(**kafka_job).load()
    assert sorted((r.partition, r.offset) for r in frame.collect()) == sorted(
        (m.partition, m.offset) for m in acked
    )
    frame.select("key", "value").write.format("kraftlite").mode("append").options(
        **{"kafka.bootstrap.servers": cluster.bootstrap, "topic": "ported"}
    ).save()
    assert spark.read.format("kraftlite").options(**kafka_job).load().count() == 80
    with pytest.raises(Exception, match="no bootstrap entry leads to a kraftlite broker"):
        spark.read.format("kraftlite").options(
            **{**kafka_job, "kafka.bootstrap.servers": "127.0.0.1:1"}
        ).load().count()


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


def test_records_a_kafka_client_produced_are_the_same_rows_in_spark(
    spark: Any, cluster: Cluster
) -> None:
    """Produced by librdkafka (lz4-compressed batches, keys, headers, timestamps), read by
    the Spark source: the same records, as Kafka's source would give them."""
    from confluent_kafka import Producer  # noqa: PLC0415 - a test-only client

    status, answer = http(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": "from-kafka", "partitions": 2, "replication_factor": 3},
    )
    assert status == 201, answer
    wait_for_brokers_metadata(cluster)  # the topic and its leaders
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "compression.type": "lz4", "linger.ms": 20}
    )
    delivered: list[Any] = []
    for i in range(50):
        producer.produce(
            "from-kafka",
            key=None if i % 5 == 0 else f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=[("n", str(i).encode())],
            timestamp=BASE_MS + i,
            on_delivery=lambda err, message: delivered.append((err, message)),
        )
    assert producer.flush(30) == 0
    assert [err for err, _ in delivered] == [None] * 50
    rows = {
        (r.partition, r.offset): r
        for r in reader(spark, cluster, subscribe="from-kafka", includeHeaders="true").collect()
    }
    assert len(rows) == 50
    for _, message in delivered:
        row = rows[(message.partition(), message.offset())]
        i = int(message.value()[1:])
        assert row.key == (None if i % 5 == 0 else f"k{i}".encode())
        assert row.value == f"v{i}".encode()
        assert row.timestamp.astimezone(UTC) == datetime.fromtimestamp((BASE_MS + i) / 1000, UTC)
        assert [(h.key, bytes(h.value)) for h in row.headers] == [("n", str(i).encode())]
