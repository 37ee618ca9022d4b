"""Kafka's OffsetDelete, ConsumerGroupDescribe and DescribeProducers (kraftlite/kafka/
group_apis.py) in-process: requests encoded as a client encodes them, handled by a
connection's Session over the real coordinator, service and gate of one in-process broker
(tests/harness/inprocess.py). Bad inputs and refusals answer Kafka's codes and change
nothing; deletions are tombstones in `__consumer_offsets` that a new coordinator replays."""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping
from typing import Any

import pytest
import structlog

from kraftlite import service as service_module
from kraftlite.broker.producer_state import Appended, ProducerEntry
from kraftlite.errors import ErrorCode
from kraftlite.groups import coordinator as coordinator_module
from kraftlite.groups.coordinator import (
    OFFSETS_TOPIC,
    ConsumerGroupDescription,
    parse_offset_record,
)
from kraftlite.groups.group import Group
from kraftlite.groups.offsets import CommittedOffset
from kraftlite.kafka import group_apis
from kraftlite.kafka.group_apis import MAX_DESCRIBED_GROUPS, MAX_PRODUCER_PARTITIONS
from kraftlite.metadata.records import NO_LEADER, AccessControlEntryRecord, PartitionChangeRecord
from kraftlite.protocol import batch as fmt
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.security.authenticator import AuthSettings
from kraftlite.service import ActiveProducer
from tests.harness.inprocess import (
    BROKER_ID,
    InProcessBroker,
    KafkaConnection,
    kafka_batch,
    topic_id_for,
)

ALICE = "User:alice"
NONE = 0
INVALID_GROUP_ID = 24
UNKNOWN = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
TOPIC_REFUSED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_REFUSED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
NOT_FOUND = int(ErrorCode.GROUP_ID_NOT_FOUND)
GROUP_SUBSCRIBED_TO_TOPIC = int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
UNKNOWN_AUTHORIZED = -(2**31)
READ_BIT, DELETE_BIT, DESCRIBE_BIT = 1 << 3, 1 << 6, 1 << 8  # Kafka's AclOperation codes
_acl_ids = itertools.count()


def allow(principal: str, operation: str, kind: str, name: str) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=f"group-apis-acl-{next(_acl_ids)}",
        resource_type=kind,
        resource_name=name,
        pattern_type="LITERAL",
        principal=principal,
        host="*",
        operation=operation,
        permission_type="ALLOW",
    )


@pytest.fixture
async def secured() -> AsyncIterator[InProcessBroker]:
    """A broker whose clients must authenticate, with topics orders (2 partitions), other
    and hidden."""
    async with InProcessBroker(auth=AuthSettings(required=True)) as broker:
        broker.create_topic("orders", partitions=2)
        broker.create_topic("other")
        broker.create_topic("hidden")
        yield broker


@pytest.fixture
def audit() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as captured:
        yield captured


def denials(audit: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [line for line in audit if line["event"] == "authorization_denied"]


async def commit(node: InProcessBroker, group: str, *offsets: tuple[str, int, int]) -> None:
    """Offsets committed for a group with no members (an admin tool's commit)."""
    wanted = [
        ((topic, partition), CommittedOffset(offset, "")) for topic, partition, offset in offsets
    ]
    await node.coordinator.commit(group, None, None, wanted)


def offset_records(node: InProcessBroker, group: str) -> list[tuple[Any, ...]]:
    """The group's records in its `__consumer_offsets` partition, parsed, in log order
    (None: a tombstone)."""
    log = node.partition(OFFSETS_TOPIC, node.coordinator.offsets_partition(group)).log
    return [
        parsed
        for b in fmt.decode_stream(log.read(log.log_start_offset, 1 << 20))
        for record in b.records()
        if (parsed := parse_offset_record(record.key, record.value)) is not None
        and parsed[0] == group
    ]


async def offset_delete(
    kafka: KafkaConnection, group: str, *partitions: tuple[str, int]
) -> tuple[int, dict[tuple[str, int], int]]:
    """OffsetDelete v0: (top-level error code, each partition's code)."""
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append({"partition_index": partition})
    answer = await kafka.call(
        ApiKey.OFFSET_DELETE,
        0,
        {"group_id": group, "topics": [{"name": t, "partitions": p} for t, p in topics.items()]},
    )
    codes = {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in answer["topics"]
        for p in t["partitions"]
    }
    return answer["error_code"], codes


def move_coordinator(node: InProcessBroker, group: str, leader: int) -> None:
    """The group's offsets partition led by `leader` (NO_LEADER: by nobody)."""
    index = node.coordinator.offsets_partition(group)
    node.apply(
        PartitionChangeRecord(topic_id=topic_id_for(OFFSETS_TOPIC), partition=index, leader=leader)
    )


def subscription(*topics: str) -> bytes:
    """A consumer's classic JoinGroup metadata (Kafka's ConsumerProtocolSubscription v0)."""
    encoded = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        encoded += struct.pack(">h", len(topic)) + topic.encode()
    return encoded + struct.pack(">i", -1)  # no user data


async def join_classic(
    kafka: KafkaConnection, group: str, metadata: bytes, protocol_type: str = "consumer"
) -> dict[str, Any]:
    """One member's JoinGroup then SyncGroup: a Stable classic group."""
    joined = await kafka.call(
        ApiKey.JOIN_GROUP,
        5,
        {
            "group_id": group,
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": metadata}],
        },
    )
    assert joined["error_code"] == 0, joined
    member = joined["member_id"]
    synced = await kafka.call(
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": group,
            "generation_id": joined["generation_id"],
            "member_id": member,
            "group_instance_id": None,
            "assignments": [{"member_id": member, "assignment": b""}],
        },
    )
    assert synced["error_code"] == 0, synced
    return dict(joined)


# -- OffsetDelete ------------------------------------------------------------------------


async def test_offsets_deleted_are_tombstones_a_new_coordinator_replays(
    node: InProcessBroker,
) -> None:
    """An empty group's offsets go, as tombstones acknowledged by the ISR; a partition
    with nothing committed answers NONE too (as Kafka's); the new leader epoch of the
    offsets partition (a coordinator move) replays the log and finds them gone."""
    node.create_topic("other")
    await commit(node, "g", ("orders", 0, 5), ("orders", 1, 7), ("other", 0, 3))
    kafka = node.connect()
    code, codes = await offset_delete(kafka, "g", ("orders", 0), ("other", 0), ("other", 0))
    assert (code, codes) == (NONE, {("orders", 0): NONE, ("other", 0): NONE})
    assert node.coordinator.committed("g") == {("orders", 1): CommittedOffset(7, "")}
    assert offset_records(node, "g")[-2:] == [  # one tombstone each, named twice or not
        ("g", ("orders", 0), None),
        ("g", ("other", 0), None),
    ]
    code, codes = await offset_delete(kafka, "g", ("orders", 0))  # nothing left there
    assert (code, codes) == (NONE, {("orders", 0): NONE})
    assert len(offset_records(node, "g")) == 5  # and nothing more written
    move_coordinator(node, "g", NO_LEADER)
    move_coordinator(node, "g", BROKER_ID)
    assert node.coordinator.committed("g") == {("orders", 1): CommittedOffset(7, "")}
    fetched = await kafka.call(
        ApiKey.OFFSET_FETCH,
        9,
        {"groups": [{"group_id": "g", "topics": None}], "require_stable": False},
    )
    assert [
        (t["name"], p["partition_index"], p["committed_offset"])
        for t in fetched["groups"][0]["topics"]
        for p in t["partitions"]
    ] == [("orders", 1, 7)]
    # the last offsets gone: the group is gone with them
    assert await offset_delete(kafka, "g", ("orders", 1)) == (NONE, {("orders", 1): NONE})
    assert await offset_delete(kafka, "g", ("orders", 1)) == (NOT_FOUND, {})


async def test_a_kip848_groups_subscribed_topics_keep_their_offsets(
    node: InProcessBroker,
) -> None:
    node.create_topic("other")
    await commit(node, "g", ("orders", 0, 5), ("other", 0, 3))
    await node.coordinator.join("g", "member-1", "client-1", ["orders"], None)
    kafka = node.connect()
    code, codes = await offset_delete(kafka, "g", ("orders", 0), ("orders", 1), ("other", 0))
    assert code == NONE
    assert codes == {
        ("orders", 0): GROUP_SUBSCRIBED_TO_TOPIC,
        ("orders", 1): GROUP_SUBSCRIBED_TO_TOPIC,
        ("other", 0): NONE,
    }
    assert node.coordinator.committed("g") == {("orders", 0): CommittedOffset(5, "")}
    await node.coordinator.leave("g", "member-1")  # no member consumes it any more
    assert await offset_delete(kafka, "g", ("orders", 0)) == (NONE, {("orders", 0): NONE})
    assert node.coordinator.committed("g") == {}


async def test_a_classic_group_is_read_from_its_members_subscriptions(
    node: InProcessBroker,
) -> None:
    """Kafka's ClassicGroup: a consumer group's topics come from its members' subscription
    metadata; unreadable metadata makes every topic count as consumed; members of another
    protocol type refuse the whole request (NON_EMPTY_GROUP)."""
    node.create_topic("other")
    kafka = node.connect()
    for group, metadata in (("readable", subscription("orders")), ("opaque", b"\x00\x01??")):
        await commit(node, group, ("orders", 0, 1), ("other", 0, 1))
        await join_classic(kafka, group, metadata)
    code, codes = await offset_delete(kafka, "readable", ("orders", 0), ("other", 0))
    assert (code, codes) == (NONE, {("orders", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): NONE})
    code, codes = await offset_delete(kafka, "opaque", ("orders", 0), ("other", 0))
    assert code == NONE
    assert set(codes.values()) == {GROUP_SUBSCRIBED_TO_TOPIC}
    assert len(node.coordinator.committed("opaque")) == 2
    await commit(node, "connect", ("other", 0, 1))
    await join_classic(kafka, "connect", b"worker", protocol_type="connect")
    assert await offset_delete(kafka, "connect", ("other", 0)) == (
        int(ErrorCode.GROUP_NOT_EMPTY),
        {},
    )
    assert node.coordinator.committed("connect") == {("other", 0): CommittedOffset(1, "")}


async def test_offset_delete_refuses_bad_requests_whole_or_per_partition(
    node: InProcessBroker,
) -> None:
    await commit(node, "g", ("orders", 0, 5))
    kafka = node.connect()
    # the group: a name no group may have, one that does not exist, one not coordinated here
    assert await offset_delete(kafka, "", ("orders", 0)) == (INVALID_GROUP_ID, {})
    assert await offset_delete(kafka, "nobody", ("orders", 0)) == (NOT_FOUND, {})
    # partitions that do not exist are the client's to hear of, one by one
    code, codes = await offset_delete(
        kafka, "g", ("nope", 0), ("orders", 2), ("orders", -1), ("a/b", 0), ("orders", 0)
    )
    assert code == NONE
    assert codes == {
        ("nope", 0): UNKNOWN,
        ("orders", 2): UNKNOWN,
        ("orders", -1): UNKNOWN,
        ("a/b", 0): UNKNOWN,
        ("orders", 0): NONE,
    }
    await commit(node, "g", ("orders", 0, 6))
    too_many = [("orders", 0)] * 10_001
    assert await offset_delete(kafka, "g", *too_many) == (int(ErrorCode.INVALID_REQUEST), {})
    move_coordinator(node, "g", NO_LEADER)
    assert await offset_delete(kafka, "g", ("orders", 0)) == (int(ErrorCode.NOT_COORDINATOR), {})
    move_coordinator(node, "g", BROKER_ID)
    assert node.coordinator.committed("g") == {("orders", 0): CommittedOffset(6, "")}


async def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    await commit(secured, "g", ("orders", 0, 5), ("other", 0, 3), ("hidden", 0, 1))
    alice = secured.connect(certificate_principal=ALICE)
    secured.apply(allow(ALICE, "READ", "GROUP", "g"), allow(ALICE, "READ", "TOPIC", "orders"))
    # READ on the group is not DELETE: nothing is deleted, nothing learnt of the topics
    assert await offset_delete(alice, "g", ("orders", 0)) == (GROUP_REFUSED, {})
    (line,) = denials(audit)
    assert (line["operation"], line["resource_type"], line["api"]) == (
        "DELETE",
        "GROUP",
        "OffsetDelete",
    )
    secured.apply(allow(ALICE, "DELETE", "GROUP", "g"))
    code, codes = await offset_delete(
        alice, "g", ("orders", 0), ("hidden", 0), ("nope", 0), (OFFSETS_TOPIC, 0)
    )
    assert code == NONE
    assert codes == {
        ("orders", 0): NONE,
        ("hidden", 0): TOPIC_REFUSED,
        ("nope", 0): TOPIC_REFUSED,  # refused before anything is said of its existence
        (OFFSETS_TOPIC, 0): TOPIC_REFUSED,  # the brokers' own
    }
    assert secured.coordinator.committed("g") == {
        ("other", 0): CommittedOffset(3, ""),
        ("hidden", 0): CommittedOffset(1, ""),
    }
    # one audit line for the topics refused (the internal one is no ACL's to grant)
    assert (denials(audit)[-1]["operation"], denials(audit)[-1]["names"]) == (
        "READ",
        ["hidden", "nope"],
    )
    # a principal refused on the group hears nothing of whether it exists
    bob = secured.connect(certificate_principal="User:bob")
    assert await offset_delete(bob, "nobody", ("orders", 0)) == (GROUP_REFUSED, {})


# -- ConsumerGroupDescribe -----------------------------------------------------------------


async def describe(
    kafka: KafkaConnection, *groups: str, operations: bool = False
) -> list[dict[str, Any]]:
    answer = await kafka.call(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        0,
        {"group_ids": list(groups), "include_authorized_operations": operations},
    )
    return list(answer["groups"])


def partitions_of(assignment: dict[str, Any]) -> list[tuple[str, str, list[int]]]:
    return [
        (t["topic_id"].hex, t["topic_name"], t["partitions"])
        for t in assignment["topic_partitions"]
    ]


async def test_a_kip848_group_is_described_with_members_and_target_assignment(
    node: InProcessBroker,
) -> None:
    """Two members: the first holds both partitions until it confirms giving one up, so
    the second's assignment is empty while its target is not (the group reconciles)."""
    coordinator, orders = node.coordinator, topic_id_for("orders")
    await coordinator.join("g", "member-1", "client-1", ["orders"], None)
    await coordinator.join("g", "member-2", "client-2", ["orders"], None)
    (group,) = await describe(node.connect(), "g")
    assert group["error_code"] == NONE, group
    assert (group["group_id"], group["group_state"], group["assignor_name"]) == (
        "g",
        "Reconciling",
        "uniform",
    )
    assert group["group_epoch"] == group["assignment_epoch"] == 1
    assert group["authorized_operations"] == UNKNOWN_AUTHORIZED  # not asked for
    one, two = group["members"]
    assert (one["member_id"], one["client_id"], one["member_epoch"]) == ("member-1", "client-1", 1)
    assert (one["instance_id"], one["rack_id"], one["subscribed_topic_regex"]) == (None, None, None)
    assert one["subscribed_topic_names"] == two["subscribed_topic_names"] == ["orders"]
    assert partitions_of(one["assignment"]) == [(orders, "orders", [0, 1])]
    assert partitions_of(one["target_assignment"]) == [(orders, "orders", [0])]
    assert partitions_of(two["assignment"]) == []
    assert partitions_of(two["target_assignment"]) == [(orders, "orders", [1])]
    # the first member is told to give partition 1 up and confirms: the second gets it
    assert (await coordinator.heartbeat("g", "member-1", 1))["member_epoch"] == 2
    await coordinator.heartbeat("g", "member-1", 2)
    await coordinator.heartbeat("g", "member-2", 1)
    (group,) = await describe(node.connect(), "g")
    assert group["group_state"] == "Reconciling"  # the second has not confirmed yet
    assert [partitions_of(m["assignment"]) for m in group["members"]] == [
        [(orders, "orders", [0])],
        [(orders, "orders", [1])],
    ]


async def test_groups_not_kip848_or_not_there_are_not_found(node: InProcessBroker) -> None:
    """GROUP_ID_NOT_FOUND for an unknown group and for a classic group with members (which
    librdkafka then describes with DescribeGroups); a group with offsets and no members is
    an empty one; describing creates nothing."""
    kafka = node.connect()
    await join_classic(kafka, "classic", subscription("orders"))
    await commit(node, "offsets-only", ("orders", 0, 1))
    unknown, classic, bad, empty = await describe(kafka, "nobody", "classic", "", "offsets-only")
    assert (unknown["group_id"], unknown["error_code"]) == ("nobody", NOT_FOUND)
    assert unknown["error_message"]
    assert (classic["error_code"], classic["members"]) == (NOT_FOUND, [])
    assert "not a consumer group" in classic["error_message"]
    assert bad["error_code"] == INVALID_GROUP_ID
    assert (empty["error_code"], empty["group_state"], empty["members"]) == (NONE, "Empty", [])
    assert (empty["group_epoch"], empty["assignment_epoch"]) == (0, 0)
    assert "nobody" not in {g["group"] for g in node.coordinator.local_groups()}


async def test_describe_needs_describe_and_shows_only_visible_topics(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    coordinator = secured.coordinator
    await coordinator.join("g", "member-1", "client-1", ["orders", "hidden"], None)
    alice = secured.connect(certificate_principal=ALICE)
    (refused,) = await describe(alice, "g", operations=True)
    assert (refused["error_code"], refused["members"]) == (GROUP_REFUSED, [])
    assert refused["authorized_operations"] == UNKNOWN_AUTHORIZED
    assert denials(audit)[-1]["operation"] == "DESCRIBE"
    secured.apply(
        allow(ALICE, "DESCRIBE", "GROUP", "g"), allow(ALICE, "DESCRIBE", "TOPIC", "orders")
    )
    (group,) = await describe(alice, "g", operations=True)
    assert group["error_code"] == NONE
    assert group["authorized_operations"] == DESCRIBE_BIT
    (member,) = group["members"]
    assert member["subscribed_topic_names"] == ["orders"]  # hidden is not Alice's to see
    assert {t["topic_name"] for t in member["assignment"]["topic_partitions"]} == {"orders"}
    secured.apply(allow(ALICE, "READ", "GROUP", "g"), allow(ALICE, "DELETE", "GROUP", "g"))
    (group,) = await describe(alice, "g", operations=True)
    assert group["authorized_operations"] == READ_BIT | DESCRIBE_BIT | DELETE_BIT


async def test_describe_answers_a_bounded_number_of_groups(
    node: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    await node.coordinator.join("g", "member-1", "client-1", ["orders"], None)
    groups = await describe(node.connect(), *["g"] * (MAX_DESCRIBED_GROUPS + 2))
    assert [g["error_code"] for g in groups] == [NONE] * MAX_DESCRIBED_GROUPS + [
        int(ErrorCode.INVALID_REQUEST)
    ] * 2
    # and a bounded answer: the first group described always, the next ones while they fit
    monkeypatch.setattr(group_apis, "MAX_DESCRIBED_ITEMS", 8)  # g is 6: its member,
    first, second = await describe(node.connect(), "g", "g")  # a topic, 2 + 2 partitions
    assert (first["error_code"], len(first["members"])) == (NONE, 1)
    assert (second["error_code"], second["members"]) == (int(ErrorCode.INVALID_REQUEST), [])
    monkeypatch.setattr(group_apis, "MAX_DESCRIBED_ITEMS", 5)
    (alone,) = await describe(node.connect(), "g")
    assert alone["error_code"] == NONE


async def test_describe_runs_the_assignor_once_per_group_and_never_past_the_budget(
    node: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target assignment runs the assignor over every subscribed partition, on the
    event loop: a group named again is described once and answered again (as Kafka answers
    every name); a group that may not fit is refused before the assignor runs; and other
    requests get the loop between groups described."""
    node.create_topic("big", partitions=40)
    for group, topic in (("g", "orders"), ("h", "orders"), ("big", "big")):
        await node.coordinator.join(group, "member-1", "client-1", [topic], None)
    ran: list[tuple[str, int]] = []
    ticks = 0
    describe_group = coordinator_module.describe_consumer_group

    def counted(group: Group, counts: Mapping[str, int]) -> ConsumerGroupDescription:
        ran.append((group.name, ticks))
        return describe_group(group, counts)

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    monkeypatch.setattr(coordinator_module, "describe_consumer_group", counted)
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        answers = await describe(node.connect(), "g", "g", "h", "g", "h")
        assert [a["group_id"] for a in answers] == ["g", "g", "h", "g", "h"]
        assert all(a["error_code"] == NONE for a in answers)
        assert answers[0] == answers[1] == answers[3] and answers[2] == answers[4]
        assert [name for name, _ in ran] == ["g", "h"]
        assert ran[1][1] > ran[0][1]  # the ticker ran in between
        ran.clear()
        monkeypatch.setattr(group_apis, "MAX_DESCRIBED_ITEMS", 50)  # g is 6, big 1 + 1 + 40
        first, refused, again = await describe(node.connect(), "g", "big", "big")  # + 40
        assert first["error_code"] == NONE
        assert refused["error_code"] == again["error_code"] == int(ErrorCode.INVALID_REQUEST)
        assert [name for name, _ in ran] == ["g"]  # big's assignor never ran
        (alone,) = await describe(node.connect(), "big")  # the first is always answered
        assert alone["error_code"] == NONE
    finally:
        tick.cancel()


# -- DescribeProducers ---------------------------------------------------------------------


async def describe_producers(
    kafka: KafkaConnection, *partitions: tuple[str, int]
) -> dict[tuple[str, int], dict[str, Any]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    answer = await kafka.call(
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()]},
    )
    return {
        (t["name"], p["partition_index"]): dict(p)
        for t in answer["topics"]
        for p in t["partitions"]
    }


async def produce_idempotent(
    node: InProcessBroker, kafka: KafkaConnection, topic: str, partition: int, sequences: int
) -> int:
    """InitProducerId, then `sequences` one-record batches; the producer id."""
    init = {"transactional_id": None, "transaction_timeout_ms": 60_000}
    producer_id = int((await kafka.call(ApiKey.INIT_PRODUCER_ID, 4, init))["producer_id"])
    for sequence in range(sequences):
        batch = kafka_batch(
            [b"x"],
            timestamp=node.clock.now_ms(),
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=sequence,
        )
        answer = await kafka.call(
            ApiKey.PRODUCE,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 1000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
                ],
            },
        )
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0, answer
    return producer_id


async def test_describe_producers_lists_a_partitions_idempotent_producers(
    node: InProcessBroker,
) -> None:
    """As the leader's producer state holds them, also after a new leader epoch rebuilt it
    from the log; producers silent past producer.id.expiration.ms are gone."""
    kafka = node.connect()
    written_at = node.clock.now_ms()
    producer_id = await produce_idempotent(node, kafka, "orders", 0, 3)
    answered = await describe_producers(kafka, ("orders", 0), ("orders", 1))
    assert answered[("orders", 1)] == {
        "partition_index": 1,
        "error_code": 0,
        "error_message": None,
        "active_producers": [],
    }
    expected = {
        "producer_id": producer_id,
        "producer_epoch": 0,
        "last_sequence": 2,
        "last_timestamp": written_at,  # the broker's clock, when it appended
        "coordinator_epoch": -1,
        "current_txn_start_offset": -1,
    }
    assert answered[("orders", 0)]["active_producers"] == [expected]
    node.clock.advance(60_000)
    orders = topic_id_for("orders")
    node.apply(PartitionChangeRecord(topic_id=orders, partition=0, leader=NO_LEADER))
    node.apply(PartitionChangeRecord(topic_id=orders, partition=0, leader=BROKER_ID))
    (rebuilt,) = (await describe_producers(kafka, ("orders", 0)))[("orders", 0)]["active_producers"]
    assert {**rebuilt, "last_timestamp": 0} == {**expected, "last_timestamp": 0}
    assert rebuilt["last_timestamp"] == node.clock.now_ms()  # seen when the state was rebuilt
    node.clock.advance(86_400_001)  # producer.id.expiration.ms
    node.heartbeat()  # (the leadership lease, renewed)
    assert (await describe_producers(kafka, ("orders", 0)))[("orders", 0)]["active_producers"] == []


async def test_describe_producers_answers_kafkas_codes_per_partition(
    node: InProcessBroker,
) -> None:
    node.register_broker(2)
    node.create_topic("remote", leader=2)
    answered = await describe_producers(
        node.connect(),
        ("orders", 5),
        ("orders", -1),
        ("nope", 0),
        ("a/b", 0),
        ("remote", 0),
        (OFFSETS_TOPIC, 0),
    )
    assert {tp: a["error_code"] for tp, a in answered.items()} == {
        ("orders", 5): UNKNOWN,
        ("orders", -1): UNKNOWN,
        ("nope", 0): UNKNOWN,
        ("a/b", 0): int(ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("remote", 0): int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (OFFSETS_TOPIC, 0): TOPIC_REFUSED,  # the brokers' own
    }
    assert all(a["active_producers"] == [] for a in answered.values())


async def test_describe_producers_is_bounded(
    node: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    kafka = node.connect()
    for partition in (0, 1):
        await produce_idempotent(node, kafka, "orders", partition, 1)
    monkeypatch.setattr(group_apis, "MAX_LISTED_PRODUCERS", 1)
    answered = await describe_producers(kafka, ("orders", 0), ("orders", 1))
    assert len(answered[("orders", 0)]["active_producers"]) == 1  # the first always answered
    assert answered[("orders", 1)]["error_code"] == int(ErrorCode.INVALID_REQUEST)
    monkeypatch.undo()
    indexes = list(range(MAX_PRODUCER_PARTITIONS + 5))
    answer = await kafka.call(
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": "orders", "partition_indexes": indexes}]},
    )
    codes = [p["error_code"] for p in answer["topics"][0]["partitions"]]
    assert codes[:2] == [0, 0]  # orders has 2 partitions
    assert codes[2:MAX_PRODUCER_PARTITIONS] == [UNKNOWN] * (MAX_PRODUCER_PARTITIONS - 2)
    assert codes[MAX_PRODUCER_PARTITIONS:] == [int(ErrorCode.INVALID_REQUEST)] * 5


async def test_describe_producers_counts_before_listing_and_lists_off_the_loop(
    node: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition named again is INVALID_REQUEST; one whose producers may not fit is
    refused before any is listed; a long list is made on a worker thread while the
    partition's producer state is locked (its appends wait), so it is one moment's."""
    kafka = node.connect()
    for partition in (0, 1):
        await produce_idempotent(node, kafka, "orders", partition, 1)
    crowded = node.partition("orders", 1)._producers
    assert crowded is not None
    now = node.clock.now_ms()
    for pid in range(10_000, 12_000):  # what 2,000 producers writing once leave
        entry = ProducerEntry(0, now)
        entry.batches.append(Appended(0, 0, pid, pid))
        crowded.entries[pid] = entry
    made = 0
    active = service_module.ActiveProducer

    def counted(*fields: int) -> ActiveProducer:
        nonlocal made
        made += 1
        return active(*fields)

    monkeypatch.setattr(service_module, "ActiveProducer", counted)
    monkeypatch.setattr(group_apis, "MAX_LISTED_PRODUCERS", 1_000)
    answer = await kafka.call(
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": "orders", "partition_indexes": [0, 0, 1]}]},
    )
    first, repeated, refused = answer["topics"][0]["partitions"]
    assert (first["error_code"], len(first["active_producers"])) == (NONE, 1)
    assert repeated["error_code"] == refused["error_code"] == int(ErrorCode.INVALID_REQUEST)
    assert made == 1  # partition 1's 2,001 producers were never listed
    monkeypatch.undo()
    threads: list[tuple[str, bool]] = []
    to_thread = asyncio.to_thread

    async def spied(work: Callable[..., Any], /, *args: Any) -> Any:
        threads.append((getattr(work, "__name__", ""), crowded_lock().locked()))
        return await to_thread(work, *args)

    def crowded_lock() -> asyncio.Lock:
        return node.partition("orders", 1)._producers_lock

    monkeypatch.setattr(asyncio, "to_thread", spied)
    listed = await describe_producers(kafka, ("orders", 1))
    assert len(listed[("orders", 1)]["active_producers"]) == 2_001
    assert ("listed", True) in threads  # listed on a thread, under the partition's lock
    assert not crowded_lock().locked()


async def test_describe_producers_needs_read_on_the_topic(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    alice = secured.connect(certificate_principal=ALICE)
    secured.apply(allow(ALICE, "DESCRIBE", "TOPIC", "orders"))
    answered = await describe_producers(alice, ("orders", 0), ("nope", 0))
    assert {tp: a["error_code"] for tp, a in answered.items()} == {
        ("orders", 0): TOPIC_REFUSED,
        ("nope", 0): TOPIC_REFUSED,  # nothing said of whether it exists
    }
    assert [(line["operation"], line["count"]) for line in denials(audit)] == [("READ", 2)]
    secured.apply(allow(ALICE, "READ", "TOPIC", "orders"))
    answered = await describe_producers(alice, ("orders", 0))
    assert answered[("orders", 0)]["error_code"] == NONE


async def test_a_deletion_and_a_commit_in_flight_agree_in_the_view_and_the_log(
    node: InProcessBroker,
) -> None:
    """A commit appended but not yet acknowledged when a deletion arrives: the deletion waits
    for it (coordinator rule 6), so what the coordinator shows is what a new one replays."""
    coordinator = node.coordinator
    await coordinator.commit("racing", None, None, [(("orders", 0), CommittedOffset(1, ""))])
    index = coordinator.offsets_partition("racing")
    offsets = node.partition(OFFSETS_TOPIC, index)
    produce = offsets.produce

    delays = iter([0.05])  # the commit's answer comes late; the deletion's at once

    async def slowly_acknowledged(batch: Any, acks: Any, timeout_s: float) -> Any:
        info = await produce(batch, acks, timeout_s)
        await asyncio.sleep(next(delays, 0))
        return info

    offsets.produce = slowly_acknowledged  # type: ignore[method-assign]
    commit = asyncio.create_task(
        coordinator.commit("racing", None, None, [(("orders", 0), CommittedOffset(7, ""))])
    )
    await asyncio.sleep(0.01)  # the commit is appended
    deletion = await coordinator.delete_offsets("racing", [("orders", 0)])
    await commit
    assert deletion.tombstoned == (("orders", 0),)
    shown = coordinator.committed("racing")
    assert shown == {}  # deleted after the commit it waited for
    topic_id = topic_id_for(OFFSETS_TOPIC)  # a new leader epoch: the log replayed
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=NO_LEADER))
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=BROKER_ID))
    assert coordinator.committed("racing") == shown
    assert not coordinator._gates  # forgotten once unused
