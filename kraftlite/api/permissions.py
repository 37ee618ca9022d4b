"""What each route asks of the authorizer: Kafka's operation and resource for each API.

Rules:
1. Every route of both apps has an entry (tests/unit/test_permissions.py checks it against
   the routers), so a new endpoint cannot be served unchecked.
2. Actions come from the path; where the resource is in the body (a topic created, the
   topics a group member subscribes to or commits for, those whose offsets are deleted),
   from the parsed body, checked before the handler runs. Lists (topics, groups) are
   filtered by DESCRIBE in the handler.
3. Kafka's choices, API by API: the broker list (Metadata, DescribeCluster) for any
   authenticated client; DescribeQuorum DESCRIBE cluster; DescribeTopics DESCRIBE topic;
   CreateTopics CREATE on the cluster or the topic; DeleteTopics DELETE; CreatePartitions ALTER;
   AlterConfigs ALTER_CONFIGS; Produce WRITE; Fetch READ; ListOffsets DESCRIBE;
   DeleteRecords DELETE topic;
   consumer group heartbeat READ group and DESCRIBE each subscribed topic; OffsetCommit
   READ group and READ topic; OffsetDelete DELETE group and READ topic; OffsetFetch and
   DescribeGroups DESCRIBE group; ListGroups
   DESCRIBE cluster; users, ACLs: ALTER / DESCRIBE cluster; quotas ALTER_CONFIGS /
   DESCRIBE_CONFIGS cluster; AlterPartitionReassignments, ElectLeaders, UnregisterBroker,
   drains, rebalances and replication factor changes (they move replicas), and a node's
   restart (it moves its leaders) ALTER cluster;
   ListPartitionReassignments DESCRIBE cluster; the broker list any authenticated client;
   broker configs (IncrementalAlterConfigs on a broker) ALTER_CONFIGS cluster;
   transactions (issue 27): WRITE on the transactional id to use it (and on each topic a
   transaction adds, and a transactional produce's topic), DESCRIBE on it to describe it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware

from kraftlite.api.auth import authenticate_middleware, authorize, may
from kraftlite.api.browsers import cross_site_middleware
from kraftlite.api.errors import problem_middleware
from kraftlite.api.internal_auth import cluster_auth_middleware
from kraftlite.api.listener import read_body_middleware
from kraftlite.api.throttle import throttle_middleware
from kraftlite.controller.access import validate_user_name
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.topics import validate_topic_name
from kraftlite.observability import observe_middleware
from kraftlite.protocol import names
from kraftlite.protocol.headers import TRANSACTIONAL_ID
from kraftlite.security.acls import CLUSTER_NAME, Action, Operation, ResourceType

Rule = Callable[[web.Request, Mapping[str, Any]], list[Action]]
PUBLIC: Final = "public"  # operations endpoints, no check
AUTHENTICATED: Final = "authenticated"  # any authenticated principal (the handler filters)
NODES: Final = "nodes"  # internal: cluster_auth_middleware admits nodes only
_MAX_CHECKED_BODY = 1 << 20


def transactional_id_of(request: web.Request) -> str:
    """The route's {transactional_id}, checked as a name (checked here before the routes
    authorize it, and read by their handlers)."""
    name = request.match_info["transactional_id"]
    if not names.is_name(name, names.MAX_TRANSACTIONAL_ID):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"transactional ids are 1-{names.MAX_TRANSACTIONAL_ID} characters, "
            "no control characters",
        )
    return name


def _topic(op: Operation) -> Rule:
    return lambda request, body: [Action(op, ResourceType.TOPIC, request.match_info["topic"])]


def _group(op: Operation) -> Rule:
    return lambda request, body: [Action(op, ResourceType.GROUP, request.match_info["group"])]


def _cluster(op: Operation) -> Rule:
    return lambda request, body: [Action(op, ResourceType.CLUSTER, CLUSTER_NAME)]


def _transactional_id(op: Operation) -> Rule:
    return lambda request, body: [
        Action(op, ResourceType.TRANSACTIONAL_ID, request.match_info["transactional_id"])
    ]


def _add_partitions(request: web.Request, body: Mapping[str, Any]) -> list[Action]:
    """AddPartitionsToTxn: WRITE on the id and on every topic added (Kafka's [A1])."""
    return _transactional_id(Operation.WRITE)(request, body) + [
        Action(Operation.WRITE, ResourceType.TOPIC, t)
        for t in _names(body.get("partitions"), "topic")
    ]


def _produce(request: web.Request, body: Mapping[str, Any]) -> list[Action]:
    """WRITE on the topic; a transactional producer's batch WRITE on its id too (Kafka's
    Produce with a transactional id)."""
    actions = [Action(Operation.WRITE, ResourceType.TOPIC, request.match_info["topic"])]
    transactional_id = request.headers.get(TRANSACTIONAL_ID)
    if transactional_id is not None:
        actions.append(Action(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id))
    return actions


def _names(items: object, key: str | None = None) -> list[str]:
    if not isinstance(items, list):
        return []
    names = [item.get(key) if key and isinstance(item, dict) else item for item in items]
    return sorted({n for n in names if isinstance(n, str)})


def _join(request: web.Request, body: Mapping[str, Any]) -> list[Action]:
    group = request.match_info["group"]
    return [Action(Operation.READ, ResourceType.GROUP, group)] + [
        Action(Operation.DESCRIBE, ResourceType.TOPIC, t) for t in _names(body.get("topics"))
    ]


def _commit(request: web.Request, body: Mapping[str, Any]) -> list[Action]:
    """OffsetCommit: READ on the group and each topic; in a transaction (TxnOffsetCommit)
    WRITE on its transactional id too."""
    group = request.match_info["group"]
    actions = [Action(Operation.READ, ResourceType.GROUP, group)] + [
        Action(Operation.READ, ResourceType.TOPIC, t) for t in _names(body.get("offsets"), "topic")
    ]
    transactional_id = request.headers.get(TRANSACTIONAL_ID)
    if transactional_id is not None:
        actions.append(Action(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id))
    return actions


def _add_offsets(request: web.Request, body: Mapping[str, Any]) -> list[Action]:
    """AddOffsetsToTxn: WRITE on the id, READ on the group (Kafka's [O1])."""
    group = body.get("group")
    read_group = Action(Operation.READ, ResourceType.GROUP, group if isinstance(group, str) else "")
    return [*_transactional_id(Operation.WRITE)(request, body), read_group]


def _delete_offsets(request: web.Request, body: Mapping[str, Any]) -> list[Action]:
    group = request.match_info["group"]
    return [Action(Operation.DELETE, ResourceType.GROUP, group)] + [
        Action(Operation.READ, ResourceType.TOPIC, t)
        for t in _names(body.get("partitions"), "topic")
    ]


def _create_topic(request: web.Request, body: Mapping[str, Any]) -> list[Action]:
    """CREATE on the cluster, or else on the topic (Kafka accepts either); in the batch
    form (`{"topics": [...]}`) on every topic named, or the request is refused whole."""
    if may(request, Action(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)):
        return []
    specs = body.get("topics") if "topics" in body else [body]
    if not isinstance(specs, list) or not specs:
        return [Action(Operation.CREATE, ResourceType.TOPIC, "")]
    names = {
        name if isinstance(s, Mapping) and isinstance(name := s.get("name"), str) else ""
        for s in specs
    }
    return [Action(Operation.CREATE, ResourceType.TOPIC, name) for name in sorted(names)]


_BODY_RULES: Final = {
    _join,
    _commit,
    _delete_offsets,
    _create_topic,
    _add_partitions,
    _add_offsets,
}

# (method, route) -> rule; both apps' routes (a controller serves a subset)
PERMISSIONS: Final[Mapping[tuple[str, str], Rule | str]] = {
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/metrics"): _cluster(Operation.DESCRIBE),  # names every topic
    ("GET", "/v1/openapi.json"): PUBLIC,
    ("GET", "/v1/quorum"): _cluster(Operation.DESCRIBE),
    ("POST", "/v1/quorum/voters"): _cluster(Operation.ALTER),
    # a node restarting in place (api/restart.py) moves its leaders, as an election does
    ("POST", "/v1/node/restart"): _cluster(Operation.ALTER),
    ("DELETE", "/v1/quorum/voters/{node_id}"): _cluster(Operation.ALTER),
    ("GET", "/v1/cluster"): AUTHENTICATED,  # the brokers, as Kafka's Metadata gives anyone
    ("GET", "/v1/topics"): AUTHENTICATED,
    ("POST", "/v1/topics"): _create_topic,
    ("GET", "/v1/topics/{topic}"): _topic(Operation.DESCRIBE),
    ("DELETE", "/v1/topics/{topic}"): _topic(Operation.DELETE),
    ("POST", "/v1/topics/{topic}/partitions"): _topic(Operation.ALTER),
    ("PUT", "/v1/topics/{topic}/configs"): _topic(Operation.ALTER_CONFIGS),
    ("POST", "/v1/topics/{topic}/records"): _topic(Operation.WRITE),
    ("POST", "/v1/topics/{topic}/partitions/{partition}/records"): _produce,
    ("GET", "/v1/topics/{topic}/partitions/{partition}/records"): _topic(Operation.READ),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/offsets"): _topic(Operation.DESCRIBE),
    ("GET", "/v1/topics/{topic}/keys/{key}"): _topic(Operation.READ),  # as a fetch
    ("GET", "/v1/topics/{topic}/table"): _topic(Operation.READ),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/table"): _topic(Operation.READ),
    ("POST", "/v1/topics/{topic}/partitions/{partition}/delete-records"): _topic(Operation.DELETE),
    ("GET", "/v1/groups"): _cluster(Operation.DESCRIBE),
    ("GET", "/v1/groups/{group}"): _group(Operation.DESCRIBE),
    ("POST", "/v1/groups/{group}/members"): _join,
    ("POST", "/v1/groups/{group}/members/{member_id}/heartbeat"): _group(Operation.READ),
    ("DELETE", "/v1/groups/{group}/members/{member_id}"): _group(Operation.READ),
    ("POST", "/v1/groups/{group}/offsets"): _commit,
    ("GET", "/v1/groups/{group}/offsets"): _group(Operation.DESCRIBE),
    ("DELETE", "/v1/groups/{group}/offsets"): _delete_offsets,
    ("POST", "/v1/transactions/{transactional_id}/producer"): _transactional_id(Operation.WRITE),
    ("POST", "/v1/transactions/{transactional_id}/partitions"): _add_partitions,
    ("POST", "/v1/transactions/{transactional_id}/groups"): _add_offsets,
    ("POST", "/v1/transactions/{transactional_id}/end"): _transactional_id(Operation.WRITE),
    ("GET", "/v1/transactions/{transactional_id}"): _transactional_id(Operation.DESCRIBE),
    ("POST", "/v1/tokens"): AUTHENTICATED,
    # Kafka asks WRITE on some topic (or IDEMPOTENT_WRITE) of InitProducerId; an id alone
    # writes nothing: each batch is authorized for its own topic
    ("POST", "/v1/producer-ids"): AUTHENTICATED,
    ("GET", "/v1/users"): _cluster(Operation.DESCRIBE),
    ("POST", "/v1/users"): _cluster(Operation.ALTER),
    ("DELETE", "/v1/users/{name}"): _cluster(Operation.ALTER),
    ("GET", "/v1/acls"): _cluster(Operation.DESCRIBE),
    ("POST", "/v1/acls"): _cluster(Operation.ALTER),
    ("DELETE", "/v1/acls"): _cluster(Operation.ALTER),
    ("GET", "/v1/quotas"): _cluster(Operation.DESCRIBE_CONFIGS),
    ("POST", "/v1/quotas"): _cluster(Operation.ALTER_CONFIGS),
    ("PATCH", "/v1/topics/{topic}"): _cluster(Operation.ALTER),  # moves replicas
    ("GET", "/v1/brokers"): AUTHENTICATED,
    ("GET", "/v1/brokers/{broker_id}"): AUTHENTICATED,
    ("POST", "/v1/brokers/{broker_id}/drain"): _cluster(Operation.ALTER),
    ("DELETE", "/v1/brokers/{broker_id}"): _cluster(Operation.ALTER),
    ("PUT", "/v1/brokers/{broker_id}/configs"): _cluster(Operation.ALTER_CONFIGS),
    ("GET", "/v1/brokers/{broker_id}/configs"): _cluster(Operation.DESCRIBE_CONFIGS),
    ("DELETE", "/v1/brokers/{broker_id}/drain"): _cluster(Operation.ALTER),
    ("POST", "/v1/cluster/rebalance"): _cluster(Operation.ALTER),
    ("POST", "/v1/elections"): _cluster(Operation.ALTER),
    ("GET", "/v1/reassignments"): _cluster(Operation.DESCRIBE),
    ("POST", "/v1/reassignments"): _cluster(Operation.ALTER),
    ("POST", "/v1/internal/brokers"): NODES,
    ("POST", "/v1/internal/brokers/{broker_id}/heartbeat"): NODES,
    ("POST", "/v1/internal/brokers/{broker_id}/unreachable"): NODES,
    ("POST", "/v1/internal/alter-partition"): NODES,
    ("GET", "/v1/internal/metadata"): NODES,
    ("POST", "/v1/internal/replica-fetch"): NODES,
    ("GET", "/v1/internal/replica-stream"): NODES,
    ("GET", "/v1/internal/offsets"): NODES,
    ("GET", "/v1/internal/groups"): NODES,
    ("POST", "/v1/internal/txn-markers"): NODES,
    ("POST", "/v1/internal/txn-verify"): NODES,
    ("GET", "/v1/internal/stats"): NODES,
    # the web console (kraftlite/console): files and the node's kind, no data; the pages'
    # data comes from the API routes above, authorized as any client's calls
    ("GET", "/ui"): PUBLIC,
    ("GET", "/ui/"): PUBLIC,
    ("GET", "/ui/node.json"): PUBLIC,
    ("GET", "/ui/static/{name}"): PUBLIC,
    # brokers' figures (leaders, disk, rates) for the console; topics filtered by DESCRIBE
    ("GET", "/v1/cluster/stats"): _cluster(Operation.DESCRIBE),
    # a page of a topic's partitions (the console's topic page), as DescribeTopics
    ("GET", "/v1/topics/{topic}/partitions"): _topic(Operation.DESCRIBE),
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def route_key(request: web.Request) -> tuple[str, str] | None:
    route = request.match_info.route
    resource = route.resource
    if resource is None or route.method == "*":
        return None
    method = "GET" if route.method == "HEAD" else route.method  # aiohttp adds HEAD to GETs
    return method, resource.canonical


def _check_names(request: web.Request) -> None:
    """Names in the path are checked before they are authorized: a name that is not one
    (a topic holding "/../") must not be authorized as one thing and act on another."""
    info = request.match_info
    if "topic" in info:
        validate_topic_name(info["topic"], internal=True)
    if "group" in info and not names.is_name(info["group"], names.MAX_GROUP_NAME):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"group names are 1-{names.MAX_GROUP_NAME} characters, no control characters",
        )
    if "name" in info:
        validate_user_name(info["name"])
    if "transactional_id" in info:
        transactional_id_of(request)
    if (transactional_id := request.headers.get(TRANSACTIONAL_ID)) is not None and not (
        names.is_name(transactional_id, names.MAX_TRANSACTIONAL_ID)
    ):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"{TRANSACTIONAL_ID} is not an id")


async def _json_body(request: web.Request) -> Mapping[str, Any]:
    raw = await request.read()
    if len(raw) > _MAX_CHECKED_BODY:
        raise KraftliteError(ErrorCode.RECORD_LIST_TOO_LARGE, "admin and group bodies: 1 MiB")
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"body is not JSON: {exc}") from None
    return body if isinstance(body, dict) else {}


@web.middleware
async def authorization_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Rules 1-2: the route's actions, checked before the handler runs."""
    key = route_key(request)
    if key is None:  # 404 / 405: aiohttp's own answer
        return await handler(request)
    rule = PERMISSIONS.get(key)
    if rule is None:  # a route added without an entry: refuse rather than serve unchecked
        raise KraftliteError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "route has no ACL rule")
    _check_names(request)  # what is authorized is exactly what the handler will act on
    if isinstance(rule, str):
        return await handler(request)
    body = await _json_body(request) if rule in _BODY_RULES else {}
    authorize(request, *rule(request, body))
    return await handler(request)


def boundary_middlewares(
    *, before_authorization: tuple[Middleware, ...] = (), after: tuple[Middleware, ...] = ()
) -> list[Middleware]:
    """Every node's middleware chain, in the one order the trust boundary needs: the
    request's id and metrics around everything (observability.py); errors as problem+json;
    what a web page may not make a browser do refused (browsers.py); forged node calls
    refused before their body is read; clients authenticated from their
    headers, then their body read (bounded in size and time); each route's actions
    authorized before any handler; quotas; then the app's own."""
    return [
        observe_middleware,
        problem_middleware,
        cross_site_middleware,
        cluster_auth_middleware,
        authenticate_middleware,
        read_body_middleware,
        *before_authorization,
        authorization_middleware,
        throttle_middleware,
        *after,
    ]
