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
from kraftlite.api.openapi import (
    BATCH_TYPE,
    KAFKA_BATCHES_TYPE,
    OPENAPI,
    PLANNED,
    PROBLEM_JSON,
    STATUS_EXTENSION,
)
from kraftlite.errors import ErrorCode
from kraftlite.protocol import admin, admin_bodies, headers
from kraftlite.protocol.internal import MessageError

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
    assert KAFKA_BATCHES_TYPE == headers.KAFKA_BATCHES_TYPE


@pytest.mark.parametrize(
    ("accept", "newest"),
    [
        ("application/vnd.kraftlite.batch; format=3", 3),
        ("application/json, application/vnd.kraftlite.batch;format=3", 3),
        ('application/vnd.kraftlite.batch; Format="3"', 3),
        ("application/vnd.kraftlite.batch; format = 3", 3),
        ("application/vnd.kraftlite.batch; format=4", 4),
        ("application/vnd.kraftlite.batch", 2),
        ("application/vnd.kraftlite.batch; format=x", 2),
        ("application/json; format=3", 0),
        ("", 0),
    ],
)
def test_a_fetch_says_the_newest_batch_format_it_reads(accept: str, newest: int) -> None:
    assert headers.batch_format_read(accept) == newest


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


# The JSON bodies the controllers decode, by operation: each one's schema is its type's.
CONTROLLER_BODIES = {
    ("post", "/v1/topics/{topic}/partitions"): "CreatePartitionsBody",
    ("put", "/v1/topics/{topic}/configs"): "AlterConfigsBody",
    ("patch", "/v1/topics/{topic}"): "AlterTopicRequest",
    ("put", "/v1/brokers/{broker_id}/configs"): "AlterBrokerConfigsBody",
    ("post", "/v1/cluster/rebalance"): "RebalanceRequest",
    ("post", "/v1/elections"): "ElectionsRequest",
    ("post", "/v1/reassignments"): "ReassignmentsRequest",
    ("post", "/v1/users"): "UserRequest",
    ("post", "/v1/acls"): "AclRequest",
    ("delete", "/v1/acls"): "AclFilter",
    ("post", "/v1/quotas"): "QuotaRequest",
    ("post", "/v1/quorum/voters"): "AddVoterRequest",
}
PREFIX = "#/components/schemas/"


def request_bodies() -> dict[tuple[str, str], Any]:
    return {
        (method, path): operation["requestBody"]["content"]["application/json"]["schema"]
        for method, path, operation in operations()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
    }


def test_the_admin_body_schemas_are_the_ones_their_types_generate() -> None:
    """The bodies the controllers decode (protocol/admin.py, admin_bodies.py), as the
    document serves them: generated from the same types, not hand-copied; a rule about a
    whole body (admin_bodies.py rule 2) is in the body's own schema."""
    served = orjson.loads(orjson.dumps(OPENAPI))["components"]["schemas"]
    wholes, generated = msgspec.json.schema_components(
        admin_bodies.DOCUMENTED_BODIES, ref_template=admin.REF_TEMPLATE
    )
    assert set(generated) == {
        "CreateTopicRequest",
        "CreateTopicsRequest",
        "CreatePartitionsBody",
        "AlterConfigsBody",
        "AlterBrokerConfigsBody",
        "UserRequest",
        "AclRequest",
        "AclFilter",
        "QuotaRequest",
        "ReassignmentsRequest",
        "PartitionReassignment",
        "ElectionsRequest",
        "PartitionRef",
        "RebalanceRequest",
        "AlterTopicRequest",
        "AddVoterRequest",
    }
    rules = {w["$ref"].removeprefix(PREFIX): w for w in orjson.loads(orjson.dumps(wholes))}
    assert {name for name, rule in rules.items() if len(rule) > 1} == {
        "UserRequest",  # a password, or a credential computed elsewhere (issue 25)
        "AclRequest",
        "AclFilter",
        "QuotaRequest",
    }
    for name, schema in orjson.loads(orjson.dumps(generated)).items():
        whole = {k: v for k, v in rules.get(name, {}).items() if k != "$ref"}
        assert served[name] == schema | whole, name
        assert schema["description"], name  # carried by the type's docstring
    # the operations take them, and every reference resolves
    bodies = request_bodies()
    for operation, name in CONTROLLER_BODIES.items():
        assert bodies[operation] == {"$ref": PREFIX + name}, operation
    assert {"$ref": PREFIX + "CreateTopicRequest"} in bodies["post", "/v1/topics"]["oneOf"]
    assert {"$ref": PREFIX + "CreateTopicsRequest"} in bodies["post", "/v1/topics"]["oneOf"]
    refs = {n["$ref"] for n in walk(OPENAPI) if isinstance(n, dict) and "$ref" in n}
    for ref in refs:
        if ref.startswith(PREFIX):
            assert ref.removeprefix(PREFIX) in served, ref


def test_every_controller_body_is_typed() -> None:
    """Every JSON body served by the controllers has a type: the document's operations with
    a JSON body are the table above, the broker's own (produce, groups, transactions) and
    topic creation."""
    broker_bodies = {
        ("post", "/v1/topics"),
        ("post", "/v1/topics/{topic}/records"),
        ("post", "/v1/topics/{topic}/partitions/{partition}/records"),
        ("post", "/v1/topics/{topic}/partitions/{partition}/delete-records"),
        ("post", "/v1/groups/{group}/members"),
        ("post", "/v1/groups/{group}/members/{member_id}/heartbeat"),
        ("post", "/v1/groups/{group}/offsets"),
        ("delete", "/v1/groups/{group}/offsets"),
        ("post", "/v1/transactions/{transactional_id}/producer"),
        ("post", "/v1/transactions/{transactional_id}/partitions"),
        ("post", "/v1/transactions/{transactional_id}/groups"),
        ("post", "/v1/transactions/{transactional_id}/end"),
    }
    assert set(request_bodies()) == set(CONTROLLER_BODIES) | broker_bodies


def test_the_acl_query_is_the_acl_filter() -> None:
    """GET /v1/acls's query fields are DELETE /v1/acls's body: one type (AclFilter)."""
    parameters = OPENAPI["paths"]["/v1/acls"]["get"]["parameters"]
    filter_fields = OPENAPI["components"]["schemas"]["AclFilter"]["properties"]
    assert {p["name"]: p["schema"] for p in parameters} == filter_fields


def validator(kind: Any) -> Any:
    """The document's schema of body `kind`, resolved in the document as served."""
    from jsonschema import Draft202012Validator  # noqa: PLC0415

    ref = f"#/components/schemas/{kind.__name__}"
    return Draft202012Validator({"$ref": ref, "components": OPENAPI["components"]})


VALID_BODIES: list[tuple[type[Any], dict[str, Any]]] = [
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
    (admin.AlterBrokerConfigsBody, {"configs": {"replication.throttled.rate": "1024"}}),
    (admin.AlterBrokerConfigsBody, {"configs": {"replication.throttled.rate": None}}),
    (admin_bodies.UserRequest, {"name": "alice", "password": "s3cret"}),
    (
        admin_bodies.UserRequest,
        {"name": "bob", "password": "é" * 256, "mechanism": "SCRAM-SHA-512", "iterations": 100_000},
    ),
    (
        admin_bodies.AclRequest,
        {
            "principal": "User:alice",
            "operation": "READ",
            "resource_type": "TOPIC",
            "resource_name": "t",
        },
    ),
    (
        admin_bodies.AclRequest,
        {"principal": "User:*", "operation": "ALL", "resource_type": "CLUSTER"},
    ),
    (
        admin_bodies.AclRequest,
        {
            "principal": "User:bob",
            "operation": "WRITE",
            "resource_type": "GROUP",
            "resource_name": "g-",
            "pattern_type": "PREFIXED",
            "permission": "DENY",
            "host": "10.0.0.1",
        },
    ),
    (admin_bodies.AclFilter, {"principal": "User:alice"}),
    (admin_bodies.AclFilter, {"operation": "READ", "resource_type": "TOPIC", "host": "*"}),
    (admin_bodies.QuotaRequest, {"principal": "User:alice", "producer_byte_rate": 1024}),
    (admin_bodies.QuotaRequest, {"principal": "User:a", "consumer_byte_rate": None}),
    (admin_bodies.QuotaRequest, {"principal": "User:a", "request_percentage": 0.5}),
    (
        admin_bodies.ReassignmentsRequest,
        {
            "partitions": [
                {"topic": "t", "partition": 0, "replicas": [1, 2, 3]},
                {"topic": "t", "partition": 1, "replicas": None},
            ]
        },
    ),
    (admin_bodies.ElectionsRequest, {}),
    (admin_bodies.ElectionsRequest, {"type": "preferred", "partitions": None}),
    (admin_bodies.ElectionsRequest, {"type": "unclean"}),
    (admin_bodies.ElectionsRequest, {"partitions": [{"topic": "t", "partition": 0}]}),
    (admin_bodies.RebalanceRequest, {}),
    (admin_bodies.RebalanceRequest, {"dry_run": True}),
    (admin_bodies.AlterTopicRequest, {"replication_factor": 3}),
    (admin_bodies.AddVoterRequest, {"id": 4, "raft": "127.0.0.1:5004", "url": "http://c4:8084"}),
]

# Refused by the type (INVALID_REQUEST) and by the document alike: the server enforces what
# the document says.
WRONG_SHAPES: list[tuple[type[Any], Any]] = [
    (admin_bodies.UserRequest, {"name": "alice"}),
    (admin_bodies.UserRequest, {"name": "a b", "password": "x"}),
    (admin_bodies.UserRequest, {"name": "a:b", "password": "x"}),
    (admin_bodies.UserRequest, {"name": "a" * 256, "password": "x"}),
    (admin_bodies.UserRequest, {"name": "alice", "password": ""}),
    (admin_bodies.UserRequest, {"name": "alice", "password": "x" * 257}),
    (admin_bodies.UserRequest, {"name": "alice", "password": "x", "mechanism": "PLAIN"}),
    (admin_bodies.UserRequest, {"name": "alice", "password": "x", "iterations": 4095}),
    (admin_bodies.UserRequest, {"name": "alice", "password": "x", "iterations": 100_001}),
    (admin_bodies.UserRequest, {"name": "alice", "password": "x", "iterations": True}),
    (
        admin_bodies.AclRequest,
        {"principal": "alice", "operation": "READ", "resource_type": "CLUSTER"},
    ),
    (
        admin_bodies.AclRequest,
        {"principal": "User:", "operation": "READ", "resource_type": "CLUSTER"},
    ),
    (
        admin_bodies.AclRequest,
        {"principal": "User:a", "operation": "read", "resource_type": "CLUSTER"},
    ),
    (
        admin_bodies.AclRequest,
        {"principal": "User:a", "operation": "READ", "resource_type": "USER"},
    ),
    (
        admin_bodies.AclRequest,
        {"principal": "User:a", "operation": "READ", "resource_type": "TOPIC", "resource_name": ""},
    ),
    (
        admin_bodies.AclRequest,
        {"principal": "User:a", "operation": "READ", "resource_type": "CLUSTER", "host": None},
    ),
    (admin_bodies.AclFilter, {"permision": "DENY"}),  # misspelt: never a wider filter
    (admin_bodies.AclFilter, {"operation": "write"}),
    (admin_bodies.AclFilter, {"principal": "alice"}),
    (admin_bodies.AclFilter, {"principal": None}),
    (admin_bodies.QuotaRequest, {"producer_byte_rate": 1}),
    (admin_bodies.QuotaRequest, {"principal": "alice", "producer_byte_rate": 1}),
    (admin_bodies.QuotaRequest, {"principal": "User:", "producer_byte_rate": 1}),
    (admin_bodies.QuotaRequest, {"principal": "User:a", "producer_byte_rate": 0}),
    (admin_bodies.QuotaRequest, {"principal": "User:a", "producer_byte_rate": 2**53}),
    (admin_bodies.QuotaRequest, {"principal": "User:a", "consumer_byte_rate": True}),
    (admin_bodies.QuotaRequest, {"principal": "User:a", "consumer_byte_rate": "fast"}),
    (admin_bodies.ReassignmentsRequest, {}),
    (admin_bodies.ReassignmentsRequest, {"partitions": []}),
    (admin_bodies.ReassignmentsRequest, {"partitions": "all"}),
    (admin_bodies.ReassignmentsRequest, {"partitions": [{"topic": "t", "partition": 0}]}),
    (
        admin_bodies.ReassignmentsRequest,
        {"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]},
    ),
    (
        admin_bodies.ReassignmentsRequest,
        {"partitions": [{"topic": "t", "partition": 2**31, "replicas": [1]}]},
    ),
    (
        admin_bodies.ReassignmentsRequest,
        {"partitions": [{"topic": "t", "partition": 0, "replicas": ["1"]}]},
    ),
    (
        admin_bodies.ReassignmentsRequest,
        {"partitions": [{"topic": "t", "partition": 0, "replicas": [True]}]},
    ),
    (
        admin_bodies.ReassignmentsRequest,
        {"partitions": [{"topic": "t", "replicas": [1]} for _ in range(5_001)]},
    ),
    (admin_bodies.ElectionsRequest, {"type": "clean"}),
    (admin_bodies.ElectionsRequest, {"partitions": []}),
    (admin_bodies.ElectionsRequest, {"partitions": [{"topic": "t"}]}),
    (admin_bodies.ElectionsRequest, {"partitions": [{"topic": "t", "partition": -1}]}),
    (admin_bodies.RebalanceRequest, {"dry_run": "yes"}),
    (admin_bodies.AlterTopicRequest, {}),
    (admin_bodies.AlterTopicRequest, {"replication_factor": "3"}),
    (admin.AlterBrokerConfigsBody, {}),
    (admin.AlterBrokerConfigsBody, {"configs": "replication.throttled.rate=1"}),
    (admin_bodies.AddVoterRequest, {"id": -1, "raft": "h:1", "url": "http://h:2"}),
    (admin_bodies.AddVoterRequest, {"id": 2**31, "raft": "h:1", "url": "http://h:2"}),
    (admin_bodies.AddVoterRequest, {"id": 1, "raft": 5, "url": "http://h:2"}),
    (admin_bodies.AddVoterRequest, {"id": 1, "raft": "h:1"}),
]


def test_documented_admin_bodies_decode_as_the_controllers_decode_them() -> None:
    """A body the document takes, the controllers' type takes too; and what a broker sends
    of it (all fields, defaults included) the document takes in turn."""
    for kind, body in VALID_BODIES:
        validator(kind).validate(body)
        decoded = admin.decode(kind, body)
        validator(kind).validate(orjson.loads(msgspec.json.encode(decoded)))
    assert {kind for kind, _ in VALID_BODIES} >= {
        getattr(kind, "__origin__", kind) for kind in admin_bodies.DOCUMENTED_BODIES
    }


@pytest.mark.parametrize(("kind", "body"), WRONG_SHAPES)
def test_a_wrong_shape_is_refused_by_the_type_and_the_document(kind: Any, body: Any) -> None:
    assert not validator(kind).is_valid(body)
    with pytest.raises(MessageError):
        admin.decode(kind, body)


def test_the_decisions_rules_are_in_the_document() -> None:
    """What a type lets through for a decision to refuse with its own code (protocol/admin.py
    rule 1, admin_bodies.py rules 1 and 2), the document refuses already."""
    for kind, body in [
        (admin.CreateTopicRequest, {"name": "x", "partitions": 0}),
        (admin.CreateTopicRequest, {"name": "bad name"}),
        (admin.AlterConfigsBody, {"configs": {"no.such": "1"}}),
        (admin.AlterBrokerConfigsBody, {"configs": {}}),  # INVALID_CONFIG
        (admin.AlterBrokerConfigsBody, {"configs": {"nope": 1}}),
        (admin.AlterBrokerConfigsBody, {"configs": {"replication.throttled.rate": 0}}),
        (admin_bodies.AlterTopicRequest, {"replication_factor": 0}),  # INVALID_REPLICATION_FACTOR
        (admin_bodies.AlterTopicRequest, {"replication_factor": 65}),
        (  # INVALID_REPLICA_ASSIGNMENT
            admin_bodies.ReassignmentsRequest,
            {"partitions": [{"topic": "t", "partition": 0, "replicas": []}]},
        ),
        (
            admin_bodies.ReassignmentsRequest,
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]},
        ),
        (  # UNKNOWN_TOPIC_OR_PARTITION
            admin_bodies.ElectionsRequest,
            {"partitions": [{"topic": "bad name", "partition": 0}]},
        ),
        (
            admin_bodies.AclRequest,
            {"principal": "User:a", "operation": "READ", "resource_type": "TOPIC"},
        ),
        (
            admin_bodies.AclRequest,
            {
                "principal": "User:a",
                "operation": "READ",
                "resource_type": "GROUP",
                "resource_name": "*",
                "pattern_type": "PREFIXED",
            },
        ),
        (admin_bodies.AclFilter, {}),
        (admin_bodies.QuotaRequest, {"principal": "User:a"}),
        (admin_bodies.AddVoterRequest, {"id": 1, "raft": "h", "url": "http://h:2"}),
        (admin_bodies.AddVoterRequest, {"id": 1, "raft": "h:1", "url": "ftp://h:2"}),
    ]:
        admin.decode(kind, body)  # the type's to pass
        assert not validator(kind).is_valid(body), body
