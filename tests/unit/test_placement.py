"""Replica placement spreads leaders and replicas evenly, and across racks when set."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.metadata.placement import assign_replicas


@given(
    brokers=st.integers(1, 9),
    partitions=st.integers(1, 40),
    data=st.data(),
    seed=st.integers(0, 1000),
)
def test_replicas_are_distinct_and_leaders_even(brokers, partitions, data, seed) -> None:
    factor = data.draw(st.integers(1, brokers))
    placed = assign_replicas(
        dict.fromkeys(range(1, brokers + 1)), partitions, factor, random.Random(seed)
    )
    assert len(placed) == partitions
    for replicas in placed:
        assert len(replicas) == factor == len(set(replicas))
        assert set(replicas) <= set(range(1, brokers + 1))
    leaders = Counter(replicas[0] for replicas in placed)
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(1, brokers + 1)) <= 1
    replicas_per_broker = Counter(b for replicas in placed for b in replicas)
    counts = [replicas_per_broker.get(b, 0) for b in range(1, brokers + 1)]
    assert max(counts) - min(counts) <= factor  # near-even replica load


def test_rack_aware_placement_uses_every_rack() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for seed in range(20):
        for replicas in assign_replicas(racks, 12, 3, random.Random(seed)):
            assert {racks[b] for b in replicas} == {"a", "b", "c"}


def test_more_replicas_than_racks_still_places_them() -> None:
    racks = {1: "a", 2: "a", 3: "b"}
    for replicas in assign_replicas(racks, 6, 3, random.Random(1)):
        assert sorted(replicas) == [1, 2, 3]


def test_seeded_placement_is_reproducible() -> None:
    brokers = dict.fromkeys([1, 2, 3])
    assert assign_replicas(brokers, 5, 2, random.Random(7)) == assign_replicas(
        brokers, 5, 2, random.Random(7)
    )


def test_impossible_replication_factor() -> None:
    with pytest.raises(ValueError):
        assign_replicas(dict.fromkeys([1, 2]), 1, 3, random.Random(0))
