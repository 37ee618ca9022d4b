"""Typed admin calls (protocol/admin.py) through `BrokerService.admin_call`, and the group
coordinator's offsets topic through `Broker.admin_call`, against a controller twin: what is
sent, read your writes (the answer waits for the metadata version the controller names),
the typed answer, and the controllers' errors."""

from __future__ import annotations

import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.metadata import records as r
from kraftlite.protocol import admin
from tests.harness.inprocess import ControllerTwin, InProcessBroker, topic_id_for


async def test_admin_call_answers_once_this_broker_has_the_change(node: InProcessBroker) -> None:
    controller = ControllerTwin(node)
    node.broker.controllers.call_with_headers = controller.call_with_headers  # type: ignore[method-assign]
    client = {"X-Kraftlite-Forwarded-For": "User:alice"}
    answer = await node.service.admin_call(
        admin.CreateTopicRequest("events", 3, configs={"retention.ms": "-1"}), headers=client
    )
    assert node.image.topic("events") is not None  # read your writes
    assert (answer.name, len(answer.partitions)) == ("events", 3)
    assert answer.configs == {"retention.ms": "-1"}
    method, path, body, headers = controller.calls[0]
    assert (method, path, headers) == ("POST", "/v1/topics", client)
    assert body == {
        "name": "events",
        "partitions": 3,
        "replication_factor": None,
        "configs": {"retention.ms": "-1"},
        "internal": False,
        "replica_assignment": None,
        "validate_only": False,
    }
    assert await node.service.admin_call(admin.DeleteTopicRequest("events")) is None
    assert node.image.topic("events") is None
    assert controller.calls[1][:3] == ("DELETE", "/v1/topics/events", None)


async def test_admin_call_raises_the_controllers_error(node: InProcessBroker) -> None:
    refused = KraftliteError(ErrorCode.INVALID_PARTITIONS, "count must be 3-10000")
    controller = ControllerTwin(node, refused)
    node.broker.controllers.call_with_headers = controller.call_with_headers  # type: ignore[method-assign]
    with pytest.raises(KraftliteError) as info:
        await node.service.admin_call(admin.CreatePartitionsRequest("orders", 1))
    assert info.value.code is ErrorCode.INVALID_PARTITIONS
    with pytest.raises(KraftliteError) as info:  # no request goes out for such a name
        await node.service.admin_call(admin.DeleteTopicRequest(".."))
    assert info.value.code is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert len(controller.calls) == 1


async def test_the_coordinator_asks_for_its_offsets_topic_as_a_broker() -> None:
    async with InProcessBroker(offsets_partitions=4) as node:
        node.apply(r.RemoveTopicRecord(topic_id=topic_id_for(OFFSETS_TOPIC)))
        controller = ControllerTwin(node)
        node.broker.controllers.call_with_headers = controller.call_with_headers  # type: ignore[method-assign]
        await node.coordinator.ensure_offsets_topic()
        assert node.image.topic(OFFSETS_TOPIC) is not None
        [(method, path, body, headers)] = controller.calls
        assert (method, path, headers) == ("POST", "/v1/topics", None)  # as itself
        assert body == {
            "name": OFFSETS_TOPIC,
            "partitions": 4,
            "replication_factor": 1,
            "configs": {"cleanup.policy": "compact", "min.insync.replicas": 1},
            "internal": True,
            "replica_assignment": None,
            "validate_only": False,
        }
        await node.coordinator.ensure_offsets_topic()  # there now: no call
        assert len(controller.calls) == 1


async def test_an_offsets_topic_made_before_compaction_is_altered_to_compact() -> None:
    """A data directory of an older kraftlite: its offsets topic has retention off and no
    cleanup.policy. The broker leading its partition 0 alters it to compact, once."""
    async with InProcessBroker(offsets_partitions=2) as node:
        topic_id = topic_id_for(OFFSETS_TOPIC)
        node.apply(r.RemoveTopicRecord(topic_id=topic_id))
        node.create_topic(OFFSETS_TOPIC, 2, configs={"retention.ms": "-1"})
        controller = ControllerTwin(node)
        node.broker.controllers.call_with_headers = controller.call_with_headers  # type: ignore[method-assign]
        await node.coordinator.compact_offsets_topic()
        assert dict(node.image.topics[topic_id].configs) == {"cleanup.policy": "compact"}
        [(method, path, body, _)] = controller.calls
        assert (method, path) == ("PUT", f"/v1/topics/{OFFSETS_TOPIC}/configs")
        assert body == {"configs": {"cleanup.policy": "compact", "retention.ms": None}}
        await node.coordinator.compact_offsets_topic()  # compacted now: no call
        assert len(controller.calls) == 1
        assert node.partition(OFFSETS_TOPIC, 0).compacted


async def test_another_broker_creating_the_offsets_topic_first_is_waited_for() -> None:
    async with InProcessBroker() as node:
        node.apply(r.RemoveTopicRecord(topic_id=topic_id_for(OFFSETS_TOPIC)))
        exists = KraftliteError(ErrorCode.TOPIC_ALREADY_EXISTS, "another broker made it")
        controller = ControllerTwin(node, exists)
        node.broker.controllers.call_with_headers = controller.call_with_headers  # type: ignore[method-assign]
        await node.coordinator.ensure_offsets_topic()
        assert node.image.topic(OFFSETS_TOPIC) is not None
