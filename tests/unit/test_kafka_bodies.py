"""The generated Kafka body types (kraftlite/protocol/kafka/bodies.py) against the codec they
describe, so that types and codec cannot drift: the file is what scripts/gen_kafka_types.py
makes of messages.py today, and every decoded body of every version served has exactly its
TypedDict's keys, each value of its type. Also scripts/check_kafka_schemas.py, on schemas
written the way Kafka writes them."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
import uuid
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from kraftlite.protocol.kafka import bodies, messages
from kraftlite.protocol.kafka.messages import API_VERSIONS, APIS, ApiKey, Field, Versions

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
SERVED = [
    (ApiKey(key), version)
    for key, (low, high) in API_VERSIONS.items()
    for version in range(low, high + 1)
]
IDS = [f"{key.name.lower()}-v{version}" for key, version in SERVED]
_SAMPLES: dict[str, object] = {
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "uint16": 5,
    "uint32": 6,
    "float64": 1.5,
    "bool": True,
    "string": "s",
    "bytes": b"b",
    "records": b"r",
    "uuid": uuid.UUID(int=7),
}


def _script(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module


gen_kafka_types = _script("gen_kafka_types")
check_kafka_schemas = _script("check_kafka_schemas")


# ------------------------------------------------------------------------ the generator


def test_bodies_py_is_up_to_date() -> None:
    """Regenerate with `.venv/bin/python scripts/gen_kafka_types.py` after a schema change."""
    assert Path(bodies.__file__).read_text() == gen_kafka_types.generate()


def test_check_mode_fails_on_a_stale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "bodies.py"
    target.write_text(gen_kafka_types.generate())
    assert gen_kafka_types.main(["--check"], target) == 0
    target.write_text(gen_kafka_types.generate().replace("acks: int", "acks: str"))
    assert gen_kafka_types.main(["--check"], target) == 1
    assert "+    acks: int" in capsys.readouterr().out
    assert gen_kafka_types.main([], target) == 0  # rewrites it
    assert target.read_text() == gen_kafka_types.generate()


def test_every_message_has_its_typed_dict() -> None:
    for entry in APIS.values():
        request = getattr(bodies, entry.request.name)
        response = getattr(bodies, entry.response.name)
        assert is_typeddict(request) and is_typeddict(response)
        assert request.__total__ and not response.__total__  # rules 1 and 2
        assert response in get_args(bodies.AnyResponse)


# -------------------------------------------------------------------- types against codec


def _conforms(value: object, hint: Any, path: str) -> None:
    """`value` is of type `hint`; a TypedDict's keys are all there, no more."""
    if get_origin(hint) in (Union, types.UnionType):
        if value is None:
            assert type(None) in get_args(hint), f"{path}: None in a field not typed nullable"
            return
        (hint,) = [arg for arg in get_args(hint) if arg is not type(None)]
    if get_origin(hint) is list:
        assert isinstance(value, list), path
        for index, item in enumerate(value):
            _conforms(item, get_args(hint)[0], f"{path}[{index}]")
    elif is_typeddict(hint):
        assert isinstance(value, dict), path
        assert value.keys() == hint.__annotations__.keys(), f"{path}: keys of {hint.__name__}"
        hints = get_type_hints(hint)
        for key, item in value.items():
            _conforms(item, hints[key], f"{path}.{key}")
    else:
        assert type(value) is hint, f"{path}: {type(value).__name__}, typed {hint.__name__}"


def _sample(fields: tuple[Field, ...], version: int) -> dict[str, object]:
    """A body with every field the version carries set (no defaults), and one item in
    each array, so nested structs are decoded too."""
    out: dict[str, object] = {}
    for spec in fields:
        if spec.versions.has(version):
            value = _sample(spec.fields, version) if spec.is_struct else _SAMPLES[spec.element]
            out[spec.key] = [value] if spec.is_array else value
    return out


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=IDS)
def test_a_decoded_default_request_has_exactly_its_typed_dict_keys(
    api_key: ApiKey, version: int
) -> None:
    typed = getattr(bodies, APIS[api_key].request.name)
    decoded = messages.decode_request(messages.encode_request(api_key, version, 1, "c", {}))
    assert decoded.body.keys() == typed.__required_keys__ == typed.__annotations__.keys()
    _conforms(decoded.body, typed, typed.__name__)


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=IDS)
def test_decoded_bodies_have_their_types_all_the_way_down(api_key: ApiKey, version: int) -> None:
    entry = APIS[api_key]
    request = _sample(entry.request.fields, version)
    decoded = messages.decode_request(messages.encode_request(api_key, version, 1, "c", request))
    _conforms(decoded.body, getattr(bodies, entry.request.name), entry.request.name)
    response = _sample(entry.response.fields, version)
    frame = messages.encode_response(api_key, version, 1, response)
    answer = messages.decode_response(api_key, version, frame).body
    _conforms(answer, getattr(bodies, entry.response.name), entry.response.name)
    default = messages.decode_response(
        api_key, version, messages.encode_response(api_key, version, 1, {})
    )
    _conforms(default.body, getattr(bodies, entry.response.name), entry.response.name)


# --------------------------------------------------------------------- the schema checker


def _versions(spec: Versions) -> str:
    if spec.low > spec.high:
        return "none"
    return f"{spec.low}+" if spec.high == 0x7FFF else f"{spec.low}-{spec.high}"


def _kafka_field(spec: Field) -> dict[str, object]:
    """One of our fields as Kafka's JSON declares it."""
    out: dict[str, object] = {"name": spec.name, "type": spec.type}
    out["versions"] = _versions(spec.versions)
    if spec.nullable.low <= spec.nullable.high:
        out["nullableVersions"] = _versions(spec.nullable)
    if spec.tag is not None:
        out["tag"], out["taggedVersions"] = spec.tag, _versions(spec.tagged)
    if spec.default is None:
        out["default"] = "null"
    elif isinstance(spec.default, bool):
        out["default"] = "true" if spec.default else "false"
    elif isinstance(spec.default, int | str):
        out["default"] = str(spec.default)
    if spec.is_struct:
        out["fields"] = [_kafka_field(sub) for sub in spec.fields]
    out["about"] = "see https://kafka.apache.org/protocol // not a comment"
    return out


def _kafka_schemas() -> dict[str, dict[str, Any]]:
    """Our declarations as Kafka's message files declare them, by message name."""
    schemas = {}
    for key, entry in APIS.items():
        for kind, message in (("request", entry.request), ("response", entry.response)):
            schemas[message.name] = {
                "apiKey": int(key),
                "type": kind,
                "name": message.name,
                "validVersions": _versions(Versions(0, entry.served.high)),
                "flexibleVersions": _versions(message.flexible),
                "fields": [_kafka_field(spec) for spec in message.fields],
            }
    return schemas


def _write(directory: Path, schemas: dict[str, dict[str, Any]]) -> None:
    """Kafka's files, `//` comments and all."""
    for name, schema in schemas.items():
        text = json.dumps(schema, indent=2).replace("\n", "\n  // a comment\n", 1)
        (directory / f"{name}.json").write_text(f"// licence\n{text}\n")


def test_the_schema_checker_finds_no_difference_in_our_own_declarations(tmp_path: Path) -> None:
    _write(tmp_path, _kafka_schemas())
    assert check_kafka_schemas.main([str(tmp_path)]) == 0


def test_the_schema_checker_reports_each_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schemas = _kafka_schemas()
    partition = schemas["ProduceResponse"]["fields"][0]["fields"][1]["fields"]
    partition[4]["type"] = "int32"  # LogStartOffset, 5+
    partition[6]["nullableVersions"] = "none"  # ErrorMessage, 8+
    schemas["FetchRequest"]["fields"][-1]["name"] = "Rack"  # RackId, 11+
    fetched = schemas["FetchResponse"]["fields"][3]["fields"][1]["fields"]
    fetched[5]["tag"] = 7  # DivergingEpoch, tagged 12+
    schemas["MetadataRequest"]["fields"][1]["default"] = "false"  # AllowAutoTopicCreation
    _write(tmp_path, schemas)
    assert check_kafka_schemas.main([str(tmp_path)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "ProduceResponse.Responses.PartitionResponses.LogStartOffset: type int64 where Kafka "
        "has int32 (v5-9)",
        "ProduceResponse.Responses.PartitionResponses.ErrorMessage: nullable where Kafka's is "
        "not (v8-9)",
        "FetchRequest.RackId: ours has this field, Kafka's schema does not (v11-12)",
        "FetchRequest.Rack: Kafka has this field, ours does not (v11-12)",
        "FetchResponse.Responses.Partitions.DivergingEpoch: tag 0: Kafka has no field of that "
        "tag (v12)",
        "FetchResponse.Responses.Partitions.DivergingEpoch: Kafka has this field (tag 7), ours "
        "does not (v12)",
        "MetadataRequest.AllowAutoTopicCreation: default True where Kafka's is False (v4-12)",
    ]


def test_comments_are_stripped_outside_strings_only() -> None:
    text = '{"a": "http://x", // gone\n "b": 1} // gone too'
    assert json.loads(check_kafka_schemas.strip_comments(text)) == {"a": "http://x", "b": 1}
