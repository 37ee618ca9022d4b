"""Figures only brokers know, for the console (`GET /v1/cluster/stats`): each broker's
leaders, replicas, bytes on disk and produce/fetch rates, and per topic (only the topics
asked for) its size, each partition's size and its rates.

Rules:
1. Each broker answers for itself (`local_stats`, served at `/v1/internal/stats` to nodes);
   the broker a client asked gathers every live broker's answer with one signed node call
   each, bounded in time, as offsets.py does, and sums them (`cluster_stats`). A broker that
   does not answer in time is shown as such, never fails the whole answer.
2. Sizes count a partition once: a topic's and a partition's size are its leader's log;
   a broker's `disk_bytes` counts every replica it holds.
3. Rates come from the produce/fetch counters of metrics.py (counted where the leader
   serves), sampled when asked (rates.py rule 1), so summing brokers counts nothing twice.
4. Authorization stays at the edge: the topics asked of other brokers are already the ones
   the client may DESCRIBE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import structlog
from prometheus_client import Counter

from kraftlite.broker import metrics
from kraftlite.broker.rates import Rates, RateWindow
from kraftlite.metadata.views import partition_health

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker

log = structlog.get_logger(__name__)
TIMEOUT_S = 2.0
RATE_NAMES = ("produce_bytes", "produce_records", "fetch_bytes", "fetch_records")
RateKey = tuple[str, str]  # (one of RATE_NAMES, topic)


def _counters() -> Mapping[str, Counter]:
    return {
        "produce_bytes": metrics.PRODUCED_BYTES,
        "produce_records": metrics.PRODUCED_RECORDS,
        "fetch_bytes": metrics.FETCHED_BYTES,
        "fetch_records": metrics.FETCHED_RECORDS,
    }


def counter_totals() -> dict[RateKey, float]:
    """Every (rate name, topic) counter's total in this process."""
    totals: dict[RateKey, float] = {}
    for name, counter in _counters().items():
        for family in counter.collect():
            for sample in family.samples:
                if sample.name.endswith("_total") and "topic" in sample.labels:
                    totals[(name, sample.labels["topic"])] = sample.value
    return totals


def _by_topic(
    rates: Rates[RateKey] | None,
) -> tuple[dict[str, float] | None, dict[str, dict[str, float]]]:
    """Per-second figures by rate name: of every topic, and of each topic (one pass)."""
    if rates is None:
        return None, {}
    total = dict.fromkeys(RATE_NAMES, 0.0)
    topics: dict[str, dict[str, float]] = {}
    for (name, topic), value in rates.per_second.items():
        total[name] += value
        topics.setdefault(topic, dict.fromkeys(RATE_NAMES, 0.0))[name] += value
    return _rounded(total), {topic: _rounded(figures) for topic, figures in topics.items()}


def _rounded(figures: dict[str, float]) -> dict[str, float]:
    return {name: round(value, 3) for name, value in figures.items()}


def local_stats(
    broker: Broker, topics: Iterable[str], window: RateWindow[RateKey], now_ms: int
) -> dict[str, Any]:
    """Rule 1: this broker's figures, and the named topics' figures as far as it leads them."""
    replicas = broker.replicas
    rates = window.observe(now_ms, counter_totals())
    total, by_topic = _by_topic(rates)
    idle = None if rates is None else dict.fromkeys(RATE_NAMES, 0.0)
    held = list(replicas.partitions.values())
    per_topic: dict[str, Any] = {}
    for name in topics:
        image = replicas.image.topic(name)
        if image is None:
            continue
        sizes: dict[str, int] = {}
        for index in image.partitions:
            partition = replicas.partitions.get((image.topic_id, index))
            if partition is not None and partition.serving_as_leader:
                sizes[str(index)] = partition.log.size_bytes
        per_topic[name] = {"partitions": sizes, "rates": by_topic.get(name, idle)}
    return {
        "broker_id": broker.broker_id,
        "leaders": sum(1 for p in held if p.serving_as_leader),
        "replicas": len(held),
        "disk_bytes": sum(p.log.size_bytes for p in held),
        "rates": total,
        "rate_window_ms": None if rates is None else rates.span_ms,
        "topics": per_topic,
    }


async def _ask(broker: Broker, url: str, topics: Sequence[str]) -> dict[str, Any] | None:
    try:
        async with broker.session.get(
            url + "/v1/internal/stats",
            params={"topics": ",".join(topics)} if topics else None,
            timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
        ) as response:
            if response.status != 200:
                return None
            answer = orjson.loads(await response.read())
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.info("stats_not_learned", url=url, error=repr(exc))
        return None
    return answer if isinstance(answer, dict) else None


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _add_rates(into: dict[str, float] | None, more: object) -> dict[str, float] | None:
    if not isinstance(more, dict):
        return into
    base = into or dict.fromkeys(RATE_NAMES, 0.0)
    return {name: round(base[name] + _number(more.get(name)), 3) for name in RATE_NAMES}


async def cluster_stats(
    broker: Broker, topics: Sequence[str], window: RateWindow[RateKey]
) -> dict[str, Any]:
    """Rule 1: every live broker's figures (this one's computed here), summed."""
    image = broker.replicas.image
    asked: dict[int, asyncio.Future[dict[str, Any] | None]] = {}
    loop = asyncio.get_running_loop()
    for broker_id, registration in sorted(image.brokers.items()):
        if registration.fenced:
            continue
        if broker_id == broker.broker_id:
            done: asyncio.Future[dict[str, Any] | None] = loop.create_future()
            done.set_result(local_stats(broker, topics, window, broker.clock.now_ms()))
            asked[broker_id] = done
        else:
            asked[broker_id] = asyncio.ensure_future(_ask(broker, registration.url, topics))
    answers = dict(zip(asked, await asyncio.gather(*asked.values()), strict=True))
    brokers: list[dict[str, Any]] = []
    totals: dict[str, float] | None = None
    per_topic: dict[str, dict[str, Any]] = {
        name: {"size_bytes": 0, "partitions": {}, "rates": None} for name in topics
    }
    for broker_id in sorted(image.brokers):
        answer = answers.get(broker_id)
        if answer is None:
            brokers.append({"id": broker_id, "answered": False})
            continue
        brokers.append(
            {
                "id": broker_id,
                "answered": True,
                "leaders": int(_number(answer.get("leaders"))),
                "replicas": int(_number(answer.get("replicas"))),
                "disk_bytes": int(_number(answer.get("disk_bytes"))),
                "rates": answer.get("rates") if isinstance(answer.get("rates"), dict) else None,
            }
        )
        totals = _add_rates(totals, answer.get("rates"))
        found = answer.get("topics")
        for name, figures in (found if isinstance(found, dict) else {}).items():
            if name not in per_topic or not isinstance(figures, dict):
                continue
            into = per_topic[name]
            sizes = figures.get("partitions")
            for index, size in (sizes if isinstance(sizes, dict) else {}).items():
                into["partitions"][str(index)] = int(_number(size))
                into["size_bytes"] += int(_number(size))
            into["rates"] = _add_rates(into["rates"], figures.get("rates"))
    return {
        **partition_health(image),
        "rates": totals,
        "brokers": brokers,
        "topics": per_topic,
    }


__all__ = ["RateKey", "cluster_stats", "counter_totals", "local_stats"]
