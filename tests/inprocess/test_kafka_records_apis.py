"""Kafka's DeleteRecords on the Kafka edge (kafka/records_apis.py), in-process: one broker
that leads every partition alone, so the low watermark is its own log start."""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import pytest
import structlog

from kraftlite.errors import ErrorCode
from kraftlite.kafka import records_apis
from kraftlite.metadata.records import AccessControlEntryRecord
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.security.authenticator import AuthSettings
from tests.harness.inprocess import InProcessBroker, KafkaConnection, kafka_batch

ALICE = "User:alice"


def allow(operation: str, topic: str) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=f"acl-{operation}-{topic}",
        resource_type="TOPIC",
        resource_name=topic,
        pattern_type="LITERAL",
        principal=ALICE,
        host="*",
        operation=operation,
        permission_type="ALLOW",
    )


async def produce(kafka: KafkaConnection, topic: str, partition: int, count: int) -> None:
    """`count` records, each keyed (a compacted topic takes them too)."""
    now = kafka.session.service.broker.clock.now_ms()
    values = [b"v%d" % i for i in range(count)]
    records = kafka_batch(values, timestamp=now, keys=values)
    answer = await kafka.call(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0


async def delete_records(
    kafka: KafkaConnection, wanted: dict[str, list[tuple[int, int]]], version: int = 2
) -> dict[tuple[str, int], tuple[int, int]]:
    """DeleteRecords; (error code, low watermark) per (topic, partition)."""
    answer = await kafka.call(
        ApiKey.DELETE_RECORDS,
        version,
        {
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": p, "offset": o} for p, o in partitions],
                }
                for topic, partitions in wanted.items()
            ],
            "timeout_ms": 5000,
        },
    )
    return {
        (t["name"], p["partition_index"]): (p["error_code"], p["low_watermark"])
        for t in answer["topics"]
        for p in t["partitions"]
    }


@pytest.fixture
async def secured() -> AsyncIterator[InProcessBroker]:
    async with InProcessBroker(auth=AuthSettings(required=True)) as broker:
        broker.create_topic("orders", partitions=2)
        broker.apply(allow("WRITE", "orders"), allow("DESCRIBE", "orders"))
        yield broker


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_the_log_start_moves_exactly_there_and_nothing_below_is_served(
    node: InProcessBroker, version: int
) -> None:
    kafka = node.connect()
    await produce(kafka, "orders", 0, 10)
    assert await delete_records(kafka, {"orders": [(0, 4)]}, version) == {("orders", 0): (0, 4)}
    log = node.partition("orders").log
    assert log.log_start_offset == 4  # inside the batch 0-9, which stays whole
    earliest = await kafka.call(
        ApiKey.LIST_OFFSETS,
        6,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -2}]}],
        },
    )
    assert earliest["topics"][0]["partitions"][0]["offset"] == 4
    # again, lower: nothing changes, and the answer is where it is
    assert await delete_records(kafka, {"orders": [(0, 2)]}) == {("orders", 0): (0, 4)}


async def test_a_topic_without_the_delete_policy_keeps_its_records(
    node: InProcessBroker,
) -> None:
    """As Kafka's: DeleteRecords of a compact-only topic (or one with no cleanup policy)
    is POLICY_VIOLATION, and nothing moves; compact,delete takes it."""
    kafka = node.connect()
    for topic, policy, code in (
        ("table", "compact", int(ErrorCode.POLICY_VIOLATION)),
        ("forever", "", int(ErrorCode.POLICY_VIOLATION)),
        ("both", "compact,delete", 0),
    ):
        node.create_topic(topic, configs={"cleanup.policy": policy})
        await produce(kafka, topic, 0, 3)
        answered = await delete_records(kafka, {topic: [(0, 2)]})
        assert answered[(topic, 0)][0] == code, topic
        assert node.partition(topic).log.log_start_offset == (0 if code else 2)


async def test_minus_one_is_the_high_watermark_and_above_it_is_out_of_range(
    node: InProcessBroker,
) -> None:
    kafka = node.connect()
    await produce(kafka, "orders", 0, 6)
    await produce(kafka, "orders", 1, 3)
    answered = await delete_records(kafka, {"orders": [(0, 7), (1, -1)]})
    assert answered == {
        ("orders", 0): (int(ErrorCode.OFFSET_OUT_OF_RANGE), -1),
        ("orders", 1): (0, 3),
    }
    assert node.partition("orders", 0).log.log_start_offset == 0  # untouched
    bad = await delete_records(kafka, {"orders": [(0, -2)]})
    assert bad == {("orders", 0): (int(ErrorCode.OFFSET_OUT_OF_RANGE), -1)}


async def test_unknown_partitions_and_topics_and_internal_ones(node: InProcessBroker) -> None:
    kafka = node.connect()
    answered = await delete_records(
        kafka, {"orders": [(9, 0)], "missing": [(0, 0)], "__consumer_offsets": [(0, 0)]}
    )
    assert answered[("orders", 9)][0] == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert answered[("missing", 0)][0] == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    # internal topics are the brokers' own: no client may delete them (not authorized)
    assert answered[("__consumer_offsets", 0)][0] == int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


async def test_a_partition_led_elsewhere_answers_not_leader(node: InProcessBroker) -> None:
    node.register_broker(2)
    node.create_topic("remote", leader=2)
    answered = await delete_records(node.connect(), {"remote": [(0, 0)]})
    assert answered == {("remote", 0): (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1)}


async def test_it_needs_delete_on_the_topic_and_a_refusal_changes_nothing(
    secured: InProcessBroker,
) -> None:
    audit: list[MutableMapping[str, Any]]
    kafka = secured.connect(certificate_principal=ALICE)
    await produce(kafka, "orders", 0, 5)
    with structlog.testing.capture_logs() as audit:
        answered = await delete_records(kafka, {"orders": [(0, 3), (1, 0)], "nowhere": [(0, 0)]})
    code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    # a topic that does not exist answers the same: the refusal tells nothing of it
    assert answered == {
        ("orders", 0): (code, -1),
        ("orders", 1): (code, -1),
        ("nowhere", 0): (code, -1),
    }
    assert secured.partition("orders").log.log_start_offset == 0
    denied = [line for line in audit if line["event"] == "authorization_denied"]
    assert len(denied) == 1  # one audit line per request, with a count
    secured.apply(allow("DELETE", "orders"))
    assert (await delete_records(kafka, {"orders": [(0, 3)]}))[("orders", 0)] == (0, 3)


async def test_a_partition_named_twice_and_past_the_limit_answers_invalid(
    node: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records_apis, "MAX_PARTITIONS", 2)
    kafka = node.connect()
    answer = await kafka.call(
        ApiKey.DELETE_RECORDS,
        2,
        {
            "topics": [
                {
                    "name": "orders",
                    "partitions": [{"partition_index": p, "offset": 0} for p in (0, 0, 1, 2)],
                }
            ],
            "timeout_ms": 1000,
        },
    )
    codes = [p["error_code"] for p in answer["topics"][0]["partitions"]]
    invalid = int(ErrorCode.INVALID_REQUEST)
    assert codes == [0, invalid, 0, invalid]  # named twice; past the limit
