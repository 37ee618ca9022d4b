"""`spark.readStream.format("kraftlite")` and the sink against a real cluster: a checkpoint
continues exactly where it stopped, new partitions are picked up, maxOffsetsPerTrigger caps
micro-batches, commitToGroup shows progress to lag tools, data lost to retention fails or is
skipped, user schemas, and rows written by Spark read back exactly.
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path
from typing import Any

import pytest

from kraftlite.client import Admin
from kraftlite.protocol.partitioner import partition_for_key
from kraftlite.spark.stream import HAS_READ_LIMITS
from tests.harness.processes import Cluster, http
from tests.spark.support import bootstrap, produce, reader, run_available_now, send, stream

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]


def high_watermarks(cluster: Cluster, topic: str) -> dict[int, int]:
    described = http("GET", cluster.urls[1] + f"/v1/topics/{topic}")[1]
    return {p["partition"]: p["high_watermark"] for p in described["partitions"]}


def test_a_stream_continues_from_its_checkpoint_with_no_gap_and_no_duplicate(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    produce(cluster, "clicks", 2, 100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    limits = HAS_READ_LIMITS  # maxOffsetsPerTrigger needs pyspark 4.2+; before, a clear error
    capped = {"maxOffsetsPerTrigger": "30"} if limits else {}

    def run() -> list[int]:
        frame = stream(
            spark,
            cluster,
            subscribe="clicks",
            startingOffsets="earliest",
            commitToGroup="clicks-job",
            **capped,
        )
        return run_available_now(
            frame.writeStream.format("parquet").option("path", str(out)), checkpoint
        )

    if not limits:
        with pytest.raises(Exception, match=r"maxOffsetsPerTrigger needs pyspark 4\.2 or newer"):
            stream(
                spark, cluster, subscribe="clicks", maxOffsetsPerTrigger="30"
            ).writeStream.format("noop").start().awaitTermination(60)
    first = [n for n in run() if n]
    assert first == ([30, 30, 30, 10] if limits else [100])  # shared over both partitions

    async def grow() -> None:
        async with Admin(bootstrap(cluster)) as admin:
            await admin.create_partitions("clicks", 3)

    asyncio.run(grow())
    send(cluster, "clicks", 3, 60, first=100)  # 20 to each partition, one of them new
    second = [n for n in run() if n]
    assert sum(second) == 60 and max(second) <= (30 if limits else 60)  # only the new records

    rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    seen = collections.Counter((r.partition, r.offset) for r in rows)
    assert max(seen.values()) == 1  # no duplicate
    expected = {(p, o) for p, hw in high_watermarks(cluster, "clicks").items() for o in range(hw)}
    assert set(seen) == expected  # no gap, and the new partition 2 from its start

    committed = http("GET", cluster.urls[2] + "/v1/groups/clicks-job/offsets")[1]["offsets"]
    if limits:  # everything the job finished, the last micro-batch included
        assert {(c["partition"], c["offset"], c["lag"]) for c in committed} == {
            (p, hw, 0) for p, hw in high_watermarks(cluster, "clicks").items()
        }
    else:  # before 4.2 Spark confirms a micro-batch only when it starts the next one
        assert {(c["partition"], c["offset"]) for c in committed} == {(0, 50), (1, 50)}


def test_a_stream_fails_on_records_lost_to_retention_or_skips_them(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    produce(cluster, "expiring", 1, 200, **{"retention.bytes": 4000})
    deadline = time.monotonic() + 20
    while (
        log_start := http("GET", cluster.urls[1] + "/v1/topics/expiring")[1]["partitions"][0][
            "log_start_offset"
        ]
    ) == 0:
        assert time.monotonic() < deadline, "retention did not run"
        time.sleep(0.2)

    def run(name: str, **options: str) -> list[int]:
        frame = stream(
            spark,
            cluster,
            subscribe="expiring",
            startingOffsets='{"expiring": {"0": 0}}',
            **options,
        )
        sink = frame.writeStream.format("parquet").option("path", str(tmp_path / name))
        return run_available_now(sink, tmp_path / f"{name}-checkpoint")

    with pytest.raises(Exception, match=rf"expiring-0: offsets 0-{log_start - 1} were deleted"):
        run("strict")
    assert sum(run("lenient", failOnDataLoss="false")) == 200 - log_start


def test_a_user_schema_picks_columns_and_a_wrong_one_says_why(spark: Any, cluster: Cluster) -> None:
    produce(cluster, "narrow", 1, 20)
    rows = (
        spark.read.format("kraftlite")
        .schema("offset long, value binary")
        .option("kraftlite.bootstrap", bootstrap(cluster))
        .option("subscribe", "narrow")
        .load()
        .collect()
    )
    assert [tuple(r) for r in sorted(rows)] == [
        (i, f"value-{i}".encode() if i % 7 else None) for i in range(20)
    ]
    for schema, message in [
        ("offset int", "column offset must be bigint, not int"),
        ("body binary", "the schema names column 'body'"),
    ]:
        wrong = (
            spark.read.format("kraftlite")
            .schema(schema)
            .option("kraftlite.bootstrap", bootstrap(cluster))
            .option("subscribe", "narrow")
        )
        with pytest.raises(Exception, match=message):
            wrong.load().collect()


def test_rows_written_by_spark_read_back_exactly(spark: Any, cluster: Cluster) -> None:
    asyncio.run(_create(cluster, "sunk", 3))
    rows = [
        (
            f"user-{i % 7}".encode() if i % 4 else None,
            f"amount={i}",
            [("source", b"spark"), ("i", str(i).encode())] if i % 3 == 0 else None,
        )
        for i in range(300)
    ]
    frame = spark.createDataFrame(
        rows, "key binary, value string, headers array<struct<key:string,value:binary>>"
    )
    write = frame.write.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster))
    write.option("topic", "sunk").option("batchMaxBytes", "256").mode("append").save()

    back = reader(spark, cluster, subscribe="sunk", includeHeaders="true").collect()
    assert collections.Counter(
        (_bytes(r.key), r.value.decode(), tuple((h.key, bytes(h.value)) for h in r.headers or ()))
        for r in back
    ) == collections.Counter((k, v, tuple(h or ())) for k, v, h in rows)
    for r in back:
        if r.key is not None:  # Kafka's murmur2, so keyed records land where Kafka puts them
            assert r.partition == partition_for_key(bytes(r.key), 3)
    # unkeyed rows: one partition per batch, the next batch to the next (small batches here)
    assert len({r.partition for r in back if r.key is None}) == 3

    # a topic and a partition per row
    asyncio.run(_create(cluster, "sunk-b", 2))
    routed = spark.createDataFrame(
        [("sunk", 1, b"to-sunk"), ("sunk-b", 0, b"to-b0"), ("sunk-b", 1, b"to-b1")],
        "topic string, partition int, value binary",
    )
    routed.write.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster)).mode(
        "append"
    ).save()
    landed = reader(spark, cluster, subscribe="sunk,sunk-b", startingOffsets="earliest")
    assert {
        (r.topic, r.partition, bytes(r.value)) for r in landed.where("value LIKE 'to-%'").collect()
    } == {("sunk", 1, b"to-sunk"), ("sunk-b", 0, b"to-b0"), ("sunk-b", 1, b"to-b1")}


def test_the_sink_refuses_what_it_cannot_write(spark: Any, cluster: Cluster) -> None:
    def write(frame: Any, mode: str = "append", **options: str) -> None:
        writer = frame.write.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster))
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.mode(mode).save()

    asyncio.run(_create(cluster, "refusing", 3))  # its own: no other test's topic
    values = spark.createDataFrame([(b"x",)], "value binary")
    for frame, mode, options, message in [
        (spark.createDataFrame([(b"x",)], "body binary"), "append", {"topic": "t"}, "value"),
        (values, "overwrite", {"topic": "refusing"}, "append-only"),
        (values, "append", {}, "set the topic option or give the rows a topic column"),
        (spark.createDataFrame([(1,)], "value int"), "append", {"topic": "t"}, "binary or"),
        (values, "append", {"topic": "no-such-topic"}, "UNKNOWN_TOPIC_OR_PARTITION"),
    ]:
        with pytest.raises(Exception, match=message):
            write(frame, mode, **options)
    bad_partition = spark.createDataFrame([(7, b"x")], "partition int, value binary")
    with pytest.raises(Exception, match="a row asks for 7"):
        write(bad_partition, topic="refusing")


def test_a_stream_from_one_topic_into_another(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    produce(cluster, "raw", 2, 80)
    asyncio.run(_create(cluster, "copied", 2))
    frame = stream(spark, cluster, subscribe="raw", startingOffsets="earliest")
    copy = (
        frame.selectExpr("key", "value", "partition")
        .writeStream.format("kraftlite")
        .option("kraftlite.bootstrap", bootstrap(cluster))
        .option("topic", "copied")
    )
    assert sum(run_available_now(copy, tmp_path / "checkpoint")) == 80
    source = reader(spark, cluster, subscribe="raw").collect()
    copied = reader(spark, cluster, subscribe="copied").collect()
    assert sorted((r.partition, _sortable(r.key), _sortable(r.value)) for r in copied) == sorted(
        (r.partition, _sortable(r.key), _sortable(r.value)) for r in source
    )


def _bytes(value: bytes | bytearray | None) -> bytes | None:
    """Binary columns come back as bytes (pyspark 4.1+) or bytearray (4.0)."""
    return None if value is None else bytes(value)


def _sortable(value: bytes | bytearray | None) -> tuple[bool, bytes]:
    return value is None, bytes(value or b"")


async def _create(cluster: Cluster, topic: str, partitions: int) -> None:
    async with Admin(bootstrap(cluster)) as admin:
        await admin.create_topic(topic, partitions=partitions)


def test_the_sink_fits_batches_to_the_topics_max_message_bytes(
    spark: Any, cluster: Cluster
) -> None:
    async def create() -> None:
        async with Admin(bootstrap(cluster)) as admin:
            await admin.create_topic("small", partitions=1, configs={"max.message.bytes": 3000})

    asyncio.run(create())
    rows = [(f"v{i:03d}" * 25, [("trace", b"t" * 40)]) for i in range(200)]  # ~150 B each
    frame = spark.createDataFrame(
        rows, "value string, headers array<struct<key:string,value:binary>>"
    ).coalesce(1)  # one task: order is row order
    frame.write.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster)).option(
        "topic", "small"
    ).mode("append").save()  # batchMaxBytes 512 KiB: batches are halved until they fit
    back = reader(spark, cluster, subscribe="small").orderBy("offset").collect()
    assert [r.value.decode() for r in back] == [v for v, _ in rows]

    too_big = spark.createDataFrame([("x" * 5000,)], "value string")
    with pytest.raises(Exception, match=r"a record of \d+ bytes encoded is more than small takes"):
        too_big.write.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster)).option(
            "topic", "small"
        ).mode("append").save()


def test_a_running_stream_fails_when_its_topic_is_deleted(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    produce(cluster, "fleeting", 1, 10)
    query = (
        stream(spark, cluster, subscribe="fleeting", startingOffsets="earliest")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while sum(p["numInputRows"] for p in query.recentProgress) < 10:
            assert time.monotonic() < deadline and query.isActive
            time.sleep(0.2)
        assert http("DELETE", cluster.urls[1] + "/v1/topics/fleeting")[0] == 204
        with pytest.raises(Exception, match="topic fleeting was deleted"):
            query.awaitTermination(120)
    finally:
        query.stop()


def test_a_micro_batch_that_failed_is_read_again_exactly(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    """Spark replays a planned but uncommitted micro-batch with the same offsets: it must
    get the same records, so the output holds each record once.
    """
    produce(cluster, "replayed", 2, 40)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    failures: list[int] = []

    def write(frame: Any, batch_id: int, fail: bool) -> None:
        if fail and batch_id == 0:
            failures.append(batch_id)
            raise RuntimeError("injected failure before the batch's output")
        frame.select("partition", "offset").write.mode("append").parquet(str(out / str(batch_id)))

    for fail in (True, False):
        query = (
            stream(spark, cluster, subscribe="replayed", startingOffsets="earliest")
            .writeStream.foreachBatch(
                lambda frame, batch_id, fail=fail: write(frame, batch_id, fail)
            )
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            if fail:
                with pytest.raises(Exception, match="injected failure"):
                    query.awaitTermination(120)
                send(cluster, "replayed", 2, 10, first=40)  # while the query is down
            else:
                assert query.awaitTermination(120)
        finally:
            query.stop()
    assert failures == [0]
    replayed = spark.read.parquet(str(out / "0")).collect()
    assert sorted((r.partition, r.offset) for r in replayed) == [
        (p, o) for p in (0, 1) for o in range(20)
    ]  # batch 0 again, exactly as planned before the failure: not the 10 records added since
    rows = spark.read.parquet(str(out / "*")).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in (0, 1) for o in range(25)
    ]
