"""The uniform sticky assignor: which member should own which partition. Pure.

Rules (the spirit of Kafka's UniformAssignor, KIP-848):
1. Every partition of a subscribed topic goes to exactly one member subscribed to its topic.
2. Sticky: a member keeps what it owns while that is still valid and fair.
3. Uniform: partitions then move from the most to the least loaded member that may take
   them, until no such move would reduce the gap (for identical subscriptions the loads
   differ by at most one).
Deterministic: the same inputs give the same answer (sorted iteration everywhere).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

TopicPartition = tuple[str, int]


def assign(
    subscriptions: Mapping[str, frozenset[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, frozenset[TopicPartition]],
) -> dict[str, frozenset[TopicPartition]]:
    """member id -> the partitions it should own.

    `subscriptions`: member id -> subscribed topic names; `partition_counts`: topic ->
    partitions (unknown topics are skipped); `current`: what members own now.
    """
    members = sorted(subscriptions)
    owners: dict[str, set[TopicPartition]] = {m: set() for m in members}
    if not members:
        return {}
    valid = {
        (topic, p)
        for topic in sorted({t for topics in subscriptions.values() for t in topics})
        for p in range(partition_counts.get(topic, 0))
    }
    taken: set[TopicPartition] = set()
    for member in members:  # rule 2: keep what is still valid (once)
        for tp in sorted(current.get(member, frozenset())):
            if tp in valid and tp[0] in subscriptions[member] and tp not in taken:
                owners[member].add(tp)
                taken.add(tp)
    rest: dict[str, list[TopicPartition]] = {}
    for tp in sorted(valid - taken):
        rest.setdefault(tp[0], []).append(tp)
    for topic, partitions in rest.items():  # rule 1: to the least loaded eligible member,
        # by (load, member id): a heap per topic, O(log members) a partition, not O(members)
        heap = [(len(owners[m]), m) for m in members if topic in subscriptions[m]]
        heapq.heapify(heap)
        for tp in partitions:
            load, chosen = heapq.heappop(heap)
            owners[chosen].add(tp)
            heapq.heappush(heap, (load + 1, chosen))
    _balance(owners, subscriptions)
    return {m: frozenset(owned) for m, owned in owners.items()}


def _balance(
    owners: dict[str, set[TopicPartition]], subscriptions: Mapping[str, frozenset[str]]
) -> None:
    """Rule 3: move one partition at a time from a heavier to a lighter eligible member."""
    while True:
        loads = [len(owned) for owned in owners.values()]
        if max(loads) - min(loads) <= 1:  # no pair differs by more: nothing can move (this
            return  # keeps a settled group's heartbeat O(members), not O(members^2))
        moved = False
        by_load = sorted(owners, key=lambda m: (-len(owners[m]), m))
        for heavy in by_load:
            for light in reversed(by_load):
                if len(owners[heavy]) - len(owners[light]) <= 1:
                    continue
                movable = [tp for tp in owners[heavy] if tp[0] in subscriptions[light]]
                if movable:
                    tp = max(movable)  # the highest: deterministic, no sort per move
                    owners[heavy].remove(tp)
                    owners[light].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return
