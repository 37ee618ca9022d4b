"""KIP-848 members recorded in `__consumer_offsets` (kraftlite/groups/members_log.py,
coordinator.py rule 10), in-process: what a member was answered is in the log before the
answer, a coordinator whose predecessor recorded every member takes them over as they were
(no rejoin, no freeze), one whose predecessor may not have forgets them (tombstones) and
freezes, and a record that cannot be written takes the answer back."""

from __future__ import annotations

from typing import Any

import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC, GroupSettings
from kraftlite.groups.members_log import (
    CoordinatorMarker,
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


async def test_after_a_recorded_move_a_classic_groups_name_waits_out_the_classic_freeze(
    node: InProcessBroker,
) -> None:
    """Classic groups' members are not recorded, their names are (members_log.py rule 8):
    a KIP-848 group under a name the log has as a classic group's may meet the old
    coordinator's classic members, so it waits; any other new group does not."""
    coordinator = node.coordinator
    classic = next(  # a classic group on GROUP's offsets partition
        g
        for g in (f"c{n}" for n in range(1000))
        if coordinator.offsets_partition(g) == coordinator.offsets_partition(GROUP)
    )
    joined = await node.connect().call(ApiKey.JOIN_GROUP, 5, classic_join(classic))
    assert joined["error_code"] == 0, joined
    node.move_coordinator(GROUP, predecessor_recorded=True)
    assert assignment(await coordinator.join(classic, "k1", "c", ["orders"], None)) == set()
    fresh = await coordinator.join(GROUP, "m1", "c", ["orders"], None)
    assert assignment(fresh) == {("orders", 0), ("orders", 1)}


async def test_a_member_too_large_to_record_is_refused_and_goes_back() -> None:
    async with InProcessBroker() as node:
        node.create_topic("orders", partitions=2)
        wide = [f"wide-{n}" for n in range(200)]
        for name in wide:
            node.create_topic(name)
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
