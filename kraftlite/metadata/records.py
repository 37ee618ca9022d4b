"""Metadata records: the only things written to the controllers' Raft log.

Rules:
1. Records are frozen, keyword-only dataclasses with tuples for collections. Replaying them in
   order (image.py) is the only way cluster metadata changes.
2. On the wire and in the Raft log a record is versioned JSON,
   `{"type": "PartitionChangeRecord", "v": 0, "data": {...}}`, never a pickled object, so a
   later version of kraftlite can read an older log. A field whose meaning changes bumps `v`.
3. A batch of records commits or is rejected as a whole. It carries the image version it was
   decided against (`expected_version`): replay rejects it if the image has moved on since
   (compare-and-set), which fences a controller that lost leadership mid-decision.
docs/records.md describes every record type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import orjson

NO_LEADER: Final = -1
LEADER_UNCHANGED: Final = -2  # PartitionChangeRecord.leader: Kafka's encoding of "no change"


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterControllerRecord:
    """A controller (quorum voter) announced the HTTP address it serves on, so every node can
    forward requests to the active controller (KRaft's RegisterControllerRecord).
    """

    node_id: int
    url: str


@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumVotersRecord:
    """The controller quorum's voters after a membership change (KIP-853's VotersRecord):
    node ids and their Raft addresses, in the same order. Until the first change the
    voters are the ones every controller was started with (`--quorum`)."""

    node_ids: tuple[int, ...]
    raft_addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord:
    """A broker (re)registered. A new incarnation gets a new broker epoch and starts fenced."""

    broker_id: int
    incarnation_id: str  # fresh per process start: tells a restart from a retry
    broker_epoch: int  # the image version this record lands at; fences older incarnations
    url: str  # the broker's HTTP address
    rack: str | None = None
    kafka: str | None = None  # its Kafka listener as clients reach it, "host:port"


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBrokerRecord:
    """The broker may not lead or be in an ISR (missed heartbeats, or shut down)."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBrokerRecord:
    """The broker caught up with metadata and may lead and join ISRs again."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRecord:
    """The broker asked to shut down: from here it may not lead or join an ISR (Kafka's
    BrokerRegistrationChangeRecord.inControlledShutdown), while its leaderships move away;
    a FenceBrokerRecord (or a new registration) ends it.
    """

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerDrainRecord:
    """The broker is being drained (decommissioned): it may no longer lead, join an ISR or
    receive replicas, and its replicas move elsewhere. Kept across its re-registrations."""

    broker_id: int
    draining: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfigRecord:
    """A broker's dynamic config set (value) or removed back to its static one (None):
    Kafka's ConfigRecord for a BROKER resource, e.g. `replication.throttled.rate`."""

    broker_id: int
    name: str
    value: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord:
    """The broker is removed from the cluster (Kafka's UnregisterBrokerRecord). It holds no
    replica by then; if it comes back it registers as a new, empty broker."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    """A topic was created. Its id is unique forever; a recreated name gets a new id."""

    name: str
    topic_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord:
    """A topic config was set (value) or removed back to its default (value None)."""

    topic_id: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord:
    """A partition was created with its replica assignment."""

    topic_id: str
    partition: int
    replicas: tuple[int, ...]  # replica order: replicas[0] is the preferred leader
    isr: tuple[int, ...]
    leader: int  # NO_LEADER when offline
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord:
    """Change to one partition. None / LEADER_UNCHANGED mean "field did not change".

    Replay bumps partition_epoch on every change and leader_epoch whenever the leader changes.
    A reassignment (KIP-455) sets `replicas` to the target followed by the replicas leaving,
    with `adding_replicas` / `removing_replicas` naming both sides; completing or cancelling
    it sets the final `replicas` and both to ().
    """

    topic_id: str
    partition: int
    leader: int = LEADER_UNCHANGED
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord:
    """The topic and all its partitions are gone."""

    topic_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism (RFC 5802 / KIP-554): never the password,
    only what verifies one. Values are base64."""

    name: str
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    salt: str
    stored_key: str
    server_key: str
    iterations: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveUserScramCredentialRecord:
    """The user's credential for `mechanism` is gone (and with its last one, the user)."""

    name: str
    mechanism: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntryRecord:
    """One ACL (Kafka's AccessControlEntryRecord); `id` is unique forever."""

    id: str
    resource_type: str  # TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID
    resource_name: str
    pattern_type: str  # LITERAL, PREFIXED
    principal: str  # User:<name> or User:*
    host: str  # an address or *
    operation: str  # READ, WRITE, ... ALL
    permission_type: str  # ALLOW, DENY


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveAccessControlEntryRecord:
    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotaRecord:
    """A principal's quota `key` (producer_byte_rate, consumer_byte_rate,
    request_percentage) set to `value`, or removed (None)."""

    principal: str
    key: str
    value: float | None


MetadataRecord: TypeAlias = (
    RegisterControllerRecord
    | QuorumVotersRecord
    | RegisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | ControlledShutdownRecord
    | BrokerDrainRecord
    | BrokerConfigRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | ConfigRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | ClientQuotaRecord
)

RECORD_TYPES: Final[Mapping[str, tuple[type[Any], int]]] = {
    cls.__name__: (cls, 0)
    for cls in (
        RegisterControllerRecord,
        QuorumVotersRecord,
        RegisterBrokerRecord,
        FenceBrokerRecord,
        UnfenceBrokerRecord,
        ControlledShutdownRecord,
        BrokerDrainRecord,
        BrokerConfigRecord,
        UnregisterBrokerRecord,
        TopicRecord,
        ConfigRecord,
        PartitionRecord,
        PartitionChangeRecord,
        RemoveTopicRecord,
        UserScramCredentialRecord,
        RemoveUserScramCredentialRecord,
        AccessControlEntryRecord,
        RemoveAccessControlEntryRecord,
        ClientQuotaRecord,
    )
}


class RecordCodecError(ValueError):
    """Bytes that are not a batch of records this version can read."""


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """Records decided together against image version `expected_version`.

    `request_id` makes a retried proposal idempotent: the state machine remembers recent ids
    and answers a repeat with the version the first one committed at.
    """

    expected_version: int
    records: tuple[MetadataRecord, ...]
    request_id: str | None = None


def record_to_json(record: MetadataRecord) -> dict[str, Any]:
    """The record as JSON. An optional field left at None is omitted, so a field added
    later (with default None) reads on nodes that do not know it yet, as long as it is
    unset (a rolling upgrade: `RegisterBrokerRecord.kafka`)."""
    name = type(record).__name__
    data = {
        f.name: value
        for f in dataclasses.fields(record)
        if (value := getattr(record, f.name)) is not None or f.default is not None
    }
    return {"type": name, "v": RECORD_TYPES[name][1], "data": data}


def record_from_json(item: Mapping[str, Any]) -> MetadataRecord:
    try:
        cls, version = RECORD_TYPES[item["type"]]
    except (KeyError, TypeError) as exc:
        raise RecordCodecError(f"unknown record type in {item!r}") from exc
    if item.get("v") != version:
        raise RecordCodecError(f"{item['type']} version {item.get('v')} is not {version}")
    data = dict(item.get("data") or {})
    for f in dataclasses.fields(cls):
        if isinstance(data.get(f.name), list):
            data[f.name] = tuple(data[f.name])
    try:
        record: MetadataRecord = cls(**data)
    except TypeError as exc:
        raise RecordCodecError(f"bad {item['type']} fields: {exc}") from exc
    return record


def encode_batch(batch: RecordBatch) -> bytes:
    return orjson.dumps(
        {
            "expected_version": batch.expected_version,
            "request_id": batch.request_id,
            "records": [record_to_json(r) for r in batch.records],
        }
    )


def decode_batch(payload: bytes) -> RecordBatch:
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise RecordCodecError(f"not a record batch: {exc}") from exc
    return batch_from_json(body)


def batch_from_json(body: Any) -> RecordBatch:
    """A batch from its decoded JSON (brokers read batches inside a metadata answer)."""
    try:
        if not isinstance(body, dict):
            raise RecordCodecError("a record batch is a JSON object")
        request_id = body.get("request_id")
        return RecordBatch(
            int(body["expected_version"]),
            tuple(record_from_json(item) for item in body["records"]),
            None if request_id is None else str(request_id),
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, RecordCodecError):
            raise
        raise RecordCodecError(f"not a record batch: {exc}") from exc
