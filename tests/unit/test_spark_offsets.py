"""The streaming source's offsets (kraftlite/spark/offsets.py): canonical JSON, never going
backwards, new partitions from 0, and maxOffsetsPerTrigger shared proportionally.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.spark import offsets

positions = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b", "orders"]), st.integers(0, 12)),
    st.integers(0, 10_000),
    max_size=12,
)


def test_canonical_form_is_kafkas_layout_in_a_fixed_order() -> None:
    one = offsets.canonical({("b", 10): 5, ("a", 2): 1, ("b", 9): 7})
    other = offsets.canonical({("b", 9): 7, ("b", 10): 5, ("a", 2): 1})
    assert json.dumps(one) == json.dumps(other) == '{"a": {"2": 1}, "b": {"9": 7, "10": 5}}'


@given(positions)
def test_a_checkpointed_offset_parses_back_to_the_same_positions(pos: offsets.Positions) -> None:
    assert offsets.parse(json.loads(json.dumps(offsets.canonical(pos)))) == pos


@pytest.mark.parametrize(
    "bad",
    [
        {"t": 5},
        {"t": {"x": 1}},
        {"t": {"0": "1"}},
        {"t": {"-1": 3}},
        {"t": [1]},
        {"t": {"0": True}},
        {"t": {"0": -4}},
        {"t": {"²": 1}},
    ],
)
def test_anything_else_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="not a kraftlite source offset"):
        offsets.parse(bad)


def test_an_end_never_goes_back_and_new_partitions_start_at_zero() -> None:
    start = {("t", 0): 50, ("t", 1): 20, ("gone", 0): 7}
    available = {("t", 0): 40, ("t", 1): 30, ("t", 2): 5}  # a new leader's lower HW on t-0
    end = offsets.advance(start, available)
    assert end == {("t", 0): 50, ("t", 1): 30, ("t", 2): 5, ("gone", 0): 7}
    assert offsets.start_of(start, ("t", 2)) == 0


@given(positions, positions, st.integers(1, 5_000))
def test_a_capped_end_shares_exactly_the_limit_and_stays_in_range(
    start: offsets.Positions, available: offsets.Positions, max_rows: int
) -> None:
    end = offsets.advance(start, available)
    capped = offsets.cap(start, end, max_rows)
    assert capped.keys() == end.keys()
    for tp in end:
        assert offsets.start_of(start, tp) <= capped[tp] <= end[tp]
    waiting = sum(end[tp] - offsets.start_of(start, tp) for tp in end)
    taken = sum(capped[tp] - offsets.start_of(start, tp) for tp in end)
    assert taken == min(waiting, max_rows)  # progress whenever something waits


def test_the_cap_is_proportional_to_what_each_partition_has_waiting() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    end = {("t", 0): 900, ("t", 1): 100, ("t", 2): 100}
    assert offsets.cap(start, end, 100) == {("t", 0): 90, ("t", 1): 10, ("t", 2): 100}
    assert offsets.cap(start, end, 5_000) == end
