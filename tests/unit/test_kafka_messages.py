"""Kafka request/response schemas: golden frames, kafka-python as an independent codec for
every served (api, version), property round trips, KIP-511, and hostile frames."""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import struct
import warnings
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka.messages import (
    API_VERSIONS,
    APIS,
    ApiKey,
    Field,
    UnsupportedVersion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kraftlite.protocol.kafka.wire import EncodeError, Reader, WireError, Writer

SERVED = [
    (key, version) for key, (low, high) in API_VERSIONS.items() for version in range(low, high + 1)
]


def _kafka_python_classes() -> dict[tuple[int, str], Any]:
    """kafka-python 3.0.12's message classes (its own codec, from its own JSON schemas)."""
    for module in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" not in module.name and "generate" not in module.name:
            importlib.import_module(module.name)
    found: dict[tuple[int, str], Any] = {}
    pending = [ApiMessage]
    while pending:
        for cls in pending.pop().__subclasses__():
            pending.append(cls)
            if getattr(cls, "_class_version", None) is None and cls.__dict__.get("_json"):
                found[(cls.API_KEY, cls.type)] = cls
    return found


# kafka-python loads its JSON schemas through importlib.resources' legacy read_text,
# deprecated on Python 3.11-3.12, and pytest turns warnings into errors (test_partitioner.py).
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    import kafka.protocol
    from kafka.protocol.api_message import ApiMessage

    KAFKA_PYTHON = _kafka_python_classes()


# ------------------------------------------------------------------------ golden frames


def test_api_versions_v3_request_as_librdkafka_sends_it() -> None:
    """librdkafka's first request on a connection (rd_kafka_ApiVersionRequest, v3): header
    v2 with a classic client_id, then compact software name and version (KIP-511)."""
    golden = bytes.fromhex(
        "0012" "0003" "00000001"  # api_key 18, version 3, correlation id 1
        "0007" "72646b61666b61"  # client_id "rdkafka": a classic string even in header v2
        "00"  # header tagged fields
        "0b" "6c696272646b61666b61"  # compact "librdkafka"
        "07" "322e31362e31"  # compact "2.16.1"
        "00"  # body tagged fields
    )  # fmt: skip
    request = decode_request(golden)
    assert request == messages.Request(
        ApiKey.API_VERSIONS,
        3,
        1,
        "rdkafka",
        {"client_software_name": "librdkafka", "client_software_version": "2.16.1"},
    )
    assert encode_request(18, 3, 1, "rdkafka", request.body) == golden
    theirs = KAFKA_PYTHON[(18, "request")](
        version=3, client_software_name="librdkafka", client_software_version="2.16.1"
    )
    theirs.with_header(correlation_id=1, client_id="rdkafka")
    assert bytes(theirs.encode(header=True)) == golden


def test_api_versions_response_header_is_always_v0() -> None:
    """KIP-511: no tagged fields after the correlation id, even at flexible v3/v4."""
    body = messages.api_versions_body()
    for version in (3, 4):
        frame = encode_response(ApiKey.API_VERSIONS, version, 7, body)
        assert frame[:6] == bytes.fromhex("000000070000")  # correlation id, error 0
        theirs = KAFKA_PYTHON[(18, "response")].decode(frame, version=version, header=True)
        keys = {entry.api_key: (entry.min_version, entry.max_version) for entry in theirs.api_keys}
        assert keys == API_VERSIONS
    flexible = encode_response(ApiKey.METADATA, 12, 7, {})
    assert flexible[:5] == bytes.fromhex("0000000700")  # header v1: empty tagged fields


def test_metadata_request_v1_and_v12_golden() -> None:
    v1 = bytes.fromhex(
        "0003" "0001" "00000002" "0001" "63"  # Metadata v1, correlation 2, client "c"
        "00000001" "0006" "6f7264657273"  # topics: ["orders"] (classic array and string)
    )  # fmt: skip
    assert decode_request(v1).body == {
        "topics": [{"topic_id": messages.ZERO_UUID, "name": "orders"}],
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    null_topics = bytes.fromhex("0003000100000002000163ffffffff")  # all topics
    assert decode_request(null_topics).body["topics"] is None
    v12 = bytes.fromhex(
        "0003" "000c" "00000002" "0001" "63" "00"  # header v2
        "02" "00000000000000000000000000000000" "07" "6f7264657273" "00"  # one topic
        "00" "00" "00"  # allow_auto_topic_creation, include_topic_authorized_ops, tags
    )  # fmt: skip
    body = {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False}
    assert encode_request(ApiKey.METADATA, 12, 2, "c", body) == v12
    theirs = KAFKA_PYTHON[(3, "request")](
        version=12,
        topics=[KAFKA_PYTHON[(3, "request")].MetadataRequestTopic(version=12, name="orders")],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    theirs.with_header(correlation_id=2, client_id="c")
    assert bytes(theirs.encode(header=True)) == v12


def test_metadata_response_v1_golden() -> None:
    body = {
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": 0,
                        "leader_id": 1,
                        "replica_nodes": [1],
                        "isr_nodes": [1],
                    }
                ],
            }
        ],
    }
    golden = bytes.fromhex(
        "00000005"  # correlation id
        "00000001" "00000001" "0001" "68" "00002384" "ffff"  # brokers: 1 h 9092 rack=null
        "00000001"  # controller id
        "00000001" "0000" "0001" "74" "00"  # one topic: error 0, "t", not internal
        "00000001" "0000" "00000000" "00000001"  # one partition: error, index 0, leader 1
        "00000001" "00000001" "00000001" "00000001"  # replicas [1], isr [1]
    )  # fmt: skip
    assert encode_response(ApiKey.METADATA, 1, 5, body) == golden
    decoded = decode_response(ApiKey.METADATA, 1, golden)
    assert decoded.correlation_id == 5
    assert decoded.body["topics"][0]["partitions"][0]["leader_epoch"] == -1  # v7+ default
    theirs = KAFKA_PYTHON[(3, "response")].decode(golden, version=1, header=True)
    assert theirs.brokers[0].port == 9092
    assert theirs.topics[0].partitions[0].isr_nodes == [1]


def test_consumer_group_heartbeat_v1_golden() -> None:
    """KIP-848's heartbeat as librdkafka 2.16 sends it (v1 only); kafka-python has no
    class for it, so the frame is built from the schema by hand."""
    golden = bytes.fromhex(
        "0044" "0001" "00000009" "ffff" "00"  # api 68 v1, correlation 9, no client id
        "0267" "01" "00000000"  # group "g", member id "", epoch 0
        "00" "00" "00004e20"  # instance id null, rack null, rebalance timeout 20000
        "020274" "00" "00" "00" "00"  # topics ["t"], regex null, assignor null, tps null
    )  # fmt: skip
    request = decode_request(golden)
    assert request.body["subscribed_topic_names"] == ["t"]
    assert request.body["topic_partitions"] is None
    assert encode_request(68, 1, 9, None, request.body) == golden
    topic = UUID(int=7)
    assignment = {"topic_partitions": [{"topic_id": topic, "partitions": [0, 2]}]}
    frame = encode_response(
        68, 1, 9, {"member_id": "m", "member_epoch": 3, "assignment": assignment}
    )
    assert (
        frame
        == bytes.fromhex(
            "00000009"
            "00"  # header v1
            "00000000"
            "0000"
            "00"
            "026d"
            "00000003"
            "00000000"  # throttle, error, msg, m, epoch
            "01"
            "02" + topic.hex + "03"
            "00000000"
            "00000002"
            "00"
            "00"  # assignment (present)
             + "00"
        )
    )
    assert decode_response(68, 1, frame).body["assignment"] == assignment
    null_assignment = encode_response(68, 1, 9, {})
    assert null_assignment.endswith(b"\xff\x00")  # int8 -1 marker, then tagged fields
    assert decode_response(68, 1, null_assignment).body["assignment"] is None


# ------------------------------------------------- kafka-python as an independent codec


def _sample(fields: tuple[Field, ...], version: int, seed: int, nulls: bool) -> dict[str, Any]:
    """A body with a value different from the default in every field of this version
    (or null in every nullable field), so a misplaced field cannot hide."""
    body: dict[str, Any] = {}
    for index, spec in enumerate(fields):
        if not spec.versions.has(version):
            continue
        n = seed + index
        value: Any
        if nulls and spec.nullable.has(version):
            value = None
        elif spec.is_array and spec.is_struct:
            value = [] if nulls else [_sample(spec.fields, version, n + k, nulls) for k in (0, 1)]
        elif spec.is_array:
            value = [f"a{n}", "é"] if spec.element == "string" else [n + 1, -(n + 2)]
        elif spec.is_struct:
            value = _sample(spec.fields, version, n, nulls)
        elif spec.type == "string":
            value = f"s{n}é"
        elif spec.type in {"bytes", "records"}:
            value = bytes([n % 256, 0, 255]) if spec.type == "bytes" else None
        elif spec.type == "uuid":
            value = UUID(int=n + 2**100)
        elif spec.type == "bool":
            value = not spec.default
        else:
            value = n + 3 if spec.default != n + 3 else n + 4
        body[spec.key] = value
    return body


def _in_version(fields: tuple[Field, ...], version: int, body: dict[str, Any]) -> dict[str, Any]:
    """`body` cut to the fields this version has (kafka-python's to_dict shows only those)."""
    out: dict[str, Any] = {}
    for spec in fields:
        if not spec.versions.has(version):
            continue
        value = body[spec.key]
        if spec.is_struct and value is not None:
            if spec.is_array:
                value = [_in_version(spec.fields, version, item) for item in value]
            else:
                value = _in_version(spec.fields, version, value)
        out[spec.key] = value
    return out


def _normalized(theirs: Any, ours: Any) -> Any:
    """kafka-python's to_dict, in our terms: authorized-operations bit sets become the int32
    on the wire, under our field name; byte buffers become bytes."""
    if isinstance(theirs, list):
        return [_normalized(a, b) for a, b in zip(theirs, ours or [], strict=False)]
    if isinstance(theirs, set | frozenset):
        return sum(1 << bit for bit in theirs)
    if isinstance(theirs, bytearray | memoryview):
        return bytes(theirs)
    if not isinstance(theirs, dict):
        return theirs
    if "authorized_operations" in theirs and "authorized_operations" not in ours:
        [alias] = [key for key in ours if key.endswith("authorized_operations")]
        theirs[alias] = theirs.pop("authorized_operations")
    return {key: _normalized(value, ours.get(key)) for key, value in theirs.items()}


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize("kind", ["request", "response"])
@pytest.mark.parametrize(("key", "version"), SERVED)
def test_every_schema_agrees_with_kafka_python(
    key: int, version: int, kind: str, nulls: bool
) -> None:
    """Our bytes decode in kafka-python to the same values, and kafka-python re-encodes
    them to exactly our bytes: field order, types, nullability, tags and flexible versions
    all agree for every served (api, version)."""
    theirs_class = KAFKA_PYTHON.get((key, kind))
    if theirs_class is None:
        pytest.skip("kafka-python has no class for this API (golden test above)")
    api = APIS[ApiKey(key)]
    message = api.request if kind == "request" else api.response
    body = _sample(message.fields, version, 1, nulls)
    if key == ApiKey.API_VERSIONS and kind == "response":
        body["error_code"] = 0  # kafka-python reads any ApiVersions error as v0
    codec = messages._codec(ApiKey(key), version, kind == "response")
    writer = Writer()
    codec.encode(writer, body)
    ours = writer.getvalue()
    reader = Reader(ours)
    decoded = codec.decode(reader)
    reader.expect_end()
    expected = _in_version(message.fields, version, decoded)
    theirs = theirs_class.decode(ours, version=version)
    assert _normalized(theirs.to_dict(json=False), expected) == expected
    theirs._header = None
    assert bytes(theirs.encode(version=version)) == ours


# ----------------------------------------------------------------------- round trips


def _strategy(spec: Field, version: int, depth: int = 0) -> st.SearchStrategy[Any]:
    nullable = spec.nullable.has(version)
    element = spec.element
    base: st.SearchStrategy[Any]
    if spec.is_struct:
        inner = _struct_strategy(spec.fields, version, depth + 1)
        base = st.lists(inner, max_size=2) if spec.is_array else inner
    else:
        scalar = {
            "int8": st.integers(-(2**7), 2**7 - 1),
            "int16": st.integers(-(2**15), 2**15 - 1),
            "uint16": st.integers(0, 2**16 - 1),
            "int32": st.integers(-(2**31), 2**31 - 1),
            "int64": st.integers(-(2**63), 2**63 - 1),
            "float64": st.floats(allow_nan=False),
            "bool": st.booleans(),
            "uuid": st.uuids(),
            "string": st.text(max_size=8),
            "bytes": st.binary(max_size=8),
            "records": st.binary(max_size=8),
        }[element]
        base = st.lists(scalar, max_size=3) if spec.is_array else scalar
    return st.none() | base if nullable else base


def _struct_strategy(
    fields: tuple[Field, ...], version: int, depth: int = 0
) -> st.SearchStrategy[dict[str, Any]]:
    present = [spec for spec in fields if spec.versions.has(version)]
    return st.fixed_dictionaries(
        {}, optional={spec.key: _strategy(spec, version, depth) for spec in present}
    )


@st.composite
def served_bodies(draw: st.DrawFn) -> tuple[int, int, bool, dict[str, Any]]:
    key, version = draw(st.sampled_from(SERVED))
    response = draw(st.booleans())
    api = APIS[ApiKey(key)]
    message = api.response if response else api.request
    return key, version, response, draw(_struct_strategy(message.fields, version))


@settings(max_examples=400, deadline=None)
@given(served_bodies(), st.integers(-(2**31), 2**31 - 1), st.none() | st.text(max_size=5))
def test_any_body_round_trips_with_defaults_filled(case, correlation_id, client_id) -> None:
    key, version, response, body = case
    if response:
        frame = encode_response(key, version, correlation_id, body)
        decoded = decode_response(key, version, frame)
        assert decoded.correlation_id == correlation_id
        got = decoded.body
        again = encode_response(key, version, correlation_id, got)
    else:
        frame = encode_request(key, version, correlation_id, client_id, body)
        request = decode_request(frame)
        assert (request.api_key, request.api_version) == (key, version)
        assert (request.correlation_id, request.client_id) == (correlation_id, client_id)
        got = request.body
        again = encode_request(key, version, correlation_id, client_id, got)
    assert again == frame
    if not (key == ApiKey.API_VERSIONS and response and body.get("error_code") == 35):
        assert _holds(got, body)  # what was set comes back; the rest are defaults


def _holds(got: Any, wanted: Any) -> bool:
    """`got` carries every value of `wanted` (dicts may have more keys: defaults)."""
    if isinstance(wanted, dict):
        return isinstance(got, dict) and all(_holds(got.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return (
            isinstance(got, list)
            and len(got) == len(wanted)
            and all(_holds(g, w) for g, w in zip(got, wanted, strict=True))
        )
    return bool(got == wanted)


def test_decoded_bodies_hold_every_field_and_fresh_defaults() -> None:
    frame = encode_request(ApiKey.FETCH, 4, 1, "c", {"topics": [{"topic": "t"}]})
    first = decode_request(frame).body
    assert first["forgotten_topics_data"] == []  # a v7+ field, present with its default
    assert first["rack_id"] == ""
    assert first["max_bytes"] == 0x7FFFFFFF  # Kafka's default, not 0
    first["forgotten_topics_data"].append("x")
    assert decode_request(frame).body["forgotten_topics_data"] == []


def test_tagged_fields_written_only_when_set() -> None:
    plain = encode_response(
        ApiKey.FETCH, 12, 1, {"responses": [{"topic": "t", "partitions": [{}]}]}
    )
    tagged = encode_response(
        ApiKey.FETCH,
        12,
        1,
        {
            "responses": [
                {
                    "topic": "t",
                    "partitions": [{"current_leader": {"leader_id": 2, "leader_epoch": 5}}],
                }
            ]
        },
    )
    assert len(tagged) == len(plain) + 1 + 1 + 8 + 1  # tag, size, two int32, struct's tags
    partition = decode_response(ApiKey.FETCH, 12, tagged).body["responses"][0]["partitions"][0]
    assert partition["current_leader"] == {"leader_id": 2, "leader_epoch": 5}
    assert partition["diverging_epoch"] == {"epoch": -1, "end_offset": -1}


def test_unknown_tags_are_skipped_and_bad_tag_sizes_refused() -> None:
    writer = Writer()
    writer.int16(3)
    writer.int16(12)
    writer.int32(4)
    writer.nullable_string(None)
    writer.tagged_fields({9: b"ignored"})  # a header tag nobody defines
    writer.compact_array_length(None)  # topics: null
    writer.boolean(True)
    writer.boolean(False)
    writer.tagged_fields({0: b"\x01\x02", 31: b"future"})  # unknown body tags
    assert decode_request(writer.getvalue()).body["topics"] is None
    bad = Writer()
    bad.int32(1)  # header v0, always, for ApiVersions
    bad.int16(0)  # error code
    bad.compact_array_length(0)  # api keys
    bad.int32(0)  # throttle
    bad.tagged_fields({1: b"\x00\x00\x00\x00\x00\x00\x00\x05\x00"})  # int64 + a stray byte
    with pytest.raises(WireError, match="finalized_features_epoch"):
        decode_response(ApiKey.API_VERSIONS, 3, bad.getvalue())


# ------------------------------------------------------------------- versions, KIP-511


def test_served_versions_cover_what_each_client_needs() -> None:
    """The table in messages.py's docstring, as data."""
    librdkafka_needs = {
        ApiKey.PRODUCE: 3,  # magic v2 batches
        ApiKey.FETCH: 4,
        ApiKey.CONSUMER_GROUP_HEARTBEAT: 1,  # exactly v1
        ApiKey.OFFSET_COMMIT: 9,  # KIP-848 feature flag
        ApiKey.OFFSET_FETCH: 9,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: 2,
        ApiKey.API_VERSIONS: 3,
    }
    for key, version in librdkafka_needs.items():
        low, high = API_VERSIONS[key]
        assert low <= version <= high, key
    assert API_VERSIONS[ApiKey.FETCH][1] <= 12  # v13+ names topics by id only
    assert API_VERSIONS[ApiKey.PRODUCE][0] >= 3  # only magic v2 batches
    aiokafka_oldest_top = {
        ApiKey.LIST_OFFSETS: 3,
        ApiKey.CREATE_TOPICS: 3,
        ApiKey.DESCRIBE_CONFIGS: 2,
    }
    for key, version in aiokafka_oldest_top.items():
        assert API_VERSIONS[key][0] <= version, key


def test_unsupported_versions_carry_the_correlation_id() -> None:
    frame = struct.pack(">hhi", ApiKey.FETCH, 13, 77) + b"\x00\x01c"
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(frame)
    assert (caught.value.api_key, caught.value.api_version, caught.value.correlation_id) == (
        1,
        13,
        77,
    )
    assert isinstance(caught.value, WireError)
    with pytest.raises(UnsupportedVersion):
        decode_request(struct.pack(">hhi", 999, 0, 5))  # an unknown API key
    with pytest.raises(UnsupportedVersion):
        decode_request(struct.pack(">hhi", ApiKey.PRODUCE, 2, 5))  # magic v1 produce


def test_kip_511_answer_to_an_unknown_api_versions_version() -> None:
    """A v5 ApiVersions request (header v2, a body we cannot know) is answered with a v0
    body: UNSUPPORTED_VERSION and our versions, header v0; clients retry from it."""
    frame = struct.pack(">hhi", 18, 5, 42) + b"\x00\x03abc\x00garbage-from-v5"
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(frame)
    answer = messages.unsupported_api_versions_response(caught.value.correlation_id)
    ours = decode_response(ApiKey.API_VERSIONS, 4, answer)  # read as v0 (KIP-511)
    assert ours.correlation_id == 42
    assert ours.body["error_code"] == messages.UNSUPPORTED_VERSION
    assert {
        e["api_key"]: (e["min_version"], e["max_version"]) for e in ours.body["api_keys"]
    } == API_VERSIONS
    theirs = KAFKA_PYTHON[(18, "response")].decode(answer, version=4, header=True)
    assert theirs.error_code == 35
    assert max(e.max_version for e in theirs.api_keys if e.api_key == 18) == 4


# -------------------------------------------------------------------------- encoding


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"toppics": []}, "unknown fields"),
        ({"topics": [{"name": None}]}, r"topics\.\[0\]\.name: null"),
        ({"controller_id": 2**31}, "controller_id"),
        ({"topics": [{"partitions": [{"replica_nodes": ["1"]}]}]}, "replica_nodes"),
        ({"brokers": [{"host": "x" * 40_000}]}, "host"),
        ({"brokers": "nope"}, "brokers"),
    ],
)
def test_bad_values_raise_encode_error_with_the_field(body: dict[str, Any], message: str) -> None:
    with pytest.raises(EncodeError, match=message):
        encode_response(ApiKey.METADATA, 1, 1, body)


def test_fields_missing_from_the_version_are_ignored_when_encoding() -> None:
    assert encode_response(ApiKey.METADATA, 0, 1, {"cluster_id": "c"}) == encode_response(
        ApiKey.METADATA, 0, 1, {}
    )


# ---------------------------------------------------------------------------- hostile


def _frames() -> list[bytes]:
    produce = {
        "acks": -1,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x" * 20}]}],
    }
    return [
        encode_request(ApiKey.PRODUCE, 3, 1, "c", produce),
        encode_request(ApiKey.PRODUCE, 9, 1, "c", produce),
        encode_request(ApiKey.FETCH, 12, 1, "c", {"topics": [{"topic": "t", "partitions": [{}]}]}),
        encode_request(ApiKey.METADATA, 12, 1, None, {"topics": [{"name": "t"}]}),
        encode_request(ApiKey.API_VERSIONS, 3, 1, "c", {"client_software_name": "x"}),
        encode_request(
            ApiKey.OFFSET_FETCH, 9, 1, "c", {"groups": [{"group_id": "g", "topics": None}]}
        ),
    ]


@pytest.mark.parametrize(
    "frame",
    _frames(),
    ids=["produce3", "produce9", "fetch12", "metadata12", "api_versions3", "offset_fetch9"],
)
def test_truncated_frames_at_every_length_raise_wire_error(frame: bytes) -> None:
    assert decode_request(frame)
    for size in range(len(frame)):
        with pytest.raises(WireError):
            decode_request(frame[:size])
    # trailing bytes are ignored, as Kafka's brokers ignore them (messages.py rule 4)
    assert decode_request(frame + b"\x00") == decode_request(frame)


@settings(max_examples=500)
@given(st.sampled_from(_frames()), st.data())
def test_mutated_frames_raise_only_wire_error(frame: bytes, data: st.DataObject) -> None:
    mutated = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] = data.draw(st.integers(0, 255))
    with contextlib.suppress(WireError):
        decode_request(bytes(mutated))


@settings(max_examples=300)
@given(st.sampled_from(SERVED), st.binary(max_size=64))
def test_random_bodies_raise_only_wire_error(served: tuple[int, int], body: bytes) -> None:
    key, version = served
    frame = struct.pack(">hhi", key, version, 1) + b"\xff\xff"
    if messages.is_flexible(key, version):
        frame += b"\x00"
    with contextlib.suppress(WireError):
        decode_request(frame + body)
    with contextlib.suppress(WireError):
        decode_response(key, version, b"\x00\x00\x00\x01" + body)


def test_a_huge_array_count_in_a_request_allocates_nothing() -> None:
    frame = struct.pack(">hhi", ApiKey.METADATA, 1, 1) + b"\xff\xff" + struct.pack(">i", 2**31 - 1)
    with pytest.raises(WireError, match="cannot fit"):
        decode_request(frame)


# ------------------------------------------------------------------------ schema sanity


def _walk(fields: tuple[Field, ...]) -> list[tuple[Field, ...]]:
    out = [fields]
    for spec in fields:
        if spec.fields:
            out += _walk(spec.fields)
    return out


@pytest.mark.parametrize("key", list(APIS))
def test_schemas_are_consistent(key: ApiKey) -> None:
    api = APIS[key]
    for message in (api.request, api.response):
        for struct_fields in _walk(message.fields):
            keys = [spec.key for spec in struct_fields]
            assert len(keys) == len(set(keys)), message.name
            tags = [spec.tag for spec in struct_fields if spec.tag is not None]
            assert len(tags) == len(set(tags)), message.name
            for spec in struct_fields:
                if spec.tag is not None:  # tagged fields exist only in flexible versions
                    assert spec.versions.low >= message.flexible.low, spec.name
                assert spec.versions.low <= api.served.high, f"{spec.name}: never served"


def test_librdkafkas_metadata_request_for_all_topics_is_read_as_kafka_reads_it() -> None:
    """Captured from librdkafka 2.16 (AdminClient.list_topics()): its v9+ request for all
    topics keeps a 4-byte array-count placeholder, so three bytes trail the body. Kafka's
    brokers ignore them; so do we (messages.py rule 4)."""
    frame = bytes.fromhex("0003000c00000006000772646b61666b610000000000010000")
    request = decode_request(frame)
    assert (request.api_key, request.api_version, request.correlation_id) == (3, 12, 6)
    assert request.client_id == "rdkafka"
    assert request.body["topics"] is None  # all topics


def test_a_tagged_struct_of_defaults_is_left_out_so_a_decoded_body_encodes_the_same() -> None:
    """Found by the round-trip property above: Fetch v12's tagged DivergingEpoch given as
    {} was written (its fields' defaults), decoded as the default, and then left out."""
    body = {"responses": [{"partitions": [{"diverging_epoch": {}}]}]}
    frame = messages.encode_response(ApiKey.FETCH, 12, 0, body)
    decoded = messages.decode_response(ApiKey.FETCH, 12, frame).body
    assert messages.encode_response(ApiKey.FETCH, 12, 0, decoded) == frame
    assert frame == messages.encode_response(
        ApiKey.FETCH, 12, 0, {"responses": [{"partitions": [{}]}]}
    )
