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
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol.internal import BrokerStatsRequest, MessageError

# The app's console figures: its rate window and the fan-outs clients share (stats.py
# rule 6). The key keeps its first name: broker_app.py sets it with `new_rate_window()`.
RATES: Final = web.AppKey("console_rates", stats.StatsWindow)


# ---------------------------------------------------------------------------- stats


async def cluster_stats(request: web.Request) -> web.Response:
    """`GET /v1/cluster/stats[?topics=a,b]` (DESCRIBE CLUSTER): every broker's figures,
    and those of the named topics the caller may DESCRIBE (others are left out); requests
    close in time share one fan-out (broker/stats.py rule 6)."""
    visible = client_visible(request)
    topics = [name for name in stats_topics(request) if visible(name)]
    broker = request.app[BROKER]
    return json_response(await stats.cluster_stats(broker, topics, request.app[RATES]))


async def internal_stats(request: web.Request) -> web.Response:
    """`GET /v1/internal/stats` (nodes): this broker's figures (broker/stats.py rule 1), a
    BrokerStatsRequest answered with a BrokerStatsResponse."""
    try:
        wanted = BrokerStatsRequest.from_params(request.query)
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    broker = request.app[BROKER]
    answer = await stats.local_stats(
        broker, wanted.topics, request.app[RATES].rates, broker.clock.now_ms()
    )
    return json_response(answer.to_json())


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


def new_rate_window() -> stats.StatsWindow:
    """The value of RATES for a new broker app (the name broker_app.py calls it by)."""
    return stats.new_stats_window()


__all__ = ["RATES", "cluster_stats", "internal_stats", "new_rate_window", "topic_partitions"]
