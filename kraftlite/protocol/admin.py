"""Typed admin calls a broker makes of the controllers, for a client (the Kafka edge's
CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs and the ACL APIs) or for
itself (the group coordinator's offsets topic), and the bodies the controllers decode: one
type at both ends, and the OpenAPI document's schemas of those bodies generated from it
(api/openapi.py), so document, sender and server cannot drift.

Rules:
1. A body type holds the wire shape: msgspec decodes and type-checks it in one step, and a
   body of the wrong shape is refused as INVALID_REQUEST. What the values mean (a name's
   characters, a count against the cluster's limits and state, config names and values)
   the controller's decisions check, with their own error codes (INVALID_TOPIC_EXCEPTION,
   INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG), as Kafka clients expect;
   a field's schema states those rules for the document (`extra_json_schema`, or a
   reference to the document's TopicName, TopicConfigsUpdate and BrokerConfigsUpdate,
   built from the rules in metadata/topics.py and controller/elastic.py). Every integer's
   schema is bounded: one past 64 bits is no JSON integer to the server (it parses as a
   float), and the type refuses it.
2. A request (`AdminRequest`) knows its method, its route (a name is one percent-quoted
   path segment: urls.py), its body, and how to read the controllers' answer (MessageError
   for one that is not).
3. These are the public API's bodies (POST /v1/topics, ...; docs/api-v1): no version
   field; they change only as the API v1 contract may, compatibly. Unknown fields are
   ignored, as everywhere in the API. The API's other admin bodies (users, ACLs, quotas,
   reassignments, ...) are typed alike in admin_bodies.py; of those a broker sends the
   ACLs' (`CreateAclRequest`, `ListAclsRequest`, `DeleteAclsRequest` carry them), the users'
   and the quotas' (`SetUserCredentialRequest`, `DeleteUserCredentialRequest`,
   `AlterQuotasRequest`: the Kafka edge's SCRAM and quota APIs).
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Protocol, TypeVar
from urllib.parse import quote, urlencode

import msgspec
from msgspec import Meta

from kraftlite.protocol import urls
from kraftlite.protocol.internal import MessageError, decoding

if TYPE_CHECKING:  # admin_bodies imports this module
    from kraftlite.protocol.admin_bodies import AclFilter, AclRequest

MAX_PARTITIONS: Final = 10_000  # partitions of one topic, and of one CreateTopics in all
MAX_TOPICS_PER_REQUEST: Final = 1_000
MAX_REPLICATION_FACTOR: Final = 2**15 - 1  # Kafka's (an int16); the live brokers, first
MAX_ASSIGNED_REPLICAS: Final = 1024  # brokers one partition of an assignment names
REF_TEMPLATE: Final = "#/components/schemas/{name}"  # where the document keeps schemas


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": REF_TEMPLATE.format(name=name)}


# Rule 1: a name and configs are the decisions' to check (metadata/topics.py; a broker's
# configs: controller/elastic.py).
TopicName = Annotated[str, Meta(extra_json_schema=_ref("TopicName"))]
Configs = Annotated[dict[str, Any], Meta(extra_json_schema=_ref("TopicConfigsUpdate"))]
ConfigValue = str | int | bool | None  # what a broker sends; None resets to the default


class CreateTopicRequest(msgspec.Struct, frozen=True):
    # The docstring of a body in DOCUMENTED_BODIES is its description there: one line.
    """A topic to create. Its replicas are placed on live brokers, rack-aware."""

    name: TopicName
    partitions: Annotated[
        int, Meta(extra_json_schema={"minimum": 1, "maximum": MAX_PARTITIONS})
    ] = 1
    replication_factor: Annotated[
        Annotated[int, Meta(extra_json_schema={"minimum": 1, "maximum": MAX_REPLICATION_FACTOR})]
        | None,
        Meta(description="default min(3, live brokers); at most the live brokers"),
    ] = None
    configs: Configs | None = None
    internal: Annotated[
        bool,
        Meta(
            description="the brokers' own topics (__consumer_offsets): honoured only when a "
            "broker asks for itself; a client's request is refused with "
            "INVALID_TOPIC_EXCEPTION as for any other name starting with __"
        ),
    ] = False
    replica_assignment: Annotated[
        Annotated[
            tuple[
                Annotated[
                    tuple[Annotated[int, Meta(ge=0, le=2**31 - 1)], ...],
                    Meta(min_length=1, max_length=MAX_ASSIGNED_REPLICAS),
                ],
                ...,
            ],
            Meta(min_length=1, max_length=MAX_PARTITIONS),
        ]
        | None,
        Meta(
            description="the brokers of each partition, in order, the first its preferred "
            "leader (Kafka's CreateTopics assignments): it sets the partition count and the "
            "replication factor, and `partitions` and `replication_factor` are not read. "
            "Every partition names the same number of distinct registered brokers, at least "
            "one of them live; else INVALID_REPLICA_ASSIGNMENT"
        ),
    ] = None
    validate_only: Annotated[
        bool,
        Meta(
            description="check the request against the cluster as it is, create nothing "
            "(Kafka's validate_only): the answer is the topic it would be, with an empty "
            "topic_id, or the error (in the batch form, for this topic alone)"
        ),
    ] = False

    method: ClassVar[str] = "POST"

    @property
    def partition_count(self) -> int:
        """The partitions the topic gets: its assignment's, else `partitions`."""
        assignment = self.replica_assignment
        return self.partitions if assignment is None else len(assignment)

    def route(self) -> str:
        return "/v1/topics"

    def body(self) -> msgspec.Struct:
        return self

    def answer(self, body: bytes) -> TopicAnswer:
        return _read(TopicAnswer, body)


class CreateTopicsRequest(msgspec.Struct, frozen=True):
    """Many topics in one decision and one metadata batch (Kafka's CreateTopics)."""

    topics: Annotated[
        tuple[CreateTopicRequest, ...],
        Meta(
            description=f"at most {MAX_PARTITIONS:,} partitions in all",
            extra_json_schema={"minItems": 1, "maxItems": MAX_TOPICS_PER_REQUEST},
        ),
    ]


class DeleteTopicRequest(msgspec.Struct, frozen=True):
    """Delete topic `topic`."""

    topic: str

    method: ClassVar[str] = "DELETE"

    def route(self) -> str:
        return urls.topic_path(self.topic)

    def body(self) -> msgspec.Struct | None:
        return None

    def answer(self, body: bytes) -> None:
        return None


class CreatePartitionsBody(msgspec.Struct, frozen=True, omit_defaults=True):
    """Grow a topic to `count` partitions (never shrinks)."""

    count: Annotated[
        int,
        Meta(
            description="the new partition count, above the current one",
            extra_json_schema={"minimum": 1, "maximum": MAX_PARTITIONS},
        ),
    ]
    assignments: Annotated[
        Annotated[
            tuple[
                Annotated[
                    tuple[Annotated[int, Meta(ge=0, le=2**31 - 1)], ...],
                    Meta(min_length=1, max_length=MAX_ASSIGNED_REPLICAS),
                ],
                ...,
            ],
            Meta(max_length=MAX_PARTITIONS),
        ]
        | None,
        Meta(
            description="the brokers of each new partition, in order, the first its "
            "preferred leader (Kafka's CreatePartitions assignments): one entry per partition "
            "added, each naming as many distinct registered brokers as the topic's "
            "replication factor, at least one of them live; else INVALID_REPLICA_ASSIGNMENT. "
            "Default: placed as a new topic's"
        ),
    ] = None
    validate_only: Annotated[
        bool,
        Meta(
            description="check the request against the cluster as it is, add nothing "
            "(Kafka's validate_only): the answer is the topic as it is, or the error"
        ),
    ] = False


class CreatePartitionsRequest(msgspec.Struct, frozen=True):
    """Grow topic `topic` to `count` partitions, placed by `assignments` if given."""

    topic: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None
    validate_only: bool = False

    method: ClassVar[str] = "POST"

    def route(self) -> str:
        return urls.topic_path(self.topic, "partitions")

    def body(self) -> msgspec.Struct:
        return CreatePartitionsBody(self.count, self.assignments, self.validate_only)

    def answer(self, body: bytes) -> TopicAnswer:
        return _read(TopicAnswer, body)


class AlterConfigsBody(msgspec.Struct, frozen=True):
    """Sets the configs named (others are unchanged); null resets one."""

    configs: Configs


class AlterConfigsRequest(msgspec.Struct, frozen=True):
    """Set (a value) or reset (None) configs of topic `topic`."""

    topic: str
    configs: dict[str, ConfigValue]

    method: ClassVar[str] = "PUT"

    def route(self) -> str:
        return urls.topic_path(self.topic, "configs")

    def body(self) -> msgspec.Struct:
        return AlterConfigsBody(self.configs)

    def answer(self, body: bytes) -> TopicAnswer:
        return _read(TopicAnswer, body)


class AlterBrokerConfigsBody(msgspec.Struct, frozen=True):
    """Sets the dynamic broker configs named (others are unchanged); null resets one."""

    configs: Annotated[dict[str, Any], Meta(extra_json_schema=_ref("BrokerConfigsUpdate"))]


class AlterBrokerConfigsRequest(msgspec.Struct, frozen=True):
    """Set (a value) or reset (None) dynamic configs of broker `broker_id`."""

    broker_id: int
    configs: dict[str, ConfigValue]

    method: ClassVar[str] = "PUT"

    def route(self) -> str:
        return f"/v1/brokers/{int(self.broker_id)}/configs"

    def body(self) -> msgspec.Struct:
        return AlterBrokerConfigsBody(self.configs)

    def answer(self, body: bytes) -> None:
        return None


# The Kafka edge's ElectLeaders, Alter/ListPartitionReassignments and DescribeQuorum
# (kafka/cluster_apis.py): the elastic cluster's routes, their bodies admin_bodies.py's.
if TYPE_CHECKING:  # (admin_bodies imports this module)
    from kraftlite.protocol.admin_bodies import ElectionsRequest, ReassignmentsRequest


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    """A preferred or unclean election (POST /v1/elections): each partition's outcome."""

    elections: ElectionsRequest

    method: ClassVar[str] = "POST"

    def route(self) -> str:
        return "/v1/elections"

    def body(self) -> msgspec.Struct:
        return self.elections

    def answer(self, body: bytes) -> tuple[ElectionAnswer, ...]:
        return _read(ElectionsAnswer, body).elections


@dataclass(frozen=True, slots=True)
class AlterReassignmentsRequest:
    """Start, replace or cancel partition moves (POST /v1/reassignments, KIP-455): the
    controllers refuse the whole request for one bad item, else answer each partition."""

    reassignments: ReassignmentsRequest

    method: ClassVar[str] = "POST"

    def route(self) -> str:
        return "/v1/reassignments"

    def body(self) -> msgspec.Struct:
        return self.reassignments

    def answer(self, body: bytes) -> tuple[ReassignmentAnswer, ...]:
        return _read(ReassignmentsAnswer, body).reassignments


@dataclass(frozen=True, slots=True)
class ListReassignmentsRequest:
    """Every partition being moved (GET /v1/reassignments)."""

    method: ClassVar[str] = "GET"

    def route(self) -> str:
        return "/v1/reassignments"

    def body(self) -> msgspec.Struct | None:
        return None

    def answer(self, body: bytes) -> tuple[ReassignmentAnswer, ...]:
        return _read(ReassignmentsAnswer, body).reassignments


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    """The controller quorum as its active controller sees it (GET /v1/quorum?leader=true):
    only it knows each voter's lag and each broker's metadata offset."""

    method: ClassVar[str] = "GET"

    def route(self) -> str:
        return "/v1/quorum?leader=true"

    def body(self) -> msgspec.Struct | None:
        return None

    def answer(self, body: bytes) -> QuorumAnswer:
        return _read(QuorumAnswer, body)


class ElectionAnswer(msgspec.Struct, frozen=True):
    """One partition of an election: its leader after, or the error (a name) that kept it."""

    topic: str
    partition: int
    leader: int
    error_code: str | None = None
    message: str | None = None


class ElectionsAnswer(msgspec.Struct, frozen=True):
    elections: tuple[ElectionAnswer, ...] = ()


class ReassignmentAnswer(msgspec.Struct, frozen=True):
    """A partition's move as committed (replicas: the target, then those leaving), or the
    error (a name) that kept it."""

    topic: str
    partition: int
    replicas: tuple[int, ...] = ()
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    error_code: str | None = None
    message: str | None = None


class ReassignmentsAnswer(msgspec.Struct, frozen=True):
    reassignments: tuple[ReassignmentAnswer, ...] = ()


class VoterAnswer(msgspec.Struct, frozen=True):
    id: int
    state: str
    lag: int | None = None  # committed Raft entries it lacks (the leader's view only)


class ObserverAnswer(msgspec.Struct, frozen=True):
    id: int  # a broker
    metadata_offset: int
    lag: int  # metadata batches it lacks


class QuorumAnswer(msgspec.Struct, frozen=True):
    leader_id: int | None
    term: int
    commit_index: int
    voters: tuple[VoterAnswer, ...] = ()
    observers: tuple[ObserverAnswer, ...] = ()


@dataclass(frozen=True, slots=True)
class CreateAclRequest:
    """Add one ACL (POST /v1/acls): the controllers answer it as stored (an equal one that
    exists is kept)."""

    acl: AclRequest

    method: ClassVar[str] = "POST"

    def route(self) -> str:
        return "/v1/acls"

    def body(self) -> msgspec.Struct:
        return self.acl

    def answer(self, body: bytes) -> AclAnswer:
        return _read(AclAnswer, body)


@dataclass(frozen=True, slots=True)
class ListAclsRequest:
    """The ACLs matching `filter` (GET /v1/acls, its fields the query's; none: every ACL)."""

    filter: AclFilter

    method: ClassVar[str] = "GET"

    def route(self) -> str:
        query = urlencode(msgspec.to_builtins(self.filter), quote_via=quote)
        return f"/v1/acls?{query}" if query else "/v1/acls"

    def body(self) -> msgspec.Struct | None:
        return None

    def answer(self, body: bytes) -> tuple[AclAnswer, ...]:
        return _read(AclsAnswer, body).acls


@dataclass(frozen=True, slots=True)
class DeleteAclsRequest:
    """Delete every ACL matching `filter` (DELETE /v1/acls; the controllers refuse a filter
    that names no field); the answer is the ACLs deleted."""

    filter: AclFilter

    method: ClassVar[str] = "DELETE"

    def route(self) -> str:
        return "/v1/acls"

    def body(self) -> msgspec.Struct:
        return self.filter

    def answer(self, body: bytes) -> tuple[AclAnswer, ...]:
        return _read(DeletedAclsAnswer, body).deleted


if TYPE_CHECKING:  # (admin_bodies imports this module)
    from kraftlite.protocol.admin_bodies import QuotaRequest, UserRequest


@dataclass(frozen=True, slots=True)
class SetUserCredentialRequest:
    """Create a user, or set its credential for one mechanism (POST /v1/users), with a
    SCRAM credential computed elsewhere (`UserRequest` without a password: the Kafka edge's
    AlterUserScramCredentials). Its keys are never shown (repr)."""

    user: UserRequest

    method: ClassVar[str] = "POST"

    def __repr__(self) -> str:
        return f"SetUserCredentialRequest({self.user.name!r}, {self.user.mechanism!r})"

    def route(self) -> str:
        return "/v1/users"

    def body(self) -> msgspec.Struct:
        return self.user

    def answer(self, body: bytes) -> None:
        return None


@dataclass(frozen=True, slots=True)
class DeleteUserCredentialRequest:
    """Delete user `name`'s credential for `mechanism` (DELETE /v1/users/{name}?mechanism=;
    with its last one, the user); RESOURCE_NOT_FOUND when it has none."""

    name: str
    mechanism: str

    method: ClassVar[str] = "DELETE"

    def route(self) -> str:
        query = urlencode({"mechanism": self.mechanism}, quote_via=quote)
        return f"/v1/users/{quote(self.name, safe='')}?{query}"

    def body(self) -> msgspec.Struct | None:
        return None

    def answer(self, body: bytes) -> None:
        return None


@dataclass(frozen=True, slots=True)
class AlterQuotasRequest:
    """Set or remove (null) quotas of one principal, in one commit (POST /v1/quotas)."""

    quota: QuotaRequest

    method: ClassVar[str] = "POST"

    def route(self) -> str:
        return "/v1/quotas"

    def body(self) -> msgspec.Struct:
        return self.quota

    def answer(self, body: bytes) -> None:
        return None


# Bodies whose schemas the OpenAPI document takes from here (api/openapi.py, with the
# public API's other admin bodies: admin_bodies.DOCUMENTED_BODIES).
DOCUMENTED_BODIES: Final = (
    CreateTopicRequest,
    CreateTopicsRequest,
    CreatePartitionsBody,
    AlterConfigsBody,
    AlterBrokerConfigsBody,
)


# ---------------------------------------------------------------------------- answers


class PartitionAnswer(msgspec.Struct, frozen=True):
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class TopicAnswer(msgspec.Struct, frozen=True):
    """A topic as the controllers answer a change to it (GET /v1/topics/{topic}'s view; the
    fields a broker reads)."""

    name: str
    topic_id: str
    configs: dict[str, str] = {}
    partitions: tuple[PartitionAnswer, ...] = ()


class AclAnswer(msgspec.Struct, frozen=True):
    """An ACL as the controllers show it (security/acls.py's `acl_view`)."""

    id: str
    principal: str
    host: str
    operation: str
    permission: str
    resource_type: str
    resource_name: str
    pattern_type: str


class AclsAnswer(msgspec.Struct, frozen=True):
    acls: tuple[AclAnswer, ...] = ()


class DeletedAclsAnswer(msgspec.Struct, frozen=True):
    deleted: tuple[AclAnswer, ...] = ()


A_co = TypeVar("A_co", covariant=True)
S = TypeVar("S")


class AdminRequest(Protocol[A_co]):
    """What `Broker.admin_call` sends (rule 2) and what it answers (`A_co`)."""

    method: ClassVar[str]

    def route(self) -> str: ...

    def body(self) -> msgspec.Struct | None: ...

    def answer(self, body: bytes) -> A_co: ...


def decode(kind: type[S], data: Any) -> S:
    """A body the server parsed (JSON values) as `kind`, or MessageError (rule 1)."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise MessageError(str(exc)) from None


def _read(kind: type[S], body: bytes) -> S:
    """A controller's answer as `kind`, or MessageError (whatever is wrong with it)."""
    with decoding():
        return msgspec.json.decode(body, type=kind)
