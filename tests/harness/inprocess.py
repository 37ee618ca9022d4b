"""One broker in-process: the broker service, the group coordinator, the front door and the
Kafka edge's handlers, with no controllers, no sockets and no threads beyond asyncio's.

What is real: `Broker` with its `ReplicaManager` and `Partition`s (built, never started: no
registration, heartbeats, metadata long-poll or background rounds), `GroupCoordinator`,
`BrokerService`, `Gate` with its `Authenticator`, and Kafka's `Handlers`, wired as
kraftlite/node/broker.py's `run_broker` wires them.

What is a twin: partition storage (kraftlite/storage/memory.py, held to the LMDB adapter's
contract by tests/contract), time (clock.ManualClock: it moves when a test moves it), and
the controllers. Metadata is fed by replaying records (`apply`) through the broker's own
MetadataFollower and acted on as `Broker._act_on_metadata` acts on it (replicas.apply_image
with the local changes), and every application is also an answered heartbeat for the
leadership lease (`heartbeat`), so broker 1 leads its partitions with ISR [1].

Network: the broker's aiohttp session is real but refuses every request (a client
middleware raising `NetworkCallError`), so code that would call a controller or another
broker fails the test at once instead of connecting somewhere.

    async with InProcessBroker() as node:
        node.create_topic("orders", partitions=2)
        kafka = node.connect()
        answer = await kafka.call(ApiKey.METADATA, 12, {"topics": None})
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

import aiohttp
import msgspec
import orjson

from kraftlite.broker.broker import Broker, BrokerSettings
from kraftlite.broker.partition import Partition
from kraftlite.clock import ManualClock
from kraftlite.controller import access
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator, GroupSettings
from kraftlite.groups.members_log import COORDINATOR_KEY, CoordinatorMarker
from kraftlite.kafka.handlers import Handlers, Session
from kraftlite.metadata import records as r
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.views import topic_view
from kraftlite.protocol import admin, admin_bodies
from kraftlite.protocol import batch as fmt
from kraftlite.protocol.headers import METADATA_VERSION
from kraftlite.protocol.internal import MessageError
from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.security import acls
from kraftlite.security.authenticator import Authenticator, AuthSettings
from kraftlite.security.cluster_auth import derive_key
from kraftlite.security.gate import Gate
from kraftlite.service import BrokerService
from kraftlite.storage.memory import MemoryLogStorage

BROKER_ID: Final = 1
SECRET: Final = "in-process-cluster-secret-of-some-length"
CLUSTER_ID: Final = "in-process-cluster"
BROKER_URL: Final = "http://broker-1.invalid:9100"
KAFKA_ADDRESS: Final = "broker-1.invalid:9092"
CONTROLLER_URL: Final = "http://controller.invalid:9000"
SESSION_TIMEOUT_MS: Final = 9_000
PRODUCER_ID_KEY: Final = derive_key(SECRET, "producer ids")  # as node/broker.py derives it


class NetworkCallError(AssertionError):
    """Code under test tried to reach another node: an in-process broker has none."""


async def _refuse(request: aiohttp.ClientRequest, handler: Any) -> aiohttp.ClientResponse:
    raise NetworkCallError(f"in-process broker: no network ({request.method} {request.url})")


def topic_id_for(name: str) -> str:
    """A topic's id, the same in every run (a controller would draw a random one)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kraftlite-inprocess:{name}").hex


class InProcessBroker:
    """Broker 1 of a one-broker cluster, in this process; an async context manager."""

    def __init__(
        self,
        *,
        auth: AuthSettings | None = None,
        offsets_partitions: int = 3,
        groups: GroupSettings | None = None,
    ) -> None:
        self.clock = ManualClock()
        self.storage = MemoryLogStorage()
        self.auth_settings = auth or AuthSettings()
        # Kafka's defaults but no initial rebalance delay: the ManualClock would never pass it
        self.group_settings = groups or GroupSettings(
            offsets_partitions=offsets_partitions, initial_rebalance_delay_ms=0
        )
        self._session: aiohttp.ClientSession | None = None
        self._connections: list[Session] = []

    async def __aenter__(self) -> InProcessBroker:
        self._session = aiohttp.ClientSession(middlewares=(_refuse,))
        self.broker = Broker(
            BrokerSettings(
                broker_id=BROKER_ID,
                url=BROKER_URL,
                controllers=(CONTROLLER_URL,),
                kafka=KAFKA_ADDRESS,
            ),
            self.storage,
            self._session,
            self.clock,
        )
        # node/broker.py's run_broker, piece by piece
        self.gate = Gate(
            Authenticator(
                self.auth_settings, SECRET, lambda: self.broker.replicas.image, self.clock
            ),
            self.clock,
            ready=self.broker.starting,
        )
        self.coordinator = GroupCoordinator(self.broker, self.group_settings)
        self.service = BrokerService(self.broker, self.coordinator, PRODUCER_ID_KEY)
        self.handlers = Handlers(self.service, self.gate)
        self._register()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for connection in self._connections:
            connection.close()
        for shard in self.coordinator._shards.values():  # stops classic groups' tickers
            shard.close()
        await self.service.transactions.stop()
        await self.coordinator.stop()
        if self._session is not None:
            await self._session.close()

    def _register(self) -> None:
        """What registration and the first metadata do: broker 1 registered at the next
        version (its broker epoch, which the registration answer would carry), unfenced,
        and the offsets topic created (GroupCoordinator.ensure_offsets_topic would ask the
        controllers for it)."""
        self.broker.broker_epoch = self.image.version + 1
        self.broker.cluster_id = CLUSTER_ID
        self.apply(
            r.RegisterBrokerRecord(
                broker_id=BROKER_ID,
                incarnation_id=self.broker.incarnation_id,
                broker_epoch=self.broker.broker_epoch,
                url=BROKER_URL,
                kafka=KAFKA_ADDRESS,
            )
        )
        self.apply(
            r.UnfenceBrokerRecord(broker_id=BROKER_ID, broker_epoch=self.broker.broker_epoch)
        )
        self.broker.fenced = False  # the next heartbeat answer would say so
        self.create_topic(
            OFFSETS_TOPIC,
            self.group_settings.offsets_partitions,
            configs={"cleanup.policy": "compact", "min.insync.replicas": "1"},
        )

    # -- metadata ------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        """The metadata broker 1 acts on."""
        return self.broker.replicas.image

    def apply(self, *records: r.MetadataRecord) -> MetadataImage:
        """Commit `records` as one batch and have the broker act on it, as it acts on a
        controller's answer (Broker._follow, then _act_on_metadata without what needs a
        controller: the unfencing heartbeat and learning voters)."""
        follower = self.broker.metadata
        batch = r.RecordBatch(follower.image.version, records, uuid.uuid4().hex)
        follower.apply([orjson.loads(r.encode_batch(batch))], None)  # as the answer holds it
        changes = follower.changes_since(self.broker.replicas.image, BROKER_ID)
        self.broker.replicas.apply_image(follower.image, changes, follower.config_topics())
        follower.acted()
        self.broker.lease.applied(follower.image.version)
        self.heartbeat()
        return self.image

    def heartbeat(self) -> None:
        """An answered heartbeat, sent now: renews the leadership lease (broker/lease.py)
        for a session from now on the ManualClock."""
        self.broker.lease.answered(
            self.clock.monotonic_ms(), self.image.version, SESSION_TIMEOUT_MS
        )

    def register_broker(self, broker_id: int) -> None:
        """Another live broker (its partitions are led there: this one answers
        NOT_LEADER_OR_FOLLOWER for them)."""
        epoch = self.image.version + 1
        self.apply(
            r.RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=f"incarnation-{broker_id}",
                broker_epoch=epoch,
                url=f"http://broker-{broker_id}.invalid:9100",
                kafka=f"broker-{broker_id}.invalid:9092",
            ),
        )
        self.apply(r.UnfenceBrokerRecord(broker_id=broker_id, broker_epoch=epoch))

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        leader: int = BROKER_ID,
        configs: Mapping[str, str] | None = None,
    ) -> str:
        """A topic of `partitions` partitions, each with the one replica `leader` (ISR
        [leader]); its topic id."""
        topic_id = topic_id_for(name)
        self.apply(
            r.TopicRecord(name=name, topic_id=topic_id),
            *(
                r.ConfigRecord(topic_id=topic_id, name=key, value=value)
                for key, value in (configs or {}).items()
            ),
            *(
                r.PartitionRecord(
                    topic_id=topic_id, partition=i, replicas=(leader,), isr=(leader,), leader=leader
                )
                for i in range(partitions)
            ),
        )
        return topic_id

    def partition(self, topic: str, index: int = 0) -> Partition:
        """Broker 1's replica of the partition (whatever its role)."""
        return self.broker.replicas.partitions[(topic_id_for(topic), index)]

    def move_coordinator(
        self, group: str, *, predecessor_recorded: bool, records_classic: bool = True
    ) -> None:
        """The group's offsets partition loses its leader and gets it back two leader
        epochs later: a coordinator move as this broker can see one. With
        `predecessor_recorded`, the leaderless epoch's coordinator marker is put in the log
        as a coordinator of that epoch that recorded its members would have left it
        (kraftlite/groups/members_log.py rule 3); without, the move is past an epoch that
        recorded nothing. `records_classic` False: a predecessor that recorded KIP-848
        members only (classic groups' generations not)."""
        index = self.coordinator.offsets_partition(group)
        topic_id = topic_id_for(OFFSETS_TOPIC)
        self.apply(r.PartitionChangeRecord(topic_id=topic_id, partition=index, leader=r.NO_LEADER))
        partition = self.partition(OFFSETS_TOPIC, index)
        if predecessor_recorded:
            marker = CoordinatorMarker(partition.leader_epoch, 0, records_classic)
            batch = fmt.encode_batch(
                [marker.value()], keys=[COORDINATOR_KEY], timestamps=[self.clock.now_ms()]
            )
            partition.log.append(batch, partition.leader_epoch)
        self.apply(r.PartitionChangeRecord(topic_id=topic_id, partition=index, leader=BROKER_ID))

    # -- the Kafka edge ------------------------------------------------------------------

    def connect(
        self, *, host: str = "10.0.0.7", certificate_principal: str | None = None
    ) -> KafkaConnection:
        """A Kafka client's connection (one handlers.Session, as server.py makes one per
        socket); with `certificate_principal`, as if its TLS client certificate said so."""
        session = self.handlers.session(host, certificate_principal)
        self._connections.append(session)
        return KafkaConnection(session)


class KafkaConnection:
    """Requests encoded as a Kafka client encodes them, decoded as the server decodes them,
    handled by the connection's Session; answers decoded as a client decodes them."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._correlation = 0

    async def send(
        self, api_key: int, version: int, body: Mapping[str, Any], client_id: str = "test"
    ) -> dict[str, Any] | None:
        """The decoded answer, or None for a request that is not answered (acks=0).
        Raises what `Session.handle` raises (handlers.CloseConnection)."""
        self._correlation += 1
        frame = messages.encode_request(api_key, version, self._correlation, client_id, body)
        answer = await self.session.handle(messages.decode_request(frame))
        if answer is None:
            return None
        response = messages.decode_response(api_key, version, answer)
        assert response.correlation_id == self._correlation
        return response.body

    async def call(
        self, api_key: int, version: int, body: Mapping[str, Any], client_id: str = "test"
    ) -> dict[str, Any]:
        """`send` for a request that must be answered."""
        answer = await self.send(api_key, version, body, client_id)
        assert answer is not None, f"api {api_key} v{version} was not answered"
        return answer

    async def authenticate_plain(self, user: str, password: str) -> dict[str, Any]:
        """SaslHandshake v1 (PLAIN), then SaslAuthenticate v2 with RFC 4616's message; the
        SaslAuthenticate answer."""
        handshake = await self.call(messages.ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert handshake["error_code"] == 0, handshake
        token = b"\0" + user.encode() + b"\0" + password.encode()
        return await self.call(messages.ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})


def kafka_batch(
    values: Sequence[bytes],
    *,
    timestamp: int,
    keys: Sequence[bytes | None] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One Kafka record batch (magic 2, uncompressed), as a producer sends it."""
    return kafka_records.encode_batch(
        [
            kafka_records.KafkaRecord(i, timestamp, None if keys is None else keys[i], value)
            for i, value in enumerate(values)
        ],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def kafka_records_of(data: bytes | None) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of a Fetch answer's record batches."""
    return [
        (batch.base_offset + record.offset_delta, record.key, record.value)
        for batch in kafka_records.decode_batches(data or b"")
        for record in batch.records
    ]


class ControllerTwin:
    """Answers the broker's controller calls: applies the change to the broker's metadata
    a moment after it answers (as a controller's answer outruns the metadata fetch), and
    names the version that holds it; or raises `error` (for TOPIC_ALREADY_EXISTS, the topic
    arrives a moment later, as another broker's creation would). The ACL routes (GET, POST
    and DELETE /v1/acls) are answered by the controllers' own decisions (`_acls`)."""

    def __init__(self, node: InProcessBroker, error: KraftliteError | None = None) -> None:
        self.node = node
        self.error = error
        self.calls: list[tuple[str, str, Any, dict[str, str] | None]] = []

    async def call_with_headers(
        self, method: str, path: str, body: Any = None, **options: Any
    ) -> tuple[int, Any, dict[str, str]]:
        assert options.get("raw") is True  # the typed answer is read from the bytes
        wanted = None if body is None else orjson.loads(body)
        self.calls.append((method, path, wanted, options.get("headers")))
        node = self.node
        if self.error is not None:
            if self.error.code is ErrorCode.TOPIC_ALREADY_EXISTS:  # another broker's, coming
                asyncio.get_running_loop().call_later(0.05, node.create_topic, wanted["name"])
            raise self.error
        route = urlsplit(path)
        if route.path == "/v1/acls":
            return self._acls(method, dict(parse_qsl(route.query)) if method == "GET" else wanted)
        if route.path in {"/v1/elections", "/v1/reassignments", "/v1/quorum"} or (
            method == "PUT" and route.path.endswith("/configs")
        ):
            return self._cluster_admin(method, route.path, wanted)
        if route.path.startswith("/v1/users") or route.path == "/v1/quotas":
            return self._users_and_quotas(method, route.path, dict(parse_qsl(route.query)), wanted)
        version = node.image.version + 1
        if method == "DELETE":
            topic_id = topic_id_for(path.rsplit("/", 1)[1])
            change: Any = lambda: node.apply(r.RemoveTopicRecord(topic_id=topic_id))  # noqa: E731
        else:
            configs = {k: str(v) for k, v in (wanted.get("configs") or {}).items()}
            change = lambda: node.create_topic(  # noqa: E731
                wanted["name"], wanted["partitions"], configs=configs
            )
        asyncio.get_running_loop().call_later(0.05, change)
        if method == "DELETE":
            return 204, b"", {METADATA_VERSION: str(version)}
        await asyncio.sleep(0.1)  # the view of the topic as the controller has it
        view = topic_view(node.image.topics[topic_id_for(wanted["name"])])
        return 201, orjson.dumps(view), {METADATA_VERSION: str(version)}

    def _users_and_quotas(
        self, method: str, path: str, query: dict[str, str], wanted: Any
    ) -> tuple[int, Any, dict[str, str]]:
        """controller_app.py's create_user (a credential computed elsewhere), delete_user
        (with `?mechanism=`) and alter_quotas: the same body types and decisions, the change
        applied to the broker's metadata at once, its version named as the routes name it."""
        image = self.node.image
        try:
            if path == "/v1/quotas":
                quota = admin.decode(admin_bodies.QuotaRequest, wanted)
                result: Any = access.alter_quotas(image, quota.principal, admin_bodies.given(quota))
            elif method == "DELETE":
                name = unquote(path.removeprefix("/v1/users/"))
                result = access.delete_user(image, name, query.get("mechanism"))
            else:
                user = admin.decode(admin_bodies.UserRequest, wanted)
                assert user.password is msgspec.UNSET, "the Kafka edge never sends a password"
                credential = r.UserScramCredentialRecord(
                    name=access.validate_user_name(user.name),
                    mechanism=user.mechanism,
                    salt=str(user.salt),
                    stored_key=str(user.stored_key),
                    server_key=str(user.server_key),
                    iterations=user.iterations,
                )
                result = access.set_user_credential(image, credential)
        except MessageError as exc:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        self.node.apply(*result.records)
        return 200, b"{}", {METADATA_VERSION: str(self.node.image.version)}

    def _acls(self, method: str, wanted: Any) -> tuple[int, Any, dict[str, str]]:
        """controller_app.py's create_acl, list_acls and delete_acls: the same body types
        and decisions, the change applied to the broker's metadata at once (the ACL routes
        name no metadata version to wait for)."""
        image = self.node.image
        try:
            if method == "POST":
                body = admin.decode(admin_bodies.AclRequest, wanted)
            else:
                body = admin.decode(admin_bodies.AclFilter, wanted)
        except MessageError as exc:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        if method == "POST":
            acl = acls.acl_from_request(uuid.uuid4().hex, admin_bodies.given(body))
            created = access.create_acls(image, (acl,))
            if created.records:
                self.node.apply(*created.records)
            return 201, orjson.dumps(acls.acl_view(created.response[0])), {}
        selecting = acls.filter_from_request(admin_bodies.given(body))
        if method == "GET":
            matching = [
                a for _, a in sorted(image.acls.items()) if acls.matches_filter(a, selecting)
            ]
            return 200, orjson.dumps({"acls": [acls.acl_view(a) for a in matching]}), {}
        assert method == "DELETE", method
        deleted = access.delete_acls(image, selecting)
        if deleted.records:
            self.node.apply(*deleted.records)
        return 200, orjson.dumps({"deleted": [acls.acl_view(a) for a in deleted.response]}), {}

    def _cluster_admin(
        self, method: str, path: str, wanted: Any
    ) -> tuple[int, Any, dict[str, str]]:
        """controller_app.py's config, election, reassignment and quorum routes: the same
        body types and decisions, the change applied to the broker's metadata at once and
        its version named."""
        from kraftlite.controller import decisions, elastic, reassignments  # noqa: PLC0415

        node, image = self.node, self.node.image
        if path == "/v1/quorum":
            return 200, orjson.dumps(getattr(self, "quorum", QUORUM)), {}
        if path == "/v1/reassignments" and method == "GET":
            return (
                200,
                orjson.dumps({"reassignments": reassignments.ongoing_reassignments(image)}),
                {},
            )
        result: Any
        try:
            if path.startswith("/v1/topics/"):
                body: Any = admin.decode(admin.AlterConfigsBody, wanted)
            elif path.startswith("/v1/brokers/"):
                body = admin.decode(admin.AlterBrokerConfigsBody, wanted)
            elif path == "/v1/elections":
                body = admin.decode(admin_bodies.ElectionsRequest, wanted)
        except MessageError as exc:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        if path.startswith("/v1/topics/"):
            name = unquote(path.split("/")[3])
            result = decisions.alter_topic_configs(image, name, body.configs)
        elif path.startswith("/v1/brokers/"):
            result = elastic.alter_broker_configs(image, int(path.split("/")[3]), body.configs)
        elif path == "/v1/elections":
            elect = elastic.elect_preferred if body.type == "preferred" else elastic.elect_unclean
            result = elect(image, body.partitions)
        else:
            result = reassignments.alter_reassignments(
                image, reassignments.parse_reassignments(wanted)
            )
        if result.records:
            node.apply(*result.records)
        headers = {METADATA_VERSION: str(node.image.version)}
        if path == "/v1/elections":
            answers = [
                {"topic": e.topic, "partition": e.partition, "leader": e.leader}
                | (
                    {}
                    if e.error is None
                    else {"error_code": e.error.code.name, "message": e.error.message}
                )
                for e in result.response
            ]
            return 200, orjson.dumps({"elections": answers}), headers
        if path == "/v1/reassignments":
            moves = [
                reassignments.reassignment_view(o.topic, o.partition, o.registration)
                if o.registration is not None
                else {
                    "topic": o.topic,
                    "partition": o.partition,
                    "error_code": o.error.code.name,
                    "message": o.error.message,
                }
                for o in result.response
            ]
            return 202, orjson.dumps({"reassignments": moves}), headers
        if path.startswith("/v1/topics/"):  # the topic as it is now (_topic_or_404)
            return 200, orjson.dumps(topic_view(node.image.topics[topic_id_for(name)])), headers
        return 200, orjson.dumps({"configs": result.response}), headers


# What the ControllerTwin answers GET /v1/quorum (the active controller's view) with, unless
# a test sets its `quorum`.
QUORUM: Final[Mapping[str, Any]] = {
    "leader_id": 1,
    "term": 3,
    "commit_index": 120,
    "metadata_offset": 100,
    "voters": [
        {"id": 1, "address": "c1:9301", "state": "leader", "url": None, "lag": 0},
        {"id": 2, "address": "c2:9302", "state": "follower", "url": None, "lag": 20},
        {"id": 3, "address": "c3:9303", "state": "unreachable", "url": None, "lag": None},
    ],
    "observers": [{"id": BROKER_ID, "metadata_offset": 98, "lag": 2}],
}
