"""Replica placement for new partitions: Kafka's algorithm (AdminUtils.assignReplicasToBrokers).

Leaders go round robin from a random start, so they spread evenly; follower replicas are
shifted by a per-round offset, so replica sets differ across partitions. With racks, brokers
are first arranged alternating racks, and each partition's replicas take a broker from a rack
it does not use yet while one exists. Pure: the caller passes the seeded random source.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence


def _rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack in turn: r1b1, r2b1, r3b1, r1b2, ..."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(racks):
        by_rack.setdefault(racks[broker_id], []).append(broker_id)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    arranged: list[int] = []
    depth = 0
    while len(arranged) < len(racks):
        arranged += [queue[depth] for queue in queues if depth < len(queue)]
        depth += 1
    return arranged


def _replica_index(first: int, shift: int, replica: int, count: int) -> int:
    return (first + 1 + (shift + replica) % (count - 1)) % count


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    rng: random.Random,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for `partitions` new partitions over `brokers` (id -> rack or None)."""
    if not 0 < replication_factor <= len(brokers):
        raise ValueError(f"replication factor {replication_factor} with {len(brokers)} brokers")
    rack_aware = all(rack is not None for rack in brokers.values()) and len(brokers) > 1
    if rack_aware:
        racks = {b: str(rack) for b, rack in brokers.items()}
        arranged = _rack_alternated(racks)
    else:
        racks = {}
        arranged = sorted(brokers)
    count = len(arranged)
    start = rng.randrange(count)
    shift = rng.randrange(count)
    result: list[tuple[int, ...]] = []
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (start + partition) % count
        replicas = [arranged[first]]
        if rack_aware:
            replicas += _rack_aware_followers(arranged, racks, first, shift, replication_factor)
        else:
            replicas += [
                arranged[_replica_index(first, shift, j, count)]
                for j in range(replication_factor - 1)
            ]
        result.append(tuple(replicas))
    return result


def _rack_aware_followers(
    arranged: Sequence[int], racks: Mapping[int, str], first: int, shift: int, factor: int
) -> list[int]:
    count = len(arranged)
    all_racks = set(racks.values())
    chosen = [arranged[first]]
    used_racks = {racks[arranged[first]]}
    k = 0
    while len(chosen) < factor:
        candidate = arranged[_replica_index(first, shift, k, count)]
        k += 1
        rack_ok = racks[candidate] not in used_racks or used_racks == all_racks
        if candidate not in chosen and rack_ok:
            chosen.append(candidate)
            used_racks.add(racks[candidate])
        if k > 4 * count * factor:  # every rack used and every broker tried: take any unused
            chosen += [b for b in arranged if b not in chosen][: factor - len(chosen)]
    return chosen[1:]
