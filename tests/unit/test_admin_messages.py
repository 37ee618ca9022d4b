"""The typed admin calls a broker makes of the controllers (kraftlite/protocol/admin.py):
each request's method, route and body, the bodies as the controllers decode them, and the
answers as a broker reads them."""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
import pytest

from kraftlite.metadata import records as r
from kraftlite.metadata.image import MetadataImage, apply_batch
from kraftlite.metadata.views import topic_view
from kraftlite.protocol import admin
from kraftlite.protocol.internal import MessageError


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
