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
    really holds is always within what the coordinator thinks it owns; and a member may
    always commit what it held before an answer, with the epoch it held it under (what the
    client does with the partitions an answer takes away).
    """
    group, now = Group("g"), 0
    epochs: dict[str, int] = {}
    holds: dict[str, frozenset] = {}
    released: dict[str, tuple[int, frozenset]] = {}
    for event in history:
        try:
            match event:
                case ("join", member, topics):
                    answer = group.join(member, "c", topics.split(","), 2_000, now, COUNTS)
                    epochs[member], holds[member] = answer.member_epoch, answer.assignment
                case ("beat", member, confirm) if member in epochs:
                    released[member] = (epochs[member], holds[member])
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
        for member, (epoch, held) in released.items():
            if member in group.members:  # what it was told to release, committed on the
                group.check_commit(member, epoch, held, now)  # way out with its old epoch
        released.clear()
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
    # the committed leader epoch (KIP-320) is kept when a commit has one
    with_epoch = b'{"offset": 7, "metadata": "m", "leader_epoch": 4}'
    assert parse_offset_record(key, with_epoch) == (
        "g\x00odd",
        ("t", 3),
        CommittedOffset(7, "m", 4),
    )
    assert parse_offset_record(b"other", value) is None
    for bad_key, bad_value in [(b"offset\x00[1,2]", value), (key, b"{}"), (key, b"not json")]:
        with pytest.raises(BadOffsetRecordError):
            parse_offset_record(bad_key, bad_value)


# ---------------------------------------------------------------- commits: who may commit


def refused(code: ErrorCode, call, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(KraftliteError) as caught:
        call(*args)
    assert caught.value.code is code, caught.value
    return caught.value.message


def stable_member(group: Group, member: str = "m1", now: int = 0) -> frozenset:
    answer = group.join(member, "c", ["a"], 10_000, now, COUNTS)
    group.heartbeat(member, answer.member_epoch, now + 1, COUNTS)
    return answer.assignment


def test_a_commit_for_an_unknown_member_or_group_is_refused() -> None:
    group = Group("g")
    refused(ErrorCode.UNKNOWN_MEMBER_ID, group.check_commit, "ghost", 1, [("a", 0)], 0)
    stable_member(group)
    refused(ErrorCode.UNKNOWN_MEMBER_ID, group.check_commit, "ghost", 1, [("a", 0)], 2)
    refused(ErrorCode.INVALID_REQUEST, group.check_commit, "m1", None, [("a", 0)], 3)


def test_a_commit_from_a_newer_epoch_than_the_members_is_fenced() -> None:
    group = Group("g")
    stable_member(group)
    group.check_commit("m1", 1, [("a", 0)], 2)
    refused(ErrorCode.FENCED_MEMBER_EPOCH, group.check_commit, "m1", 2, [("a", 0)], 3)
    refused(ErrorCode.FENCED_MEMBER_EPOCH, group.check_commit, "m1", 2**63, [("a", 0)], 4)


def test_a_member_commits_only_partitions_it_owns() -> None:
    group = Group("g")
    group.join("m1", "c", ["b"], 10_000, 0, COUNTS)
    group.join("m2", "c", ["a"], 10_000, 0, COUNTS)
    message = refused(ErrorCode.FENCED_MEMBER_EPOCH, group.check_commit, "m1", 1, [("a", 0)], 1)
    assert "does not own" in message
    refused(ErrorCode.FENCED_MEMBER_EPOCH, group.check_commit, "m1", 1, [("c", 0)], 1)
    group.check_commit("m1", 1, [("b", 0), ("b", 2)], 1)


def test_a_commit_older_than_the_partitions_assignment_epoch_is_stale() -> None:
    """KIP-848's assignment epoch: an older epoch is fine for a partition held since then
    (a commit of what is being released), stale for one given back later.
    """
    group = Group("g")
    everything = stable_member(group)  # epoch 1: all six
    group.join("m2", "c", ["a"], 10_000, 2, COUNTS)
    kept = group.heartbeat("m1", 1, 3, COUNTS).assignment  # epoch 2: told to release three
    gone = everything - kept
    group.check_commit("m1", 1, everything, 4)  # releasing: its epoch-1 positions are good
    group.heartbeat("m1", 2, 5, COUNTS)  # released
    group.leave("m2", 6)  # before it took them: they come back to m1 at epoch 3
    back = group.heartbeat("m1", 2, 7, COUNTS)
    assert back.member_epoch == 3 and back.assignment == everything
    message = refused(ErrorCode.STALE_MEMBER_EPOCH, group.check_commit, "m1", 2, gone, 8)
    assert "older than the epoch" in message
    refused(ErrorCode.STALE_MEMBER_EPOCH, group.check_commit, "m1", 0, kept, 8)
    group.check_commit("m1", 1, kept, 9)  # held since epoch 1 without a break
    group.check_commit("m1", 3, everything, 10)


def test_a_commit_without_a_member_is_only_for_a_group_without_members() -> None:
    """Kafka accepts a commit with member epoch -1 (admin, standalone) only for an empty
    group; anything else could overwrite a live member's progress.
    """
    group = Group("g")
    group.check_commit(None, None, [("a", 0)], 0)
    group.join("m1", "c", ["b"], 1_000, 0, COUNTS)  # owns nothing of topic a
    refused(ErrorCode.UNKNOWN_MEMBER_ID, group.check_commit, None, None, [("a", 0)], 1)
    group.check_commit(None, None, [("a", 0)], 1_001 + 1_000)  # m1 expired: empty again


def test_a_full_group_refuses_new_members_but_not_a_retried_join() -> None:
    group = Group("g", max_size=2)
    group.join("m1", "c", ["a"], 1_000, 0, COUNTS)
    group.join("m2", "c", ["a"], 10_000, 0, COUNTS)
    message = refused(
        ErrorCode.GROUP_MAX_SIZE_REACHED, group.join, "m3", "c", ["a"], 10_000, 1, COUNTS
    )
    assert "group.consumer.max.size" in message
    assert group.join("m1", "c", ["a"], 1_000, 2, COUNTS).member_id == "m1"  # its answer lost
    assert sorted(group.members) == ["m1", "m2"]
    group.join("m3", "c", ["a"], 10_000, 5_000, COUNTS)  # m1 expired: room again
    assert sorted(group.members) == ["m2", "m3"]


# ------------------------------------------------------------- commits: what may be committed


def test_offset_metadata_is_bounded_in_utf8_bytes() -> None:
    from kraftlite.groups.offsets import CommittedOffset, check_metadata  # noqa: PLC0415

    def commit(metadata: str) -> list:
        return [(("a", 0), CommittedOffset(1, metadata))]

    check_metadata(commit(""), 4096)
    check_metadata(commit("x" * 4096), 4096)
    check_metadata(commit("€" * 1365), 4096)  # 4095 bytes
    message = refused(ErrorCode.OFFSET_METADATA_TOO_LARGE, check_metadata, commit("x" * 4097), 4096)
    assert "offset.metadata.max.bytes" in message
    refused(ErrorCode.OFFSET_METADATA_TOO_LARGE, check_metadata, commit("€" * 1366), 4096)
    refused(ErrorCode.OFFSET_METADATA_TOO_LARGE, check_metadata, commit("x" * (8 << 20)), 4096)


def test_offsets_only_for_partitions_that_exist() -> None:
    from kraftlite.groups.offsets import check_partitions  # noqa: PLC0415

    check_partitions([("a", 0), ("a", 5), ("b", 2)], COUNTS)
    refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, check_partitions, [("nope", 0)], COUNTS)
    refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, check_partitions, [("a", 6)], COUNTS)
    refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, check_partitions, [("b", 2**63)], COUNTS)


def test_a_commit_carries_a_bounded_number_of_offsets() -> None:
    from kraftlite.groups.offsets import MAX_OFFSETS_PER_COMMIT, check_count  # noqa: PLC0415

    check_count(MAX_OFFSETS_PER_COMMIT)
    refused(ErrorCode.INVALID_REQUEST, check_count, MAX_OFFSETS_PER_COMMIT + 1)


def test_committed_offsets_are_any_int64_at_or_above_zero() -> None:
    """Kafka's rule (issue 25): the high watermark does not bound a commit."""
    from kraftlite.groups.offsets import CommittedOffset, check_in_range  # noqa: PLC0415

    def commit(offset: int) -> list:
        return [(("a", 0), CommittedOffset(offset, ""))]

    for good in (0, 5, 10**12, 2**63 - 1):
        check_in_range(commit(good))
    for bad in (-1, 2**63, 2**64 - 1):
        refused(ErrorCode.OFFSET_OUT_OF_RANGE, check_in_range, commit(bad))


# ------------------------------------------------------------------- reads create no state


def test_reads_create_no_group_and_empty_groups_go() -> None:
    from kraftlite.groups.coordinator import CommittedOffset, Shard  # noqa: PLC0415

    shard = Shard(leader_epoch=0, frozen_until_ms=0, max_size=5)
    assert shard.existing("g", 0).members == {} and shard.groups == {}
    assert not shard.exists("g")
    refused(ErrorCode.UNKNOWN_MEMBER_ID, shard.existing("g", 0).heartbeat, "m", 1, 0, COUNTS)
    refused(ErrorCode.UNKNOWN_MEMBER_ID, shard.existing("g", 0).leave, "m", 0)
    assert shard.groups == {}
    assert shard.existing("g", 0).max_size == 5
    shard.group("g").join("m1", "c", ["a"], 1_000, 0, COUNTS)
    assert shard.exists("g") and list(shard.existing("g", 500).members) == ["m1"]
    assert shard.existing("g", 2_000).members == {}  # expired on a read: the group is gone
    assert shard.groups == {} and not shard.exists("g")
    shard.group("g").join("m1", "c", ["a"], 1_000, 3_000, COUNTS)
    shard.group("h").join("m1", "c", ["a"], 9_000, 3_000, COUNTS)
    shard.maybe_sweep(4_500, 1_000)  # nobody asks for g again: the sweep drops it
    assert list(shard.groups) == ["h"]
    shard.maybe_sweep(20_000, 1_000_000)  # (not yet time to sweep again)
    assert list(shard.groups) == ["h"]
    shard.offsets["o"] = {("a", 0): CommittedOffset(1, "")}
    assert shard.exists("o") and "o" not in shard.groups  # offsets alone keep a group
    shard.group("e")
    shard.drop_if_empty("e", 0)  # a refused join leaves nothing
    assert "e" not in shard.groups


def test_a_kip_848_member_releases_only_what_it_says_it_no_longer_holds() -> None:
    """Rule 9: such a client heartbeats with the new epoch while it is still letting go of
    revoked partitions; only its report of what it holds releases them."""
    group = Group("g")
    first = group.join("m1", "c", ["a"], 10_000, 0, COUNTS, reports=True)
    group.heartbeat("m1", 1, 10, COUNTS, reported=first.assignment)
    group.join("m2", "c", ["a"], 10_000, 20, COUNTS, reports=True)
    revoked = group.heartbeat("m1", 1, 30, COUNTS, reported=first.assignment)
    assert revoked.member_epoch == 2 and len(revoked.assignment) == 3
    group.heartbeat("m1", 2, 40, COUNTS)  # the new epoch, nothing reported: still revoking
    assert group.heartbeat("m2", 1, 50, COUNTS, reported=frozenset()).assignment == frozenset()
    group.heartbeat("m1", 2, 60, COUNTS, reported=revoked.assignment)  # it let go
    taken = group.heartbeat("m2", 1, 70, COUNTS, reported=frozenset())
    assert taken.assignment == COUNTS_A - revoked.assignment


def test_a_heartbeat_takes_a_new_subscription_after_its_epoch_checked_out() -> None:
    group = Group("g")
    group.join("m1", "c", ["a"], 10_000, 0, COUNTS, reports=True)
    with pytest.raises(KraftliteError):
        group.heartbeat("m1", 9, 10, COUNTS, topics=["b"])  # a future epoch: refused
    assert group.members["m1"].topics == frozenset({"a"})
    moved = group.heartbeat("m1", 1, 20, COUNTS, topics=["b"], reported=frozenset())
    assert moved.assignment == frozenset(("b", p) for p in range(3))
