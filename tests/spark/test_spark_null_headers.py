"""Null header values through real Spark: the source gives a null `value` in a header
struct where the producer sent a null one (and b"" for an empty one), and the sink stores a
row's null header value null, as Kafka's source and sink do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kraftlite.client import Admin, Consumer, Producer
from tests.harness.processes import Cluster
from tests.spark.support import BASE_MS, bootstrap, reader

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]

HEADERS = (("a", b"x"), ("n", None), ("e", b""))


async def _create(cluster: Cluster, topic: str) -> None:
    async with Admin(bootstrap(cluster)) as admin:
        await admin.create_topic(topic, partitions=1)


def _pairs(headers: Any) -> tuple[tuple[str, bytes | None], ...] | None:
    if headers is None:
        return None
    return tuple((h.key, None if h.value is None else bytes(h.value)) for h in headers)


def test_the_source_reads_a_null_header_value_as_null(spark: Any, cluster: Cluster) -> None:
    async def produce() -> None:
        await _create(cluster, "null-headers-in")
        async with Producer(bootstrap(cluster), linger_ms=1) as producer:
            for i, headers in enumerate([HEADERS, (), (("n", None),), (("e", b""),)]):
                await producer.send(
                    "null-headers-in", b"v%d" % i, headers=headers, timestamp=BASE_MS + i
                )
            await producer.flush()

    asyncio.run(produce())
    rows = reader(spark, cluster, subscribe="null-headers-in", includeHeaders="true").collect()
    assert [_pairs(r.headers) for r in sorted(rows, key=lambda r: r.offset)] == [
        HEADERS,
        None,  # no headers: null, as Kafka's source gives
        (("n", None),),
        (("e", b""),),
    ]


def test_the_sink_stores_a_null_header_value_null(spark: Any, cluster: Cluster) -> None:
    asyncio.run(_create(cluster, "null-headers-out"))
    rows = [
        ("with-null", [("a", b"x"), ("n", None), ("e", b"")]),
        ("without", [("e", b"")]),
    ]
    frame = spark.createDataFrame(
        rows, "value string, headers array<struct<key:string,value:binary>>"
    )
    write = frame.write.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster))
    write.option("topic", "null-headers-out").mode("append").save()

    async def consume() -> list[Any]:
        async with Consumer(bootstrap(cluster), auto_offset_reset="earliest") as consumer:
            consumer.assign([("null-headers-out", 0)])
            got: list[Any] = []
            for _ in range(20):
                got += await consumer.poll(timeout_ms=1000)
                if len(got) >= 2:
                    break
            return got

    stored = {r.value: r.headers for r in asyncio.run(consume())}
    assert stored == {b"with-null": HEADERS, b"without": (("e", b""),)}
    back = reader(spark, cluster, subscribe="null-headers-out", includeHeaders="true").collect()
    assert {bytes(r.value): _pairs(r.headers) for r in back} == stored
