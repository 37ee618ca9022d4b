"""A log's transactions as its batch headers show them (issue 27), for the storage's own
readers that must see only decided records: the log cleaner (compaction.py rule 8) and the
key index (keys.py). Pure.

A transactional batch belongs to its producer's transaction in the partition until that
producer's next marker, which decides it (the marker's kind is in its header, batch
format "Transactions"); batches with no marker after them below the high watermark are
undecided.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.batch import BatchHeader


@dataclass(frozen=True, slots=True)
class Transactions:
    """A log's transactions, from its headers."""

    first_unstable: int | None  # the first offset of the earliest undecided transaction
    aborted: frozenset[int]  # base offsets of aborted transactions' batches
    undecided: frozenset[int]  # base offsets of undecided transactions' batches


def transactions(headers: Iterable[BatchHeader]) -> Transactions:
    """The transactions of the batches of `headers` (first to last, those below the high
    watermark): a transaction is decided by its producer's next marker among them."""
    open_txns: dict[int, list[int]] = {}
    aborted: list[int] = []
    for header in headers:
        if not batch_format.is_transactional(header):
            continue
        if batch_format.is_control(header):
            batches = open_txns.pop(header.producer_id, [])
            if not header.attributes & batch_format.ATTR_COMMIT:
                aborted += batches
        else:
            open_txns.setdefault(header.producer_id, []).append(header.base_offset)
    first = min((batches[0] for batches in open_txns.values()), default=None)
    undecided = frozenset(offset for batches in open_txns.values() for offset in batches)
    return Transactions(first, frozenset(aborted), undecided)


def index_bounds(
    headers: Iterable[BatchHeader], high_watermark: int, window_bytes: int
) -> tuple[int, frozenset[int]]:
    """What the key index may take of the batches of `headers` (from where it stands, first
    to last) in a read of about `window_bytes`: the offset to stop at (the first undecided
    transaction's, else the high watermark) and the batches to leave out (aborted
    transactions'). The headers are read only until every transaction begun in the window
    is decided, and the offset is then capped at the window's end: the catch-up of a long
    tail reads each header about once, not once per read."""
    open_txns: dict[int, list[int]] = {}
    aborted: list[int] = []
    seen = 0
    window_end: int | None = None
    for header in headers:
        if header.next_offset > high_watermark:
            break
        if window_end is None:
            seen += header.batch_length
            if seen >= window_bytes:
                window_end = header.next_offset
        elif not any(batches[0] < window_end for batches in open_txns.values()):
            break  # the window's transactions are all decided: the rest is not needed
        if not batch_format.is_transactional(header):
            continue
        if batch_format.is_control(header):
            batches = open_txns.pop(header.producer_id, [])
            if not header.attributes & batch_format.ATTR_COMMIT:
                aborted += batches
        else:
            open_txns.setdefault(header.producer_id, []).append(header.base_offset)
    limit = min([high_watermark, *(batches[0] for batches in open_txns.values())])
    if window_end is not None:
        limit = min(limit, window_end)
    return limit, frozenset(aborted)
