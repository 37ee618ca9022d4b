"""Topic lists and a topic's partitions paged and filtered on the server, for the web
console at scale (docs/console.md), on brokers and controllers:
`GET /v1/topics?limit=&after=&contains=` (with none of those, the contract's answer, every
visible topic: api-v1.md) and `GET /v1/topics/{topic}/partitions?limit=&after=&under_replicated=`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Final

from aiohttp import web

from kraftlite.api.auth import describe_topic_action, may_many
from kraftlite.api.errors import int_param
from kraftlite.api.internal_auth import caller
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import TopicImage
from kraftlite.metadata.topics import is_internal_topic
from kraftlite.metadata.views import partition_view, topic_summary
from kraftlite.protocol import names

MAX_PAGE: Final = 500
DEFAULT_PAGE: Final = 100
MAX_FILTER: Final = names.MAX_TOPIC_NAME
PAGING_PARAMS: Final = ("limit", "after", "contains")
MAX_PARTITIONS_PAGE: Final = 1000
DEFAULT_PARTITIONS_PAGE: Final = 100
MAX_STATS_TOPICS: Final = 100  # topics one stats call may name: a page of the console's list
_NAME = rf"[a-zA-Z0-9._-]{{1,{names.MAX_TOPIC_NAME}}}"
_TOPICS = re.compile(rf"{_NAME}(,{_NAME}){{0,{MAX_STATS_TOPICS - 1}}}")


def _text_param(request: web.Request, name: str) -> str | None:
    value = request.query.get(name)
    if value is not None and not names.is_name(value, MAX_FILTER):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"{name} must be 1-{MAX_FILTER} characters, no control characters",
        )
    return value


def topics_answer(
    request: web.Request, topics: Iterable[TopicImage], visible: Callable[[str], bool]
) -> dict[str, Any]:
    """`GET /v1/topics`: every visible topic by name, as the contract says; with `limit`,
    `after` or `contains`, one page of them: at most `limit` (1-500, default 100) names after
    `after` (a cursor: the last name of the previous page), holding `contains` (any case),
    with `total` (how many match, on every page) and `next` (the cursor of the next page,
    null on the last); a page's topics carry their configs too (those set on the topic)."""
    query = request.query
    paged = any(name in query for name in PAGING_PARAMS)
    limit = int_param(query.get("limit"), "limit", DEFAULT_PAGE)
    if not 1 <= limit <= MAX_PAGE:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"limit must be in [1, {MAX_PAGE}]")
    after, contains = _text_param(request, "after"), _text_param(request, "contains")
    ordered = sorted(topics, key=lambda t: t.name)
    if not paged:
        return {"topics": [topic_summary(t) for t in ordered if visible(t.name)]}
    needle = contains.casefold() if contains else None
    matching = [
        t for t in ordered if (needle is None or needle in t.name.casefold()) and visible(t.name)
    ]
    rest = matching if after is None else [t for t in matching if t.name > after]
    page = rest[:limit]
    return {
        "topics": [{**topic_summary(t), "configs": dict(sorted(t.configs.items()))} for t in page],
        "total": len(matching),
        "next": page[-1].name if len(rest) > limit else None,
    }


def client_visible(
    request: web.Request, *, internal_for_nodes: bool = False
) -> Callable[[str], bool]:
    """Whether the caller may see a topic in a list: DESCRIBE on it; internal topics only
    for nodes acting for themselves, where `internal_for_nodes` (the controllers' list)."""
    nodes = internal_for_nodes and caller(request).is_cluster
    allows = may_many(request)

    def visible(name: str) -> bool:
        if is_internal_topic(name) and not nodes:
            return False
        return allows(describe_topic_action(name))

    return visible


def stats_topics(request: web.Request) -> list[str]:
    """`GET /v1/cluster/stats?topics=`: 1-100 topic names separated by commas (the OpenAPI
    pattern), or none."""
    raw = request.query.get("topics")
    if raw is None:
        return []
    if _TOPICS.fullmatch(raw) is None:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"topics must be 1-{MAX_STATS_TOPICS} topic names separated by commas",
        )
    return list(dict.fromkeys(raw.split(",")))


def partitions_answer(request: web.Request, topic: TopicImage) -> dict[str, Any]:
    """`GET /v1/topics/{topic}/partitions`: the topic (name, configs, partition count,
    replication factor, how many partitions are under-replicated and offline) and one page
    of its partitions by index: at most `limit` (1-1000, default 100) after the index `after`,
    only the under-replicated ones (ISR smaller than the replication factor) with
    `under_replicated=true`; `total` is how many match, `next` the cursor of the next page
    (null on the last). Brokers add each listed partition's log offsets."""
    query = request.query
    limit = int_param(query.get("limit"), "limit", DEFAULT_PARTITIONS_PAGE)
    if not 1 <= limit <= MAX_PARTITIONS_PAGE:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, f"limit must be in [1, {MAX_PARTITIONS_PAGE}]"
        )
    after = int_param(query.get("after"), "after", -1)
    if "after" in query and not 0 <= after < 2**31:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "after must be a partition index >= 0")
    only_under = query.get("under_replicated", "false")
    if only_under not in {"true", "false"}:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "under_replicated must be true or false")
    registrations = topic.partitions
    under = [i for i, p in registrations.items() if p.under_replicated]
    matching = sorted(under) if only_under == "true" else sorted(registrations)
    rest = [i for i in matching if i > after]
    page = rest[:limit]
    summary = topic_summary(topic)
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "configs": dict(sorted(topic.configs.items())),
        "partition_count": summary["partitions"],
        "replication_factor": summary["replication_factor"],
        "under_replicated": len(under),
        "offline": sum(1 for p in registrations.values() if p.leader < 0),
        "total": len(matching),
        "next": page[-1] if len(rest) > limit else None,
        "partitions": [partition_view(i, registrations[i]) for i in page],
    }


__all__ = [
    "MAX_PAGE",
    "MAX_PARTITIONS_PAGE",
    "MAX_STATS_TOPICS",
    "client_visible",
    "partitions_answer",
    "stats_topics",
    "topics_answer",
]
