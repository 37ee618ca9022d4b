"""Typed, versioned messages of the internal plane: brokers to controllers (metadata fetch,
AlterPartition) and brokers to brokers (replica fetch). Both ends build and read them here,
as Kafka's message JSON schemas do for its RPCs, and as metadata/records.py does for records.

Rules:
1. Every body is a JSON object with `"v": VERSION`. A reader refuses other versions with
   MessageError (the edge answers 400 INVALID_REQUEST): a mixed-version cluster fails loudly.
2. `from_json` checks every field's type and bounds; nothing a peer sends reaches the
   broker or controller untyped. The edges add no checks of their own.
3. Raw bytes (encoded record batches, stored log segments) are never re-encoded: the
   metadata answer splices the controller's stored batch bytes into its body, and replica
   fetch data travels as framed segments (framing.py).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

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
