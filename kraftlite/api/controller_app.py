"""The controllers' HTTP API: quorum status, cluster and topic admin, broker-facing calls.

Handlers parse, make one call on the QuorumController, and serialise; the decisions live in
kraftlite.controller. A call that needs the active controller and reaches another one is
forwarded there (one hop), or answered 503 NOT_CONTROLLER with the leader's URL when the
caller sent `X-Kraftlite-No-Forward: 1` or the leader is unknown.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from kraftlite import observability
from kraftlite.api.auth import (
    AUTH,
    GATE,
    audit_change,
    brokers_only,
    issue_token,
)
from kraftlite.api.errors import (
    int_param,
    json_response,
    read_json_object,
)
from kraftlite.api.internal_auth import (
    CLUSTER_AUTH,
    ClusterAuth,
    caller,
    forwarded_for,
)
from kraftlite.api.listener import READ_TIMEOUT_MS
from kraftlite.api.permissions import boundary_middlewares
from kraftlite.api.restart import BOOT_ID, restart_node
from kraftlite.api.topic_pages import (
    client_visible,
    partitions_answer,
    stats_topics,
    topics_answer,
)
from kraftlite.config import ListenerLimits
from kraftlite.console import add_console
from kraftlite.controller import access, decisions, elastic, reassignments
from kraftlite.controller import metrics as controller_metrics
from kraftlite.controller.metadata_server import MetadataServer
from kraftlite.controller.metrics import controller_registry
from kraftlite.controller.quorum_controller import QuorumController
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata import rebalance
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.records import UserScramCredentialRecord
from kraftlite.metadata.topics import INTERNAL_TOPICS
from kraftlite.metadata.views import broker_view, partition_health, topic_view
from kraftlite.protocol import admin, admin_bodies
from kraftlite.protocol.headers import FORWARDED, METADATA_VERSION, NO_FORWARD
from kraftlite.protocol.internal import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    BrokerUnreachableReport,
    MessageError,
    MetadataFetchRequest,
)
from kraftlite.protocol.urls import node_url_problem, port_address_problem
from kraftlite.security import acls, scram
from kraftlite.security.gate import Gate

CONTROLLER = web.AppKey("controller", QuorumController)
METADATA = web.AppKey("metadata", MetadataServer)
HTTP = web.AppKey("http", aiohttp.ClientSession)
CONNECTOR: web.AppKey[Callable[[], aiohttp.BaseConnector]] = web.AppKey("connector")
B = TypeVar("B")


async def _forward_or_refuse(request: web.Request) -> web.StreamResponse | None:
    """None when this controller is active; else the active controller's answer."""
    controller = request.app[CONTROLLER]
    if controller.is_active():
        return None
    leader_url = controller.leader_url()
    if leader_url is None or request.headers.get(NO_FORWARD) or request.headers.get(FORWARDED):
        raise controller.not_controller()
    body = await request.read()
    headers = {k: v for k, v in request.headers.items() if k.lower() in {"content-type", "accept"}}
    headers[FORWARDED] = "1"
    headers.update(forwarded_for(request))  # still the client's request, not ours
    try:
        async with request.app[HTTP].request(
            request.method,
            leader_url + request.path_qs,
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=controller.settings.request_timeout_s + 5),
        ) as upstream:
            relayed = {
                k: v
                for k, v in upstream.headers.items()
                if k.lower() == "content-type" or k.lower().startswith("x-kraftlite-")
            }
            return web.Response(status=upstream.status, body=await upstream.read(), headers=relayed)
    except TimeoutError:  # it may have been applied: the caller must not assume either way
        raise KraftliteError(
            ErrorCode.REQUEST_TIMED_OUT, "the active controller did not answer in time"
        ) from None
    except aiohttp.ClientError:
        raise controller.not_controller() from None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def needs_active_controller(handler: Handler) -> Handler:
    """Run `handler` on the active controller: here, or forwarded there (one hop)."""

    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        forwarded = await _forward_or_refuse(request)
        return forwarded if forwarded is not None else await handler(request)

    return wrapper


def _topic_or_404(controller: QuorumController, name: str) -> web.Response:
    image = controller.image
    topic = image.topic(name)
    if topic is None:
        raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    response = json_response(topic_view(topic))
    response.headers[METADATA_VERSION] = str(image.version)
    return response


# ---------------------------------------------------------------------------- operations


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    controller = request.app[CONTROLLER]
    status = controller.log.status()
    ready = status["leader"] is not None and controller.image.version > 0
    return json_response(
        {"ready": ready, "leader_id": controller.leader_id(), "boot_id": BOOT_ID},
        status=200 if ready else 503,
    )


async def metrics_endpoint(request: web.Request) -> web.Response:
    registry, collector = request.app[METRICS]
    await collector.refresh()
    body, content_type = observability.render(controller_metrics.REGISTRY, registry)
    return web.Response(body=body, headers={"Content-Type": content_type})


METRICS: web.AppKey[tuple[CollectorRegistry, controller_metrics.ControllerCollector]] = web.AppKey(
    "metrics"
)


async def quorum(request: web.Request) -> web.StreamResponse:
    """This controller's view of the quorum; with `?leader=true`, the active controller's
    (forwarded there, one hop), which alone knows each voter's lag and, as `observers`,
    each broker's metadata offset (Kafka's DescribeQuorum asks for that one)."""
    controller = request.app[CONTROLLER]
    leader_view = request.query.get("leader", "false")
    if leader_view not in {"true", "false"}:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "leader is true or false")
    if leader_view == "true":
        forwarded = await _forward_or_refuse(request)
        if forwarded is not None:
            return forwarded
    status = controller.log.status()
    leader_id = controller.leader_id()
    voters = []
    leading = status["state"] == "leader"
    for address, node_id in sorted(controller.voters().items(), key=lambda v: v[1]):
        lag: int | None = None  # committed entries the voter lacks: the leader alone knows
        if node_id == controller.settings.node_id:
            state = status["state"]
            lag = 0 if leading else None
        else:
            state = (
                "leader"
                if node_id == leader_id
                else ("follower" if status["connected"].get(address) else "unreachable")
            )
            matched = status["match_index"].get(address)
            if leading and matched is not None:
                lag = max(status["commit_index"] - matched, 0)
        voters.append(
            {
                "id": node_id,
                "address": address,
                "state": state,
                "url": controller.image.controllers.get(node_id),
                "lag": lag,
            }
        )
    return json_response(
        {
            "leader_id": leader_id,
            "term": status["term"],
            "commit_index": status["commit_index"],
            "metadata_offset": controller.image.version,
            "metadata_log": {  # what brokers following the log by offset are served from
                "first_retained_version": controller.log.first_retained_version,
                "batches_served": request.app[METADATA].batches_served,
                "snapshots_served": request.app[METADATA].snapshots_served,
            },
            "voters": voters,
            **({"observers": _observers(controller)} if controller.is_active() else {}),
        }
    )


def _observers(controller: QuorumController) -> list[dict[str, int]]:
    """The registered brokers' metadata offsets, as their last heartbeats to this (active)
    controller reported them, and how many metadata batches each lacks."""
    image = controller.image
    return [
        {"id": broker_id, "metadata_offset": version, "lag": max(image.version - version, 0)}
        for broker_id, version in sorted(controller.broker_metadata_versions.items())
        if broker_id in image.brokers
    ]


@needs_active_controller
async def add_voter(request: web.Request) -> web.StreamResponse:
    """Add a voter to the quorum (KIP-853's AddRaftVoter); start it with `--join`."""
    wanted = _admin_body(admin_bodies.AddVoterRequest, await read_json_object(request))
    node_id, raft, url = wanted.id, wanted.raft, wanted.url
    if port_address_problem(raft) is not None:  # as a configured address is checked
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "raft must be HOST:PORT")
    if node_url_problem(url) is not None:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "url must be http(s)://HOST:PORT")
    await request.app[CONTROLLER].add_voter(
        node_id, raft, url, verify=lambda: _check_new_voter(request, node_id, raft, url)
    )
    audit_change(request, "voter_added", node_id=node_id, raft=raft)
    return await quorum(request)


async def _check_new_voter(request: web.Request, node_id: int, raft: str, url: str) -> None:
    """The new voter runs, at `url`, as node `node_id` on Raft address `raft` (a typo would
    otherwise add a voter that never comes, and a quorum one failure from stalling)."""
    refusal = KraftliteError(
        ErrorCode.VOTER_NOT_FOUND,
        f"no controller answers at {url} as node {node_id} with Raft address {raft}: start it "
        "with --join first",
    )
    try:
        async with request.app[HTTP].get(
            url + "/v1/quorum", timeout=aiohttp.ClientTimeout(total=3)
        ) as answer:
            body = await answer.json() if answer.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        raise refusal from None
    voters = body.get("voters") if isinstance(body, dict) else None
    if not isinstance(voters, list) or {"id": node_id, "address": raft} not in [
        {"id": v.get("id"), "address": v.get("address")} for v in voters if isinstance(v, dict)
    ]:
        raise refusal


@needs_active_controller
async def remove_voter(request: web.Request) -> web.StreamResponse:
    node_id = int_param(request.match_info["node_id"], "node_id", 0)
    await request.app[CONTROLLER].remove_voter(node_id)
    audit_change(request, "voter_removed", node_id=node_id)
    return web.Response(status=204)


# ---------------------------------------------------------------------------- cluster, topics


async def cluster(request: web.Request) -> web.Response:
    controller = request.app[CONTROLLER]
    image = controller.image
    return json_response(
        {
            "cluster_id": controller.settings.cluster_id,
            "controller": {
                "leader_id": controller.leader_id(),
                "term": controller.log.status()["term"],
            },
            "brokers": [broker_view(image.brokers[b]) for b in sorted(image.brokers)],
        }
    )


async def list_topics(request: web.Request) -> web.Response:
    """Every topic the caller may DESCRIBE (internal ones for nodes only); paged with
    `limit`, `after`, `contains` (api/topic_pages.py)."""
    image = request.app[CONTROLLER].image
    visible = client_visible(request, internal_for_nodes=True)
    return json_response(topics_answer(request, image.topics.values(), visible))


async def cluster_stats(request: web.Request) -> web.Response:
    """`GET /v1/cluster/stats` on a controller: the partition counts its metadata gives;
    brokers' own figures (sizes, rates) only brokers have (controllers never call them)."""
    stats_topics(request)  # bad input is refused as on a broker
    image = request.app[CONTROLLER].image
    return json_response({**partition_health(image), "rates": None, "brokers": [], "topics": {}})


async def describe_topic(request: web.Request) -> web.Response:
    brokers_only(request, request.match_info["topic"])
    return _topic_or_404(request.app[CONTROLLER], request.match_info["topic"])


async def topic_partitions(request: web.Request) -> web.Response:
    """`GET /v1/topics/{topic}/partitions` on a controller: a page of the partitions as its
    metadata has them (no log offsets: only brokers know those)."""
    name = request.match_info["topic"]
    brokers_only(request, name)
    topic = request.app[CONTROLLER].image.topic(name)
    if topic is None:
        raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    return json_response(partitions_answer(request, topic))


def _admin_body(kind: type[B], body: Mapping[str, Any]) -> B:
    """An admin body as its type (protocol/admin.py rule 1, admin_bodies.py), or
    INVALID_REQUEST; what its values mean is the decisions' to check."""
    try:
        return admin.decode(kind, body)
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"bad body: {exc}") from None


async def _create_topics(request: web.Request, wanted: admin.CreateTopicsRequest) -> web.Response:
    """The batch form, `{"topics": [...]}`: one decision, one batch, an outcome per topic."""
    controller = request.app[CONTROLLER]
    outcomes = await controller.submit(
        lambda image: decisions.create_topics(image, wanted.topics, rng=controller.rng)
    )
    image = controller.image
    answers: list[dict[str, object]] = []
    for outcome in outcomes:
        if outcome.would_be is not None:
            answers.append(outcome.would_be)
            continue
        topic = image.topic(outcome.name) if outcome.error is None else None
        if topic is not None:
            answers.append(topic_view(topic))
        else:
            error = outcome.error or KraftliteError(ErrorCode.UNKNOWN_SERVER_ERROR)
            answers.append(
                {"name": outcome.name, "error_code": error.code.name, "message": error.message}
            )
    response = json_response({"topics": answers})
    response.headers[METADATA_VERSION] = str(image.version)
    return response


@needs_active_controller
async def create_topic(request: web.Request) -> web.StreamResponse:
    controller = request.app[CONTROLLER]
    body = await read_json_object(request)
    if "topics" in body:
        return await _create_topics(request, _admin_body(admin.CreateTopicsRequest, body))
    wanted = _admin_body(admin.CreateTopicRequest, body)

    def decide(image: MetadataImage) -> decisions.ControllerResult[str]:
        return decisions.create_topic(
            image,
            wanted.name,
            wanted.partitions,
            wanted.replication_factor,
            wanted.configs,
            rng=controller.rng,
            # the brokers' own topics (the group coordinator's); no other "__" name, and
            # only when a broker asks for itself: a client's request passed on is the client's
            internal=wanted.internal
            and wanted.name in INTERNAL_TOPICS
            and caller(request).is_cluster,
            replica_assignment=wanted.replica_assignment,
        )

    if wanted.validate_only:  # the decision is pure: run it on the image, commit nothing
        return json_response(decisions.would_be_topic(wanted.name, decide(controller.image)))
    await controller.submit(decide)
    response = _topic_or_404(controller, wanted.name)
    response.set_status(201)
    return response


@needs_active_controller
async def delete_topic(request: web.Request) -> web.StreamResponse:
    wanted = admin.DeleteTopicRequest(request.match_info["topic"])
    brokers_only(request, wanted.topic)
    controller = request.app[CONTROLLER]
    await controller.submit(lambda image: decisions.delete_topic(image, wanted.topic))
    return web.Response(status=204, headers={METADATA_VERSION: str(controller.image.version)})


@needs_active_controller
async def create_partitions(request: web.Request) -> web.StreamResponse:
    brokers_only(request, request.match_info["topic"])
    controller = request.app[CONTROLLER]
    name = request.match_info["topic"]
    wanted = _admin_body(admin.CreatePartitionsBody, await read_json_object(request))

    def decide(image: MetadataImage) -> decisions.ControllerResult[int]:
        return decisions.create_partitions(
            image, name, wanted.count, rng=controller.rng, assignments=wanted.assignments
        )

    if wanted.validate_only:  # the decision is pure: run it on the image, commit nothing
        decide(controller.image)
    else:
        await controller.submit(decide)
    return _topic_or_404(controller, name)


@needs_active_controller
async def alter_configs(request: web.Request) -> web.StreamResponse:
    brokers_only(request, request.match_info["topic"])
    controller = request.app[CONTROLLER]
    name = request.match_info["topic"]
    wanted = _admin_body(admin.AlterConfigsBody, await read_json_object(request))
    await controller.submit(
        lambda image: decisions.alter_topic_configs(image, name, wanted.configs)
    )
    return _topic_or_404(controller, name)


# ---------------------------------------------------------------------------- elastic cluster


# A request moving more partitions than this decides in a thread (the event loop keeps
# answering heartbeats meanwhile).
OFFLOAD_PARTITIONS = 1_000


@needs_active_controller
async def alter_reassignments(request: web.Request) -> web.StreamResponse:
    """Start, replace or cancel partition reassignments (controller/reassignments.py)."""
    controller = request.app[CONTROLLER]
    wanted = reassignments.parse_reassignments(await read_json_object(request))
    outcomes = await controller.submit(
        lambda image: reassignments.alter_reassignments(image, wanted),
        offload=len(wanted) > OFFLOAD_PARTITIONS,
    )
    answers: list[dict[str, object]] = []
    for outcome in outcomes:
        if outcome.registration is not None:
            answers.append(
                reassignments.reassignment_view(
                    outcome.topic, outcome.partition, outcome.registration
                )
            )
        else:
            error = outcome.error or KraftliteError(ErrorCode.UNKNOWN_SERVER_ERROR)
            answers.append(
                {
                    "topic": outcome.topic,
                    "partition": outcome.partition,
                    "error_code": error.code.name,
                    "message": error.message,
                }
            )
    audit_change(request, "reassignments_altered", partitions=len(wanted))
    response = json_response({"reassignments": answers}, status=202)
    response.headers[METADATA_VERSION] = str(controller.image.version)
    return response


@needs_active_controller  # reads what the active controller decided
async def list_reassignments(request: web.Request) -> web.StreamResponse:
    image = request.app[CONTROLLER].image
    body = await asyncio.to_thread(reassignments.ongoing_reassignments, image)
    return json_response({"reassignments": body})


def _broker_id(request: web.Request) -> int:
    broker_id = int_param(request.match_info["broker_id"], "broker_id", 0)
    if broker_id < 0:
        raise KraftliteError(
            ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered"
        )
    return broker_id


@needs_active_controller  # reads what the active controller decided
async def list_brokers(request: web.Request) -> web.StreamResponse:
    image = request.app[CONTROLLER].image
    return json_response({"brokers": await asyncio.to_thread(elastic.broker_views, image)})


@needs_active_controller  # reads what the active controller decided
async def describe_broker(request: web.Request) -> web.StreamResponse:
    image = request.app[CONTROLLER].image
    broker_id = _broker_id(request)
    return json_response(await asyncio.to_thread(elastic.broker_view, image, broker_id))


def _moves_response(moves: list[rebalance.Move], version: int, status: int) -> web.Response:
    response = json_response({"moves": [elastic.move_view(m) for m in moves]}, status=status)
    response.headers[METADATA_VERSION] = str(version)
    return response


@needs_active_controller
async def drain_broker(request: web.Request) -> web.StreamResponse:
    controller = request.app[CONTROLLER]
    broker_id = _broker_id(request)
    moves = await controller.submit(
        lambda image: elastic.drain_broker(image, broker_id), offload=True
    )
    controller.elect_after_moves = True
    audit_change(request, "broker_drain_started", broker_id=broker_id, moves=len(moves))
    return _moves_response(moves, controller.image.version, 202)


@needs_active_controller
async def alter_broker_configs(request: web.Request) -> web.StreamResponse:
    controller = request.app[CONTROLLER]
    broker_id = _broker_id(request)
    wanted = _admin_body(admin.AlterBrokerConfigsBody, await read_json_object(request))
    configs = wanted.configs
    await controller.submit(lambda image: elastic.alter_broker_configs(image, broker_id, configs))
    audit_change(request, "broker_configs_altered", broker_id=broker_id, configs=configs)
    response = json_response(elastic.broker_configs_view(controller.image, broker_id))
    response.headers[METADATA_VERSION] = str(controller.image.version)
    return response


@needs_active_controller
async def describe_broker_configs(request: web.Request) -> web.StreamResponse:
    image = request.app[CONTROLLER].image
    return json_response(elastic.broker_configs_view(image, _broker_id(request)))


@needs_active_controller
async def stop_draining(request: web.Request) -> web.StreamResponse:
    controller = request.app[CONTROLLER]
    broker_id = _broker_id(request)
    await controller.submit(lambda image: elastic.stop_draining(image, broker_id))
    audit_change(request, "broker_drain_stopped", broker_id=broker_id)
    return web.Response(status=204, headers={METADATA_VERSION: str(controller.image.version)})


@needs_active_controller
async def remove_broker(request: web.Request) -> web.StreamResponse:
    controller = request.app[CONTROLLER]
    broker_id = _broker_id(request)
    force = request.query.get("force", "false")
    if force not in {"true", "false"}:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "force is true or false")
    moves = await controller.submit(
        lambda image: elastic.remove_broker(image, broker_id, force=force == "true"),
        offload=True,
    )
    audit_change(request, "broker_removed", broker_id=broker_id, replaced=len(moves))
    return web.Response(status=204, headers={METADATA_VERSION: str(controller.image.version)})


@needs_active_controller
async def rebalance_cluster(request: web.Request) -> web.StreamResponse:
    controller = request.app[CONTROLLER]
    body = await read_json_object(request) if request.body_exists else {}
    dry_run = _admin_body(admin_bodies.RebalanceRequest, body).dry_run
    moves = await controller.submit(
        lambda image: elastic.rebalance_cluster(image, dry_run=dry_run), offload=True
    )
    if not dry_run:
        controller.elect_after_moves = True
        audit_change(request, "cluster_rebalanced", moves=len(moves))
    return _moves_response(moves, controller.image.version, 200 if dry_run else 202)


@needs_active_controller
async def alter_topic(request: web.Request) -> web.StreamResponse:
    """PATCH /v1/topics/{topic}: its replication factor, by reassignment."""
    controller = request.app[CONTROLLER]
    name = request.match_info["topic"]
    wanted = _admin_body(admin_bodies.AlterTopicRequest, await read_json_object(request))
    factor = wanted.replication_factor
    moves = await controller.submit(
        lambda image: elastic.alter_replication_factor(image, name, factor), offload=True
    )
    controller.elect_after_moves = True
    audit_change(request, "replication_factor_altered", topic=name, moves=len(moves))
    return _moves_response(moves, controller.image.version, 202)


@needs_active_controller
async def elect_leaders(request: web.Request) -> web.StreamResponse:
    controller = request.app[CONTROLLER]
    wanted = _admin_body(admin_bodies.ElectionsRequest, await read_json_object(request))
    elect = elastic.elect_preferred if wanted.type == "preferred" else elastic.elect_unclean
    elections = await controller.submit(lambda image: elect(image, wanted.partitions), offload=True)
    answers = [
        {"topic": e.topic, "partition": e.partition, "leader": e.leader}
        | ({} if e.error is None else {"error_code": e.error.code.name, "message": e.error.message})
        for e in elections
    ]
    audit_change(request, f"{wanted.type}_leaders_elected", partitions=len(answers))
    response = json_response({"elections": answers})
    response.headers[METADATA_VERSION] = str(controller.image.version)
    return response


# ---------------------------------------------------------------------------- users, ACLs, quotas


@needs_active_controller
async def create_user(request: web.Request) -> web.StreamResponse:
    """Create a user or change its password: the credential is computed here (the password
    goes no further), or was computed by the client (salt and keys, never a password: the
    Kafka edge's AlterUserScramCredentials), and is committed as a record. The answer names
    the metadata version that holds it, for the broker's read-your-writes."""
    controller = request.app[CONTROLLER]
    wanted = _admin_body(admin_bodies.UserRequest, await read_json_object(request))
    name, mechanism = access.validate_user_name(wanted.name), wanted.mechanism
    if isinstance(wanted.password, str):
        credential = await asyncio.to_thread(
            scram.make_credential,
            name,
            wanted.password,
            mechanism,
            secrets.token_bytes(32),
            wanted.iterations,
        )
    else:  # the type holds all three (UserRequest.__post_init__)
        assert isinstance(wanted.salt, str) and isinstance(wanted.stored_key, str)
        assert isinstance(wanted.server_key, str)
        credential = UserScramCredentialRecord(
            name=name,
            mechanism=mechanism,
            salt=wanted.salt,
            stored_key=wanted.stored_key,
            server_key=wanted.server_key,
            iterations=wanted.iterations,
        )
    await controller.submit(lambda image: access.set_user_credential(image, credential))
    computed = "here" if isinstance(wanted.password, str) else "by the client"
    audit_change(request, "user_credential_set", user=name, mechanism=mechanism, computed=computed)
    response = json_response(_user_view(controller.image, name), status=201)
    response.headers[METADATA_VERSION] = str(controller.image.version)
    return response


def _user_view(image: MetadataImage, name: str) -> dict[str, object]:
    return {
        "name": name,
        "credentials": [
            {"mechanism": m, "iterations": c.iterations}
            for m, c in sorted(image.users.get(name, {}).items())
        ],
    }


async def list_users(request: web.Request) -> web.Response:
    image = request.app[CONTROLLER].image
    return json_response({"users": [_user_view(image, name) for name in sorted(image.users)]})


@needs_active_controller
async def delete_user(request: web.Request) -> web.StreamResponse:
    """The user, or with `?mechanism=` only its credential for that mechanism (Kafka's
    AlterUserScramCredentials deletions; the user goes with its last one)."""
    name = request.match_info["name"]
    mechanisms = request.query.getall("mechanism", [])
    if len(mechanisms) > 1 or any(m not in scram.MECHANISMS for m in mechanisms):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"mechanism: at most one of {', '.join(sorted(scram.MECHANISMS))}",
        )
    mechanism = mechanisms[0] if mechanisms else None
    controller = request.app[CONTROLLER]
    await controller.submit(lambda image: access.delete_user(image, name, mechanism))
    if mechanism is None:
        audit_change(request, "user_deleted", user=name)
    else:
        audit_change(request, "user_credential_deleted", user=name, mechanism=mechanism)
    return web.Response(status=204, headers={METADATA_VERSION: str(controller.image.version)})


@needs_active_controller
async def create_acl(request: web.Request) -> web.StreamResponse:
    controller = request.app[CONTROLLER]
    body = _admin_body(admin_bodies.AclRequest, await read_json_object(request))
    wanted = acls.acl_from_request(uuid.uuid4().hex, admin_bodies.given(body))
    stored = await controller.submit(lambda image: access.create_acls(image, (wanted,)))
    audit_change(request, "acl_created", acl=acls.acl_view(stored[0]))
    return json_response(acls.acl_view(stored[0]), status=201)


def _acl_filter(values: Mapping[str, object]) -> dict[str, str]:
    """A list or delete filter (a query's fields or a body's), typed as one."""
    return acls.filter_from_request(admin_bodies.given(_admin_body(admin_bodies.AclFilter, values)))


async def list_acls(request: web.Request) -> web.Response:
    image = request.app[CONTROLLER].image
    if len(request.query) != len(set(request.query)):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "each ACL filter field at most once")
    wanted = _acl_filter(dict(request.query))
    matching = [a for _, a in sorted(image.acls.items()) if acls.matches_filter(a, wanted)]
    return json_response({"acls": [acls.acl_view(a) for a in matching]})


@needs_active_controller
async def delete_acls(request: web.Request) -> web.StreamResponse:
    wanted = _acl_filter(await read_json_object(request))
    removed = await request.app[CONTROLLER].submit(lambda image: access.delete_acls(image, wanted))
    views = [acls.acl_view(a) for a in removed]
    audit_change(request, "acls_deleted", acls=views)
    return json_response({"deleted": views})


@needs_active_controller
async def alter_quotas(request: web.Request) -> web.StreamResponse:
    wanted = _admin_body(admin_bodies.QuotaRequest, await read_json_object(request))
    principal = wanted.principal
    quotas = await request.app[CONTROLLER].submit(
        lambda image: access.alter_quotas(image, principal, admin_bodies.given(wanted))
    )
    audit_change(request, "quotas_altered", quota_principal=principal, quotas=quotas)
    response = json_response({"principal": principal, **quotas})
    response.headers[METADATA_VERSION] = str(request.app[CONTROLLER].image.version)
    return response


async def list_quotas(request: web.Request) -> web.Response:
    image = request.app[CONTROLLER].image
    return json_response(
        {"quotas": [{"principal": p, **q} for p, q in sorted(image.quotas.items())]}
    )


# ---------------------------------------------------------------------------- broker-facing


@needs_active_controller
async def register_broker(request: web.Request) -> web.StreamResponse:
    controller = request.app[CONTROLLER]
    try:
        wanted = BrokerRegistrationRequest.decode(await request.read())
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    epoch = await controller.register_broker(
        wanted.broker_id,
        wanted.incarnation_id,
        wanted.url,
        wanted.rack,
        wanted.kafka,
        honours_lease_timeout=wanted.honours_lease_timeout,
    )
    answer = BrokerRegistrationResponse(
        epoch,
        controller.settings.cluster_id,
        controller.settings.heartbeat_interval_ms,
        controller.settings.session_timeout_ms,
        controller.image.version,
        controller.settings.lease_timeout_ms,
    )
    return json_response(answer.to_json())


@needs_active_controller
async def broker_heartbeat(request: web.Request) -> web.StreamResponse:
    try:
        beat = BrokerHeartbeatRequest.decode(await request.read())
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    controller = request.app[CONTROLLER]
    response, version = await controller.broker_heartbeat(
        int_param(request.match_info["broker_id"], "broker_id", -1),
        beat.broker_epoch,
        beat.metadata_version,
        beat.want_shutdown,
        beat.honours_lease_timeout,
    )
    answer = BrokerHeartbeatResponse(
        response.broker_epoch,
        response.fenced,
        response.shutting_down,
        version,
        controller.settings.session_timeout_ms,
        controller.settings.lease_timeout_ms,
    )
    return json_response(answer.to_json())


@needs_active_controller
async def broker_unreachable(request: web.Request) -> web.StreamResponse:
    """A broker says another's port refused it (controller/liveness.py): probe it."""
    try:
        report = BrokerUnreachableReport.decode(await request.read())
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    controller = request.app[CONTROLLER]
    reporter = controller.image.brokers.get(report.reporter_id)
    if reporter is None or reporter.broker_epoch != report.reporter_epoch:
        raise KraftliteError(ErrorCode.STALE_BROKER_EPOCH, "the reporter is not registered so")
    controller.suspect(_broker_id(request), report.suspect_epoch)
    return web.Response(status=202)


@needs_active_controller
async def alter_partition(request: web.Request) -> web.StreamResponse:
    try:
        alter = AlterPartitionRequest.decode(await request.read())
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    answer = await request.app[CONTROLLER].submit(
        lambda image: decisions.alter_partitions(image, alter)
    )
    return json_response(answer.to_json())


async def metadata(request: web.Request) -> web.Response:
    """Brokers follow the metadata log here by offset (controller/metadata_server.py)."""
    try:
        wanted = MetadataFetchRequest.from_params(request.query)
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    body = await request.app[METADATA].fetch(wanted)
    return web.Response(body=body, content_type="application/json")


async def _http_client(app: web.Application) -> AsyncIterator[None]:
    signed = (app[CLUSTER_AUTH].client_middleware(),)  # forwards go to other controllers
    async with aiohttp.ClientSession(connector=app[CONNECTOR](), middlewares=signed) as session:
        app[HTTP] = session
        yield


def make_controller_app(
    controller: QuorumController,
    auth: ClusterAuth,
    gate: Gate,
    limits: ListenerLimits | None = None,
    connector: Callable[[], aiohttp.BaseConnector] = aiohttp.TCPConnector,
) -> web.Application:
    app = web.Application(
        middlewares=boundary_middlewares(),
        client_max_size=1 << 20,
    )
    app[AUTH] = gate.authenticator
    app[GATE] = gate
    app[READ_TIMEOUT_MS] = (limits or ListenerLimits()).read_timeout_ms
    app[CONNECTOR] = connector
    app[CONTROLLER] = controller
    app[METADATA] = MetadataServer(controller.log)
    app[CLUSTER_AUTH] = auth
    app[METRICS] = controller_registry(controller)
    app.cleanup_ctx.append(_http_client)
    app.cleanup_ctx.append(observability.watch_event_loop)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    app.router.add_post("/v1/node/restart", restart_node)
    app.router.add_get("/v1/quorum", quorum)
    app.router.add_post("/v1/quorum/voters", add_voter)
    app.router.add_delete(r"/v1/quorum/voters/{node_id}", remove_voter)
    app.router.add_get("/v1/cluster", cluster)
    app.router.add_get("/v1/topics", list_topics)
    app.router.add_post("/v1/topics", create_topic)
    app.router.add_get("/v1/topics/{topic}", describe_topic)
    app.router.add_delete("/v1/topics/{topic}", delete_topic)
    app.router.add_post("/v1/topics/{topic}/partitions", create_partitions)
    app.router.add_put("/v1/topics/{topic}/configs", alter_configs)
    app.router.add_patch("/v1/topics/{topic}", alter_topic)
    app.router.add_get("/v1/brokers", list_brokers)
    app.router.add_get(r"/v1/brokers/{broker_id}", describe_broker)
    app.router.add_post(r"/v1/brokers/{broker_id}/drain", drain_broker)
    app.router.add_delete(r"/v1/brokers/{broker_id}", remove_broker)
    app.router.add_put(r"/v1/brokers/{broker_id}/configs", alter_broker_configs)
    app.router.add_get(r"/v1/brokers/{broker_id}/configs", describe_broker_configs)
    app.router.add_delete(r"/v1/brokers/{broker_id}/drain", stop_draining)
    app.router.add_post("/v1/cluster/rebalance", rebalance_cluster)
    app.router.add_post("/v1/elections", elect_leaders)
    app.router.add_get("/v1/reassignments", list_reassignments)
    app.router.add_post("/v1/reassignments", alter_reassignments)
    app.router.add_post("/v1/tokens", issue_token)
    app.router.add_get("/v1/users", list_users)
    app.router.add_post("/v1/users", create_user)
    app.router.add_delete("/v1/users/{name}", delete_user)
    app.router.add_get("/v1/acls", list_acls)
    app.router.add_post("/v1/acls", create_acl)
    app.router.add_delete("/v1/acls", delete_acls)
    app.router.add_get("/v1/quotas", list_quotas)
    app.router.add_post("/v1/quotas", alter_quotas)
    app.router.add_post("/v1/internal/brokers", register_broker)
    app.router.add_post(r"/v1/internal/brokers/{broker_id:\d+}/heartbeat", broker_heartbeat)
    app.router.add_post(r"/v1/internal/brokers/{broker_id:\d+}/unreachable", broker_unreachable)
    app.router.add_post("/v1/internal/alter-partition", alter_partition)
    app.router.add_get("/v1/internal/metadata", metadata)
    app.router.add_get("/v1/cluster/stats", cluster_stats)
    app.router.add_get("/v1/topics/{topic}/partitions", topic_partitions)
    add_console(app, "controller")
    return app
