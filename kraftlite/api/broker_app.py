"""The brokers' HTTP API: produce, fetch, offsets, topics, operations (api-v1.md).

Handlers parse, make one call on the broker's replicas (or forward), and serialise. Any
broker serves any request: a partition request that reaches a broker which does not lead
the partition is forwarded to the leader (one hop), or answered 421 NOT_LEADER_OR_FOLLOWER
with the leader when the caller sent `X-Kraftlite-No-Forward: 1`. Admin writes go to the
controllers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import orjson
import structlog
from aiohttp import web

from kraftlite import observability
from kraftlite.api import console_api
from kraftlite.api import group_handlers as groups
from kraftlite.api import txn_handlers as transactions
from kraftlite.api.app_keys import BROKER, PRODUCED_BYTES, SERVICE
from kraftlite.api.auth import AUTH, GATE, brokers_only, issue_token, may
from kraftlite.api.errors import (
    PROBLEM_JSON,
    int_param,
    json_response,
    problem,
    problem_body,
    read_json_object,
)
from kraftlite.api.internal_auth import (
    CLUSTER_AUTH,
    ClusterAuth,
    caller,
    forwarded_for,
)
from kraftlite.api.listener import READ_TIMEOUT_MS
from kraftlite.api.openapi import OPENAPI
from kraftlite.api.permissions import boundary_middlewares
from kraftlite.api.relay import relay
from kraftlite.api.restart import BOOT_ID, restart_node
from kraftlite.api.topic_pages import client_visible, topics_answer
from kraftlite.broker import metrics
from kraftlite.broker.broker import Broker
from kraftlite.broker.offsets import offsets_answer
from kraftlite.broker.partition import Acks
from kraftlite.config import ListenerLimits
from kraftlite.console import add_console
from kraftlite.errors import ErrorCode, KraftliteError, error_from_problem
from kraftlite.metadata.topics import is_compacted
from kraftlite.metadata.views import topic_view
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import framing, headers, json_records, names, urls
from kraftlite.protocol import stored as stored_batch
from kraftlite.protocol.headers import (
    BATCH_TYPE,
    KAFKA_BATCHES_TYPE,
    METADATA_VERSION,
    TRANSACTIONAL_ID,
)
from kraftlite.protocol.internal import (
    GroupListResponse,
    MessageError,
    OffsetsRequest,
    ReplicaFetchRequest,
    TxnMarkerResult,
    TxnMarkersRequest,
    TxnMarkersResponse,
    TxnVerifyRequest,
    TxnVerifyResponse,
)
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.protocol.kafka.wire import WireError
from kraftlite.security.acls import CLUSTER_NAME, Action, Operation, ResourceType
from kraftlite.security.gate import Gate
from kraftlite.service import (
    REQUEST_DECOMPRESSED_MAX_BYTES,
    BrokerService,
    Leadership,
    Produced,
)
from kraftlite.storage import keys as key_index
from kraftlite.transactions.metadata import TopicPartition as TxnPartitionKey

T = TypeVar("T")
log = structlog.get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DEFAULT_MAX_BYTES = 1 << 20
MAX_JSON_RECORDS = 10_000
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"  # fetch `isolation`
MAX_JSON_FETCH_BYTES = 1 << 20  # a JSON fetch decodes on the event loop: keep it short
STREAM_CLOSE_S = 1.0  # how long a replica stream waits for the follower's close reply


# ---------------------------------------------------------------------------- helpers


def _partition_index(request: web.Request) -> int:
    index = int_param(request.match_info["partition"], "partition", -1)
    if index < 0:
        raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "partition must be >= 0")
    return index


def _acks(request: web.Request) -> Acks:
    raw = request.query.get("acks", "all")
    acks = {"all": Acks.ALL, "-1": Acks.ALL, "1": Acks.LEADER, "0": Acks.NONE}.get(raw)
    if acks is None:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "acks must be all, -1, 1 or 0")
    return acks


def _timeout_s(request: web.Request) -> float:
    timeout_ms = int_param(request.query.get("timeout_ms"), "timeout_ms", 30_000)
    if not 0 <= timeout_ms <= 300_000:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "timeout_ms must be in [0, 300000]")
    return timeout_ms / 1000


async def _auto_create(request: web.Request, topic: str, body: bytes, index: int | None) -> None:
    """The service's rule 6 for a produce (to partition `index`; None: to the topic): a
    topic that does not exist is created first, where `auto.create.topics.enable` allows it
    and the client may CREATE on the cluster or the topic (else the produce answers
    UNKNOWN_TOPIC_OR_PARTITION, as before, and the refusal is audited). A body refused for
    its type or shape (records naming partitions the new topic would not have, or another
    than the path's) creates nothing. (As with Kafka, whose producers create a topic by
    asking for its metadata, a batch refused later, for its CRC or its size, may leave it.)"""
    service = request.app[SERVICE]
    partitions = service.topic_defaults.partitions
    if not service.auto_creates(topic) or (index is not None and index >= partitions):
        return
    create = Action(Operation.CREATE, ResourceType.TOPIC, topic)
    if not (
        may(request, Action(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME))
        or may(request, create)
    ):
        request.app[GATE].audit_refused(caller(request), [create], edge="http", api="produce")
        return
    if request.content_type == BATCH_TYPE:
        _record_count(body)
    elif request.content_type == KAFKA_BATCHES_TYPE:
        try:
            size = kafka_records.batch_size_at(body)
        except WireError as exc:
            raise KraftliteError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
        if size != len(body):
            raise KraftliteError(ErrorCode.INVALID_RECORD, "a produce carries one record batch")
    elif request.content_type in {"application/json", ""}:
        parsed = await _json_work(
            request, body, lambda: json_records.parse_produce_body(_json_object(body))
        )
        for i, (wanted, _) in enumerate(parsed):
            if wanted is not None and (
                wanted != index if index is not None else wanted >= partitions
            ):
                raise KraftliteError(
                    ErrorCode.INVALID_REQUEST
                    if index is not None
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"records[{i}].partition is {wanted}: the topic would have partitions "
                    f"0-{partitions - 1}"
                    if index is None
                    else f"records[{i}].partition is {wanted}, but this is partition {index}",
                )
    else:
        raise KraftliteError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"Content-Type must be application/json or {BATCH_TYPE}",
        )
    await service.auto_create(topic, headers=forwarded_for(request))


async def _leader_or_relay(
    request: web.Request, topic: str, index: int, body: bytes = b""
) -> Leadership | web.Response:
    """This broker leads the partition, or the leader's answer to the request (relay.py)."""
    try:
        return request.app[SERVICE].leader(topic, index)
    except KraftliteError as exc:
        if exc.code is not ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise
        return await relay(request.app[BROKER], request, exc, body)


async def _controller_call(
    request: web.Request, body: Any = None, *, with_query: bool = False
) -> web.Response:
    """Pass an admin call through to the controller quorum, as the client, and relay the
    answer: the raw path (and query), as the client sent it and as it was authorized
    (decoded, a name holding "/../" would reach another resource)."""
    status, answer = await request.app[SERVICE].admin(
        request.method,
        request.rel_url.raw_path_qs if with_query else request.rel_url.raw_path,
        body,
        headers=forwarded_for(request),
    )
    if status == 204:
        return web.Response(status=204)
    response = json_response(answer, status=status)
    observability.label_relayed_error(response, answer)
    return response


# ---------------------------------------------------------------------------- operations


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    body = {
        "ready": broker.ready,
        "broker_id": broker.broker_id,
        "broker_epoch": broker.broker_epoch,
        "fenced": broker.fenced,
        "metadata_version": broker.replicas.image.version,
        "boot_id": BOOT_ID,
    }
    return json_response(body, status=200 if broker.ready else 503)


async def metrics_endpoint(request: web.Request) -> web.Response:
    """Prometheus text. The figures are read on the event loop, where they change, and
    written out on a thread. Group lag is computed for the scrape (one round of offset
    requests to the leaders, bounded by their timeout); if that fails, the rest is still
    answered, without lag."""
    collectors = request.app[METRICS]
    collectors.replicas.figures = metrics.replica_figures(request.app[BROKER])
    try:
        collectors.lags.groups, collectors.lags.lags = await request.app[SERVICE].group_lags()
    except Exception:
        log.exception("group_lag_not_computed")
        collectors.lags.groups, collectors.lags.lags = None, []
    body, content_type = await asyncio.to_thread(
        observability.render, metrics.REGISTRY, collectors.registry
    )
    return web.Response(body=body, headers={"Content-Type": content_type})


async def openapi(request: web.Request) -> web.Response:
    return json_response(OPENAPI)


# ---------------------------------------------------------------------------- cluster, topics


async def cluster(request: web.Request) -> web.Response:
    return await _controller_call(request)


async def list_topics(request: web.Request) -> web.Response:
    """Every topic the client may DESCRIBE (no internal one); paged with `limit`, `after`,
    `contains` (api/topic_pages.py)."""
    image = request.app[BROKER].replicas.image
    return json_response(topics_answer(request, image.topics.values(), client_visible(request)))


def _isolation(request: web.Request) -> bool:
    """`isolation=read_committed` (Kafka's isolation.level): True; read_uncommitted (the
    default): False."""
    isolation = request.query.get("isolation", READ_UNCOMMITTED)
    if isolation not in {READ_UNCOMMITTED, READ_COMMITTED}:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, "isolation must be read_uncommitted or read_committed"
        )
    return isolation == READ_COMMITTED


async def describe_topic(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    brokers_only(request, request.match_info["topic"])
    topic = service.broker.replicas.topic(request.match_info["topic"])
    view = topic_view(topic)
    committed = _isolation(request)
    offsets = await service.topic_offsets(topic.name, committed=committed)
    for entry in view["partitions"]:
        found = offsets.get(entry["partition"])
        entry["log_start_offset"] = None if found is None else found.log_start_offset
        entry["high_watermark"] = None if found is None else found.high_watermark
        if committed:  # read_committed's end (None from a broker too old to say)
            entry["last_stable_offset"] = None if found is None else found.last_stable_offset
    return json_response(view)


async def internal_offsets(request: web.Request) -> web.Response:
    """`GET /v1/internal/offsets` (nodes): an OffsetsRequest answered with an
    OffsetsResponse (broker/offsets.py rule 2)."""
    try:
        wanted = OffsetsRequest.from_params(request.query)
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    local = await request.app[SERVICE].local_offsets(wanted.topic, committed=wanted.committed)
    return json_response(offsets_answer(wanted.topic, local).to_json())


async def internal_groups(request: web.Request) -> web.Response:
    """`GET /v1/internal/groups` (nodes): the groups this broker coordinates, a
    GroupListResponse, for another broker's `GET /v1/groups` (service.all_groups). Nodes
    have this route of their own so the public listing's contract is the clients' alone."""
    groups = request.app[SERVICE].coordinator.local_groups()
    return json_response(GroupListResponse(tuple(groups)).to_json())


async def admin_passthrough(request: web.Request) -> web.Response:
    """Users, ACLs and quotas live in the controllers' metadata: pass the call on, as the
    client (the controller authorizes it again)."""
    body = await read_json_object(request) if request.body_exists else None
    return await _controller_call(request, body, with_query=True)


async def create_topic(request: web.Request) -> web.Response:
    return await _controller_call(request, await read_json_object(request))


async def delete_topic(request: web.Request) -> web.Response:
    return await _controller_call(request)


async def create_partitions(request: web.Request) -> web.Response:
    return await _controller_call(request, await read_json_object(request))


async def alter_configs(request: web.Request) -> web.Response:
    return await _controller_call(request, await read_json_object(request))


# ---------------------------------------------------------------------------- produce


def _entries(index: int, produced: Produced, count: int) -> list[dict[str, Any]]:
    """One answer entry per record: its partition and offset (None with acks=0)."""
    if produced.first_offset is None:
        return [{"partition": index, "offset": None}] * count
    return [
        {"partition": index, "offset": offset}
        for offset in range(produced.first_offset, produced.first_offset + count)
    ]


JSON_PARSE = web.AppKey("json_parse", asyncio.Semaphore)
_INLINE_JSON_BYTES = 64 << 10  # smaller bodies are parsed on the loop (well under 10 ms)


async def _json_work(request: web.Request, body: bytes, work: Callable[[], T]) -> T:
    """Run `work` (JSON parsing and per-record encoding of `body`) where it cannot stall the
    event loop that heartbeats and leases ride on: inline for small bodies, else on a worker
    thread, one large body at a time (the others wait with only their bytes in memory).
    Bodies over `json.request.max.bytes` are refused before any parsing.
    """
    limit = request.app[BROKER].settings.limits.json_request_max_bytes
    if len(body) > limit:
        raise KraftliteError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"the JSON body is {len(body)} bytes; json.request.max.bytes is {limit} "
            f"(send larger batches as {BATCH_TYPE})",
        )
    if len(body) <= _INLINE_JSON_BYTES:
        return work()
    async with request.app[JSON_PARSE]:
        return await asyncio.to_thread(work)


async def produce_to_partition(request: web.Request) -> web.StreamResponse:
    """`_produce_to_partition`; its answer, failed or not, says what the records of a
    Kafka batch came to (X-Kraftlite-Produced-Bytes): a broker that relayed the request
    here charges its quota that (throttle.py)."""
    try:
        response = await _produce_to_partition(request)
    except KraftliteError as exc:
        if (charged := request.get(PRODUCED_BYTES)) is None:
            raise
        response = problem(exc)
        response.headers[headers.PRODUCED_BYTES] = str(charged)
        return response
    if (charged := request.get(PRODUCED_BYTES)) is not None:
        response.headers[headers.PRODUCED_BYTES] = str(charged)
    return response


async def _produce_to_partition(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    topic, index = request.match_info["topic"], _partition_index(request)
    service.refuse_internal(topic)
    acks, timeout_s = _acks(request), _timeout_s(request)
    body = await request.read()
    if not body:  # a bad request is that before it is anyone's to relay
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "a produce request carries records")
    await _auto_create(request, topic, body, index)
    target = await _leader_or_relay(request, topic, index, body)
    if isinstance(target, web.Response):
        return target
    now = service.broker.clock.now_ms()
    transactional_id = request.headers.get(TRANSACTIONAL_ID)
    if transactional_id is not None:
        # a transactional producer's batch (txn_handlers.py): binary only, as it carries
        # the producer's id, epoch and sequence
        if request.content_type not in {BATCH_TYPE, KAFKA_BATCHES_TYPE}:
            raise KraftliteError(
                ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                f"a transactional produce sends one {BATCH_TYPE} batch, or Kafka batches",
            )
        if acks is not Acks.ALL:  # as Kafka's producer insists: a commit covers acked writes
            raise KraftliteError(ErrorCode.INVALID_REQUEST, "a transactional produce is acks=all")
    sent_size = None
    if request.content_type == KAFKA_BATCHES_TYPE:  # stored as sent where it can be
        sent_size = len(body)
        budget = [REQUEST_DECOMPRESSED_MAX_BYTES]
        try:
            body = await service.from_kafka_batch(target, body, budget, transactional_id)
        finally:
            # the quota's charge (gate.py rule 3): what the records decompressed to, or
            # all the budget a batch that would not decompress spent; said in the answer,
            # failed or not, for a broker that relayed the request here (throttle.py)
            request[PRODUCED_BYTES] = max(sent_size, REQUEST_DECOMPRESSED_MAX_BYTES - budget[0])
    if transactional_id is not None:
        count = _record_count(body)
        produced = await service.produce_transactional(
            topic, index, body, acks, timeout_s, transactional_id, sent_size=sent_size
        )
        return json_response({"offsets": _entries(index, produced, count)})
    if request.content_type in {BATCH_TYPE, KAFKA_BATCHES_TYPE}:
        batch, count = body, _record_count(body)
    elif request.content_type in {"application/json", ""}:

        def encode() -> tuple[bytes, int]:
            parsed = json_records.parse_produce_body(_json_object(body))
            for i, (wanted, _) in enumerate(parsed):
                if wanted is not None and wanted != index:
                    raise KraftliteError(
                        ErrorCode.INVALID_REQUEST,
                        f"records[{i}].partition is {wanted}, but this is partition {index}",
                    )
            return batch_format.encode_records([r for _, r in parsed], now), len(parsed)

        batch, count = await _json_work(request, body, encode)
    else:
        raise KraftliteError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"Content-Type must be application/json, {BATCH_TYPE} or {KAFKA_BATCHES_TYPE}",
        )
    produced = await service.produce(
        topic,
        index,
        batch,
        acks,
        timeout_s,
        principal=caller(request).principal,
        sent_size=sent_size,
    )
    return json_response(
        {"offsets": _entries(index, produced, count)}, status=202 if acks is Acks.NONE else 200
    )


def _record_count(body: bytes) -> int:
    try:
        header = batch_format.read_header(body)
    except batch_format.CorruptBatchError as exc:
        raise KraftliteError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    if header.batch_length != len(body):
        raise KraftliteError(
            ErrorCode.CORRUPT_MESSAGE,
            f"the body is {len(body)} bytes but the batch says {header.batch_length}: "
            "send exactly one batch per request",
        )
    return header.record_count


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"body is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "body must be a JSON object")
    return parsed


def _spread(body: bytes, name: str, count: int, sticky: int, now: int) -> dict[int, _Group]:
    """The records of a JSON produce body, one batch per partition: the record's partition
    if given, else the service's choice (murmur2 of the key, else the request's sticky
    partition). Pure, so it can run off the loop.
    """
    parsed = json_records.parse_produce_body(_json_object(body))
    members: dict[int, list[int]] = {}
    for i, (wanted, record) in enumerate(parsed):
        if wanted is not None and wanted >= count:
            raise KraftliteError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"records[{i}].partition {wanted}: {name} has {count} partitions",
            )
        chosen = (
            BrokerService.partition_for(record.key, count, sticky) if wanted is None else wanted
        )
        members.setdefault(chosen, []).append(i)
    return {
        index: _Group(indexes, batch_format.encode_records([parsed[i][1] for i in indexes], now))
        for index, indexes in members.items()
    }


@dataclass(frozen=True, slots=True)
class _Group:
    indexes: list[int]  # positions of the partition's records in the request
    batch: bytes


async def produce_to_topic(request: web.Request) -> web.StreamResponse:
    """Records spread over partitions (`_spread`), one batch per partition, each produced on
    (or relayed to) its leader. The answer has an entry per record; a partition that
    failed is named once in `errors`, and its records' entries carry only its error code.
    When every partition failed, the answer is that error (its HTTP status), not a 200.
    """
    service = request.app[SERVICE]
    name = request.match_info["topic"]
    service.refuse_internal(name)
    acks, timeout_s = _acks(request), _timeout_s(request)
    if request.content_type not in {"application/json", ""}:
        raise KraftliteError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            "produce to a topic takes JSON; send binary batches to a partition",
        )
    if TRANSACTIONAL_ID in request.headers:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            "a transactional producer's batches go to their partitions "
            "(POST /v1/topics/{topic}/partitions/{partition}/records)",
        )
    body = await request.read()
    await _auto_create(request, name, body, None)
    count = service.partition_count(name)
    sticky, now = service.sticky_partition(count), service.broker.clock.now_ms()
    groups = await _json_work(request, body, lambda: _spread(body, name, count, sticky, now))
    answers: dict[int, list[dict[str, Any]] | KraftliteError] = {}

    async def produce_group(index: int, group: _Group) -> None:
        try:
            answers[index] = await _produce_somewhere(
                request, name, index, group, acks=acks, timeout_s=timeout_s
            )
        except KraftliteError as exc:
            answers[index] = exc

    await asyncio.gather(*(produce_group(p, g) for p, g in sorted(groups.items())))
    failed = {p: a for p, a in answers.items() if isinstance(a, KraftliteError)}
    errors = [
        {"partition": p, "error_code": e.code.name, "message": e.message}
        for p, e in sorted(failed.items())
    ]
    if len(failed) == len(groups):
        first = failed[min(failed)]
        raise KraftliteError(first.code, first.message, partitions=errors)
    results: list[dict[str, Any]] = [{}] * sum(len(g.indexes) for g in groups.values())
    for index, group in groups.items():
        answer = answers[index]
        if isinstance(answer, KraftliteError):
            entry = {"partition": index, "error_code": answer.code.name}
            for i in group.indexes:
                results[i] = entry
        else:
            for i, produced in zip(group.indexes, answer, strict=True):
                results[i] = produced
    response = {"offsets": results}
    if errors:
        response["errors"] = errors
    return json_response(response, status=202 if acks is Acks.NONE else 200)


async def _produce_somewhere(
    request: web.Request, topic: str, index: int, group: _Group, *, acks: Acks, timeout_s: float
) -> list[dict[str, Any]]:
    """One partition's batch of a JSON produce: appended here, or relayed to the leader as
    a binary produce to that partition (relay.py)."""
    service = request.app[SERVICE]
    count = len(group.indexes)
    try:
        service.leader(topic, index)  # or relayed: one hop, to the leader it names
    except KraftliteError as exc:
        if exc.code is not ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise
        path = f"/v1/topics/{topic}/partitions/{index}/records"
        query = request.rel_url.raw_query_string
        answer = await relay(
            service.broker,
            request,
            exc,
            group.batch,
            path_qs=f"{path}?{query}" if query else path,
            content_type=BATCH_TYPE,
            obey_no_forward=False,
        )
        return _relayed_offsets(answer, count)
    produced = await service.produce(
        topic, index, group.batch, acks, timeout_s, principal=caller(request).principal
    )
    return _entries(index, produced, count)


def _relayed_offsets(answer: web.Response, count: int) -> list[dict[str, Any]]:
    try:
        parsed = orjson.loads(answer.body)  # type: ignore[arg-type]
        if answer.status >= 400:
            raise error_from_problem(answer.status, parsed)
        offsets = list(parsed["offsets"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise KraftliteError(
            ErrorCode.UNKNOWN_SERVER_ERROR, "the leader sent a bad answer"
        ) from None
    if len(offsets) != count:
        raise KraftliteError(ErrorCode.UNKNOWN_SERVER_ERROR, "the leader sent a bad answer")
    return offsets


async def new_producer_id(request: web.Request) -> web.Response:
    """An idempotent producer's id (Kafka's InitProducerId): its binary batches carry it
    with a sequence number (format v2), and the leader writes each batch once. Only for a
    caller with IDEMPOTENT_WRITE on the cluster or WRITE on some topic (the gate's rule 6),
    and bound to it (security/producer_ids.py)."""
    who = caller(request)
    request.app[GATE].check_init_producer(who, edge="http", request=request.path)
    producer_id = request.app[SERVICE].new_producer_id(who.principal)
    return json_response({"producer_id": producer_id, "producer_epoch": 0}, status=201)


# ---------------------------------------------------------------------------- fetch


async def fetch(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    topic, index = request.match_info["topic"], _partition_index(request)
    brokers_only(request, topic)
    query = request.query
    offset = int_param(query.get("offset"), "offset", -1)
    if "offset" not in query:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "offset is required")
    max_records = int_param(query.get("max_records"), "max_records", 500)
    max_bytes = int_param(query.get("max_bytes"), "max_bytes", DEFAULT_MAX_BYTES)
    max_wait_ms = int_param(query.get("max_wait_ms"), "max_wait_ms", 0)
    if max_records < 1 or max_bytes < 1 or max_wait_ms < 0:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, "max_records and max_bytes must be >= 1, max_wait_ms >= 0"
        )
    # Kafka caps what a fetch asks for rather than refusing it: at most fetch.max.bytes (the
    # service), and (decoded one by one into JSON) at most MAX_JSON_RECORDS records
    max_records = min(max_records, MAX_JSON_RECORDS)
    binary = BATCH_TYPE in request.headers.get("Accept", "")
    if not binary:  # decoded record by record
        max_bytes = min(max_bytes, MAX_JSON_FETCH_BYTES)
    encoding = json_records.encoding_of(query.get("encoding", "utf8"), "encoding")
    committed = _isolation(request)
    try:
        fetched = await service.fetch(
            topic, index, offset, max_bytes, max_wait_ms, count_records=binary, committed=committed
        )
    except KraftliteError as exc:
        if exc.code is not ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise
        return await relay(service.broker, request, exc, b"")
    hw, log_start = fetched.high_watermark, fetched.log_start_offset
    stable = hw if fetched.last_stable_offset < 0 else fetched.last_stable_offset
    # past every batch read, markers and aborted transactions' included (issue 27)
    end = batch_format.next_offset_after(fetched.data) if fetched.data else offset
    views: list[memoryview] | None = None
    if fetched.aborted is not None:  # read_committed: the committed records only
        aborted = [(t.producer_id, t.first_offset) for t in fetched.aborted]
        views = batch_format.committed_views(fetched.data, aborted)
    data: bytes | memoryview = fetched.data if views is None else b"".join(views)
    # Kafka batches kept as sent (stored.py) are decompressed and converted, off the loop,
    # and no more of them than max_bytes takes once converted (one at least); the JSON
    # records are made batch by batch, as many as max_records takes
    # (a client that says it reads format 3, `batch_format_read`, gets them as they are)
    kept = stored_batch.kafka_bytes(data) > 0
    reads = headers.batch_format_read(request.headers.get("Accept", ""))
    as_stored = binary and reads >= batch_format.MAGIC_KAFKA
    if kept and binary and not as_stored:
        limit = min(max_bytes, service.broker.settings.limits.fetch_max_bytes)
        async with service.converting:
            data, cut = await asyncio.to_thread(stored_batch.as_columnar, data, limit)
        end = end if cut is None else cut
    if binary:
        return web.Response(
            body=data,
            headers={
                "Content-Type": headers.STORED_BATCHES_ACCEPT if as_stored else BATCH_TYPE,
                "X-Kraftlite-High-Watermark": str(hw),
                "X-Kraftlite-Log-Start-Offset": str(log_start),
                "X-Kraftlite-Last-Stable-Offset": str(stable),
                "X-Kraftlite-Next-Offset": str(end),
            },
        )
    listed = partial(_json_records, data, offset, end, max_records, encoding)
    if kept:
        async with service.converting:
            records, next_offset = await asyncio.to_thread(listed)
    else:
        records, next_offset = listed()
    metrics.record_fetch(topic, b"", len(records))
    return json_response(
        {
            "records": records,
            "next_offset": next_offset,
            "high_watermark": hw,
            "log_start_offset": log_start,
            "last_stable_offset": stable,
        }
    )


def _json_records(
    data: bytes | memoryview, offset: int, end: int, max_records: int, encoding: str
) -> tuple[list[dict[str, Any]], int]:
    """A fetch's stored batches as JSON records from `offset`, at most `max_records`, and
    the offset the next fetch goes on from (`end` unless cut short)."""
    records = []
    next_offset = end
    size = 0  # the records' bytes: at most about MAX_JSON_FETCH_BYTES, decompressed too
    for decoded in stored_batch.decode_stream(data):
        if batch_format.is_control(decoded.header):  # a transaction's marker: no record
            continue
        for record in decoded.records():
            if record.offset >= offset:
                records.append(json_records.record_to_json(record, encoding))
                size += len(record.value or b"") + len(record.key or b"")
            if len(records) >= max_records or size >= MAX_JSON_FETCH_BYTES:
                next_offset = record.offset + 1  # cut short: the next fetch goes on there
                break
        if len(records) >= max_records or size >= MAX_JSON_FETCH_BYTES:
            break
    return records, next_offset


async def latest_of_key(request: web.Request) -> web.StreamResponse:
    """`GET /v1/topics/{topic}/keys/{key}`: a compacted topic read as a table (service.py
    rule 8), from the leader of the key's partition (relayed there): the one Kafka's
    default partitioner picks (the Java client's murmur2), or `partition`. The key is the
    path segment as UTF-8, or base64 with `key_encoding=base64` (any bytes); 404
    RESOURCE_NOT_FOUND when the key has no value (never written, or deleted)."""
    service = request.app[SERVICE]
    topic = request.match_info["topic"]
    brokers_only(request, topic)
    query = request.query
    key_encoding = json_records.encoding_of(query.get("key_encoding", "utf8"), "key_encoding")
    encoding = json_records.encoding_of(query.get("encoding", "utf8"), "encoding")
    key = json_records.key_from_text(request.match_info["key"], key_encoding)
    index = None
    if "partition" in query:
        index = int_param(query.get("partition"), "partition", 0)
    try:
        found = await service.latest_of_key(topic, key, index)
    except KraftliteError as exc:
        if exc.code is not ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise
        return await relay(service.broker, request, exc, b"")
    if found is None:
        raise KraftliteError(
            ErrorCode.RESOURCE_NOT_FOUND, f"{topic} has no value for this key", topic=topic
        )
    partition, record = found
    return json_response({"partition": partition, **json_records.record_to_json(record, encoding)})


MAX_TABLE_ROWS = 1000  # rows of one table page (`limit`)
MAX_TABLE_PARTITIONS = 256  # partitions one page of a topic's table asks (more: by partition)
TABLE_FAN_OUT = 16  # partition pages of one topic page asked at once


def _table_bounds(request: web.Request) -> tuple[bytes | None, int, int, str]:
    """A table page's query: the cursor (`after`, as a page's `next` gave it), `limit`
    (1..MAX_TABLE_ROWS, default 100), `max_bytes` of keys and values (at least one row;
    at most MAX_JSON_FETCH_BYTES, as a JSON fetch) and the `encoding`."""
    query = request.query
    limit = int_param(query.get("limit"), "limit", 100)
    max_bytes = int_param(query.get("max_bytes"), "max_bytes", DEFAULT_MAX_BYTES)
    if not 1 <= limit <= MAX_TABLE_ROWS or max_bytes < 1:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, f"limit must be 1-{MAX_TABLE_ROWS}, max_bytes >= 1"
        )
    after = None
    if "after" in query:
        after = json_records.cursor_from_text(query["after"])
    encoding = json_records.encoding_of(query.get("encoding", "utf8"), "encoding")
    return after, limit, min(max_bytes, MAX_JSON_FETCH_BYTES), encoding


def _table_answer(
    rows: list[tuple[bytes, int, dict[str, Any]]], next_after: bytes | None
) -> web.Response:
    return json_response(
        {
            "rows": [{"partition": partition, **row} for _, partition, row in rows],
            "next": None if next_after is None else json_records.cursor_to_text(next_after),
        }
    )


async def partition_table(request: web.Request) -> web.StreamResponse:
    """`GET /v1/topics/{topic}/partitions/{partition}/table`: a page of one partition of a
    compacted topic read as a table (service.py rule 8), from its leader (relayed there)."""
    service = request.app[SERVICE]
    topic, index = request.match_info["topic"], _partition_index(request)
    brokers_only(request, topic)
    after, limit, max_bytes, encoding = _table_bounds(request)
    try:
        page = await service.table_page(topic, index, after, limit, max_bytes)
    except KraftliteError as exc:
        if exc.code is not ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise
        return await relay(service.broker, request, exc, b"")
    rows = [(k, index, json_records.record_to_json(r, encoding)) for k, r in page.rows]
    return _table_answer(rows, page.next_after)


async def topic_table(request: web.Request) -> web.StreamResponse:
    """`GET /v1/topics/{topic}/table`: a page of a compacted topic read as a table, its
    partitions merged in key order (storage/keys.py rule 2; a key written to several
    partitions is a row of each). Each partition's page is asked of its leader (relayed
    there, as this caller: the leader authorizes it); the page is the first `limit` rows
    of their union and every row after them with the same key, so that the cursor (the
    last row's key) loses none. `max_bytes` is shared: each partition's page gets its
    share (one row at least), so a page reads and holds about `max_bytes` in all; at most
    TABLE_FAN_OUT partition pages are asked at once, and the merge runs on a thread."""
    service = request.app[SERVICE]
    topic = request.match_info["topic"]
    brokers_only(request, topic)
    after, limit, max_bytes, encoding = _table_bounds(request)
    described = service.broker.replicas.topic(topic)
    if not is_compacted(described.configs):  # before asking any leader
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, f"{topic} is not compacted: it has no table"
        )
    count = len(described.partitions)
    if count > MAX_TABLE_PARTITIONS:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"{topic} has {count} partitions: read its table by partition "
            f"(/partitions/{{partition}}/table) above {MAX_TABLE_PARTITIONS}",
        )
    share = max(1, max_bytes // count)
    asking = asyncio.Semaphore(TABLE_FAN_OUT)

    async def page_of(index: int) -> _PartitionPage:
        async with asking:
            return await _partition_page(request, topic, index, after, limit, share)

    try:
        async with asyncio.TaskGroup() as pages_group:  # one failed: the others cancelled
            tasks = [pages_group.create_task(page_of(i)) for i in range(count)]
    except ExceptionGroup as failed:  # the first partition's error is the answer
        raise failed.exceptions[0] from None
    pages = [task.result() for task in tasks]
    shown, next_after = await asyncio.to_thread(_merge_pages, pages, limit, max_bytes, encoding)
    return _table_answer(shown, next_after)


# One partition's page: its rows (index key, record; or the JSON a leader relayed, decoded on
# the merge's thread) and the index key it ended at (None: the partition has no more)
_PartitionPage = tuple[list[tuple[bytes, batch_format.ConsumedRecord]] | web.Response, bytes | None]


def _merge_pages(
    pages: list[_PartitionPage], limit: int, max_bytes: int, encoding: str
) -> tuple[list[tuple[bytes, int, dict[str, Any]]], bytes | None]:
    """`topic_table`'s merge (on a thread): the rows to show and the cursor after them."""
    read = [
        (_relayed_page(rows) if isinstance(rows, web.Response) else (rows, end))
        for rows, end in pages
    ]
    # every row of a partition up to its page's end is known; past the lowest end, not all
    known_to = min((end for _, end in read if end is not None), default=None)
    merged = sorted(
        (key, index, record)
        for index, (rows, _) in enumerate(read)
        for key, record in rows
        if known_to is None or key <= known_to
    )
    shown: list[tuple[bytes, int, dict[str, Any]]] = []
    size = 0
    for key, index, record in merged:
        if shown and (len(shown) >= limit or size > max_bytes) and key != shown[-1][0]:
            break
        shown.append((key, index, json_records.record_to_json(record, encoding)))
        size += len(record.key or b"") + len(record.value or b"")
        size += sum(len(name) + len(value or b"") for name, value in record.headers)
    if not shown:  # only keys whose records went: go on past them
        return shown, known_to
    more = len(shown) < len(merged) or known_to is not None
    return shown, shown[-1][0] if more else None


async def _partition_page(  # noqa: PLR0917 - the page's bounds
    request: web.Request,
    topic: str,
    index: int,
    after: bytes | None,
    limit: int,
    max_bytes: int,
) -> _PartitionPage:
    """One partition's page for `topic_table`: this broker's own, or its leader's answer
    (relayed as the caller, in base64 so every key and value comes back as it is stored;
    read by `_merge_pages`)."""
    service = request.app[SERVICE]
    try:
        page = await service.table_page(topic, index, after, limit, max_bytes)
    except KraftliteError as exc:
        if exc.code is not ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise
        query = {"limit": str(limit), "max_bytes": str(max_bytes), "encoding": "base64"}
        if after is not None:
            query["after"] = json_records.cursor_to_text(after)
        path = urls.topic_path(topic, "partitions", str(index), "table")
        answer = await relay(
            service.broker,
            request,
            exc,
            b"",
            path_qs=f"{path}?{urlencode(query)}",
            obey_no_forward=False,
        )
        return answer, None
    return list(page.rows), page.next_after


def _relayed_page(
    answer: web.Response,
) -> tuple[list[tuple[bytes, batch_format.ConsumedRecord]], bytes | None]:
    try:
        parsed = orjson.loads(answer.body)  # type: ignore[arg-type]
        if answer.status >= 400:
            raise error_from_problem(answer.status, parsed)
        records = [json_records.record_from_json(row) for row in parsed["rows"]]
        end = None if parsed["next"] is None else json_records.cursor_from_text(parsed["next"])
    except (ValueError, KeyError, TypeError):
        raise KraftliteError(
            ErrorCode.UNKNOWN_SERVER_ERROR, "the leader sent a bad answer"
        ) from None
    return [(key_index.index_key(r.key or b""), r) for r in records], end


async def list_offsets(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    topic, index = request.match_info["topic"], _partition_index(request)
    brokers_only(request, topic)
    at = request.query.get("at", "latest")
    spec: str | int = at
    if at not in {"earliest", "latest"}:
        spec = int_param(at, "at (earliest, latest or unix milliseconds)", -1)
    try:
        offset, timestamp = await service.list_offset(
            topic, index, spec, committed=_isolation(request)
        )
    except KraftliteError as exc:
        if exc.code is not ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise
        return await relay(service.broker, request, exc, b"")
    if at in {"earliest", "latest"}:
        return json_response({"offset": offset})
    return json_response({"offset": offset, "timestamp": timestamp})


async def delete_records(request: web.Request) -> web.StreamResponse:
    """Kafka's DeleteRecords for one partition (`{"offset": N}`, -1: the high watermark):
    the partition's log start moves to the offset on every replica that could lead, and the
    answer is its low watermark then (broker/replica_state.py rule 6). Relayed to the
    leader."""
    service = request.app[SERVICE]
    topic, index = request.match_info["topic"], _partition_index(request)
    service.refuse_internal(topic)
    timeout_s = _timeout_s(request)
    offset = (await read_json_object(request)).get("offset")  # 7.0 is 7, as JSON Schema says
    if isinstance(offset, bool) or not isinstance(offset, int) or not -1 <= offset < 2**63:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, "offset must be an integer: an offset, or -1 for the HW"
        )
    body = await request.read()  # relayed as sent
    target = await _leader_or_relay(request, topic, index, body)
    if isinstance(target, web.Response):
        return target
    low = await service.delete_records(topic, index, offset, timeout_s)
    return json_response({"topic": topic, "partition": index, "low_watermark": low})


# ---------------------------------------------------------------------------- internal


async def replica_fetch(request: web.Request) -> web.Response:
    try:
        wanted = ReplicaFetchRequest.decode(await request.read())
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"bad replica fetch: {exc}") from None
    return web.Response(
        body=await _fetch_answer(request.app[BROKER], wanted),
        headers={"Content-Type": framing.CONTENT_TYPE},
    )


async def _fetch_answer(broker: Broker, wanted: ReplicaFetchRequest) -> bytes:
    """A follower's fetch served: the framed answer both routes send."""
    answer, segments = await broker.replicas.serve_replica_fetch(wanted)
    metrics.record_replica_fetch(any(segments))
    return framing.encode(answer.to_json(), segments)


async def txn_markers(request: web.Request) -> web.Response:
    """`POST /v1/internal/txn-markers` (nodes): a transaction coordinator's markers for the
    partitions this broker leads (Kafka's WriteTxnMarkers), a TxnMarkersRequest answered
    with a TxnMarkersResponse once each is written (service.py rule 9). A request naming a
    partition twice is refused whole, nothing written: each naming would append a marker of
    its own, and the answer (one result per partition) would show one."""
    try:
        wanted = TxnMarkersRequest.decode(await request.read())
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"bad markers request: {exc}") from None
    partitions = [TxnPartitionKey(p.topic, p.partition) for p in wanted.partitions]
    if len(set(partitions)) != len(partitions):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, "bad markers request: a partition is named twice"
        )
    results = await request.app[SERVICE].write_local_markers(
        wanted.producer_id,
        wanted.producer_epoch,
        wanted.commit,
        wanted.coordinator_epoch,
        partitions,
    )
    answer = TxnMarkersResponse(
        tuple(
            TxnMarkerResult(tp.topic, tp.partition, 0 if error is None else int(error))
            for tp, error in results.items()
        )
    )
    return web.Response(body=answer.encode(), content_type="application/json")


async def txn_verify(request: web.Request) -> web.Response:
    """`POST /v1/internal/txn-verify` (nodes): whether a partition is in a producer's
    ongoing transaction, asked of the transactional id's coordinator by the partition's
    leader (KIP-890; transactions/coordinator.py rule 6)."""
    try:
        wanted = TxnVerifyRequest.decode(await request.read())
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"bad verify request: {exc}") from None
    error = request.app[SERVICE].transactions.verify(
        wanted.transactional_id,
        wanted.producer_id,
        wanted.producer_epoch,
        TxnPartitionKey(wanted.topic, wanted.partition),
    )
    answer = TxnVerifyResponse(0 if error is None else int(error))
    return web.Response(body=answer.encode(), content_type="application/json")


REPLICA_STREAMS: web.AppKey[set[web.WebSocketResponse]] = web.AppKey("replica_streams")
STREAM_IDLE_S = web.AppKey("stream_idle_s", float)  # connections.max.idle.ms
METRICS = web.AppKey("metrics", metrics.BrokerCollectors)


async def replica_stream(request: web.Request) -> web.WebSocketResponse:
    """A follower's fetch session over one WebSocket (replication.md, "The replication
    stream"): the handshake is a signed GET (internal, so nodes only, checked by the
    middlewares); then each binary message is a ReplicaFetchRequest as JSON, answered by the
    framed ReplicaFetchResponse, the same bytes as `replica_fetch`'s body, or by a text
    message with the problem JSON of a refused one (also while this broker's metadata is
    behind its registration, as `caught_up` answers a request). One request at a time; a
    malformed one closes the stream, and so does a follower silent for
    `connections.max.idle.ms` or one that stops reading.
    """
    broker = request.app[BROKER]
    ws = web.WebSocketResponse(
        max_msg_size=broker.settings.limits.socket_request_max_bytes,
        compress=False,
        timeout=STREAM_CLOSE_S,  # for the follower's close reply
    )
    await ws.prepare(request)
    streams = request.app[REPLICA_STREAMS]
    streams.add(ws)
    try:
        while True:
            message = await ws.receive(timeout=request.app[STREAM_IDLE_S])
            if message.type is not aiohttp.WSMsgType.BINARY:
                break  # closed, or not a request: the follower starts over
            try:
                wanted = ReplicaFetchRequest.decode(message.data)
            except MessageError:
                await ws.close(
                    code=aiohttp.WSCloseCode.UNSUPPORTED_DATA, message=b"bad fetch", drain=False
                )
                break
            try:
                request.app[GATE].check_ready()
                answer = await _fetch_answer(broker, wanted)
            except KraftliteError as exc:
                await ws.send_str(problem_body(exc).decode())
                continue
            await ws.send_bytes(answer)
    except (TimeoutError, ConnectionResetError):
        pass  # a follower that stopped asking, or went away: its next fetch reconnects
    finally:
        streams.discard(ws)
        await _close_stream(ws, aiohttp.WSCloseCode.OK, b"")
    return ws


async def _close_stream(ws: web.WebSocketResponse, code: int, why: bytes) -> None:
    """Close without waiting on a follower that does not read (a paused process, a hung
    link): at most STREAM_CLOSE_S for its reply, never for its socket to drain."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ws.close(code=code, message=why, drain=False), STREAM_CLOSE_S)


async def _close_replica_streams(app: web.Application) -> None:
    """On shutdown: followers reconnect elsewhere rather than wait for their timeout."""
    streams: set[web.WebSocketResponse] = app[REPLICA_STREAMS]
    await asyncio.gather(
        *(_close_stream(ws, aiohttp.WSCloseCode.GOING_AWAY, b"broker stopping") for ws in streams)
    )


# ---------------------------------------------------------------------------- the app


@web.middleware
async def caught_up(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The gate's rule 4 (security/gate.py) for API calls."""
    if request.path.startswith("/v1/") and request.path != "/v1/openapi.json":
        request.app[GATE].check_ready()
    return await handler(request)


@web.middleware
async def metadata_at_least(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A request forwarded by a broker that knows metadata up to version V is handled once
    this broker knows V too (bounded), so a topic created a moment ago is not unknown here.
    """
    version = names.decimal(request.headers.get(METADATA_VERSION, ""))
    if version is not None:
        await request.app[BROKER].wait_for_metadata(version, timeout_s=5.0)
    return await handler(request)


def make_broker_app(
    service: BrokerService,
    auth: ClusterAuth,
    gate: Gate,
    limits: ListenerLimits | None = None,
) -> web.Application:
    """The HTTP edge of a broker over the node's service and gate (built in node/broker.py)."""
    broker = service.broker
    app = web.Application(
        middlewares=boundary_middlewares(
            before_authorization=(caught_up,), after=(metadata_at_least,)
        ),
        client_max_size=broker.settings.limits.socket_request_max_bytes,
    )
    app[BROKER] = broker
    app[CLUSTER_AUTH] = auth
    app[AUTH] = gate.authenticator
    app[GATE] = gate
    app[READ_TIMEOUT_MS] = (limits or ListenerLimits()).read_timeout_ms
    app[JSON_PARSE] = asyncio.Semaphore(1)
    app[SERVICE] = service
    app[REPLICA_STREAMS] = set()
    app[METRICS] = metrics.broker_collectors()
    app.cleanup_ctx.append(observability.watch_event_loop)
    app[STREAM_IDLE_S] = (limits or ListenerLimits()).idle_ms / 1000
    app.on_shutdown.append(_close_replica_streams)
    r = app.router
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", metrics_endpoint)
    r.add_post("/v1/node/restart", restart_node)
    r.add_get("/v1/openapi.json", openapi)
    r.add_get("/v1/cluster", cluster)
    r.add_get("/v1/topics", list_topics)
    r.add_post("/v1/topics", create_topic)
    r.add_get("/v1/topics/{topic}", describe_topic)
    r.add_delete("/v1/topics/{topic}", delete_topic)
    r.add_post("/v1/topics/{topic}/partitions", create_partitions)
    r.add_put("/v1/topics/{topic}/configs", alter_configs)
    r.add_post("/v1/topics/{topic}/records", produce_to_topic)
    r.add_post("/v1/topics/{topic}/partitions/{partition}/records", produce_to_partition)
    r.add_get("/v1/topics/{topic}/partitions/{partition}/records", fetch)
    r.add_get("/v1/topics/{topic}/partitions/{partition}/offsets", list_offsets)
    r.add_get("/v1/topics/{topic}/keys/{key}", latest_of_key)
    r.add_get("/v1/topics/{topic}/table", topic_table)
    r.add_get("/v1/topics/{topic}/partitions/{partition}/table", partition_table)
    r.add_post("/v1/topics/{topic}/partitions/{partition}/delete-records", delete_records)
    r.add_get("/v1/groups", groups.list_groups)
    r.add_get("/v1/groups/{group}", groups.describe)
    r.add_post("/v1/groups/{group}/members", groups.join)
    r.add_post("/v1/groups/{group}/members/{member_id}/heartbeat", groups.heartbeat)
    r.add_delete("/v1/groups/{group}/members/{member_id}", groups.leave)
    r.add_post("/v1/groups/{group}/offsets", groups.commit)
    r.add_get("/v1/groups/{group}/offsets", groups.fetch_offsets)
    r.add_delete("/v1/groups/{group}/offsets", groups.delete_offsets)
    r.add_get("/v1/transactions/{transactional_id}", transactions.describe)
    r.add_post("/v1/transactions/{transactional_id}/producer", transactions.init_producer)
    r.add_post("/v1/transactions/{transactional_id}/partitions", transactions.add_partitions)
    r.add_post("/v1/transactions/{transactional_id}/groups", transactions.add_offsets)
    r.add_post("/v1/transactions/{transactional_id}/end", transactions.end)
    r.add_post("/v1/tokens", issue_token)
    r.add_post("/v1/producer-ids", new_producer_id)
    r.add_get("/v1/users", admin_passthrough)  # users, ACLs, quotas: the controllers' metadata
    r.add_post("/v1/users", admin_passthrough)
    r.add_delete("/v1/users/{name}", admin_passthrough)
    r.add_get("/v1/acls", admin_passthrough)
    r.add_post("/v1/acls", admin_passthrough)
    r.add_delete("/v1/acls", admin_passthrough)
    r.add_get("/v1/quotas", admin_passthrough)
    r.add_post("/v1/quotas", admin_passthrough)
    # the elastic cluster: the controllers' decisions
    r.add_patch("/v1/topics/{topic}", admin_passthrough)
    r.add_get("/v1/brokers", admin_passthrough)
    r.add_get(r"/v1/brokers/{broker_id}", admin_passthrough)
    r.add_post(r"/v1/brokers/{broker_id}/drain", admin_passthrough)
    r.add_delete(r"/v1/brokers/{broker_id}", admin_passthrough)
    r.add_put(r"/v1/brokers/{broker_id}/configs", admin_passthrough)
    r.add_get(r"/v1/brokers/{broker_id}/configs", admin_passthrough)
    r.add_delete(r"/v1/brokers/{broker_id}/drain", admin_passthrough)
    r.add_post("/v1/cluster/rebalance", admin_passthrough)
    r.add_post("/v1/elections", admin_passthrough)
    r.add_get("/v1/reassignments", admin_passthrough)
    r.add_get("/v1/quorum", admin_passthrough)
    r.add_post("/v1/quorum/voters", admin_passthrough)
    r.add_delete(r"/v1/quorum/voters/{node_id}", admin_passthrough)
    r.add_post("/v1/reassignments", admin_passthrough)
    r.add_post("/v1/internal/replica-fetch", replica_fetch)
    r.add_get("/v1/internal/replica-stream", replica_stream)
    r.add_get("/v1/internal/offsets", internal_offsets)
    r.add_get("/v1/internal/groups", internal_groups)
    r.add_post("/v1/internal/txn-markers", txn_markers)
    r.add_post("/v1/internal/txn-verify", txn_verify)
    app[console_api.RATES] = console_api.new_rate_window()
    r.add_get("/v1/cluster/stats", console_api.cluster_stats)
    r.add_get("/v1/topics/{topic}/partitions", console_api.topic_partitions)
    r.add_get("/v1/internal/stats", console_api.internal_stats)
    add_console(app, "broker")
    return app


__all__ = ["BROKER", "PROBLEM_JSON", "SERVICE", "make_broker_app"]
