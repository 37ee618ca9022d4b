"""The brokers' calls for the web console (docs/console.md): their figures
(`GET /v1/cluster/stats` for clients, `GET /v1/internal/stats` between brokers:
broker/stats.py) and a page of a topic's partitions with their log offsets
(`GET /v1/topics/{topic}/partitions`). Handlers parse, call one function, serialise.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from kraftlite.api.app_keys import BROKER, SERVICE
from kraftlite.api.auth import brokers_only
from kraftlite.api.errors import json_response
from kraftlite.api.topic_pages import client_visible, partitions_answer, stats_topics
from kraftlite.broker import stats
from kraftlite.broker.rates import RateWindow

RATES: Final = web.AppKey("console_rates", RateWindow[stats.RateKey])


# ---------------------------------------------------------------------------- stats


async def cluster_stats(request: web.Request) -> web.Response:
    """`GET /v1/cluster/stats[?topics=a,b]` (DESCRIBE CLUSTER): every broker's figures,
    and those of the named topics the caller may DESCRIBE (others are left out)."""
    visible = client_visible(request)
    topics = [name for name in stats_topics(request) if visible(name)]
    broker = request.app[BROKER]
    return json_response(await stats.cluster_stats(broker, topics, request.app[RATES]))


async def internal_stats(request: web.Request) -> web.Response:
    """`GET /v1/internal/stats` (nodes): this broker's figures (broker/stats.py rule 1)."""
    broker = request.app[BROKER]
    answer = stats.local_stats(
        broker, stats_topics(request), request.app[RATES], broker.clock.now_ms()
    )
    return json_response(answer)


async def topic_partitions(request: web.Request) -> web.Response:
    """`GET /v1/topics/{topic}/partitions` (DESCRIBE TOPIC): a page of the partitions, each
    with its log start and high watermark asked of its leader (null if it did not answer)."""
    name = request.match_info["topic"]
    brokers_only(request, name)
    service = request.app[SERVICE]
    answer = partitions_answer(request, service.broker.replicas.topic(name))
    found = await service.offsets((name, p["partition"]) for p in answer["partitions"])
    for entry in answer["partitions"]:
        offsets = found.get((name, entry["partition"]))
        entry["log_start_offset"] = None if offsets is None else offsets.log_start_offset
        entry["high_watermark"] = None if offsets is None else offsets.high_watermark
    return json_response(answer)


def new_rate_window() -> RateWindow[stats.RateKey]:
    return RateWindow(window_ms=10_000, sample_interval_ms=1_000, min_span_ms=1_000)


__all__ = ["RATES", "cluster_stats", "internal_stats", "new_rate_window", "topic_partitions"]
