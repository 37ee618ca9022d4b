"""Kafka's APIs translated onto the broker service (broker/service.py): decode a request
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
4. Clients are authorized as on the HTTP edge, with the same ACLs; until SASL is served
   here a Kafka client is User:ANONYMOUS, so with `auth.required` it is refused everything
   but ApiVersions (the connection is closed), never let through.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final

import structlog

from kraftlite.api.auth import Authenticator
from kraftlite.api.internal_auth import ANONYMOUS, Caller
from kraftlite.broker.partition import Acks
from kraftlite.broker.service import BrokerService, Fetched, FetchWanted
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.groups.offsets import CommittedOffset
from kraftlite.kafka import messages, records
from kraftlite.kafka.messages import ApiKey, Request
from kraftlite.kafka.wire import WireError
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.topics import is_internal_topic, validate_topic_name
from kraftlite.protocol import batch as batch_format
from kraftlite.security.acls import CLUSTER_NAME, Action, Operation, ResourceType
from kraftlite.security.cluster_auth import CLIENT_HOST_HEADER, PRINCIPAL_HEADER

log = structlog.get_logger(__name__)
Body = dict[str, Any]
NONE = 0  # Kafka's error code for success
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
_NO_TOPIC_ID = uuid.UUID(int=0)
_AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)
MAX_GROUP_NAME = 249
MAX_PROTOCOLS = 16  # assignors a member may offer (clients offer one to three)
MAX_REBALANCE_TIMEOUT_MS = 300_000  # bounds how long a JoinGroup may wait


class CloseConnection(Exception):
    """The request must not be answered: close the connection (server.py)."""


def kafka_code(exc: KraftliteError) -> int:
    """Rule 3."""
    return INVALID_REQUEST if exc.code >= 1000 else int(exc.code)


def _topic_id(image_topic_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(hex=image_topic_id)
    except ValueError:
        return _NO_TOPIC_ID


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class Handlers:
    """The APIs of one broker's Kafka listener; `session` makes one per connection."""

    def __init__(self, service: BrokerService, authenticator: Authenticator) -> None:
        self.service = service
        self.authenticator = authenticator

    def session(self, host: str) -> Session:
        return Session(self, Caller(ANONYMOUS, host))

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        """Rule 3 of server.py: ApiVersions v0, UNSUPPORTED_VERSION, the versions served."""
        body = {"error_code": UNSUPPORTED_VERSION, "api_keys": _api_keys()}
        return messages.encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)


# The APIs this listener answers (a subset of what messages.py can decode): ApiVersions
# lists only these, so a client never sends one that would close its connection.
SERVED: Final = frozenset(
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
    }
)


def _api_keys() -> list[Body]:
    return [
        {"api_key": int(key), "min_version": low, "max_version": high}
        for key, (low, high) in sorted(messages.API_VERSIONS.items())
        if key in SERVED
    ]


class Session:
    """One connection: who it is, and its requests handled one at a time."""

    def __init__(self, handlers: Handlers, who: Caller) -> None:
        self.handlers = handlers
        self.service = handlers.service
        self.who = who
        self._apis: dict[int, Callable[[Request], Awaitable[Body | None]]] = {
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
        }
        assert self._apis.keys() == SERVED

    async def handle(self, request: Request) -> bytes | None:
        api = self._apis.get(request.api_key)
        if api is None:
            raise CloseConnection(f"api key {request.api_key} is not served")
        if request.api_key != ApiKey.API_VERSIONS and self.handlers.authenticator.settings.required:
            raise CloseConnection("authentication is required and this listener has no SASL yet")
        body = await api(request)
        if body is None:
            return None
        return messages.encode_response(
            request.api_key, request.api_version, request.correlation_id, body
        )

    # -- authorization ---------------------------------------------------------------------

    def _may(self, operation: Operation, kind: ResourceType, name: str) -> bool:
        return self.handlers.authenticator.allowed(self.who, Action(operation, kind, name))

    def _may_topic(self, operation: Operation, topic: str) -> bool:
        return self._may(operation, ResourceType.TOPIC, topic)

    @property
    def image(self) -> MetadataImage:
        return self.service.broker.replicas.image

    # -- ApiVersions, Metadata ---------------------------------------------------------------

    async def api_versions(self, request: Request) -> Body:
        return {"error_code": NONE, "api_keys": _api_keys()}

    def _brokers(self) -> list[Body]:
        answer = []
        for broker in sorted(self.image.brokers.values(), key=lambda b: b.broker_id):
            if broker.fenced or broker.kafka is None:
                continue
            host, port = _split_address(broker.kafka)
            answer.append(
                {"node_id": broker.broker_id, "host": host, "port": port, "rack": broker.rack}
            )
        return answer

    async def metadata(self, request: Request) -> Body:
        image = self.image
        wanted = request.body.get("topics")
        if wanted is None or (request.api_version == 0 and not wanted):
            names = sorted(t.name for t in image.topics.values())
            listed = [n for n in names if self._may_topic(Operation.DESCRIBE, n)]
        else:
            listed = []
            for entry in wanted:
                name = entry.get("name")
                if name is None and entry.get("topic_id") not in (None, _NO_TOPIC_ID):
                    found = image.topics.get(entry["topic_id"].hex)
                    name = None if found is None else found.name
                listed.append(name or "")
        live = {b for b, r in image.brokers.items() if not r.fenced}
        topics = []
        for name in listed:
            topic = image.topic(name) if name else None
            if not self._may_topic(Operation.DESCRIBE, name):
                topics.append(
                    {"error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), "name": name}
                )
                continue
            if topic is None:
                topics.append(
                    {"error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "name": name}
                )
                continue
            partitions = []
            for index, p in sorted(topic.partitions.items()):
                leader = p.leader if p.leader in live else -1
                partitions.append(
                    {
                        "error_code": NONE if leader >= 0 else 5,  # LEADER_NOT_AVAILABLE
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
                    "is_internal": is_internal_topic(topic.name),
                    "partitions": partitions,
                    "topic_authorized_operations": _AUTHORIZED_OPERATIONS_UNKNOWN,
                }
            )
        return {
            "brokers": self._brokers(),
            "cluster_id": self.service.broker.cluster_id,
            # admin requests go to the "controller": any broker passes them to the quorum
            "controller_id": self.service.broker.broker_id,
            "topics": topics,
            "cluster_authorized_operations": _AUTHORIZED_OPERATIONS_UNKNOWN,
        }

    # -- Produce -----------------------------------------------------------------------------

    async def produce(self, request: Request) -> Body | None:
        body = request.body
        if body.get("transactional_id") is not None:
            raise CloseConnection("transactions are not served")
        acks = {-1: Acks.ALL, 1: Acks.LEADER, 0: Acks.NONE}.get(body.get("acks", -1))
        timeout_s = max(0, min(int(body.get("timeout_ms", 30_000)), 300_000)) / 1000
        jobs: list[tuple[str, int, Awaitable[Body]]] = [
            (
                topic["name"],
                part["index"],
                self._produce_one(topic["name"], part["index"], part["records"], acks, timeout_s),
            )
            for topic in body.get("topic_data", [])
            for part in topic.get("partition_data", [])
        ]
        answers = await asyncio.gather(*(job for _, _, job in jobs))
        if acks is Acks.NONE:
            return None
        by_topic: dict[str, list[Body]] = {}
        for (name, _, _), answer in zip(jobs, answers, strict=True):
            by_topic.setdefault(name, []).append(answer)
        return {
            "responses": [
                {"name": name, "partition_responses": parts} for name, parts in by_topic.items()
            ]
        }

    async def _produce_one(
        self, topic: str, index: int, data: bytes | None, acks: Acks | None, timeout_s: float
    ) -> Body:
        def error(code: int, message: str | None = None) -> Body:
            return {"index": index, "error_code": code, "base_offset": -1, "error_message": message}

        if acks is None:
            return error(
                int(ErrorCode.INVALID_REQUEST), "acks must be -1, 0 or 1"
            )  # INVALID_REQUIRED_ACKS is 21
        if not self._may_topic(Operation.WRITE, topic):
            return error(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        try:
            partition = self.service.leader(topic, index)
            batches = records.decode_batches(data or b"")
            converted = [records.kafka_to_kraftlite(b) for b in batches]
            first: int | None = None
            log_start = -1
            for batch in converted:
                produced = await self.service.produce(partition, batch, acks, timeout_s)
                if first is None:
                    first = produced.first_offset
                log_start = produced.log_start_offset
        except KraftliteError as exc:
            return error(kafka_code(exc), exc.message)
        except (WireError, records.CorruptRecordsError) as exc:
            return error(int(ErrorCode.CORRUPT_MESSAGE), str(exc))
        return {
            "index": index,
            "error_code": NONE,
            "base_offset": -1 if first is None else first,
            "log_append_time_ms": -1,
            "log_start_offset": log_start,
        }

    # -- Fetch, ListOffsets ------------------------------------------------------------------

    async def fetch(self, request: Request) -> Body:
        body = request.body
        if body.get("replica_id", -1) >= 0:
            raise CloseConnection("followers replicate over the internal plane")
        wanted: list[FetchWanted] = []
        refused: dict[tuple[str, int], int] = {}
        order: list[tuple[str, int]] = []
        for topic in body.get("topics", []):
            name = topic.get("topic", "")
            for part in topic.get("partitions", []):
                key = (name, part["partition"])
                order.append(key)
                if not self._may_topic(Operation.READ, name):
                    refused[key] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                else:
                    wanted.append(
                        FetchWanted(
                            name,
                            part["partition"],
                            part["fetch_offset"],
                            part["partition_max_bytes"],
                        )
                    )
        results = await self.service.fetch_many(
            wanted,
            body.get("min_bytes", 1),
            body.get("max_bytes", 55 << 20),
            body.get("max_wait_ms", 0),
        )
        found = {(w.topic, w.partition): r for w, r in zip(wanted, results, strict=True)}
        by_topic: dict[str, list[Body]] = {}
        for key in order:
            by_topic.setdefault(key[0], []).append(
                self._fetched(key[1], found.get(key), refused.get(key))
            )
        return {
            "error_code": NONE,
            "session_id": 0,  # no fetch session: the client sends full requests
            "responses": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
        }

    @staticmethod
    def _fetched(index: int, result: Fetched | KraftliteError | None, refused: int | None) -> Body:
        if result is None or isinstance(result, KraftliteError) or refused is not None:
            code = (
                refused
                if refused is not None
                else kafka_code(result)
                if isinstance(result, KraftliteError)
                else INVALID_REQUEST
            )
            return {
                "partition_index": index,
                "error_code": code,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "records": None,
            }
        data = b"".join(
            records.kraftlite_to_kafka(bytes(view))
            for view in batch_format.split_batches(result.data)
        )
        return {
            "partition_index": index,
            "error_code": NONE,
            "high_watermark": result.high_watermark,
            "last_stable_offset": result.high_watermark,  # no transactions: all is stable
            "log_start_offset": result.log_start_offset,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": data,
        }

    async def list_offsets(self, request: Request) -> Body:
        topics = []
        for topic in request.body.get("topics", []):
            name = topic["name"]
            parts = []
            for part in topic.get("partitions", []):
                index, timestamp = part["partition_index"], part["timestamp"]
                entry: Body = {"partition_index": index, "timestamp": -1, "offset": -1}
                if not self._may_topic(Operation.DESCRIBE, name):
                    entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    parts.append(entry)
                    continue
                at: str | int = {-1: "latest", -2: "earliest"}.get(timestamp, timestamp)
                try:  # (-3, the largest timestamp, is INVALID_REQUEST: not served)
                    offset, found = self.service.list_offset(name, index, at)
                    partition = self.service.leader(name, index)
                except KraftliteError as exc:
                    entry["error_code"] = kafka_code(exc)
                    parts.append(entry)
                    continue
                entry.update(
                    error_code=NONE,
                    offset=offset,
                    timestamp=-1 if found is None else found,
                    leader_epoch=partition.leader_epoch,
                )
                parts.append(entry)
            topics.append({"name": name, "partitions": parts})
        return {"topics": topics}

    # -- groups: coordinator and offsets ---------------------------------------------------

    async def find_coordinator(self, request: Request) -> Body:
        body = request.body
        keys = body["coordinator_keys"] if request.api_version >= 4 else [body["key"]]
        answers = [await self._coordinator_of(str(key), body.get("key_type", 0)) for key in keys]
        if request.api_version >= 4:
            return {"coordinators": answers}
        flat = dict(answers[0])
        del flat["key"]
        return flat

    async def _coordinator_of(self, group: str, key_type: int) -> Body:
        def error(code: int, message: str) -> Body:
            return {
                "key": group,
                "error_code": code,
                "error_message": message,
                "node_id": -1,
                "host": "",
                "port": -1,
            }

        if key_type != 0:
            return error(INVALID_REQUEST, "only group coordinators are served (no transactions)")
        if not self._may(Operation.DESCRIBE, ResourceType.GROUP, group):
            return error(int(ErrorCode.GROUP_AUTHORIZATION_FAILED), "not authorized")
        coordinator = self.service.coordinator
        try:
            await coordinator.ensure_offsets_topic()
        except KraftliteError as exc:
            return error(int(ErrorCode.COORDINATOR_NOT_AVAILABLE), exc.message)
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

    async def offset_commit(self, request: Request) -> Body:
        body = request.body
        group = body["group_id"]
        member_id = body.get("member_id") or None
        epoch = body.get("generation_id_or_member_epoch", -1)
        group_ok = self._may(Operation.READ, ResourceType.GROUP, group)
        wanted: list[tuple[tuple[str, int], CommittedOffset]] = []
        codes: dict[tuple[str, int], int] = {}
        for topic in body.get("topics", []):
            for part in topic.get("partitions", []):
                key = (topic["name"], part["partition_index"])
                if not group_ok:
                    codes[key] = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
                elif not self._may_topic(Operation.READ, topic["name"]):
                    codes[key] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                else:
                    codes[key] = NONE
                    wanted.append(
                        (
                            key,
                            CommittedOffset(
                                part["committed_offset"], part.get("committed_metadata") or ""
                            ),
                        )
                    )
        if wanted:
            try:
                await self.service.coordinator.commit(
                    group, member_id, None, wanted, generation=epoch
                )
            except KraftliteError as exc:
                for key, _ in wanted:
                    codes[key] = kafka_code(exc)
        by_topic: dict[str, list[Body]] = {}
        for (name, index), code in codes.items():
            by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
        return {"topics": [{"name": n, "partitions": p} for n, p in by_topic.items()]}

    async def offset_fetch(self, request: Request) -> Body:
        """OffsetFetch: v8+ asks for several groups at once, earlier versions for one."""
        body = request.body
        if request.api_version < 8:
            code, topics = self._group_offsets(body["group_id"], body.get("topics"))
            return {"error_code": code, "topics": topics}
        groups = []
        for group in body.get("groups", []):
            code, topics = self._group_offsets(group["group_id"], group.get("topics"))
            groups.append({"group_id": group["group_id"], "error_code": code, "topics": topics})
        return {"groups": groups}

    def _group_offsets(self, group: str, asked: list[Body] | None) -> tuple[int, list[Body]]:
        """(group error code, topics) of one group's committed offsets: the partitions
        asked (-1 where none is committed), or every committed one when `asked` is None;
        topics the client may not describe are left out."""
        if not self._may(Operation.DESCRIBE, ResourceType.GROUP, group):
            return int(ErrorCode.GROUP_AUTHORIZATION_FAILED), []
        try:
            committed = self.service.coordinator.committed(group)
        except KraftliteError as exc:
            return kafka_code(exc), []
        if asked is None:
            keys = sorted(committed)
        else:
            keys = [(t["name"], i) for t in asked for i in t.get("partition_indexes", [])]
        by_topic: dict[str, list[Body]] = {}
        for name, index in keys:
            if not self._may_topic(Operation.DESCRIBE, name):
                continue
            c = committed.get((name, index))
            by_topic.setdefault(name, []).append(
                {
                    "partition_index": index,
                    "committed_offset": -1 if c is None else c.offset,
                    "committed_leader_epoch": -1,
                    "metadata": "" if c is None else c.metadata,
                    "error_code": NONE,
                }
            )
        return NONE, [{"name": n, "partitions": p} for n, p in by_topic.items()]

    # -- classic groups (groups/classic.py) ---------------------------------------------------

    def _group_refusal(self, group: str, operation: Operation = Operation.READ) -> int | None:
        """The error code that refuses a group request before it costs anything, if any."""
        if not group or len(group) > MAX_GROUP_NAME:
            return int(ErrorCode.INVALID_REQUEST)  # Kafka: INVALID_GROUP_ID (24)
        if not self._may(operation, ResourceType.GROUP, group):
            return int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return None

    async def join_group(self, request: Request) -> Body:
        body = request.body
        group = body["group_id"]
        answer: Body = {"generation_id": -1, "member_id": body["member_id"], "leader": ""}
        refused = self._group_refusal(group)
        if refused is not None:
            return {**answer, "error_code": refused}
        protocols = [(p["name"], bytes(p["metadata"] or b"")) for p in body["protocols"]]
        if len(protocols) > MAX_PROTOCOLS:
            return {**answer, "error_code": int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)}
        session = body["session_timeout_ms"]
        rebalance = body["rebalance_timeout_ms"] if request.api_version >= 1 else session
        try:
            await self.service.coordinator.ensure_offsets_topic()
            classic = self.service.coordinator.classic_for_join(group, session)
            joined = await classic.join(
                member_id=body["member_id"],
                instance_id=body.get("group_instance_id") or None,
                client_id=request.client_id or "",
                client_host=self.who.host,
                session_timeout_ms=session,
                rebalance_timeout_ms=max(0, min(rebalance, MAX_REBALANCE_TIMEOUT_MS)),
                protocol_type=body["protocol_type"],
                protocols=protocols,
            )
        except KraftliteError as exc:
            return {**answer, "error_code": kafka_code(exc)}
        return {"error_code": NONE, **joined}

    async def sync_group(self, request: Request) -> Body:
        body = request.body
        group = body["group_id"]
        refused = self._group_refusal(group)
        if refused is not None:
            return {"error_code": refused}
        assignments = {a["member_id"]: bytes(a["assignment"] or b"") for a in body["assignments"]}
        try:
            classic = self.service.coordinator.classic(group)
            protocol_type, protocol_name, assignment = await classic.sync(
                body["member_id"], body["generation_id"], assignments
            )
        except KraftliteError as exc:
            return {"error_code": kafka_code(exc)}
        return {
            "error_code": NONE,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "assignment": assignment,
        }

    async def heartbeat(self, request: Request) -> Body:
        body = request.body
        refused = self._group_refusal(body["group_id"])
        if refused is not None:
            return {"error_code": refused}
        try:
            classic = self.service.coordinator.classic(body["group_id"])
            classic.heartbeat(body["member_id"], body["generation_id"])
        except KraftliteError as exc:
            return {"error_code": kafka_code(exc)}
        return {"error_code": NONE}

    async def leave_group(self, request: Request) -> Body:
        body = request.body
        group = body["group_id"]
        if request.api_version < 3:
            leaving = [{"member_id": body["member_id"], "group_instance_id": None}]
        else:
            leaving = list(body["members"])
        refused = self._group_refusal(group)
        if refused is not None:
            return {"error_code": refused}
        results = []
        for member in leaving:
            code = NONE
            try:
                self.service.coordinator.classic(group).leave(member["member_id"])
            except KraftliteError as exc:
                code = kafka_code(exc)
            results.append({**member, "error_code": code})
            if code == int(ErrorCode.NOT_COORDINATOR):
                return {"error_code": code}
        if request.api_version < 3:
            return {"error_code": results[0]["error_code"]}
        return {"error_code": NONE, "members": results}

    async def describe_groups(self, request: Request) -> Body:
        groups = []
        for group in request.body["groups"]:
            refused = self._group_refusal(group, Operation.DESCRIBE)
            entry: Body = {"group_id": group, "group_state": "Dead", "members": []}
            if refused is not None:
                groups.append({**entry, "error_code": refused})
                continue
            try:
                described = self.service.coordinator.describe_classic(group)
            except KraftliteError as exc:
                groups.append({**entry, "error_code": kafka_code(exc)})
                continue
            if described is None:
                groups.append({**entry, "error_code": NONE})
                continue
            groups.append({**entry, "error_code": NONE, **described})
        return {"groups": groups}

    async def list_groups(self, request: Request) -> Body:
        """This broker's groups (Kafka's clients ask every broker)."""
        if not self._may(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "groups": []}
        wanted_states = set(request.body.get("states_filter") or [])
        groups = []
        for group in self.service.coordinator.local_groups():
            if not self._may(Operation.DESCRIBE, ResourceType.GROUP, group["group"]):
                continue
            if wanted_states and group["state"] not in wanted_states:
                continue
            groups.append(
                {
                    "group_id": group["group"],
                    "protocol_type": "consumer",
                    "group_state": group["state"],
                    "group_type": group["type"],
                }
            )
        return {"error_code": NONE, "groups": groups}

    # -- admin ---------------------------------------------------------------------------------

    def _as_client(self) -> dict[str, str]:
        """Headers that make the controllers authorize this client, not this broker."""
        return {PRINCIPAL_HEADER: self.who.principal, CLIENT_HOST_HEADER: self.who.host}

    async def create_topics(self, request: Request) -> Body:
        body = request.body
        validate_only = bool(body.get("validate_only", False))
        answers = []
        for topic in body.get("topics", []):
            name = topic["name"]
            entry: Body = {"name": name, "error_code": NONE, "error_message": None}
            if not (
                self._may(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
                or self._may_topic(Operation.CREATE, name)
            ):
                entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                answers.append(entry)
                continue
            if validate_only or topic.get("assignments"):
                entry.update(
                    error_code=INVALID_REQUEST,
                    error_message="validate_only and manual assignments are not served here",
                )
                answers.append(entry)
                continue
            wanted: Body = {
                "name": name,
                "configs": {
                    c["name"]: c["value"]
                    for c in topic.get("configs", [])
                    if c.get("value") is not None
                },
            }
            if topic.get("num_partitions", -1) > 0:
                wanted["partitions"] = topic["num_partitions"]
            if topic.get("replication_factor", -1) > 0:
                wanted["replication_factor"] = topic["replication_factor"]
            try:
                await self.service.admin("POST", "/v1/topics", wanted, headers=self._as_client())
            except KraftliteError as exc:
                entry.update(error_code=kafka_code(exc), error_message=exc.message)
                answers.append(entry)
                continue
            described = self.image.topic(name)
            if described is not None:
                first = described.partitions.get(0)
                entry.update(
                    topic_id=_topic_id(described.topic_id),
                    num_partitions=len(described.partitions),
                    replication_factor=0 if first is None else len(first.replicas),
                )
            answers.append(entry)
        return {"topics": answers}

    async def delete_topics(self, request: Request) -> Body:
        body = request.body
        names = list(body.get("topic_names") or [])
        for entry in body.get("topics") or []:
            name = entry.get("name")
            if name is None and entry.get("topic_id") is not None:
                found = self.image.topics.get(entry["topic_id"].hex)
                name = None if found is None else found.name
            names.append(name or "")
        answers = []
        for name in names:
            entry = {"name": name, "error_code": NONE, "error_message": None}
            if not self._may_topic(Operation.DELETE, name):
                entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                answers.append(entry)
                continue
            try:
                validate_topic_name(name, internal=True)  # it becomes a path: no "/" or ".."
                await self.service.admin("DELETE", f"/v1/topics/{name}", headers=self._as_client())
            except KraftliteError as exc:
                entry.update(error_code=kafka_code(exc), error_message=exc.message)
            answers.append(entry)
        return {"responses": answers}
