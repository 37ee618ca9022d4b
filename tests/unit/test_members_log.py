"""KIP-848 membership as records (kraftlite/groups/members_log.py): what a record holds
reads back the same, unreadable records are refused as such, which coordinator may trust
what it replays, and which records a change of members makes."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.groups.group import Group, Member
from kraftlite.groups.members_log import (
    COORDINATOR_KEY,
    BadMemberRecordError,
    ClassicMemberState,
    ClassicState,
    CoordinatorMarker,
    MemberState,
    changes,
    classic_key,
    member_key,
    parse_classic_record,
    parse_coordinator_record,
    parse_member_record,
    trusted,
)

partitions = st.tuples(st.sampled_from(["a", "b", "ü/x"]), st.integers(0, 300))


@st.composite
def members(draw: st.DrawFn) -> Member:
    owned = draw(st.dictionaries(partitions, st.integers(0, 50), max_size=60))
    assignment = frozenset(draw(st.sets(st.sampled_from(sorted(owned)))) if owned else ())
    return Member(
        draw(st.text(max_size=5)),
        draw(st.text(max_size=8)),
        frozenset(draw(st.sets(st.sampled_from(["a", "b", "ü/x"])))),
        draw(st.integers(1_000, 30_000)),
        draw(st.integers(0, 10**9)),
        epoch=draw(st.integers(0, 10**6)),
        assignment=assignment,
        owned_since=owned,
        confirmed_epoch=draw(st.integers(0, 10**6)),
        reports=draw(st.booleans()),
        instance_id=draw(st.none() | st.text(min_size=1, max_size=8)),
        away=draw(st.booleans()),
    )


@given(members())
def test_a_member_record_reads_back_as_the_member_less_when_it_was_heard(member: Member) -> None:
    key = member_key("group", member.member_id)
    parsed = parse_member_record(key, MemberState.of(member).value())
    assert parsed is not None
    group, member_id, state = parsed
    assert (group, member_id) == ("group", member.member_id)
    assert state == MemberState.of(member) and state.same_as(member)
    back = state.restore(member.member_id, now_ms=7)
    assert back.last_seen_ms == 7
    assert MemberState.of(back) == state and back.owned == member.owned


def test_partitions_are_stored_as_runs() -> None:
    member = Member(
        "m",
        "c",
        frozenset({"a"}),
        10_000,
        0,
        epoch=4,
        assignment=frozenset(("a", p) for p in range(1000)),
        owned_since={("a", p): 3 if p < 500 else 4 for p in range(1000)},
    )
    value = orjson.loads(MemberState.of(member).value())
    assert value["assignment"] == {"a": [[0, 999, 0]]}
    assert value["owned"] == {"a": [[0, 499, 3], [500, 999, 4]]}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (member_key("g", "m")[:-3], b"{}"),  # a key that is no JSON array of two
        (b"member\x00[1, 2]", None),  # not names
        (member_key("g", "m"), b"not json"),
        (member_key("g", "m"), b'{"client_id": "c"}'),  # fields missing
        (
            member_key("g", "m"),
            orjson.dumps(
                {
                    **orjson.loads(
                        MemberState(
                            "c", frozenset(), 1, 1, frozenset(), {}, 0, False, None, False
                        ).value()
                    ),
                    "owned": {"a": [[5, 2, 1]]},  # a run backwards
                }
            ),
        ),
        (
            member_key("g", "m"),
            orjson.dumps(
                {
                    **orjson.loads(
                        MemberState(
                            "c", frozenset(), 1, 1, frozenset(), {}, 0, False, None, False
                        ).value()
                    ),
                    "assignment": {"a": [[0, 10**9, 0]]},  # a run no topic has
                }
            ),
        ),
        (
            member_key("g", "m"),
            orjson.dumps(
                {
                    **orjson.loads(
                        MemberState(
                            "c", frozenset(), 1, 1, frozenset(), {}, 0, False, None, False
                        ).value()
                    ),
                    "epoch": True,  # not an integer
                }
            ),
        ),
    ],
)
def test_unreadable_member_records_are_refused_as_such(key: bytes, value: bytes | None) -> None:
    with pytest.raises(BadMemberRecordError):
        parse_member_record(key, value)


def test_other_records_are_not_member_records() -> None:
    assert parse_member_record(b"offset\x00[]", b"{}") is None
    assert parse_member_record(None, None) is None
    assert parse_coordinator_record(b"offset\x00[]", b"{}") is None
    assert parse_member_record(member_key("g", "m"), None) == ("g", "m", None)  # removed


def test_the_coordinator_marker_reads_back_and_refuses_garbage() -> None:
    marker = CoordinatorMarker(7, 123)
    assert parse_coordinator_record(COORDINATOR_KEY, marker.value()) == marker
    for value in (None, b"[]", b'{"leader_epoch": "7", "frozen_for_ms": 0}'):
        with pytest.raises(BadMemberRecordError):
            parse_coordinator_record(COORDINATOR_KEY, value)


@pytest.mark.parametrize(
    ("epoch", "marker_epoch", "expected"),
    [
        (0, None, True),  # the first leader: nobody before it
        (5, 4, True),  # the predecessor recorded every member
        (5, 5, True),  # this broker again, in its own epoch (a load after a failed write)
        (5, None, False),  # nobody recorded members (an older kraftlite)
        (5, 3, False),  # epoch 4 led by someone who did not record (or leaderless)
        (5, 6, False),  # a marker from the future is no predecessor's
    ],
)
def test_which_replayed_members_a_coordinator_trusts(
    epoch: int, marker_epoch: int | None, expected: bool
) -> None:
    marker = None if marker_epoch is None else CoordinatorMarker(marker_epoch, 0)
    assert trusted(epoch, marker) is expected


def test_changes_record_what_changed_and_tombstone_who_went() -> None:
    group = Group("g")
    counts = {"t": 4}
    group.join("m1", "c", ["t"], 10_000, 0, counts)
    group.join("m2", "c", ["t"], 10_000, 0, counts)
    stored: dict[str, MemberState] = {}
    records = changes("g", group.members, group.touched, stored, 1 << 20)[0]
    assert sorted(k for k, _ in records) == sorted([member_key("g", "m1"), member_key("g", "m2")])
    assert stored.keys() == {"m1", "m2"}
    for now in range(1, 6):  # until settled: each confirms its last answer
        for member in ("m1", "m2"):
            group.heartbeat(member, group.members[member].epoch, now, counts)
    assert group.state == "stable"
    assert {k for k, _ in changes("g", group.members, group.touched, stored, 1 << 20)[0]} == {
        member_key("g", "m1"),
        member_key("g", "m2"),
    }
    assert all(stored[m].same_as(group.members[m]) for m in ("m1", "m2"))
    group.touched.clear()  # (Shard.record takes them)
    # a heartbeat that changes nothing records nothing
    group.heartbeat("m1", group.members["m1"].epoch, 6, counts)
    assert group.touched == {"m1"}
    assert changes("g", group.members, group.touched, stored, 1 << 20)[0] == []
    group.touched.clear()
    group.leave("m1", 7)
    assert changes("g", group.members, group.touched, stored, 1 << 20)[0] == [
        (member_key("g", "m1"), None)
    ]
    assert stored.keys() == {"m2"}


def test_a_tombstone_goes_before_the_grant_it_makes_possible() -> None:
    """m1 leaves, m2 takes its partitions: one list of records, the tombstone first."""
    group = Group("g")
    counts = {"t": 2}
    group.join("m1", "c", ["t"], 10_000, 0, counts)
    stored: dict[str, MemberState] = {}
    changes("g", group.members, group.touched, stored, 1 << 20)
    group.touched.clear()
    group.join("m2", "c", ["t"], 10_000, 1, counts)
    group.leave("m1", 2)
    group.heartbeat("m2", group.members["m2"].epoch, 3, counts)
    records = changes("g", group.members, group.touched, stored, 1 << 20)[0]
    assert [k for k, _ in records] == [member_key("g", "m1"), member_key("g", "m2")]
    assert records[0][1] is None and stored["m2"].assignment == {("t", 0), ("t", 1)}


def test_a_member_whose_record_would_not_fit_is_not_stored() -> None:
    group = Group("g")
    group.join("m1", "c", ["t"], 10_000, 0, {"t": 2})
    stored: dict[str, MemberState] = {}
    records, refused = changes("g", group.members, group.touched, stored, 40)
    assert (records, refused, stored) == ([], ["m1"], {})


def test_classic_group_records_read_back() -> None:
    assert parse_classic_record(classic_key("c/1"), b"{}") == ("c/1", True, None)
    assert parse_classic_record(classic_key("c/1"), None) == ("c/1", False, None)
    state = ClassicState(
        3,
        "consumer",
        "range",
        "m1",
        (
            ClassicMemberState(
                "m1", None, "c", "/10.0.0.1", 10_000, 30_000, (("range", b"\x00s"),), b"a"
            ),
            ClassicMemberState("m2", "pod-2", "c", "/10.0.0.2", 10_000, 30_000, (), b""),
        ),
    )
    assert parse_classic_record(classic_key("c/1"), state.value()) == ("c/1", True, state)
    bare = parse_classic_record(classic_key("c/1"), state.value(metadata=False))
    assert bare is not None and bare[2] is not None
    assert bare[2].members[0].protocols == (("range", b""),)  # the assignor's name stays
    static = ClassicMemberState("m3", "pod-3", "c", "/h", 1, 1, (("range", b"sub"),), b"")
    kept = ClassicState(3, "consumer", "range", "m1", (static,)).value(metadata=False)
    parsed = parse_classic_record(classic_key("c/1"), kept)
    assert parsed is not None and parsed[2] is not None
    # a static member's subscription stays: a rebalance may hand it to the leader while
    # the member is away
    assert parsed[2].members[0].protocols == (("range", b"sub"),)
    assert parse_classic_record(member_key("g", "m"), b"{}") is None
    with pytest.raises(BadMemberRecordError):
        parse_classic_record(b"classic\x00[1, 2]", b"{}")
