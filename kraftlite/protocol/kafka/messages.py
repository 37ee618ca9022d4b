"""Kafka's request and response messages: a declarative schema per API, one codec for all.

Each API's request and response are declared below as data, field by field, the way Kafka's
own schemas declare them (clients/src/main/resources/common/message/*.json): a field has a
type, the versions it exists in, the versions in which it may be null, a tag if it is a
tagged field (KIP-482), a default, and sub-fields if it is a struct or an array of structs.
One generic codec, compiled once per (message, version), reads and writes them all. The
rules it keeps:

1. Bodies are plain dicts keyed by the snake_case of Kafka's field names (`PartitionIndex`
   -> `partition_index`, `timeoutMs` -> `timeout_ms`). A decoded dict holds every field of
   the schema: fields the version lacks, and tagged fields the sender left out, hold their
   defaults, so a server reads `body["current_leader_epoch"]` whatever the version.
2. Encoding fills every field missing from the dict with its default (0, -1 where Kafka's
   schema says so, "", None, [], a struct of defaults), so a server sets only what it knows.
   Fields the version lacks are skipped, whatever their value; a key that is no field of
   the message at all raises `EncodeError` (a typo must not vanish silently). Tagged fields
   are written only when they differ from their default, as Kafka writes them.
3. Types: integers are `int`, `bool` is `bool`, strings `str`, bytes and record sets
   `bytes` (records are kept whole: `records.decode_batches` reads them), uuids are
   `uuid.UUID` (Kafka's zero uuid is `UUID(int=0)`), arrays `list`, structs `dict`.
4. Decoding is strict: a truncated or malformed frame, a null where the field is not
   nullable, or a tagged field whose length disagrees with its content raise `WireError`.
   Bytes left over after a request's body are ignored, as Kafka's brokers ignore them:
   librdkafka's Metadata request for all topics (v9+) keeps a 4-byte array-count
   placeholder of which a compact count reads one byte, so three bytes always trail it.
   Responses (read by our own clients and tests) are strict about it. A request for an
   API key or version we do not serve raises `UnsupportedVersion` (a `WireError`)
   carrying the correlation id, read from the header before anything else, so the server
   can still answer.
5. Headers: requests carry header v1 (api_key, api_version, correlation_id, client_id as a
   classic nullable string), plus a tagged-field section (header v2) when the request
   version is flexible. Responses carry header v0 (correlation_id), plus tagged fields
   (header v1) when flexible, EXCEPT ApiVersions, whose response header is always v0: a
   client must read it before it knows which versions we speak (KIP-511).
6. KIP-511: an ApiVersions request of a version we do not serve is answered with an
   ApiVersions *v0* body carrying UNSUPPORTED_VERSION (35) and the versions we serve
   (`unsupported_api_versions_response`); the client retries with a version from it. Any
   other unsupported request closes the connection, as Kafka does.
7. Frames: `decode_request` takes a request WITHOUT its 4-byte size prefix, and
   `encode_response` returns the response WITHOUT it; the server reads and writes the size.

The schemas are trimmed to the versions served: fields that exist only in later versions
are left out (their dict keys would only be noise). `scripts/check_kafka_schemas.py`
compares them with Kafka's JSON files, version by version. Their types are `bodies.py`, a
TypedDict per message and struct that `scripts/gen_kafka_types.py` generates from the
declarations below: regenerate it after changing one (docs/adr/0004-typed-kafka-bodies.md).

Versions served, and what each client negotiates against them (a client uses the highest
version both sides know). librdkafka figures are its source at the head of 2.16's branch
(`rd_kafka_broker_ApiVersion_supported` calls and the feature map in rdkafka_feature.c);
kafka-python 3.0.12 caps some requests below its schemas (`max_version=` at the call site);
aiokafka 0.14 ships hand-written structs for the versions listed.

=========================  ======  ======================  ===================  ==========
API (key)                  served  librdkafka 2.16         kafka-python 3.0.12  aiokafka
=========================  ======  ======================  ===================  ==========
Produce (0)                3-9     0-10 -> 9 (magic 2      <=9 -> 9             0-7 -> 7
                                   needs 3+, zstd 7+)
Fetch (1)                  4-12    0-16 -> 12 (zstd 10+)   <=12 -> 12           1-11 -> 11
ListOffsets (2)            1-7     0-7 -> 7                <=11 -> 7            0-3 -> 3
Metadata (3)               0-12    0-13 -> 12              <=13 -> 12           0-5 -> 5
OffsetCommit (8)           2-9     0-9 -> 9 *              <=8 -> 8             2-3 -> 3
OffsetFetch (9)            1-9     0-9 -> 9 *              <=8 -> 8             1-3 -> 3
FindCoordinator (10)       0-4     0-2 -> 2                <=6 -> 4             0-1 -> 1
JoinGroup (11)             0-7     0-5 -> 5                <=7 -> 7             0,1,2,5 -> 5
Heartbeat (12)             0-4     0-3 -> 3                <=4 -> 4             0-1 -> 1
LeaveGroup (13)            0-4     0-1 -> 1                <=5 -> 4             0-1 -> 1
SyncGroup (14)             0-5     0-3 -> 3                <=5 -> 5             0,1,3 -> 3
DescribeGroups (15)        0-5     0-5 -> 5                <=6 -> 5             0-3 -> 3
ListGroups (16)            0-5     0-5 -> 5 (v5: types)    <=5 -> 5             0-1 -> 1
SaslHandshake (17)         0-1     0-1 -> 1                <=1 -> 1             0-1 -> 1
ApiVersions (18)           0-4     3 (v0 on fallback)      4 first, then ours   0
CreateTopics (19)          2-7     0-4 -> 4                <=7 -> 7             0-3 -> 3
DeleteTopics (20)          1-6     0-4 -> 4                <=6 -> 6             0-3 -> 3
InitProducerId (22)        0-4     0-4 -> 4                <=4 -> 4             0 -> 0
OffsetForLeaderEpoch (23)  2-4     2 -> 2                  <=4 -> 4             not used
DescribeAcls (29)          1-3     0-2 -> 2                <=3 -> 3             not used
CreateAcls (30)            1-3     0-2 -> 2                <=3 -> 3             not used
DeleteAcls (31)            1-3     0-2 -> 2                <=3 -> 3             not used
DescribeConfigs (32)       1-4     0-1 -> 1                <=4 -> 4             0-2 -> 2
SaslAuthenticate (36)      0-2     0-1 -> 1                <=2 -> 2             0-1 -> 1
CreatePartitions (37)      0-3     0-2 -> 2                <=3 -> 3             0-1 -> 1
DeleteGroups (42)          0-2     0-2 -> 2                <=2 -> 2             0-1 -> 1
IncrementalAlterConfigs    0-1     0-1 -> 1                <=1 -> 1             not used
(44)
DescribeCluster (60)       0-1     not used (Metadata)     <=2 -> 1             not used
ConsumerGroupHeartbeat     0-1     exactly 1 (KIP-848,     not used             not used
(68)                               group.protocol=consumer)
=========================  ======  ======================  ===================  ==========

(*) librdkafka turns the KIP-848 consumer on only if the broker serves ConsumerGroupHeartbeat
and OffsetCommit and OffsetFetch v9+ (its feature map), so both go to 9; OffsetFetch v8+ has
the multi-group layout (`groups`), which librdkafka then sends with one group and
kafka-python with v8. ApiVersions v4 has v3's layout (it only lets SupportedFeatures carry
a MinVersion of 0, KAFKA-17011); serving it spares kafka-python, which asks with v4 first,
a KIP-511 round trip. Fetch stays at 12: v13+ names topics by id only. The ACL APIs start
at v1: v0 (no pattern types) is deprecated in Kafka's schemas and gone in 4.0 (KIP-896);
kafka-python's schemas start there too, and librdkafka sends v1+ whenever it is served.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from typing import Any, Final, NamedTuple
from uuid import UUID

from kraftlite.protocol.kafka.wire import EncodeError, Reader, WireError, Writer

_LATEST: Final = 0x7FFF
UNSUPPORTED_VERSION: Final = 35  # Kafka's error code, carried by the KIP-511 answer
ZERO_UUID: Final = UUID(int=0)


class ApiKey(IntEnum):
    """The API keys kraftlite serves, with Kafka's numbers."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


# ------------------------------------------------------------------------------- the DSL


class Versions(NamedTuple):
    """An inclusive range of versions; empty when `low > high` (Kafka's "none")."""

    low: int
    high: int

    def has(self, version: int) -> bool:
        return self.low <= version <= self.high


NO_VERSIONS: Final = Versions(1, 0)


def versions(spec: str) -> Versions:
    """Parse Kafka's version syntax: "3+", "0-7", "5" or "none"."""
    if spec == "none":
        return NO_VERSIONS
    if spec.endswith("+"):
        return Versions(int(spec[:-1]), _LATEST)
    low, _, high = spec.partition("-")
    return Versions(int(low), int(high or low))


def snake_case(name: str) -> str:
    """Kafka's CamelCase field name as a dict key: `IsrNodes` -> `isr_nodes`."""
    out: list[str] = []
    for index, char in enumerate(name):
        if char.isupper():
            if index:
                out.append("_")
            out.append(char.lower())
        else:
            out.append(char)
    return "".join(out)


PRIMITIVES: Final = frozenset(
    {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "uuid"}
    | {"string", "bytes", "records"}
)

_NO_DEFAULT: Final[Any] = object()


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message or struct, as Kafka's JSON schemas declare it.

    `type` is a primitive name, `[]<primitive>`, `[]<StructName>` (an array of structs whose
    fields are `fields`) or `<StructName>` (one struct). `default` is the value a missing
    field takes (Kafka's rules when the schema gives none: 0, False, "", b"", zero uuid,
    None for records, [] for arrays, a dict of defaults for a struct).
    """

    name: str
    type: str
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions
    default: Any
    fields: tuple[Field, ...]
    key: str

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element not in PRIMITIVES


def field(
    name: str,
    type_: str,
    versions_: str,
    *,
    nullable: str = "none",
    tag: int | None = None,
    default: Any = _NO_DEFAULT,
    fields: tuple[Field, ...] = (),
) -> Field:
    """Declare a field. A `tag` makes it a tagged field in all its versions."""
    valid = versions(versions_)
    spec = Field(name, type_, valid, versions(nullable), tag, NO_VERSIONS, None, fields, "")
    if spec.is_struct != bool(fields):
        raise ValueError(f"{name}: struct types need fields, primitive types take none")
    if default is _NO_DEFAULT:
        default = _implicit_default(spec)
    return Field(
        name,
        type_,
        valid,
        spec.nullable,
        tag,
        valid if tag is not None else NO_VERSIONS,
        default,
        fields,
        snake_case(name),
    )


def _implicit_default(spec: Field) -> Any:
    if spec.is_array:
        return []
    if spec.is_struct:
        return {sub.key: sub.default for sub in spec.fields}
    return {
        "bool": False,
        "float64": 0.0,
        "string": "",
        "bytes": b"",
        "records": None,
        "uuid": ZERO_UUID,
    }.get(spec.type, 0)


@dataclass(frozen=True, slots=True)
class Message:
    """A request or a response body: its fields and the versions that are flexible."""

    name: str
    fields: tuple[Field, ...]
    flexible: Versions


@dataclass(frozen=True, slots=True)
class Api:
    """One API: its key, the versions served, and its request and response schemas."""

    key: ApiKey
    served: Versions
    request: Message
    response: Message


def api(
    key: ApiKey,
    served: str,
    flexible: str,
    request: tuple[Field, ...],
    response: tuple[Field, ...],
) -> Api:
    name = "".join(part.capitalize() for part in key.name.split("_"))
    flex = versions(flexible)
    return Api(
        key,
        versions(served),
        Message(name + "Request", request, flex),
        Message(name + "Response", response, flex),
    )


# -------------------------------------------------------------------- the compiled codec

Read = Callable[[Reader], Any]
Write = Callable[[Writer, Any], None]

_CLASSIC_SIZE: Final = {"string": 2, "bytes": 4, "records": 4}
_FIXED: Final[dict[str, tuple[Read, Write, int]]] = {
    "int8": (Reader.int8, Writer.int8, 1),
    "int16": (Reader.int16, Writer.int16, 2),
    "int32": (Reader.int32, Writer.int32, 4),
    "int64": (Reader.int64, Writer.int64, 8),
    "uint16": (Reader.uint16, Writer.uint16, 2),
    "uint32": (Reader.uint32, Writer.uint32, 4),
    "float64": (Reader.float64, Writer.float64, 8),
    "bool": (Reader.boolean, Writer.boolean, 1),
    "uuid": (Reader.uuid, Writer.uuid, 16),
}
# (compact, nullable) -> reader and writer, for strings and for bytes/records
_STRINGS: Final[dict[tuple[bool, bool], tuple[Read, Write]]] = {
    (False, False): (Reader.string, Writer.string),
    (False, True): (Reader.nullable_string, Writer.nullable_string),
    (True, False): (Reader.compact_string, Writer.compact_string),
    (True, True): (Reader.compact_nullable_string, Writer.compact_nullable_string),
}
_BYTES: Final[dict[tuple[bool, bool], tuple[Read, Write]]] = {
    (False, False): (Reader.bytes_, Writer.bytes_),
    (False, True): (Reader.nullable_bytes, Writer.nullable_bytes),
    (True, False): (Reader.compact_bytes, Writer.compact_bytes),
    (True, True): (Reader.compact_nullable_bytes, Writer.compact_nullable_bytes),
}
_ENCODE_FAILURES: Final = (
    struct.error,
    TypeError,
    AttributeError,
    OverflowError,
    UnicodeEncodeError,
    ValueError,
)


class _Entry(NamedTuple):
    key: str
    read: Read
    write: Write
    default: Any
    nullable: bool


class StructCodec:
    """One struct (or message body) compiled for one version: how to read and write it.

    `template` holds every field's default in schema order; decoding copies it, then
    overwrites what the version carries. `min_size` is the fewest bytes one instance can
    take, which bounds array counts before anything is allocated (wire rule 2).
    """

    __slots__ = (
        "defaults_written",
        "flexible",
        "keys",
        "min_size",
        "mutable",
        "regular",
        "tagged",
        "template",
    )

    def __init__(self, fields: tuple[Field, ...], version: int, flexible: bool) -> None:
        self.flexible = flexible
        self.regular: list[_Entry] = []
        self.tagged: dict[int, _Entry] = {}
        self.defaults_written: dict[int, bytes] = {}  # each tagged field's default, encoded
        self.template: dict[str, Any] = {}
        self.mutable: list[tuple[str, Any]] = []
        self.keys = frozenset(f.key for f in fields)
        self.min_size = 1 if flexible else 0
        for spec in fields:
            self.template[spec.key] = spec.default
            if isinstance(spec.default, list | dict):
                self.mutable.append((spec.key, spec.default))
            if not spec.versions.has(version):
                continue
            nullable = spec.nullable.has(version)
            read, write, size = _compile(spec, version, flexible, nullable)
            entry = _Entry(spec.key, read, write, spec.default, nullable)
            if spec.tagged.has(version):
                if flexible:
                    assert spec.tag is not None
                    self.tagged[spec.tag] = entry
            else:
                self.regular.append(entry)
                self.min_size += size

    def decode(self, reader: Reader) -> dict[str, Any]:
        out = dict(self.template)
        for key, default in self.mutable:
            out[key] = _fresh(default)
        for entry in self.regular:
            out[entry.key] = entry.read(reader)
        if self.flexible:
            self._decode_tagged(reader, out)
        return out

    def _decode_tagged(self, reader: Reader, out: dict[str, Any]) -> None:
        # every field, known or skipped, is an item of the request's budget (wire rule 2)
        count = reader.tagged_field_count()
        for _ in range(count):
            tag, size = reader.tagged_field_header()
            entry = self.tagged.get(tag)
            if entry is None:  # a tag from a later version: skip it, as Kafka does
                reader.skip(size)
                continue
            inner = Reader(reader.raw(size), budget=reader.budget)
            out[entry.key] = entry.read(inner)
            inner.expect_end(f"tagged field {entry.key}")

    def encode(self, writer: Writer, body: Mapping[str, Any]) -> None:
        if not isinstance(body, Mapping):
            raise EncodeError(f"a struct must be a mapping, not {type(body).__name__}")
        unknown = body.keys() - self.keys
        if unknown:
            raise EncodeError(f"unknown fields {sorted(unknown)}")
        for entry in self.regular:
            _encode_one(writer, entry, body.get(entry.key, entry.default))
        if self.flexible:
            self._encode_tagged(writer, body)

    def _encode_tagged(self, writer: Writer, body: Mapping[str, Any]) -> None:
        present: dict[int, bytes] = {}
        for tag, entry in self.tagged.items():
            value = body.get(entry.key, entry.default)
            if value != entry.default:
                inner = Writer()
                _encode_one(inner, entry, value)
                written = inner.getvalue()
                # a value that encodes as the default (a struct given as {}, its fields
                # filled with their defaults) is left out, as Kafka's generated code does:
                # what is decoded encodes again to the same bytes
                if written != self._default_written(tag, entry):
                    present[tag] = written
        writer.tagged_fields(present)

    def _default_written(self, tag: int, entry: _Entry) -> bytes:
        written = self.defaults_written.get(tag)
        if written is None:
            inner = Writer()
            try:
                _encode_one(inner, entry, entry.default)
                written = inner.getvalue()
            except EncodeError:  # a default the field cannot carry (null): nothing equals it
                written = b""
            self.defaults_written[tag] = written
        return written


def _encode_one(writer: Writer, entry: _Entry, value: Any) -> None:
    if value is None and not entry.nullable:
        raise EncodeError(f"{entry.key}: null in a field that is not nullable here")
    try:
        entry.write(writer, value)
    except EncodeError as exc:
        raise EncodeError(f"{entry.key}.{exc}") from None
    except _ENCODE_FAILURES as exc:
        raise EncodeError(f"{entry.key}: {exc}") from exc


def _fresh(default: Any) -> Any:
    """A new copy of a mutable default, so decoded bodies never share lists or dicts."""
    if isinstance(default, list):
        return [_fresh(item) for item in default]
    if isinstance(default, dict):
        return {key: _fresh(value) for key, value in default.items()}
    return default


def _compile(spec: Field, version: int, flexible: bool, nullable: bool) -> tuple[Read, Write, int]:
    """Reader, writer and smallest encoded size of one field at one version."""
    if spec.is_array:
        return _compile_array(spec, version, flexible, nullable)
    if spec.is_struct:
        codec = StructCodec(spec.fields, version, flexible)
        if nullable:  # Kafka's nullable struct: an int8 marker, -1 null, 1 present
            return _nullable_struct(codec)
        return codec.decode, codec.encode, codec.min_size
    if spec.type in _FIXED:
        return _FIXED[spec.type]
    table = _STRINGS if spec.type == "string" else _BYTES
    read, write = table[(flexible, nullable)]
    return read, write, 1 if flexible else _CLASSIC_SIZE[spec.type]


def _nullable_struct(codec: StructCodec) -> tuple[Read, Write, int]:
    def read(reader: Reader) -> dict[str, Any] | None:
        marker = reader.int8()
        if marker < 0:
            return None
        return codec.decode(reader)

    def write(writer: Writer, value: Mapping[str, Any] | None) -> None:
        if value is None:
            writer.int8(-1)
        else:
            writer.int8(1)
            codec.encode(writer, value)

    return read, write, 1


def _compile_array(
    spec: Field, version: int, flexible: bool, nullable: bool
) -> tuple[Read, Write, int]:
    element = spec.element
    item_read: Read
    item_write: Write
    if spec.is_struct:
        codec = StructCodec(spec.fields, version, flexible)
        item_read, item_write, item_size = codec.decode, codec.encode, codec.min_size
    elif element in _FIXED:
        item_read, item_write, item_size = _FIXED[element]
    else:
        table = _STRINGS if element == "string" else _BYTES
        item_read, item_write = table[(flexible, False)]
        item_size = 1 if flexible else _CLASSIC_SIZE[element]
    bulk = {"int32": (Reader.int32_items, Writer.int32_items)}.get(element)
    if element == "int64":
        bulk = (Reader.int64_items, Writer.int64_items)
    count_of = Reader.compact_array_length if flexible else Reader.array_length
    write_count = Writer.compact_array_length if flexible else Writer.array_length

    def read(reader: Reader) -> list[Any] | None:
        count = count_of(reader, item_size, nullable)
        if count < 0:
            return None
        if bulk is not None:
            return bulk[0](reader, count)
        return [item_read(reader) for _ in range(count)]

    def write(writer: Writer, items: list[Any] | None) -> None:
        if items is None:
            write_count(writer, None)
            return
        write_count(writer, len(items))
        if bulk is not None:
            bulk[1](writer, items)
            return
        for index, item in enumerate(items):
            if item is None:
                raise EncodeError(f"[{index}]: null array element")
            try:
                item_write(writer, item)
            except EncodeError as exc:
                raise EncodeError(f"[{index}].{exc}") from None
            except _ENCODE_FAILURES as exc:
                raise EncodeError(f"[{index}]: {exc}") from exc

    return read, write, 1 if flexible else 4


@cache
def _codec(api_key: ApiKey, version: int, response: bool) -> StructCodec:
    entry = APIS[api_key]
    message = entry.response if response else entry.request
    return StructCodec(message.fields, version, message.flexible.has(version))


# --------------------------------------------------------------------- the schemas
# Transcribed from Kafka's message schemas (field names, versions, nullability, tags and
# defaults), trimmed to the versions served. Read each against its JSON file.

# fmt: off
f = field
THROTTLE = f("ThrottleTimeMs", "int32", "0+")
_UNKNOWN_AUTHORIZED: Final = -(2**31)
_REPLICA_STATE: Final = (  # DescribeQuorum's common struct
    f("ReplicaId", "int32", "0+"),
    f("ReplicaDirectoryId", "uuid", "2+"),
    f("LogEndOffset", "int64", "0+"),
    f("LastFetchTimestamp", "int64", "1+", default=-1),
    f("LastCaughtUpTimestamp", "int64", "1+", default=-1),
)
_DESCRIBED_ASSIGNMENT: Final = (  # ConsumerGroupDescribe's common struct
    f("TopicPartitions", "[]TopicPartitions", "0+", fields=(
        f("TopicId", "uuid", "0+"),
        f("TopicName", "string", "0+"),
        f("Partitions", "[]int32", "0+"),
    )),
)

_API_LIST: Final = (
    api(
        ApiKey.PRODUCE,
        "3-9",
        "9+",
        request=(
            f("TransactionalId", "string", "3+", nullable="3+", default=None),
            f("Acks", "int16", "0+"),
            f("TimeoutMs", "int32", "0+"),
            f("TopicData", "[]TopicProduceData", "0+", fields=(
                f("Name", "string", "0+"),
                f("PartitionData", "[]PartitionProduceData", "0+", fields=(
                    f("Index", "int32", "0+"),
                    f("Records", "records", "0+", nullable="0+"),
                )),
            )),
        ),
        response=(
            f("Responses", "[]TopicProduceResponse", "0+", fields=(
                f("Name", "string", "0+"),
                f("PartitionResponses", "[]PartitionProduceResponse", "0+", fields=(
                    f("Index", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                    f("BaseOffset", "int64", "0+"),
                    f("LogAppendTimeMs", "int64", "2+", default=-1),
                    f("LogStartOffset", "int64", "5+", default=-1),
                    f("RecordErrors", "[]BatchIndexAndErrorMessage", "8+", fields=(
                        f("BatchIndex", "int32", "8+"),
                        f("BatchIndexErrorMessage", "string", "8+", nullable="8+",
                          default=None),
                    )),
                    f("ErrorMessage", "string", "8+", nullable="8+", default=None),
                )),
            )),
            f("ThrottleTimeMs", "int32", "1+"),
        ),
    ),
    api(
        ApiKey.FETCH,
        "4-12",
        "12+",
        request=(
            f("ClusterId", "string", "12+", nullable="12+", tag=0, default=None),
            f("ReplicaId", "int32", "0-14", default=-1),
            f("MaxWaitMs", "int32", "0+"),
            f("MinBytes", "int32", "0+"),
            f("MaxBytes", "int32", "3+", default=0x7FFFFFFF),
            f("IsolationLevel", "int8", "4+"),
            f("SessionId", "int32", "7+"),
            f("SessionEpoch", "int32", "7+", default=-1),
            f("Topics", "[]FetchTopic", "0+", fields=(
                f("Topic", "string", "0-12"),
                f("Partitions", "[]FetchPartition", "0+", fields=(
                    f("Partition", "int32", "0+"),
                    f("CurrentLeaderEpoch", "int32", "9+", default=-1),
                    f("FetchOffset", "int64", "0+"),
                    f("LastFetchedEpoch", "int32", "12+", default=-1),
                    f("LogStartOffset", "int64", "5+", default=-1),
                    f("PartitionMaxBytes", "int32", "0+"),
                )),
            )),
            f("ForgottenTopicsData", "[]ForgottenTopic", "7+", fields=(
                f("Topic", "string", "7-12"),
                f("Partitions", "[]int32", "7+"),
            )),
            f("RackId", "string", "11+"),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "1+"),
            f("ErrorCode", "int16", "7+"),
            f("SessionId", "int32", "7+"),
            f("Responses", "[]FetchableTopicResponse", "0+", fields=(
                f("Topic", "string", "0-12"),
                f("Partitions", "[]PartitionData", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                    f("HighWatermark", "int64", "0+"),
                    f("LastStableOffset", "int64", "4+", default=-1),
                    f("LogStartOffset", "int64", "5+", default=-1),
                    f("DivergingEpoch", "EpochEndOffset", "12+", tag=0, fields=(
                        f("Epoch", "int32", "12+", default=-1),
                        f("EndOffset", "int64", "12+", default=-1),
                    )),
                    f("CurrentLeader", "LeaderIdAndEpoch", "12+", tag=1, fields=(
                        f("LeaderId", "int32", "12+", default=-1),
                        f("LeaderEpoch", "int32", "12+", default=-1),
                    )),
                    f("SnapshotId", "SnapshotId", "12+", tag=2, fields=(
                        f("EndOffset", "int64", "0+", default=-1),
                        f("Epoch", "int32", "0+", default=-1),
                    )),
                    f("AbortedTransactions", "[]AbortedTransaction", "4+", nullable="4+",
                      fields=(
                        f("ProducerId", "int64", "4+"),
                        f("FirstOffset", "int64", "4+"),
                    )),
                    f("PreferredReadReplica", "int32", "11+", default=-1),
                    f("Records", "records", "0+", nullable="0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.LIST_OFFSETS,
        "1-7",
        "6+",
        request=(
            f("ReplicaId", "int32", "0+"),
            f("IsolationLevel", "int8", "2+"),
            f("Topics", "[]ListOffsetsTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]ListOffsetsPartition", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("CurrentLeaderEpoch", "int32", "4+", default=-1),
                    f("Timestamp", "int64", "0+"),
                )),
            )),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "2+"),
            f("Topics", "[]ListOffsetsTopicResponse", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]ListOffsetsPartitionResponse", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                    f("Timestamp", "int64", "1+", default=-1),
                    f("Offset", "int64", "1+", default=-1),
                    f("LeaderEpoch", "int32", "4+", default=-1),
                )),
            )),
        ),
    ),
    api(
        ApiKey.METADATA,
        "0-12",
        "9+",
        request=(
            f("Topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=(
                f("TopicId", "uuid", "10+"),
                f("Name", "string", "0+", nullable="10+"),
            )),
            f("AllowAutoTopicCreation", "bool", "4+", default=True),
            f("IncludeClusterAuthorizedOperations", "bool", "8-10"),
            f("IncludeTopicAuthorizedOperations", "bool", "8+"),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "3+"),
            f("Brokers", "[]MetadataResponseBroker", "0+", fields=(
                f("NodeId", "int32", "0+"),
                f("Host", "string", "0+"),
                f("Port", "int32", "0+"),
                f("Rack", "string", "1+", nullable="1+", default=None),
            )),
            f("ClusterId", "string", "2+", nullable="2+", default=None),
            f("ControllerId", "int32", "1+", default=-1),
            f("Topics", "[]MetadataResponseTopic", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("Name", "string", "0+", nullable="12+"),
                f("TopicId", "uuid", "10+"),
                f("IsInternal", "bool", "1+"),
                f("Partitions", "[]MetadataResponsePartition", "0+", fields=(
                    f("ErrorCode", "int16", "0+"),
                    f("PartitionIndex", "int32", "0+"),
                    f("LeaderId", "int32", "0+"),
                    f("LeaderEpoch", "int32", "7+", default=-1),
                    f("ReplicaNodes", "[]int32", "0+"),
                    f("IsrNodes", "[]int32", "0+"),
                    f("OfflineReplicas", "[]int32", "5+"),
                )),
                f("TopicAuthorizedOperations", "int32", "8+", default=_UNKNOWN_AUTHORIZED),
            )),
            f("ClusterAuthorizedOperations", "int32", "8-10", default=_UNKNOWN_AUTHORIZED),
        ),
    ),
    api(
        ApiKey.OFFSET_COMMIT,
        "2-9",
        "8+",
        request=(
            f("GroupId", "string", "0+"),
            f("GenerationIdOrMemberEpoch", "int32", "1+", default=-1),
            f("MemberId", "string", "1+"),
            f("GroupInstanceId", "string", "7+", nullable="7+", default=None),
            f("RetentionTimeMs", "int64", "2-4", default=-1),
            f("Topics", "[]OffsetCommitRequestTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]OffsetCommitRequestPartition", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("CommittedOffset", "int64", "0+"),
                    f("CommittedLeaderEpoch", "int32", "6+", default=-1),
                    f("CommittedMetadata", "string", "0+", nullable="0+"),
                )),
            )),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "3+"),
            f("Topics", "[]OffsetCommitResponseTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]OffsetCommitResponsePartition", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.OFFSET_FETCH,
        "1-9",
        "6+",
        request=(
            f("GroupId", "string", "0-7"),
            f("Topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=(
                f("Name", "string", "0-7"),
                f("PartitionIndexes", "[]int32", "0-7"),
            )),
            f("Groups", "[]OffsetFetchRequestGroup", "8+", fields=(
                f("GroupId", "string", "8+"),
                f("MemberId", "string", "9+", nullable="9+", default=None),
                f("MemberEpoch", "int32", "9+", default=-1),
                f("Topics", "[]OffsetFetchRequestTopics", "8+", nullable="8+", fields=(
                    f("Name", "string", "8+"),
                    f("PartitionIndexes", "[]int32", "8+"),
                )),
            )),
            f("RequireStable", "bool", "7+"),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "3+"),
            f("Topics", "[]OffsetFetchResponseTopic", "0-7", fields=(
                f("Name", "string", "0-7"),
                f("Partitions", "[]OffsetFetchResponsePartition", "0-7", fields=(
                    f("PartitionIndex", "int32", "0-7"),
                    f("CommittedOffset", "int64", "0-7"),
                    f("CommittedLeaderEpoch", "int32", "5-7", default=-1),
                    f("Metadata", "string", "0-7", nullable="0-7"),
                    f("ErrorCode", "int16", "0-7"),
                )),
            )),
            f("ErrorCode", "int16", "2-7"),
            f("Groups", "[]OffsetFetchResponseGroup", "8+", fields=(
                f("GroupId", "string", "8+"),
                f("Topics", "[]OffsetFetchResponseTopics", "8+", fields=(
                    f("Name", "string", "8+"),
                    f("Partitions", "[]OffsetFetchResponsePartitions", "8+", fields=(
                        f("PartitionIndex", "int32", "8+"),
                        f("CommittedOffset", "int64", "8+"),
                        f("CommittedLeaderEpoch", "int32", "8+", default=-1),
                        f("Metadata", "string", "8+", nullable="8+"),
                        f("ErrorCode", "int16", "8+"),
                    )),
                )),
                f("ErrorCode", "int16", "8+"),
            )),
        ),
    ),
    api(
        ApiKey.FIND_COORDINATOR,
        "0-4",
        "3+",
        request=(
            f("Key", "string", "0-3"),
            f("KeyType", "int8", "1+"),
            f("CoordinatorKeys", "[]string", "4+"),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "1+"),
            f("ErrorCode", "int16", "0-3"),
            f("ErrorMessage", "string", "1-3", nullable="1-3"),
            f("NodeId", "int32", "0-3"),
            f("Host", "string", "0-3"),
            f("Port", "int32", "0-3"),
            f("Coordinators", "[]Coordinator", "4+", fields=(
                f("Key", "string", "4+"),
                f("NodeId", "int32", "4+"),
                f("Host", "string", "4+"),
                f("Port", "int32", "4+"),
                f("ErrorCode", "int16", "4+"),
                f("ErrorMessage", "string", "4+", nullable="4+"),
            )),
        ),
    ),
    api(
        ApiKey.JOIN_GROUP,
        "0-9",
        "6+",
        request=(
            f("GroupId", "string", "0+"),
            f("SessionTimeoutMs", "int32", "0+"),
            f("RebalanceTimeoutMs", "int32", "1+", default=-1),
            f("MemberId", "string", "0+"),
            f("GroupInstanceId", "string", "5+", nullable="5+", default=None),
            f("ProtocolType", "string", "0+"),
            f("Protocols", "[]JoinGroupRequestProtocol", "0+", fields=(
                f("Name", "string", "0+"),
                f("Metadata", "bytes", "0+"),
            )),
            f("Reason", "string", "8+", nullable="8+", default=None),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "2+"),
            f("ErrorCode", "int16", "0+"),
            f("GenerationId", "int32", "0+", default=-1),
            f("ProtocolType", "string", "7+", nullable="7+", default=None),
            f("ProtocolName", "string", "0+", nullable="7+"),
            f("Leader", "string", "0+"),
            f("SkipAssignment", "bool", "9+", default=False),
            f("MemberId", "string", "0+"),
            f("Members", "[]JoinGroupResponseMember", "0+", fields=(
                f("MemberId", "string", "0+"),
                f("GroupInstanceId", "string", "5+", nullable="5+", default=None),
                f("Metadata", "bytes", "0+"),
            )),
        ),
    ),
    api(
        ApiKey.HEARTBEAT,
        "0-4",
        "4+",
        request=(
            f("GroupId", "string", "0+"),
            f("GenerationId", "int32", "0+"),
            f("MemberId", "string", "0+"),
            f("GroupInstanceId", "string", "3+", nullable="3+", default=None),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "1+"),
            f("ErrorCode", "int16", "0+"),
        ),
    ),
    api(
        ApiKey.LEAVE_GROUP,
        "0-4",
        "4+",
        request=(
            f("GroupId", "string", "0+"),
            f("MemberId", "string", "0-2"),
            f("Members", "[]MemberIdentity", "3+", fields=(
                f("MemberId", "string", "3+"),
                f("GroupInstanceId", "string", "3+", nullable="3+", default=None),
            )),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "1+"),
            f("ErrorCode", "int16", "0+"),
            f("Members", "[]MemberResponse", "3+", fields=(
                f("MemberId", "string", "3+"),
                f("GroupInstanceId", "string", "3+", nullable="3+"),
                f("ErrorCode", "int16", "3+"),
            )),
        ),
    ),
    api(
        ApiKey.SYNC_GROUP,
        "0-5",
        "4+",
        request=(
            f("GroupId", "string", "0+"),
            f("GenerationId", "int32", "0+"),
            f("MemberId", "string", "0+"),
            f("GroupInstanceId", "string", "3+", nullable="3+", default=None),
            f("ProtocolType", "string", "5+", nullable="5+", default=None),
            f("ProtocolName", "string", "5+", nullable="5+", default=None),
            f("Assignments", "[]SyncGroupRequestAssignment", "0+", fields=(
                f("MemberId", "string", "0+"),
                f("Assignment", "bytes", "0+"),
            )),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "1+"),
            f("ErrorCode", "int16", "0+"),
            f("ProtocolType", "string", "5+", nullable="5+", default=None),
            f("ProtocolName", "string", "5+", nullable="5+", default=None),
            f("Assignment", "bytes", "0+"),
        ),
    ),
    api(
        ApiKey.DESCRIBE_GROUPS,
        "0-5",
        "5+",
        request=(
            f("Groups", "[]string", "0+"),
            f("IncludeAuthorizedOperations", "bool", "3+"),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "1+"),
            f("Groups", "[]DescribedGroup", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("GroupId", "string", "0+"),
                f("GroupState", "string", "0+"),
                f("ProtocolType", "string", "0+"),
                f("ProtocolData", "string", "0+"),
                f("Members", "[]DescribedGroupMember", "0+", fields=(
                    f("MemberId", "string", "0+"),
                    f("GroupInstanceId", "string", "4+", nullable="4+", default=None),
                    f("ClientId", "string", "0+"),
                    f("ClientHost", "string", "0+"),
                    f("MemberMetadata", "bytes", "0+"),
                    f("MemberAssignment", "bytes", "0+"),
                )),
                f("AuthorizedOperations", "int32", "3+", default=_UNKNOWN_AUTHORIZED),
            )),
        ),
    ),
    api(
        ApiKey.LIST_GROUPS,
        "0-5",
        "3+",
        request=(
            f("StatesFilter", "[]string", "4+"),
            f("TypesFilter", "[]string", "5+"),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "1+"),
            f("ErrorCode", "int16", "0+"),
            f("Groups", "[]ListedGroup", "0+", fields=(
                f("GroupId", "string", "0+"),
                f("ProtocolType", "string", "0+"),
                f("GroupState", "string", "4+"),
                f("GroupType", "string", "5+"),
            )),
        ),
    ),
    api(
        ApiKey.SASL_HANDSHAKE,
        "0-1",
        "none",
        request=(f("Mechanism", "string", "0+"),),
        response=(
            f("ErrorCode", "int16", "0+"),
            f("Mechanisms", "[]string", "0+"),
        ),
    ),
    api(
        ApiKey.API_VERSIONS,
        "0-4",
        "3+",
        request=(
            f("ClientSoftwareName", "string", "3+"),
            f("ClientSoftwareVersion", "string", "3+"),
        ),
        response=(
            f("ErrorCode", "int16", "0+"),
            f("ApiKeys", "[]ApiVersion", "0+", fields=(
                f("ApiKey", "int16", "0+"),
                f("MinVersion", "int16", "0+"),
                f("MaxVersion", "int16", "0+"),
            )),
            f("ThrottleTimeMs", "int32", "1+"),
            f("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, fields=(
                f("Name", "string", "3+"),
                f("MinVersion", "int16", "3+"),
                f("MaxVersion", "int16", "3+"),
            )),
            f("FinalizedFeaturesEpoch", "int64", "3+", tag=1, default=-1),
            f("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, fields=(
                f("Name", "string", "3+"),
                f("MaxVersionLevel", "int16", "3+"),
                f("MinVersionLevel", "int16", "3+"),
            )),
            f("ZkMigrationReady", "bool", "3+", tag=3),
        ),
    ),
    api(
        ApiKey.CREATE_TOPICS,
        "2-7",
        "5+",
        request=(
            f("Topics", "[]CreatableTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("NumPartitions", "int32", "0+"),
                f("ReplicationFactor", "int16", "0+"),
                f("Assignments", "[]CreatableReplicaAssignment", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("BrokerIds", "[]int32", "0+"),
                )),
                f("Configs", "[]CreatableTopicConfig", "0+", fields=(
                    f("Name", "string", "0+"),
                    f("Value", "string", "0+", nullable="0+"),
                )),
            )),
            f("timeoutMs", "int32", "0+", default=60000),
            f("validateOnly", "bool", "1+"),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "2+"),
            f("Topics", "[]CreatableTopicResult", "0+", fields=(
                f("Name", "string", "0+"),
                f("TopicId", "uuid", "7+"),
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "1+", nullable="0+"),
                f("TopicConfigErrorCode", "int16", "5+", tag=0),
                f("NumPartitions", "int32", "5+", default=-1),
                f("ReplicationFactor", "int16", "5+", default=-1),
                f("Configs", "[]CreatableTopicConfigs", "5+", nullable="5+", fields=(
                    f("Name", "string", "5+"),
                    f("Value", "string", "5+", nullable="5+"),
                    f("ReadOnly", "bool", "5+"),
                    f("ConfigSource", "int8", "5+", default=-1),
                    f("IsSensitive", "bool", "5+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.DELETE_TOPICS,
        "1-6",
        "4+",
        request=(
            f("Topics", "[]DeleteTopicState", "6+", fields=(
                f("Name", "string", "6+", nullable="6+", default=None),
                f("TopicId", "uuid", "6+"),
            )),
            f("TopicNames", "[]string", "0-5"),
            f("TimeoutMs", "int32", "0+"),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "1+"),
            f("Responses", "[]DeletableTopicResult", "0+", fields=(
                f("Name", "string", "0+", nullable="6+"),
                f("TopicId", "uuid", "6+"),
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "5+", nullable="5+", default=None),
            )),
        ),
    ),
    api(
        ApiKey.INIT_PRODUCER_ID,
        "0-4",
        "2+",
        request=(
            f("TransactionalId", "string", "0+", nullable="0+"),
            f("TransactionTimeoutMs", "int32", "0+"),
            f("ProducerId", "int64", "3+", default=-1),
            f("ProducerEpoch", "int16", "3+", default=-1),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "0+"),
            f("ProducerId", "int64", "0+", default=-1),
            f("ProducerEpoch", "int16", "0+"),
        ),
    ),
    api(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        "0-3",  # v4+ are the brokers' own (KIP-890)
        "3+",
        request=(
            f("V3AndBelowTransactionalId", "string", "0-3"),
            f("V3AndBelowProducerId", "int64", "0-3"),
            f("V3AndBelowProducerEpoch", "int16", "0-3"),
            f("V3AndBelowTopics", "[]AddPartitionsToTxnTopic", "0-3", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]int32", "0+"),
            )),
        ),
        response=(
            THROTTLE,
            f("ResultsByTopicV3AndBelow", "[]AddPartitionsToTxnTopicResult", "0-3", fields=(
                f("Name", "string", "0+"),
                f("ResultsByPartition", "[]AddPartitionsToTxnPartitionResult", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("PartitionErrorCode", "int16", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.ADD_OFFSETS_TO_TXN,
        "0-3",  # v4 adds TRANSACTION_ABORTABLE
        "3+",
        request=(
            f("TransactionalId", "string", "0+"),
            f("ProducerId", "int64", "0+"),
            f("ProducerEpoch", "int16", "0+"),
            f("GroupId", "string", "0+"),
        ),
        response=(THROTTLE, f("ErrorCode", "int16", "0+")),
    ),
    api(
        ApiKey.END_TXN,
        "0-3",  # v4 adds TRANSACTION_ABORTABLE, v5 the second transaction protocol
        "3+",
        request=(
            f("TransactionalId", "string", "0+"),
            f("ProducerId", "int64", "0+"),
            f("ProducerEpoch", "int16", "0+"),
            f("Committed", "bool", "0+"),
        ),
        response=(THROTTLE, f("ErrorCode", "int16", "0+")),
    ),
    api(
        ApiKey.TXN_OFFSET_COMMIT,
        "0-3",  # v4 adds TRANSACTION_ABORTABLE
        "3+",
        request=(
            f("TransactionalId", "string", "0+"),
            f("GroupId", "string", "0+"),
            f("ProducerId", "int64", "0+"),
            f("ProducerEpoch", "int16", "0+"),
            f("GenerationId", "int32", "3+", default=-1),
            f("MemberId", "string", "3+"),
            f("GroupInstanceId", "string", "3+", nullable="3+", default=None),
            f("Topics", "[]TxnOffsetCommitRequestTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]TxnOffsetCommitRequestPartition", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("CommittedOffset", "int64", "0+"),
                    f("CommittedLeaderEpoch", "int32", "2+", default=-1),
                    f("CommittedMetadata", "string", "0+", nullable="0+"),
                )),
            )),
        ),
        response=(
            THROTTLE,
            f("Topics", "[]TxnOffsetCommitResponseTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]TxnOffsetCommitResponsePartition", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        "2-4",
        "4+",
        request=(
            f("ReplicaId", "int32", "3+", default=-2),
            f("Topics", "[]OffsetForLeaderTopic", "0+", fields=(
                f("Topic", "string", "0+"),
                f("Partitions", "[]OffsetForLeaderPartition", "0+", fields=(
                    f("Partition", "int32", "0+"),
                    f("CurrentLeaderEpoch", "int32", "2+", default=-1),
                    f("LeaderEpoch", "int32", "0+"),
                )),
            )),
        ),
        response=(
            f("ThrottleTimeMs", "int32", "2+"),
            f("Topics", "[]OffsetForLeaderTopicResult", "0+", fields=(
                f("Topic", "string", "0+"),
                f("Partitions", "[]EpochEndOffset", "0+", fields=(
                    f("ErrorCode", "int16", "0+"),
                    f("Partition", "int32", "0+"),
                    f("LeaderEpoch", "int32", "1+", default=-1),
                    f("EndOffset", "int64", "0+", default=-1),
                )),
            )),
        ),
    ),
    api(
        ApiKey.DESCRIBE_ACLS,
        "1-3",
        "2+",
        request=(
            f("ResourceTypeFilter", "int8", "0+"),
            f("ResourceNameFilter", "string", "0+", nullable="0+"),
            f("PatternTypeFilter", "int8", "1+", default=3),
            f("PrincipalFilter", "string", "0+", nullable="0+"),
            f("HostFilter", "string", "0+", nullable="0+"),
            f("Operation", "int8", "0+"),
            f("PermissionType", "int8", "0+"),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
            f("Resources", "[]DescribeAclsResource", "0+", fields=(
                f("ResourceType", "int8", "0+"),
                f("ResourceName", "string", "0+"),
                f("PatternType", "int8", "1+", default=3),
                f("Acls", "[]AclDescription", "0+", fields=(
                    f("Principal", "string", "0+"),
                    f("Host", "string", "0+"),
                    f("Operation", "int8", "0+"),
                    f("PermissionType", "int8", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.CREATE_ACLS,
        "1-3",
        "2+",
        request=(
            f("Creations", "[]AclCreation", "0+", fields=(
                f("ResourceType", "int8", "0+"),
                f("ResourceName", "string", "0+"),
                f("ResourcePatternType", "int8", "1+", default=3),
                f("Principal", "string", "0+"),
                f("Host", "string", "0+"),
                f("Operation", "int8", "0+"),
                f("PermissionType", "int8", "0+"),
            )),
        ),
        response=(
            THROTTLE,
            f("Results", "[]AclCreationResult", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+"),
            )),
        ),
    ),
    api(
        ApiKey.DELETE_ACLS,
        "1-3",
        "2+",
        request=(
            f("Filters", "[]DeleteAclsFilter", "0+", fields=(
                f("ResourceTypeFilter", "int8", "0+"),
                f("ResourceNameFilter", "string", "0+", nullable="0+"),
                f("PatternTypeFilter", "int8", "1+", default=3),
                f("PrincipalFilter", "string", "0+", nullable="0+"),
                f("HostFilter", "string", "0+", nullable="0+"),
                f("Operation", "int8", "0+"),
                f("PermissionType", "int8", "0+"),
            )),
        ),
        response=(
            THROTTLE,
            f("FilterResults", "[]DeleteAclsFilterResult", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+"),
                f("MatchingAcls", "[]DeleteAclsMatchingAcl", "0+", fields=(
                    f("ErrorCode", "int16", "0+"),
                    f("ErrorMessage", "string", "0+", nullable="0+"),
                    f("ResourceType", "int8", "0+"),
                    f("ResourceName", "string", "0+"),
                    f("PatternType", "int8", "1+", default=3),
                    f("Principal", "string", "0+"),
                    f("Host", "string", "0+"),
                    f("Operation", "int8", "0+"),
                    f("PermissionType", "int8", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.DESCRIBE_CONFIGS,
        "1-4",
        "4+",
        request=(
            f("Resources", "[]DescribeConfigsResource", "0+", fields=(
                f("ResourceType", "int8", "0+"),
                f("ResourceName", "string", "0+"),
                f("ConfigurationKeys", "[]string", "0+", nullable="0+"),
            )),
            f("IncludeSynonyms", "bool", "1+"),
            f("IncludeDocumentation", "bool", "3+"),
        ),
        response=(
            THROTTLE,
            f("Results", "[]DescribeConfigsResult", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+"),
                f("ResourceType", "int8", "0+"),
                f("ResourceName", "string", "0+"),
                f("Configs", "[]DescribeConfigsResourceResult", "0+", fields=(
                    f("Name", "string", "0+"),
                    f("Value", "string", "0+", nullable="0+"),
                    f("ReadOnly", "bool", "0+"),
                    f("ConfigSource", "int8", "1+", default=-1),
                    f("IsSensitive", "bool", "0+"),
                    f("Synonyms", "[]DescribeConfigsSynonym", "1+", fields=(
                        f("Name", "string", "1+"),
                        f("Value", "string", "1+", nullable="0+"),
                        f("Source", "int8", "1+"),
                    )),
                    f("ConfigType", "int8", "3+"),
                    f("Documentation", "string", "3+", nullable="0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.SASL_AUTHENTICATE,
        "0-2",
        "2+",
        request=(f("AuthBytes", "bytes", "0+"),),
        response=(
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
            f("AuthBytes", "bytes", "0+"),
            f("SessionLifetimeMs", "int64", "1+"),
        ),
    ),
    api(
        ApiKey.CREATE_PARTITIONS,
        "0-3",
        "2+",
        request=(
            f("Topics", "[]CreatePartitionsTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Count", "int32", "0+"),
                f("Assignments", "[]CreatePartitionsAssignment", "0+", nullable="0+", fields=(
                    f("BrokerIds", "[]int32", "0+"),
                )),
            )),
            f("TimeoutMs", "int32", "0+"),
            f("ValidateOnly", "bool", "0+"),
        ),
        response=(
            THROTTLE,
            f("Results", "[]CreatePartitionsTopicResult", "0+", fields=(
                f("Name", "string", "0+"),
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+", default=None),
            )),
        ),
    ),
    api(
        ApiKey.DELETE_GROUPS,
        "0-2",
        "2+",
        request=(f("GroupsNames", "[]string", "0+"),),
        response=(
            THROTTLE,
            f("Results", "[]DeletableGroupResult", "0+", fields=(
                f("GroupId", "string", "0+"),
                f("ErrorCode", "int16", "0+"),
            )),
        ),
    ),
    api(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        "0-1",
        "1+",
        request=(
            f("Resources", "[]AlterConfigsResource", "0+", fields=(
                f("ResourceType", "int8", "0+"),
                f("ResourceName", "string", "0+"),
                f("Configs", "[]AlterableConfig", "0+", fields=(
                    f("Name", "string", "0+"),
                    f("ConfigOperation", "int8", "0+"),
                    f("Value", "string", "0+", nullable="0+"),
                )),
            )),
            f("ValidateOnly", "bool", "0+"),
        ),
        response=(
            THROTTLE,
            f("Responses", "[]AlterConfigsResourceResponse", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+"),
                f("ResourceType", "int8", "0+"),
                f("ResourceName", "string", "0+"),
            )),
        ),
    ),
    api(
        ApiKey.DESCRIBE_CLUSTER,
        "0-1",
        "0+",
        request=(
            f("IncludeClusterAuthorizedOperations", "bool", "0+"),
            f("EndpointType", "int8", "1+", default=1),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+", default=None),
            f("EndpointType", "int8", "1+", default=1),
            f("ClusterId", "string", "0+"),
            f("ControllerId", "int32", "0+", default=-1),
            f("Brokers", "[]DescribeClusterBroker", "0+", fields=(
                f("BrokerId", "int32", "0+"),
                f("Host", "string", "0+"),
                f("Port", "int32", "0+"),
                f("Rack", "string", "0+", nullable="0+", default=None),
            )),
            f("ClusterAuthorizedOperations", "int32", "0+", default=_UNKNOWN_AUTHORIZED),
        ),
    ),
    api(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        "0-1",
        "0+",
        request=(
            f("GroupId", "string", "0+"),
            f("MemberId", "string", "0+"),
            f("MemberEpoch", "int32", "0+"),
            f("InstanceId", "string", "0+", nullable="0+", default=None),
            f("RackId", "string", "0+", nullable="0+", default=None),
            f("RebalanceTimeoutMs", "int32", "0+", default=-1),
            f("SubscribedTopicNames", "[]string", "0+", nullable="0+", default=None),
            f("SubscribedTopicRegex", "string", "1+", nullable="1+", default=None),
            f("ServerAssignor", "string", "0+", nullable="0+", default=None),
            f("TopicPartitions", "[]TopicPartitions", "0+", nullable="0+", default=None,
              fields=(
                f("TopicId", "uuid", "0+"),
                f("Partitions", "[]int32", "0+"),
            )),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+", default=None),
            f("MemberId", "string", "0+", nullable="0+", default=None),
            f("MemberEpoch", "int32", "0+"),
            f("HeartbeatIntervalMs", "int32", "0+"),
            f("Assignment", "Assignment", "0+", nullable="0+", default=None, fields=(
                f("TopicPartitions", "[]TopicPartitions", "0+", fields=(
                    f("TopicId", "uuid", "0+"),
                    f("Partitions", "[]int32", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.DELETE_RECORDS,
        "0-2",
        "2+",
        request=(
            f("Topics", "[]DeleteRecordsTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]DeleteRecordsPartition", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("Offset", "int64", "0+"),
                )),
            )),
            f("TimeoutMs", "int32", "0+"),
        ),
        response=(
            THROTTLE,
            f("Topics", "[]DeleteRecordsTopicResult", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]DeleteRecordsPartitionResult", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("LowWatermark", "int64", "0+"),
                    f("ErrorCode", "int16", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.ALTER_CONFIGS,
        "0-2",
        "2+",
        request=(
            f("Resources", "[]AlterConfigsResource", "0+", fields=(
                f("ResourceType", "int8", "0+"),
                f("ResourceName", "string", "0+"),
                f("Configs", "[]AlterableConfig", "0+", fields=(
                    f("Name", "string", "0+"),
                    f("Value", "string", "0+", nullable="0+"),
                )),
            )),
            f("ValidateOnly", "bool", "0+"),
        ),
        response=(
            THROTTLE,
            f("Responses", "[]AlterConfigsResourceResponse", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+"),
                f("ResourceType", "int8", "0+"),
                f("ResourceName", "string", "0+"),
            )),
        ),
    ),
    api(
        ApiKey.DESCRIBE_LOG_DIRS,
        "1-4",
        "2+",
        request=(
            f("Topics", "[]DescribableLogDirTopic", "0+", nullable="0+", fields=(
                f("Topic", "string", "0+"),
                f("Partitions", "[]int32", "0+"),
            )),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "3+"),
            f("Results", "[]DescribeLogDirsResult", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("LogDir", "string", "0+"),
                f("Topics", "[]DescribeLogDirsTopic", "0+", fields=(
                    f("Name", "string", "0+"),
                    f("Partitions", "[]DescribeLogDirsPartition", "0+", fields=(
                        f("PartitionIndex", "int32", "0+"),
                        f("PartitionSize", "int64", "0+"),
                        f("OffsetLag", "int64", "0+"),
                        f("IsFutureKey", "bool", "0+"),
                    )),
                )),
                f("TotalBytes", "int64", "4+", default=-1),
                f("UsableBytes", "int64", "4+", default=-1),
            )),
        ),
    ),
    api(
        ApiKey.ELECT_LEADERS,
        "0-2",
        "2+",
        request=(
            f("ElectionType", "int8", "1+"),
            f("TopicPartitions", "[]TopicPartitions", "0+", nullable="0+", fields=(
                f("Topic", "string", "0+"),
                f("Partitions", "[]int32", "0+"),
            )),
            f("TimeoutMs", "int32", "0+", default=60000),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "1+"),
            f("ReplicaElectionResults", "[]ReplicaElectionResult", "0+", fields=(
                f("Topic", "string", "0+"),
                f("PartitionResult", "[]PartitionResult", "0+", fields=(
                    f("PartitionId", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                    f("ErrorMessage", "string", "0+", nullable="0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        "0",
        "0+",
        request=(
            f("TimeoutMs", "int32", "0+", default=60000),
            f("Topics", "[]ReassignableTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]ReassignablePartition", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("Replicas", "[]int32", "0+", nullable="0+", default=None),
                )),
            )),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
            f("Responses", "[]ReassignableTopicResponse", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]ReassignablePartitionResponse", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                    f("ErrorMessage", "string", "0+", nullable="0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        "0",
        "0+",
        request=(
            f("TimeoutMs", "int32", "0+", default=60000),
            f("Topics", "[]ListPartitionReassignmentsTopics", "0+", nullable="0+", default=None,
              fields=(
                f("Name", "string", "0+"),
                f("PartitionIndexes", "[]int32", "0+"),
            )),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
            f("Topics", "[]OngoingTopicReassignment", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]OngoingPartitionReassignment", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("Replicas", "[]int32", "0+"),
                    f("AddingReplicas", "[]int32", "0+"),
                    f("RemovingReplicas", "[]int32", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.OFFSET_DELETE,
        "0",
        "none",
        request=(
            f("GroupId", "string", "0+"),
            f("Topics", "[]OffsetDeleteRequestTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]OffsetDeleteRequestPartition", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                )),
            )),
        ),
        response=(
            f("ErrorCode", "int16", "0+"),
            THROTTLE,
            f("Topics", "[]OffsetDeleteResponseTopic", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]OffsetDeleteResponsePartition", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        "0-1",
        "1+",
        request=(
            f("Components", "[]ComponentData", "0+", fields=(
                f("EntityType", "string", "0+"),
                f("MatchType", "int8", "0+"),
                f("Match", "string", "0+", nullable="0+"),
            )),
            f("Strict", "bool", "0+"),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
            f("Entries", "[]EntryData", "0+", nullable="0+", fields=(
                f("Entity", "[]EntityData", "0+", fields=(
                    f("EntityType", "string", "0+"),
                    f("EntityName", "string", "0+", nullable="0+"),
                )),
                f("Values", "[]ValueData", "0+", fields=(
                    f("Key", "string", "0+"),
                    f("Value", "float64", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.ALTER_CLIENT_QUOTAS,
        "0-1",
        "1+",
        request=(
            f("Entries", "[]EntryData", "0+", fields=(
                f("Entity", "[]EntityData", "0+", fields=(
                    f("EntityType", "string", "0+"),
                    f("EntityName", "string", "0+", nullable="0+"),
                )),
                f("Ops", "[]OpData", "0+", fields=(
                    f("Key", "string", "0+"),
                    f("Value", "float64", "0+"),
                    f("Remove", "bool", "0+"),
                )),
            )),
            f("ValidateOnly", "bool", "0+"),
        ),
        response=(
            THROTTLE,
            f("Entries", "[]EntryData", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+"),
                f("Entity", "[]EntityData", "0+", fields=(
                    f("EntityType", "string", "0+"),
                    f("EntityName", "string", "0+", nullable="0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        "0",
        "0+",
        request=(
            f("Users", "[]UserName", "0+", nullable="0+", fields=(f("Name", "string", "0+"),)),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
            f("Results", "[]DescribeUserScramCredentialsResult", "0+", fields=(
                f("User", "string", "0+"),
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+"),
                f("CredentialInfos", "[]CredentialInfo", "0+", fields=(
                    f("Mechanism", "int8", "0+"),
                    f("Iterations", "int32", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        "0",
        "0+",
        request=(
            f("Deletions", "[]ScramCredentialDeletion", "0+", fields=(
                f("Name", "string", "0+"),
                f("Mechanism", "int8", "0+"),
            )),
            f("Upsertions", "[]ScramCredentialUpsertion", "0+", fields=(
                f("Name", "string", "0+"),
                f("Mechanism", "int8", "0+"),
                f("Iterations", "int32", "0+"),
                f("Salt", "bytes", "0+"),
                f("SaltedPassword", "bytes", "0+"),
            )),
        ),
        response=(
            THROTTLE,
            f("Results", "[]AlterUserScramCredentialsResult", "0+", fields=(
                f("User", "string", "0+"),
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+"),
            )),
        ),
    ),
    api(
        ApiKey.DESCRIBE_QUORUM,
        "0-2",
        "0+",
        request=(
            f("Topics", "[]TopicData", "0+", fields=(
                f("TopicName", "string", "0+"),
                f("Partitions", "[]PartitionData", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                )),
            )),
        ),
        response=(
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "2+", nullable="2+"),
            f("Topics", "[]TopicData", "0+", fields=(
                f("TopicName", "string", "0+"),
                f("Partitions", "[]PartitionData", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                    f("ErrorMessage", "string", "2+", nullable="2+"),
                    f("LeaderId", "int32", "0+"),
                    f("LeaderEpoch", "int32", "0+"),
                    f("HighWatermark", "int64", "0+"),
                    f("CurrentVoters", "[]ReplicaState", "0+", fields=_REPLICA_STATE),
                    f("Observers", "[]ReplicaState", "0+", fields=_REPLICA_STATE),
                )),
            )),
            f("Nodes", "[]Node", "2+", fields=(
                f("NodeId", "int32", "2+"),
                f("Listeners", "[]Listener", "2+", fields=(
                    f("Name", "string", "2+"),
                    f("Host", "string", "2+"),
                    f("Port", "uint16", "2+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.DESCRIBE_PRODUCERS,
        "0",
        "0+",
        request=(
            f("Topics", "[]TopicRequest", "0+", fields=(
                f("Name", "string", "0+"),
                f("PartitionIndexes", "[]int32", "0+"),
            )),
        ),
        response=(
            THROTTLE,
            f("Topics", "[]TopicResponse", "0+", fields=(
                f("Name", "string", "0+"),
                f("Partitions", "[]PartitionResponse", "0+", fields=(
                    f("PartitionIndex", "int32", "0+"),
                    f("ErrorCode", "int16", "0+"),
                    f("ErrorMessage", "string", "0+", nullable="0+", default=None),
                    f("ActiveProducers", "[]ProducerState", "0+", fields=(
                        f("ProducerId", "int64", "0+"),
                        f("ProducerEpoch", "int32", "0+"),
                        f("LastSequence", "int32", "0+", default=-1),
                        f("LastTimestamp", "int64", "0+", default=-1),
                        f("CoordinatorEpoch", "int32", "0+"),
                        f("CurrentTxnStartOffset", "int64", "0+", default=-1),
                    )),
                )),
            )),
        ),
    ),
    api(
        ApiKey.DESCRIBE_TRANSACTIONS,
        "0",
        "0+",
        request=(f("TransactionalIds", "[]string", "0+"),),
        response=(
            THROTTLE,
            f("TransactionStates", "[]TransactionState", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("TransactionalId", "string", "0+"),
                f("TransactionState", "string", "0+"),
                f("TransactionTimeoutMs", "int32", "0+"),
                f("TransactionStartTimeMs", "int64", "0+"),
                f("ProducerId", "int64", "0+"),
                f("ProducerEpoch", "int16", "0+"),
                f("Topics", "[]TopicData", "0+", fields=(
                    f("Topic", "string", "0+"),
                    f("Partitions", "[]int32", "0+"),
                )),
            )),
        ),
    ),
    api(
        ApiKey.LIST_TRANSACTIONS,
        "0-1",
        "0+",
        request=(
            f("StateFilters", "[]string", "0+"),
            f("ProducerIdFilters", "[]int64", "0+"),
            f("DurationFilter", "int64", "1+", default=-1),
        ),
        response=(
            THROTTLE,
            f("ErrorCode", "int16", "0+"),
            f("UnknownStateFilters", "[]string", "0+"),
            f("TransactionStates", "[]TransactionState", "0+", fields=(
                f("TransactionalId", "string", "0+"),
                f("ProducerId", "int64", "0+"),
                f("TransactionState", "string", "0+"),
            )),
        ),
    ),
    api(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        "0",
        "0+",
        request=(
            f("GroupIds", "[]string", "0+"),
            f("IncludeAuthorizedOperations", "bool", "0+"),
        ),
        response=(
            THROTTLE,
            f("Groups", "[]DescribedGroup", "0+", fields=(
                f("ErrorCode", "int16", "0+"),
                f("ErrorMessage", "string", "0+", nullable="0+", default=None),
                f("GroupId", "string", "0+"),
                f("GroupState", "string", "0+"),
                f("GroupEpoch", "int32", "0+"),
                f("AssignmentEpoch", "int32", "0+"),
                f("AssignorName", "string", "0+"),
                f("Members", "[]Member", "0+", fields=(
                    f("MemberId", "string", "0+"),
                    f("InstanceId", "string", "0+", nullable="0+", default=None),
                    f("RackId", "string", "0+", nullable="0+", default=None),
                    f("MemberEpoch", "int32", "0+"),
                    f("ClientId", "string", "0+"),
                    f("ClientHost", "string", "0+"),
                    f("SubscribedTopicNames", "[]string", "0+"),
                    f("SubscribedTopicRegex", "string", "0+", nullable="0+", default=None),
                    f("Assignment", "Assignment", "0+", fields=_DESCRIBED_ASSIGNMENT),
                    f("TargetAssignment", "Assignment", "0+", fields=_DESCRIBED_ASSIGNMENT),
                )),
                f("AuthorizedOperations", "int32", "0+", default=_UNKNOWN_AUTHORIZED),
            )),
        ),
    ),
)
# fmt: on

APIS: Final[dict[ApiKey, Api]] = {entry.key: entry for entry in _API_LIST}
API_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    int(key): (entry.served.low, entry.served.high) for key, entry in sorted(APIS.items())
}


# --------------------------------------------------------------- requests and responses


class Request(NamedTuple):
    """A decoded request: its header and its body."""

    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: dict[str, Any]


class Response(NamedTuple):
    """A decoded response (for clients and tests): its correlation id and its body."""

    correlation_id: int
    body: dict[str, Any]


class UnsupportedVersion(WireError):
    """A request for an API key or version we do not serve (header rule 6).

    Carries what the header said, so the server can answer ApiVersions (KIP-511) or close.
    """

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {api_version} is not served")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


def _served(api_key: int, api_version: int) -> Api | None:
    try:
        entry = APIS[ApiKey(api_key)]
    except ValueError:
        return None
    return entry if entry.served.has(api_version) else None


def has_response_field(api_key: int, api_version: int, key: str) -> bool:
    """Whether the response of this API and version has the top-level field `key` (the
    snake_case name, rule 1): every one has `throttle_time_ms` but SaslHandshake's and
    SaslAuthenticate's."""
    served = _served(api_key, api_version)
    return served is not None and any(
        f.key == key and f.versions.has(api_version) for f in served.response.fields
    )


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this version uses compact types, tagged fields and header v2/v1."""
    entry = _served(api_key, api_version)
    if entry is None:
        raise UnsupportedVersion(api_key, api_version, 0)
    return entry.request.flexible.has(api_version)


# items one request may hold: array items (structs, ids, names) and tagged fields
MAX_REQUEST_ITEMS: Final = 200_000


def peek_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request, read without decoding it, so
    a server can refuse a request before its body costs anything."""
    reader = Reader(frame)
    return reader.int16(), reader.int16(), reader.int32()


def decode_request(
    frame: bytes | bytearray | memoryview, max_items: int = MAX_REQUEST_ITEMS
) -> Request:
    """Decode one request frame (without its 4-byte size prefix).

    Raises `UnsupportedVersion` for a key or version not served (checked right after the
    header's fixed part, so even a body we cannot parse gets its correlation id back),
    `ItemBudgetExceeded` once the request holds more than `max_items` items (array items
    and tagged fields, header and body alike), and `WireError` for anything malformed.
    """
    reader = Reader(frame, budget=[max_items])
    api_key = reader.int16()
    api_version = reader.int16()
    correlation_id = reader.int32()
    entry = _served(api_key, api_version)
    if entry is None:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    client_id = reader.nullable_string()  # header v1 and v2: never compact
    flexible = entry.request.flexible.has(api_version)
    if flexible:
        _skip_tagged(reader)
    body = _codec(entry.key, api_version, False).decode(reader)
    return Request(entry.key, api_version, correlation_id, client_id, body)


def _skip_tagged(reader: Reader) -> None:
    """A header's tagged fields: none are defined that a broker reads, so skip them all
    (each still an item of the request's budget, wire rule 2)."""
    for _ in range(reader.tagged_field_count()):
        _, size = reader.tagged_field_header()
        reader.skip(size)


def encode_response(
    api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]
) -> bytes:
    """Encode a response (header and body) WITHOUT the 4-byte size prefix.

    Fields missing from `body` take their defaults. Raises `EncodeError` for a value that
    does not fit its field or a key that is no field, and `UnsupportedVersion` for a
    version not served.
    """
    entry = _served(api_key, api_version)
    if entry is None:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    writer = Writer()
    writer.int32(correlation_id)
    flexible = entry.response.flexible.has(api_version)
    if flexible and entry.key != ApiKey.API_VERSIONS:  # KIP-511: ApiVersions keeps header v0
        writer.unsigned_varint(0)
    _codec(entry.key, api_version, True).encode(writer, body)
    return writer.getvalue()


def api_versions_body(error_code: int = 0) -> dict[str, Any]:
    """An ApiVersions response body listing every version served."""
    return {
        "error_code": error_code,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in API_VERSIONS.items()
        ],
    }


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """KIP-511's answer to an ApiVersions request of a version we do not serve: header v0
    and an ApiVersions v0 body with UNSUPPORTED_VERSION and the versions served (no size
    prefix). The client retries with the highest ApiVersions version listed.
    """
    return encode_response(
        ApiKey.API_VERSIONS, 0, correlation_id, api_versions_body(UNSUPPORTED_VERSION)
    )


# ---------------------------------------------------------- the client side (and tests)


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: Mapping[str, Any],
) -> bytes:
    """Encode a request (header v1, or v2 when flexible, and body) without a size prefix."""
    entry = _served(api_key, api_version)
    if entry is None:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    writer = Writer()
    writer.int16(api_key)
    writer.int16(api_version)
    writer.int32(correlation_id)
    try:
        writer.nullable_string(client_id)
    except (OverflowError, AttributeError) as exc:
        raise EncodeError(f"client_id: {exc}") from exc
    if entry.request.flexible.has(api_version):
        writer.unsigned_varint(0)
    _codec(entry.key, api_version, False).encode(writer, body)
    return writer.getvalue()


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview
) -> Response:
    """Decode a response to a request of `api_key`/`api_version` (frame without its size).

    An ApiVersions answer carrying UNSUPPORTED_VERSION is read as v0 whatever version was
    asked for, as Kafka's clients do (KIP-511).
    """
    entry = _served(api_key, api_version)
    if entry is None:
        raise UnsupportedVersion(api_key, api_version, 0)
    reader = Reader(frame)
    correlation_id = reader.int32()
    if entry.key == ApiKey.API_VERSIONS:
        if api_version > 0 and reader.remaining >= 2:
            start = reader.pos
            if reader.int16() == UNSUPPORTED_VERSION:
                api_version = 0
            reader.pos = start
    elif entry.response.flexible.has(api_version):
        _skip_tagged(reader)
    body = _codec(entry.key, api_version, True).decode(reader)
    reader.expect_end("response")
    return Response(correlation_id, body)
