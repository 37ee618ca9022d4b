"""Consumer-group endpoints (api-v1.md, Consumer groups): any broker serves them, forwarding
to the group's coordinator (one hop), or answering 421 NOT_COORDINATOR with its URL when the
caller sent `X-Kraftlite-No-Forward: 1`.
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from kraftlite.api.app_keys import SERVICE
from kraftlite.api.auth import describe_topic_action, may
from kraftlite.api.errors import json_response, read_json_object
from kraftlite.api.relay import at_coordinator
from kraftlite.errors import ERROR_INFO, ErrorCode, KraftliteError
from kraftlite.groups.offsets import CommittedOffset, check_count, check_deletion_count
from kraftlite.metadata.topics import validate_topic_name
from kraftlite.protocol import names
from kraftlite.protocol.headers import TRANSACTIONAL_ID


def _group_name(request: web.Request) -> str:
    name = request.match_info["group"]
    if not names.is_name(name, names.MAX_GROUP_NAME):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"group names are 1-{names.MAX_GROUP_NAME} characters, no control characters",
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
    """None when this broker coordinates `group`; else the coordinator's answer (relay.py)."""
    coordinator = request.app[SERVICE].coordinator
    await coordinator.ensure_offsets_topic()
    return await at_coordinator(
        coordinator.broker, request, lambda: coordinator.coordinator_partition(group)
    )


async def join(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    body = await read_json_object(request)
    topics = body.get("topics")
    if not isinstance(topics, list) or not 0 < len(topics) <= names.MAX_SUBSCRIBED_TOPICS:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"topics must be a list of 1-{names.MAX_SUBSCRIBED_TOPICS} topic names",
        )
    for topic in topics:
        validate_topic_name(topic)
    client_id = body.get("client_id", "")
    if not isinstance(client_id, str) or (
        client_id and not names.is_name(client_id, names.MAX_CLIENT_ID)
    ):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"client_id must be at most {names.MAX_CLIENT_ID} characters, no control characters",
        )
    member_id = body.get("member_id", uuid.uuid4().hex)
    if not names.is_name(member_id, names.MAX_MEMBER_ID):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"member_id must be 1-{names.MAX_MEMBER_ID} characters, no control characters",
        )
    answer = await request.app[SERVICE].coordinator.join(
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
    answer = await request.app[SERVICE].coordinator.heartbeat(
        group, request.match_info["member_id"], epoch
    )
    return json_response(answer)


async def leave(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    await request.app[SERVICE].coordinator.leave(group, request.match_info["member_id"])
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
    if (transactional_id := request.headers.get(TRANSACTIONAL_ID)) is not None:
        await _commit_in_transaction(request, group, transactional_id, body, parsed)
        return web.Response(status=204)
    await request.app[SERVICE].coordinator.commit(
        group, member_id, _int(body, "member_epoch", optional=True), parsed
    )
    return web.Response(status=204)


async def _commit_in_transaction(
    request: web.Request,
    group: str,
    transactional_id: str,
    body: dict[str, Any],
    offsets: list[tuple[tuple[str, int], CommittedOffset]],
) -> None:
    """Kafka's TxnOffsetCommit (docs/transactions.md): the offsets pending in the producer's
    transaction, the group's once it commits, never if it aborts. The group's offsets
    partition must be in the transaction (`POST /v1/transactions/{id}/groups`). WRITE on
    the transactional id is checked before (api/permissions.py)."""
    producer_id, epoch = body.get("producer_id"), body.get("producer_epoch")
    if not (
        isinstance(producer_id, int)
        and isinstance(epoch, int)
        and not isinstance(producer_id, bool)
        and not isinstance(epoch, bool)
        and 0 <= producer_id < 2**63
        and 0 <= epoch < 2**15
    ):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"with {TRANSACTIONAL_ID}, the body names the transactional producer: "
            "producer_id (>= 0) and producer_epoch (0-32767)",
        )
    member_epoch = _int(body, "member_epoch", optional=True)
    service = request.app[SERVICE]
    image = service.broker.replicas.image
    for (topic, partition), _ in offsets:
        described = image.topic(topic)
        if described is None or partition not in described.partitions:
            raise KraftliteError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist"
            )
    await service.txn_offset_commit(
        transactional_id,
        group,
        producer_id,
        epoch,
        offsets,
        member_id=body.get("member_id") or None,
        generation=-1 if member_epoch is None else member_epoch,
    )


async def delete_offsets(request: web.Request) -> web.Response:
    """Kafka's OffsetDelete (groups/coordinator.py rule 6, the Kafka edge's too):
    `{"partitions": [{"topic", "partition"}]}`, each answered deleted or with why not; the
    group's refusals (GROUP_ID_NOT_FOUND, GROUP_NOT_EMPTY) are the whole answer. DELETE on
    the group and READ on every topic named are checked before (api/permissions.py)."""
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    body = await read_json_object(request)
    entries = body.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "partitions must be a non-empty list")
    check_deletion_count(len(entries))
    asked: list[tuple[str, int]] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise KraftliteError(ErrorCode.INVALID_REQUEST, f"partitions[{i}] needs a topic")
        validate_topic_name(entry["topic"])
        partition = _int(entry, "partition")
        assert partition is not None
        if not 0 <= partition < 2**31:  # a Kafka partition index (an int32)
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST, f"partitions[{i}]: a partition is 0 to 2^31-1"
            )
        asked.append((entry["topic"], partition))
    deletion = await request.app[SERVICE].coordinator.delete_offsets(group, asked)
    answered: list[dict[str, Any]] = []
    for topic, partition in asked:
        entry = {"topic": topic, "partition": partition}
        refused = deletion.refused.get((topic, partition))
        if refused is not None:
            entry |= {"error_code": refused.name, "message": ERROR_INFO[refused].message}
        answered.append(entry)
    return json_response({"group": group, "partitions": answered})


async def fetch_offsets(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    # Kafka's OffsetFetch: only topics the caller may describe (with auth on)
    offsets = await request.app[SERVICE].group_offsets(
        group, lambda topic: may(request, describe_topic_action(topic))
    )
    return json_response({"group": group, "offsets": offsets})


async def describe(request: web.Request) -> web.Response:
    group = _group_name(request)
    if (forwarded := await _at_coordinator(request, group)) is not None:
        return forwarded
    described = request.app[SERVICE].coordinator.describe(group)
    for member in described["members"]:  # topics the caller may not describe are left out
        member["topics"] = [t for t in member["topics"] if may(request, describe_topic_action(t))]
        member["assignment"] = [
            a for a in member["assignment"] if may(request, describe_topic_action(a["topic"]))
        ]
    return json_response(described)


async def list_groups(request: web.Request) -> web.Response:
    """Every broker's coordinated groups (asked of each live broker: service.all_groups;
    the brokers answer each other at `GET /v1/internal/groups`, not here)."""
    return json_response({"groups": await request.app[SERVICE].all_groups()})
