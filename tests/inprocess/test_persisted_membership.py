"""KIP-848 members recorded in `__consumer_offsets` (kraftlite/groups/members_log.py,
coordinator.py rule 10), in-process: what a member was answered is in the log before the
answer, a coordinator whose predecessor recorded every member takes them over as they were
(no rejoin, no freeze), one whose predecessor may not have forgets them (tombstones) and
freezes, and a record that cannot be written takes the answer back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC, GroupSettings
from kraftlite.groups.members_log import (
    CoordinatorMarker,
    parse_classic_record,
    parse_coordinator_record,
    parse_member_record,
)
from kraftlite.metadata.records import ConfigRecord, PartitionChangeRecord
from kraftlite.protocol import batch as fmt
from kraftlite.protocol.kafka.messages import ApiKey
from tests.harness.inprocess import InProcessBroker, topic_id_for

GROUP = "g"


def group_records(node: InProcessBroker) -> list[tuple[str, Any]]:
    """The membership records of the group's offsets partition, in log order."""
    log = node.partition(OFFSETS_TOPIC, node.coordinator.offsets_partition(GROUP)).log
    found: list[tuple[str, Any]] = []
    for batch in fmt.decode_stream(log.read(log.log_start_offset, 1 << 20)):
        for record in batch.records():
            if (member := parse_member_record(record.key, record.value)) is not None:
                found.append(("member", member))
            elif (marker := parse_coordinator_record(record.key, record.value)) is not None:
                found.append(("marker", marker))
    return found


def recorded_members(node: InProcessBroker) -> dict[str, Any]:
    """Each member's last record (None: removed)."""
    last: dict[str, Any] = {}
    for kind, item in group_records(node):
        if kind == "member" and item[0] == GROUP:
            last[item[1]] = item[2]
    return {m: s for m, s in last.items() if s is not None}


async def settle(node: InProcessBroker, members: list[str]) -> dict[str, int]:
    """Heartbeats until every member holds its share; their epochs."""
    epochs = dict.fromkeys(members, 1)
    for _ in range(4):
        for member in members:
            answer = await node.coordinator.heartbeat(GROUP, member, epochs[member])
            epochs[member] = answer["member_epoch"]
    return epochs


def assignment(answer: dict[str, Any]) -> set[tuple[str, int]]:
    return {(e["topic"], p) for e in answer["assignment"] for p in e["partitions"]}


async def test_an_answer_is_in_the_log_before_it_is_given(node: InProcessBroker) -> None:
    joined = await node.coordinator.join(GROUP, "m1", "c", ["orders"], None)
    state = recorded_members(node)["m1"]
    assert (state.epoch, state.assignment) == (joined["member_epoch"], assignment(joined))
    assert group_records(node)[0] == ("marker", CoordinatorMarker(0, 0))  # epoch 0: no freeze


async def test_members_come_back_as_they_were_after_a_move_from_a_recording_coordinator(
    node: InProcessBroker,
) -> None:
    coordinator = node.coordinator
    await coordinator.join(GROUP, "m1", "c", ["orders"], None)
    await coordinator.join(GROUP, "m2", "c", ["orders"], None)
    epochs = await settle(node, ["m1", "m2"])
    before = coordinator.describe(GROUP)
    assert before["state"] == "stable"
    node.move_coordinator(GROUP, predecessor_recorded=True)
    # the same members, epochs and assignments: nobody joins again
    assert coordinator.describe(GROUP) == before
    answers = {m: await coordinator.heartbeat(GROUP, m, epochs[m]) for m in ("m1", "m2")}
    assert {m: a["member_epoch"] for m, a in answers.items()} == epochs
    # and no freeze: what a member lets go of goes to the other at once
    await coordinator.leave(GROUP, "m2")
    taken = await coordinator.heartbeat(GROUP, "m1", epochs["m1"])
    assert assignment(taken) == {("orders", 0), ("orders", 1)}


async def test_a_move_past_an_unrecorded_epoch_forgets_the_members_and_freezes(
    node: InProcessBroker,
) -> None:
    coordinator = node.coordinator
    await coordinator.join(GROUP, "m1", "c", ["orders"], None)
    epochs = await settle(node, ["m1"])
    node.move_coordinator(GROUP, predecessor_recorded=False)  # the leaderless epoch left no marker
    with pytest.raises(KraftliteError) as unknown:  # no members, no offsets: no group
        coordinator.describe(GROUP)
    assert unknown.value.code is ErrorCode.GROUP_ID_NOT_FOUND
    with pytest.raises(KraftliteError) as info:
        await coordinator.heartbeat(GROUP, "m1", epochs["m1"])
    assert info.value.code is ErrorCode.UNKNOWN_MEMBER_ID
    rejoined = await coordinator.join(GROUP, "m1-again", "c", ["orders"], None)
    assert assignment(rejoined) == set()  # frozen: the old member may still consume
    assert set(recorded_members(node)) == {"m1-again"}  # m1 tombstoned with the new marker
    # a later recording move brings back who joined since, never the forgotten member
    node.move_coordinator(GROUP, predecessor_recorded=True)
    assert [m["member_id"] for m in coordinator.describe(GROUP)["members"]] == ["m1-again"]


async def test_a_record_that_is_not_written_takes_its_answer_back(node: InProcessBroker) -> None:
    coordinator = node.coordinator
    await coordinator.join(GROUP, "m1", "c", ["orders"], None)
    topic_id = topic_id_for(OFFSETS_TOPIC)
    node.apply(ConfigRecord(topic_id=topic_id, name="min.insync.replicas", value="2"))
    with pytest.raises(KraftliteError) as info:  # ISR [1] < 2: refused, nothing appended
        await coordinator.join(GROUP, "m2", "c", ["orders"], None)
    assert info.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
    node.apply(ConfigRecord(topic_id=topic_id, name="min.insync.replicas", value="1"))
    # the view is the log's again: m2 never became a member, m1 still is
    assert [m["member_id"] for m in coordinator.describe(GROUP)["members"]] == ["m1"]
    assert set(recorded_members(node)) == {"m1"}
    again = await coordinator.join(GROUP, "m2", "c", ["orders"], None)
    assert again["member_epoch"] == 1


async def test_an_answer_never_rests_on_a_record_replayed_but_not_acknowledged() -> None:
    """A member record appended but not acknowledged (the follower never fetches) fails
    its request; the log then replayed holds it, and no answer may come from it before an
    in-sync replica has it (members_log.py rule 3: the replay's own marker goes first)."""
    settings = GroupSettings(
        offsets_partitions=3, initial_rebalance_delay_ms=0, commit_timeout_s=0.2
    )
    async with InProcessBroker(groups=settings) as node:
        node.create_topic("orders", partitions=2)
        node.register_broker(2)
        index = node.coordinator.offsets_partition(GROUP)
        topic_id = topic_id_for(OFFSETS_TOPIC)
        node.apply(
            PartitionChangeRecord(topic_id=topic_id, partition=index, replicas=(1, 2), isr=(1, 2))
        )
        partition = node.partition(OFFSETS_TOPIC, index)
        with pytest.raises(KraftliteError) as timed_out:  # broker 2 never fetches
            await node.coordinator.consumer_heartbeat(GROUP, "m1", 0, "c", ["orders"], None)
        assert timed_out.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert partition.log.high_watermark < partition.log.log_end_offset  # appended
        with pytest.raises(KraftliteError) as waited:  # the replayed m1 is not answered
            await node.coordinator.consumer_heartbeat(GROUP, "m1", 1, "c", None, None)
        assert waited.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_a_replay_after_a_failed_record_keeps_the_classic_groups(
    node: InProcessBroker,
) -> None:
    """Classic groups are in no record: a replay in the same leadership keeps them."""
    coordinator = node.coordinator
    classic = "classic"
    group = next(  # a KIP-848 group on the classic group's offsets partition
        g
        for g in (f"g{n}" for n in range(1000))
        if coordinator.offsets_partition(g) == coordinator.offsets_partition(classic)
    )
    joined = await node.connect().call(ApiKey.JOIN_GROUP, 5, classic_join(classic))
    assert joined["error_code"] == 0, joined
    await coordinator.join(group, "m1", "c", ["orders"], None)
    await fail_one_record(node, group, "m2")
    described = coordinator.describe_classic(classic)
    assert described is not None
    assert [m["member_id"] for m in described["members"]] == [joined["member_id"]]


async def test_a_replay_after_a_failed_record_keeps_the_freeze_it_had_left(
    node: InProcessBroker,
) -> None:
    coordinator = node.coordinator
    node.move_coordinator(GROUP, predecessor_recorded=False)  # a freeze of 30 s
    assert assignment(await coordinator.join(GROUP, "m1", "c", ["orders"], None)) == set()
    advance(node, 5_000)
    await fail_one_record(node, GROUP, "m2")
    # replayed in the same leadership: its own marker is trusted, and the freeze it had
    # left then (30 s) runs again from the replay: never shorter
    assert [m["member_id"] for m in coordinator.describe(GROUP)["members"]] == ["m1"]
    for _ in range(29):
        advance(node, 1_000)
        assert assignment(await coordinator.heartbeat(GROUP, "m1", 1)) == set()
    advance(node, 1_001)
    assert assignment(await coordinator.heartbeat(GROUP, "m1", 1)) == {
        ("orders", 0),
        ("orders", 1),
    }


def advance(node: InProcessBroker, ms: int) -> None:
    node.clock.advance(ms)
    node.heartbeat()  # the broker's leadership lease: not under test


async def fail_one_record(node: InProcessBroker, group: str, member: str) -> None:
    """A join whose record cannot be written (ISR [1] < min.insync.replicas 2: refused,
    nothing appended), then the offsets topic writable again."""
    topic_id = topic_id_for(OFFSETS_TOPIC)
    node.apply(ConfigRecord(topic_id=topic_id, name="min.insync.replicas", value="2"))
    try:
        with pytest.raises(KraftliteError) as refused:
            await node.coordinator.join(group, member, "c", ["orders"], None)
        assert refused.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
    finally:
        node.apply(ConfigRecord(topic_id=topic_id, name="min.insync.replicas", value="1"))


async def classic_generation(node: InProcessBroker, group: str) -> tuple[str, int]:
    """A classic group of one member through JoinGroup and SyncGroup: (member id,
    generation)."""
    kafka = node.connect()
    joined = await kafka.call(ApiKey.JOIN_GROUP, 5, classic_join(group))
    assert joined["error_code"] == 0, joined
    member, generation = joined["member_id"], joined["generation_id"]
    synced = await kafka.call(
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": None,
            "assignments": [{"member_id": member, "assignment": b"orders-0,1"}],
        },
    )
    assert (synced["error_code"], synced["assignment"]) == (0, b"orders-0,1"), synced
    return member, generation


async def classic_heartbeat(node: InProcessBroker, group: str, member: str, gen: int) -> int:
    answer = await node.connect().call(
        ApiKey.HEARTBEAT,
        3,
        {"group_id": group, "generation_id": gen, "member_id": member, "group_instance_id": None},
    )
    return int(answer["error_code"])


async def test_a_classic_group_comes_back_in_its_generation_after_a_recorded_move(
    node: InProcessBroker,
) -> None:
    """Classic groups are recorded too (members_log.py rule 8): each generation before its
    members are told their assignments. The new coordinator has it Stable, and its members
    heartbeat on; a KIP-848 member cannot take the name meanwhile."""
    coordinator = node.coordinator
    classic = next(  # a classic group on GROUP's offsets partition
        g
        for g in (f"c{n}" for n in range(1000))
        if coordinator.offsets_partition(g) == coordinator.offsets_partition(GROUP)
    )
    member, generation = await classic_generation(node, classic)
    node.move_coordinator(GROUP, predecessor_recorded=True)
    assert await classic_heartbeat(node, classic, member, generation) == 0
    described = coordinator.describe_classic(classic)
    assert described is not None and described["group_state"] == "Stable"
    assert [(m["member_id"], m["member_assignment"]) for m in described["members"]] == [
        (member, b"orders-0,1")
    ]
    with pytest.raises(KraftliteError) as refused:
        await coordinator.join(classic, "k1", "c", ["orders"], None)
    assert refused.value.code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # past an unrecorded epoch: forgotten (tombstoned), and the freeze holds it back
    node.move_coordinator(GROUP, predecessor_recorded=False)
    assert await classic_heartbeat(node, classic, member, generation) == int(
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    await coordinator.join(GROUP, "m1", "c", ["orders"], None)  # (its records written)
    node.move_coordinator(GROUP, predecessor_recorded=True)
    assert coordinator.describe_classic(classic) is None


async def test_a_member_too_large_to_record_is_refused_and_goes_back() -> None:
    async with InProcessBroker() as node:
        wide = wide_topics(node)
        coordinator = node.coordinator
        await coordinator.join(GROUP, "m1", "c", ["orders"], None)  # (makes the topic)
        topic_id = topic_id_for(OFFSETS_TOPIC)
        node.apply(ConfigRecord(topic_id=topic_id, name="max.message.bytes", value="4000"))
        with pytest.raises(KraftliteError) as refused:  # 200 topics' runs: over 3000 bytes
            await coordinator.join(GROUP, "m2", "c", wide, None)
        assert refused.value.code is ErrorCode.INVALID_REQUEST
        assert "too large to record" in refused.value.message
        # m2 never became a member; the partition's other members are unharmed
        assert [m["member_id"] for m in coordinator.describe(GROUP)["members"]] == ["m1"]
        assert set(recorded_members(node)) == {"m1"}
        assert (await coordinator.heartbeat(GROUP, "m1", 1))["member_epoch"] == 1


def wide_topics(node: InProcessBroker) -> list[str]:
    """`orders` and 200 topics of one partition: a subscription to all 200 makes a member
    record of over 3000 bytes (no runs across topics)."""
    node.create_topic("orders", partitions=2)
    wide = [f"wide-{n}" for n in range(200)]
    for name in wide:
        node.create_topic(name)
    return wide


def classic_join(group: str) -> dict[str, Any]:
    return {
        "group_id": group,
        "session_timeout_ms": 30_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"subscription"}],
    }


async def test_a_member_record_that_cannot_be_read_makes_the_members_untrusted(
    node: InProcessBroker,
) -> None:
    coordinator = node.coordinator
    await coordinator.join(GROUP, "m1", "c", ["orders"], None)
    partition = node.partition(OFFSETS_TOPIC, coordinator.offsets_partition(GROUP))
    garbage = fmt.encode_batch(
        [b"not json"], keys=[b'member\x00["g", "m9"]'], timestamps=[node.clock.now_ms()]
    )
    partition.log.append(garbage, partition.leader_epoch)
    node.move_coordinator(GROUP, predecessor_recorded=True)
    with pytest.raises(KraftliteError) as unknown:  # forgotten, not half-trusted
        await coordinator.heartbeat(GROUP, "m1", 1)
    assert unknown.value.code is ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_freeze_that_ended_is_not_taken_over_again(node: InProcessBroker) -> None:
    coordinator = node.coordinator
    node.move_coordinator(GROUP, predecessor_recorded=False)  # a freeze of 30 s
    answer = await coordinator.join(GROUP, "m1", "c", ["orders"], None)
    for _ in range(31):  # through the freeze, heartbeating
        advance(node, 1_000)
        answer = await coordinator.heartbeat(GROUP, "m1", answer["member_epoch"])
    answer = await coordinator.heartbeat(GROUP, "m1", answer["member_epoch"])
    assert assignment(answer) == {("orders", 0), ("orders", 1)}
    await fail_one_record(node, GROUP, "m2")  # replayed: the freeze's end was recorded
    await coordinator.leave(GROUP, "m1")
    joined = await coordinator.join(GROUP, "m3", "c", ["orders"], None)
    assert assignment(joined) == {("orders", 0), ("orders", 1)}


async def test_a_classic_group_mid_rebalance_goes_on_across_a_replay(
    node: InProcessBroker,
) -> None:
    """Its timer runs while the shard waits to be replayed; it must not take that for a
    move and close itself (members_log.py: a replay in the same leadership)."""
    coordinator = node.coordinator
    classic = "classic"
    group = next(
        g
        for g in (f"g{n}" for n in range(1000))
        if coordinator.offsets_partition(g) == coordinator.offsets_partition(classic)
    )
    joined = await node.connect().call(ApiKey.JOIN_GROUP, 5, classic_join(classic))
    assert joined["error_code"] == 0, joined
    second = asyncio.ensure_future(  # a second member: the group rebalances
        node.connect().call(ApiKey.JOIN_GROUP, 5, classic_join(classic))
    )
    await asyncio.sleep(0.05)
    await coordinator.join(group, "m1", "c", ["orders"], None)
    await fail_one_record(node, group, "m2")
    await asyncio.sleep(0.6)  # the group's timer ticks while the shard is not replayed yet
    again = await node.connect().call(
        ApiKey.JOIN_GROUP, 5, {**classic_join(classic), "member_id": joined["member_id"]}
    )
    assert again["error_code"] == 0, again
    assert (await second)["error_code"] == 0


async def test_a_name_is_never_a_classic_and_a_kip848_group_at_once() -> None:
    async with InProcessBroker(groups=GroupSettings(initial_rebalance_delay_ms=0)) as node:
        node.create_topic("orders", partitions=2)
        coordinator = node.coordinator
        await coordinator.join("warm", "w", "c", ["orders"], None)  # (makes the topic)
        making = asyncio.ensure_future(coordinator.classic_for_join("mixed", 10_000))
        await asyncio.sleep(0)  # it waits for the name's record
        assert not making.done()
        joined = await coordinator.join("mixed", "m1", "c", ["orders"], None)  # KIP-848
        assert assignment(joined)
        with pytest.raises(KraftliteError) as refused:  # the classic one gives way
            await making
        assert refused.value.code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


async def test_a_refused_take_over_leaves_the_away_static_member_as_it_was() -> None:
    async with InProcessBroker() as node:
        wide = wide_topics(node)
        coordinator = node.coordinator
        await coordinator.join(GROUP, "a", "c", ["orders"], None, instance_id="i")
        await coordinator.leave(GROUP, "a", instance_id="i", temporary=True)
        topic_id = topic_id_for(OFFSETS_TOPIC)
        node.apply(ConfigRecord(topic_id=topic_id, name="max.message.bytes", value="4000"))
        with pytest.raises(KraftliteError) as refused:
            await coordinator.join(GROUP, "b", "c", wide, None, instance_id="i")
        assert refused.value.code is ErrorCode.INVALID_REQUEST
        await coordinator.join(GROUP, "c", "c", ["orders"], None)  # (waits for records)
        assert "a" in recorded_members(node)
        members = {m["member_id"] for m in coordinator.describe(GROUP)["members"]}
        assert members == {"a", "c"}


async def test_expiries_too_many_for_one_batch_go_in_several() -> None:
    async with InProcessBroker() as node:
        node.create_topic("orders", partitions=2)
        coordinator = node.coordinator
        members = [f"member-{n:04d}-{'x' * 16}" for n in range(200)]
        for member in members:
            await coordinator.join(GROUP, member, "c", ["orders"], None)
        topic_id = topic_id_for(OFFSETS_TOPIC)
        node.apply(ConfigRecord(topic_id=topic_id, name="max.message.bytes", value="8000"))
        advance(node, 11_000)  # every session over: 200 tombstones, 12 KB, at once
        joined = await coordinator.join(GROUP, "late", "c", ["orders"], None)
        assert assignment(joined) == {("orders", 0), ("orders", 1)}
        assert set(recorded_members(node)) == {"late"}


# -- the third review's findings --------------------------------------------------------------


def same_partition(node: InProcessBroker, prefix: str) -> str:
    """A group name on GROUP's offsets partition."""
    coordinator = node.coordinator
    return next(
        g
        for g in (f"{prefix}{n}" for n in range(1000))
        if coordinator.offsets_partition(g) == coordinator.offsets_partition(GROUP)
    )


async def classic_sync(
    node: InProcessBroker,
    group: str,
    member: str,
    generation: int,
    instance: str | None = None,
    assignments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    body = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": instance,
        "assignments": assignments or [],
    }
    return await node.connect().call(ApiKey.SYNC_GROUP, 3, body)


def last_classic_record(node: InProcessBroker, group: str) -> Any:
    log = node.partition(OFFSETS_TOPIC, node.coordinator.offsets_partition(GROUP)).log
    last: Any = None
    for batch in fmt.decode_stream(log.read(log.log_start_offset, 1 << 22)):
        for record in batch.records():
            parsed = parse_classic_record(record.key, record.value)
            if parsed is not None and parsed[0] == group:
                last = parsed
    return last


async def static_heartbeat(node: InProcessBroker, group: str, member: str, generation: int) -> int:
    body = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": "i1",
    }
    return int((await node.connect().call(ApiKey.HEARTBEAT, 3, body))["error_code"])


async def test_a_static_member_replaced_in_a_stable_group_stays_replaced_after_a_move(
    node: InProcessBroker,
) -> None:
    group = same_partition(node, "s")
    static = {**classic_join(group), "group_instance_id": "i1"}
    joined = await node.connect().call(ApiKey.JOIN_GROUP, 5, static)
    old, generation = joined["member_id"], joined["generation_id"]
    share = [{"member_id": old, "assignment": b"orders-0,1"}]
    assert (await classic_sync(node, group, old, generation, "i1", share))["error_code"] == 0
    restarted = await node.connect().call(ApiKey.JOIN_GROUP, 5, static)  # no member id
    assert restarted["error_code"] == 0 and restarted["generation_id"] == generation
    new = restarted["member_id"]
    node.move_coordinator(GROUP, predecessor_recorded=True)
    assert await static_heartbeat(node, group, new, generation) == 0
    fenced = await static_heartbeat(node, group, old, generation)
    assert fenced == int(ErrorCode.FENCED_INSTANCE_ID)


async def test_after_a_kraftlite_that_recorded_no_classic_generation_classic_groups_freeze(
    node: InProcessBroker,
) -> None:
    coordinator = node.coordinator
    group = same_partition(node, "u")
    await coordinator.join(GROUP, "m1", "c", ["orders"], None)  # (makes the topic)
    node.move_coordinator(GROUP, predecessor_recorded=True, records_classic=False)
    classic = await coordinator.classic_for_join(group, 30_000)
    assert classic.frozen_until_ms >= node.clock.monotonic_ms() + 30_000
    # while KIP-848 members were recorded: they come back
    assert [m["member_id"] for m in coordinator.describe(GROUP)["members"]] == ["m1"]


async def test_a_replay_after_a_failed_record_records_its_classic_groups_again(
    node: InProcessBroker,
) -> None:
    coordinator = node.coordinator
    group = same_partition(node, "o")
    member, generation = await classic_generation(node, group)
    await coordinator.join(GROUP, "m1", "c", ["orders"], None)
    partition = node.partition(OFFSETS_TOPIC, coordinator.offsets_partition(GROUP))
    garbage = fmt.encode_batch(
        [b"not json"], keys=[b'member\x00["g", "m9"]'], timestamps=[node.clock.now_ms()]
    )
    partition.log.append(garbage, partition.leader_epoch)
    await fail_one_record(node, GROUP, "m2")  # replayed, untrusted: the classic group kept
    await coordinator.join(GROUP, "m3", "c", ["orders"], None)  # (its records written)
    recorded = last_classic_record(node, group)
    assert recorded is not None and recorded[2] is not None  # its generation, not a tombstone
    assert recorded[2].generation == generation
    assert await classic_heartbeat(node, group, member, generation) == 0


async def test_a_second_leader_sync_while_the_first_is_recorded_gets_the_same_answer(
    node: InProcessBroker,
) -> None:
    coordinator = node.coordinator
    group = same_partition(node, "d")
    joined = await node.connect().call(ApiKey.JOIN_GROUP, 5, classic_join(group))
    leader, generation = joined["member_id"], joined["generation_id"]
    first = asyncio.ensure_future(
        classic_sync(
            node, group, leader, generation, None, [{"member_id": leader, "assignment": b"X1"}]
        )
    )
    await asyncio.sleep(0)
    second = asyncio.ensure_future(
        classic_sync(
            node, group, leader, generation, None, [{"member_id": leader, "assignment": b"X2"}]
        )
    )
    answers = [await first, await second]
    assert [(a["error_code"], a["assignment"]) for a in answers] == [(0, b"X1"), (0, b"X1")]
    assert [m.assignment for m in last_classic_record(node, group)[2].members] == [b"X1"]
    node.move_coordinator(GROUP, predecessor_recorded=True)
    described = coordinator.describe_classic(group)
    assert described is not None and described["members"][0]["member_assignment"] == b"X1"


async def test_a_sweep_while_a_classic_groups_name_is_recorded_keeps_the_name(
    node: InProcessBroker,
) -> None:
    coordinator = node.coordinator
    await coordinator.join(GROUP, "m1", "c", ["orders"], None)
    group = same_partition(node, "n")
    making = asyncio.ensure_future(coordinator.classic_for_join(group, 30_000))
    await asyncio.sleep(0)  # it waits for its name's record
    assert not making.done()
    advance(node, 1_500)
    coordinator.describe_classic(GROUP)  # any request: the sweep runs
    await making
    await coordinator.join(GROUP, "m2", "c", ["orders"], None)  # (its records written)
    assert last_classic_record(node, group) == (group, True, None)
