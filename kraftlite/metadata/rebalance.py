"""Reassignment planning: the target replica list of every partition that should move.

The controller turns each `Move` into a KIP-455 reassignment (new replicas catch up before
old ones leave). It plans with this module to spread replicas and preferred leaders over
brokers that joined, to drain a broker, to re-create a dead broker's replicas elsewhere
(self-healing, as Cruise Control does on a broker failure) and to change a topic's
replication factor. `kafka-reassign-partitions --generate` computes a fresh assignment and
so moves most replicas; Cruise Control's distribution goals try to move few. This module
moves provably the fewest.

Rules of `plan_rebalance`:
1. Eligible brokers are those in `brokers` and not in `evacuate` (a broker in both is
   evacuated). Every replica on an evacuated broker moves to an eligible one. Replicas on a
   broker in neither (fenced while it restarts) stay, are not counted and receive nothing;
   a partition led from such a broker keeps its order.
2. A target keeps the partition's replication factor, on distinct brokers. A new replica
   takes the position of the replica it replaces; the others keep their relative order. A
   partition whose evacuated replicas have no room (fewer eligible brokers than its
   replicas on eligible or evacuated brokers) raises ValueError naming it, as does anything
   to evacuate with no eligible broker.
3. Balanced replicas: the counts over the eligible brokers end within one of each other,
   unless racks (rule 5) or partitions that may not move (rule 7) prevent it, in which case
   as much excess as the allowed moves can shed is shed.
4. Fewest moves: among the balanced outcomes the plan copies the fewest replicas (the sum
   of `Move.replica_moves`). Without evacuation that is the lower bound
   sum(max(0, count - target)), targets being floor/ceil of the mean with the ceils on the
   fullest brokers: a fuller broker always holds a partition that an emptier one does not,
   so every excess replica can go straight to a broker short of its target. Evacuation can
   put the bound out of reach (an evacuee whose only free broker is already full forces a
   further move); the plan is still the true minimum. The method is minimum cost flow by
   successive shortest paths (Ahuja, Magnanti and Orlin, "Network Flows", ch. 9) on a graph
   of brokers: a unit moves one replica from a broker above its target to one below, along
   a chain of brokers when no partition allows the direct move (an augmenting path through
   a third broker). Copying a replica costs 1, redirecting a copy already planned 0, and
   cancelling one -1, so a later path can undo an earlier choice; excess that must go is
   worth more than any path costs, so balance comes first. Paths come from Bellman-Ford over
   the brokers; partitions are grouped by state, so one search costs about brokers squared
   times groups and the plan is near linear in partitions (100,000 partitions, 120,000
   copies: about a second). A cluster that is already balanced gets no move.
5. Racks (used when every eligible broker has one, as Kafka's rack-aware assignment needs):
   a partition that is moved or placed spans min(replicas on eligible brokers, racks) racks,
   so a move never lowers its rack count. An evacuated replica goes to a rack the partition
   does not use yet; if the count is still short (its other replicas doubled up on a rack),
   one of those moves to a missing rack too (Cruise Control's RackAwareGoal), except in an
   under-replicated partition (rule 7 wins: it gets what its evacuees add). A balance move
   that would break the rule is not made, so balance is best effort under racks; with racks
   of equal size, and partitions that already span their racks, it has held in every test.
6. Leaders (`leaders=True`): preferred leaders (first replicas) are balanced over the
   eligible brokers within one, by reordering replica lists (no data moves), whenever some
   order of the lists it may reorder achieves it: the same flow, a unit being a leadership.
   Among balanced orders the plan changes the fewest preferred leaders, then prefers
   in-sync ones; where the preferred leader was evacuated an in-sync replica comes first.
   A balance move in rule 4 prefers a follower, so leaderships move by reordering. Kafka's
   preferred leader election (auto.leader.rebalance.enable) then moves leadership.
7. A partition that is under-replicated (ISR shorter than its replicas) moves only its
   evacuated replicas, and is reordered only then: balancing it would copy from a partition
   already short of copies.
8. Pure and deterministic: partitions are processed sorted by (topic, partition), so the
   same input, in any order, gives the same plan; moves come sorted the same way.

Rules of `plan_replication_factor`:
9. Raising the factor appends replicas on brokers in `brokers` the partition does not use,
   preferring racks it does not use yet, then the least loaded broker. Lowering it removes
   replicas outside the ISR first, then on brokers outside `brokers`, then (with racks)
   ones whose rack another replica also covers, then the most loaded brokers'; the
   preferred leader always stays (a factor of at least one never needs to remove it), and
   the others keep their order. Load counts each change as it is planned, so consecutive
   partitions spread out. A partition that already has the factor is untouched.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class PartitionAssignment:
    """A partition as the planner sees it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]  # current replica list; replicas[0] is the preferred leader
    isr: tuple[int, ...]  # current in-sync replicas (a subset of `replicas`)


@dataclass(frozen=True, slots=True)
class Move:
    """One partition's reassignment: from `old` to the target `new`."""

    topic: str
    partition: int
    old: tuple[int, ...]  # the replicas before
    new: tuple[int, ...]  # the target replica list; new[0] is the preferred leader

    @property
    def replica_moves(self) -> int:
        """Replicas copied to a broker that did not hold one (0 for a reorder)."""
        return len(set(self.new) - set(self.old))


# One planned change: (partition index, from broker, to broker). Undoing it is the reverse.
_Shift = tuple[int, int, int]


# ------------------------------------------------------------------------------ plan_rebalance


def plan_rebalance(
    partitions: Sequence[PartitionAssignment],
    brokers: Mapping[int, str | None],
    *,
    evacuate: Collection[int] = (),
    leaders: bool = True,
) -> list[Move]:
    """Moves that evacuate `evacuate` and balance replicas (and leaders) over `brokers`."""
    leaving = frozenset(evacuate)
    eligible = sorted(b for b in brokers if b not in leaving)
    racks = _racks(brokers, eligible)
    ordered = _sorted_partitions(partitions)
    lists = [list(p.replicas) for p in ordered]
    counts = dict.fromkeys(eligible, 0)
    for replicas in lists:
        for b in replicas:
            if b in counts:
                counts[b] += 1
    for p in ordered:  # rule 2, checked before anything is planned
        moving = sum(b in leaving for b in p.replicas)
        staying = sum(b in counts for b in p.replicas)
        if moving and staying + moving > len(eligible):
            raise ValueError(
                f"partition {p.topic}-{p.partition} needs {staying + moving} eligible brokers "
                f"for its replicas {list(p.replicas)} but only {len(eligible)} can take "
                f"replicas ({eligible}) once {sorted(leaving)} are evacuated"
            )
    changed = set()
    for i, p in enumerate(ordered):
        if any(b in leaving for b in p.replicas):
            _place_evacuated(
                lists[i],
                p.isr,
                leaving,
                eligible=eligible,
                counts=counts,
                racks=racks,
                repair=_fully_replicated(p),
            )
            changed.add(i)
    movable = {i for i, p in enumerate(ordered) if _fully_replicated(p)}  # rule 7
    _equalise(_Replicas(ordered, lists, movable, counts, racks), counts, spread=1)
    if leaders:
        _balance_leaders(ordered, lists, movable | changed, eligible)
    return [
        Move(p.topic, p.partition, p.replicas, tuple(replicas))
        for p, replicas in zip(ordered, lists, strict=True)
        if tuple(replicas) != p.replicas
    ]


def _sorted_partitions(partitions: Iterable[PartitionAssignment]) -> list[PartitionAssignment]:
    """The partitions by (topic, partition), checked to be well formed."""
    ordered = sorted(partitions, key=lambda p: (p.topic, p.partition))
    for previous, p in itertools.pairwise(ordered):
        if (previous.topic, previous.partition) == (p.topic, p.partition):
            raise ValueError(f"partition {p.topic}-{p.partition} is listed twice")
    for p in ordered:
        if not p.replicas or len(set(p.replicas)) != len(p.replicas):
            raise ValueError(
                f"partition {p.topic}-{p.partition} has replicas {list(p.replicas)}: "
                "a replica list must be non-empty with distinct brokers"
            )
    return ordered


def _racks(brokers: Mapping[int, str | None], eligible: Sequence[int]) -> dict[int, str] | None:
    """Each eligible broker's rack, or None when racks cannot constrain anything (rule 5)."""
    racks = {b: brokers[b] for b in eligible}
    known = {b: rack for b, rack in racks.items() if rack is not None}
    if len(known) < len(racks) or len(set(known.values())) < 2:
        return None
    return known


def _fully_replicated(p: PartitionAssignment) -> bool:
    return set(p.replicas) <= set(p.isr)


def _place_evacuated(
    replicas: list[int],
    isr: Collection[int],
    leaving: AbstractSet[int],
    *,
    eligible: Sequence[int],
    counts: dict[int, int],
    racks: Mapping[int, str] | None,
    repair: bool,
) -> None:
    """Rules 1, 2 and 5: each evacuated replica, in place, onto the least loaded eligible
    broker the partition does not use (a rack it does not use first), then, if `repair`
    (not for an under-replicated partition, rule 7), rack repair."""
    for position, broker in enumerate(replicas):
        if broker not in leaving:
            continue
        present = {b for b in replicas if b in counts}
        used = {racks[b] for b in present} if racks else set()
        target = min(
            (b for b in eligible if b not in present),
            key=lambda b: (racks is not None and racks[b] in used, counts[b], b),
        )
        replicas[position] = target
        counts[target] += 1
    if racks is None or not repair:
        return
    # The kept replicas may double up on a rack while another is missing: move those too,
    # never the preferred leader while another will do, in-sync replicas last.
    placed = [b for b in replicas if b in counts]
    wanted = min(len(placed), len(set(racks.values())))
    while len({racks[b] for b in placed}) < wanted:
        per_rack = Counter(racks[b] for b in placed)
        victim = max(
            (b for b in placed if per_rack[racks[b]] > 1),
            key=lambda b: (b != replicas[0], b not in isr, counts[b], replicas.index(b)),
        )
        target = min(
            (b for b in eligible if racks[b] not in per_rack), key=lambda b: (counts[b], b)
        )
        replicas[replicas.index(victim)] = target
        placed[placed.index(victim)] = target
        counts[victim] -= 1
        counts[target] += 1


class _Flow(Protocol):
    """A balancing problem as `_equalise` sees it: brokers, and units (a replica, a
    leadership) that can shift from one broker to another at a cost."""

    def costs(self, banned: AbstractSet[tuple[int, int]]) -> dict[tuple[int, int], int]:
        """The cheapest cost of one shift for each (from, to) pair that has one."""
        ...

    def shift(self, source: int, target: int, cost: int) -> _Shift | None:
        """Make one shift from `source` to `target` costing at most `cost`, or None."""
        ...

    def undo(self, shift: _Shift) -> None:
        """Reverse a shift made by `shift`."""
        ...


def _equalise(flow: _Flow, counts: Mapping[int, int], spread: int) -> None:
    """Shift units until every broker holds floor or ceil of the mean, at the least cost
    (rules 3, 4 and 6): successive shortest paths over the brokers.

    A broker above ceil must give its excess (a "forced" unit, worth -`forced`); one at ceil
    may give one unit, and one at floor may take one, when the mean is not whole (which
    brokers end at ceil is itself part of the optimisation). Each round finds the cheapest
    path from a giver to a taker with Bellman-Ford and shifts units along it while it lasts;
    it stops when no path is worth taking. Edge costs are scaled by n+1 plus one per hop, so
    among equally cheap paths the shortest wins while the cheapest still wins overall.
    `spread` bounds the magnitude of the flow's costs. With racks a planned path can fail
    half-way (a partition's rack rule): its edge is banned until the next shift succeeds.
    """
    brokers = sorted(counts)
    n = len(brokers)
    if n < 2:
        return
    floor, extra = divmod(sum(counts.values()), n)
    ceil = floor + (1 if extra else 0)
    must_give = {b: max(0, counts[b] - ceil) for b in brokers}
    may_give = {b: int(bool(extra) and counts[b] >= ceil) for b in brokers}
    must_take = {b: max(0, floor - counts[b]) for b in brokers}
    may_take = {b: int(bool(extra) and counts[b] <= floor) for b in brokers}
    scale = n + 1
    forced = 2 * n * (spread * scale + 1) + 1

    def give(b: int) -> int | None:
        return -forced if must_give[b] else (0 if may_give[b] else None)

    def take(b: int) -> int | None:
        return -forced if must_take[b] else (0 if may_take[b] else None)

    banned: set[tuple[int, int]] = set()
    while True:
        costs = flow.costs(banned)
        edges = [(a, b, cost * scale + 1) for (a, b), cost in sorted(costs.items())]
        dist: dict[int, int] = {}
        pred: dict[int, int | None] = {}
        for b in brokers:
            start = give(b)
            if start is not None:
                dist[b], pred[b] = start, None
        last = None
        for _ in range(n):
            last = None
            for a, b, weight in edges:
                if a in dist and (b not in dist or dist[a] + weight < dist[b]):
                    dist[b], pred[b], last = dist[a] + weight, a, b
            if last is None:
                break
        if last is not None:  # a negative cycle (possible only under racks): cancel it
            cycle = _walk(pred, last)[1]
            if cycle:
                failed = _push(flow, [*cycle, cycle[0]], costs)
                if failed is None:
                    banned.clear()
                else:
                    banned.add(failed)
                continue
        ends = [(dist[b] + cost, b) for b in brokers if b in dist and (cost := take(b)) is not None]
        if not ends or min(ends)[0] >= 0:
            return
        path, cycle = _walk(pred, min(ends)[1])
        path = [*cycle, cycle[0]] if cycle else path
        source, sink = path[0], path[-1]
        forced_out, forced_in = must_give[source] > 0, must_take[sink] > 0
        first = True
        while True:
            failed = _push(flow, path, costs)
            if failed is not None:
                if first:
                    banned.add(failed)
                break
            first = False
            banned.clear()
            if cycle:
                break
            (must_give if forced_out else may_give)[source] -= 1
            (must_take if forced_in else may_take)[sink] -= 1
            # The same path stays cheapest while both its ends keep the same kind of unit.
            if not (forced_out and forced_in and must_give[source] and must_take[sink]):
                break


def _walk(pred: Mapping[int, int | None], end: int) -> tuple[list[int], list[int]]:
    """(path from its root to `end`, []) or ([], a cycle) following predecessors."""
    path = [end]
    seen = {end}
    node = pred[end]
    while node is not None:
        if node in seen:
            return [], path[path.index(node) :][::-1]
        path.append(node)
        seen.add(node)
        node = pred[node]
    return path[::-1], []


def _push(
    flow: _Flow, path: Sequence[int], costs: Mapping[tuple[int, int], int]
) -> tuple[int, int] | None:
    """One unit along `path`, all or nothing; the edge that failed, or None."""
    done: list[_Shift] = []
    for a, b in itertools.pairwise(path):
        shift = flow.shift(a, b, costs[(a, b)])
        if shift is None:
            for made in reversed(done):
                flow.undo(made)
            return (a, b)
        done.append(shift)
    return None


# A movable partition's replica state: (on eligible brokers now, of those the ones planned
# new, original eligible replicas no longer there, first replica). The cost of moving one of
# its replicas from a to b depends on nothing else, so partitions are grouped by it; the
# first replica lets a move prefer a follower (moving a leader moves leadership as well).
_ReplicaKey = tuple[frozenset[int], frozenset[int], frozenset[int], int]


class _Replicas:
    """The replica lists being planned, as a flow for `_equalise` (rules 3-5).

    Invariant: `plain[b][key]` (state unchanged: nothing new, nothing dropped) or
    `moved[b][key]` holds exactly the movable partitions whose eligible replicas include b
    and whose state is `key`; `counts` is every eligible broker's replica count. Only
    `_move` changes lists, counts and the index.
    """

    def __init__(
        self,
        ordered: Sequence[PartitionAssignment],
        lists: list[list[int]],
        movable: Collection[int],
        counts: dict[int, int],
        racks: Mapping[int, str] | None,
    ) -> None:
        self.lists = lists
        self.counts = counts
        self.racks = racks
        self.rack_total = len(set(racks.values())) if racks else 0
        # Keys are shared, not rebuilt per partition: most partitions have one of a few states.
        self.shared: dict[tuple[tuple[int, ...], frozenset[int]], _ReplicaKey] = {}
        originals: dict[tuple[int, ...], frozenset[int]] = {}
        self.original: dict[int, frozenset[int]] = {}
        for i in sorted(movable):
            replicas = ordered[i].replicas
            original = originals.get(replicas)
            if original is None:
                original = originals[replicas] = frozenset(b for b in replicas if b in counts)
            self.original[i] = original
        self.keys: dict[int, _ReplicaKey] = {}
        self.plain: dict[int, dict[_ReplicaKey, set[int]]] = {b: {} for b in counts}
        self.moved: dict[int, dict[_ReplicaKey, set[int]]] = {b: {} for b in counts}
        self.rack_names = frozenset(racks.values()) if racks else frozenset()
        self.rack_ok: dict[tuple[frozenset[int], int], frozenset[str]] = {}
        for i in self.original:
            self._add(i)

    def _groups(self, broker: int, key: _ReplicaKey) -> dict[_ReplicaKey, set[int]]:
        return self.moved[broker] if key[1] or key[2] else self.plain[broker]

    def _add(self, i: int) -> None:
        replicas, original = tuple(self.lists[i]), self.original[i]
        key = self.shared.get((replicas, original))
        if key is None:
            placed = frozenset(b for b in replicas if b in self.counts)
            key = (placed, placed - original, original - placed, replicas[0])
            self.shared[(replicas, original)] = key
        self.keys[i] = key
        for b in key[0]:
            self._groups(b, key).setdefault(key, set()).add(i)

    def _remove(self, i: int) -> None:
        key = self.keys[i]
        for b in key[0]:
            groups = self._groups(b, key)
            group = groups[key]
            group.discard(i)
            if not group:
                del groups[key]

    def _move(self, i: int, source: int, target: int) -> None:
        self._remove(i)
        replicas = self.lists[i]
        replicas[replicas.index(source)] = target
        self.counts[source] -= 1
        self.counts[target] += 1
        self._add(i)

    def _cost(self, key: _ReplicaKey, source: int, target: int) -> int | None:
        """The cost of moving a replica of a `key` partition (None: not allowed): copying to
        a broker that never held it costs 1, and moving a planned copy refunds 1."""
        placed, new, dropped, _ = key
        if target in placed:
            return None
        if self.racks is not None and self.racks[target] not in self._allowed(placed, source):
            return None
        return (target not in dropped) - (source in new)

    def _allowed(self, placed: frozenset[int], source: int) -> frozenset[str]:
        """Rule 5: the racks a replica of `placed` on `source` may move to, so that the
        partition then spans min(replicas, racks) racks."""
        allowed = self.rack_ok.get((placed, source))
        if allowed is None:
            assert self.racks is not None
            staying = {self.racks[b] for b in placed if b != source}
            wanted = min(len(placed), self.rack_total)
            allowed = frozenset(r for r in self.rack_names if len(staying | {r}) >= wanted)
            self.rack_ok[(placed, source)] = allowed
        return allowed

    def costs(self, banned: AbstractSet[tuple[int, int]]) -> dict[tuple[int, int], int]:
        """Per source, a target needs only its cheapest witness, so the scans stop early:
        unchanged partitions offer only 1 (scanned rack by rack until every target has
        one), and a planned copy offers 0 to every target it lacks (and -1 back to where it
        came from, the one case scanned in full)."""
        best: dict[tuple[int, int], int] = {}
        for source in self.plain:
            targets = {b for b in self.plain if b != source and (source, b) not in banned}
            row: dict[int, int] = {}
            pending: dict[str | None, set[int]] = {}  # targets with no witness yet, by rack
            for b in targets:
                pending.setdefault(self.racks[b] if self.racks else None, set()).add(b)
            for key in self.plain[source]:
                if not pending:
                    break
                allowed = None if self.racks is None else self._allowed(key[0], source)
                for rack in [r for r in pending if allowed is None or r in allowed]:
                    waiting = pending[rack]
                    for target in [b for b in waiting if b not in key[0]]:
                        row[target] = 1
                        waiting.discard(target)
                    if not waiting:
                        del pending[rack]
            above_one = set().union(*pending.values())
            above_zero = set(targets)  # targets with no witness costing 0 or less yet
            for key in self.moved[source]:
                _, new, dropped, _ = key
                scan = above_zero if source in new else above_one
                for target in [*(b for b in dropped if b in targets), *scan]:
                    cost = self._cost(key, source, target)
                    if cost is not None and cost < row.get(target, 2):
                        row[target] = cost
                        above_one.discard(target)
                        if cost <= 0:
                            above_zero.discard(target)
            best.update(((source, target), cost) for target, cost in row.items())
        return best

    def shift(self, source: int, target: int, cost: int) -> _Shift | None:
        """Prefer moving a follower (a leader's move changes leadership too), within the
        first few groups that fit, so a shift stays cheap with many groups."""
        chosen = None
        looked = 0
        kinds = (self.plain[source], self.moved[source]) if cost >= 1 else (self.moved[source],)
        for groups in kinds:
            for key, group in groups.items():
                found = self._cost(key, source, target)
                if found is None or found > cost:
                    continue
                if chosen is None:
                    chosen = group
                looked += 1
                if key[3] != source:
                    chosen = group
                    break
                if looked >= 8:
                    break
            else:
                continue
            break
        if chosen is None:
            return None
        i = chosen.pop()  # set.pop is O(1) amortised; _move files it again
        self._move(i, source, target)
        return (i, source, target)

    def undo(self, shift: _Shift) -> None:
        i, source, target = shift
        self._move(i, target, source)


# ------------------------------------------------------------------------------ leaders

# A partition's leader choice: (eligible replicas, leader before the plan, in-sync replicas).
_LeaderKey = tuple[tuple[int, ...], int, frozenset[int]]


class _Leaders:
    """Preferred leaders being chosen, as a flow for `_equalise` (rule 6).

    A leader costs `change` unless it is the partition's leader before the plan, plus 1 if
    it is not in sync, so the fewest leaderships change and in-sync replicas win ties. Each
    partition starts at its cheapest leader (`home`). Invariant: a partition led from home
    is in `plain[home][(target, cost)]` for each other replica it could be led from, and
    any other is in `moved[leader][key]`; only `_lead` changes leader, counts and both.
    """

    def __init__(self, keys: Mapping[int, _LeaderKey], counts: dict[int, int]) -> None:
        self.keys = keys
        self.counts = counts
        self.change = len(keys) + 1
        self.home: dict[int, int] = {}
        self.leader: dict[int, int] = {}
        self.plain: dict[int, dict[tuple[int, int], set[int]]] = {b: {} for b in counts}
        self.moved: dict[int, dict[_LeaderKey, set[int]]] = {b: {} for b in counts}
        for i, key in keys.items():
            home = min(key[0], key=lambda b: self._weight(key, b))  # stable: list order
            self.home[i] = self.leader[i] = home
            self.counts[home] += 1
            self._file(i)

    def _weight(self, key: _LeaderKey, broker: int) -> int:
        _, before, isr = key
        return self.change * (broker != before) + (broker not in isr)

    def _file(self, i: int) -> None:
        key, leader = self.keys[i], self.leader[i]
        if leader != self.home[i]:
            self.moved[leader].setdefault(key, set()).add(i)
            return
        base = self._weight(key, leader)
        for target in key[0]:
            if target != leader:
                cost = self._weight(key, target) - base
                self.plain[leader].setdefault((target, cost), set()).add(i)

    def _unfile(self, i: int) -> None:
        key, leader = self.keys[i], self.leader[i]
        if leader != self.home[i]:
            group = self.moved[leader][key]
            group.discard(i)
            if not group:
                del self.moved[leader][key]
            return
        base = self._weight(key, leader)
        for target in key[0]:
            if target != leader:
                slot = (target, self._weight(key, target) - base)
                group = self.plain[leader][slot]
                group.discard(i)
                if not group:
                    del self.plain[leader][slot]

    def _lead(self, i: int, target: int) -> None:
        source = self.leader[i]
        self._unfile(i)
        self.leader[i] = target
        self._file(i)
        self.counts[source] -= 1
        self.counts[target] += 1

    def costs(self, banned: AbstractSet[tuple[int, int]]) -> dict[tuple[int, int], int]:
        best: dict[tuple[int, int], int] = {}
        for source in self.plain:
            for target, cost in self.plain[source]:
                edge = (source, target)
                if edge not in banned and cost < best.get(edge, cost + 1):
                    best[edge] = cost
            for key in self.moved[source]:
                base = self._weight(key, source)
                for target in key[0]:
                    edge = (source, target)
                    if target == source or edge in banned:
                        continue
                    cost = self._weight(key, target) - base
                    if cost < best.get(edge, cost + 1):
                        best[edge] = cost
        return best

    def shift(self, source: int, target: int, cost: int) -> _Shift | None:
        found = None
        for (to, each), group in self.plain[source].items():
            if to == target and each <= cost:
                found = group
                break
        else:
            for key, group in self.moved[source].items():
                if (
                    target in key[0]
                    and self._weight(key, target) - self._weight(key, source) <= cost
                ):
                    found = group
                    break
        if found is None:
            return None
        i = found.pop()
        found.add(i)  # _lead unfiles it from every group it is in
        self._lead(i, target)
        return (i, source, target)

    def undo(self, shift: _Shift) -> None:
        i, source, _ = shift
        self._lead(i, source)


def _balance_leaders(
    ordered: Sequence[PartitionAssignment],
    lists: list[list[int]],
    adjustable: AbstractSet[int],
    eligible: Sequence[int],
) -> None:
    """Rule 6: reorder the adjustable partitions' lists so preferred leaders balance."""
    counts = dict.fromkeys(eligible, 0)
    keys: dict[int, _LeaderKey] = {}
    for i, p in enumerate(ordered):
        replicas = lists[i]
        # A partition led from a broker in neither list (fenced while restarting) is left
        # alone: its leader comes back to it.
        frozen_leader = p.replicas[0] not in counts and p.replicas[0] in replicas
        if i not in adjustable or frozen_leader:
            if replicas[0] in counts:
                counts[replicas[0]] += 1
            continue
        candidates = tuple(b for b in replicas if b in counts)
        if candidates:
            keys[i] = (candidates, p.replicas[0], frozenset(p.isr))
    leaders = _Leaders(keys, counts)
    _equalise(leaders, counts, spread=leaders.change + 1)
    for i, leader in leaders.leader.items():
        replicas = lists[i]
        if replicas[0] != leader:
            replicas.remove(leader)
            replicas.insert(0, leader)


# ------------------------------------------------------------------------------ replication factor


def plan_replication_factor(
    partitions: Sequence[PartitionAssignment],
    replication_factor: int,
    brokers: Mapping[int, str | None],
    *,
    load: Mapping[int, int] | None = None,
) -> list[Move]:
    """Moves that give each partition `replication_factor` replicas (rule 9)."""
    if not 1 <= replication_factor <= len(brokers):
        raise ValueError(
            f"replication factor {replication_factor} needs 1-{len(brokers)} "
            f"(the brokers that can take replicas)"
        )
    ordered = _sorted_partitions(partitions)
    counts: dict[int, int] = (
        dict(Counter(b for p in ordered for b in p.replicas)) if load is None else dict(load)
    )
    eligible = sorted(brokers)
    racks = _racks(brokers, eligible)
    moves = []
    for p in ordered:
        replicas = list(p.replicas)
        if len(replicas) < replication_factor:
            _add_replicas(
                p, replicas, replication_factor, eligible=eligible, counts=counts, racks=racks
            )
        elif len(replicas) > replication_factor:
            _remove_replicas(
                p, replicas, replication_factor, brokers=brokers, counts=counts, racks=racks
            )
        else:
            continue
        moves.append(Move(p.topic, p.partition, p.replicas, tuple(replicas)))
    return moves


def _add_replicas(
    p: PartitionAssignment,
    replicas: list[int],
    factor: int,
    *,
    eligible: Sequence[int],
    counts: dict[int, int],
    racks: Mapping[int, str] | None,
) -> None:
    """Rule 9: append replicas on unused racks first, then the least loaded brokers."""
    free = [b for b in eligible if b not in replicas]
    if len(free) < factor - len(replicas):
        raise ValueError(
            f"partition {p.topic}-{p.partition} with replicas {list(p.replicas)} has only "
            f"{len(free)} other brokers to reach replication factor {factor}"
        )
    while len(replicas) < factor:
        used = {racks[b] for b in replicas if b in racks} if racks else set()
        target = min(
            free, key=lambda b: (racks is not None and racks[b] in used, counts.get(b, 0), b)
        )
        free.remove(target)
        replicas.append(target)
        counts[target] = counts.get(target, 0) + 1


def _remove_replicas(
    p: PartitionAssignment,
    replicas: list[int],
    factor: int,
    *,
    brokers: Mapping[int, str | None],
    counts: dict[int, int],
    racks: Mapping[int, str] | None,
) -> None:
    """Rule 9: drop out-of-sync, then unavailable, then rack-doubled, then the most loaded
    brokers' replicas, last ones first on a tie; never the preferred leader."""
    while len(replicas) > factor:
        per_rack = Counter(racks[b] for b in replicas if b in racks) if racks else Counter()
        ranked = [
            (
                b not in p.isr,
                b not in brokers,
                racks is not None and b in racks and per_rack[racks[b]] > 1,
                counts.get(b, 0),
                position,
                b,
            )
            for position, b in enumerate(replicas)
            if position > 0
        ]
        victim = max(ranked)[-1]
        replicas.remove(victim)
        if victim in counts:
            counts[victim] -= 1
