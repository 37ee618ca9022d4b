"""Reassignment planning (metadata/rebalance.py): each rule of its docstring, as a property
over random clusters where it is one. Optimality is proved against references written
independently here: the closed-form lower bound, and exhaustive search on small clusters.
"""

from __future__ import annotations

import ast
import random
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from itertools import combinations, product
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftlite.metadata.rebalance import (
    Move,
    PartitionAssignment,
    _equalise,
    plan_rebalance,
    plan_replication_factor,
)

P = PartitionAssignment
TOPICS = ("a", "b", "c")
PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------ helpers


def full(topic: str, partition: int, *replicas: int) -> PartitionAssignment:
    """A fully replicated partition."""
    return P(topic, partition, replicas, replicas)


def apply(
    partitions: Sequence[PartitionAssignment], moves: Sequence[Move]
) -> dict[tuple[str, int], tuple[int, ...]]:
    """Every partition's replica list once `moves` are done."""
    final = {(p.topic, p.partition): p.replicas for p in partitions}
    for move in moves:
        assert final[(move.topic, move.partition)] == move.old
        final[(move.topic, move.partition)] = move.new
    return final


def replica_counts(
    final: Mapping[tuple[str, int], tuple[int, ...]], eligible: Collection[int]
) -> dict[int, int]:
    counts = dict.fromkeys(eligible, 0)
    for replicas in final.values():
        for b in replicas:
            if b in counts:
                counts[b] += 1
    return counts


def leader_counts(
    final: Mapping[tuple[str, int], tuple[int, ...]], eligible: Collection[int]
) -> dict[int, int]:
    counts = dict.fromkeys(eligible, 0)
    for replicas in final.values():
        if replicas[0] in counts:
            counts[replicas[0]] += 1
    return counts


def spread(counts: Mapping[int, int]) -> int:
    return max(counts.values()) - min(counts.values()) if counts else 0


def copied(moves: Sequence[Move]) -> int:
    return sum(m.replica_moves for m in moves)


def lower_bound(
    partitions: Sequence[PartitionAssignment],
    brokers: Collection[int],
    evacuate: Collection[int] = (),
) -> int:
    """Rule 4's bound: evacuated replicas, plus each broker's excess over its balanced
    target (floor/ceil of the mean, the ceils on the fullest brokers)."""
    eligible = [b for b in brokers if b not in evacuate]
    counts = Counter(b for p in partitions for b in p.replicas if b in eligible)
    evacuated = sum(b in evacuate for p in partitions for b in p.replicas)
    floor, extra = divmod(sum(counts.values()) + evacuated, len(eligible))
    fullest = sorted(eligible, key=lambda b: -counts[b])
    target = {b: floor + (rank < extra) for rank, b in enumerate(fullest)}
    return evacuated + sum(max(0, counts[b] - target[b]) for b in eligible)


def fewest_balanced_moves(
    partitions: Sequence[PartitionAssignment],
    brokers: Collection[int],
    evacuate: Collection[int],
) -> int:
    """Exhaustive search: the fewest replicas copied over every balanced outcome."""
    eligible = sorted(b for b in brokers if b not in evacuate)
    choices = []
    for p in partitions:
        kept = {b for b in p.replicas if b in eligible}
        size = len(kept) + sum(b in evacuate for b in p.replicas)
        choices.append([(c, len(set(c) - kept)) for c in combinations(eligible, size)])
    best = None
    for outcome in product(*choices):
        counts = Counter(b for replicas, _ in outcome for b in replicas)
        loads = [counts[b] for b in eligible]
        if max(loads) - min(loads) <= 1:
            cost = sum(c for _, c in outcome)
            best = cost if best is None else min(best, cost)
    assert best is not None  # some balanced outcome always exists without constraints
    return best


def fewest_leader_changes(
    partitions: Sequence[PartitionAssignment],
    final: Mapping[tuple[str, int], tuple[int, ...]],
    eligible: Collection[int],
) -> int | None:
    """Exhaustive search over leader orders of the final replica sets: the fewest
    preferred-leader changes among balanced ones (None if no order balances)."""
    best = None
    options = [final[(p.topic, p.partition)] for p in partitions]
    for leaders in product(*options):
        counts = Counter(leaders)
        if max(counts[b] for b in eligible) - min(counts[b] for b in eligible) <= 1:
            changes = sum(
                leader != p.replicas[0] for leader, p in zip(leaders, partitions, strict=True)
            )
            best = changes if best is None else min(best, changes)
    return best


def racks_of(replicas: Collection[int], racks: Mapping[int, str | None]) -> int:
    return len({racks[b] for b in replicas if b in racks})


@st.composite
def clusters(
    draw: st.DrawFn,
    *,
    max_brokers: int = 8,
    max_partitions: int = 60,
    evacuating: bool = False,
    fenced: bool = False,
    lagging: bool = False,
    uniform: bool = False,
) -> tuple[list[PartitionAssignment], dict[int, str | None], set[int]]:
    """(partitions, brokers, evacuate): 1-8 brokers of which some hold replicas and the
    rest were just added; optionally brokers to evacuate (some still listed, draining; some
    gone, dead), a fenced broker in neither list, and under-replicated partitions."""
    count = draw(st.integers(1, max_brokers))
    ids = list(range(1, count + 1))
    max_rf = draw(st.integers(1, min(3, count)))
    holders = ids[: draw(st.integers(max_rf, count))]
    evacuate: set[int] = set()
    if evacuating:
        evacuate = set(draw(st.lists(st.sampled_from(ids), max_size=count - max_rf)))
    frozen: set[int] = set()
    if fenced and count - len(evacuate) > max_rf:
        frozen = set(draw(st.lists(st.sampled_from(sorted(set(ids) - evacuate)), max_size=1)))
    dead = (
        set(draw(st.lists(st.sampled_from(sorted(evacuate)), unique=True))) if evacuate else set()
    )
    brokers: dict[int, str | None] = {b: None for b in ids if b not in dead and b not in frozen}
    if len([b for b in brokers if b not in evacuate]) < max_rf:
        evacuate, brokers = set(), {b: None for b in ids if b not in frozen}
    partitions = []
    for index in range(draw(st.integers(1, max_partitions))):
        rf = max_rf if uniform else draw(st.integers(1, max_rf))
        replicas = tuple(draw(st.permutations(holders))[:rf])
        isr = replicas
        if lagging and draw(st.booleans()):
            isr = replicas[: draw(st.integers(1, rf))]
        partitions.append(P(TOPICS[index % 3], index // 3, replicas, isr))
    return partitions, brokers, evacuate


# ------------------------------------------------------------------------------ rules 1-2


@PROPERTY
@given(clusters(evacuating=True, fenced=True, lagging=True))
def test_evacuated_replicas_move_and_fenced_ones_stay(cluster) -> None:
    """Rules 1 and 2 over random clusters, with lagging partitions and a fenced broker."""
    partitions, brokers, evacuate = cluster
    moves = plan_rebalance(partitions, brokers, evacuate=evacuate)
    final = apply(partitions, moves)
    eligible = set(brokers) - evacuate
    for p in partitions:
        new = final[(p.topic, p.partition)]
        assert len(new) == len(p.replicas) == len(set(new))
        assert not set(new) & evacuate
        assert set(new) - set(p.replicas) <= eligible  # nothing given to a fenced broker
        stuck = {b for b in p.replicas if b not in brokers and b not in evacuate}
        assert stuck <= set(new)  # replicas of a fenced broker stay
    for move in moves:
        assert move.old != move.new
        assert move.replica_moves == len(set(move.new) - set(move.old))
    assert moves == sorted(moves, key=lambda m: (m.topic, m.partition))


def test_a_broker_in_both_lists_is_evacuated() -> None:
    partitions = [full("t", 0, 1, 2), full("t", 1, 2, 3)]
    moves = plan_rebalance(partitions, dict.fromkeys([1, 2, 3, 4]), evacuate=[2])
    final = apply(partitions, moves)
    assert all(2 not in replicas for replicas in final.values())


def test_fenced_broker_keeps_replicas_and_is_not_counted() -> None:
    """Broker 3 is fenced (in neither list): its replicas stay, and balance is over 1, 2, 4.
    Broker 1 holds four replicas, 2 holds two and 4 none, so two move to 4."""
    partitions = [full("t", i, 1, 3) for i in range(2)] + [
        full("t", 2, 1, 2),
        full("t", 3, 1, 2),
    ]
    moves = plan_rebalance(partitions, dict.fromkeys([1, 2, 4]), leaders=False)
    final = apply(partitions, moves)
    assert replica_counts(final, [1, 2, 4]) == {1: 2, 2: 2, 4: 2}
    assert all(3 in final[("t", i)] for i in range(2))
    assert copied(moves) == 2


def test_new_replica_takes_the_place_of_the_one_it_replaces() -> None:
    partitions = [full("t", 0, 5, 1, 2, 3)]
    moves = plan_rebalance(partitions, dict.fromkeys([1, 2, 3, 4, 5]), evacuate=[1], leaders=False)
    assert moves == [Move("t", 0, (5, 1, 2, 3), (5, 4, 2, 3))]


def test_unplaceable_partition_is_named() -> None:
    partitions = [full("t", 0, 1, 2), full("u", 7, 1, 2, 3)]
    with pytest.raises(ValueError, match="u-7"):
        plan_rebalance(partitions, dict.fromkeys([1, 2, 3]), evacuate=[3])


def test_nowhere_to_go_is_an_error() -> None:
    with pytest.raises(ValueError, match="t-0"):
        plan_rebalance([full("t", 0, 1)], {}, evacuate=[1])
    assert plan_rebalance([full("t", 0, 1)], {}) == []  # nothing to evacuate: nothing to do


def test_malformed_input_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        plan_rebalance([full("t", 0, 1), full("t", 0, 2)], dict.fromkeys([1, 2]))
    with pytest.raises(ValueError, match="distinct"):
        plan_rebalance([full("t", 0, 1, 1)], dict.fromkeys([1, 2]))


# ------------------------------------------------------------------------------ rules 3-4


@PROPERTY
@given(clusters(evacuating=True, fenced=True))
def test_replicas_end_balanced(cluster) -> None:
    """Rule 3: without racks or lagging partitions, counts end within one."""
    partitions, brokers, evacuate = cluster
    final = apply(partitions, plan_rebalance(partitions, brokers, evacuate=evacuate))
    assert spread(replica_counts(final, set(brokers) - evacuate)) <= 1


@PROPERTY
@given(clusters(fenced=True))
def test_without_evacuation_moves_meet_the_lower_bound(cluster) -> None:
    """Rule 4: copies == the closed-form lower bound, so no plan could copy fewer."""
    partitions, brokers, _ = cluster
    moves = plan_rebalance(partitions, brokers)
    assert copied(moves) == lower_bound(partitions, brokers)


@PROPERTY
@given(clusters(evacuating=True, fenced=True))
def test_with_evacuation_moves_meet_the_bound_or_more(cluster) -> None:
    partitions, brokers, evacuate = cluster
    moves = plan_rebalance(partitions, brokers, evacuate=evacuate)
    assert copied(moves) >= lower_bound(partitions, brokers, evacuate)


@settings(deadline=None, max_examples=150)
@given(clusters(max_brokers=4, max_partitions=5, evacuating=True))
def test_moves_are_the_fewest_of_any_balanced_outcome(cluster) -> None:
    """Rule 4, exactly: equal to exhaustive search over every balanced outcome."""
    partitions, brokers, evacuate = cluster
    moves = plan_rebalance(partitions, brokers, evacuate=evacuate)
    assert copied(moves) == fewest_balanced_moves(partitions, brokers, evacuate)


def test_bound_is_unattainable_when_an_evacuee_must_land_on_a_full_broker() -> None:
    """Partition p must end on both 1 and 2, but 1 already holds its share: one more move
    than the bound (which assumes the evacuee could go to 2) is the true minimum."""
    partitions = [full("t", i, 1) for i in range(5)]
    partitions += [full("t", 5, 2), full("t", 6, 2), full("p", 0, 2, 3)]
    brokers = dict.fromkeys([1, 2])
    moves = plan_rebalance(partitions, brokers, evacuate=[3])
    assert lower_bound(partitions, brokers, [3]) == 1
    assert copied(moves) == 2 == fewest_balanced_moves(partitions, brokers, [3])
    assert spread(replica_counts(apply(partitions, moves), brokers)) <= 1


@PROPERTY
@given(clusters(evacuating=True, fenced=True))
def test_a_plan_carried_out_needs_no_further_move(cluster) -> None:
    """Rules 4 and 6: planning again once the moves are done (and the new replicas in
    sync) moves nothing, so the plan touched no partition it did not need to."""
    partitions, brokers, evacuate = cluster
    final = apply(partitions, plan_rebalance(partitions, brokers, evacuate=evacuate))
    after = [full(topic, index, *replicas) for (topic, index), replicas in final.items()]
    assert plan_rebalance(after, brokers, evacuate=evacuate) == []


def test_balanced_cluster_is_left_alone() -> None:
    partitions = [full("t", i, *((1, 2, 3)[(i + k) % 3] for k in range(2))) for i in range(6)]
    assert plan_rebalance(partitions, dict.fromkeys([1, 2, 3])) == []


def test_added_brokers_take_an_even_share_with_the_fewest_moves() -> None:
    """3 brokers hold 300 replicas (RF 3), 2 join: 60 each, 120 copies, leaders 20 each."""
    partitions = [full("t", i, *((1, 2, 3)[(i + k) % 3] for k in range(3))) for i in range(100)]
    moves = plan_rebalance(partitions, dict.fromkeys([1, 2, 3, 4, 5]))
    final = apply(partitions, moves)
    assert replica_counts(final, [1, 2, 3, 4, 5]) == dict.fromkeys([1, 2, 3, 4, 5], 60)
    assert leader_counts(final, [1, 2, 3, 4, 5]) == dict.fromkeys([1, 2, 3, 4, 5], 20)
    assert copied(moves) == 120


# ------------------------------------------------------------------------------ rule 5


@st.composite
def racked_clusters(draw: st.DrawFn):
    partitions, brokers, evacuate = draw(clusters(evacuating=True))
    rack_count = draw(st.integers(2, 3))
    racked: dict[int, str | None] = {b: f"r{draw(st.integers(0, rack_count - 1))}" for b in brokers}
    return partitions, racked, evacuate


@PROPERTY
@given(racked_clusters())
def test_moved_partitions_span_every_rack_they_can(cluster) -> None:
    """Rule 5: a moved partition spans min(replicas, racks) racks, never fewer than before."""
    partitions, brokers, evacuate = cluster
    eligible = {b: r for b, r in brokers.items() if b not in evacuate}
    rack_total = len(set(eligible.values()))
    final = apply(partitions, plan_rebalance(partitions, brokers, evacuate=evacuate))
    for p in partitions:
        new = final[(p.topic, p.partition)]
        if rack_total < 2:
            continue
        if set(new) != set(p.replicas):
            assert racks_of(new, eligible) == min(len(new), rack_total)
        # Before: the racks of its replicas on every broker whose rack is still available.
        available = {b: r for b, r in brokers.items() if r in set(eligible.values())}
        assert racks_of(new, eligible) >= racks_of(p.replicas, available)


@st.composite
def equal_racks(draw: st.DrawFn):
    """Racks of equal size, every partition already spanning min(replicas, racks) racks,
    mixed replication factors; sometimes one broker per rack is drained (racks stay equal)."""
    rack_count, per_rack = draw(st.integers(2, 3)), draw(st.integers(1, 3))
    ids = list(range(1, rack_count * per_rack + 1))
    brokers: dict[int, str | None] = {b: f"r{(b - 1) % rack_count}" for b in ids}
    holders = ids[: draw(st.integers(1, len(ids)))]
    max_rf = draw(st.integers(1, min(3, len(ids))))
    partitions = []
    for index in range(draw(st.integers(1, 40))):
        rf = draw(st.integers(1, max_rf))
        spanning = min(rf, rack_count)
        pool = holders if len({brokers[b] for b in holders}) >= spanning else ids
        pool = pool if len(pool) >= rf else ids
        replicas = tuple(
            draw(
                st.permutations(pool)
                .map(lambda order, rf=rf: order[:rf])
                .filter(lambda r, s=spanning: racks_of(r, brokers) == s)
            )
        )
        partitions.append(full(TOPICS[index % 3], index // 3, *replicas))
    evacuate: set[int] = set()
    if (per_rack - 1) * rack_count >= max_rf and draw(st.booleans()):
        column = draw(st.integers(0, per_rack - 1))
        evacuate = set(ids[column * rack_count : (column + 1) * rack_count])
    return partitions, brokers, evacuate


@PROPERTY
@given(equal_racks())
def test_equal_racks_still_balance(cluster) -> None:
    """Rules 3 and 5 together: with racks of equal size the rack rule costs no balance."""
    partitions, brokers, evacuate = cluster
    eligible = {b: r for b, r in brokers.items() if b not in evacuate}
    final = apply(partitions, plan_rebalance(partitions, brokers, evacuate=evacuate))
    assert spread(replica_counts(final, eligible)) <= 1
    rack_total = len(set(eligible.values()))
    for replicas in final.values():
        assert racks_of(replicas, eligible) == min(len(replicas), rack_total)


def test_evacuated_replica_goes_to_a_missing_rack() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    partitions = [full("t", 0, 1, 3, 5)]
    moves = plan_rebalance(partitions, brokers, evacuate=[5], leaders=False)
    assert moves == [Move("t", 0, (1, 3, 5), (1, 3, 6))]


def test_moved_partition_on_a_doubled_rack_is_repaired() -> None:
    """Replicas 1 and 2 share rack a; evacuating 3 also moves one of them to rack c."""
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    partitions = [P("t", 0, (1, 2, 3), (1, 2, 3))]
    moves = plan_rebalance(partitions, brokers, evacuate=[3], leaders=False)
    (move,) = moves
    assert move.new[0] == 1  # the preferred leader is not the one that moves
    assert racks_of(move.new, brokers) == 3
    assert move.replica_moves == 2


def test_under_replicated_partition_gets_no_rack_repair() -> None:
    """Rule 7 over rule 5: only the evacuee moves (to a rack it lacks); 1 and 2 stay
    doubled up on rack a, where a fully replicated partition would move one of them."""
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    partitions = [P("t", 0, (1, 2, 3), (1, 3))]
    moves = plan_rebalance(partitions, brokers, evacuate=[3], leaders=False)
    assert moves == [Move("t", 0, (1, 2, 3), (1, 2, 4))]


def test_rack_aware_balance_with_equal_racks() -> None:
    """Two racks of two; every partition on one broker per rack; 4 and 2 are new."""
    brokers = {1: "a", 2: "a", 3: "b", 4: "b"}
    partitions = [full("t", i, 1, 3) if i % 2 else full("t", i, 3, 1) for i in range(20)]
    moves = plan_rebalance(partitions, brokers)
    final = apply(partitions, moves)
    assert replica_counts(final, brokers) == dict.fromkeys(brokers, 10)
    assert all(racks_of(r, brokers) == 2 for r in final.values())
    assert copied(moves) == lower_bound(partitions, brokers) == 20


# ------------------------------------------------------------------------------ rule 6


@PROPERTY
@given(clusters(evacuating=True, uniform=True))
def test_leaders_end_balanced(cluster) -> None:
    """Rule 6: with one replication factor and balanced replicas, some order balances the
    leaders, and the plan finds it."""
    partitions, brokers, evacuate = cluster
    final = apply(partitions, plan_rebalance(partitions, brokers, evacuate=evacuate))
    assert spread(leader_counts(final, set(brokers) - evacuate)) <= 1


@settings(deadline=None, max_examples=150)
@given(clusters(max_brokers=4, max_partitions=6, evacuating=True))
def test_leaders_balance_whenever_possible_with_the_fewest_changes(cluster) -> None:
    """Rule 6 against exhaustive search over leader orders, mixed replication factors."""
    partitions, brokers, evacuate = cluster
    eligible = set(brokers) - evacuate
    final = apply(partitions, plan_rebalance(partitions, brokers, evacuate=evacuate))
    best = fewest_leader_changes(partitions, final, eligible)
    if best is not None:
        assert spread(leader_counts(final, eligible)) <= 1
        changes = sum(final[(p.topic, p.partition)][0] != p.replicas[0] for p in partitions)
        assert changes == best


def test_reorder_only_costs_no_copy_and_keeps_the_others_order() -> None:
    partitions = [full("t", i, 1, 2, 3) for i in range(3)]
    moves = plan_rebalance(partitions, dict.fromkeys([1, 2, 3]))
    assert [m.replica_moves for m in moves] == [0, 0]
    assert sorted(m.new for m in moves) == [(2, 1, 3), (3, 1, 2)]


def test_balance_moves_followers_so_few_leaderships_change() -> None:
    """9 partitions (RF 2) on 1-3 and a new broker 4: four replicas move to 4, and 4 needs
    two leaderships; moving leader replicas would change more than those two."""
    partitions = [full("t", i, *((1, 2, 3)[(i + k) % 3] for k in range(2))) for i in range(9)]
    moves = plan_rebalance(partitions, dict.fromkeys([1, 2, 3, 4]))
    final = apply(partitions, moves)
    assert copied(moves) == 4
    assert spread(leader_counts(final, [1, 2, 3, 4])) <= 1
    assert sum(final[(p.topic, p.partition)][0] != p.replicas[0] for p in partitions) == 2


def test_leaders_false_only_moves_replicas() -> None:
    partitions = [full("t", i, 1, 2, 3) for i in range(3)]
    assert plan_rebalance(partitions, dict.fromkeys([1, 2, 3]), leaders=False) == []


def test_an_in_sync_replica_replaces_an_evacuated_leader() -> None:
    partitions = [P("t", 0, (9, 2, 3), (9, 3))]
    (move,) = plan_rebalance(partitions, dict.fromkeys([1, 2, 3, 4]), evacuate=[9])
    assert move.new[0] == 3
    assert move.new[1:] == (1, 2)  # the new replica where 9 was, then 2: order kept


def test_partition_led_from_a_fenced_broker_keeps_its_leader() -> None:
    partitions = [full("t", i, 3, 1) for i in range(4)]
    moves = plan_rebalance(partitions, dict.fromkeys([1, 2]))
    final = apply(partitions, moves)
    assert all(replicas[0] == 3 for replicas in final.values())


# ------------------------------------------------------------------------------ rule 7


@PROPERTY
@given(clusters(evacuating=True, lagging=True))
def test_under_replicated_partitions_move_only_to_evacuate(cluster) -> None:
    partitions, brokers, evacuate = cluster
    final = apply(partitions, plan_rebalance(partitions, brokers, evacuate=evacuate))
    for p in partitions:
        if len(p.isr) == len(p.replicas):
            continue
        new = final[(p.topic, p.partition)]
        leaving = set(p.replicas) & evacuate
        if not leaving:
            assert new == p.replicas
        else:
            assert set(p.replicas) - leaving <= set(new)
            assert len(set(new) - set(p.replicas)) == len(leaving)


def test_under_replicated_partition_is_not_balanced() -> None:
    lagging = P("t", 0, (1, 2), (1,))
    partitions = [lagging, full("t", 1, 1, 2)]
    moves = plan_rebalance(partitions, dict.fromkeys([1, 2, 3, 4]), leaders=False)
    assert [(m.topic, m.partition) for m in moves] == [("t", 1)]
    assert set(moves[0].new) == {3, 4}


# ------------------------------------------------------------------------------ rule 8


@PROPERTY
@given(clusters(evacuating=True, fenced=True, lagging=True), st.randoms(use_true_random=False))
def test_same_input_in_any_order_gives_the_same_plan(cluster, rng: random.Random) -> None:
    partitions, brokers, evacuate = cluster
    shuffled = list(partitions)
    rng.shuffle(shuffled)
    reordered_brokers = dict(sorted(brokers.items(), reverse=True))
    assert plan_rebalance(partitions, brokers, evacuate=evacuate) == plan_rebalance(
        shuffled, reordered_brokers, evacuate=sorted(evacuate, reverse=True)
    )


class ToyFlow:
    """Units on brokers that shift along edges, each edge holding unit costs; a shift leaves
    the opposite cost on the reverse edge (a residual graph). Edges in `broken` are offered
    but refuse to shift, as the rack rule can refuse a move partway along a path."""

    def __init__(self, counts, edges, broken=()) -> None:
        self.counts = dict(counts)
        self.edges = {edge: sorted(costs) for edge, costs in edges.items()}
        self.broken = set(broken)
        self.log: list[tuple[int, int]] = []

    def costs(self, banned):
        return {e: costs[0] for e, costs in self.edges.items() if costs and e not in banned}

    def shift(self, source, target, cost):
        units = self.edges.get((source, target), [])
        if (source, target) in self.broken or not units or units[0] > cost:
            return None
        paid = units.pop(0)
        self.edges[(target, source)] = sorted([*self.edges.get((target, source), []), -paid])
        self.counts[source] -= 1
        self.counts[target] += 1
        self.log.append((source, target))
        return (paid, source, target)

    def undo(self, shift) -> None:
        paid, source, target = shift
        self.edges[(target, source)].remove(-paid)
        self.edges[(source, target)] = sorted([*self.edges[(source, target)], paid])
        self.counts[target] -= 1
        self.counts[source] += 1
        self.log.append((target, source))


def test_a_path_refused_partway_is_undone_and_another_found() -> None:
    """1 -> 2 -> 3 is cheapest but 2 -> 3 refuses: the first step is undone, the edge
    banned, and the dearer direct edge taken."""
    flow = ToyFlow({1: 2, 2: 1, 3: 0}, {(1, 2): [0], (2, 3): [0], (1, 3): [5]}, broken={(2, 3)})
    _equalise(flow, flow.counts, spread=5)
    assert flow.counts == {1: 1, 2: 1, 3: 1}
    assert flow.log == [(1, 2), (2, 1), (1, 3)]


def test_a_negative_cycle_is_cancelled() -> None:
    """Only racks can leave one (a move that was refused becomes allowed later); cancelling
    it saves moves and changes no count."""
    flow = ToyFlow({1: 2, 2: 0, 3: 1}, {(1, 2): [1], (1, 3): [-1], (3, 1): [-1]})
    _equalise(flow, flow.counts, spread=1)
    assert flow.counts == {1: 1, 2: 1, 3: 1}
    assert sorted(flow.log[:2]) == [(1, 3), (3, 1)]
    assert flow.log[2:] == [(1, 2)]


def test_module_is_pure() -> None:
    """The import rule of tests/unit/test_architecture.py, for this module too."""
    source = Path(__file__).resolve().parents[2] / "kraftlite/metadata/rebalance.py"
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"asyncio", "threading", "socket", "time", "random", "lmdb", "aiohttp"}


# ------------------------------------------------------------------------------ replication factor


@st.composite
def topics(draw: st.DrawFn):
    """(partitions of one topic, brokers, new factor, load or None)."""
    count = draw(st.integers(1, 8))
    ids = list(range(1, count + 1))
    racked = draw(st.booleans())
    brokers: dict[int, str | None] = {
        b: f"r{draw(st.integers(0, 2))}" if racked else None for b in ids
    }
    partitions = []
    for index in range(draw(st.integers(1, 20))):
        rf = draw(st.integers(1, count))
        replicas = tuple(draw(st.permutations(ids))[:rf])
        isr = tuple(b for b in replicas if b == replicas[0] or draw(st.booleans()))
        partitions.append(P("t", index, replicas, isr))
    factor = draw(st.integers(1, count))
    load = None
    if draw(st.booleans()):
        load = {b: draw(st.integers(0, 50)) for b in ids}
    return partitions, brokers, factor, load


@PROPERTY
@given(topics())
def test_replication_factor_change_shape(topic) -> None:
    partitions, brokers, factor, load = topic
    moves = plan_replication_factor(partitions, factor, brokers, load=load)
    final = apply(partitions, moves)
    for p in partitions:
        new = final[(p.topic, p.partition)]
        assert len(new) == factor == len(set(new))
        assert set(new) <= set(brokers) | set(p.replicas)
        if len(p.replicas) == factor:
            assert new == p.replicas
        elif len(p.replicas) < factor:
            assert new[: len(p.replicas)] == p.replicas  # appended at the end
        else:
            assert new[0] == p.replicas[0]  # the preferred leader stays
            assert [b for b in p.replicas if b in new] == list(new)  # order kept
            removed = set(p.replicas) - set(new)
            lagging = set(p.replicas) - set(p.isr)
            assert removed <= lagging or lagging - {p.replicas[0]} <= removed


def test_raising_the_factor_uses_the_least_loaded_brokers() -> None:
    partitions = [full("t", i, 1) for i in range(4)]
    moves = plan_replication_factor(partitions, 2, dict.fromkeys([1, 2, 3]))
    assert [m.new for m in moves] == [(1, 2), (1, 3), (1, 2), (1, 3)]


def test_raising_the_factor_prefers_a_new_rack_then_load() -> None:
    brokers = {1: "a", 2: "a", 3: "b"}
    moves = plan_replication_factor([full("t", 0, 1)], 2, brokers, load={1: 9, 2: 0, 3: 5})
    assert [m.new for m in moves] == [(1, 3)]


def test_lowering_the_factor_drops_lagging_then_loaded_replicas() -> None:
    partitions = [P("t", 0, (1, 2, 3), (1, 2)), full("t", 1, 1, 2, 3)]
    moves = plan_replication_factor(
        partitions, 2, dict.fromkeys([1, 2, 3]), load={1: 0, 2: 9, 3: 0}
    )
    assert [m.new for m in moves] == [(1, 2), (1, 3)]
    assert plan_replication_factor(partitions, 1, dict.fromkeys([1, 2, 3]))[1].new == (1,)


def test_lowering_the_factor_keeps_racks_spread() -> None:
    brokers = {1: "a", 2: "a", 3: "b"}
    moves = plan_replication_factor([full("t", 0, 1, 3, 2)], 2, brokers, load={1: 0, 2: 0, 3: 9})
    assert [m.new for m in moves] == [(1, 3)]


def test_replication_factor_out_of_range() -> None:
    for factor in (0, 4):
        with pytest.raises(ValueError, match="replication factor"):
            plan_replication_factor([full("t", 0, 1)], factor, dict.fromkeys([1, 2, 3]))


def test_unchanged_factor_is_untouched() -> None:
    assert plan_replication_factor([full("t", 0, 1, 2)], 2, dict.fromkeys([1, 2, 3])) == []
