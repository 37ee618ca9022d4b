"""Kafka's APIs translated onto the broker service (service.py): decode a request
(messages.py), call the service, encode the answer. No routing, no storage, no group
logic here; what a request does is the same on both edges.

Rules:
1. No forwarding on this edge: a partition this broker does not lead answers
   NOT_LEADER_OR_FOLLOWER, a group it does not coordinate NOT_COORDINATOR, and the client
   refreshes its metadata (Metadata names every partition's leader, FindCoordinator the
   group's coordinator), as with Kafka's brokers.
2. The logs keep kraftlite's batch format; batches are converted at this edge (records.py),
   so offsets, timestamps, keys, values and headers are the same records on both edges.
3. Every error is Kafka's numeric code, per partition where Kafka's answer has one.
   kraftlite codes with no Kafka equivalent (>= 1000) answer INVALID_REQUEST.
4. A client is who SASL SCRAM (security/scram_exchange.py) or PLAIN (its password, checked
   as HTTP Basic checks it) or its TLS client certificate says, else User:ANONYMOUS, and
   is authorized as on the HTTP edge, with the same ACLs.
   With `auth.required`, a connection may only authenticate (ApiVersions, SaslHandshake,
   SaslAuthenticate) until it has: anything else closes it, undecoded.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import hmac
import random
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar, cast

import structlog

from kraftlite import observability
from kraftlite.broker.partition import Acks
from kraftlite.config import SASL_MECHANISMS
from kraftlite.controller import access, decisions
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.groups.offsets import CommittedOffset
from kraftlite.kafka import (
    acl_apis,
    cluster_apis,
    group_apis,
    records_apis,
    txn_apis,
    user_apis,
)
from kraftlite.kafka.codes import (
    INVALID_REQUEST,
    MAX_ADMIN_TIMEOUT_MS,
    MAX_MESSAGE,
    NONE,
    kafka_code,
)
from kraftlite.kafka.codes import message as _message
from kraftlite.kafka.fetch_sessions import (
    FINAL_EPOCH,
    NO_SESSION,
    ConnectionFetchSession,
    PartitionKey,
    Position,
    SessionBudget,
)
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.records import UserScramCredentialRecord
from kraftlite.metadata.topics import (
    LIST_CONFIGS,
    TOPIC_CONFIGS,
    effective_config,
    is_internal_topic,
    validate_topic_name,
)
from kraftlite.protocol import admin, admin_bodies, names
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import stored as stored_batch
from kraftlite.protocol.internal import MessageError
from kraftlite.protocol.kafka import bodies, messages, records
from kraftlite.protocol.kafka.bodies import AnyResponse
from kraftlite.protocol.kafka.messages import ApiKey, Request
from kraftlite.protocol.kafka.wire import WireError
from kraftlite.security import scram
from kraftlite.security.acls import CLUSTER_NAME, Action, Operation, ResourceType
from kraftlite.security.cluster_auth import CLIENT_HOST_HEADER, PRINCIPAL_HEADER
from kraftlite.security.gate import AUDITED_NAMES, Gate
from kraftlite.security.principal import ANONYMOUS, Caller
from kraftlite.security.scram_exchange import ScramError, ScramExchange
from kraftlite.service import (
    REQUEST_DECOMPRESSED_MAX_BYTES,
    BrokerService,
    Fetched,
    FetchWanted,
)
from kraftlite.transactions.coordinator import TXN_TOPIC

log = structlog.get_logger(__name__)
T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
audit = structlog.get_logger("kraftlite.audit")
UNSUPPORTED_VERSION = 35
_NO_TOPIC_ID = uuid.UUID(int=0)
INVALID_GROUP_ID = 24
UNSUPPORTED_SASL_MECHANISM = 33
PLAIN = "PLAIN"  # RFC 4616, checked against the users' SCRAM credentials
assert PLAIN in SASL_MECHANISMS  # config.py declares what the listener may offer
# a PLAIN message's most: two user names, a password and the two NULs between them
MAX_PLAIN_TOKEN = 2 * access.MAX_USER_NAME + scram.MAX_PASSWORD_BYTES + 2
FAILED_AUTHENTICATION_DELAY_S = 0.1  # connection.failed.authentication.delay.ms
MAX_REQUESTS_BEFORE_AUTHENTICATION = 8  # ApiVersions, SaslHandshake, SaslAuthenticate x2
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53  # transactions are not served
UNSUPPORTED_ENDPOINT_TYPE = 120
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4  # DescribeConfigs resource types
SOURCE_TOPIC, SOURCE_DYNAMIC, SOURCE_STATIC, SOURCE_DEFAULT = 1, 2, 4, 5  # config sources
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
MAX_ADMIN_TOPICS = 100  # topics one CreateTopics or DeleteTopics may name
LEADER_NOT_AVAILABLE = 5
UNKNOWN_TOPIC_ID = 100
INVALID_REQUIRED_ACKS = 21
READ_COMMITTED = 1  # Fetch and ListOffsets isolation_level (0: read_uncommitted)
_INLINE_CONVERT_BYTES = 64 << 10  # larger record sets are converted on a worker thread
_RNG = random.Random()  # noqa: S311 - placements validate_only checks (and never keeps)
_COMPRESS_COST = 4  # compressing them costs about this many plain conversions (a bound)
MAX_PROTOCOLS = 16  # assignors a member may offer (clients offer one to three)
MAX_METADATA = 256 << 10  # subscription bytes a member may send (topics, owned partitions)
MAX_REBALANCE_TIMEOUT_MS = 300_000  # bounds how long a JoinGroup may wait
# a handler going through many items (topics a Metadata request names, partitions a Fetch
# names) lets the event loop run others after this many (heartbeats and leases ride on it)
_AUTO_CREATE_PER_REQUEST = 100  # topics one Metadata request creates (the rest: retriable)
_AUTO_CREATE_TIMEOUT_S = 10.0
_PRODUCE_PER_PASS = 100  # partitions of one Produce started in one pass of the loop
_YIELD_EVERY = 1000


# Kafka's request names ("Produce", "ApiVersions"), as its request metrics label them.
_API_NAMES = {key: "".join(w.capitalize() for w in key.name.split("_")) for key in ApiKey}
# Codes the edge answers that kraftlite's own ErrorCode does not name (observability).
_ERROR_NAMES = {
    UNSUPPORTED_VERSION: "UNSUPPORTED_VERSION",
    INVALID_GROUP_ID: "INVALID_GROUP_ID",
    UNSUPPORTED_SASL_MECHANISM: "UNSUPPORTED_SASL_MECHANISM",
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    UNSUPPORTED_ENDPOINT_TYPE: "UNSUPPORTED_ENDPOINT_TYPE",
    LEADER_NOT_AVAILABLE: "LEADER_NOT_AVAILABLE",
    UNKNOWN_TOPIC_ID: "UNKNOWN_TOPIC_ID",
    INVALID_REQUIRED_ACKS: "INVALID_REQUIRED_ACKS",
}


class CloseConnection(Exception):
    """The request must not be answered: close the connection (server.py)."""


def _errors(body: AnyResponse) -> list[str]:
    return observability.kafka_errors(body, _ERROR_NAMES)


def _topic_name_ok(name: str) -> bool:
    try:
        validate_topic_name(name)
    except KraftliteError:
        return False
    return True


def _added_replicas(
    assignments: Sequence[bodies.CreatePartitionsAssignment] | None,
) -> tuple[tuple[int, ...], ...] | None:
    """CreatePartitions' assignments as the controllers take them; an empty one or a
    negative broker id is INVALID_REPLICA_ASSIGNMENT, as Kafka answers it."""
    if assignments is None:
        return None
    placed = tuple(tuple(a["broker_ids"]) for a in assignments)
    if any(not ids or min(ids) < 0 for ids in placed):
        raise KraftliteError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "each partition added names one or more registered brokers",
        )
    return placed


def _instance_id(value: str | None) -> str | None:
    """A group request's static instance id (`group.instance.id`), the same on every group
    API: absent, null and "" are none (a client may send "" for unset; Kafka's own clients
    send null), else it must be one Kafka's clients would send (`names.is_instance_id`),
    or INVALID_REQUEST: it is kept per member and shown by DescribeGroups and
    ConsumerGroupDescribe."""
    if not value:
        return None
    if not names.is_instance_id(value):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"a group.instance.id is 1-{names.MAX_INSTANCE_ID} of [a-zA-Z0-9._-], not '.' or '..'",
        )
    return value


def _creatable(topic: bodies.CreatableTopic, validate_only: bool) -> admin.CreateTopicRequest:
    """A CreateTopics entry as the controllers' request. With replica assignments (their
    partitions 0 to n-1, in any order), the partition count and replication factor must be
    left at -1, as Kafka asks; without, -1 means the defaults."""
    assignments = topic.get("assignments") or []
    placed: tuple[tuple[int, ...], ...] | None = None
    if assignments:
        if topic.get("num_partitions", -1) != -1 or topic.get("replication_factor", -1) != -1:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST,
                "both num_partitions or replication_factor and assignments were set",
            )
        by_index = {a["partition_index"]: tuple(a["broker_ids"]) for a in assignments}
        if sorted(by_index) != list(range(len(assignments))):
            raise KraftliteError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "assignments must name partitions 0 to n-1, each once",
            )
        placed = tuple(by_index[i] for i in range(len(assignments)))
    return admin.CreateTopicRequest(
        topic["name"],
        partitions=max(topic.get("num_partitions", -1), 1),  # -1: the default, 1
        replication_factor=(
            topic["replication_factor"] if topic.get("replication_factor", -1) > 0 else None
        ),
        configs={
            c["name"]: c["value"] for c in topic.get("configs", []) if c.get("value") is not None
        },
        replica_assignment=placed,
        validate_only=validate_only,
    )


def _config_changes(
    resource: bodies.IncrementalAlterConfigsRequestAlterConfigsResource,
    position: int,
    current: Callable[[str], str],
) -> dict[str, str | None]:
    """An IncrementalAlterConfigs resource's changes: SET a value, DELETE back to the
    default (None), APPEND to or SUBTRACT from a list-valued config (`cleanup.policy`) as
    `current(name)` has it, as Kafka's ConfigAdminManager does (each item once, in order)."""
    if position >= MAX_ADMIN_TOPICS:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "too many resources at once")
    changes: dict[str, str | None] = {}
    for config in resource["configs"]:
        operation, name, value = config["config_operation"], config["name"], config["value"]
        if name in changes:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, f"config {name} is named twice")
        if operation in (OP_APPEND, OP_SUBTRACT):
            if name not in LIST_CONFIGS:
                raise KraftliteError(
                    ErrorCode.INVALID_CONFIG, f"{name} is not a list: no APPEND or SUBTRACT"
                )
            old = [item.strip() for item in current(name).split(",") if item.strip()]
            given = [item.strip() for item in (value or "").split(",") if item.strip()]
            items = (
                list(dict.fromkeys(old + given))
                if operation == OP_APPEND
                else [item for item in old if item not in given]
            )
            changes[name] = ",".join(items)
        elif operation in (OP_SET, OP_DELETE):
            changes[name] = value if operation == OP_SET else None
        else:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, f"no config operation {operation}")
    return changes


def _topic_id(image_topic_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(hex=image_topic_id)
    except ValueError:
        return _NO_TOPIC_ID


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def _produce_error(
    index: int, code: int, message: str | None = None
) -> bodies.PartitionProduceResponse:
    return {"index": index, "error_code": code, "base_offset": -1, "error_message": message}


# What Metadata tells any client of a broker anyway, and where its HTTP API is (which the
# HTTP edge's broker list tells any authenticated client): asked for alone, these need no
# DESCRIBE_CONFIGS on the cluster, so that a reader can find the HTTP side (Spark's resolve.py).
PUBLIC_BROKER_CONFIGS: Final = frozenset({"broker.id", "broker.rack", "kraftlite.http.url"})


class Handlers:
    """The APIs of one broker's Kafka listener; `session` makes one per connection."""

    def __init__(
        self,
        service: BrokerService,
        gate: Gate,
        mechanisms: Iterable[str] = SASL_MECHANISMS,
    ) -> None:
        self.service = service
        # sasl.enabled.mechanisms: what SaslHandshake offers and takes
        self.mechanisms = sorted(set(mechanisms) & set(SASL_MECHANISMS))
        self.gate = gate  # the node's front door, shared with the HTTP edge
        self.authenticator = gate.authenticator
        # answers of many items encoded off the loop, one at a time: a slot of their own, so
        # Metadata requests for 200,000 made-up topics queue behind each other, never in
        # front of a producer's conversion
        self.encoding = asyncio.Semaphore(1)
        self.fetch_session_budget = SessionBudget()

    def session(self, host: str, certificate_principal: str | None = None) -> Session:
        """A connection's session: a verified TLS client certificate's subject is its
        principal (as on the HTTP edge), else it is anonymous until SASL says who it is."""
        session = Session(self, Caller(certificate_principal or ANONYMOUS, host))
        if certificate_principal is not None:
            session.who = Caller(certificate_principal, host, login="certificate")
            session.authenticated = True
        return session

    def fake_salt_key(self) -> bytes:
        """Keys the salts shown for users that do not exist (scram_exchange.py rule 2): the
        same on every broker, so comparing brokers' answers tells nothing either."""
        return hmac.new(self.authenticator.token_key, b"scram fake salt", "sha256").digest()

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        """Rule 3 of server.py: ApiVersions v0, UNSUPPORTED_VERSION, the versions served."""
        body: bodies.ApiVersionsResponse = {
            "error_code": UNSUPPORTED_VERSION,
            "api_keys": _api_keys(),
        }
        return messages.encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)


# An API answered by a module of its own (cluster_apis.py, user_apis.py, group_apis.py):
# a function of the connection's session and the request.
ModuleHandler = Callable[["Session", Request], Awaitable[AnyResponse | None]]
# The APIs answered by modules of their own, each a function of the session and request.
_MODULE_APIS: Final[Mapping[ApiKey, ModuleHandler]] = {
    **cluster_apis.APIS,
    **user_apis.APIS,
    **group_apis.APIS,
    **records_apis.APIS,
    **txn_apis.APIS,
}
# The APIs this listener answers (a subset of what messages.py can decode): ApiVersions
# lists only these, so a client never sends one that would close its connection.
SERVED: Final = _MODULE_APIS.keys() | frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.METADATA,
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.FIND_COORDINATOR,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.LIST_GROUPS,
        ApiKey.DELETE_GROUPS,
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.DESCRIBE_ACLS,
        ApiKey.CREATE_ACLS,
        ApiKey.DELETE_ACLS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
    }
)
# What a connection that must authenticate may send before it has (rule 4).
BEFORE_AUTHENTICATION: Final = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)


# Served narrower than messages.py decodes: ListOffsets v7 adds MAX_TIMESTAMP (-3), not
# served; SaslHandshake v0 sends raw SASL tokens after it, SaslAuthenticate-less.
_RANGES: Final[dict[int, tuple[int, int]]] = {
    ApiKey.LIST_OFFSETS: (1, 6),
    ApiKey.SASL_HANDSHAKE: (1, 1),
}


def _api_keys() -> list[bodies.ApiVersion]:
    keys: list[bodies.ApiVersion] = []
    for key, decoded in sorted(messages.API_VERSIONS.items()):
        if key in SERVED:
            low, high = _RANGES.get(key, decoded)
            keys.append({"api_key": int(key), "min_version": low, "max_version": high})
    return keys


def _once(call: Callable[[], None]) -> Callable[[], None]:
    """`call`, which runs at its first call only."""
    pending = [call]

    def once() -> None:
        if pending:
            pending.pop()()

    return once


def _calling(call: Callable[[], None]) -> Callable[[object], None]:
    """`call` as a done callback (which is given the future)."""
    return lambda _: call()


def _new_session_id() -> int:
    return secrets.randbits(31) or 1


@dataclass(slots=True)
class _InHand:
    """One request's own: the actions refused it (audited once, gate.py rule 2), the
    record bytes it produced, decompressed (the quota's charge, gate.py rule 3), the items
    it named (`_went_through`) and what gives its bytes back before a throttled answer."""

    before_throttle: Callable[[], None]
    refused: list[Action] = field(default_factory=list)
    refused_count: int = 0
    produced: int = 0
    items: int = 0


class Session:
    """One connection: who it is, and its requests, each handled in turn up to its
    `ordered` point (server.py rule 11)."""

    def __init__(self, handlers: Handlers, who: Caller) -> None:
        self.handlers = handlers
        self.service = handlers.service
        self.who = who
        self.must_authenticate = handlers.authenticator.settings.required
        self.authenticated = False
        self.close_after_answer = False  # a failed authentication: answer, then close
        self._scram: ScramExchange | None = None
        self._plain = False  # a PLAIN handshake was made: SaslAuthenticate carries the password
        self._user_version: int | None = None  # the SCRAM user's credentials version
        self._before_authentication = 0  # requests sent while it must still authenticate
        # called before a throttled answer's wait: server.py gives back the request's
        # bytes there (security/request_budget.py), so a throttled client holds none
        self.before_throttle: Callable[[], None] = lambda: None
        # set by server.py for the next request: the handler sets it once the request
        # after it may start (a produce: once its batches are appended, before its acks)
        self.ordered: asyncio.Event | None = None
        self._in_hand = _InHand(self.before_throttle)  # the latest request's
        self._fetch_session = ConnectionFetchSession(
            iter(_new_session_id, None), handlers.fetch_session_budget
        )
        self._apis: dict[int, Callable[[Request], Awaitable[AnyResponse | None]]] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.DESCRIBE_CLUSTER: self.describe_cluster,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
            ApiKey.SASL_HANDSHAKE: self.sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: self.sasl_authenticate,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self.consumer_group_heartbeat,
        }
        for key, answer in _MODULE_APIS.items():
            self._apis[key] = functools.partial(answer, self)
        assert self._apis.keys() == SERVED

    def close(self) -> None:
        """The connection is gone: what it held ends with it."""
        self._fetch_session.close()

    def refusal(self, api_key: int, api_version: int) -> str | None:
        """Why a request is refused from its header alone, before its body is decoded, or
        None (rule 4): an API not served, or anything but authenticating while this
        connection must authenticate and has not."""
        if api_key not in SERVED:
            return f"api key {api_key} is not served"
        low, high = _RANGES.get(api_key, (0, 2**15))
        if not low <= api_version <= high:
            return f"api key {api_key} version {api_version} is not served"
        if (
            self.must_authenticate
            and not self.authenticated
            and api_key not in BEFORE_AUTHENTICATION
        ):
            return "this connection must authenticate first (SASL SCRAM or PLAIN)"
        return None

    def count_unauthenticated(self) -> None:
        """Count an answer against MAX_REQUESTS_BEFORE_AUTHENTICATION while this connection
        must still authenticate: every request `handle` answers, and server.py's KIP-511
        answer to an unserved ApiVersions. A stranger gets no answer beyond the cap."""
        if self.must_authenticate and not self.authenticated:
            self._before_authentication += 1
            if self._before_authentication > MAX_REQUESTS_BEFORE_AUTHENTICATION:
                raise CloseConnection("too many requests without authenticating")

    async def handle(self, request: Request) -> bytes | None:
        refusal = self.refusal(request.api_key, request.api_version)
        if refusal is not None and request.api_key != ApiKey.API_VERSIONS:
            raise CloseConnection(refusal)
        self.count_unauthenticated()
        if self.who.login in {"scram", "plain"} and (
            self.image.user_versions.get(self.who.principal.removeprefix("User:"))
            != self._user_version
        ):  # the user's password changed, or the user is gone: as HTTP's tokens, revoked
            raise CloseConnection("the user's credentials changed")
        if request.api_key != ApiKey.API_VERSIONS:
            try:  # gate.py rule 4: the client tries another broker
                self.handlers.gate.check_ready()
            except KraftliteError as exc:
                raise CloseConnection(exc.message) from None
        started = time.perf_counter()
        name = _API_NAMES[ApiKey(request.api_key)]
        # what the handler records for this request: the next one may start before this
        # one is answered (its `ordered` point), with its own
        in_hand = self._in_hand = _InHand(self.before_throttle)
        ordered = self.ordered
        try:
            body = await self._apis[request.api_key](request)
        except CloseConnection:
            observability.record("kafka", name, time.perf_counter() - started, ["CLOSED"])
            raise
        except Exception:
            elapsed = time.perf_counter() - started
            observability.record("kafka", name, elapsed, ["UNKNOWN_SERVER_ERROR"])
            raise
        finally:
            self.handlers.gate.audit_refused(
                self.who, in_hand.refused, count=in_hand.refused_count, edge="kafka", api=name
            )
        if ordered is not None:  # (not when it failed: the connection closes)
            ordered.set()
        # its time to answer, as HTTP's, but not a quota's delay (the answer says that)
        errors = [] if body is None else await self._off_loop(_errors, body, in_hand)
        observability.record("kafka", name, time.perf_counter() - started, errors)
        return await self._answer(request, body, started, in_hand)

    async def _went_through(self, count: int = 1) -> None:
        """A handler went through `count` more of the request's items: past every
        `_YIELD_EVERY`, others get the event loop (heartbeats and leases ride on it), and
        past the first, the answer is encoded off it (`_off_loop`)."""
        in_hand = self._in_hand
        before = in_hand.items
        in_hand.items += count
        if before // _YIELD_EVERY != in_hand.items // _YIELD_EVERY:
            await asyncio.sleep(0)

    async def _off_loop(self, work: Callable[[B], T], body: B, in_hand: _InHand | None = None) -> T:
        """`work(body)` inline for a request of few items, else on a worker thread, one at
        a time: encoding the answer to a Metadata request for 150,000 topics takes a second
        of CPU, which must not be the loop's. `in_hand`: the request's (the latest's by
        default)."""
        if (in_hand or self._in_hand).items <= _YIELD_EVERY:
            return work(body)
        async with self.handlers.encoding:
            return await asyncio.to_thread(work, body)

    def _encode(self, request: Request) -> Callable[[AnyResponse], bytes]:
        def encode(body: AnyResponse) -> bytes:
            return messages.encode_response(
                request.api_key, request.api_version, request.correlation_id, body
            )

        return encode

    async def _answer(
        self, request: Request, body: AnyResponse | None, started: float, in_hand: _InHand
    ) -> bytes | None:
        """The encoded answer, held back (and saying so) while the client is over quota."""
        quotas = self.handlers.gate.quotas_of(self.who)
        if body is None:
            if quotas:
                delay_ms = self._throttle_ms(quotas, request, started, 0, in_hand)
                if delay_ms:
                    in_hand.before_throttle()
                    await asyncio.sleep(delay_ms / 1000)
            return None
        encode = self._encode(request)
        answer = await self._off_loop(encode, body, in_hand)
        if not quotas:
            return answer
        delay_ms = self._throttle_ms(quotas, request, started, len(answer), in_hand)
        if not delay_ms:
            return answer
        # over quota: hold the answer back, as HTTP does, and say so where the answer has
        # the field (every one but SaslHandshake's and SaslAuthenticate's)
        in_hand.before_throttle()
        await asyncio.sleep(delay_ms / 1000)
        if not messages.has_response_field(
            request.api_key, request.api_version, "throttle_time_ms"
        ):
            return answer
        cast("dict[str, object]", body)["throttle_time_ms"] = delay_ms
        return await self._off_loop(encode, body, in_hand)

    def pipelines(self) -> bool:
        """Whether the server may start this connection's next request at the one in
        hand's `ordered` point rather than once it is answered (server.py rule 11): not
        before it has authenticated where it must, nor while a quota applies (a throttled
        client's connection is muted, as Kafka's)."""
        if self.must_authenticate and not self.authenticated:
            return False
        return not self.handlers.gate.quotas_of(self.who)

    def _throttle_ms(
        self,
        quotas: Mapping[str, float],
        request: Request,
        started: float,
        answered: int,
        in_hand: _InHand,
    ) -> int:
        """The gate's quotas (gate.py rule 3), one set per broker with the HTTP edge's:
        handling time for every request, record bytes produced (decompressed),
        and bytes fetched."""
        return self.handlers.gate.throttle_ms(
            self.who,
            quotas,
            handling_s=time.perf_counter() - started,
            produced=in_hand.produced,
            fetched=answered if request.api_key == ApiKey.FETCH else 0,
        )

    # -- authorization ---------------------------------------------------------------------

    def _authorized_operations(self, kind: ResourceType, name: str) -> int:
        """What the client may do to a resource, as IncludeAuthorizedOperations answers it
        (asking is no attempt: nothing is audited)."""
        return acl_apis.authorized_operations(
            functools.partial(self.handlers.gate.allowed, self.who), kind, name
        )

    def _may(
        self, operation: Operation, kind: ResourceType, name: str, *, listing: bool = False
    ) -> bool:
        """Rule 4. A refusal is audited once per request, with a count (gate.py rule 2),
        unless it only filters a listing (topics or groups the client may not see are
        left out silently)."""
        action = Action(operation, kind, name)
        if self.handlers.gate.allowed(self.who, action):
            return True
        if not listing:
            in_hand = self._in_hand
            in_hand.refused_count += 1
            if len(in_hand.refused) < AUDITED_NAMES:
                in_hand.refused.append(action)
        return False

    def _may_topic(self, operation: Operation, topic: str, *, listing: bool = False) -> bool:
        """Internal topics (`__consumer_offsets`) are the brokers' own: no Kafka client
        reads, writes, lists or commits them (the HTTP edge's `brokers_only`)."""
        if is_internal_topic(topic):
            return False
        return self._may(operation, ResourceType.TOPIC, topic, listing=listing)

    @property
    def image(self) -> MetadataImage:
        return self.service.broker.replicas.image

    # -- ApiVersions, Metadata ---------------------------------------------------------------

    async def api_versions(self, request: Request) -> bodies.ApiVersionsResponse:
        return {"error_code": NONE, "api_keys": _api_keys()}

    def _brokers(self) -> list[bodies.MetadataResponseBroker]:
        answer: list[bodies.MetadataResponseBroker] = []
        for broker in sorted(self.image.brokers.values(), key=lambda b: b.broker_id):
            if broker.fenced or broker.kafka is None:
                continue
            host, port = _split_address(broker.kafka)
            answer.append(
                {"node_id": broker.broker_id, "host": host, "port": port, "rack": broker.rack}
            )
        return answer

    async def metadata(self, request: Request) -> bodies.MetadataResponse:
        """Brokers (live ones with a Kafka listener), and topics: all the client may
        describe (internal ones never), or those asked for by name or id; a topic asked for
        by name that does not exist is created first where the request allows it
        (`_auto_create`). A partition whose leader is fenced or has no Kafka listener has
        leader -1 (LEADER_NOT_AVAILABLE)."""
        image = self.image
        body = cast(bodies.MetadataRequest, request.body)
        wanted = body["topics"]
        reachable = {b for b, r in image.brokers.items() if not r.fenced and r.kafka is not None}
        live = {b for b, r in image.brokers.items() if not r.fenced}
        topics: list[bodies.MetadataResponseTopic] = []
        unnamed = None if request.api_version >= 12 else ""  # a null name from v12 on
        if wanted is None or (request.api_version == 0 and not wanted):
            asked: list[tuple[str, uuid.UUID | None]] = [
                (t.name, None)
                for t in sorted(image.topics.values(), key=lambda t: t.name)
                if self._may_topic(Operation.DESCRIBE, t.name, listing=True)
            ]
        else:
            asked = []
            for entry in wanted:
                topic_id = entry["topic_id"]
                if entry["name"] is None and topic_id not in (None, _NO_TOPIC_ID):
                    found = image.topics.get(topic_id.hex)
                    if found is None:
                        topics.append(
                            {"error_code": UNKNOWN_TOPIC_ID, "name": unnamed, "topic_id": topic_id}
                        )
                        continue
                    asked.append((found.name, topic_id))
                else:
                    asked.append((entry["name"] or "", None))
        auto_create = request.api_version < 4 or body["allow_auto_topic_creation"]
        not_created: dict[str, int] = {}
        if wanted is not None and auto_create:
            not_created = await self._auto_create([n for n, by_id in asked if by_id is None])
            image = self.image  # with the topics just created
        for name, by_id in asked:
            await self._went_through()
            topic = image.topic(name) if name else None
            if not self._may_topic(Operation.DESCRIBE, name):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                # asked by id: the id, never the name (Kafka's KafkaApis does the same)
                refused: bodies.MetadataResponseTopic = {"error_code": int(code), "name": name}
                if by_id is not None:
                    refused.update({"name": unnamed, "topic_id": by_id})
                topics.append(refused)
                continue
            if topic is None:
                missing = not_created.get(name, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                topics.append({"error_code": missing, "name": name})
                continue
            partitions: list[bodies.MetadataResponsePartition] = []
            for index, p in sorted(topic.partitions.items()):
                leader = p.leader if p.leader in reachable else -1
                partitions.append(
                    {
                        "error_code": NONE if leader >= 0 else LEADER_NOT_AVAILABLE,
                        "partition_index": index,
                        "leader_id": leader,
                        "leader_epoch": p.leader_epoch,
                        "replica_nodes": list(p.replicas),
                        "isr_nodes": list(p.isr),
                        "offline_replicas": [r for r in p.replicas if r not in live],
                    }
                )
            topics.append(
                {
                    "error_code": NONE,
                    "name": topic.name,
                    "topic_id": _topic_id(topic.topic_id),
                    "is_internal": False,
                    "partitions": partitions,
                    "topic_authorized_operations": (
                        self._authorized_operations(ResourceType.TOPIC, topic.name)
                        if request.api_version >= 8 and body["include_topic_authorized_operations"]
                        else acl_apis.AUTHORIZED_OPERATIONS_NOT_ASKED
                    ),
                }
            )
        return {
            "brokers": self._brokers(),
            "cluster_id": self.service.broker.cluster_id,
            # admin requests go to the "controller": any broker passes them to the quorum
            "controller_id": self.service.broker.broker_id,
            "topics": topics,
            "cluster_authorized_operations": (
                self._authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
                if 8 <= request.api_version <= 10 and body["include_cluster_authorized_operations"]
                else acl_apis.AUTHORIZED_OPERATIONS_NOT_ASKED
            ),
        }

    async def _auto_create(self, names: list[str]) -> dict[str, int]:
        """The service's rule 6 for a Metadata request: the topics named that do not exist,
        that the client may describe, created where it may CREATE them (on the cluster or
        the topic, as Kafka asks), at most _AUTO_CREATE_PER_REQUEST of them. Answers the
        Kafka error code of each one not created (absent: created, or not to be)."""
        service, gate = self.service, self.handlers.gate
        codes: dict[str, int] = {}
        creating: list[str] = []
        may_create_any = gate.allowed(
            self.who, Action(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
        )
        for name in dict.fromkeys(names):
            await self._went_through()
            if not name or is_internal_topic(name) or not service.auto_creates(name):
                continue
            if not gate.allowed(self.who, Action(Operation.DESCRIBE, ResourceType.TOPIC, name)):
                continue  # answered TOPIC_AUTHORIZATION_FAILED as any topic it may not see
            if not (may_create_any or self._may_topic(Operation.CREATE, name)):
                codes[name] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif len(creating) < _AUTO_CREATE_PER_REQUEST:
                creating.append(name)
            else:  # the client asks again: retriable
                codes[name] = LEADER_NOT_AVAILABLE

        async def create(name: str) -> None:
            try:
                await asyncio.wait_for(
                    service.auto_create(name, headers=self._as_client()), _AUTO_CREATE_TIMEOUT_S
                )
            except TimeoutError:
                codes[name] = LEADER_NOT_AVAILABLE
            except KraftliteError as exc:
                # a bad name or a refusal is the client's to know; anything else (too few
                # live brokers, no controller) is retriable for it: librdkafka fails queued
                # records at once on any other error for a topic with no partitions, and
                # Kafka's brokers answer so too
                final = exc.code in {
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                }
                codes[name] = kafka_code(exc) if final else LEADER_NOT_AVAILABLE
            else:
                if self.image.topic(name) is None:  # created, not yet in this metadata
                    codes[name] = LEADER_NOT_AVAILABLE

        await asyncio.gather(*(create(name) for name in creating))
        return codes

    # -- Produce -----------------------------------------------------------------------------

    async def produce(self, request: Request) -> bodies.ProduceResponse | None:
        """Kafka's Produce. Each partition's one batch is checked, kept as sent or
        converted, and appended (service.py `from_kafka_batch`), concurrently across
        partitions. With acks=0 a failed
        partition closes the connection, as Kafka does, so the client refreshes its
        metadata; a request naming a partition twice answers INVALID_REQUEST for both."""
        body = cast(bodies.ProduceRequest, request.body)
        transactional_id = body["transactional_id"]
        if transactional_id is not None and not txn_apis.may_transactional_id(
            self, transactional_id
        ):  # [P3]: the whole request
            return {
                "responses": [
                    {
                        "name": topic["name"],
                        "partition_responses": [
                            {
                                "index": part["index"],
                                "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                "base_offset": -1,
                                "log_append_time_ms": -1,
                                "log_start_offset": -1,
                            }
                            for part in topic["partition_data"]
                        ],
                    }
                    for topic in body["topic_data"]
                ]
            }
        acks = {-1: Acks.ALL, 1: Acks.LEADER, 0: Acks.NONE}.get(body["acks"])
        timeout_s = max(0, min(int(body["timeout_ms"]), 300_000)) / 1000
        entries = [
            (topic["name"], part["index"], part["records"])
            for topic in body["topic_data"]
            for part in topic["partition_data"]
        ]
        seen = collections.Counter((name, index) for name, index, _ in entries)
        budget = [REQUEST_DECOMPRESSED_MAX_BYTES]  # shared by the request's partitions
        started: list[asyncio.Future[bodies.PartitionProduceResponse]] = []
        # the next request may start once every partition's batch is appended (or failed):
        # appends stay in request order, the waits for acks overlap (server.py rule 11)
        in_hand, ordered = self._in_hand, self.ordered
        left = len(entries)

        def one_in_order() -> None:
            nonlocal left
            left -= 1
            if left == 0 and ordered is not None:
                ordered.set()

        try:
            for name, index, data in entries:
                # each partition's check, conversion and append starts at its task's
                # first step: started _PRODUCE_PER_PASS at a time, a Produce naming
                # thousands of partitions leaves the loop to others between them (not ~50
                # us each, all in one pass); a large batch's check may wait for its share
                # of the loop (service.py `LoopShare`) or run on a worker thread
                if started and len(started) % _PRODUCE_PER_PASS == 0:
                    await asyncio.sleep(0)
                in_order = _once(one_in_order)
                future: asyncio.Future[bodies.PartitionProduceResponse] = asyncio.ensure_future(
                    self._produce_one(
                        name,
                        index,
                        data,
                        acks,
                        timeout_s,
                        budget=budget,
                        transactional_id=transactional_id,
                        in_hand=in_hand,
                        appended=in_order,
                    )
                    if seen[(name, index)] == 1
                    else _produce_error(index, INVALID_REQUEST, "the partition is named twice")
                )
                future.add_done_callback(_calling(in_order))
                started.append(future)
            await self._went_through(len(entries))
            answers = await asyncio.gather(*started)
        except BaseException:  # the connection went: as gather's own, its partitions' too
            for pending in started:
                pending.cancel()
            raise
        if acks is Acks.NONE:
            if any(answer["error_code"] != NONE for answer in answers):
                raise CloseConnection("an acks=0 produce failed")
            return None
        by_topic: dict[str, list[bodies.PartitionProduceResponse]] = {}
        for (name, _, _), answer in zip(entries, answers, strict=True):
            by_topic.setdefault(name, []).append(answer)
        return {
            "responses": [
                {"name": name, "partition_responses": parts} for name, parts in by_topic.items()
            ]
        }

    async def _produce_one(
        self,
        topic: str,
        index: int,
        data: bytes | None,
        acks: Acks | None,
        timeout_s: float,
        *,
        budget: list[int],
        transactional_id: str | None = None,
        in_hand: _InHand,
        appended: Callable[[], None],
    ) -> bodies.PartitionProduceResponse:
        if acks is None:
            return await _produce_error(index, INVALID_REQUIRED_ACKS, "acks must be -1, 0 or 1")
        if not self._may_topic(Operation.WRITE, topic):
            return await _produce_error(index, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        try:
            leadership = self.service.leader(topic, index)
            left = budget[0]
            try:
                batch = await self.service.from_kafka_batch(
                    leadership, data or b"", budget, transactional_id
                )
            finally:
                # the quota's charge (gate.py rule 3): what the records decompressed to
                # (a batch kept as sent is stored compressed, but readers unpack it), or
                # all the budget a batch that would not decompress spent
                in_hand.produced += max(len(data or b""), left - budget[0])
            if transactional_id is not None and batch_format.is_transactional(
                batch_format.read_header(batch)
            ):
                produced = await self.service.produce_transactional(
                    topic,
                    index,
                    batch,
                    acks,
                    timeout_s,
                    transactional_id,
                    sent_size=len(data or b""),
                    appended=appended,
                )
            else:
                produced = await self.service.produce(
                    topic,
                    index,
                    batch,
                    acks,
                    timeout_s,
                    principal=self.who.principal,
                    sent_size=len(data or b""),
                    appended=appended,
                )
        except KraftliteError as exc:
            answer = await _produce_error(index, kafka_code(exc), _message(exc))
            keyless = exc.details.get("record_indexes", [])  # a compacted topic's refusal
            if keyless:  # Kafka's record_errors (KIP-467): the client fails those records
                answer["record_errors"] = [  # and the batch's others as not at fault
                    {"batch_index": i, "batch_index_error_message": "no key"} for i in keyless
                ]
            return answer
        except WireError as exc:  # CorruptRecordsError included
            return await _produce_error(
                index, int(ErrorCode.CORRUPT_MESSAGE), str(exc)[:MAX_MESSAGE]
            )
        return {
            "index": index,
            "error_code": NONE,
            "base_offset": -1 if produced.first_offset is None else produced.first_offset,
            "log_append_time_ms": -1,
            "log_start_offset": produced.log_start_offset,
        }

    # -- Fetch, ListOffsets ------------------------------------------------------------------

    async def fetch(self, request: Request) -> bodies.FetchResponse:
        """Kafka's Fetch, with a fetch session when the client asks for one
        (fetch_sessions.py). Stored batches are converted to Kafka's format here, on a
        worker thread when the answer is large (rule 2)."""
        body = cast(bodies.FetchRequest, request.body)
        if body["replica_id"] >= 0:
            raise CloseConnection("followers replicate over the internal plane")
        named: list[tuple[PartitionKey, Position]] = []
        for topic in body["topics"]:
            for part in topic["partitions"]:
                position = Position(
                    part["fetch_offset"], part["partition_max_bytes"], part["current_leader_epoch"]
                )
                named.append(((topic["topic"], part["partition"]), position))
        forgotten = [
            (topic["topic"], index)
            for topic in body.get("forgotten_topics_data", [])
            for index in topic["partitions"]
        ]
        try:
            plan = self._fetch_session.plan(
                body.get("session_id", NO_SESSION),
                body.get("session_epoch", FINAL_EPOCH),
                named,
                forgotten,
                self._may_hold,
            )
        except KraftliteError as exc:
            return {"error_code": kafka_code(exc), "session_id": NO_SESSION, "responses": []}
        wanted: list[FetchWanted] = []
        refused: dict[PartitionKey, int] = {}
        for (name, index), position in plan.partitions:
            await self._went_through()
            if not self._may_topic(Operation.READ, name):
                refused[(name, index)] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif (code := self._epoch_refusal(name, index, position.leader_epoch)) is not None:
                refused[(name, index)] = code
            else:
                wanted.append(FetchWanted(name, index, position.fetch_offset, position.max_bytes))
        try:
            results: list[Fetched | KraftliteError] = await self.service.fetch_many(
                wanted,
                body["min_bytes"],
                body["max_bytes"],
                body["max_wait_ms"],
                committed=body.get("isolation_level", 0) == READ_COMMITTED,
            )
        except KraftliteError as exc:
            results = [exc] * len(wanted)
        found = {(w.topic, w.partition): r for w, r in zip(wanted, results, strict=True)}
        limits = {(w.topic, w.partition): w.max_bytes for w in wanted}
        converted = await self._kafka_records(
            [
                (r.data, self._fetch_codec(key[0], request.api_version), limits[key])
                for key, r in found.items()
                if isinstance(r, Fetched) and r.data
            ],
            zstd_readable=request.api_version >= 10,
            max_bytes=min(body["max_bytes"], self.service.broker.settings.limits.fetch_max_bytes),
        )
        by_topic: dict[str, list[bodies.FetchResponsePartitionData]] = {}
        for key, position in plan.partitions:
            result = found.get(key)
            code = refused.get(key)
            if code is None and isinstance(result, KraftliteError):
                code = kafka_code(result)
            if code is not None or not isinstance(result, Fetched):
                entry: bodies.FetchResponsePartitionData = {
                    "partition_index": key[1],
                    "error_code": INVALID_REQUEST if code is None else code,
                    "high_watermark": -1,
                    "records": b"",  # as Kafka: empty, never null (librdkafka cannot read null)
                }
                news = ConnectionFetchSession.must_answer(
                    plan, position, error=True, records=False, high_watermark=-1, log_start=-1
                )
            else:
                entry = {
                    "partition_index": key[1],
                    "error_code": NONE,
                    "high_watermark": result.high_watermark,
                    "last_stable_offset": result.last_stable_offset,
                    "log_start_offset": result.log_start_offset,
                    "aborted_transactions": None
                    if result.aborted is None
                    else [
                        {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
                        for txn in result.aborted
                    ],
                    "preferred_read_replica": -1,
                    "records": converted.get(id(result.data), b""),
                }
                news = ConnectionFetchSession.must_answer(
                    plan,
                    position,
                    error=False,
                    records=bool(result.data),
                    high_watermark=result.high_watermark,
                    log_start=result.log_start_offset,
                    last_stable=result.last_stable_offset,
                )
            if news:
                by_topic.setdefault(key[0], []).append(entry)
        ConnectionFetchSession.returned_records(
            plan, [k for k, r in found.items() if isinstance(r, Fetched) and r.data]
        )
        return {
            "error_code": NONE,
            "session_id": plan.session_id,
            "responses": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
        }

    def _may_hold(self, key: PartitionKey) -> bool:
        """A fetch session holds only partitions that exist and this client may read
        (fetch_sessions.py rule 3); asking is not a refusal to audit."""
        topic = self.image.topic(key[0])
        return (
            topic is not None
            and key[1] in topic.partitions
            and self._may_topic(Operation.READ, key[0], listing=True)
        )

    def _epoch_refusal(self, topic: str, index: int, leader_epoch: int) -> int | None:
        """KIP-320 for Fetch: a stale or future `current_leader_epoch` is refused."""
        if leader_epoch < 0:
            return None
        try:
            self.service.check_leader_epoch(topic, index, leader_epoch)
        except KraftliteError as exc:
            return kafka_code(exc)
        return None

    def _fetch_codec(self, topic: str, version: int) -> records.Compression:
        """The codec a topic's `compression.type` asks fetched batches to carry; none for
        zstd before Fetch v10, which clients that old cannot read (Kafka answers them
        UNSUPPORTED_COMPRESSION_TYPE; kraftlite has the records uncompressed)."""
        found = self.image.topic(topic)
        configs = {} if found is None else found.configs
        codec = (
            stored_batch.topic_codec(effective_config(configs, "compression.type"))
            or records.Compression.NONE
        )
        if codec is records.Compression.ZSTD and version < 10:
            return records.Compression.NONE
        return codec

    async def _kafka_records(
        self,
        stored: list[tuple[bytes, records.Compression, int]],
        *,
        zstd_readable: bool,
        max_bytes: int,
    ) -> dict[int, bytes]:
        """Each stored record set (by id) as Kafka batches, at most about its partition's
        max bytes and `max_bytes` in all (the first gets one batch at least; a partition
        past the total gets none this time): those kept as sent as they are, the others
        converted, in its codec (protocol/stored.py rule 4); off the loop when much is to
        be converted (or compressed), and always when a kept batch is (a client before
        Fetch v10 gets zstd ones decompressed, whose size the stored bytes do not tell)."""

        def convert() -> dict[int, bytes]:
            answers: dict[int, bytes] = {}
            left = max_bytes
            for data, codec, limit in stored:
                if left <= 0:
                    answers[id(data)] = b""
                    continue
                answer = stored_batch.as_kafka(
                    data, codec, zstd_readable=zstd_readable, max_bytes=min(limit, left)
                )
                answers[id(data)] = answer
                left -= len(answer)
            return answers

        kept = [stored_batch.kafka_bytes(data) for data, _, _ in stored]
        inline = sum(
            (len(data) - kept_bytes) * (1 if codec is records.Compression.NONE else _COMPRESS_COST)
            for (data, codec, _), kept_bytes in zip(stored, kept, strict=True)
        )
        if inline <= _INLINE_CONVERT_BYTES and (zstd_readable or not any(kept)):
            return convert()
        async with self.service.converting:
            return await asyncio.to_thread(convert)

    async def list_offsets(self, request: Request) -> bodies.ListOffsetsResponse:
        body = cast(bodies.ListOffsetsRequest, request.body)
        topics: list[bodies.ListOffsetsTopicResponse] = []
        for topic in body.get("topics", []):
            name = topic["name"]
            parts: list[bodies.ListOffsetsPartitionResponse] = []
            for part in topic.get("partitions", []):
                await self._went_through()
                index, timestamp = part["partition_index"], part["timestamp"]
                entry: bodies.ListOffsetsPartitionResponse = {
                    "partition_index": index,
                    "timestamp": -1,
                    "offset": -1,
                }
                if not self._may_topic(Operation.DESCRIBE, name):
                    entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    parts.append(entry)
                    continue
                at: str | int = {-1: "latest", -2: "earliest"}.get(timestamp, timestamp)
                try:  # (-3, the largest timestamp, is INVALID_REQUEST: not served)
                    leadership = self.service.leader(name, index)
                    offset, found = await self.service.list_offset(
                        name,
                        index,
                        at,
                        current_leader_epoch=part["current_leader_epoch"],
                        committed=body.get("isolation_level", 0) == READ_COMMITTED,
                    )
                except KraftliteError as exc:
                    entry["error_code"] = kafka_code(exc)
                    parts.append(entry)
                    continue
                if isinstance(at, int) and found is None:
                    offset = -1  # Kafka: no record at or after that time
                entry.update(
                    {
                        "error_code": NONE,
                        "offset": offset,
                        "timestamp": -1 if found is None else found,
                        "leader_epoch": leadership.leader_epoch,
                    }
                )
                parts.append(entry)
            topics.append({"name": name, "partitions": parts})
        return {"topics": topics}

    # -- groups: coordinator and offsets ---------------------------------------------------

    async def find_coordinator(self, request: Request) -> bodies.FindCoordinatorResponse:
        body = cast(bodies.FindCoordinatorRequest, request.body)
        keys = body["coordinator_keys"] if request.api_version >= 4 else [body["key"]]
        answers = [await self._coordinator_of(str(key), body.get("key_type", 0)) for key in keys]
        if request.api_version >= 4:
            return {"coordinators": answers}
        only = answers[0]  # before v4, one key's answer, flat
        return {
            "error_code": only["error_code"],
            "error_message": only["error_message"],
            "node_id": only["node_id"],
            "host": only["host"],
            "port": only["port"],
        }

    async def _coordinator_of(self, group: str, key_type: int) -> bodies.Coordinator:
        def error(code: int, message: str) -> bodies.Coordinator:
            return {
                "key": group,
                "error_code": code,
                "error_message": message,
                "node_id": -1,
                "host": "",
                "port": -1,
            }

        if key_type == 1:
            return await self._transaction_coordinator(group, error)
        if key_type != 0:
            return error(INVALID_REQUEST, "only group and transaction coordinators are served")
        refused = self._group_refusal(group, Operation.DESCRIBE)
        if refused is not None:
            return error(refused, "not a group this client may use")
        coordinator = self.service.coordinator
        try:
            await coordinator.ensure_offsets_topic()
        except KraftliteError as exc:
            return error(int(ErrorCode.COORDINATOR_NOT_AVAILABLE), _message(exc))
        image = self.image
        topic = image.topic(OFFSETS_TOPIC)
        registration = (
            None if topic is None else topic.partitions.get(coordinator.offsets_partition(group))
        )
        leader = None if registration is None else image.brokers.get(registration.leader)
        if leader is None or leader.fenced or leader.kafka is None:
            return error(
                int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "the group has no coordinator now"
            )
        host, port = _split_address(leader.kafka)
        return {
            "key": group,
            "error_code": NONE,
            "error_message": None,
            "node_id": leader.broker_id,
            "host": host,
            "port": port,
        }

    async def _transaction_coordinator(
        self, transactional_id: str, error: Callable[[int, str], bodies.Coordinator]
    ) -> bodies.Coordinator:
        """[C1-C3]: the leader of the id's `__transaction_state` partition, for a caller
        that may DESCRIBE the id (WRITE implies it); the topic is made on first use."""
        if not transactional_id or len(transactional_id) > names.MAX_TRANSACTIONAL_ID:
            return error(INVALID_REQUEST, "a transactional id is 1-1024 characters")
        if not self._may(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return error(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorized for this id")
        transactions = self.service.transactions
        try:
            await transactions.ensure_state_topic()
        except KraftliteError as exc:
            return error(int(ErrorCode.COORDINATOR_NOT_AVAILABLE), _message(exc))
        image = self.image
        topic = image.topic(TXN_TOPIC)
        index = transactions.state_partition(transactional_id)
        registration = None if topic is None else topic.partitions.get(index)
        leader = None if registration is None else image.brokers.get(registration.leader)
        if leader is None or leader.fenced or leader.kafka is None:
            return error(int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "the id has no coordinator now")
        host, port = _split_address(leader.kafka)
        return {
            "key": transactional_id,
            "error_code": NONE,
            "error_message": None,
            "node_id": leader.broker_id,
            "host": host,
            "port": port,
        }

    async def offset_commit(self, request: Request) -> bodies.OffsetCommitResponse:
        body = cast(bodies.OffsetCommitRequest, request.body)
        group = body["group_id"]
        member_id = body["member_id"] or None
        epoch = body["generation_id_or_member_epoch"] if request.api_version >= 1 else -1
        group_refused = self._group_refusal(group)
        wanted: list[tuple[tuple[str, int], CommittedOffset]] = []
        codes: dict[tuple[str, int], int] = {}
        for topic in body["topics"]:
            for part in topic["partitions"]:
                key = (topic["name"], part["partition_index"])
                if group_refused is not None:
                    codes[key] = group_refused
                elif not _topic_name_ok(topic["name"]):
                    codes[key] = int(ErrorCode.INVALID_TOPIC_EXCEPTION)
                elif key[1] < 0 or part["committed_offset"] < 0:
                    codes[key] = int(ErrorCode.INVALID_REQUEST)
                elif not self._may_topic(Operation.READ, topic["name"]):
                    codes[key] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                else:
                    codes[key] = NONE
                    wanted.append(
                        (
                            key,
                            CommittedOffset(
                                part["committed_offset"],
                                part.get("committed_metadata") or "",
                                max(-1, part.get("committed_leader_epoch", -1)),
                            ),
                        )
                    )
        if wanted:
            try:
                await self.service.coordinator.commit(
                    group,
                    member_id,
                    None,
                    wanted,
                    generation=epoch,
                    instance_id=_instance_id(body.get("group_instance_id")),
                )
            except KraftliteError as exc:
                for key, _ in wanted:
                    codes[key] = kafka_code(exc)
        by_topic: dict[str, list[bodies.OffsetCommitResponsePartition]] = {}
        for (name, index), code in codes.items():
            by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
        return {"topics": [{"name": n, "partitions": p} for n, p in by_topic.items()]}

    async def offset_fetch(self, request: Request) -> bodies.OffsetFetchResponse:
        """OffsetFetch: v8+ asks for several groups at once, earlier versions for one."""
        body = cast(bodies.OffsetFetchRequest, request.body)
        stable = bool(body.get("require_stable", False))
        if request.api_version < 8:
            code, topics = self._group_offsets(body["group_id"], body.get("topics"), stable)
            return {"error_code": code, "topics": topics}
        groups: list[bodies.OffsetFetchResponseGroup] = []
        for group in body.get("groups", []):
            code, topics = self._group_offsets(group["group_id"], group.get("topics"), stable)
            groups.append({"group_id": group["group_id"], "error_code": code, "topics": topics})
        return {"groups": groups}

    def _group_offsets(
        self,
        group: str,
        asked: Sequence[bodies.OffsetFetchRequestTopic] | None,
        stable: bool = False,
    ) -> tuple[int, list[bodies.OffsetFetchResponseTopic]]:
        """(group error code, topics) of one group's committed offsets: the partitions
        asked (-1 where none is committed), or every committed one when `asked` is None;
        topics the client may not describe are left out. `stable` (KIP-447's
        RequireStable): a partition an open transaction commits an offset of is
        UNSTABLE_OFFSET_COMMIT, which the client retries [G5]."""
        refused = self._group_refusal(group, Operation.DESCRIBE)
        if refused is not None:
            return refused, []
        try:
            committed = self.service.coordinator.committed(group)
        except KraftliteError as exc:
            return kafka_code(exc), []
        if asked is None:
            keys = sorted(committed)
        else:
            keys = [(t["name"], i) for t in asked for i in t.get("partition_indexes", [])]
        by_topic: dict[str, list[bodies.OffsetFetchResponsePartition]] = {}
        for name, index in keys:
            if not self._may_topic(Operation.DESCRIBE, name, listing=True):
                continue
            c = committed.get((name, index))
            unstable = stable and self.service.coordinator.unstable(group, (name, index))
            if unstable:
                c = None
            by_topic.setdefault(name, []).append(
                {
                    "partition_index": index,
                    "committed_offset": -1 if c is None else c.offset,
                    "committed_leader_epoch": -1 if c is None else c.leader_epoch,
                    "metadata": "" if c is None else c.metadata,
                    "error_code": int(ErrorCode.UNSTABLE_OFFSET_COMMIT) if unstable else NONE,
                }
            )
        return NONE, [{"name": n, "partitions": p} for n, p in by_topic.items()]

    # -- classic groups (groups/classic.py) ---------------------------------------------------

    def _group_refusal(self, group: str, operation: Operation = Operation.READ) -> int | None:
        """The error code that refuses a group request before it costs anything, if any:
        group names as the HTTP edge takes them (1-249 characters, no control characters)."""
        if not names.is_name(group, names.MAX_GROUP_NAME):
            return INVALID_GROUP_ID
        if not self._may(operation, ResourceType.GROUP, group):
            return int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return None

    async def join_group(self, request: Request) -> bodies.JoinGroupResponse:
        body = cast(bodies.JoinGroupRequest, request.body)
        group = body["group_id"]
        answer: bodies.JoinGroupResponse = {
            "generation_id": -1,
            "member_id": body["member_id"],
            "leader": "",
        }
        refused = self._group_refusal(group)
        if refused is not None:
            return {**answer, "error_code": refused}
        protocols = [(p["name"], bytes(p["metadata"] or b"")) for p in body["protocols"]]
        if len(protocols) > MAX_PROTOCOLS or sum(len(m) for _, m in protocols) > MAX_METADATA:
            # what every member offers is kept and sent to the leader: bounded
            return {**answer, "error_code": int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)}
        session = body["session_timeout_ms"]
        rebalance = body["rebalance_timeout_ms"] if request.api_version >= 1 else session
        try:
            instance = _instance_id(body.get("group_instance_id"))  # before making a group
            await self.service.coordinator.ensure_offsets_topic()
            classic = await self.service.coordinator.classic_for_join(group, session)
            joined = await classic.join(
                member_id=body["member_id"],
                instance_id=instance,
                client_id=request.client_id or "",
                client_host=self.who.host,
                session_timeout_ms=session,
                rebalance_timeout_ms=max(0, min(rebalance, MAX_REBALANCE_TIMEOUT_MS)),
                protocol_type=body["protocol_type"],
                protocols=protocols,
                skip_assignment=request.api_version >= 9,
            )
        except KraftliteError as exc:
            return {**answer, "error_code": kafka_code(exc)}
        return cast(bodies.JoinGroupResponse, {"error_code": NONE, **joined})

    async def sync_group(self, request: Request) -> bodies.SyncGroupResponse:
        body = cast(bodies.SyncGroupRequest, request.body)
        group = body["group_id"]
        refused = self._group_refusal(group)
        if refused is not None:
            return {"error_code": refused}
        assignments = {a["member_id"]: bytes(a["assignment"] or b"") for a in body["assignments"]}
        try:
            classic = self.service.coordinator.classic(group)
            protocol_type, protocol_name, assignment = await classic.sync(
                body["member_id"],
                body["generation_id"],
                assignments,
                _instance_id(body.get("group_instance_id")),
            )
        except KraftliteError as exc:
            if exc.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:  # as Kafka: older clients
                return {"error_code": int(ErrorCode.REBALANCE_IN_PROGRESS)}  # do not expect 14
            return {"error_code": kafka_code(exc)}
        return {
            "error_code": NONE,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "assignment": assignment,
        }

    async def heartbeat(self, request: Request) -> bodies.HeartbeatResponse:
        body = cast(bodies.HeartbeatRequest, request.body)
        refused = self._group_refusal(body["group_id"])
        if refused is not None:
            return {"error_code": refused}
        try:
            classic = self.service.coordinator.classic(body["group_id"])
            classic.heartbeat(
                body["member_id"],
                body["generation_id"],
                _instance_id(body.get("group_instance_id")),
            )
        except KraftliteError as exc:
            if exc.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:  # Kafka answers a loading
                return {"error_code": NONE}  # group's heartbeat blindly
            return {"error_code": kafka_code(exc)}
        return {"error_code": NONE}

    async def leave_group(self, request: Request) -> bodies.LeaveGroupResponse:
        body = cast(bodies.LeaveGroupRequest, request.body)
        group = body["group_id"]
        leaving: list[bodies.MemberIdentity]
        if request.api_version < 3:
            leaving = [{"member_id": body["member_id"], "group_instance_id": None}]
        else:
            leaving = list(body["members"])
        refused = self._group_refusal(group)
        if refused is not None:
            return {"error_code": refused}
        results: list[bodies.MemberResponse] = []
        for member in leaving:
            code = NONE
            try:
                self.service.coordinator.classic(group).leave(
                    member["member_id"], _instance_id(member.get("group_instance_id"))
                )
            except KraftliteError as exc:
                code = kafka_code(exc)
            results.append({**member, "error_code": code})
            if code in {
                int(ErrorCode.NOT_COORDINATOR),
                int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
            }:
                return {"error_code": code}  # the whole request's, as Kafka answers them
        if request.api_version < 3:
            return {"error_code": results[0]["error_code"]}
        return {"error_code": NONE, "members": results}

    async def describe_groups(self, request: Request) -> bodies.DescribeGroupsResponse:
        body = cast(bodies.DescribeGroupsRequest, request.body)
        groups: list[bodies.DescribeGroupsResponseDescribedGroup] = []
        for group in body["groups"]:
            refused = self._group_refusal(group, Operation.DESCRIBE)
            entry: bodies.DescribeGroupsResponseDescribedGroup = {
                "group_id": group,
                "group_state": "Dead",
                "members": [],
            }
            if refused is not None:
                groups.append({**entry, "error_code": refused})
                continue
            try:
                described = self.service.coordinator.describe_classic(group)
            except KraftliteError as exc:
                groups.append({**entry, "error_code": kafka_code(exc)})
                continue
            answer = cast(
                bodies.DescribeGroupsResponseDescribedGroup,
                {**entry, "error_code": NONE, **(described or {})},
            )
            if request.api_version >= 3 and body["include_authorized_operations"]:
                answer["authorized_operations"] = self._authorized_operations(
                    ResourceType.GROUP, group
                )
            groups.append(answer)
        return {"groups": groups}

    async def list_groups(self, request: Request) -> bodies.ListGroupsResponse:
        """This broker's groups (Kafka's clients ask every broker)."""
        if not self._may(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "groups": []}
        body = cast(bodies.ListGroupsRequest, request.body)
        # Kafka matches both filters ignoring case (GroupCoordinatorService.listGroups)
        wanted_states = {s.strip().lower() for s in body.get("states_filter") or []}
        wanted_types = {t.strip().lower() for t in body.get("types_filter") or []}
        groups: list[bodies.ListedGroup] = []
        listed, loading = self.service.coordinator.listed_groups()
        for group in listed:
            if not self._may(Operation.DESCRIBE, ResourceType.GROUP, group["group"], listing=True):
                continue
            state = group_apis.kafka_group_state(group["state"])
            if wanted_states and state.lower() not in wanted_states:
                continue
            if wanted_types and group["type"] not in wanted_types:
                continue
            groups.append(
                {
                    "group_id": group["group"],
                    "protocol_type": "consumer",
                    "group_state": state,
                    "group_type": group["type"],
                }
            )
        # as Kafka: the groups known, and COORDINATOR_LOAD_IN_PROGRESS (the client asks
        # again) while a partition's groups are loading
        return {
            "error_code": int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) if loading else NONE,
            "groups": groups,
        }

    # -- admin ---------------------------------------------------------------------------------

    def _as_client(self) -> dict[str, str]:
        """Headers that make the controllers authorize this client, not this broker."""
        return {PRINCIPAL_HEADER: self.who.principal, CLIENT_HOST_HEADER: self.who.host}

    async def _admin(self, deadline: float, request: admin.AdminRequest[A]) -> A:
        """One typed admin call to the controllers (protocol/admin.py), as this client,
        within the request's `timeout_ms` (REQUEST_TIMED_OUT after it, as Kafka answers;
        the change may still happen)."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise KraftliteError(ErrorCode.REQUEST_TIMED_OUT, "the request's timeout_ms passed")
        try:
            return await asyncio.wait_for(
                self.service.admin_call(request, headers=self._as_client()), remaining
            )
        except TimeoutError:
            raise KraftliteError(
                ErrorCode.REQUEST_TIMED_OUT, "the request's timeout_ms passed"
            ) from None

    def _admin_deadline(self, timeout_ms: int) -> float:
        timeout_ms = max(0, min(timeout_ms, MAX_ADMIN_TIMEOUT_MS))
        return asyncio.get_running_loop().time() + timeout_ms / 1000

    async def create_topics(self, request: Request) -> bodies.CreateTopicsResponse:
        body = cast(bodies.CreateTopicsRequest, request.body)
        validate_only = bool(body["validate_only"])
        deadline = self._admin_deadline(body["timeout_ms"])
        answers: list[bodies.CreatableTopicResult] = []
        for n, topic in enumerate(body["topics"]):
            name = topic["name"]
            entry: bodies.CreatableTopicResult = {
                "name": name,
                "error_code": NONE,
                "error_message": None,
            }
            if n >= MAX_ADMIN_TOPICS:
                entry.update(
                    {"error_code": INVALID_REQUEST, "error_message": "too many topics at once"}
                )
                answers.append(entry)
                continue
            if not (
                self._may(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
                or self._may_topic(Operation.CREATE, name)
            ):
                entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                answers.append(entry)
                continue
            try:
                wanted = _creatable(topic, validate_only)
                answered = await self._admin(deadline, wanted)
            except KraftliteError as exc:
                entry.update({"error_code": kafka_code(exc), "error_message": _message(exc)})
                answers.append(entry)
                continue
            if validate_only:  # the topic it would be: nothing was created
                first_answered = answered.partitions[0] if answered.partitions else None
                entry.update(
                    {
                        "num_partitions": len(answered.partitions),
                        "replication_factor": (
                            0 if first_answered is None else len(first_answered.replicas)
                        ),
                    }
                )
                answers.append(entry)
                continue
            described = self.image.topic(name)
            if described is not None:
                first = described.partitions.get(0)
                entry.update(
                    {
                        "topic_id": _topic_id(described.topic_id),
                        "num_partitions": len(described.partitions),
                        "replication_factor": 0 if first is None else len(first.replicas),
                    }
                )
            answers.append(entry)
        return {"topics": answers}

    async def delete_topics(self, request: Request) -> bodies.DeleteTopicsResponse:
        body = cast(bodies.DeleteTopicsRequest, request.body)
        deadline = self._admin_deadline(body["timeout_ms"])
        asked: list[tuple[str | None, uuid.UUID | None]] = [
            (name, None) for name in body["topic_names"] or []
        ]
        for entry in body["topics"] or []:
            by_id = entry["topic_id"]
            if entry["name"] is None and by_id not in (None, _NO_TOPIC_ID):
                found = self.image.topics.get(by_id.hex)
                asked.append((None if found is None else found.name, by_id))
            else:
                asked.append((entry["name"] or "", None))
        answers: list[bodies.DeletableTopicResult] = []
        for n, (name, topic_id) in enumerate(asked):
            answer: bodies.DeletableTopicResult = {
                "name": name,
                "error_code": NONE,
                "error_message": None,
            }
            if topic_id is not None:
                answer["topic_id"] = topic_id
            if name is None:
                answers.append({**answer, "error_code": UNKNOWN_TOPIC_ID})
                continue
            if topic_id is not None and not self._may_topic(
                Operation.DESCRIBE, name, listing=True
            ):  # by id, and not the caller's to see: as if no such topic (Kafka's answer)
                self._may_topic(Operation.DELETE, name)  # audited as the refusal it is
                answers.append({**answer, "name": None, "error_code": UNKNOWN_TOPIC_ID})
                continue
            if n >= MAX_ADMIN_TOPICS:
                answer.update(
                    {"error_code": INVALID_REQUEST, "error_message": "too many topics at once"}
                )
            elif not self._may_topic(Operation.DELETE, name):
                answer["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            else:
                try:
                    validate_topic_name(name)
                    await self._admin(deadline, admin.DeleteTopicRequest(name))
                except KraftliteError as exc:
                    answer.update({"error_code": kafka_code(exc), "error_message": _message(exc)})
            answers.append(answer)
        return {"responses": answers}

    async def create_partitions(self, request: Request) -> bodies.CreatePartitionsResponse:
        body = cast(bodies.CreatePartitionsRequest, request.body)
        deadline = self._admin_deadline(body["timeout_ms"])
        results: list[bodies.CreatePartitionsTopicResult] = []
        for n, topic in enumerate(body["topics"]):
            name = topic["name"]
            result: bodies.CreatePartitionsTopicResult = {
                "name": name,
                "error_code": NONE,
                "error_message": None,
            }
            if n >= MAX_ADMIN_TOPICS:
                result.update(
                    {"error_code": INVALID_REQUEST, "error_message": "too many topics at once"}
                )
            elif not self._may_topic(Operation.ALTER, name):
                result["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            else:
                try:
                    validate_topic_name(name)
                    placed = _added_replicas(topic["assignments"])
                    if body["validate_only"]:  # the controllers' decision, on this metadata
                        decisions.create_partitions(
                            self.image, name, topic["count"], rng=_RNG, assignments=placed
                        )
                    else:
                        await self._admin(
                            deadline, admin.CreatePartitionsRequest(name, topic["count"], placed)
                        )
                except KraftliteError as exc:
                    result.update({"error_code": kafka_code(exc), "error_message": _message(exc)})
            results.append(result)
        return {"results": results}

    async def describe_cluster(self, request: Request) -> bodies.DescribeClusterResponse:
        body = cast(bodies.DescribeClusterRequest, request.body)
        if request.api_version >= 1 and body["endpoint_type"] not in (1,):
            return {"error_code": UNSUPPORTED_ENDPOINT_TYPE, "error_message": "brokers only"}
        return {
            "error_code": NONE,
            "endpoint_type": 1,
            "cluster_id": self.service.broker.cluster_id,
            "controller_id": self.service.broker.broker_id,
            "brokers": [
                {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                for b in self._brokers()
            ],
            "cluster_authorized_operations": (
                self._authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
                if body["include_cluster_authorized_operations"]
                else acl_apis.AUTHORIZED_OPERATIONS_NOT_ASKED
            ),
        }

    async def delete_groups(self, request: Request) -> bodies.DeleteGroupsResponse:
        body = cast(bodies.DeleteGroupsRequest, request.body)
        results: list[bodies.DeletableGroupResult] = []
        for group in body["groups_names"]:
            code = self._group_refusal(group, Operation.DELETE)
            if code is None:
                try:
                    await self.service.coordinator.delete_group(group)
                    code = NONE
                except KraftliteError as exc:
                    code = kafka_code(exc)
            results.append({"group_id": group, "error_code": code})
        return {"results": results}

    # -- ACLs ----------------------------------------------------------------------------------

    async def describe_acls(self, request: Request) -> bodies.DescribeAclsResponse:
        """The ACLs matching the filter (Kafka's matching, acl_apis.py rule 4), as the
        controllers list them for `GET /v1/acls`; DESCRIBE on the cluster, as Kafka asks."""
        body = cast(bodies.DescribeAclsRequest, request.body)
        if not self._may(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return {
                "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                "error_message": "DESCRIBE on the cluster is needed",
                "resources": [],
            }
        deadline = self._admin_deadline(MAX_ADMIN_TIMEOUT_MS)
        try:
            found = await self._acls_matching(acl_apis.KafkaFilter.of(body), deadline)
        except KraftliteError as exc:
            return {"error_code": kafka_code(exc), "error_message": _message(exc), "resources": []}
        await self._went_through(len(found))
        return {"error_code": NONE, "error_message": None, "resources": acl_apis.resources(found)}

    async def _acls_matching(
        self, wanted: acl_apis.KafkaFilter, deadline: float
    ) -> list[acl_apis.KafkaAcl]:
        problem = wanted.problem()
        if problem is not None:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, problem)
        listed = await self._acls_listed(wanted, deadline)
        return [kafka for _, kafka in listed]

    async def _acls_listed(
        self, wanted: acl_apis.KafkaFilter, deadline: float
    ) -> list[tuple[admin.AclAnswer, acl_apis.KafkaAcl]]:
        """The controllers' ACLs that `wanted` (a filter without a problem) matches, as
        they are and in Kafka's terms."""
        narrowed = wanted.narrowed()
        if narrowed is None:
            return []
        try:
            selecting = admin.decode(admin_bodies.AclFilter, narrowed[0])
        except MessageError:  # a value no ACL can hold (a principal not User:...)
            return []
        listed = await self._admin(deadline, admin.ListAclsRequest(selecting))
        found = []
        for acl in listed:
            kafka = acl_apis.kafka_acl(acl)
            if kafka is not None and wanted.matches(kafka):
                found.append((acl, kafka))
        return found

    async def create_acls(self, request: Request) -> bodies.CreateAclsResponse:
        """Each ACL through `POST /v1/acls`, one at a time; ALTER on the cluster, as Kafka
        asks (the controllers ask it again of the client). An entry of a type kraftlite
        has no ACLs of, or that Kafka refuses, is INVALID_REQUEST (acl_apis.py rules 1-3)."""
        creations = cast(bodies.CreateAclsRequest, request.body)["creations"]
        await self._went_through(len(creations))
        if not self._may(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            return {
                "results": [
                    {
                        "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                        "error_message": "ALTER on the cluster is needed",
                    }
                    for _ in creations
                ]
            }
        deadline = self._admin_deadline(MAX_ADMIN_TIMEOUT_MS)
        results: list[bodies.AclCreationResult] = []
        for n, creation in enumerate(creations):
            if n >= acl_apis.MAX_ACL_ENTRIES:
                results.append({"error_code": INVALID_REQUEST, "error_message": "too many ACLs"})
                continue
            try:
                wanted = admin.decode(admin_bodies.AclRequest, acl_apis.acl_request(creation))
                await self._admin(deadline, admin.CreateAclRequest(wanted))
            except MessageError as exc:  # the controllers' own check of the body, first here
                message = str(exc)[:MAX_MESSAGE]
                results.append({"error_code": INVALID_REQUEST, "error_message": message})
                continue
            except KraftliteError as exc:
                results.append({"error_code": kafka_code(exc), "error_message": _message(exc)})
                continue
            results.append({"error_code": NONE, "error_message": None})
        return {"results": results}

    async def delete_acls(self, request: Request) -> bodies.DeleteAclsResponse:
        """Each filter's ACLs through `DELETE /v1/acls`; ALTER on the cluster, as Kafka
        asks. A filter the controllers' filter says exactly is one call; one it does not
        (MATCH, every field ANY) lists the ACLs, picks those Kafka's filter matches and
        deletes each (at most MAX_ACL_ENTRIES)."""
        filters = cast(bodies.DeleteAclsRequest, request.body)["filters"]
        await self._went_through(len(filters))
        if not self._may(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            return {
                "filter_results": [
                    {
                        "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                        "error_message": "ALTER on the cluster is needed",
                        "matching_acls": [],
                    }
                    for _ in filters
                ]
            }
        deadline = self._admin_deadline(MAX_ADMIN_TIMEOUT_MS)
        results: list[bodies.DeleteAclsFilterResult] = []
        for n, entry in enumerate(filters):
            if n >= acl_apis.MAX_ACL_ENTRIES:
                results.append({"error_code": INVALID_REQUEST, "error_message": "too many filters"})
                continue
            try:
                deleted = await self._delete_acls(acl_apis.KafkaFilter.of(entry), deadline)
            except KraftliteError as exc:
                results.append({"error_code": kafka_code(exc), "error_message": _message(exc)})
                continue
            matching = [
                acl_apis.matching_acl(acl)
                if error is None
                else acl_apis.matching_acl(acl, kafka_code(error), _message(error))
                for acl, error in deleted
            ]
            results.append({"error_code": NONE, "error_message": None, "matching_acls": matching})
        return {"filter_results": results}

    async def _delete_acls(
        self, wanted: acl_apis.KafkaFilter, deadline: float
    ) -> list[tuple[acl_apis.KafkaAcl, KraftliteError | None]]:
        """The ACLs the filter deleted, each with the error that kept it (None: deleted).
        Listed then deleted one by one, a failure (the controllers', the deadline's, the
        caller's own ALTER grant among those deleted) is that ACL's alone, as Kafka answers
        per ACL: the answer names every ACL that is gone and every one that is not."""
        problem = wanted.problem()
        if problem is not None:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, problem)
        narrowed = wanted.narrowed()
        if narrowed is None:
            return []
        fields, exact = narrowed
        if exact and fields:
            try:
                selecting = admin.decode(admin_bodies.AclFilter, fields)
            except MessageError:  # a value no ACL can hold
                return []
            deleted = await self._admin(deadline, admin.DeleteAclsRequest(selecting))
            return [
                (kafka, None) for kafka in map(acl_apis.kafka_acl, deleted) if kafka is not None
            ]
        listed = await self._acls_listed(wanted, deadline)
        if len(listed) > acl_apis.MAX_ACL_ENTRIES:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST,
                f"the filter matches {len(listed)} ACLs, over {acl_apis.MAX_ACL_ENTRIES} "
                "at once: narrow it",
            )
        found: list[tuple[acl_apis.KafkaAcl, KraftliteError | None]] = []
        for acl, _ in listed:
            try:
                one = admin.decode(admin_bodies.AclFilter, acl_apis.exact_filter(acl))
            except MessageError:  # no filter names it: HTTP's DELETE could not either
                continue
            try:
                gone = await self._admin(deadline, admin.DeleteAclsRequest(one))
            except KraftliteError as exc:
                kept = acl_apis.kafka_acl(acl)
                if kept is not None:
                    found.append((kept, exc))
                continue
            found += [(kafka, None) for kafka in map(acl_apis.kafka_acl, gone) if kafka is not None]
        return found

    # -- configs ---------------------------------------------------------------------------

    async def describe_configs(self, request: Request) -> bodies.DescribeConfigsResponse:
        """Topic configs (set, or their defaults) and a broker's: `broker.id`,
        `broker.rack`, its dynamic configs, and `kraftlite.http.url` (read-only), which
        tells a client that found a broker by its Kafka address where its HTTP API is (the
        Spark source takes either)."""
        body = cast(bodies.DescribeConfigsRequest, request.body)
        results: list[bodies.DescribeConfigsResult] = []
        for resource in body["resources"]:
            kind, name = resource["resource_type"], resource["resource_name"]
            keys = resource["configuration_keys"]
            result: bodies.DescribeConfigsResult = {
                "resource_type": kind,
                "resource_name": name,
                "configs": [],
            }
            try:
                configs = self._configs_of(kind, name, keys)
            except KraftliteError as exc:
                results.append(
                    {**result, "error_code": kafka_code(exc), "error_message": _message(exc)}
                )
                continue
            result["configs"] = [
                {
                    "name": key,
                    "value": value,
                    "read_only": read_only,
                    "config_source": source,
                    "is_sensitive": False,
                }
                for key, value, read_only, source in configs
                if keys is None or key in keys
            ]
            results.append({**result, "error_code": NONE})
        return {"results": results}

    def _configs_of(
        self, kind: int, name: str, keys: list[str] | None
    ) -> list[tuple[str, str | None, bool, int]]:
        image = self.image
        if kind == RESOURCE_TOPIC:
            if not self._may_topic(Operation.DESCRIBE_CONFIGS, name):
                raise KraftliteError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized")
            topic = image.topic(name)
            if topic is None:
                raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name}")
            return [
                (
                    key,
                    topic.configs.get(key, default),
                    False,
                    SOURCE_TOPIC if key in topic.configs else SOURCE_DEFAULT,
                )
                for key, (default, _) in sorted(TOPIC_CONFIGS.items())
            ]
        if kind == RESOURCE_BROKER:
            public = keys is not None and set(keys) <= PUBLIC_BROKER_CONFIGS
            if not public and not self._may(
                Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME
            ):
                raise KraftliteError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized")
            broker_id = names.decimal(name, 10)
            broker = None if broker_id is None else image.brokers.get(broker_id)
            if broker is None:
                raise KraftliteError(ErrorCode.INVALID_REQUEST, f"no broker {name!r}")
            dynamic = image.broker_configs.get(broker.broker_id, {})
            return [
                ("broker.id", str(broker.broker_id), True, SOURCE_STATIC),
                ("broker.rack", broker.rack, True, SOURCE_STATIC),
                ("kraftlite.http.url", broker.url, True, SOURCE_STATIC),
                *(
                    (key, str(value), False, SOURCE_DYNAMIC)
                    for key, value in sorted(dynamic.items())
                ),
            ]
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"resource type {kind} has no configs here")

    async def incremental_alter_configs(
        self, request: Request
    ) -> bodies.IncrementalAlterConfigsResponse:
        """SET and DELETE (back to the default) of topic configs and of a broker's dynamic
        configs, and APPEND and SUBTRACT of a topic's list-valued ones, through the
        controllers as the HTTP API does."""
        body = cast(bodies.IncrementalAlterConfigsRequest, request.body)
        deadline = self._admin_deadline(MAX_ADMIN_TIMEOUT_MS)
        responses: list[bodies.AlterConfigsResourceResponse] = []
        for n, resource in enumerate(body["resources"]):
            kind, name = resource["resource_type"], resource["resource_name"]
            response: bodies.AlterConfigsResourceResponse = {
                "resource_type": kind,
                "resource_name": name,
            }
            try:
                changes = _config_changes(resource, n, functools.partial(self._config, kind, name))
                change = self._configs_change(kind, name, changes)
                if not body["validate_only"]:
                    await self._admin(deadline, change)
            except KraftliteError as exc:
                responses.append(
                    {**response, "error_code": kafka_code(exc), "error_message": _message(exc)}
                )
                continue
            responses.append({**response, "error_code": NONE, "error_message": None})
        return {"responses": responses}

    def _config(self, kind: int, name: str, key: str) -> str:
        """A topic's value of a list-valued config, for APPEND and SUBTRACT (its default
        if unset or the topic is unknown: the change then fails as any other would)."""
        topic = self.image.topic(name) if kind == RESOURCE_TOPIC else None
        return effective_config({} if topic is None else topic.configs, key)

    def _configs_change(
        self, kind: int, name: str, changes: dict[str, str | None]
    ) -> admin.AlterConfigsRequest | admin.AlterBrokerConfigsRequest:
        if kind == RESOURCE_TOPIC:
            if not self._may_topic(Operation.ALTER_CONFIGS, name):
                raise KraftliteError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized")
            validate_topic_name(name)
            return admin.AlterConfigsRequest(name, dict(changes))
        broker_id = names.decimal(name, 10)
        if kind == RESOURCE_BROKER and broker_id is not None:
            if not self._may(Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
                raise KraftliteError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized")
            return admin.AlterBrokerConfigsRequest(broker_id, dict(changes))
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"resource type {kind} {name!r}")

    # -- OffsetForLeaderEpoch ------------------------------------------------------------------

    async def offset_for_leader_epoch(
        self, request: Request
    ) -> bodies.OffsetForLeaderEpochResponse:
        """Where a leader epoch ends (KIP-320: a consumer checks for truncation after the
        leader changed). For clients the end is capped at the high watermark, the most
        they were ever given."""
        body = cast(bodies.OffsetForLeaderEpochRequest, request.body)
        topics: list[bodies.OffsetForLeaderTopicResult] = []
        for topic in body["topics"]:
            name = topic["topic"]
            parts: list[bodies.OffsetForLeaderEpochResponseEpochEndOffset] = []
            for part in topic["partitions"]:
                entry: bodies.OffsetForLeaderEpochResponseEpochEndOffset = {
                    "partition": part["partition"],
                    "leader_epoch": -1,
                    "end_offset": -1,
                }
                if not self._may_topic(Operation.DESCRIBE, name):
                    parts.append({**entry, "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)})
                    continue
                try:
                    epoch, end = self.service.end_offset_for(
                        name,
                        part["partition"],
                        part["leader_epoch"],
                        current_leader_epoch=part["current_leader_epoch"],
                    )
                except KraftliteError as exc:
                    parts.append({**entry, "error_code": kafka_code(exc)})
                    continue
                parts.append(
                    {**entry, "error_code": NONE, "leader_epoch": epoch, "end_offset": end}
                )
            topics.append({"topic": name, "partitions": parts})
        return {"topics": topics}

    # -- idempotent producers --------------------------------------------------------------

    async def init_producer_id(self, request: Request) -> bodies.InitProducerIdResponse:
        """An idempotent producer's id, epoch 0 (broker/producer_state.py checks its
        sequences); with a transactional id, the transaction coordinator's answer [I1-I8]:
        WRITE on the id first, and PRODUCER_FENCED as INVALID_PRODUCER_EPOCH before v4."""
        body = cast(bodies.InitProducerIdRequest, request.body)
        transactional_id = body["transactional_id"]
        if transactional_id is not None:
            if transactional_id == "":
                return {"error_code": INVALID_REQUEST}  # [I3]
            if not txn_apis.may_transactional_id(self, transactional_id):
                return {"error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
            pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
            if (pid == -1) != (epoch == -1):
                return {"error_code": INVALID_REQUEST}  # [I4]
            try:
                producer_id, producer_epoch = await self.service.transactions.init_producer_id(
                    transactional_id,
                    body["transaction_timeout_ms"],
                    None if pid == -1 else (pid, epoch),
                )
            except KraftliteError as exc:
                return {"error_code": txn_apis.txn_code(exc, request.api_version, 4)}
            return {
                "error_code": NONE,
                "producer_id": producer_id,
                "producer_epoch": producer_epoch,
            }
        try:
            self.handlers.gate.check_init_producer(self.who, edge="kafka", request="InitProducerId")
        except KraftliteError as exc:
            return {"error_code": kafka_code(exc)}
        producer_id = self.service.new_producer_id(self.who.principal)
        return {"error_code": NONE, "producer_id": producer_id, "producer_epoch": 0}

    # -- SASL (SCRAM, PLAIN) ----------------------------------------------------------------

    async def sasl_handshake(self, request: Request) -> bodies.SaslHandshakeResponse:
        """KIP-43 v1: the mechanism, then SaslAuthenticate requests carry the exchange."""
        mechanism = cast(bodies.SaslHandshakeRequest, request.body)["mechanism"]
        # a TLS certificate's principal may be replaced by SASL's (SASL_SSL), once
        if (
            self._scram is not None
            or self._plain
            or (self.authenticated and self.who.login != "certificate")
        ):
            raise CloseConnection("authenticated already")
        offered = self.handlers.mechanisms
        if mechanism not in offered:
            self.close_after_answer = True  # as Kafka: the client cannot go on
            return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered}
        if mechanism == PLAIN:
            self._plain = True
            return {"error_code": NONE, "mechanisms": offered}

        def credential_of(user: str) -> UserScramCredentialRecord | None:
            return self.image.users.get(user, {}).get(mechanism)  # the image as it is now

        self._scram = ScramExchange(
            mechanism, credential_of, secrets.token_urlsafe(24), self.handlers.fake_salt_key()
        )
        return {"error_code": NONE, "mechanisms": offered}

    async def sasl_authenticate(self, request: Request) -> bodies.SaslAuthenticateResponse:
        """The SCRAM exchange (security/scram_exchange.py): client-first, then
        client-final; or PLAIN's one message (RFC 4616), the password checked as HTTP Basic
        checks it. Success makes this connection's principal the user. A failure is
        answered SASL_AUTHENTICATION_FAILED, audited, and the connection closed."""
        token = bytes(cast(bodies.SaslAuthenticateRequest, request.body)["auth_bytes"] or b"")
        if self._plain:
            return await self._plain_authenticate(token)
        exchange = self._scram
        if exchange is None:
            raise CloseConnection("SaslAuthenticate without a handshake")
        try:
            if exchange.user is None:
                return {"error_code": NONE, "auth_bytes": exchange.first(token)}
            answer = exchange.final(token)
        except ScramError as exc:
            return await self._authentication_failed(exchange.user or "", exchange.mechanism, exc)
        self._scram = None
        user = exchange.user or ""
        # SCRAM read the credential just now, with no wait since: the metadata's version
        self._authenticated_as(user, "scram", self.image.user_versions.get(user))
        return {"error_code": NONE, "auth_bytes": answer, "session_lifetime_ms": 0}

    async def _plain_authenticate(self, token: bytes) -> bodies.SaslAuthenticateResponse:
        """RFC 4616: `[authzid] NUL authcid NUL passwd`, UTF-8; an authzid, if given, must be
        the user itself (no one acts for another here)."""
        self._plain = False  # one attempt: success or not, the handshake is spent
        fields = token.split(b"\0", 3) if len(token) <= MAX_PLAIN_TOKEN else []
        try:
            authzid, user, password = (f.decode() for f in fields)
        except ValueError:  # not three UTF-8 fields (UnicodeDecodeError is a ValueError)
            return await self._authentication_failed("", PLAIN, "malformed PLAIN message")
        try:
            access.validate_user_name(user)
        except KraftliteError:
            return await self._authentication_failed(repr(user), PLAIN, "not a user name")
        if authzid not in {"", user}:
            return await self._authentication_failed(user, PLAIN, "acting for another user")
        try:
            principal, version = await self.handlers.authenticator.check_password(
                user, password, self.who.host
            )
        except KraftliteError as exc:
            if exc.code is not ErrorCode.SASL_AUTHENTICATION_FAILED:  # too many checks at once
                raise CloseConnection(exc.message) from None  # no verdict: the client retries
            return await self._authentication_failed(user, PLAIN, exc.message)
        self._authenticated_as(principal.removeprefix("User:"), "plain", version)
        return {"error_code": NONE, "auth_bytes": b"", "session_lifetime_ms": 0}

    def _authenticated_as(self, user: str, login: str, version: int | None) -> None:
        """`version`: of the credential that was checked; a different one in the metadata
        (a password change, the user's removal) ends this connection (`handle`)."""
        self.who = Caller(f"User:{user}", self.who.host, login=login)
        self.authenticated = True
        self._user_version = version

    async def _authentication_failed(
        self, user: str, mechanism: str, why: object
    ) -> bodies.SaslAuthenticateResponse:
        self.close_after_answer = True
        # Kafka's connection.failed.authentication.delay.ms: guessing costs time too
        await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
        audit.warning(
            "authentication_failed",
            host=self.who.host,
            user=user[:256],
            mechanism=mechanism,
            why=str(why),
            edge="kafka",
        )
        return {
            "error_code": int(ErrorCode.SASL_AUTHENTICATION_FAILED),
            "error_message": "authentication failed",
        }

    # -- KIP-848 consumer groups -------------------------------------------------------------

    async def consumer_group_heartbeat(
        self, request: Request
    ) -> bodies.ConsumerGroupHeartbeatResponse:
        """KIP-848's ConsumerGroupHeartbeat (`group.protocol=consumer`) on kraftlite's own
        server-side groups (groups/group.py, rule 9 for what such a member holds): epoch 0
        joins (or rejoins), -1 and -2 leave, any other heartbeats. The assignment is sent
        when the epoch moved, on a full request, or when what the member says it holds
        differs from it. A member id is the client's (v1) or one made here (v0)."""
        body = cast(bodies.ConsumerGroupHeartbeatRequest, request.body)
        group, epoch = body["group_id"], body["member_epoch"]
        member_id = body["member_id"] or (uuid.uuid4().hex if epoch == 0 else "")
        answer: bodies.ConsumerGroupHeartbeatResponse = {
            "member_id": member_id,
            "member_epoch": epoch,
        }
        refused = self._group_refusal(group)
        if refused is not None or not names.is_name(member_id, names.MAX_MEMBER_ID):
            return {**answer, "error_code": refused or INVALID_REQUEST}
        if epoch < -2:
            return {**answer, "error_code": INVALID_REQUEST, "error_message": "no such epoch"}
        topics = body["subscribed_topic_names"]
        problem = self._subscription_problem(topics, body["subscribed_topic_regex"], epoch)
        coordinator = self.service.coordinator
        reported = self._reported(body["topic_partitions"])
        try:
            instance = _instance_id(body["instance_id"])
            await coordinator.ensure_offsets_topic()
            if epoch < 0:  # -2: a static member's leave keeps its assignment a session long
                await coordinator.leave(
                    group, member_id, instance_id=instance, temporary=epoch == -2
                )
                return {**answer, "error_code": NONE}
            if problem is not None:
                if epoch > 0:  # a refused subscription change still keeps the member alive
                    await coordinator.consumer_heartbeat(
                        group, member_id, epoch, "", None, reported, instance_id=instance
                    )
                return {**answer, "error_code": problem[0], "error_message": problem[1]}
            client_id = request.client_id or ""
            client_id = client_id if names.is_name(client_id, names.MAX_CLIENT_ID) else ""
            subscribed = None if topics is None else sorted(set(topics))
            joined = await coordinator.consumer_heartbeat(
                group, member_id, epoch, client_id, subscribed, reported, instance_id=instance
            )
        except KraftliteError as exc:
            return {**answer, "error_code": kafka_code(exc), "error_message": _message(exc)}
        answer = {
            "error_code": NONE,
            "member_id": member_id,
            "member_epoch": joined["member_epoch"],
            "heartbeat_interval_ms": joined["heartbeat_interval_ms"],
        }
        assigned = {
            (entry["topic"], p) for entry in joined["assignment"] for p in entry["partitions"]
        }
        if (
            joined["member_epoch"] != epoch
            or topics is not None
            or (reported is not None and reported != assigned)
        ):  # all of it, by topic id
            image = self.image
            answer["assignment"] = {
                "topic_partitions": [
                    {"topic_id": _topic_id(found.topic_id), "partitions": entry["partitions"]}
                    for entry in joined["assignment"]
                    if (found := image.topic(entry["topic"])) is not None
                ]
            }
        return answer

    def _subscription_problem(
        self, topics: list[str] | None, regex: str | None, epoch: int
    ) -> tuple[int, str] | None:
        """(error code, message) for a subscription this member may not have, or None."""
        if regex:  # (librdkafka sends "" for none)
            return INVALID_REQUEST, "subscribe to topic names: regular expressions are not served"
        if epoch == 0 and not topics:
            return INVALID_REQUEST, "a join names its topics"
        if topics is None:
            return None
        if len(topics) > names.MAX_SUBSCRIBED_TOPICS or not all(map(_topic_name_ok, topics)):
            return int(ErrorCode.INVALID_TOPIC_EXCEPTION), "invalid topic names"
        if not all(self._may_topic(Operation.DESCRIBE, t) for t in topics):
            return int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), "not authorized for a topic"
        return None

    def _reported(
        self, owned: list[bodies.ConsumerGroupHeartbeatRequestTopicPartitions] | None
    ) -> frozenset[tuple[str, int]] | None:
        """What a KIP-848 member says it holds, by topic name (unknown topic ids skipped);
        None when it said nothing."""
        if owned is None:
            return None
        topics = self.image.topics
        return frozenset(
            (found.name, partition)
            for entry in owned
            if (found := topics.get(entry["topic_id"].hex)) is not None
            for partition in entry["partitions"]
        )
