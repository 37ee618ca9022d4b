"""Streaming source offsets, pure: `{"topic": {"partition": next offset to read}}`, exactly the
layout of Spark's Kafka source, so a checkpoint reads like one.

Rules:
1. Canonical form: topics sorted, partitions in numeric order, string keys, int values.
   Spark compares offsets as JSON strings; the same positions must print the same way or
   every trigger runs an empty micro-batch.
2. An end never goes below its start: a partition whose leader briefly reports a smaller
   high watermark (a new leader still learning it), or that is gone, keeps its position.
3. A partition that is new since the start begins at offset 0 (Kafka's rule): whatever
   retention already deleted there is data loss, reported like any other.
4. `maxOffsetsPerTrigger` is shared among partitions in proportion to what each has
   waiting, and every trigger with something waiting makes progress.

Never change the layout: existing checkpoints must keep working.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Positions = dict[tuple[str, int], int]
SourceOffset = dict[str, dict[str, int]]


def canonical(positions: Positions) -> SourceOffset:
    """Rule 1."""
    result: SourceOffset = {}
    for topic, partition in sorted(positions):
        result.setdefault(topic, {})[str(partition)] = positions[(topic, partition)]
    return result


def parse(offset: Mapping[str, Any] | None) -> Positions:
    """Positions from a source offset as Spark hands it back (JSON-decoded)."""
    if offset is None:
        return {}
    positions: Positions = {}
    for topic, partitions in offset.items():
        items = partitions.items() if isinstance(partitions, Mapping) else [("?", None)]
        for partition, position in items:
            if (
                not re.fullmatch("[0-9]+", str(partition))
                or not isinstance(position, int)
                or isinstance(position, bool)
                or position < 0
            ):
                raise ValueError(f"not a kraftlite source offset: {dict(offset)!r}")
            positions[(topic, int(partition))] = position
    return positions


def advance(start: Positions, available: Positions) -> Positions:
    """Rules 2 and 3: where a micro-batch may end, given each partition's high watermark."""
    end = dict(start)
    for tp, high_watermark in available.items():
        end[tp] = max(start.get(tp, 0), high_watermark)
    return end


def start_of(start: Positions, tp: tuple[str, int]) -> int:
    """Rule 3: where a partition's range in a micro-batch begins."""
    return start.get(tp, 0)


def cap(start: Positions, end: Positions, max_rows: int) -> Positions:
    """Rule 4: an end at most `max_rows` records past `start`, shared proportionally."""
    waiting = {tp: end[tp] - start_of(start, tp) for tp in end if end[tp] > start_of(start, tp)}
    total = sum(waiting.values())
    if total <= max_rows:
        return dict(end)
    budget = max(max_rows, 1)
    shares = {tp: n * budget // total for tp, n in waiting.items()}
    # hand out what the rounding left, largest remainders first (ties in a fixed order)
    left = budget - sum(shares.values())
    by_remainder = sorted(waiting, key=lambda tp: (-(waiting[tp] * budget % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1
    capped = dict(end)
    for tp, share in shares.items():
        capped[tp] = start_of(start, tp) + share
    return capped
