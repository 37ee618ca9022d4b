"""Static group membership (KIP-345) through the Kafka edge in-process (kraftlite/kafka/
handlers.py over one in-process broker, tests/harness/inprocess.py): what a client reads in
the answers. Classic groups: a static member back with a new member id is answered at once
in a Stable group and synced its old share; its old member id is FENCED_INSTANCE_ID on
Heartbeat, SyncGroup, OffsetCommit and LeaveGroup; LeaveGroup v3+ removes members by
instance id with an error per member; DescribeGroups names instance ids. KIP-848's
ConsumerGroupHeartbeat: epoch -2 keeps the assignment for the member that takes the instance
over; an active member's instance id is UNRELEASED_INSTANCE_ID to anyone else."""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

from kraftlite.errors import ErrorCode
from kraftlite.protocol.kafka.messages import ApiKey
from tests.harness.inprocess import InProcessBroker, KafkaConnection, topic_id_for

GROUP = "static"
FENCED = int(ErrorCode.FENCED_INSTANCE_ID)
UNKNOWN = int(ErrorCode.UNKNOWN_MEMBER_ID)
ORDERS_ID = uuid.UUID(topic_id_for("orders"))
SUBSCRIPTION = struct.pack(">hih", 0, 1, 6) + b"orders" + struct.pack(">i", 0)


async def join(
    kafka: KafkaConnection, instance: str | None, member_id: str = "", version: int = 5
) -> dict[str, Any]:
    return await kafka.call(
        ApiKey.JOIN_GROUP,
        version,  # 5: librdkafka's
        {
            "group_id": GROUP,
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": member_id,
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": SUBSCRIPTION}],
        },
    )


async def sync(
    kafka: KafkaConnection,
    member_id: str,
    generation: int,
    instance: str | None,
    assignments: dict[str, bytes] | None = None,
) -> dict[str, Any]:
    return await kafka.call(
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": GROUP,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance,
            "assignments": [
                {"member_id": m, "assignment": a} for m, a in (assignments or {}).items()
            ],
        },
    )


async def heartbeat(
    kafka: KafkaConnection, member_id: str, generation: int, instance: str | None
) -> int:
    answer = await kafka.call(
        ApiKey.HEARTBEAT,
        3,
        {
            "group_id": GROUP,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance,
        },
    )
    return int(answer["error_code"])


async def commit(
    kafka: KafkaConnection, member_id: str, generation: int, instance: str | None
) -> int:
    answer = await kafka.call(
        ApiKey.OFFSET_COMMIT,
        7,
        {
            "group_id": GROUP,
            "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "group_instance_id": instance,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
                    ],
                }
            ],
        },
    )
    return int(answer["topics"][0]["partitions"][0]["error_code"])


async def stable_pair(ka: KafkaConnection, kb: KafkaConnection) -> tuple[dict[str, str], int]:
    """Static members a (the leader, assigned b"A", on connection `ka`) and b (b"B", on
    `kb`), Stable."""
    first = await join(ka, "a")
    a = first["member_id"]
    assert (await sync(ka, a, first["generation_id"], "a", {a: b"A"}))["error_code"] == 0
    joining = asyncio.ensure_future(join(kb, "b"))
    await asyncio.sleep(0.01)
    again, second = await asyncio.gather(join(ka, "a", a), joining)
    b, generation = second["member_id"], second["generation_id"]
    assert again["generation_id"] == generation and again["leader"] == a
    follower = asyncio.ensure_future(sync(kb, b, generation, "b"))
    await asyncio.sleep(0.01)
    assert (await sync(ka, a, generation, "a", {a: b"A", b: b"B"}))["error_code"] == 0
    assert (await follower)["assignment"] == b"B"
    return {"a": a, "b": b}, generation


async def test_a_classic_static_restart_is_answered_at_once_and_fences_the_old_id(
    node: InProcessBroker,
) -> None:
    kafka = node.connect()
    ids, generation = await stable_pair(kafka, node.connect())
    back = await asyncio.wait_for(join(kafka, "b"), 1)  # no rebalance to wait for
    assert back["error_code"] == 0
    assert (back["generation_id"], back["leader"], back["members"]) == (generation, ids["a"], [])
    assert await heartbeat(kafka, ids["a"], generation, "a") == 0  # a: nothing to do
    synced = await sync(kafka, back["member_id"], generation, "b")
    assert (synced["error_code"], synced["assignment"]) == (0, b"B")
    # the replaced member id, wherever it names its instance id
    assert await heartbeat(kafka, ids["b"], generation, "b") == FENCED
    assert (await sync(kafka, ids["b"], generation, "b"))["error_code"] == FENCED
    assert await commit(kafka, ids["b"], generation, "b") == FENCED
    assert await commit(kafka, back["member_id"], generation, "b") == 0
    rejoined = await join(kafka, "b", ids["b"])
    assert rejoined["error_code"] == FENCED
    described = await kafka.call(
        ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP], "include_authorized_operations": False}
    )
    (group,) = described["groups"]
    assert group["group_state"] == "Stable"
    assert sorted((m["group_instance_id"], m["member_assignment"]) for m in group["members"]) == [
        ("a", b"A"),
        ("b", b"B"),
    ]


async def test_a_classic_static_leader_restart_rebalances_nothing(node: InProcessBroker) -> None:
    """As Kafka's (KIP-814): JoinGroup v9 tells the leader back that it leads with
    skip_assignment and the members; before v9 the answer names its old member id as the
    leader, so it syncs as a follower. Either way the other member is not told to rejoin
    and both keep their shares."""
    kafka, other = node.connect(), node.connect()
    ids, generation = await stable_pair(kafka, other)
    old = await asyncio.wait_for(join(kafka, "a", version=5), 1)
    assert (old["error_code"], old["generation_id"]) == (0, generation)
    assert (old["leader"], old["members"]) == (ids["a"], [])  # told its old self leads
    assert await heartbeat(other, ids["b"], generation, "b") == 0
    assert (await sync(kafka, old["member_id"], generation, "a"))["assignment"] == b"A"
    new = await asyncio.wait_for(join(kafka, "a", version=9), 1)
    assert (new["error_code"], new["generation_id"], new["skip_assignment"]) == (
        0,
        generation,
        True,
    )
    assert new["leader"] == new["member_id"] != old["member_id"]
    assert sorted(m["group_instance_id"] for m in new["members"]) == ["a", "b"]
    assert await heartbeat(other, ids["b"], generation, "b") == 0
    assert (await sync(kafka, new["member_id"], generation, "a"))["assignment"] == b"A"
    # a follower's restart is never told to skip: it does not lead
    back = await asyncio.wait_for(join(other, "b", version=9), 1)
    assert (back["skip_assignment"], back["members"]) == (False, [])


async def test_describe_groups_answers_what_the_client_may_do(node: InProcessBroker) -> None:
    """DescribeGroups v3+ with include_authorized_operations: the group's operations the
    client's ACLs grant (everything, with no auth required), also for a group that is
    Dead (none such); -2^31 when not asked."""
    kafka = node.connect()
    await stable_pair(kafka, node.connect())
    for body, expected in [
        ({"groups": [GROUP, "none-such"], "include_authorized_operations": True}, 0b101001000),
        ({"groups": [GROUP, "none-such"], "include_authorized_operations": False}, -(2**31)),
    ]:
        described = await kafka.call(ApiKey.DESCRIBE_GROUPS, 5, body)
        assert [(g["group_state"], g["authorized_operations"]) for g in described["groups"]] == [
            ("Stable", expected),
            ("Dead", expected),
        ]


async def test_leave_group_v3_by_instance_id_answers_per_member(node: InProcessBroker) -> None:
    kafka = node.connect()
    ids, _ = await stable_pair(kafka, node.connect())
    answer = await kafka.call(
        ApiKey.LEAVE_GROUP,
        4,
        {
            "group_id": GROUP,
            "members": [
                {"member_id": "", "group_instance_id": "nobody"},  # no such instance
                {"member_id": ids["a"], "group_instance_id": "b"},  # b is someone else
                {"member_id": "", "group_instance_id": "b"},  # b, by instance id alone
            ],
        },
    )
    assert answer["error_code"] == 0
    assert [(m["group_instance_id"], m["error_code"]) for m in answer["members"]] == [
        ("nobody", UNKNOWN),
        ("b", FENCED),
        ("b", 0),
    ]
    # b is gone and the group rebalances: a is told to join again
    assert await heartbeat(kafka, ids["a"], 2, "a") == int(ErrorCode.REBALANCE_IN_PROGRESS)
    assert await heartbeat(kafka, ids["b"], 2, "b") == UNKNOWN


async def consumer_heartbeat(
    kafka: KafkaConnection,
    member_id: str,
    epoch: int,
    instance: str | None,
    owned: set[int] | None = None,
) -> dict[str, Any]:
    """ConsumerGroupHeartbeat v1 for orders: a join at epoch 0, else what it holds."""
    held = [] if owned is None else [{"topic_id": ORDERS_ID, "partitions": sorted(owned)}]
    return await kafka.call(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        {
            "group_id": "k848",
            "member_id": member_id,
            "member_epoch": epoch,
            "instance_id": instance,
            "rebalance_timeout_ms": 30_000,
            "subscribed_topic_names": ["orders"] if epoch == 0 else None,
            "topic_partitions": held if epoch >= 0 else None,
        },
    )


def partitions(answer: dict[str, Any]) -> set[int]:
    assert answer["error_code"] == 0, answer
    assignment = answer.get("assignment") or {"topic_partitions": []}
    assert all(t["topic_id"] == ORDERS_ID for t in assignment["topic_partitions"])
    return {p for t in assignment["topic_partitions"] for p in t["partitions"]}


async def test_kip848_static_leave_keeps_the_assignment_for_the_next_instance(
    node: InProcessBroker,
) -> None:
    kafka = node.connect()
    # pod-1 (static) and member-2 (dynamic) settle on one partition each
    first = await consumer_heartbeat(kafka, "member-1", 0, "pod-1")
    assert partitions(first) == {0, 1}
    second = await consumer_heartbeat(kafka, "member-2", 0, None)
    assert partitions(second) == set()  # pod-1 still holds both
    told = await consumer_heartbeat(kafka, "member-1", first["member_epoch"], "pod-1", {0, 1})
    kept = partitions(told)
    epoch = told["member_epoch"]
    await consumer_heartbeat(kafka, "member-1", epoch, "pod-1", kept)  # released the other
    given = await consumer_heartbeat(kafka, "member-2", second["member_epoch"], None, set())
    assert len(kept) == 1 and partitions(given) == {0, 1} - kept
    # pod-1 restarts: a static leave (-2), and member-2 gets none of pod-1's partition
    left = await consumer_heartbeat(kafka, "member-1", -2, "pod-1")
    assert (left["error_code"], left["member_epoch"]) == (0, -2)
    meanwhile = await consumer_heartbeat(
        kafka, "member-2", given["member_epoch"], None, {0, 1} - kept
    )
    assert meanwhile["error_code"] == 0 and meanwhile["member_epoch"] == given["member_epoch"]
    # the new process, under a new member id, takes pod-1's partition at pod-1's epoch
    back = await consumer_heartbeat(kafka, "member-1b", 0, "pod-1")
    assert (partitions(back), back["member_epoch"]) == (kept, epoch)
    # the instance is held again: anyone else naming it is refused or fenced
    intruder = await consumer_heartbeat(kafka, "member-3", 0, "pod-1")
    assert intruder["error_code"] == int(ErrorCode.UNRELEASED_INSTANCE_ID)
    stale = await consumer_heartbeat(kafka, "member-1", epoch, "pod-1", kept)
    assert stale["error_code"] == FENCED
    assert (await consumer_heartbeat(kafka, "member-1", -1, "pod-1"))["error_code"] == FENCED
    # epoch -1 leaves for good: member-2 gets pod-1's partition as well
    assert (await consumer_heartbeat(kafka, "member-1b", -1, "pod-1"))["error_code"] == 0
    after = await consumer_heartbeat(kafka, "member-2", given["member_epoch"], None, {0, 1} - kept)
    assert partitions(after) == {0, 1}


async def test_kip848_static_rejoin_at_epoch_0_takes_a_new_subscription(
    node: InProcessBroker,
) -> None:
    """An active static member's epoch 0 under its own member id (a client fenced, or
    resubscribing) is a heartbeat: its new topics are taken, as a dynamic member's."""
    node.create_topic("refunds", partitions=2)
    kafka = node.connect()
    first = await consumer_heartbeat(kafka, "member-1", 0, "pod-1")
    assert partitions(first) == {0, 1}
    again = await kafka.call(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        {
            "group_id": "k848",
            "member_id": "member-1",
            "member_epoch": 0,
            "instance_id": "pod-1",
            "rebalance_timeout_ms": 30_000,
            "subscribed_topic_names": ["orders", "refunds"],
            "topic_partitions": [],
        },
    )
    assert again["error_code"] == 0, again
    refunds = uuid.UUID(topic_id_for("refunds"))
    assert sorted(
        (t["topic_id"], p) for t in again["assignment"]["topic_partitions"] for p in t["partitions"]
    ) == sorted([(ORDERS_ID, 0), (ORDERS_ID, 1), (refunds, 0), (refunds, 1)])
    (member,) = node.coordinator.describe_consumer("k848").members
    assert (member.member_id, member.instance_id) == ("member-1", "pod-1")
    assert member.topics == ("orders", "refunds")


async def test_an_empty_instance_id_is_none_on_every_group_api(node: InProcessBroker) -> None:
    """A client that sends "" for an unset group.instance.id is a dynamic member on every
    API, not one whose JoinGroup is dynamic and whose Heartbeat names an unknown instance."""
    kafka = node.connect()
    joined = await join(kafka, "")
    member, generation = joined["member_id"], joined["generation_id"]
    assert joined["error_code"] == 0 and joined["leader"] == member
    assert (await sync(kafka, member, generation, "", {member: b"A"}))["assignment"] == b"A"
    assert await heartbeat(kafka, member, generation, "") == 0
    assert await commit(kafka, member, generation, "") == 0
    left = await kafka.call(
        ApiKey.LEAVE_GROUP,
        4,
        {"group_id": GROUP, "members": [{"member_id": member, "group_instance_id": ""}]},
    )
    assert [m["error_code"] for m in left["members"]] == [0]
    beat = await consumer_heartbeat(kafka, "member-1", 0, "")
    assert beat["error_code"] == 0
    (described,) = node.coordinator.describe_consumer("k848").members
    assert described.instance_id is None


async def test_instance_ids_kafka_clients_would_not_send_are_invalid_requests(
    node: InProcessBroker,
) -> None:
    """Kafka's rule for group.instance.id (1-249 of [a-zA-Z0-9._-], not "." or ".."), on
    each API that names one: INVALID_REQUEST, and nothing is kept."""
    invalid = int(ErrorCode.INVALID_REQUEST)
    kafka = node.connect()
    for bad in ("a" * 250, "pod 1", ".", "pod\n1"):
        assert (await join(kafka, bad))["error_code"] == invalid
        assert (await consumer_heartbeat(kafka, "member-1", 0, bad))["error_code"] == invalid
    assert node.coordinator.describe_classic(GROUP) is None  # no group made
    assert "k848" not in {g["group"] for g in node.coordinator.local_groups()}
    ids, generation = await stable_pair(kafka, node.connect())
    bad = "a" * 250
    assert await heartbeat(kafka, ids["a"], generation, bad) == invalid
    assert (await sync(kafka, ids["a"], generation, bad))["error_code"] == invalid
    assert await commit(kafka, ids["a"], generation, bad) == invalid
    left = await kafka.call(
        ApiKey.LEAVE_GROUP,
        4,
        {"group_id": GROUP, "members": [{"member_id": ids["a"], "group_instance_id": bad}]},
    )
    assert [m["error_code"] for m in left["members"]] == [invalid]
    assert await heartbeat(kafka, ids["a"], generation, "a") == 0  # still a member
    assert (await consumer_heartbeat(kafka, "member-1", 0, "pod-1"))["error_code"] == 0
    left = await consumer_heartbeat(kafka, "member-1", -2, bad)
    assert left["error_code"] == invalid
