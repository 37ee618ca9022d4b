"""The authorizer (security/acls.py): Kafka's StandardAuthorizer semantics, table-tested."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.errors import KraftliteError
from kraftlite.metadata.records import AccessControlEntryRecord
from kraftlite.security.acls import (
    CLUSTER_NAME,
    Action,
    CallerAcls,
    Operation,
    ResourceType,
    acl_from_request,
    authorize,
    matches_filter,
)

_ids = itertools.count()


def acl(
    operation: str = "READ",
    name: str = "orders",
    *,
    principal: str = "User:alice",
    resource_type: str = "TOPIC",
    pattern: str = "LITERAL",
    permission: str = "ALLOW",
    host: str = "*",
) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=f"acl-{next(_ids)}",
        resource_type=resource_type,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host=host,
        operation=operation,
        permission_type=permission,
    )


def topic(op: Operation, name: str = "orders") -> Action:
    return Action(op, ResourceType.TOPIC, name)


ALICE = "User:alice"


@pytest.mark.parametrize(
    ("acls", "principal", "host", "action", "allowed"),
    [
        # no ACL: denied
        ([], ALICE, "10.0.0.1", topic(Operation.READ), False),
        # literal match, and only that name
        ([acl()], ALICE, "10.0.0.1", topic(Operation.READ), True),
        ([acl()], ALICE, "10.0.0.1", topic(Operation.READ, "orders2"), False),
        ([acl()], ALICE, "10.0.0.1", topic(Operation.WRITE), False),
        # another principal
        ([acl()], "User:bob", "10.0.0.1", topic(Operation.READ), False),
        # wildcard principal and wildcard resource name
        ([acl(principal="User:*")], "User:bob", "h", topic(Operation.READ), True),
        ([acl(name="*")], ALICE, "h", topic(Operation.READ, "anything"), True),
        # prefixed
        ([acl(name="ord", pattern="PREFIXED")], ALICE, "h", topic(Operation.READ, "orders"), True),
        ([acl(name="ord", pattern="PREFIXED")], ALICE, "h", topic(Operation.READ, "or"), False),
        # a literal "*" prefix is not a wildcard: PREFIXED "*" matches names starting with *
        ([acl(name="*", pattern="PREFIXED")], ALICE, "h", topic(Operation.READ, "x"), False),
        # host
        ([acl(host="10.0.0.1")], ALICE, "10.0.0.1", topic(Operation.READ), True),
        ([acl(host="10.0.0.1")], ALICE, "10.0.0.2", topic(Operation.READ), False),
        # ALL
        ([acl("ALL")], ALICE, "h", topic(Operation.DELETE), True),
        # implied DESCRIBE by READ/WRITE/DELETE/ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS
        ([acl("WRITE")], ALICE, "h", topic(Operation.DESCRIBE), True),
        ([acl("ALTER")], ALICE, "h", topic(Operation.DESCRIBE), True),
        ([acl("CREATE")], ALICE, "h", topic(Operation.DESCRIBE), False),
        ([acl("ALTER_CONFIGS")], ALICE, "h", topic(Operation.DESCRIBE_CONFIGS), True),
        ([acl("DESCRIBE")], ALICE, "h", topic(Operation.READ), False),
        # deny wins, whichever order, however specific the allow
        ([acl(), acl(permission="DENY")], ALICE, "h", topic(Operation.READ), False),
        ([acl(permission="DENY"), acl("ALL")], ALICE, "h", topic(Operation.READ), False),
        (
            [acl(name="o", pattern="PREFIXED"), acl(name="*", permission="DENY")],
            ALICE,
            "h",
            topic(Operation.READ),
            False,
        ),
        (
            [acl(), acl("ALL", permission="DENY", principal="User:*")],
            ALICE,
            "h",
            topic(Operation.READ),
            False,
        ),
        # a DENY implies nothing beyond itself: DENY WRITE does not deny DESCRIBE
        (
            [acl("READ"), acl("WRITE", permission="DENY")],
            ALICE,
            "h",
            topic(Operation.DESCRIBE),
            True,
        ),
        # resource types do not mix
        ([acl(resource_type="GROUP")], ALICE, "h", topic(Operation.READ), False),
        (
            [acl("ALTER", CLUSTER_NAME, resource_type="CLUSTER")],
            ALICE,
            "h",
            Action(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME),
            True,
        ),
    ],
)
def test_authorize(
    acls: list[AccessControlEntryRecord], principal: str, host: str, action: Action, allowed: bool
) -> None:
    assert authorize(acls, frozenset(), principal, host, action) is allowed


def test_super_users_may_do_anything_even_against_a_deny() -> None:
    deny_all = [acl("ALL", "*", permission="DENY", principal="User:*")]
    assert authorize(
        deny_all, frozenset({"User:admin"}), "User:admin", "h", topic(Operation.DELETE)
    )
    assert not authorize(deny_all, frozenset({"User:admin"}), ALICE, "h", topic(Operation.READ))


names = st.text(alphabet="abc.-_", min_size=1, max_size=6)
operations = st.sampled_from([o for o in Operation if o is not Operation.ALL])


@given(names, names, operations, st.booleans())
def test_a_matching_deny_always_wins(
    allow_name: str, name: str, op: Operation, prefixed: bool
) -> None:
    acls = [
        acl("ALL", allow_name, pattern="PREFIXED" if prefixed else "LITERAL"),
        acl(op.value, name, permission="DENY"),
    ]
    assert not authorize(acls, frozenset(), ALICE, "h", topic(op, name))


def test_acls_from_requests_are_validated() -> None:
    made = acl_from_request(
        "x",
        {
            "principal": "User:alice",
            "operation": "WRITE",
            "resource_type": "TOPIC",
            "resource_name": "orders",
            "pattern_type": "PREFIXED",
        },
    )
    assert (made.operation, made.resource_type, made.pattern_type) == ("WRITE", "TOPIC", "PREFIXED")
    assert (made.host, made.permission_type) == ("*", "ALLOW")
    cluster = acl_from_request(
        "y", {"principal": "User:a", "operation": "ALTER", "resource_type": "CLUSTER"}
    )
    assert cluster.resource_name == CLUSTER_NAME
    for bad in [
        {},
        {"principal": "alice", "operation": "READ", "resource_type": "TOPIC", "resource_name": "t"},
        {"principal": "User:a", "operation": "EAT", "resource_type": "TOPIC", "resource_name": "t"},
        {
            "principal": "User:a",
            "operation": "read",
            "resource_type": "TOPIC",
            "resource_name": "t",
        },
        {"principal": "User:a", "operation": "READ", "resource_type": "DB", "resource_name": "t"},
        {"principal": "User:a", "operation": "READ", "resource_type": "TOPIC"},
        {
            "principal": "User:a",
            "operation": "READ",
            "resource_type": "TOPIC",
            "resource_name": "*",
            "pattern_type": "PREFIXED",
        },
        {
            "principal": "User:a",
            "operation": "READ",
            "resource_type": "TOPIC",
            "resource_name": "t",
            "permission": "MAYBE",
        },
        {
            "principal": "User:a",
            "operation": ["READ"],
            "resource_type": "TOPIC",
            "resource_name": "t",
        },
    ]:
        with pytest.raises(KraftliteError):
            acl_from_request("z", bad)


def test_filters_match_field_by_field() -> None:
    entry = acl("WRITE", "orders", pattern="PREFIXED")
    assert matches_filter(entry, {})
    assert matches_filter(entry, {"principal": "User:alice", "operation": "WRITE"})
    assert not matches_filter(entry, {"principal": "User:bob"})
    assert not matches_filter(entry, {"pattern_type": "LITERAL"})
    assert matches_filter(entry, {"resource_name": "orders", "unknown": "ignored"})


acl_entries = st.builds(
    lambda op, name, principal, kind, pattern, permission, host: acl(
        op,
        "*" if pattern == "PREFIXED" and name == "*" else name,
        principal=principal,
        resource_type=kind,
        pattern=pattern if name != "*" else "LITERAL",
        permission=permission,
        host=host,
    ),
    st.sampled_from([o.value for o in Operation]),
    st.sampled_from(["a", "ab", "b", "*", "abc"]),
    st.sampled_from([ALICE, "User:bob", "User:*"]),
    st.sampled_from(["TOPIC", "GROUP"]),
    st.sampled_from(["LITERAL", "PREFIXED"]),
    st.sampled_from(["ALLOW", "DENY"]),
    st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]),
)


@given(
    st.lists(acl_entries, max_size=12),
    st.sampled_from(["a", "ab", "abc", "b", "c"]),
    operations,
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    st.sampled_from(["10.0.0.1", "10.0.0.2"]),
)
def test_the_per_caller_index_answers_exactly_as_authorize(
    acls: list[AccessControlEntryRecord],
    name: str,
    operation: Operation,
    kind: ResourceType,
    host: str,
) -> None:
    action = Action(operation, kind, name)
    indexed = CallerAcls(acls, frozenset(), ALICE, host)
    assert indexed.allows(action) == authorize(acls, frozenset(), ALICE, host, action)
