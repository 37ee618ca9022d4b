"""The typed admin calls a broker makes of the controllers (kraftlite/protocol/admin.py):
each request's method, route and body, the bodies as the controllers decode them, and the
answers as a broker reads them; and the public API's other admin bodies
(kraftlite/protocol/admin_bodies.py): defaults, bounds, and what the decisions still check.
Wrong shapes, refused by type and document alike, are in tests/unit/test_openapi.py."""

from __future__ import annotations

from typing import Any, get_args

import msgspec
import orjson
import pytest

from kraftlite.controller import access, reassignments
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata import records as r
from kraftlite.metadata.image import MetadataImage, apply_batch
from kraftlite.metadata.views import topic_view
from kraftlite.protocol import admin, admin_bodies
from kraftlite.protocol.internal import MessageError
from kraftlite.security import acls, scram


def wire(request: Any) -> tuple[str, str, Any]:
    body = request.body()
    return (
        request.method,
        request.route(),
        None if body is None else orjson.loads(msgspec.json.encode(body)),
    )


def test_each_request_knows_its_method_route_and_body() -> None:
    assert wire(admin.CreateTopicRequest("orders", 3, 2, {"retention.ms": "1"})) == (
        "POST",
        "/v1/topics",
        {
            "name": "orders",
            "partitions": 3,
            "replication_factor": 2,
            "configs": {"retention.ms": "1"},
            "internal": False,
            "replica_assignment": None,  # fields an older controller ignores
            "validate_only": False,
        },
    )
    assert wire(admin.DeleteTopicRequest("orders")) == ("DELETE", "/v1/topics/orders", None)
    assert wire(admin.CreatePartitionsRequest("orders", 6)) == (
        "POST",
        "/v1/topics/orders/partitions",
        {"count": 6},
    )
    assert wire(admin.AlterConfigsRequest("orders", {"retention.ms": None})) == (
        "PUT",
        "/v1/topics/orders/configs",
        {"configs": {"retention.ms": None}},
    )


def test_a_name_is_one_quoted_path_segment() -> None:
    """Names are checked before a call (the controllers check them again); whatever one
    holds, it can only name a topic, never reach another resource."""
    assert admin.DeleteTopicRequest("a/b?c#d").route() == "/v1/topics/a%2Fb%3Fc%23d"
    assert admin.AlterConfigsRequest("x y", {}).route() == "/v1/topics/x%20y/configs"
    assert admin.CreatePartitionsRequest("a..b", 2).route() == "/v1/topics/a..b/partitions"
    for name in ("", ".", ".."):  # a URL would resolve these to another path
        with pytest.raises(ValueError, match="not a topic name"):
            admin.DeleteTopicRequest(name).route()


def test_what_a_broker_sends_the_controller_decodes_to_the_same() -> None:
    create = admin.CreateTopicRequest("__consumer_offsets", 50, 3, {"retention.ms": -1}, True)
    assert admin.decode(admin.CreateTopicRequest, orjson.loads(msgspec.json.encode(create))) == (
        create
    )
    for request, kind in [
        (admin.CreatePartitionsRequest("t", 4), admin.CreatePartitionsBody),
        (admin.AlterConfigsRequest("t", {"a": "1", "b": None}), admin.AlterConfigsBody),
    ]:
        body = request.body()
        assert admin.decode(kind, orjson.loads(msgspec.json.encode(body))) == body


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (admin.CreateTopicRequest, {}),
        (admin.CreateTopicRequest, {"name": None}),
        (admin.CreateTopicRequest, {"name": "t", "partitions": "3"}),
        (admin.CreateTopicRequest, {"name": "t", "partitions": 1.5}),
        (admin.CreateTopicRequest, {"name": "t", "partitions": True}),
        (admin.CreateTopicRequest, {"name": "t", "replication_factor": "2"}),
        (admin.CreateTopicRequest, {"name": "t", "configs": [["retention.ms", "1"]]}),
        (admin.CreateTopicRequest, {"name": "t", "internal": 1}),
        (admin.CreateTopicsRequest, {"topics": {"name": "t"}}),
        (admin.CreatePartitionsBody, {}),
        (admin.CreatePartitionsBody, {"count": None}),
        (admin.AlterConfigsBody, {}),
        (admin.AlterConfigsBody, {"configs": "retention.ms=1"}),
        (admin.AlterConfigsBody, {"configs": {1: "1"}}),
    ],
)
def test_a_body_of_the_wrong_shape_is_refused(kind: type[Any], body: Any) -> None:
    """Rule 1: the controller answers these INVALID_REQUEST before any decision."""
    with pytest.raises(MessageError):
        admin.decode(kind, body)


def test_values_are_the_decisions_to_check() -> None:
    """Rule 1: a value of the right JSON type passes the type, whatever it means (the
    decisions refuse it with their own code: INVALID_PARTITIONS, INVALID_CONFIG, ...)."""
    decoded = admin.decode(
        admin.CreateTopicRequest,
        {"name": "bad name", "partitions": -1, "configs": {"no.such": {"x": 1}}},
    )
    assert (decoded.name, decoded.partitions) == ("bad name", -1)
    assert admin.decode(admin.CreatePartitionsBody, {"count": 0}).count == 0
    extra = admin.decode(admin.CreatePartitionsBody, {"count": 2, "unknown": True})
    assert extra == admin.CreatePartitionsBody(2)  # unknown fields are ignored


def test_answers_are_read_as_typed_values() -> None:
    image = MetadataImage.EMPTY
    records = (
        r.RegisterBrokerRecord(broker_id=1, incarnation_id="i", broker_epoch=1, url="u"),
        r.TopicRecord(name="orders", topic_id="T"),
        r.ConfigRecord(topic_id="T", name="retention.ms", value="1000"),
        r.PartitionRecord(topic_id="T", partition=0, replicas=(1,), isr=(1,), leader=1),
    )
    image = apply_batch(image, r.RecordBatch(0, records))
    topic = image.topic("orders")
    assert topic is not None
    body = orjson.dumps(topic_view(topic))  # the controllers' answer to a change
    expected = admin.TopicAnswer(
        "orders", "T", {"retention.ms": "1000"}, (admin.PartitionAnswer(0, 1, (1,), (1,)),)
    )
    for request in (
        admin.CreateTopicRequest("orders"),
        admin.CreatePartitionsRequest("orders", 1),
        admin.AlterConfigsRequest("orders", {}),
    ):
        assert request.answer(body) == expected
        for bad in (b"", b"[]", b'{"name": "orders"}'):
            with pytest.raises(MessageError):
                request.answer(bad)
    assert admin.DeleteTopicRequest("orders").answer(b"") is None


# ---------------------------------------------------------------------------- admin_bodies.py


def test_a_broker_sends_broker_configs_in_the_type_the_controller_decodes() -> None:
    request = admin.AlterBrokerConfigsRequest(3, {"replication.throttled.rate": 1024})
    assert wire(request) == (
        "PUT",
        "/v1/brokers/3/configs",
        {"configs": {"replication.throttled.rate": 1024}},
    )
    body = orjson.loads(msgspec.json.encode(request.body()))
    assert admin.decode(admin.AlterBrokerConfigsBody, body) == request.body()


def test_what_this_layer_cannot_import_is_the_same_as_its_source() -> None:
    """admin_bodies.py rule 4: SCRAM's and the ACLs' values, written again, held equal."""
    assert set(get_args(admin_bodies.Mechanism)) == set(scram.MECHANISMS)
    default = msgspec.structs.fields(admin_bodies.UserRequest)[2].default
    assert default == scram.DEFAULT_MECHANISM
    assert (admin_bodies.MIN_ITERATIONS, admin_bodies.MAX_ITERATIONS) == (
        scram.MIN_ITERATIONS,
        scram.MAX_ITERATIONS,
    )
    assert 4 * admin_bodies.MAX_PASSWORD_CHARS <= scram.MAX_PASSWORD_BYTES  # UTF-8: 4 at most
    for literal, enum in [
        (admin_bodies.AclOperation, acls.Operation),
        (admin_bodies.AclPermission, acls.Permission),
        (admin_bodies.ResourceType, acls.ResourceType),
        (admin_bodies.PatternType, acls.PatternType),
    ]:
        assert set(get_args(literal)) == {e.value for e in enum}
    assert access.MAX_USER_NAME == admin_bodies.MAX_USER_NAME


def test_optional_fields_take_their_defaults_and_unsent_ones_stay_unsent() -> None:
    user = admin.decode(admin_bodies.UserRequest, {"name": "alice", "password": "pw"})
    assert (user.mechanism, user.iterations) == ("SCRAM-SHA-256", 4096)
    acl = admin.decode(
        admin_bodies.AclRequest,
        {"principal": "User:*", "operation": "ALL", "resource_type": "CLUSTER"},
    )
    assert admin_bodies.given(acl) == {  # rule 5: no resource_name that was not sent
        "principal": "User:*",
        "operation": "ALL",
        "resource_type": "CLUSTER",
        "host": "*",
        "permission": "ALLOW",
        "pattern_type": "LITERAL",
    }
    wanted = admin.decode(admin_bodies.AclFilter, {"operation": "READ"})
    assert admin_bodies.given(wanted) == {"operation": "READ"}
    quota = admin.decode(
        admin_bodies.QuotaRequest, {"principal": "User:a", "consumer_byte_rate": None}
    )
    assert admin_bodies.given(quota) == {"principal": "User:a", "consumer_byte_rate": None}
    assert admin.decode(admin_bodies.ElectionsRequest, {}).partitions is None
    assert admin.decode(admin_bodies.RebalanceRequest, {}).dry_run is False
    extra = admin.decode(admin_bodies.RebalanceRequest, {"dry_run": True, "unknown": 1})
    assert extra.dry_run is True  # unknown fields are ignored (not in a filter)


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        (admin_bodies.UserRequest, {"iterations": 4096}, {"iterations": 4095}),
        (admin_bodies.UserRequest, {"iterations": 100_000}, {"iterations": 100_001}),
        (admin_bodies.UserRequest, {"password": "é" * 256}, {"password": "é" * 257}),
        (admin_bodies.UserRequest, {"name": "a" * 255}, {"name": "a" * 256}),
        (
            admin_bodies.QuotaRequest,
            {"producer_byte_rate": 2**53 - 1},
            {"producer_byte_rate": 2**53},
        ),
        (admin_bodies.QuotaRequest, {"producer_byte_rate": 0.001}, {"producer_byte_rate": -1}),
        (admin_bodies.QuotaRequest, {"principal": "User:" + "a" * 255}, {"principal": "User:"}),
        (admin_bodies.AddVoterRequest, {"id": 2**31 - 1}, {"id": 2**31}),
        (admin_bodies.AddVoterRequest, {"id": 0}, {"id": -1}),
        (
            admin_bodies.ElectionsRequest,
            {"partitions": [{"topic": "t", "partition": 2**31 - 1}]},
            {"partitions": [{"topic": "t", "partition": 2**31}]},
        ),
        (
            admin_bodies.ElectionsRequest,
            {"partitions": [{"topic": "t", "partition": 0}] * 10_000},
            {"partitions": [{"topic": "t", "partition": 0}] * 10_001},
        ),
    ],
)
def test_bounds_are_the_types(kind: type[Any], good: dict[str, Any], bad: dict[str, Any]) -> None:
    """admin_bodies.py rule 1: a bound the controllers answered INVALID_REQUEST is the
    type's: its edge passes, one past it does not."""
    base: dict[str, Any] = {
        admin_bodies.UserRequest: {"name": "alice", "password": "pw"},
        admin_bodies.QuotaRequest: {"principal": "User:a", "producer_byte_rate": 1},
        admin_bodies.AddVoterRequest: {"id": 1, "raft": "h:1", "url": "http://h:2"},
        admin_bodies.ElectionsRequest: {},
    }[kind]
    admin.decode(kind, base | good)
    with pytest.raises(MessageError):
        admin.decode(kind, base | bad)


def test_what_a_type_lets_through_a_decision_refuses_with_its_own_code() -> None:
    """admin_bodies.py rules 1-3: values of the right shape reach the decisions, which
    answer as they did before the types."""
    image = MetadataImage.EMPTY
    name = admin.decode(admin_bodies.UserRequest, {"name": "alice\n", "password": "pw"}).name
    with pytest.raises(KraftliteError) as info:  # rule 3: Python's $ took the newline
        access.validate_user_name(name)
    assert info.value.code is ErrorCode.INVALID_REQUEST
    for body in [  # rule 2: a whole body's rules
        {"principal": "User:a", "operation": "READ", "resource_type": "TOPIC"},
        {
            "principal": "User:a",
            "operation": "READ",
            "resource_type": "TOPIC",
            "resource_name": "*",
            "pattern_type": "PREFIXED",
        },
    ]:
        acl = admin.decode(admin_bodies.AclRequest, body)
        with pytest.raises(KraftliteError) as info:
            acls.acl_from_request("id", admin_bodies.given(acl))
        assert info.value.code is ErrorCode.INVALID_REQUEST
    quota = admin.decode(admin_bodies.QuotaRequest, {"principal": "User:a"})
    with pytest.raises(KraftliteError) as info:
        access.alter_quotas(image, quota.principal, admin_bodies.given(quota))
    assert info.value.code is ErrorCode.INVALID_REQUEST
    with pytest.raises(KraftliteError) as info:
        access.delete_acls(image, acls.filter_from_request({}))
    assert info.value.code is ErrorCode.INVALID_REQUEST
    # the reassignment rule 5 (each partition once) is the decision's, after the shape
    twice = {"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2}
    admin.decode(admin_bodies.ReassignmentsRequest, twice)
    with pytest.raises(KraftliteError) as info:
        reassignments.parse_reassignments(twice)
    assert info.value.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    with pytest.raises(KraftliteError) as info:
        reassignments.parse_reassignments({"partitions": [{"topic": "t", "partition": "0"}]})
    assert info.value.code is ErrorCode.INVALID_REQUEST


def test_a_cluster_acl_and_a_quota_from_typed_bodies() -> None:
    body = {"principal": "User:bob", "operation": "ALTER", "resource_type": "CLUSTER"}
    acl = acls.acl_from_request(
        "id", admin_bodies.given(admin.decode(admin_bodies.AclRequest, body))
    )
    assert (acl.resource_name, acl.host, acl.permission_type) == (acls.CLUSTER_NAME, "*", "ALLOW")
    wanted = admin.decode(
        admin_bodies.QuotaRequest, {"principal": "User:a", "producer_byte_rate": 1024}
    )
    result = access.alter_quotas(MetadataImage.EMPTY, wanted.principal, admin_bodies.given(wanted))
    assert result.response == {"producer_byte_rate": 1024.0}


def test_a_bad_controller_answer_is_a_message_error() -> None:
    """Bad UTF-8 or deep nesting in an answer: MessageError (admin_call turns it into
    UNKNOWN_SERVER_ERROR), never another exception escaping to the edge."""
    from kraftlite.protocol import admin  # noqa: PLC0415
    from kraftlite.protocol.internal import MessageError  # noqa: PLC0415

    request = admin.CreatePartitionsRequest("t", 2)
    for body in (b'{"name":"\xff","topic_id":"x"}', b"[" * 5000 + b"]" * 5000):
        with pytest.raises(MessageError):
            request.answer(body)


def test_a_create_with_an_assignment_counts_its_partitions() -> None:
    wanted = admin.CreateTopicRequest("t", replica_assignment=((1, 2), (2, 3), (3, 1)))
    assert wanted.partition_count == 3
    assert admin.CreateTopicRequest("t", 4).partition_count == 4
    for bad in ([], [[]], [[-1]], [[1]] * 10_001, "1,2"):
        with pytest.raises(MessageError):
            admin.decode(admin.CreateTopicRequest, {"name": "t", "replica_assignment": bad})
