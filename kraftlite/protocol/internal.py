"""Typed, versioned messages of the internal plane: brokers to controllers (metadata fetch,
AlterPartition) and brokers to brokers (replica fetch; and the read-only queries one broker
asks the others for a client: leader offsets, console figures, coordinated groups). Both
ends build and read them here, as Kafka's message JSON schemas do for its RPCs, and as
metadata/records.py does for records.

Rules:
1. Every body is a JSON object with `"v": VERSION` (the `Message` base encodes it first and
   requires it). A reader refuses other versions with MessageError (the edge answers 400
   INVALID_REQUEST): a mixed-version cluster fails loudly.
2. Each message is a frozen msgspec Struct whose field types carry its bounds
   (`Annotated[..., Meta(...)]`); `decode` (bytes) and `from_json` (parsed JSON) decode and
   validate in one step, and any failure is a MessageError. Nothing a peer sends reaches the
   broker or controller untyped. The edges add no checks of their own.
3. Raw bytes (encoded record batches, stored log segments) are never re-encoded: the
   metadata answer splices the controller's stored batch and snapshot bytes into its body
   (msgspec.Raw), and replica fetch data travels as framed segments (framing.py).
4. A GET's query is its request (`to_params` / `from_params`). A query of the broker queries
   may leave `v` out: it then means 1, the version those routes had before they carried it
   (tools and tests call them so); any other `v` is refused as in rule 1.
5. An asker treats an answer that is not a valid message (MessageError) as a node that did
   not answer: it leaves that node's part out, as it does on a timeout.
Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Final, Generic, Literal, Self, TypedDict, TypeVar, Union

import msgspec
from msgspec import Meta

from kraftlite.protocol import names

VERSION: Final = 1
MAX_ITEMS: Final = 200_000  # partitions in one AlterPartition or replica fetch request
MAX_WAIT_MS: Final = 30_000
MAX_BROKER_IDS: Final = 1024  # replicas or ISR members of one partition
MAX_METADATA_BATCHES: Final = 10_000_000

# Field types: each bound is part of the type, checked while decoding.
_LONG_MAX: Final = 2**63 - 1
Long = Annotated[int, Meta(ge=-(2**63), le=_LONG_MAX)]
NonNegative = Annotated[int, Meta(ge=0, le=_LONG_MAX)]
Positive = Annotated[int, Meta(ge=1, le=_LONG_MAX)]
EpochOrNone = Annotated[int, Meta(ge=-1, le=_LONG_MAX)]  # -1: no epoch (or no leader)
OffsetOrUnknown = Annotated[int, Meta(ge=-1, le=_LONG_MAX)]  # -1: not said
Int32 = Annotated[int, Meta(ge=0, le=2**31 - 1)]  # broker ids, partition indexes, counts
TopicId = Annotated[str, Meta(min_length=1, max_length=256)]
BrokerIds = Annotated[tuple[int, ...], Meta(max_length=MAX_BROKER_IDS)]


class MessageError(ValueError):
    """A body that is not a valid message of this version."""


@contextlib.contextmanager
def decoding() -> Iterator[None]:
    """Whatever is wrong with a JSON body msgspec decodes, as a MessageError (rule 2)."""
    try:
        yield
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise MessageError(str(exc)) from None
    except UnicodeDecodeError:  # a string that is not UTF-8, where msgspec keeps one
        raise MessageError("a string is not UTF-8") from None
    except RecursionError:  # msgspec has no depth limit of its own
        raise MessageError("nested too deep") from None


class Message(msgspec.Struct, frozen=True, tag_field="v", tag=VERSION):
    """A top-level message (rule 1): `"v"` is its msgspec tag, encoded first, required."""

    def encode(self) -> bytes:
        return _ENCODER.encode(self)

    def to_json(self) -> dict[str, Any]:
        """The body as JSON values (a dict for orjson, a framed header)."""
        built: dict[str, Any] = msgspec.to_builtins(self, str_keys=True)
        return built

    @classmethod
    def decode(cls, body: bytes | memoryview | str) -> Self:
        """Rule 2: the message in a JSON body, or MessageError."""
        with decoding():
            return _checked(cls, _decoder(cls).decode(body))

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """Rule 2: the message in already parsed JSON, or MessageError."""
        try:
            return _checked(cls, msgspec.convert(data, _versioned(cls), str_keys=True))
        except msgspec.ValidationError as exc:
            raise MessageError(str(exc)) from None


class _OtherVersion(msgspec.Struct, frozen=True, tag_field="v", tag=0):
    """See `_versioned`."""


M = TypeVar("M", bound=Message)
_ENCODER: Final = msgspec.json.Encoder()


@functools.cache
def _versioned(kind: type[Message]) -> Any:
    """The type a message is decoded as: a union of tagged Structs makes msgspec require
    the tag (a single tagged Struct would take a body without one); v 0 is _OtherVersion."""
    return Union[kind, _OtherVersion]  # noqa: UP007 - a type built at run time


@functools.cache
def _decoder(kind: type[Message]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(_versioned(kind))


def _checked(kind: type[M], message: object) -> M:
    if not isinstance(message, kind):
        raise MessageError(f"message version 0 is not {VERSION}")
    return message


Q = TypeVar("Q", bound=msgspec.Struct)


def _from_query(kind: type[Q], query: Mapping[str, str], version: str | None) -> Q:
    """Rule 4: a GET's query as its request; `version` is what an absent `v` means (None:
    it must be there). Values are decimal text, converted by the field types."""
    params = dict(query)
    found = params.pop("v", version)
    if found != str(VERSION):
        raise MessageError(f"message version {found!r} is not {VERSION}")
    try:
        return msgspec.convert(params, kind, strict=False)
    except msgspec.ValidationError as exc:
        raise MessageError(str(exc)) from None


# ---------------------------------------------------------------------------- registration


class BrokerRegistrationRequest(Message, frozen=True):
    """`POST /v1/internal/brokers`: a broker process announces itself (a fresh incarnation
    id per process start tells a restart from a retry)."""

    broker_id: Int32
    incarnation_id: Annotated[str, Meta(min_length=1, max_length=64)]
    url: Annotated[str, Meta(min_length=1, max_length=2048)]
    rack: str | None = None
    kafka: Annotated[str, Meta(max_length=300)] | None = None  # the Kafka listener's host:port
    # It runs its lease by the answers' lease_timeout_ms (a broker older than it does not,
    # and keeps a session's: controller/liveness.py rule 4 leaves it to its session).
    honours_lease_timeout: bool = False


class BrokerRegistrationResponse(Message, frozen=True):
    broker_epoch: NonNegative
    cluster_id: str
    heartbeat_interval_ms: Positive
    session_timeout_ms: Positive
    metadata_version: NonNegative
    # The soonest the controller may fence a broker it heard from (broker/lease.py rule 1);
    # absent from a controller older than it: the session.
    lease_timeout_ms: Positive | None = None


class BrokerHeartbeatRequest(Message, frozen=True):
    """`POST /v1/internal/brokers/{id}/heartbeat`: the broker's registration it speaks for,
    the metadata version it has applied, and whether it asks to shut down."""

    broker_epoch: Long
    metadata_version: NonNegative
    want_shutdown: bool = False
    honours_lease_timeout: bool = False  # as in BrokerRegistrationRequest


class BrokerUnreachableReport(Message, frozen=True):
    """`POST /v1/internal/brokers/{suspect}/unreachable`: a broker's connection to another
    (its partitions' leader) was refused, which is what a dead process's port answers. The
    controller checks that itself before fencing (controller/liveness.py)."""

    reporter_id: NonNegative
    reporter_epoch: Long
    suspect_epoch: Long  # the registration the reporter saw refusing (not a newer one)


class BrokerHeartbeatResponse(Message, frozen=True):
    broker_epoch: Long
    fenced: bool
    shutting_down: bool
    metadata_version: NonNegative  # the active controller's, when it answered (broker/lease.py)
    session_timeout_ms: Positive
    lease_timeout_ms: Positive | None = None  # as in BrokerRegistrationResponse


# ---------------------------------------------------------------------------- metadata fetch


class MetadataFetchRequest(msgspec.Struct, frozen=True):
    """`GET /v1/internal/metadata?v=1&...`: the record batches after `after_version`
    (long-poll up to `max_wait_ms` while there are none), at most about `max_bytes` of them.
    """

    after_version: Annotated[int, Meta(ge=-1, le=_LONG_MAX)]
    max_wait_ms: Annotated[int, Meta(ge=0, le=MAX_WAIT_MS)] = 0
    max_bytes: Annotated[int, Meta(ge=1, le=64 << 20)] = 8 << 20

    def to_params(self) -> dict[str, str]:
        return {"v": str(VERSION), **{f: str(getattr(self, f)) for f in self.__struct_fields__}}

    @classmethod
    def from_params(cls, query: Mapping[str, str]) -> MetadataFetchRequest:
        return _from_query(cls, query, None)


B = TypeVar("B", bound=Union[dict[str, Any], msgspec.Raw])  # noqa: UP007


class MetadataFetchResponse(Message, Generic[B], frozen=True):
    """What a controller holds after the request's version: the committed record batches in
    order (each as metadata/records.py encodes it), or, when the broker is further behind
    than the records it keeps, a snapshot of the whole image (metadata/views.py) to start
    from. `version` is the controller's latest; empty batches and no snapshot: nothing new.

    The controller builds it of its stored bytes, `MetadataFetchResponse[msgspec.Raw]`,
    spliced in as they are (rule 3); a broker decodes each batch and the snapshot as a JSON
    object.
    """

    version: NonNegative
    batches: Annotated[tuple[B, ...], Meta(max_length=MAX_METADATA_BATCHES)] = ()
    snapshot: B | None = None


# ---------------------------------------------------------------------------- AlterPartition


class IsrChange(msgspec.Struct, frozen=True):
    """One partition's proposed ISR (KIP-497), with the epochs the leader decided it at."""

    topic_id: TopicId
    partition: NonNegative
    leader_epoch: NonNegative
    partition_epoch: NonNegative
    new_isr: BrokerIds


class AlterPartitionRequest(Message, frozen=True):
    """`POST /v1/internal/alter-partition`: a leader's ISR changes, many partitions at once;
    the controller commits the acceptable ones in one batch and refuses the rest one by one.
    """

    broker_id: NonNegative
    broker_epoch: Long
    changes: Annotated[tuple[IsrChange, ...], Meta(min_length=1, max_length=MAX_ITEMS)] = (
        msgspec.field(name="partitions")
    )

    def __post_init__(self) -> None:
        if len({(c.topic_id, c.partition) for c in self.changes}) != len(self.changes):
            raise ValueError("each partition at most once")


class PartitionState(msgspec.Struct, frozen=True):
    """A partition's committed registration, as AlterPartition answers it."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


class IsrChangeResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """One partition's outcome: the committed state (its fields side by side, as the body
    has always carried them: `state`), or an error code (ErrorCode's name) and no state
    (a body carries one or the other: tools look for `error_code`)."""

    topic_id: TopicId
    partition: NonNegative
    leader: EpochOrNone | None = None
    leader_epoch: NonNegative | None = None
    partition_epoch: NonNegative | None = None
    isr: BrokerIds | None = None
    replicas: BrokerIds | None = None
    error_code: str | None = None
    message: str = ""

    def __post_init__(self) -> None:
        if (self.error_code is None) == (self.state is None):
            raise ValueError("a result is the committed state or an error code, not both")

    @classmethod
    def committed(cls, topic_id: str, partition: int, state: PartitionState) -> IsrChangeResult:
        return cls(topic_id, partition, *msgspec.structs.astuple(state))

    @property
    def state(self) -> PartitionState | None:
        if (
            self.leader is None
            or self.leader_epoch is None
            or self.partition_epoch is None
            or self.isr is None
            or self.replicas is None
        ):
            return None
        return PartitionState(
            self.leader, self.leader_epoch, self.partition_epoch, self.isr, self.replicas
        )


class AlterPartitionResponse(Message, frozen=True):
    results: Annotated[tuple[IsrChangeResult, ...], Meta(max_length=MAX_ITEMS)] = msgspec.field(
        name="partitions", default=()
    )


# ---------------------------------------------------------------------------- replica fetch


class FetchPosition(msgspec.Struct, frozen=True):
    """Where a follower is in one partition: the next offset it wants (its log end, which
    is how the leader learns it), the epoch it believes the leader has, the epoch of its
    last batch (the leader answers a divergence instead of data when lineage differs), and
    where its log starts (-1 from a broker that predates it: DeleteRecords waits on it).
    """

    topic_id: TopicId
    partition: NonNegative
    leader_epoch: EpochOrNone
    fetch_offset: NonNegative
    last_fetched_epoch: EpochOrNone
    log_start_offset: OffsetOrUnknown = -1


NEW_SESSION: Final = 0  # session_id of a full fetch request: start a new session


class ReplicaFetchRequest(Message, frozen=True):
    """`POST /v1/internal/replica-fetch` (KIP-227's fetch sessions, for followers).

    A full request (`session_id` NEW_SESSION) lists every partition the follower fetches
    from this leader; the answer carries a new session id. Later requests name the session
    and its next `session_epoch`, and list only positions that changed (`partitions`) and
    partitions no longer fetched (`forgotten`, [topic_id, partition] pairs); the leader keeps
    the rest. A request whose session or epoch the leader does not know is refused as a
    whole (the follower starts a new session), so a lost answer can never leave the two
    sides with different positions.
    """

    replica_id: NonNegative
    broker_epoch: Long
    max_wait_ms: Annotated[int, Meta(ge=0, le=MAX_WAIT_MS)]
    max_bytes: Annotated[int, Meta(ge=1, le=64 << 20)]
    session_id: NonNegative = NEW_SESSION
    session_epoch: NonNegative = 0
    partitions: Annotated[tuple[FetchPosition, ...], Meta(max_length=MAX_ITEMS)] = ()
    forgotten: Annotated[tuple[tuple[str, Long], ...], Meta(max_length=MAX_ITEMS)] = ()
    # A new session's: the newest stored batch format (protocol/batch.py magic) the
    # follower reads; absent from a follower older than format 3, which reads 2. A leader
    # stores format 3 in a partition only while each of its followers said 3 (issue 29: a
    # rolling upgrade's gate, kept off the metadata log, which older nodes must read).
    record_format: Annotated[int, Meta(ge=1, le=255)] | None = None


class PartitionFetchAnswer(msgspec.Struct, frozen=True):
    """One partition in a replica fetch answer; its data is the matching framed segment.
    An error answer carries `error_code` (ErrorCode's name), and for OFFSET_OUT_OF_RANGE
    the leader's `log_start_offset`."""

    topic_id: TopicId
    partition: NonNegative
    high_watermark: NonNegative = 0
    log_start_offset: NonNegative = 0
    diverging_epoch: EpochOrNone | None = None
    diverging_end_offset: EpochOrNone = -1
    error_code: str | None = None
    message: str = ""

    def __post_init__(self) -> None:
        # a divergence names where the follower's log must end: without it, the follower
        # would truncate to -1 (its whole log)
        if self.diverging_epoch is not None and self.diverging_end_offset < 0:
            raise ValueError("a diverging epoch comes with its end offset")


class ReplicaFetchResponse(Message, frozen=True):
    """The header of a framed replica fetch answer: the session, and an answer for each
    partition with news (data, a divergence, an error, or a new high watermark or log start
    since this session last answered it); the rest of the session is unchanged.
    """

    session_id: NonNegative
    partitions: Annotated[tuple[PartitionFetchAnswer, ...], Meta(max_length=MAX_ITEMS)] = ()


# ---------------------------------------------------------------------------- broker queries
# Read-only calls one broker makes to the others for a client's answer (rule 5: a bad answer
# is a node that did not answer). Their bounds are the clients' own: 1-249 character topic
# names of [a-zA-Z0-9._-] (metadata/topics.py, which this pure module may not import) and
# group names as names.py takes them. (`\Z`, not `$`: msgspec searches with Python's re,
# where `$` also matches before a final newline.)

MAX_STATS_TOPICS: Final = 100  # topics one stats query names: a page of the console's list
MAX_GROUPS: Final = MAX_ITEMS  # groups one broker's listing holds
MAX_GROUP_STATE: Final = 32  # "PreparingRebalance" is the longest state there is
RATE_NAMES: Final = ("produce_bytes", "produce_records", "fetch_bytes", "fetch_records")

TopicName = Annotated[str, Meta(pattern=f"^[a-zA-Z0-9._-]{{1,{names.MAX_TOPIC_NAME}}}\\Z")]
GroupName = Annotated[str, Meta(pattern=f"^{names.NO_CONTROLS}{{1,{names.MAX_GROUP_NAME}}}\\Z")]
GroupState = Annotated[str, Meta(pattern=f"^{names.NO_CONTROLS}{{1,{MAX_GROUP_STATE}}}\\Z")]
Rate = Annotated[float, Meta(ge=0.0, lt=2.0**63)]  # finite: inf and NaN are refused


# -- offsets


class OffsetsRequest(msgspec.Struct, frozen=True):
    """`GET /v1/internal/offsets?v=1&topic=T`: the log start and high watermark of each of
    the topic's partitions the broker asked leads (broker/offsets.py)."""

    topic: TopicName
    # also each one's last stable offset (read_committed's end, issue 27)
    committed: bool = False

    def to_params(self) -> dict[str, str]:
        params = {"v": str(VERSION), "topic": self.topic}
        if self.committed:
            params["committed"] = "true"
        return params

    @classmethod
    def from_params(cls, query: Mapping[str, str]) -> OffsetsRequest:
        return _from_query(cls, query, str(VERSION))


class PartitionOffsets(msgspec.Struct, frozen=True):
    """One partition's offsets as its leader has them."""

    partition: Int32
    log_start_offset: NonNegative
    high_watermark: NonNegative
    last_stable_offset: NonNegative | None = None  # asked for `committed`


class OffsetsResponse(Message, frozen=True):
    """The answer to an OffsetsRequest: the topic it was asked for (an asker drops an answer
    about another), and the partitions the broker leads of it, each at most once (the
    others are some other broker's to answer)."""

    topic: TopicName
    partitions: Annotated[tuple[PartitionOffsets, ...], Meta(max_length=MAX_ITEMS)] = ()

    def __post_init__(self) -> None:
        if len({p.partition for p in self.partitions}) != len(self.partitions):
            raise ValueError("each partition at most once")


# -- the console's figures (broker/stats.py)


class BrokerStatsRequest(msgspec.Struct, frozen=True):
    """`GET /v1/internal/stats?v=1[&topics=a,b]`: the broker's own figures, and those of the
    named topics (0-MAX_STATS_TOPICS distinct names) as far as it leads them."""

    topics: Annotated[tuple[TopicName, ...], Meta(max_length=MAX_STATS_TOPICS)] = ()

    def __post_init__(self) -> None:
        if len(set(self.topics)) != len(self.topics):
            raise ValueError("topics names each topic at most once")

    def to_params(self) -> dict[str, str]:
        params = {"v": str(VERSION)}
        if self.topics:  # no names: no parameter (an empty one names no topic and is refused)
            params["topics"] = ",".join(self.topics)
        return params

    @classmethod
    def from_params(cls, query: Mapping[str, str]) -> BrokerStatsRequest:
        listed: dict[str, Any] = dict(query)
        if "topics" in listed:  # one more than allowed at most: too many
            listed["topics"] = listed["topics"].split(",", MAX_STATS_TOPICS)
        return _from_query(cls, listed, str(VERSION))


class StatsRates(msgspec.Struct, frozen=True):
    """Per-second produce and fetch figures (broker/rates.py), each finite and >= 0."""

    produce_bytes: Rate
    produce_records: Rate
    fetch_bytes: Rate
    fetch_records: Rate

    def to_json(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in RATE_NAMES}


class CompactionStats(msgspec.Struct, frozen=True):
    """What the log cleaner last saw of a compacted partition a broker leads (its metrics,
    broker/metrics.py): the dirty share of the cleanable range, how long its oldest dirty
    record has waited, and the time since the cleaner's last pass (None: none yet)."""

    dirty_ratio: Annotated[float, Meta(ge=0.0, le=1.0)]
    lag_ms: NonNegative
    since_pass_ms: NonNegative | None = None


class TopicStats(msgspec.Struct, frozen=True):
    """A topic's figures on one broker (keyed by its name in BrokerStatsResponse): the size
    of each partition it leads, by index (a JSON object's keys: canonical decimals), in the
    order it lists them, the topic's rates there (None while it has none yet), and, for a
    compacted topic, its led partitions' cleaner figures (an older broker sends none)."""

    partitions: Annotated[dict[Int32, NonNegative], Meta(max_length=MAX_ITEMS)] = {}
    rates: StatsRates | None = None
    compaction: Annotated[dict[Int32, CompactionStats], Meta(max_length=MAX_ITEMS)] = {}


class BrokerStatsResponse(Message, frozen=True):
    """One broker's figures (broker/stats.py rule 1): the partitions it leads and holds,
    the bytes of every replica it holds, its rates and the window they cover (None while
    it has no rate yet), and the asked topics it knows, by name (at most MAX_STATS_TOPICS,
    MAX_ITEMS partitions in all)."""

    broker_id: Int32
    leaders: NonNegative
    replicas: NonNegative
    disk_bytes: NonNegative
    rates: StatsRates | None = None
    rate_window_ms: NonNegative | None = None
    topics: Annotated[dict[TopicName, TopicStats], Meta(max_length=MAX_STATS_TOPICS)] = {}

    def __post_init__(self) -> None:
        if sum(len(t.partitions) + len(t.compaction) for t in self.topics.values()) > MAX_ITEMS:
            raise ValueError(f"at most {MAX_ITEMS} partitions in all")


# -- coordinated groups


GroupKind = Literal["classic", "consumer"]  # Kafka's group types (ListGroups v5)


class GroupListing(TypedDict):
    """One group a broker coordinates, as `GET /v1/groups` lists it to clients (a dict, in
    this key order, so that answer and the Kafka edge's ListGroups read it unchanged)."""

    group: GroupName
    state: GroupState  # the group's state, as its kind names it (group.py, classic.py)
    members: Int32
    type: GroupKind


class GroupListResponse(Message, frozen=True):
    """`GET /v1/internal/groups`: the groups the broker asked coordinates now, each at most
    once (a group has one coordinator), at most MAX_GROUPS; no query. Another broker's
    `GET /v1/groups` gathers these from every live broker (service.py)."""

    groups: Annotated[tuple[GroupListing, ...], Meta(max_length=MAX_GROUPS)] = ()

    def __post_init__(self) -> None:
        if len({g["group"] for g in self.groups}) != len(self.groups):
            raise ValueError("each group at most once")
        # the clients' key order, whatever the sender's (they are shown as they are)
        in_order = tuple(
            GroupListing(group=g["group"], state=g["state"], members=g["members"], type=g["type"])
            for g in self.groups
        )
        msgspec.structs.force_setattr(self, "groups", in_order)


# -- transactions (issue 27): markers and verification between brokers

ProducerEpoch = Annotated[int, Meta(ge=0, le=2**15 - 1)]
TransactionalId = Annotated[str, Meta(min_length=1, max_length=names.MAX_TRANSACTIONAL_ID)]


class TxnPartition(msgspec.Struct, frozen=True):
    topic: TopicName
    partition: Int32


class TxnMarkersRequest(Message, frozen=True):
    """`POST /v1/internal/txn-markers`: a transaction coordinator asks a partition leader
    to write a producer's marker to the partitions it leads (Kafka's WriteTxnMarkers)."""

    producer_id: NonNegative
    producer_epoch: ProducerEpoch
    commit: bool
    coordinator_epoch: Int32
    partitions: Annotated[tuple[TxnPartition, ...], Meta(max_length=MAX_ITEMS)]


class TxnMarkerResult(msgspec.Struct, frozen=True):
    topic: TopicName
    partition: Int32
    error_code: Annotated[int, Meta(ge=-1, le=2**15 - 1)]  # 0: written


class TxnMarkersResponse(Message, frozen=True):
    results: Annotated[tuple[TxnMarkerResult, ...], Meta(max_length=MAX_ITEMS)] = ()


class TxnVerifyRequest(Message, frozen=True):
    """`POST /v1/internal/txn-verify`: a partition leader asks a transactional id's
    coordinator whether the partition is in the producer's transaction (KIP-890)."""

    transactional_id: TransactionalId
    producer_id: NonNegative
    producer_epoch: ProducerEpoch
    topic: TopicName
    partition: Int32


class TxnVerifyResponse(Message, frozen=True):
    error_code: Annotated[int, Meta(ge=-1, le=2**15 - 1)]  # 0: in the transaction
