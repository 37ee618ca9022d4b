"""Static group membership (KIP-345) in the group state machines, on their own: a classic
group (groups/classic.py rule 8; a fake clock, real asyncio) and kraftlite's server-side
group behind KIP-848's heartbeat (groups/group.py rule 10; pure, time as an input)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.classic import ClassicGroup, State, same_subscription, subscribed_topics
from kraftlite.groups.group import Group
from kraftlite.protocol import names

# -- classic groups ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def subscription(*topics: str, user_data: bytes = b"", owned: int = 0) -> bytes:
    """Kafka's ConsumerProtocolSubscription v1: topics, user data, owned partitions."""
    out = struct.pack(">hi", 1, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", len(user_data)) + user_data
    out += struct.pack(">i", owned)  # owned partitions: `owned` topics, none named here
    return out


ORDERS = subscription("orders")


async def join(
    g: ClassicGroup,
    member_id: str = "",
    instance_id: str | None = None,
    metadata: bytes = ORDERS,
    protocols: tuple[str, ...] = ("range",),
    skip_assignment: bool = False,
) -> dict[str, Any]:
    return await g.join(
        member_id=member_id,
        instance_id=instance_id,
        client_id=instance_id or "dynamic",
        client_host="h",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=5_000,
        protocol_type="consumer",
        protocols=[(name, metadata) for name in protocols],
        skip_assignment=skip_assignment,
    )


async def stable(g: ClassicGroup, *instances: str | None) -> dict[str | None, str]:
    """A Stable generation of one member per instance id (None: a dynamic member), each
    assigned its own name as bytes; instance id -> member id. The first is the leader."""
    first = await join(g, instance_id=instances[0])
    ids = {instances[0]: first["member_id"]}
    await g.sync(first["member_id"], first["generation_id"], {})
    if len(instances) > 1:
        joining = [asyncio.ensure_future(join(g, instance_id=i)) for i in instances[1:]]
        await asyncio.sleep(0)
        answers = await asyncio.gather(join(g, first["member_id"], instances[0]), *joining)
        ids |= {i: a["member_id"] for i, a in zip(instances[1:], answers[1:], strict=True)}
    leader = g.leader
    assert leader == ids[instances[0]]
    followers = [
        asyncio.ensure_future(g.sync(m, g.generation, {}, i)) for i, m in ids.items() if m != leader
    ]
    await asyncio.sleep(0)
    assignments = {m: (i or "dynamic").encode() for i, m in ids.items()}
    await g.sync(leader, g.generation, assignments, instances[0])
    await asyncio.gather(*followers)
    assert g.state is State.STABLE
    return ids


def fails(code: ErrorCode, call: Any, *args: Any) -> None:
    with pytest.raises(KraftliteError) as caught:
        call(*args)
    assert caught.value.code is code, caught.value


async def test_a_static_member_restarting_in_a_stable_group_rebalances_nothing() -> None:
    g = ClassicGroup("g", Clock(), max_size=10)
    ids = await stable(g, "a", "b")
    generation = g.generation
    back = await asyncio.wait_for(join(g, instance_id="b"), 1)  # answered at once
    assert g.state is State.STABLE and g.generation == generation
    assert back["generation_id"] == generation and back["member_id"] != ids["b"]
    assert (back["leader"], back["members"]) == (ids["a"], [])
    g.heartbeat(ids["a"], generation, "a")  # the other member is not told to rejoin
    assert (await g.sync(back["member_id"], generation, {}, "b"))[2] == b"b"  # its old share
    assert g.members[ids["a"]].assignment == b"a"
    # the old member id is fenced wherever it names its instance id
    fails(ErrorCode.FENCED_INSTANCE_ID, g.heartbeat, ids["b"], generation, "b")
    fails(ErrorCode.FENCED_INSTANCE_ID, g.check_commit, ids["b"], generation, "b")
    fails(ErrorCode.FENCED_INSTANCE_ID, g.leave, ids["b"], "b")
    fails(ErrorCode.UNKNOWN_MEMBER_ID, g.heartbeat, ids["b"], generation)  # and is gone
    g.check_commit(back["member_id"], generation, "b")
    assert sorted(m["group_instance_id"] for m in g.describe()["members"]) == ["a", "b"]


async def test_a_static_leader_restarting_before_join_group_v9_rebalances_nothing() -> None:
    """Kafka's answer to a pre-v9 JoinGroup (librdkafka's, kafka-python's): the leader back
    leads again in the group, but is told its old self leads, so it syncs as a follower and
    gets its old share; the other member notices nothing (librdkafka's 0102). Its next join
    as the leader rebalances, and that generation tells it it leads."""
    g = ClassicGroup("g", Clock(), max_size=10)
    ids = await stable(g, "a", "b")
    generation = g.generation
    back = await asyncio.wait_for(join(g, instance_id="a"), 1)  # answered at once
    assert g.state is State.STABLE and g.generation == generation
    assert (back["leader"], back["members"]) == (ids["a"], [])  # its old self
    assert "skip_assignment" not in back or not back["skip_assignment"]
    assert g.leader == back["member_id"] != ids["a"]
    g.heartbeat(ids["b"], generation, "b")  # the other member is not told to rejoin
    assert (await g.sync(back["member_id"], generation, {}, "a"))[2] == b"a"
    fails(ErrorCode.FENCED_INSTANCE_ID, g.heartbeat, ids["a"], generation, "a")
    # the leader joins again (its client saw the topics change): a rebalance it leads
    again = asyncio.ensure_future(join(g, back["member_id"], "a"))
    await asyncio.sleep(0)
    assert g.state is State.PREPARING_REBALANCE
    led, followed = await asyncio.gather(again, join(g, ids["b"], "b"))
    assert led["generation_id"] == generation + 1
    assert led["leader"] == followed["leader"] == back["member_id"]
    assert sorted(m["group_instance_id"] for m in led["members"]) == ["a", "b"]


async def test_a_static_leader_restarting_with_join_group_v9_is_told_to_skip_assignment() -> None:
    """KIP-814: a v9 answer tells the leader back that it leads, lists the members (its
    client watches their topics) and that it need not assign; nothing rebalances."""
    g = ClassicGroup("g", Clock(), max_size=10)
    ids = await stable(g, "a", "b")
    generation = g.generation
    back = await asyncio.wait_for(join(g, instance_id="a", skip_assignment=True), 1)
    assert g.state is State.STABLE and g.generation == generation
    assert back["skip_assignment"] is True
    assert back["leader"] == back["member_id"] == g.leader != ids["a"]
    assert sorted(m["group_instance_id"] for m in back["members"]) == ["a", "b"]
    g.heartbeat(ids["b"], generation, "b")
    # it syncs with no assignments (it skipped them): the current ones stay
    assert (await g.sync(back["member_id"], generation, {}, "a"))[2] == b"a"
    assert g.members[ids["b"]].assignment == b"b"
    # a follower's restart is never told to skip: only a leader assigns
    follower = await asyncio.wait_for(join(g, instance_id="b", skip_assignment=True), 1)
    assert not follower.get("skip_assignment") and follower["members"] == []


@pytest.mark.parametrize(
    "metadata, protocols",
    [
        (subscription("orders", "refunds"), ("range",)),  # another subscription
        (ORDERS, ("roundrobin",)),  # a protocol that changes the group's
    ],
    ids=["new-topics", "new-protocol"],
)
async def test_a_static_member_back_with_another_subscription_rebalances(
    metadata: bytes, protocols: tuple[str, ...]
) -> None:
    g = ClassicGroup("g", Clock(), max_size=10)
    ids = await stable(g, "a", "b")
    g.members[ids["a"]].protocols.append(("roundrobin", ORDERS))
    back = asyncio.ensure_future(join(g, instance_id="b", metadata=metadata, protocols=protocols))
    await asyncio.sleep(0)
    assert g.state is State.PREPARING_REBALANCE and not back.done()
    fails(ErrorCode.REBALANCE_IN_PROGRESS, g.heartbeat, ids["a"], g.generation, "a")
    answers = await asyncio.gather(join(g, ids["a"], "a", protocols=("range", "roundrobin")), back)
    assert answers[1]["generation_id"] == answers[0]["generation_id"] == 3


async def test_the_same_topics_are_the_same_subscription_whatever_else_changed() -> None:
    """Owned partitions, user data and generation differ from one join to the next (a
    cooperative or sticky assignor's): a restart with the same topics is no new subscription."""
    assert subscribed_topics(subscription("b", "a")) == frozenset({"a", "b"})
    assert same_subscription("consumer", ORDERS, subscription("orders", user_data=b"x", owned=0))
    assert not same_subscription("consumer", ORDERS, subscription("refunds"))
    assert not same_subscription("consumer", ORDERS, None)
    assert subscribed_topics(b"\x00\x01\x00\x00\x00\x05") is None  # cut short
    assert same_subscription("connect", b"opaque", b"opaque")  # others: the bytes
    assert not same_subscription("connect", b"opaque", b"other")


async def test_a_static_member_back_while_the_assignment_is_made_rebalances() -> None:
    """CompletingRebalance: the leader may already be assigning to the old member id, so the
    group rebalances (Kafka's rule); the old id's waiting sync is FENCED_INSTANCE_ID."""
    g = ClassicGroup("g", Clock(), max_size=10)
    ids = await stable(g, "a", "b")
    third = asyncio.ensure_future(join(g))
    await asyncio.sleep(0)
    await asyncio.gather(third, join(g, ids["a"], "a"), join(g, ids["b"], "b"))
    assert g.state is State.COMPLETING_REBALANCE
    old_sync = asyncio.ensure_future(g.sync(ids["b"], g.generation, {}, "b"))
    await asyncio.sleep(0)
    back = asyncio.ensure_future(join(g, instance_id="b"))
    await asyncio.sleep(0)
    with pytest.raises(KraftliteError) as caught:
        await old_sync
    assert caught.value.code is ErrorCode.FENCED_INSTANCE_ID
    assert g.state is State.PREPARING_REBALANCE and not back.done()


async def test_a_waiting_join_of_the_old_member_is_fenced() -> None:
    g = ClassicGroup("g", Clock(), max_size=10)
    ids = await stable(g, "a", "b")
    old_join = asyncio.ensure_future(join(g, ids["b"], "b", metadata=subscription("refunds")))
    await asyncio.sleep(0)
    assert g.state is State.PREPARING_REBALANCE
    back = asyncio.ensure_future(join(g, instance_id="b"))
    await asyncio.sleep(0)
    with pytest.raises(KraftliteError) as caught:
        await old_join
    assert caught.value.code is ErrorCode.FENCED_INSTANCE_ID
    answers = await asyncio.gather(join(g, ids["a"], "a"), back)
    assert {a["member_id"] for a in answers} == set(g.members)


async def test_a_static_member_away_during_a_rebalance_keeps_its_place_a_dynamic_one_not() -> None:
    """Kafka's completeClassicGroupJoin removes only dynamic members that did not join
    again: the static one is in the next generation, the leader assigns it, and it gets
    that share back when it returns, without a rebalance."""
    clock = Clock()
    g = ClassicGroup("g", clock, max_size=10)
    ids = await stable(g, "a", "b", None)
    joining = asyncio.ensure_future(join(g, ids["a"], "a", metadata=subscription("o", "p")))
    await asyncio.sleep(0)
    clock.ms += 5_001  # past the rebalance timeout; b (static) and the dynamic one are away
    g.expire()
    answer = await joining
    assert set(g.members) == {ids["a"], ids["b"]}  # the dynamic one is gone, b stays
    assert [m["group_instance_id"] for m in answer["members"]] == ["a", "b"]
    await g.sync(ids["a"], answer["generation_id"], {ids["a"]: b"a2", ids["b"]: b"b2"}, "a")
    assert g.state is State.STABLE
    back = await join(g, instance_id="b")
    assert back["generation_id"] == answer["generation_id"]
    assert (await g.sync(back["member_id"], back["generation_id"], {}, "b"))[2] == b"b2"


async def test_a_static_members_session_still_ends_and_then_the_group_rebalances() -> None:
    clock = Clock()
    g = ClassicGroup("g", clock, max_size=10)
    ids = await stable(g, "a", "b")
    clock.ms += 8_000
    g.heartbeat(ids["a"], g.generation, "a")  # a is alive, b silent
    clock.ms += 2_001  # b's 10 s session is over
    fails(ErrorCode.REBALANCE_IN_PROGRESS, g.heartbeat, ids["a"], g.generation, "a")
    assert list(g.members) == [ids["a"]]
    fails(ErrorCode.UNKNOWN_MEMBER_ID, g.heartbeat, ids["b"], g.generation, "b")


async def test_only_static_members_away_form_no_generation_until_one_is_back() -> None:
    """Nobody joined by the deadline (Kafka's "no members rejoined"): the join phase goes on
    until a static member returns, or its session ends."""
    clock = Clock()
    g = ClassicGroup("g", clock, max_size=10)
    ids = await stable(g, "a", "b")
    g.leave(ids["a"], "a")  # a rebalance none of the others joins yet
    assert g.state is State.PREPARING_REBALANCE
    clock.ms += 5_001
    g.expire()
    generation = g.generation
    assert g.state is State.PREPARING_REBALANCE and list(g.members) == [ids["b"]]
    answer = await join(g, instance_id="b")
    assert answer["generation_id"] == generation + 1 and answer["leader"] == answer["member_id"]


async def test_leave_group_by_instance_id_and_its_per_member_errors() -> None:
    g = ClassicGroup("g", Clock(), max_size=10)
    ids = await stable(g, "a", "b", "c")
    fails(ErrorCode.UNKNOWN_MEMBER_ID, g.leave, "", "nobody")
    fails(ErrorCode.FENCED_INSTANCE_ID, g.leave, ids["a"], "b")  # b is another member
    fails(ErrorCode.UNKNOWN_MEMBER_ID, g.leave, "", None)
    g.leave("", "b")  # an admin removes a static member by its instance id alone
    assert ids["b"] not in g.members and g.state is State.PREPARING_REBALANCE
    g.leave(ids["c"])  # by member id alone (LeaveGroup v0-2: librdkafka's unsubscribe)
    assert list(g.members) == [ids["a"]]


async def test_a_follower_joining_again_unchanged_is_told_the_generation_a_leader_rebalances() -> (
    None
):
    """Kafka's classicGroupJoinExistingMember: nothing changed for the group, no rebalance."""
    g = ClassicGroup("g", Clock(), max_size=10)
    ids = await stable(g, None, "b")
    generation = g.generation
    again = await asyncio.wait_for(join(g, ids["b"], "b"), 1)
    assert (again["generation_id"], again["members"]) == (generation, [])
    assert g.state is State.STABLE
    leader = asyncio.ensure_future(join(g, ids[None]))
    await asyncio.sleep(0)
    assert g.state is State.PREPARING_REBALANCE and not leader.done()
    leader.cancel()


async def test_a_static_member_back_in_a_full_group_is_not_new() -> None:
    g = ClassicGroup("g", Clock(), max_size=2)
    await stable(g, "a", "b")
    with pytest.raises(KraftliteError) as caught:
        await join(g, instance_id="c")
    assert caught.value.code is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert (await join(g, instance_id="b"))["generation_id"] == g.generation


@pytest.mark.parametrize(
    "instance_id, valid",
    [
        *((i, True) for i in ("valid", "INSTANCE", "ar6", "_0-9_.", "...", "a" * 249)),
        *((i, False) for i in ("", "foo bar", ".", "..", "foo:bar", "a/b", "é", "a" * 250)),
        *((i, False) for i in ("a\n", "\x00", None, 7)),
    ],
)
def test_instance_ids_are_those_kafkas_clients_accept(instance_id: object, valid: bool) -> None:
    """Kafka's JoinGroupRequest.validateGroupInstanceId, and its test's examples."""
    assert names.is_instance_id(instance_id) is valid


# -- KIP-848 groups (group.py rule 10) ----------------------------------------------------------

COUNTS = {"a": 4}
ALL = frozenset(("a", p) for p in range(4))


def settled_pair() -> tuple[Group, frozenset[tuple[str, int]], frozenset[tuple[str, int]]]:
    """m1 (instance i1) and m2 (instance i2) with two partitions each, both confirmed."""
    group = Group("g")
    group.join("m1", "c", ["a"], 10_000, 0, COUNTS, reports=True, instance_id="i1")
    group.heartbeat("m1", 1, 1, COUNTS, reported=ALL)
    group.join("m2", "c", ["a"], 10_000, 2, COUNTS, reports=True, instance_id="i2")
    one = group.heartbeat("m1", 1, 3, COUNTS, reported=ALL)  # told to release two
    group.heartbeat("m1", one.member_epoch, 4, COUNTS, reported=one.assignment)
    two = group.heartbeat("m2", 1, 5, COUNTS, reported=frozenset())
    group.heartbeat("m2", two.member_epoch, 6, COUNTS, reported=two.assignment)
    assert one.assignment | two.assignment == ALL and not one.assignment & two.assignment
    return group, one.assignment, two.assignment


def test_a_temporary_leave_keeps_the_assignment_for_whoever_takes_the_instance_over() -> None:
    group, one, two = settled_pair()
    epoch = group.members["m2"].epoch
    group.leave("m2", 10, instance_id="i2", temporary=True)  # epoch -2
    for now in (1_000, 5_000, 9_000):  # m1 heartbeats on: it never gets m2's partitions
        assert group.heartbeat("m1", group.members["m1"].epoch, now, COUNTS).assignment == one
    back = group.join("m2-new", "c", ["a"], 10_000, 9_500, COUNTS, reports=True, instance_id="i2")
    assert (back.assignment, back.member_epoch) == (two, epoch)  # the same, at the same epoch
    assert set(group.members) == {"m1", "m2-new"}
    group.check_commit("m2-new", epoch, two, 9_600)  # its partitions, owned since before
    assert group.heartbeat("m1", group.members["m1"].epoch, 9_700, COUNTS).assignment == one


def test_the_same_member_id_joining_again_after_a_temporary_leave_takes_it_back() -> None:
    group, _, two = settled_pair()
    group.leave("m2", 10, instance_id="i2", temporary=True)
    back = group.join("m2", "c", ["a"], 10_000, 20, COUNTS, reports=True, instance_id="i2")
    assert back.assignment == two and not group.members["m2"].away


def test_an_instance_id_held_by_an_active_member_is_unreleased() -> None:
    group, one, _ = settled_pair()
    with pytest.raises(KraftliteError) as caught:
        group.join("m3", "c", ["a"], 10_000, 20, COUNTS, reports=True, instance_id="i1")
    assert caught.value.code is ErrorCode.UNRELEASED_INSTANCE_ID
    assert set(group.members) == {"m1", "m2"}
    retried = group.join("m1", "c", ["a"], 10_000, 20, COUNTS, reports=True, instance_id="i1")
    assert retried.assignment == one  # its own join again (a lost answer): not a conflict


def test_requests_naming_an_instance_id_speak_for_its_holder_only() -> None:
    group, _, _ = settled_pair()
    for call in (
        lambda: group.heartbeat("m2", 1, 20, COUNTS, instance_id="i1"),
        lambda: group.leave("m2", 20, instance_id="i1"),
    ):
        with pytest.raises(KraftliteError) as caught:
            call()
        assert caught.value.code is ErrorCode.FENCED_INSTANCE_ID
    with pytest.raises(KraftliteError) as caught:
        group.heartbeat("m1", 1, 20, COUNTS, instance_id="nobody")
    assert caught.value.code is ErrorCode.UNKNOWN_MEMBER_ID


def test_a_join_naming_an_away_members_id_but_not_its_instance_keeps_nothing_alive() -> None:
    """Kafka fences an epoch-0 heartbeat for a member at epoch -2. A join without the
    instance id (the HTTP edge's, which has none) or with another one is refused and does
    not extend the away member's session: its partitions are free once it ends."""
    group, _, _ = settled_pair()
    group.leave("m2", 10, instance_id="i2", temporary=True)
    for now, instance in ((3_000, None), (6_000, "i3"), (9_000, None)):
        group.heartbeat("m1", group.members["m1"].epoch, now, COUNTS)  # m1 stays alive
        with pytest.raises(KraftliteError) as caught:
            group.join("m2", "c", ["a"], 10_000, now, COUNTS, instance_id=instance)
        assert caught.value.code is ErrorCode.FENCED_MEMBER_EPOCH
        assert group.members["m2"].away and group.members["m2"].last_seen_ms == 10
    assert set(group.members) == {"m1", "m2"}  # nobody took instance i3
    answer = group.heartbeat("m1", group.members["m1"].epoch, 10_011, COUNTS)
    assert "m2" not in group.members and answer.assignment == ALL  # its session ended


def test_an_away_member_neither_heartbeats_nor_commits() -> None:
    group, _, two = settled_pair()
    epoch = group.members["m2"].epoch
    group.leave("m2", 10, instance_id="i2", temporary=True)
    with pytest.raises(KraftliteError) as caught:
        group.heartbeat("m2", epoch, 20, COUNTS, instance_id="i2")
    assert caught.value.code is ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(KraftliteError) as caught:
        group.check_commit("m2", epoch, two, 20)
    assert caught.value.code is ErrorCode.FENCED_MEMBER_EPOCH


def test_an_away_member_whose_session_ends_frees_its_partitions() -> None:
    group, _, _ = settled_pair()
    group.leave("m2", 10, instance_id="i2", temporary=True)
    group.heartbeat("m1", group.members["m1"].epoch, 9_000, COUNTS)
    assert "m2" in group.members  # away, for its session (10 s from its leave)
    answer = group.heartbeat("m1", group.members["m1"].epoch, 10_011, COUNTS)
    assert "m2" not in group.members and answer.assignment == ALL
    fresh = group.join("m2-new", "c", ["a"], 10_000, 10_020, COUNTS, instance_id="i2")
    assert fresh.assignment == frozenset()  # a new member: m1 still owns everything


def test_leaving_with_epoch_minus_one_is_for_good() -> None:
    group, _, _ = settled_pair()
    group.leave("m2", 10, instance_id="i2")
    assert "m2" not in group.members
    answer = group.heartbeat("m1", group.members["m1"].epoch, 20, COUNTS)
    assert answer.assignment == ALL


def test_taking_over_a_full_group_is_not_a_new_member() -> None:
    group, _, two = settled_pair()
    group.max_size = 2
    group.leave("m2", 10, instance_id="i2", temporary=True)
    back = group.join("m2-new", "c", ["a"], 10_000, 20, COUNTS, reports=True, instance_id="i2")
    assert back.assignment == two


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("join"), st.sampled_from(["i1", "i2", "i3"])),
            st.tuples(st.just("beat"), st.sampled_from(["i1", "i2", "i3"])),
            st.tuples(st.just("away"), st.sampled_from(["i1", "i2", "i3"])),
            st.tuples(st.just("leave"), st.sampled_from(["i1", "i2", "i3"])),
            st.tuples(st.just("time"), st.integers(0, 4_000)),
        ),
        max_size=60,
    )
)
def test_static_members_coming_and_going_never_make_two_owners(history: list[tuple]) -> None:
    """Static KIP-848 members (each instance a process that restarts under a new member id
    after a temporary leave, and holds nothing then) next to the rules of group.py: no
    partition in two members' owned sets, what each process holds within what its member
    owns, and an away member's partitions go to no one else while it is away."""
    group, now, restarts = Group("g"), 0, 0
    member_of: dict[str, str] = {}  # instance -> its process's member id
    holds: dict[str, frozenset[tuple[str, int]]] = {}  # instance -> what its process holds
    for event in history:
        try:
            match event:
                case ("join", instance) if instance not in member_of:
                    restarts += 1
                    member_id = f"{instance}-{restarts}"
                    answer = group.join(
                        member_id, "c", ["a"], 3_000, now, COUNTS, reports=True,
                        instance_id=instance,
                    )  # fmt: skip
                    member_of[instance], holds[instance] = member_id, frozenset()
                case ("beat", instance) if instance in member_of:
                    member = group.members[member_of[instance]]
                    answer = group.heartbeat(
                        member.member_id, member.epoch, now, COUNTS,
                        reported=holds[instance], instance_id=instance,
                    )  # fmt: skip
                    holds[instance] = answer.assignment  # releases at once, takes the new
                case ("away" | "leave", instance) if instance in member_of:
                    group.leave(
                        member_of.pop(instance), now, instance_id=instance,
                        temporary=event[0] == "away",
                    )  # fmt: skip
                    del holds[instance]  # a process that left holds nothing
                case ("time", dt):
                    now += dt
        except KraftliteError as exc:
            # expired (UNKNOWN_MEMBER_ID), or its instance still held (UNRELEASED)
            assert exc.code in {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNRELEASED_INSTANCE_ID}
            instance = event[1]
            member_of.pop(instance, None)
            holds.pop(instance, None)
        group.expire(now)
        for instance in list(member_of):
            if member_of[instance] not in group.members:  # expired: the process stops
                del member_of[instance], holds[instance]
        owned = [(m.member_id, tp) for m in group.members.values() for tp in m.owned]
        assert len({tp for _, tp in owned}) == len(owned), owned
        for instance, held in holds.items():
            assert held <= group.members[member_of[instance]].owned
        for member in group.members.values():
            assert member.away or member.instance_id in member_of
