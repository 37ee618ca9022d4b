"""Consumer-group endpoints (api-v1.md, Consumer groups): any broker serves them, forwarding
to the group's coordinator (one hop), or answering 421 NOT_COORDINATOR with its URL when the
caller sent `X-Kraftlite-No-Forward: 1`.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from kraftlite.api.auth import describe_topic_action, may
from kraftlite.api.errors import json_response, read_json_object
from kraftlite.api.internal_auth import caller, forwarded_for
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import GroupCoordinator
from kraftlite.groups.offsets import CommittedOffset, check_count
from kraftlite.metadata.topics import validate_topic_name
from kraftlite.protocol import names
from kraftlite.protocol.headers import FORWARDED, METADATA_VERSION, NO_FORWARD

COORDINATOR = web.AppKey("coordinator", GroupCoordinator)
_MAX_GROUP_NAME = 249
_MAX_MEMBER_ID = 64  # chosen by the client (a UUID), so a retried join is the same member
_MAX_CLIENT_ID = 255  # printable; shown by describe and the CLI
_MAX_SUBSCRIBED_TOPICS = 1000  # per join; a subscription is a list of topic names


def _group_name(request: web.Request) -> str:
    name = request.match_info["group"]
    if not names.is_name(name, _MAX_GROUP_NAME):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"group names are 1-{_MAX_GROUP_NAME} characters, no control characters",
        )
    return name


def _int(body: dict[str, Any], name: str, *, optional: bool = False) -> int | None:
    value = body.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"{name} must be an integer")
    return value


async def _at_coordinator(request: web.Request, group: str) -> web.Response | None:
    """None when this broker coordinates `group`; else the coordinator's answer."""
    coordinator = request.app[COORDINATOR]
    await coordinator.ensure_offsets_topic()
    try:
        coordinator.coordinator_partition(group)
    except KraftliteError as exc:
        url = exc.details.get("leader_url")
        if exc.code is not ErrorCode.NOT_COORDINATOR or url is None:
            raise
        if request.headers.get(NO_FORWARD) or request.headers.get(FORWARDED):
            raise
        return await _forward(request, url, coordinator)
    return None


async def _forward(request: web.Request, url: str, coordinator: GroupCoordinator) -> web.Response:
    broker = coordinator.broker
    headers = {
        "Content-Type": "application/json",
        FORWARDED: "1",
        METADATA_VERSION: str(broker.replicas.image.version),
        **forwarded_for(request),  # the coordinator authorizes the client, not us
    }
    try:
        async with broker.forward_session.request(
            request.method,
            url + request.path_qs,
            data=await request.read(),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=60),
        ) as upstream:
            return web.Response(
                status=upstream.status,
                body=await upstream.read(),
                headers={"Content-Type": upstream.headers.get("Content-Type", "")},
            )
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise KraftliteError(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the coordinator at {url} did not answer: {exc!r}"
        ) from None


async def join(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    body = await read_json_object(request)
    topics = body.get("topics")
    if not isinstance(topics, list) or not 0 < len(topics) <= _MAX_SUBSCRIBED_TOPICS:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"topics must be a list of 1-{_MAX_SUBSCRIBED_TOPICS} topic names",
        )
    for topic in topics:
        validate_topic_name(topic)
    client_id = body.get("client_id", "")
    if not isinstance(client_id, str) or (
        client_id and not names.is_name(client_id, _MAX_CLIENT_ID)
    ):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"client_id must be at most {_MAX_CLIENT_ID} characters, no control characters",
        )
    member_id = body.get("member_id", uuid.uuid4().hex)
    if not names.is_name(member_id, _MAX_MEMBER_ID):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, "member_id must be 1-64 characters, no control characters"
        )
    answer = request.app[COORDINATOR].join(
        group,
        member_id,
        client_id,
        sorted(set(topics)),
        _int(body, "session_timeout_ms", optional=True),
    )
    return json_response(answer)


async def heartbeat(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    body = await read_json_object(request)
    epoch = _int(body, "member_epoch")
    assert epoch is not None
    answer = request.app[COORDINATOR].heartbeat(group, request.match_info["member_id"], epoch)
    return json_response(answer)


async def leave(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    request.app[COORDINATOR].leave(group, request.match_info["member_id"])
    return web.Response(status=204)


async def commit(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    body = await read_json_object(request)
    member_id = body.get("member_id")
    if member_id is not None and not isinstance(member_id, str):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "member_id must be a string")
    entries = body.get("offsets")
    if not isinstance(entries, list) or not entries:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "offsets must be a non-empty list")
    check_count(len(entries))
    parsed = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise KraftliteError(ErrorCode.INVALID_REQUEST, f"offsets[{i}] needs a topic")
        validate_topic_name(entry["topic"])
        partition, offset = _int(entry, "partition"), _int(entry, "offset")
        assert partition is not None and offset is not None
        if partition < 0 or offset < 0:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, f"offsets[{i}]: negative number")
        metadata = entry.get("metadata", "")
        if not isinstance(metadata, str):
            raise KraftliteError(ErrorCode.INVALID_REQUEST, f"offsets[{i}].metadata: a string")
        parsed.append(((entry["topic"], partition), CommittedOffset(offset, metadata)))
    await request.app[COORDINATOR].commit(
        group, member_id, _int(body, "member_epoch", optional=True), parsed
    )
    return web.Response(status=204)


async def fetch_offsets(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    coordinator = request.app[COORDINATOR]
    # Kafka's OffsetFetch: only topics the caller may describe (with auth on)
    committed = {
        tp: c
        for tp, c in coordinator.committed(group).items()
        if may(request, describe_topic_action(tp[0]))
    }
    ends = await _high_watermarks(coordinator, {topic for topic, _ in committed})
    offsets = []
    for (topic, partition), c in sorted(committed.items()):
        hw = ends.get((topic, partition))
        offsets.append(
            {
                "topic": topic,
                "partition": partition,
                "offset": c.offset,
                "metadata": c.metadata,
                "high_watermark": hw,
                "lag": None if hw is None else max(hw - c.offset, 0),
            }
        )
    return json_response({"group": group, "offsets": offsets})


async def _high_watermarks(
    coordinator: GroupCoordinator, topics: set[str]
) -> dict[tuple[str, int], int]:
    broker = coordinator.broker
    result: dict[tuple[str, int], int] = {}

    async def one(topic: str) -> None:
        try:
            async with broker.session.get(
                broker.settings.url + f"/v1/topics/{topic}",
                timeout=aiohttp.ClientTimeout(total=5),
            ) as response:
                if response.status == 200:
                    described = orjson.loads(await response.read())
                    for p in described["partitions"]:
                        if p.get("high_watermark") is not None:
                            result[(topic, p["partition"])] = p["high_watermark"]
        except (aiohttp.ClientError, TimeoutError):
            return

    await asyncio.gather(*(one(t) for t in sorted(topics)))
    return result


async def describe(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    described = request.app[COORDINATOR].describe(group)
    for member in described["members"]:  # topics the caller may not describe are left out
        member["topics"] = [t for t in member["topics"] if may(request, describe_topic_action(t))]
        member["assignment"] = [
            a for a in member["assignment"] if may(request, describe_topic_action(a["topic"]))
        ]
    return json_response(described)


async def list_groups(request: web.Request) -> web.Response:
    """Every broker's coordinated groups (asked of each live broker)."""
    coordinator = request.app[COORDINATOR]
    broker = coordinator.broker
    if request.headers.get(FORWARDED) and caller(request).is_cluster:  # a broker's fan-out
        return json_response({"groups": coordinator.local_groups()})
    image = broker.replicas.image
    urls = [
        b.url for b in image.brokers.values() if not b.fenced and b.broker_id != broker.broker_id
    ]

    async def ask(url: str) -> list[dict[str, Any]]:
        try:
            async with broker.session.get(
                url + "/v1/groups",
                headers={FORWARDED: "1"},
                timeout=aiohttp.ClientTimeout(total=5),
            ) as response:
                return list(orjson.loads(await response.read())["groups"])
        except (aiohttp.ClientError, TimeoutError, KeyError, orjson.JSONDecodeError):
            return []

    groups = coordinator.local_groups()
    for part in await asyncio.gather(*(ask(u) for u in urls)):
        groups.extend(part)
    return json_response({"groups": sorted(groups, key=lambda g: g["group"])})
