"""The OpenAPI document: valid OpenAPI 3.1, in step with the broker's routes and error codes."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from kraftlite.api import errors as api_errors
from kraftlite.api.openapi import BATCH_TYPE, OPENAPI, PLANNED, PROBLEM_JSON, STATUS_EXTENSION
from kraftlite.errors import ErrorCode
from kraftlite.protocol import admin, headers

BROKER_APP = Path(__file__).resolve().parents[2] / "kraftlite" / "api" / "broker_app.py"
METHODS = {"get", "post", "put", "delete", "patch", "head", "options"}
ERROR_NAME = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")


def broker_routes() -> set[tuple[str, str]]:
    """(method, path) of every public `router.add_<method>(path, ...)` in broker_app.py, read
    from the source so that this test needs no running broker.
    """
    routes = set()
    for node in ast.walk(ast.parse(BROKER_APP.read_text())):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.removeprefix("add_") in METHODS
            and node.func.attr.startswith("add_")
        ):
            continue
        first = node.args[0] if node.args else None
        assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
            f"line {node.lineno}: a route path that is not a literal string"
        )
        path = re.sub(r"\{(\w+):[^}]*\}", r"{\1}", first.value)  # {id:\d+} -> {id}
        if not path.startswith("/v1/internal/"):
            routes.add((node.func.attr.removeprefix("add_"), path))
    return routes


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in OPENAPI["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield method, path, operation


def walk(node: Any) -> Iterator[Any]:
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from walk(child)


# ---------------------------------------------------------------------------- validity


def test_the_document_is_valid_openapi_3_1() -> None:
    assert OPENAPI["openapi"].startswith("3.1.")
    validate(OPENAPI, cls=OpenAPIV31SpecValidator)


def test_the_document_survives_serving_as_json() -> None:
    assert orjson.loads(orjson.dumps(OPENAPI)) == OPENAPI  # no tuples, no non-str keys


def test_media_types_match_the_servers() -> None:
    assert PROBLEM_JSON == api_errors.PROBLEM_JSON
    assert BATCH_TYPE == headers.BATCH_TYPE  # the one the broker, client and Spark use


# ---------------------------------------------------------------------------- routes


def test_the_route_parser_finds_the_routes() -> None:
    routes = broker_routes()
    assert ("get", "/healthz") in routes
    assert ("get", "/v1/topics/{topic}/partitions/{partition}/records") in routes
    assert not any(path.startswith("/v1/internal") for _, path in routes)


def test_every_broker_route_is_documented() -> None:
    documented = {(method, path) for method, path, _ in operations()}
    missing = broker_routes() - documented
    assert not missing, f"served but not in the OpenAPI document: {sorted(missing)}"


def test_every_documented_operation_is_served_unless_planned() -> None:
    routes = broker_routes()
    for method, path, operation in operations():
        planned = operation.get(STATUS_EXTENSION) == PLANNED
        served = (method, path) in routes
        assert served != planned, f"{method.upper()} {path}: " + (
            "served but marked planned" if served else "documented but not served"
        )


def test_every_contract_operation_is_served_now() -> None:
    planned = {path for _, path, op in operations() if op.get(STATUS_EXTENSION) == PLANNED}
    assert not planned


def test_internal_paths_are_left_out() -> None:
    assert not [path for path in OPENAPI["paths"] if path.startswith("/v1/internal")]


# ---------------------------------------------------------------------------- errors


def named_error_codes() -> tuple[set[str], set[str]]:
    """(codes named by schemas and examples, upper-snake words in descriptions and summaries)."""
    structured: set[str] = set()
    prose: set[str] = set()
    for node in walk(OPENAPI):
        if not isinstance(node, dict):
            continue
        code = node.get("error_code")
        if isinstance(code, str):  # an example
            structured.add(code)
        elif isinstance(code, dict):  # a schema
            structured |= {code["const"]} if "const" in code else set(code.get("enum", ()))
        for key in ("description", "summary"):
            if isinstance(node.get(key), str):
                prose |= set(ERROR_NAME.findall(node[key]))
    return structured, prose


def test_every_error_code_in_the_document_exists() -> None:
    structured, prose = named_error_codes()
    assert "NOT_LEADER_OR_FOLLOWER" in structured  # the walk finds them
    known = set(ErrorCode.__members__)
    assert structured <= known, f"unknown error codes: {sorted(structured - known)}"
    assert prose <= known, f"unknown error codes in descriptions: {sorted(prose - known)}"


@pytest.mark.parametrize(
    ("method", "path", "operation"),
    [pytest.param(m, p, o, id=f"{m} {p}") for m, p, o in operations()],
)
def test_errors_are_problem_json(method: str, path: str, operation: dict[str, Any]) -> None:
    for status, response in operation["responses"].items():
        if int(status) >= 400 and (method, path, status) != ("get", "/readyz", "503"):
            assert list(response["content"]) == [PROBLEM_JSON], f"{method} {path} {status}"


def test_every_topic_config_has_a_value_schema_that_takes_its_default() -> None:
    from jsonschema import Draft202012Validator  # noqa: PLC0415

    from kraftlite.metadata.topics import CONFIG_VALUES, TOPIC_CONFIGS  # noqa: PLC0415

    assert set(CONFIG_VALUES) == set(TOPIC_CONFIGS)
    properties = OPENAPI["components"]["schemas"]["TopicConfigsUpdate"]["properties"]
    for name, (default, check) in TOPIC_CONFIGS.items():
        validator = Draft202012Validator(properties[name])
        assert validator.is_valid(default) and validator.is_valid(None), name
        # what the document takes, the server takes (schema-valid data is never refused)
        for sample in ("0", "-1", "1", "true", "false", "delete", "compact", "x", 0, -1, 5, True):
            if validator.is_valid(sample):
                value = ("true" if sample else "false") if isinstance(sample, bool) else str(sample)
                assert check(value) is None, (name, sample)


# ---------------------------------------------------------------------------- typed bodies


def test_the_admin_body_schemas_are_the_ones_their_types_generate() -> None:
    """The bodies brokers send the controllers (protocol/admin.py), as the document serves
    them: generated from the same types the controllers decode them with, not hand-copied."""
    served = orjson.loads(orjson.dumps(OPENAPI))["components"]["schemas"]
    _, generated = msgspec.json.schema_components(
        admin.DOCUMENTED_BODIES, ref_template=admin.REF_TEMPLATE
    )
    assert set(generated) == {
        "CreateTopicRequest",
        "CreateTopicsRequest",
        "CreatePartitionsBody",
        "AlterConfigsBody",
    }
    for name, schema in generated.items():
        assert served[name] == orjson.loads(orjson.dumps(schema)), name
        assert schema["description"], name  # carried by the type's docstring
    # the operations take them, and every reference resolves
    bodies = {
        (method, path): operation["requestBody"]["content"]["application/json"]["schema"]
        for method, path, operation in operations()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
    }
    assert bodies["post", "/v1/topics/{topic}/partitions"] == {
        "$ref": "#/components/schemas/CreatePartitionsBody"
    }
    assert bodies["put", "/v1/topics/{topic}/configs"] == {
        "$ref": "#/components/schemas/AlterConfigsBody"
    }
    assert {"$ref": "#/components/schemas/CreateTopicRequest"} in bodies["post", "/v1/topics"][
        "oneOf"
    ]
    prefix = "#/components/schemas/"
    refs = {n["$ref"] for n in walk(OPENAPI) if isinstance(n, dict) and "$ref" in n}
    for ref in refs:
        if ref.startswith(prefix):
            assert ref.removeprefix(prefix) in served, ref


def test_documented_admin_bodies_decode_as_the_controllers_decode_them() -> None:
    """A body the document takes, the controllers' type takes too; and what a broker sends
    of it (all fields, defaults included) the document takes in turn."""
    from jsonschema import Draft202012Validator  # noqa: PLC0415

    def validator(kind: type[Any]) -> Draft202012Validator:
        ref = f"#/components/schemas/{kind.__name__}"  # resolved in the document, as served
        return Draft202012Validator({"$ref": ref, "components": OPENAPI["components"]})

    samples: list[tuple[type[Any], dict[str, Any]]] = [
        (admin.CreateTopicRequest, {"name": "orders"}),
        (
            admin.CreateTopicRequest,
            {
                "name": "orders",
                "partitions": 3,
                "replication_factor": None,
                "configs": {"retention.ms": "1000", "cleanup.policy": None},
            },
        ),
        (admin.CreateTopicsRequest, {"topics": [{"name": "a"}, {"name": "b", "partitions": 2}]}),
        (admin.CreatePartitionsBody, {"count": 4}),
        (admin.AlterConfigsBody, {"configs": {"min.insync.replicas": 2}}),
    ]
    for kind, body in samples:
        validator(kind).validate(body)
        decoded = admin.decode(kind, body)
        validator(kind).validate(orjson.loads(msgspec.json.encode(decoded)))
    for kind, body in [
        (admin.CreateTopicRequest, {"name": "x", "partitions": 0}),
        (admin.CreateTopicRequest, {"name": "bad name"}),
        (admin.AlterConfigsBody, {"configs": {"no.such": "1"}}),
    ]:  # the decisions' rules, stated in the document (protocol/admin.py rule 1)
        assert not validator(kind).is_valid(body), body
