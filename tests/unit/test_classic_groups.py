"""Kafka's classic group protocol (groups/classic.py) on its own: a fake clock, real asyncio."""

from __future__ import annotations

import asyncio

import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.classic import ClassicGroup, State


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def group(clock: Clock, **kwargs: object) -> ClassicGroup:
    return ClassicGroup("g", clock, max_size=10, **kwargs)  # type: ignore[arg-type]


async def join(g: ClassicGroup, member_id: str = "", instance_id: str | None = None) -> dict:  # type: ignore[type-arg]
    return await g.join(
        member_id=member_id,
        instance_id=instance_id,
        client_id="c",
        client_host="h",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=5_000,
        protocol_type="consumer",
        protocols=[("range", b"meta")],
    )


async def stable_pair(clock: Clock) -> tuple[ClassicGroup, str, str]:
    g = group(clock)
    first = await join(g)
    assert g.state is State.COMPLETING_REBALANCE and first["leader"] == first["member_id"]
    leader = first["member_id"]
    await g.sync(leader, first["generation_id"], {leader: b"a"})
    joining = asyncio.ensure_future(join(g))
    await asyncio.sleep(0)
    assert g.state is State.PREPARING_REBALANCE
    again = await join(g, leader)
    second = await joining
    assert again["generation_id"] == second["generation_id"] == 2
    assert again["members"] and not second["members"]  # only the leader learns who is in
    follower = second["member_id"]
    waiting = asyncio.ensure_future(g.sync(follower, 2, {}))
    await asyncio.sleep(0)
    await g.sync(leader, 2, {leader: b"a", follower: b"b"})
    assert (await waiting)[2] == b"b"
    assert g.state is State.STABLE
    return g, leader, follower


async def test_a_generation_forms_and_each_member_gets_its_share() -> None:
    g, _, follower = await stable_pair(Clock())
    assert g.describe()["group_state"] == "Stable"
    g.heartbeat(follower, 2)
    with pytest.raises(KraftliteError) as caught:
        g.heartbeat(follower, 1)
    assert caught.value.code is ErrorCode.ILLEGAL_GENERATION


async def test_a_commit_outside_the_membership_is_for_an_empty_group_only() -> None:
    """Kafka's ClassicGroup.validateOffsetCommit: generation -1 and no member (an admin's
    AlterConsumerGroupOffsets, a consumer that assigns itself) while the group has members
    is UNKNOWN_MEMBER_ID (librdkafka's 0081 expects that code)."""
    g, _, _ = await stable_pair(Clock())
    with pytest.raises(KraftliteError) as caught:
        g.check_commit("", -1)
    assert caught.value.code is ErrorCode.UNKNOWN_MEMBER_ID


async def test_commits_are_taken_while_a_rebalance_is_prepared_not_while_it_completes() -> None:
    clock = Clock()
    g, leader, follower = await stable_pair(clock)
    g.check_commit(follower, 2)
    joining = asyncio.ensure_future(join(g))  # a third member: PreparingRebalance
    await asyncio.sleep(0)
    g.check_commit(follower, 2)  # what it processed before giving its partitions up
    with pytest.raises(KraftliteError) as caught:
        g.check_commit(follower, 1)
    assert caught.value.code is ErrorCode.ILLEGAL_GENERATION
    rejoins = [asyncio.ensure_future(join(g, leader)), asyncio.ensure_future(join(g, follower))]
    await asyncio.gather(joining, *rejoins)
    assert g.state is State.COMPLETING_REBALANCE
    with pytest.raises(KraftliteError) as caught:
        g.check_commit(follower, 3)
    assert caught.value.code is ErrorCode.REBALANCE_IN_PROGRESS


async def test_a_leader_that_never_assigns_is_removed_and_the_others_join_again() -> None:
    clock = Clock()
    g, leader, follower = await stable_pair(clock)
    joining = asyncio.ensure_future(join(g))
    await asyncio.sleep(0)
    await asyncio.gather(joining, join(g, leader), join(g, follower))
    waiting = asyncio.ensure_future(g.sync(follower, 3, {}))
    await asyncio.sleep(0)
    g.heartbeat(leader, 3)  # alive, but it never sends the assignment
    clock.ms += 6_000  # past the rebalance timeout
    g.expire()
    assert leader not in g.members
    with pytest.raises(KraftliteError) as caught:
        await waiting
    assert caught.value.code is ErrorCode.REBALANCE_IN_PROGRESS


async def test_a_static_member_that_comes_back_replaces_its_old_self() -> None:
    g = group(Clock())
    first = await join(g, instance_id="pod-1")
    again = await join(g, instance_id="pod-1")
    assert list(g.members) == [again["member_id"]] != [first["member_id"]]
    g.leave("", "pod-1")
    assert not g.members and g.state is State.EMPTY


async def test_a_group_this_broker_no_longer_coordinates_answers_its_waiters() -> None:
    coordinating = True
    g = group(Clock(), still_coordinating=lambda: coordinating, initial_delay_ms=60_000)
    waiting = asyncio.ensure_future(join(g))
    await asyncio.sleep(0.01)
    coordinating = False
    with pytest.raises(KraftliteError) as caught:
        await asyncio.wait_for(waiting, 2)
    assert caught.value.code is ErrorCode.NOT_COORDINATOR


async def test_describing_a_member_whose_protocols_changed_does_not_fail() -> None:
    g, leader, _ = await stable_pair(Clock())
    g.members[leader].protocols = [("other", b"x")]
    assert {m["member_metadata"] for m in g.describe()["members"]} <= {b"", b"meta"}
