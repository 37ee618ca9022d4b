"""The uniform sticky assignor and the group state machine (pure, time as an input)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import assign
from kraftlite.groups.group import Group

COUNTS = {"a": 6, "b": 3}


def subs(**members: str) -> dict[str, frozenset[str]]:
    return {m: frozenset(topics.split(",")) for m, topics in members.items()}


def test_assign_is_complete_balanced_and_deterministic() -> None:
    result = assign(subs(m1="a", m2="a", m3="a"), COUNTS, {})
    assert sorted(tp for owned in result.values() for tp in owned) == [("a", p) for p in range(6)]
    assert sorted(len(owned) for owned in result.values()) == [2, 2, 2]
    assert result == assign(subs(m1="a", m2="a", m3="a"), COUNTS, {})


def test_assign_is_sticky_and_moves_little_when_a_member_joins() -> None:
    before = assign(subs(m1="a", m2="a"), COUNTS, {})
    after = assign(subs(m1="a", m2="a", m3="a"), COUNTS, before)
    assert sorted(len(owned) for owned in after.values()) == [2, 2, 2]
    moved = sum(len(before[m] - after[m]) for m in before)
    assert moved == 2  # only what m3 needs
    assert assign(subs(m1="a", m2="a", m3="a"), COUNTS, after) == after  # stable


def test_assign_respects_subscriptions() -> None:
    result = assign(subs(m1="a", m2="b", m3="a,b"), COUNTS, {})
    assert all(tp[0] == "a" for tp in result["m1"])
    assert all(tp[0] == "b" for tp in result["m2"])
    assert sum(len(v) for v in result.values()) == 9
    assert assign(subs(m1="nope"), COUNTS, {}) == {"m1": frozenset()}


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["m1", "m2", "m3", "m4", "m5"]),
        st.sets(st.sampled_from(["a", "b"]), min_size=1),
        min_size=1,
    ),
    st.dictionaries(
        st.sampled_from(["m1", "m2", "m3", "m4", "m5"]),
        st.sets(st.tuples(st.sampled_from(["a", "b", "gone"]), st.integers(0, 7))),
    ),
)
def test_assign_properties(subscriptions: dict, current: dict) -> None:
    subscriptions = {m: frozenset(t) for m, t in subscriptions.items()}
    current = {m: frozenset(t) for m, t in current.items()}
    result = assign(subscriptions, COUNTS, current)
    every = [tp for owned in result.values() for tp in owned]
    wanted = {(t, p) for ts in subscriptions.values() for t in ts for p in range(COUNTS[t])}
    assert sorted(every) == sorted(wanted)  # each exactly once
    for member, owned in result.items():
        assert all(tp[0] in subscriptions[member] for tp in owned)
    if len({frozenset(t) for t in subscriptions.values()}) == 1:  # identical subscriptions
        loads = [len(v) for v in result.values()]
        assert max(loads) - min(loads) <= 1


# ------------------------------------------------------------------------------ the group


def test_a_partition_moves_only_after_its_owner_released_it() -> None:
    group = Group("g")
    first = group.join("m1", "c", ["a"], 10_000, 0, COUNTS)
    assert first.member_epoch == 1 and len(first.assignment) == 6
    group.heartbeat("m1", 1, 10, COUNTS)  # confirms holding all six
    second = group.join("m2", "c", ["a"], 10_000, 20, COUNTS)
    assert second.assignment == frozenset()  # m1 still owns everything
    revoked = group.heartbeat("m1", 1, 30, COUNTS)
    assert revoked.member_epoch == 2 and len(revoked.assignment) == 3  # told to release 3
    assert group.heartbeat("m2", 1, 40, COUNTS).assignment == frozenset()  # not released yet
    group.heartbeat("m1", 2, 50, COUNTS)  # m1 confirms: it released them
    taken = group.heartbeat("m2", 1, 60, COUNTS)
    assert taken.member_epoch == 2 and taken.assignment == COUNTS_A - revoked.assignment
    assert group.state == "reconciling"
    group.heartbeat("m2", 2, 70, COUNTS)
    assert group.state == "stable"


COUNTS_A = frozenset(("a", p) for p in range(6))


def test_expired_members_free_their_partitions() -> None:
    group = Group("g")
    group.join("m1", "c", ["a"], 1_000, 0, COUNTS)
    group.heartbeat("m1", 1, 10, COUNTS)
    group.join("m2", "c", ["a"], 10_000, 20, COUNTS)
    assert group.heartbeat("m2", 1, 500, COUNTS).assignment == frozenset()
    answer = group.heartbeat("m2", 1, 1_500, COUNTS)  # m1 silent for 1.5 s > 1 s
    assert answer.assignment == COUNTS_A and list(group.members) == ["m2"]
    with pytest.raises(KraftliteError) as caught:
        group.heartbeat("m1", 1, 1_600, COUNTS)
    assert caught.value.code is ErrorCode.UNKNOWN_MEMBER_ID


def test_epochs_fence_zombies_and_commits() -> None:
    group = Group("g")
    group.join("m1", "c", ["a"], 10_000, 0, COUNTS)
    group.heartbeat("m1", 1, 1, COUNTS)
    with pytest.raises(KraftliteError) as caught:
        group.heartbeat("m1", 7, 2, COUNTS)
    assert caught.value.code is ErrorCode.FENCED_MEMBER_EPOCH
    group.join("m2", "c", ["a"], 10_000, 3, COUNTS)
    revoked = group.heartbeat("m1", 1, 4, COUNTS)
    gone = COUNTS_A - revoked.assignment
    group.check_commit("m1", 1, gone, 5)  # not yet confirmed: m1 still owns them
    group.heartbeat("m1", 2, 6, COUNTS)
    with pytest.raises(KraftliteError) as caught:
        group.check_commit("m1", 1, gone, 7)  # a zombie commit after the release
    assert caught.value.code is ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(KraftliteError) as caught:
        group.check_commit(None, None, revoked.assignment, 8)  # owned by a member
    assert caught.value.code is ErrorCode.UNKNOWN_MEMBER_ID
    group.check_commit(None, None, [("b", 0)], 9)  # nobody's: a standalone commit


def test_a_new_coordinator_hands_out_nothing_for_one_session() -> None:
    group = Group("g", frozen_until_ms=10_000)
    assert group.join("m1", "c", ["a"], 10_000, 0, COUNTS).assignment == frozenset()
    assert group.heartbeat("m1", 1, 9_999, COUNTS).assignment == frozenset()
    assert group.heartbeat("m1", 1, 10_000, COUNTS).assignment == COUNTS_A


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("join"),
                st.sampled_from(["m1", "m2", "m3"]),
                st.sampled_from(["a", "a,b", "b"]),
            ),
            st.tuples(st.just("beat"), st.sampled_from(["m1", "m2", "m3"]), st.booleans()),
            st.tuples(st.just("leave"), st.sampled_from(["m1", "m2", "m3"])),
            st.tuples(st.just("time"), st.integers(0, 3_000)),
        ),
        max_size=60,
    )
)
def test_never_two_owners(history: list[tuple]) -> None:
    """Members that behave (release at once, confirm with the answered epoch, or lag behind
    with an older one): the coordinator's owned sets never overlap, and what each member
    really holds is always within what the coordinator thinks it owns.
    """
    group, now = Group("g"), 0
    epochs: dict[str, int] = {}
    holds: dict[str, frozenset] = {}
    for event in history:
        try:
            match event:
                case ("join", member, topics):
                    answer = group.join(member, "c", topics.split(","), 2_000, now, COUNTS)
                    epochs[member], holds[member] = answer.member_epoch, answer.assignment
                case ("beat", member, confirm) if member in epochs:
                    sent = epochs[member] if confirm else max(epochs[member] - 1, 0)
                    answer = group.heartbeat(member, sent, now, COUNTS)
                    epochs[member], holds[member] = answer.member_epoch, answer.assignment
                case ("leave", member) if member in epochs:
                    group.leave(member, now)
                    del epochs[member], holds[member]
                case ("time", dt):
                    now += dt
        except KraftliteError as exc:
            assert exc.code is ErrorCode.UNKNOWN_MEMBER_ID  # it expired
            member = event[1]
            epochs.pop(member, None)
            holds.pop(member, None)
        group.expire(now)
        for member in list(holds):
            if member not in group.members:  # expired: a real client stops at once too
                del holds[member], epochs[member]
        owned = [(m.member_id, tp) for m in group.members.values() for tp in m.owned]
        assert len({tp for _, tp in owned}) == len(owned), owned
        for member, held in holds.items():
            assert held <= group.members[member].owned


def test_a_retried_join_is_the_same_member() -> None:
    group = Group("g")
    first = group.join("m1", "c", ["a"], 10_000, 0, COUNTS)
    again = group.join("m1", "c", ["a"], 10_000, 5, COUNTS)  # its answer was lost
    assert again == first and list(group.members) == ["m1"]


def test_offset_records_round_trip_and_bad_ones_are_reported() -> None:
    from kraftlite.groups.coordinator import (  # noqa: PLC0415
        BadOffsetRecordError,
        CommittedOffset,
        offset_key,
        parse_offset_record,
    )

    key = offset_key("g\x00odd", "t", 3)  # any name: the key is a JSON array
    value = b'{"offset": 7, "metadata": "m"}'
    assert parse_offset_record(key, value) == ("g\x00odd", ("t", 3), CommittedOffset(7, "m"))
    assert parse_offset_record(key, None) == ("g\x00odd", ("t", 3), None)
    assert parse_offset_record(b"other", value) is None
    for bad_key, bad_value in [(b"offset\x00[1,2]", value), (key, b"{}"), (key, b"not json")]:
        with pytest.raises(BadOffsetRecordError):
            parse_offset_record(bad_key, bad_value)
