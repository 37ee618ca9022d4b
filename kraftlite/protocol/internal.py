"""Typed, versioned messages of the internal plane: brokers to controllers (metadata fetch,
AlterPartition) and brokers to brokers (replica fetch; and the read-only queries one broker
asks the others for a client: leader offsets, console figures, coordinated groups). Both
ends build and read them here, as Kafka's message JSON schemas do for its RPCs, and as
metadata/records.py does for records.

Rules:
1. Every body is a JSON object with `"v": VERSION`. A reader refuses other versions with
   MessageError (the edge answers 400 INVALID_REQUEST): a mixed-version cluster fails loudly.
2. `from_json` checks every field's type and bounds; nothing a peer sends reaches the
   broker or controller untyped. The edges add no checks of their own.
3. Raw bytes (encoded record batches, stored log segments) are never re-encoded: the
   metadata answer splices the controller's stored batch bytes into its body, and replica
   fetch data travels as framed segments (framing.py).
4. A GET's query is its request (`to_params` / `from_params`). A query of the broker queries
   may leave `v` out: it then means 1, the version those routes had before they carried it
   (tools and tests call them so); any other `v` is refused as in rule 1.
5. An asker treats an answer that is not a valid message (MessageError, or not JSON) as a
   node that did not answer: it leaves that node's part out, as it does on a timeout.
Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypedDict

import orjson

from kraftlite.protocol import names

VERSION: Final = 1
MAX_ITEMS: Final = 200_000  # partitions in one AlterPartition or replica fetch request
MAX_WAIT_MS: Final = 30_000


class MessageError(ValueError):
    """A body that is not a valid message of this version."""


def _check_version(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise MessageError("a message is a JSON object")
    if data.get("v") != VERSION:
        raise MessageError(f"message version {data.get('v')!r} is not {VERSION}")
    return data


def _int(data: Mapping[str, Any], name: str, low: int = -(2**63), high: int = 2**63 - 1) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise MessageError(f"{name} must be an integer in [{low}, {high}]")
    return value


def _str(data: Mapping[str, Any], name: str, max_length: int = 256) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not 0 < len(value) <= max_length:
        raise MessageError(f"{name} must be a string of 1-{max_length} characters")
    return value


def _list(data: Mapping[str, Any], name: str, max_items: int = MAX_ITEMS) -> list[Any]:
    value = data.get(name, [])
    if not isinstance(value, list) or len(value) > max_items:
        raise MessageError(f"{name} must be a list of at most {max_items} items")
    return value


def _ids(data: Mapping[str, Any], name: str) -> tuple[int, ...]:
    value = _list(data, name, 1024)
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in value):
        raise MessageError(f"{name} must be a list of broker ids")
    return tuple(value)


# ---------------------------------------------------------------------------- registration


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    """`POST /v1/internal/brokers`: a broker process announces itself (a fresh incarnation
    id per process start tells a restart from a retry)."""

    broker_id: int
    incarnation_id: str
    url: str
    rack: str | None = None
    kafka: str | None = None  # the Kafka listener's advertised "host:port"

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "broker_id": self.broker_id,
            "incarnation_id": self.incarnation_id,
            "url": self.url,
            "rack": self.rack,
            "kafka": self.kafka,
        }

    @classmethod
    def from_json(cls, data: Any) -> BrokerRegistrationRequest:
        data = _check_version(data)
        rack = data.get("rack")
        if rack is not None and not isinstance(rack, str):
            raise MessageError("rack must be a string")
        kafka = data.get("kafka")
        if kafka is not None and not (isinstance(kafka, str) and len(kafka) <= 300):
            raise MessageError("kafka must be a host:port string")
        return cls(
            _int(data, "broker_id", 0, 2**31 - 1),
            _str(data, "incarnation_id", 64),
            _str(data, "url", 2048),
            rack,
            kafka,
        )


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResponse:
    broker_epoch: int
    cluster_id: str
    heartbeat_interval_ms: int
    session_timeout_ms: int
    metadata_version: int

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, **{f: getattr(self, f) for f in self.__slots__}}

    @classmethod
    def from_json(cls, data: Any) -> BrokerRegistrationResponse:
        data = _check_version(data)
        cluster_id = data.get("cluster_id")
        if not isinstance(cluster_id, str):
            raise MessageError("cluster_id must be a string")
        return cls(
            _int(data, "broker_epoch", 0),
            cluster_id,
            _int(data, "heartbeat_interval_ms", 1),
            _int(data, "session_timeout_ms", 1),
            _int(data, "metadata_version", 0),
        )


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    """`POST /v1/internal/brokers/{id}/heartbeat`: the broker's registration it speaks for,
    the metadata version it has applied, and whether it asks to shut down."""

    broker_epoch: int
    metadata_version: int
    want_shutdown: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "broker_epoch": self.broker_epoch,
            "metadata_version": self.metadata_version,
            "want_shutdown": self.want_shutdown,
        }

    @classmethod
    def from_json(cls, data: Any) -> BrokerHeartbeatRequest:
        data = _check_version(data)
        want_shutdown = data.get("want_shutdown", False)
        if not isinstance(want_shutdown, bool):
            raise MessageError("want_shutdown must be a boolean")
        return cls(_int(data, "broker_epoch"), _int(data, "metadata_version", 0), want_shutdown)


@dataclass(frozen=True, slots=True)
class BrokerUnreachableReport:
    """`POST /v1/internal/brokers/{suspect}/unreachable`: a broker's connection to another
    (its partitions' leader) was refused, which is what a dead process's port answers. The
    controller checks that itself before fencing (controller/liveness.py)."""

    reporter_id: int
    reporter_epoch: int
    suspect_epoch: int  # the registration the reporter saw refusing (not a newer one)

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, **{f: getattr(self, f) for f in self.__slots__}}

    @classmethod
    def from_json(cls, data: Any) -> BrokerUnreachableReport:
        data = _check_version(data)
        return cls(
            _int(data, "reporter_id", 0), _int(data, "reporter_epoch"), _int(data, "suspect_epoch")
        )


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    broker_epoch: int
    fenced: bool
    shutting_down: bool
    metadata_version: int  # the active controller's, when it answered (broker/lease.py)
    session_timeout_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, **{f: getattr(self, f) for f in self.__slots__}}

    @classmethod
    def from_json(cls, data: Any) -> BrokerHeartbeatResponse:
        data = _check_version(data)
        fenced, shutting_down = data.get("fenced"), data.get("shutting_down")
        if not isinstance(fenced, bool) or not isinstance(shutting_down, bool):
            raise MessageError("fenced and shutting_down must be booleans")
        return cls(
            _int(data, "broker_epoch"),
            fenced,
            shutting_down,
            _int(data, "metadata_version", 0),
            _int(data, "session_timeout_ms", 1),
        )


# ---------------------------------------------------------------------------- metadata fetch


@dataclass(frozen=True, slots=True)
class MetadataFetchRequest:
    """`GET /v1/internal/metadata`: the record batches after `after_version` (long-poll up
    to `max_wait_ms` while there are none), at most about `max_bytes` of them.
    """

    after_version: int
    max_wait_ms: int = 0
    max_bytes: int = 8 << 20

    def to_params(self) -> dict[str, str]:
        return {
            "v": str(VERSION),
            "after_version": str(self.after_version),
            "max_wait_ms": str(self.max_wait_ms),
            "max_bytes": str(self.max_bytes),
        }

    @classmethod
    def from_params(cls, query: Mapping[str, str]) -> MetadataFetchRequest:
        def number(name: str, default: int | None, low: int, high: int) -> int:
            raw = query.get(name)
            if raw is None and default is not None:
                return default
            try:
                value = int(raw)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise MessageError(f"{name} must be an integer") from None
            if not low <= value <= high:
                raise MessageError(f"{name} must be in [{low}, {high}]")
            return value

        if number("v", None, VERSION, VERSION) != VERSION:
            raise MessageError(f"message version is not {VERSION}")
        return cls(
            number("after_version", None, -1, 2**63 - 1),
            number("max_wait_ms", 0, 0, MAX_WAIT_MS),
            number("max_bytes", 8 << 20, 1, 64 << 20),
        )


@dataclass(frozen=True, slots=True)
class MetadataFetchResponse:
    """What a controller holds after the request's version: the committed record batches in
    order (each as metadata/records.py encodes it), or, when the broker is further behind
    than the records it keeps, a snapshot of the whole image (metadata/views.py) to start
    from. `version` is the controller's latest; empty batches and no snapshot: nothing new.
    """

    version: int
    batches: Sequence[bytes | Mapping[str, Any]] = ()
    snapshot: bytes | Mapping[str, Any] | None = None

    def encode(self) -> bytes:
        """The body, with stored batch and snapshot bytes spliced in as they are."""
        parts = [b'{"v":%d,"version":%d,"batches":[' % (VERSION, self.version)]
        parts.append(b",".join(_raw(b) for b in self.batches))
        parts.append(b'],"snapshot":')
        parts.append(b"null" if self.snapshot is None else _raw(self.snapshot))
        parts.append(b"}")
        return b"".join(parts)

    @classmethod
    def decode(cls, body: bytes) -> MetadataFetchResponse:
        try:
            data = _check_version(orjson.loads(body))
        except orjson.JSONDecodeError as exc:
            raise MessageError(f"not JSON: {exc}") from None
        batches = _list(data, "batches", 10_000_000)
        snapshot = data.get("snapshot")
        if not all(isinstance(b, Mapping) for b in batches) or not (
            snapshot is None or isinstance(snapshot, Mapping)
        ):
            raise MessageError("batches and the snapshot are JSON objects")
        return cls(_int(data, "version", 0), tuple(batches), snapshot)


def _raw(value: bytes | Mapping[str, Any]) -> bytes:
    return value if isinstance(value, bytes) else orjson.dumps(value)


# ---------------------------------------------------------------------------- AlterPartition


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition's proposed ISR (KIP-497), with the epochs the leader decided it at."""

    topic_id: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "topic_id": self.topic_id,
            "partition": self.partition,
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
            "new_isr": list(self.new_isr),
        }

    @classmethod
    def from_json(cls, data: Any) -> IsrChange:
        if not isinstance(data, Mapping):
            raise MessageError("an ISR change is a JSON object")
        return cls(
            _str(data, "topic_id"),
            _int(data, "partition", 0),
            _int(data, "leader_epoch", 0),
            _int(data, "partition_epoch", 0),
            _ids(data, "new_isr"),
        )


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """`POST /v1/internal/alter-partition`: a leader's ISR changes, many partitions at once;
    the controller commits the acceptable ones in one batch and refuses the rest one by one.
    """

    broker_id: int
    broker_epoch: int
    changes: tuple[IsrChange, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "broker_id": self.broker_id,
            "broker_epoch": self.broker_epoch,
            "partitions": [c.to_json() for c in self.changes],
        }

    @classmethod
    def from_json(cls, data: Any) -> AlterPartitionRequest:
        data = _check_version(data)
        changes = tuple(IsrChange.from_json(c) for c in _list(data, "partitions"))
        if not changes:
            raise MessageError("partitions must not be empty")
        if len({(c.topic_id, c.partition) for c in changes}) != len(changes):
            raise MessageError("each partition at most once")
        return cls(_int(data, "broker_id", 0), _int(data, "broker_epoch"), changes)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's committed registration, as AlterPartition answers it."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IsrChangeResult:
    """One partition's outcome: the committed state, or an error code (ErrorCode's name)."""

    topic_id: str
    partition: int
    state: PartitionState | None = None
    error_code: str | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"topic_id": self.topic_id, "partition": self.partition}
        if self.state is not None:
            answer.update(
                leader=self.state.leader,
                leader_epoch=self.state.leader_epoch,
                partition_epoch=self.state.partition_epoch,
                isr=list(self.state.isr),
                replicas=list(self.state.replicas),
            )
        if self.error_code is not None:
            answer.update(error_code=self.error_code, message=self.message)
        return answer

    @classmethod
    def from_json(cls, data: Any) -> IsrChangeResult:
        if not isinstance(data, Mapping):
            raise MessageError("an ISR change result is a JSON object")
        topic_id, partition = _str(data, "topic_id"), _int(data, "partition", 0)
        code = data.get("error_code")
        if code is not None:
            if not isinstance(code, str):
                raise MessageError("error_code must be a string")
            return cls(topic_id, partition, error_code=code, message=str(data.get("message", "")))
        state = PartitionState(
            _int(data, "leader", -1),
            _int(data, "leader_epoch", 0),
            _int(data, "partition_epoch", 0),
            _ids(data, "isr"),
            _ids(data, "replicas"),
        )
        return cls(topic_id, partition, state)


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    results: tuple[IsrChangeResult, ...]

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "partitions": [r.to_json() for r in self.results]}

    @classmethod
    def from_json(cls, data: Any) -> AlterPartitionResponse:
        data = _check_version(data)
        return cls(tuple(IsrChangeResult.from_json(r) for r in _list(data, "partitions")))


# ---------------------------------------------------------------------------- replica fetch


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """Where a follower is in one partition: the next offset it wants (its log end, which
    is how the leader learns it), the epoch it believes the leader has, and the epoch of its
    last batch (the leader answers a divergence instead of data when lineage differs).
    """

    topic_id: str
    partition: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int

    def to_json(self) -> dict[str, Any]:
        return {
            "topic_id": self.topic_id,
            "partition": self.partition,
            "leader_epoch": self.leader_epoch,
            "fetch_offset": self.fetch_offset,
            "last_fetched_epoch": self.last_fetched_epoch,
        }

    @classmethod
    def from_json(cls, data: Any) -> FetchPosition:
        if not isinstance(data, Mapping):
            raise MessageError("a fetch position is a JSON object")
        return cls(
            _str(data, "topic_id"),
            _int(data, "partition", 0),
            _int(data, "leader_epoch", -1),
            _int(data, "fetch_offset", 0),
            _int(data, "last_fetched_epoch", -1),
        )


NEW_SESSION: Final = 0  # session_id of a full fetch request: start a new session


@dataclass(frozen=True, slots=True)
class ReplicaFetchRequest:
    """`POST /v1/internal/replica-fetch` (KIP-227's fetch sessions, for followers).

    A full request (`session_id` NEW_SESSION) lists every partition the follower fetches
    from this leader; the answer carries a new session id. Later requests name the session
    and its next `session_epoch`, and list only positions that changed (`partitions`) and
    partitions no longer fetched (`forgotten`); the leader keeps the rest. A request whose
    session or epoch the leader does not know is refused as a whole (the follower starts a
    new session), so a lost answer can never leave the two sides with different positions.
    """

    replica_id: int
    broker_epoch: int
    max_wait_ms: int
    max_bytes: int
    session_id: int = NEW_SESSION
    session_epoch: int = 0
    partitions: tuple[FetchPosition, ...] = ()
    forgotten: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "replica_id": self.replica_id,
            "broker_epoch": self.broker_epoch,
            "max_wait_ms": self.max_wait_ms,
            "max_bytes": self.max_bytes,
            "session_id": self.session_id,
            "session_epoch": self.session_epoch,
            "partitions": [p.to_json() for p in self.partitions],
            "forgotten": [list(key) for key in self.forgotten],
        }

    @classmethod
    def from_json(cls, data: Any) -> ReplicaFetchRequest:
        data = _check_version(data)
        forgotten = []
        for item in _list(data, "forgotten"):
            if (
                not isinstance(item, list)
                or len(item) != 2
                or not isinstance(item[0], str)
                or not isinstance(item[1], int)
            ):
                raise MessageError("forgotten holds [topic_id, partition] pairs")
            forgotten.append((item[0], item[1]))
        return cls(
            _int(data, "replica_id", 0),
            _int(data, "broker_epoch"),
            _int(data, "max_wait_ms", 0, MAX_WAIT_MS),
            _int(data, "max_bytes", 1, 64 << 20),
            _int(data, "session_id", 0),
            _int(data, "session_epoch", 0),
            tuple(FetchPosition.from_json(p) for p in _list(data, "partitions")),
            tuple(forgotten),
        )


@dataclass(frozen=True, slots=True)
class PartitionFetchAnswer:
    """One partition in a replica fetch answer; its data is the matching framed segment."""

    topic_id: str
    partition: int
    high_watermark: int = 0
    log_start_offset: int = 0
    diverging_epoch: int | None = None
    diverging_end_offset: int = -1
    error_code: str | None = None
    message: str = ""
    details: Mapping[str, Any] | None = None  # e.g. the leader's log start for OUT_OF_RANGE

    def to_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"topic_id": self.topic_id, "partition": self.partition}
        if self.error_code is not None:
            answer.update(self.details or {})
            answer.update(error_code=self.error_code, message=self.message)
            return answer
        answer.update(high_watermark=self.high_watermark, log_start_offset=self.log_start_offset)
        if self.diverging_epoch is not None:
            answer.update(
                diverging_epoch=self.diverging_epoch,
                diverging_end_offset=self.diverging_end_offset,
            )
        return answer

    @classmethod
    def from_json(cls, data: Any) -> PartitionFetchAnswer:
        if not isinstance(data, Mapping):
            raise MessageError("a partition answer is a JSON object")
        topic_id, partition = _str(data, "topic_id"), _int(data, "partition", 0)
        code = data.get("error_code")
        if code is not None:
            start = _int(data, "log_start_offset", 0) if "log_start_offset" in data else 0
            return cls(
                topic_id,
                partition,
                log_start_offset=start,
                error_code=str(code),
                message=str(data.get("message", "")),
                details={"log_start_offset": start} if "log_start_offset" in data else {},
            )
        diverging = data.get("diverging_epoch")
        return cls(
            topic_id,
            partition,
            _int(data, "high_watermark", 0),
            _int(data, "log_start_offset", 0),
            None if diverging is None else _int(data, "diverging_epoch", -1),
            _int(data, "diverging_end_offset", -1) if diverging is not None else -1,
        )


@dataclass(frozen=True, slots=True)
class ReplicaFetchResponse:
    """The header of a framed replica fetch answer: the session, and an answer for each
    partition with news (data, a divergence, an error, or a new high watermark or log start
    since this session last answered it); the rest of the session is unchanged.
    """

    session_id: int
    partitions: tuple[PartitionFetchAnswer, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "session_id": self.session_id,
            "partitions": [p.to_json() for p in self.partitions],
        }

    @classmethod
    def from_json(cls, data: Any) -> ReplicaFetchResponse:
        data = _check_version(data)
        return cls(
            _int(data, "session_id", 0),
            tuple(PartitionFetchAnswer.from_json(p) for p in _list(data, "partitions")),
        )


# ---------------------------------------------------------------------------- broker queries
# Read-only calls one broker makes to the others for a client's answer (rule 5: a bad answer
# is a node that did not answer). Their bounds are the clients' own: 1-249 character topic
# names of [a-zA-Z0-9._-] (metadata/topics.py, which this pure module may not import) and
# group names as names.py takes them.

MAX_TOPIC_NAME: Final = 249
MAX_GROUP_NAME: Final = 249
MAX_STATS_TOPICS: Final = 100  # topics one stats query names: a page of the console's list
MAX_GROUPS: Final = MAX_ITEMS  # groups one broker's listing holds
MAX_GROUP_STATE: Final = 32  # "PreparingRebalance" is the longest state there is
GROUP_TYPES: Final = ("classic", "consumer")
RATE_NAMES: Final = ("produce_bytes", "produce_records", "fetch_bytes", "fetch_records")
_TOPIC_NAME: Final = re.compile(f"[a-zA-Z0-9._-]{{1,{MAX_TOPIC_NAME}}}")


def _query_version(query: Mapping[str, str]) -> None:
    """Rule 4: an absent `v` is version 1."""
    version = query.get("v", "1")
    if version != str(VERSION):
        raise MessageError(f"message version {version!r} is not {VERSION}")


def _topic_name(value: object, name: str) -> str:
    if not isinstance(value, str) or _TOPIC_NAME.fullmatch(value) is None:
        raise MessageError(f"{name} must be a topic name (1-{MAX_TOPIC_NAME} of [a-zA-Z0-9._-])")
    return value


def _partition_key(key: object) -> int:
    """A partition index written as a JSON object's key: canonical decimal, in [0, 2^31)."""
    if (
        not isinstance(key, str)
        or not 0 < len(key) <= 10
        or not key.isascii()
        or not key.isdigit()
        or str(int(key)) != key
        or int(key) >= 2**31
    ):
        raise MessageError(f"{key!r} is not a partition index")
    return int(key)


def _rate(data: Mapping[str, Any], name: str) -> float:
    value = data.get(name)
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not 0 <= value < 2**63
    ):
        raise MessageError(f"{name} must be a finite number of at least 0")
    return float(value)


# -- offsets


@dataclass(frozen=True, slots=True)
class OffsetsRequest:
    """`GET /v1/internal/offsets?v=1&topic=T`: the log start and high watermark of each of
    the topic's partitions the broker asked leads (broker/offsets.py)."""

    topic: str

    def to_params(self) -> dict[str, str]:
        return {"v": str(VERSION), "topic": self.topic}

    @classmethod
    def from_params(cls, query: Mapping[str, str]) -> OffsetsRequest:
        _query_version(query)
        return cls(_topic_name(query.get("topic"), "topic"))


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One partition's offsets as its leader has them."""

    partition: int
    log_start_offset: int
    high_watermark: int

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "log_start_offset": self.log_start_offset,
            "high_watermark": self.high_watermark,
        }

    @classmethod
    def from_json(cls, data: Any) -> PartitionOffsets:
        if not isinstance(data, Mapping):
            raise MessageError("a partition's offsets are a JSON object")
        return cls(
            _int(data, "partition", 0, 2**31 - 1),
            _int(data, "log_start_offset", 0),
            _int(data, "high_watermark", 0),
        )


@dataclass(frozen=True, slots=True)
class OffsetsResponse:
    """The answer to an OffsetsRequest: the topic it was asked for (an asker drops an answer
    about another), and the partitions the broker leads of it, each at most once (the
    others are some other broker's to answer)."""

    topic: str
    partitions: tuple[PartitionOffsets, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "topic": self.topic,
            "partitions": [p.to_json() for p in self.partitions],
        }

    @classmethod
    def from_json(cls, data: Any) -> OffsetsResponse:
        data = _check_version(data)
        topic = _topic_name(data.get("topic"), "topic")
        partitions = tuple(PartitionOffsets.from_json(p) for p in _list(data, "partitions"))
        if len({p.partition for p in partitions}) != len(partitions):
            raise MessageError("each partition at most once")
        return cls(topic, partitions)


# -- the console's figures (broker/stats.py)


@dataclass(frozen=True, slots=True)
class BrokerStatsRequest:
    """`GET /v1/internal/stats?v=1[&topics=a,b]`: the broker's own figures, and those of the
    named topics (0-MAX_STATS_TOPICS distinct names) as far as it leads them."""

    topics: tuple[str, ...] = ()

    def to_params(self) -> dict[str, str]:
        params = {"v": str(VERSION)}
        if self.topics:  # no names: no parameter (an empty one names no topic and is refused)
            params["topics"] = ",".join(self.topics)
        return params

    @classmethod
    def from_params(cls, query: Mapping[str, str]) -> BrokerStatsRequest:
        _query_version(query)
        raw = query.get("topics")
        if raw is None:
            return cls()
        topics = raw.split(",", MAX_STATS_TOPICS)  # one more than allowed: too many
        if len(topics) > MAX_STATS_TOPICS:
            raise MessageError(f"topics names at most {MAX_STATS_TOPICS} topics")
        if len(set(topics)) != len(topics):
            raise MessageError("topics names each topic at most once")
        return cls(tuple(_topic_name(t, "each of topics") for t in topics))


@dataclass(frozen=True, slots=True)
class StatsRates:
    """Per-second produce and fetch figures (broker/rates.py), each finite and >= 0."""

    produce_bytes: float
    produce_records: float
    fetch_bytes: float
    fetch_records: float

    def to_json(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in RATE_NAMES}

    @classmethod
    def from_json(cls, data: Any) -> StatsRates:
        if not isinstance(data, Mapping):
            raise MessageError("rates are a JSON object")
        return cls(*(_rate(data, name) for name in RATE_NAMES))


@dataclass(frozen=True, slots=True)
class TopicStats:
    """A topic's figures on one broker: the size of each partition it leads (index, bytes),
    in the order it lists them, and the topic's rates there (None while it has none yet)."""

    topic: str
    partitions: tuple[tuple[int, int], ...] = ()
    rates: StatsRates | None = None

    def to_json(self) -> dict[str, Any]:  # keyed by the topic in BrokerStatsResponse
        return {
            "partitions": {str(index): size for index, size in self.partitions},
            "rates": None if self.rates is None else self.rates.to_json(),
        }

    @classmethod
    def from_json(cls, topic: str, data: Any) -> TopicStats:
        if not isinstance(data, Mapping):
            raise MessageError("a topic's figures are a JSON object")
        sizes = data.get("partitions", {})
        if not isinstance(sizes, Mapping) or len(sizes) > MAX_ITEMS:
            raise MessageError(f"partitions must map at most {MAX_ITEMS} partitions to sizes")
        partitions = tuple(
            (_partition_key(key), _int(sizes, key, 0)) for key in sizes
        )  # a JSON object's keys are distinct: each partition at most once
        rates = data.get("rates")
        return cls(
            _topic_name(topic, "topic"),
            partitions,
            None if rates is None else StatsRates.from_json(rates),
        )


@dataclass(frozen=True, slots=True)
class BrokerStatsResponse:
    """One broker's figures (broker/stats.py rule 1): the partitions it leads and holds,
    the bytes of every replica it holds, its rates and the window they cover (None while
    it has no rate yet), and the asked topics it knows, keyed by name in the body (at most
    MAX_STATS_TOPICS, MAX_ITEMS partitions in all)."""

    broker_id: int
    leaders: int
    replicas: int
    disk_bytes: int
    rates: StatsRates | None = None
    rate_window_ms: int | None = None
    topics: tuple[TopicStats, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "broker_id": self.broker_id,
            "leaders": self.leaders,
            "replicas": self.replicas,
            "disk_bytes": self.disk_bytes,
            "rates": None if self.rates is None else self.rates.to_json(),
            "rate_window_ms": self.rate_window_ms,
            "topics": {t.topic: t.to_json() for t in self.topics},
        }

    @classmethod
    def from_json(cls, data: Any) -> BrokerStatsResponse:
        data = _check_version(data)
        found = data.get("topics", {})
        if not isinstance(found, Mapping) or len(found) > MAX_STATS_TOPICS:
            raise MessageError(f"topics must map at most {MAX_STATS_TOPICS} topics")
        topics = tuple(TopicStats.from_json(name, figures) for name, figures in found.items())
        if sum(len(t.partitions) for t in topics) > MAX_ITEMS:
            raise MessageError(f"at most {MAX_ITEMS} partitions in all")
        rates, window = data.get("rates"), data.get("rate_window_ms")
        return cls(
            _int(data, "broker_id", 0, 2**31 - 1),
            _int(data, "leaders", 0),
            _int(data, "replicas", 0),
            _int(data, "disk_bytes", 0),
            None if rates is None else StatsRates.from_json(rates),
            None if window is None else _int(data, "rate_window_ms", 0),
            topics,
        )


# -- coordinated groups


class GroupListing(TypedDict):
    """One group a broker coordinates, as `GET /v1/groups` lists it to clients (a dict, in
    this key order, so that answer and the Kafka edge's ListGroups read it unchanged)."""

    group: str
    state: str  # the group's state, as its kind names it (group.py, classic.py)
    members: int
    type: str  # one of GROUP_TYPES


def _group_listing(data: Any) -> GroupListing:
    if not isinstance(data, Mapping):
        raise MessageError("a group is a JSON object")
    group, state, kind = data.get("group"), data.get("state"), data.get("type")
    if not isinstance(group, str) or not names.is_name(group, MAX_GROUP_NAME):
        raise MessageError(f"group must be a name of 1-{MAX_GROUP_NAME} characters")
    if not isinstance(state, str) or not names.is_name(state, MAX_GROUP_STATE):
        raise MessageError(f"state must be a name of 1-{MAX_GROUP_STATE} characters")
    if not isinstance(kind, str) or kind not in GROUP_TYPES:
        raise MessageError(f"type must be one of {', '.join(GROUP_TYPES)}")
    return {
        "group": group,
        "state": state,
        "members": _int(data, "members", 0, 2**31 - 1),
        "type": kind,
    }


@dataclass(frozen=True, slots=True)
class GroupListResponse:
    """`GET /v1/internal/groups`: the groups the broker asked coordinates now, each at most
    once (a group has one coordinator), at most MAX_GROUPS; no query. Another broker's
    `GET /v1/groups` gathers these from every live broker (service.py)."""

    groups: tuple[GroupListing, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "groups": list(self.groups)}

    @classmethod
    def from_json(cls, data: Any) -> GroupListResponse:
        data = _check_version(data)
        groups = tuple(_group_listing(g) for g in _list(data, "groups", MAX_GROUPS))
        if len({g["group"] for g in groups}) != len(groups):
            raise MessageError("each group at most once")
        return cls(groups)
