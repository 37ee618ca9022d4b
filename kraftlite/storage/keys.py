"""The key index of a compacted partition (storage/log.py rule 8): which records it holds
and under what key. Pure; both partition logs (LMDB and its in-memory twin) use it.

Rules:
1. The index maps a record key to the offset of the key's latest record, for the records
   below the offset it was built to (never above the high watermark: nothing uncommitted).
   A tombstone (null value) removes its key; a record without a key is not indexed.
2. Index keys sort as the record keys do, up to MAX_PLAIN_KEY bytes (b"\\x00" + key); a
   longer key (LMDB keys are at most 511 bytes) is indexed by its SHA-256, after every
   short key (b"\\x01" + digest). Readers find the record itself at the offset (its key
   and value), so a digest never has to be turned back into a key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable
from typing import Final

from kraftlite.protocol.batch import ATTR_CONTROL, DecodedBatch

MAX_PLAIN_KEY: Final = 400
_PLAIN, _DIGEST = b"\x00", b"\x01"


def index_key(key: bytes) -> bytes:
    """Rule 2."""
    if len(key) <= MAX_PLAIN_KEY:
        return _PLAIN + key
    return _DIGEST + hashlib.sha256(key).digest()


def updates(
    batches: Iterable[DecodedBatch], start: int, skip: Collection[int] = frozenset()
) -> tuple[dict[bytes, int | None], int]:
    """Rule 1 for the records of `batches` from offset `start` on: (index key -> offset of
    its latest record, or None for a key whose latest is a tombstone; the offset after the
    last batch). `skip`: batches (by base offset) whose records are no one's, an aborted
    transaction's (txn_headers.py), passed over as markers are."""
    changed: dict[bytes, int | None] = {}
    end = start
    for batch in batches:
        base = batch.header.base_offset
        end = max(end, batch.header.next_offset)
        if batch.header.attributes & ATTR_CONTROL or base in skip:
            continue  # a transaction's marker: its key is Kafka's control key, no record's
        for i, key in enumerate(batch.keys):
            if key is not None and base + i >= start:
                changed[index_key(key)] = None if batch.values[i] is None else base + i
    return changed, end
