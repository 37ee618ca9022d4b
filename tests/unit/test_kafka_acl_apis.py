"""Kafka's ACL APIs in kraftlite's terms (kraftlite/kafka/acl_apis.py): Kafka's codes for
every kraftlite ACL value, and the controllers' filter that a Kafka filter narrows to,
checked against Kafka's matching over a universe of ACLs and filters."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.kafka import acl_apis
from kraftlite.kafka.acl_apis import KafkaFilter
from kraftlite.metadata.records import AccessControlEntryRecord
from kraftlite.protocol import admin, admin_bodies
from kraftlite.protocol.internal import MessageError
from kraftlite.security import acls
from kraftlite.security.acls import Operation, PatternType, Permission, ResourceType

# Kafka's enums as its Java sources define them (org.apache.kafka.common.resource.ResourceType
# and PatternType, org.apache.kafka.common.acl.AclOperation and AclPermissionType)
KAFKA_RESOURCE_TYPES = {
    "UNKNOWN": 0,
    "ANY": 1,
    "TOPIC": 2,
    "GROUP": 3,
    "CLUSTER": 4,
    "TRANSACTIONAL_ID": 5,
    "DELEGATION_TOKEN": 6,
    "USER": 7,
}
KAFKA_PATTERN_TYPES = {"UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
KAFKA_OPERATIONS = {
    "UNKNOWN": 0,
    "ANY": 1,
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
    "CREATE_TOKENS": 13,
    "DESCRIBE_TOKENS": 14,
}
KAFKA_PERMISSIONS = {"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}


@pytest.mark.parametrize(
    ("ours", "kafka", "not_served"),
    [
        (acl_apis.RESOURCE_TYPES, KAFKA_RESOURCE_TYPES, acl_apis.RESOURCE_TYPES_NOT_SERVED),
        (acl_apis.PATTERN_TYPES, KAFKA_PATTERN_TYPES, {}),
        (acl_apis.OPERATIONS, KAFKA_OPERATIONS, acl_apis.OPERATIONS_NOT_SERVED),
        (acl_apis.PERMISSIONS, KAFKA_PERMISSIONS, {}),
    ],
)
def test_codes_are_kafkas_and_name_every_kraftlite_value(
    ours: dict[int, Any], kafka: dict[str, int], not_served: dict[int, str]
) -> None:
    enum = type(next(iter(ours.values())))
    assert {kind.value for kind in ours.values()} == {kind.value for kind in enum}
    for code, kind in ours.items():
        assert kafka[kind.value] == code
    for code, name in not_served.items():
        assert kafka[name] == code
    assert kafka["ANY"] == acl_apis.ANY
    # every code Kafka defines is served, not served (rule 2), or a filter's ANY / MATCH
    assert set(kafka.values()) - {0} == {*ours, *not_served, *range(1, min(ours))}


def test_a_creation_becomes_the_controllers_body_or_invalid_request() -> None:
    creation = {
        "resource_type": 4,
        "resource_name": "kafka-cluster",
        "resource_pattern_type": 3,
        "principal": "User:alice",
        "host": "10.0.0.1",
        "operation": 12,
        "permission_type": 2,
    }
    body = acl_apis.acl_request(creation)  # type: ignore[arg-type]
    assert body == {
        "principal": "User:alice",
        "host": "10.0.0.1",
        "operation": "IDEMPOTENT_WRITE",
        "permission": "DENY",
        "resource_type": "CLUSTER",
        "pattern_type": "LITERAL",
    }  # the controllers name the cluster themselves
    assert admin.decode(admin_bodies.AclRequest, body).resource_name is msgspec.UNSET
    for key, value in (
        ("resource_name", "other"),
        ("resource_type", 1),
        ("resource_type", 6),
        ("resource_pattern_type", 1),
        ("resource_pattern_type", 2),
        ("operation", 1),
        ("operation", 14),
        ("permission_type", 1),
        ("permission_type", 0),
    ):
        with pytest.raises(KraftliteError) as refused:
            acl_apis.acl_request({**creation, key: value})  # type: ignore[typeddict-item]
        assert refused.value.code is ErrorCode.INVALID_REQUEST


# -------------------------------------------------------------- narrowing against matching

NAMES = ("orders", "ord", "*", "kafka-cluster", "kraftlite-cluster")
_ids = itertools.count()


def _universe() -> list[AccessControlEntryRecord]:
    out = []
    for kind, name, pattern, principal, host, operation, permission in itertools.product(
        (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER),
        NAMES,
        PatternType,
        ("User:alice", "User:*"),
        ("*", "10.0.0.1"),
        (Operation.READ, Operation.ALL),
        Permission,
    ):
        if kind is ResourceType.CLUSTER and name != acls.CLUSTER_NAME:
            continue  # the controllers store the cluster under its one name
        if pattern is PatternType.PREFIXED and name == "*":
            continue
        out.append(
            AccessControlEntryRecord(
                id=f"acl-{next(_ids)}",
                resource_type=kind.value,
                resource_name=name,
                pattern_type=pattern.value,
                principal=principal,
                host=host,
                operation=operation.value,
                permission_type=permission.value,
            )
        )
    return out


def _answer(acl: AccessControlEntryRecord) -> admin.AclAnswer:
    return admin.AclAnswer(**acls.acl_view(acl))


def _filters() -> list[KafkaFilter]:
    return [
        KafkaFilter(*values)
        for values in itertools.product(
            (1, 2, 3, 4, 7),
            (None, "orders", "or", "*", "kafka-cluster", "kraftlite-cluster"),
            (1, 2, 3, 4),
            (None, "User:alice", "Group:x"),
            (None, "*"),
            (1, 3, 13),
            (1, 3),
        )
    ]


def test_the_narrowed_filter_selects_what_kafkas_matches_and_exactly_where_it_says() -> None:
    universe = [(acl, acl_apis.kafka_acl(_answer(acl))) for acl in _universe()]
    assert all(kafka is not None for _, kafka in universe)
    exact_seen = inexact_seen = 0
    for wanted in _filters():
        assert wanted.problem() is None
        matched = {acl.id for acl, kafka in universe if kafka and wanted.matches(kafka)}
        narrowed = wanted.narrowed()
        if narrowed is None:
            assert not matched, wanted
            continue
        fields, exact = narrowed
        try:
            selecting = acls.filter_from_request(
                admin_bodies.given(admin.decode(admin_bodies.AclFilter, fields))
            )
        except MessageError:  # a value no ACL holds
            assert not matched, wanted
            continue
        selected = {acl.id for acl, _ in universe if acls.matches_filter(acl, selecting)}
        assert matched <= selected, wanted
        if exact:
            assert matched == selected, wanted
            exact_seen += 1
        else:
            inexact_seen += 1
    assert exact_seen > 500 and inexact_seen > 100, (exact_seen, inexact_seen)


def test_kafkas_filter_semantics() -> None:
    """MATCH: the ACLs that apply to the name; ANY: either pattern type, the same name;
    the cluster is kafka-cluster."""
    cluster = acl_apis.KafkaAcl(4, "kafka-cluster", 3, "User:a", "*", 8, 3)
    prefixed = acl_apis.KafkaAcl(2, "ord", 4, "User:a", "*", 3, 3)
    wildcard = acl_apis.KafkaAcl(2, "*", 3, "User:a", "*", 3, 3)
    match = KafkaFilter(2, "orders", 2, None, None, 1, 1)
    assert match.matches(prefixed) and match.matches(wildcard) and not match.matches(cluster)
    assert not KafkaFilter(2, "orders", 1, None, None, 1, 1).matches(prefixed)
    assert KafkaFilter(2, "ord", 1, None, None, 1, 1).matches(prefixed)
    assert KafkaFilter(1, "kafka-cluster", 3, None, None, 8, 3).matches(cluster)
    assert KafkaFilter(0, None, 1, None, None, 1, 1).problem() is not None
    assert KafkaFilter(1, None, 5, None, None, 1, 1).problem() is not None
    assert KafkaFilter(1, None, 1, None, None, 15, 1).problem() is not None
    assert KafkaFilter(1, None, 1, None, None, 1, 4).problem() is not None


def test_the_acl_admin_requests_method_route_body_and_answer() -> None:
    acl = admin.decode(
        admin_bodies.AclRequest,
        {"principal": "User:alice", "operation": "READ", "resource_type": "TOPIC"}
        | {"resource_name": "orders"},
    )
    create = admin.CreateAclRequest(acl)
    assert (create.method, create.route(), admin_bodies.given(create.body())) == (
        "POST",
        "/v1/acls",
        {
            "principal": "User:alice",
            "operation": "READ",
            "resource_type": "TOPIC",
            "resource_name": "orders",
            "host": "*",
            "permission": "ALLOW",
            "pattern_type": "LITERAL",
        },
    )
    view = {
        "id": "a1",
        "principal": "User:alice",
        "host": "*",
        "operation": "READ",
        "permission": "ALLOW",
        "resource_type": "TOPIC",
        "resource_name": "orders & more",
        "pattern_type": "LITERAL",
    }
    assert create.answer(msgspec.json.encode(view)) == admin.AclAnswer(**view)
    wanted = admin.decode(
        admin_bodies.AclFilter, {"principal": "User:a&b=c", "resource_name": "orders & more"}
    )
    listing = admin.ListAclsRequest(wanted)
    assert (listing.method, listing.route(), listing.body()) == (
        "GET",
        "/v1/acls?principal=User%3Aa%26b%3Dc&resource_name=orders%20%26%20more",
        None,
    )
    assert admin.ListAclsRequest(admin_bodies.AclFilter()).route() == "/v1/acls"
    assert listing.answer(msgspec.json.encode({"acls": [view]})) == (admin.AclAnswer(**view),)
    delete = admin.DeleteAclsRequest(wanted)
    assert (delete.method, delete.route(), admin_bodies.given(delete.body())) == (
        "DELETE",
        "/v1/acls",
        {"principal": "User:a&b=c", "resource_name": "orders & more"},
    )
    assert delete.answer(b'{"deleted": []}') == ()
    with pytest.raises(MessageError):
        delete.answer(b'{"deleted": [{"id": 1}]}')
