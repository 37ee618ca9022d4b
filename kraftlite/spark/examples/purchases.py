"""A data pipeline on Spark: purchase events into kraftlite, totals out.

1. A generator produces purchase events to a topic: the user id as the key, JSON
   `{"item": ..., "amount": ...}` as the value (acks=all, with the Python client).
2. A Spark job reads the whole topic with `format("kraftlite")`, computes the totals per user
   and per item, writes them to another kraftlite topic and to Parquet, and prints the top rows.
3. A check: the same totals computed without Spark, by reading the topic with the Python
   client, must match Spark's to the cent.

    python -m kraftlite.spark.examples.purchases --bootstrap http://127.0.0.1:9092 \\
        --events 20000 --parquet run/purchases-parquet

Spark runs in local mode (`local[2]`), unless spark-submit started the job: then on the
master given to it (`spark-submit --master spark://HOST:7077 .../purchases.py --bootstrap
...`; docs/spark.md: On a cluster).
"""

from __future__ import annotations

import asyncio
import json
import random
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import click

from kraftlite.client import Admin, Consumer, Producer
from kraftlite.errors import ErrorCode, KraftliteError

USERS = [f"user-{n:03d}" for n in range(200)]
ITEMS = {"book": 12.5, "lamp": 30.0, "tea": 4.2, "mug": 9.0, "pen": 1.99, "chair": 89.0}
# An event's user, item and amount, or nulls: strict JSON types (from_json would turn
# "amount": "3" into 3.00 and "item": 5 into "5"), so the rule is easy to state and to check.
# Amounts written with an exponent are refused: Spark keeps them as doubles, whose rounding
# to cents need not match the decimal written.
EVENT_SQL = [
    "CAST(key AS STRING) AS user",
    "CASE WHEN schema_of_variant(variant_get(event, '$.item')) = 'STRING' "
    "THEN variant_get(event, '$.item', 'string') END AS item",
    "CASE WHEN schema_of_variant(variant_get(event, '$.amount')) "
    "RLIKE '^(TINYINT|SMALLINT|INT|BIGINT|DECIMAL.*)$' "
    "THEN try_variant_get(event, '$.amount', 'decimal(12,2)') END AS amount",
]
Totals = dict[str, tuple[int, Decimal]]  # name -> (purchases, total amount)


async def create_topics(bootstrap: str, *topics: str) -> None:
    async with Admin(bootstrap) as admin:
        for topic in topics:
            try:
                await admin.create_topic(topic, partitions=3)
            except KraftliteError as exc:
                if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise


async def generate(bootstrap: str, topic: str, count: int, seed: int) -> None:
    """Step 1: `count` purchase events."""
    rng = random.Random(seed)  # noqa: S311 - test data, reproducible
    async with Producer(bootstrap, linger_ms=5) as producer:
        futures = []
        for _ in range(count):
            user = rng.choice(USERS[: rng.randint(1, len(USERS))])  # some users buy more
            item = rng.choice(list(ITEMS))
            amount = round(ITEMS[item] * rng.randint(1, 3), 2)
            value = json.dumps({"item": item, "amount": amount}).encode()
            futures.append(await producer.send(topic, value, key=user.encode()))
        await producer.flush()
        for future in futures:
            future.result()  # raises if any event was not acknowledged


def parse(key: bytes | None, value: bytes | None) -> tuple[str, str, Decimal] | None:
    """(user, item, amount) of an event, or None, by the rules of the Spark job (`EVENT_SQL`):
    a key, and a JSON object (no duplicate names) whose item is a string and whose amount is
    a number written without an exponent that fits decimal(12,2) once rounded half up to
    cents.
    """
    if key is None:
        return None
    try:
        event = json.loads(
            (value or b"").decode("utf-8", "replace"),
            parse_float=_decimal,
            parse_constant=_refuse,
            object_pairs_hook=_unique_names,
        )
    except ValueError:
        return None
    if not isinstance(event, dict) or not isinstance(event.get("item"), str):
        return None
    amount = event.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int | Decimal):
        return None
    try:
        cents = Decimal(amount).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    except InvalidOperation:
        return None
    if abs(cents) >= 10**10:  # does not fit decimal(12,2)
        return None
    return key.decode("utf-8", "replace"), event["item"], cents


def _decimal(literal: str) -> Decimal | None:
    return None if "e" in literal.lower() else Decimal(literal)


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({name for name, _ in pairs}) != len(pairs):
        raise ValueError("duplicate names")
    return dict(pairs)


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Where the topic ends now: both sides total exactly these records, whatever comes after."""
    async with Consumer(bootstrap, enable_auto_commit=False) as consumer:
        await consumer.assign_topic(topic)
        ends = await consumer.end_offsets(consumer.assignment())
    return {partition: offset for (_, partition), offset in ends.items()}


async def totals_without_spark(
    bootstrap: str, topic: str, ends: dict[int, int]
) -> tuple[Totals, Totals]:
    """Step 3's reference: the topic up to `ends`, read with the Python client."""
    users: Totals = {}
    items: Totals = {}
    async with Consumer(bootstrap, enable_auto_commit=False) as consumer:
        consumer.assign([(topic, partition) for partition in ends])
        await consumer.seek_to_beginning()
        while any([await consumer.position((topic, p)) < end for p, end in ends.items()]):
            for record in await consumer.poll(1000):
                event = parse(record.key, record.value)
                if record.offset < ends[record.partition] and event is not None:
                    user, item, amount = event
                    for table, name in ((users, user), (items, item)):
                        count, total = table.get(name, (0, Decimal(0)))
                        table[name] = (count + 1, total + amount)
    return users, items


def spark_totals(
    spark: Any, bootstrap: str, topic: str, ends: dict[int, int], *, out_topic: str, parquet: Path
) -> tuple[Totals, Totals]:
    """Step 2: the topic up to `ends`."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - Spark's own idiom

    events = (
        spark.read.format("kraftlite")
        .option("kraftlite.bootstrap", bootstrap)
        .option("subscribe", topic)
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in ends.items()}}))
        .load()
        .selectExpr("key", "try_parse_json(CAST(value AS STRING)) AS event")
        .selectExpr(*EVENT_SQL)
        .where("user IS NOT NULL AND item IS NOT NULL AND amount IS NOT NULL")
        .cache()
    )

    def totals(by: str, kind: str) -> Any:
        return (
            events.groupBy(F.col(by).alias("name"))
            .agg(F.count("*").alias("purchases"), F.sum("amount").alias("total"))
            .withColumn("kind", F.lit(kind))
            .orderBy(F.desc("total"), "name")
        )

    by_user, by_item = totals("user", "user"), totals("item", "item")
    for kind, frame in (("user", by_user), ("item", by_item)):
        frame.write.mode("overwrite").parquet(str(parquet / f"totals_by_{kind}"))
        (
            frame.select(
                F.concat_ws(":", "kind", "name").alias("key"),
                F.to_json(F.struct("kind", "name", "purchases", "total")).alias("value"),
            )
            .write.format("kraftlite")
            .option("kraftlite.bootstrap", bootstrap)
            .option("topic", out_topic)
            .mode("append")
            .save()
        )
        click.echo(f"\nTop {kind}s by amount spent (also in {out_topic} and {parquet}):")
        frame.select("name", "purchases", "total").show(5, truncate=False)
    result = (_collect(by_user), _collect(by_item))
    events.unpersist()
    return result


def _collect(frame: Any) -> Totals:
    return {r["name"]: (r["purchases"], r["total"]) for r in frame.collect()}


def compare(what: str, spark: Totals, reference: Totals) -> list[str]:
    return [
        f"{what} {name}: Spark {spark.get(name)} != client {reference.get(name)}"
        for name in sorted(set(spark) | set(reference))
        if spark.get(name) != reference.get(name)
    ]


@click.command()
@click.option("--bootstrap", default="http://127.0.0.1:9092", show_default=True)
@click.option("--topic", default="purchases", show_default=True)
@click.option("--out-topic", default="purchase-totals", show_default=True)
@click.option("--events", default=20_000, show_default=True, help="events to generate first")
@click.option("--seed", default=7, show_default=True)
@click.option("--parquet", type=click.Path(path_type=Path), default=Path("purchases-parquet"))
def main(
    *, bootstrap: str, topic: str, out_topic: str, events: int, seed: int, parquet: Path
) -> None:
    """Generate purchase events, total them with Spark, and check the totals."""
    from kraftlite.spark.local import spark_session  # noqa: PLC0415 - pyspark is heavy

    asyncio.run(create_topics(bootstrap, topic, out_topic))
    asyncio.run(generate(bootstrap, topic, events, seed))
    ends = asyncio.run(end_offsets(bootstrap, topic))
    click.echo(f"produced {events} purchase events to {topic} (acks=all)")
    spark = spark_session("kraftlite-purchases")  # spark-submit's master, else local[2]
    try:
        users, items = spark_totals(
            spark, bootstrap, topic, ends, out_topic=out_topic, parquet=parquet
        )
    finally:
        spark.stop()
    ref_users, ref_items = asyncio.run(totals_without_spark(bootstrap, topic, ends))
    wrong = compare("user", users, ref_users) + compare("item", items, ref_items)
    if wrong:
        click.echo("\n".join(["check FAILED:", *wrong[:20]]), err=True)
        raise SystemExit(1)
    purchases = sum(count for count, _ in users.values())
    click.echo(
        f"check: Spark's totals for {len(users)} users and {len(items)} items "
        f"({purchases} purchases) match a plain read of {topic} to the cent"
    )


if __name__ == "__main__":
    main()
