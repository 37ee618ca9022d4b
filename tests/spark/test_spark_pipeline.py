"""The example pipeline the quickstart runs (kraftlite.spark.examples.purchases): Spark's
totals per user and per item equal those computed from a plain read of the topic, and land
in Parquet and in the output topic.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kraftlite.client import Producer
from kraftlite.spark.examples import purchases
from tests.harness.processes import Cluster
from tests.spark.support import bootstrap, reader

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.timeout(600),
]


def test_the_purchases_pipeline_totals_match_a_plain_read(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    url = bootstrap(cluster)
    asyncio.run(purchases.create_topics(url, "buys", "buy-totals"))
    asyncio.run(purchases.generate(url, "buys", 600, seed=3))
    asyncio.run(odd_records(url))  # Spark and the plain read must skip the same ones
    ends = asyncio.run(purchases.end_offsets(url, "buys"))
    asyncio.run(odd_records(url))  # after the snapshot: neither side counts these
    users, items = purchases.spark_totals(
        spark, url, "buys", ends, out_topic="buy-totals", parquet=tmp_path
    )
    ref_users, ref_items = asyncio.run(purchases.totals_without_spark(url, "buys", ends))
    assert users == ref_users and items == ref_items
    assert sum(n for n, _ in items.values()) == 601  # the 600 and one odd but valid one

    by_item = spark.read.parquet(str(tmp_path / "totals_by_item")).collect()
    assert {r.name: (r.purchases, r.total) for r in by_item} == items
    published = reader(spark, cluster, subscribe="buy-totals").collect()
    assert len(published) == len(users) + len(items)
    tea = next(r for r in published if r.key == b"item:tea")
    assert json.loads(tea.value)["purchases"] == items["tea"][0]


ODD = [
    (b"u", b'{"item": "tea", "amount": "3"}'),
    (b"u", b'{"item": "tea", "amount": true}'),
    (b"u", b'{"item": "tea", "amount": 1.005}'),
    (b"u", b'{"item": "tea", "amount": 2.5e0}'),
    (b"u", b'{"item": "tea", "amount": 1e400}'),
    (b"u", b'{"item": "tea", "amount": NaN}'),
    (b"u", b'{"item": "tea", "amount": 12345678901}'),
    (b"u", b'{"item": "tea", "amount": 1, "amount": 2}'),
    (b"u", b'{"item": null, "amount": 1}'),
    (b"u", b'\xef\xbb\xbf{"item": "tea", "amount": 3}'),
    (b"u", b'{"item": "tea", "amount": 1.0049999999999999e0}'),
    (b"u", b'{"item": 5, "amount": 3}'),
    (b"u", b'{"item": "tea"}'),
    (b"u", b"[1, 2]"),
    (b"u", b"not json"),
    (b"u", None),
    (None, b'{"item": "tea", "amount": 3}'),
]


async def odd_records(url: str) -> None:
    async with Producer(url) as producer:
        for key, value in ODD:
            await producer.send("buys", value, key=key)


@pytest.mark.parametrize(
    ("key", "value", "parsed"),
    [
        (b"u", b'{"item": "tea", "amount": 4.2}', ("u", "tea", "4.20")),
        (b"u", b'{"item": "tea", "amount": 3}', ("u", "tea", "3.00")),
        (None, b'{"item": "tea", "amount": 3}', None),
        (b"u", b'{"item": "tea", "amount": "3"}', None),
        (b"u", b'{"item": "tea", "amount": 1.005}', ("u", "tea", "1.01")),
        (b"u", b'{"item": "tea", "amount": 1.0049999999999999e0}', None),
        (b"u", b'\xef\xbb\xbf{"item": "tea", "amount": 3}', None),
        (b"u", b'{"item": "tea", "amount": true}', None),
        (b"u", b'{"item": "tea", "amount": 1, "amount": 2}', None),
        (b"u", b'{"item": 5, "amount": 3}', None),
        (b"u", b"[1, 2]", None),
        (b"u", b"not json", None),
        (b"u", None, None),
    ],
)
def test_what_counts_as_a_purchase(key: bytes | None, value: bytes | None, parsed: Any) -> None:
    event = purchases.parse(key, value)
    assert (event if event is None else (event[0], event[1], str(event[2]))) == parsed
