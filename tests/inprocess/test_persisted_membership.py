"""KIP-848 members recorded in `__consumer_offsets` (kraftlite/groups/members_log.py,
coordinator.py rule 10), in-process: what a member was answered is in the log before the
answer, a coordinator whose predecessor recorded every member takes them over as they were
(no rejoin, no freeze), one whose predecessor may not have forgets them (tombstones) and
freezes, and a record that cannot be written takes the answer back."""

from __future__ import annotations

from typing import Any

import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.groups.members_log import (
    CoordinatorMarker,
    parse_coordinator_record,
    parse_member_record,
)
from kraftlite.metadata.records import ConfigRecord
from kraftlite.protocol import batch as fmt
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
    assert group_records(node)[0] == ("marker", CoordinatorMarker(0, node.clock.now_ms()))


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
