"""Transactions over HTTP (issue 27; docs/transactions.md): Kafka's transactional
producer's calls to its transaction coordinator, as JSON, on the same coordinator as the Kafka
edge's (transactions/coordinator.py), so both edges' producers fence each other by id.

    POST /v1/transactions/{id}/producer    InitProducerId  {"transaction_timeout_ms",
                                           ["producer_id", "producer_epoch"]} -> id, epoch
    POST /v1/transactions/{id}/partitions  AddPartitionsToTxn {"producer_id",
                                           "producer_epoch", "partitions": [{topic, partition}]}
    POST /v1/transactions/{id}/groups      AddOffsetsToTxn {"producer_id", "producer_epoch",
                                           "group"}
    POST /v1/transactions/{id}/end         EndTxn {"producer_id", "producer_epoch", "commit",
                                           ["tag"]}
    GET  /v1/transactions/{id}             DescribeTransactions, and the last commit's tag

The records go with the partition's own produce route, as binary batches that say they are
transactional, and a consumer's offsets with the group's offset commit route, with the
producer's id and epoch in the body (TxnOffsetCommit, group_handlers.py), both with
`X-Kraftlite-Transactional-Id`.

Rules:
1. Any broker serves them: one that does not coordinate the id forwards the request to the
   one that does (relay.py), or answers 421 with its URL under `X-Kraftlite-No-Forward`.
2. Authorization as Kafka's (api/permissions.py): WRITE on the transactional id for every
   call but the description (DESCRIBE), and WRITE on each topic added; internal topics are
   never added (TOPIC_AUTHORIZATION_FAILED). Partitions the caller may not describe are left
   out of a description.
3. Bounds: at most MAX_PARTITIONS partitions per call (Kafka's AddPartitionsToTxn has none
   but its request size); a tag is at most MAX_TAG characters. A partition that does not
   exist fails the whole call, nothing added (Kafka's [A3]).
4. Errors are the coordinator's, with Kafka's codes: CONCURRENT_TRANSACTIONS (409,
   retriable) while the id's last transaction is still being ended, PRODUCER_FENCED once a
   newer producer has the id, INVALID_TXN_STATE for an EndTxn that does not fit the state.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from kraftlite.api.app_keys import SERVICE
from kraftlite.api.auth import describe_topic_action, may
from kraftlite.api.errors import json_response, read_json_object
from kraftlite.api.permissions import transactional_id_of
from kraftlite.api.relay import at_coordinator
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.metadata.topics import is_internal_topic, validate_topic_name
from kraftlite.protocol import names
from kraftlite.transactions.coordinator import TXN_TOPIC
from kraftlite.transactions.metadata import NO_TIMESTAMP, STATE_NAMES, TopicPartition, TxnState

MAX_PARTITIONS: Final = 10_000
MAX_TAG: Final = 256
DEFAULT_TIMEOUT_MS: Final = 60_000  # Kafka's transaction.timeout.ms


def _int(body: dict[str, Any], name: str, low: int, high: int) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"{name} must be an integer {low}-{high}")
    return value


def _producer(body: dict[str, Any]) -> tuple[int, int]:
    return _int(body, "producer_id", 0, 2**63 - 1), _int(body, "producer_epoch", 0, 2**15 - 1)


async def _at_coordinator(
    request: web.Request, transactional_id: str, *, create: bool = True
) -> web.Response | None:
    """Rule 1: None when this broker coordinates the id; else the coordinator's answer.
    `create`: the state topic is made on first use (a description makes nothing)."""
    transactions = request.app[SERVICE].transactions
    if create:
        await transactions.ensure_state_topic()
    elif transactions.broker.replicas.image.topic(TXN_TOPIC) is None:
        # no id was ever used, or this broker's metadata is a moment behind its creation
        await request.app[SERVICE].until_known(TXN_TOPIC, timeout_s=1.0)
        if transactions.broker.replicas.image.topic(TXN_TOPIC) is None:
            raise KraftliteError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "no such transactional id")
    return await at_coordinator(
        transactions.broker, request, lambda: transactions.coordinator_partition(transactional_id)
    )


async def init_producer(request: web.Request) -> web.Response:
    transactional_id = transactional_id_of(request)
    if (forwarded := await _at_coordinator(request, transactional_id)) is not None:
        return forwarded
    body = await read_json_object(request)
    timeout_ms = DEFAULT_TIMEOUT_MS
    if "transaction_timeout_ms" in body:
        timeout_ms = _int(body, "transaction_timeout_ms", 1, 2**31 - 1)
    expected = None
    if "producer_id" in body or "producer_epoch" in body:  # KIP-360: the one it had
        expected = _producer(body)
    producer_id, epoch = await request.app[SERVICE].transactions.init_producer_id(
        transactional_id, timeout_ms, expected
    )
    return json_response({"producer_id": producer_id, "producer_epoch": epoch})


def partitions_of(body: dict[str, Any]) -> list[TopicPartition]:
    """Rule 3: the body's partitions, well formed and without repeats (authorized by
    api/permissions.py before the handler runs, for every topic named)."""
    entries = body.get("partitions")
    if not isinstance(entries, list) or not 0 < len(entries) <= MAX_PARTITIONS:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, f"partitions must be a list of 1-{MAX_PARTITIONS} entries"
        )
    found: list[TopicPartition] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise KraftliteError(ErrorCode.INVALID_REQUEST, f"partitions[{i}] needs a topic")
        validate_topic_name(entry["topic"], internal=True)
        found.append(TopicPartition(entry["topic"], _int(entry, "partition", 0, 2**31 - 1)))
    if len(set(found)) != len(found):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "a partition is named twice")
    return found


async def add_partitions(request: web.Request) -> web.Response:
    transactional_id = transactional_id_of(request)
    if (forwarded := await _at_coordinator(request, transactional_id)) is not None:
        return forwarded
    body = await read_json_object(request)
    producer_id, epoch = _producer(body)
    wanted = partitions_of(body)
    image = request.app[SERVICE].broker.replicas.image
    for tp in wanted:
        if is_internal_topic(tp.topic):  # rule 2, as Kafka's [A1]
            raise KraftliteError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{tp.topic} is internal")
        topic = image.topic(tp.topic)
        if topic is None or tp.partition not in topic.partitions:
            raise KraftliteError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"{tp.topic}-{tp.partition} does not exist: nothing was added",
            )
    await request.app[SERVICE].transactions.add_partitions(
        transactional_id, producer_id, epoch, wanted
    )
    return web.Response(status=204)


async def add_offsets(request: web.Request) -> web.Response:
    """AddOffsetsToTxn: the group's offsets partition joins the transaction, so offsets
    committed in it (`POST /v1/groups/{group}/offsets` with the transactional id) go with
    it."""
    transactional_id = transactional_id_of(request)
    if (forwarded := await _at_coordinator(request, transactional_id)) is not None:
        return forwarded
    body = await read_json_object(request)
    producer_id, epoch = _producer(body)
    group = body.get("group")
    if not isinstance(group, str) or not names.is_name(group, names.MAX_GROUP_NAME):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"group is 1-{names.MAX_GROUP_NAME} characters, no control characters",
        )
    service = request.app[SERVICE]
    await service.coordinator.ensure_offsets_topic()
    offsets = TopicPartition(OFFSETS_TOPIC, service.coordinator.offsets_partition(group))
    await service.transactions.add_partitions(transactional_id, producer_id, epoch, [offsets])
    return web.Response(status=204)


async def end(request: web.Request) -> web.Response:
    transactional_id = transactional_id_of(request)
    if (forwarded := await _at_coordinator(request, transactional_id)) is not None:
        return forwarded
    body = await read_json_object(request)
    producer_id, epoch = _producer(body)
    commit = body.get("commit")
    if not isinstance(commit, bool):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "commit must be true or false")
    tag = body.get("tag")
    if tag is not None and (
        not commit or not isinstance(tag, str) or not names.is_name(tag, MAX_TAG)
    ):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"a tag is 1-{MAX_TAG} characters, no control characters, and only on a commit",
        )
    await request.app[SERVICE].transactions.end_txn(
        transactional_id, producer_id, epoch, commit, tag=tag
    )
    return web.Response(status=204)


async def describe(request: web.Request) -> web.Response:
    transactional_id = transactional_id_of(request)
    if (forwarded := await _at_coordinator(request, transactional_id, create=False)) is not None:
        return forwarded
    found = request.app[SERVICE].transactions.describe(transactional_id)
    if found.state is TxnState.DEAD:  # being expired: as the Kafka edge answers [X1]
        raise KraftliteError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "no such transactional id")
    partitions = [
        {"topic": tp.topic, "partition": tp.partition}
        for tp in sorted(found.partitions)
        if may(request, describe_topic_action(tp.topic))
    ]
    return json_response(
        {
            "transactional_id": transactional_id,
            "state": STATE_NAMES[found.state],
            "producer_id": found.producer_id,
            "producer_epoch": found.producer_epoch,
            "transaction_timeout_ms": found.timeout_ms,
            "start_ms": None if found.start_ms == NO_TIMESTAMP else found.start_ms,
            "partitions": partitions,
            "commit_tag": found.commit_tag,
        }
    )
