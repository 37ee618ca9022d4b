"""The log cleaner's I/O for one compacted partition (storage/compaction.py decides what
stays): read the log below the high watermark, then rewrite the cleanable range's batches
a chunk at a time. Blocking: run it on a worker thread, never on the event loop (each
chunk is one write transaction under the partition's lock, held for that chunk only).

A crash between chunks leaves every batch as it was or as cleaned (storage/log.py rule 7);
the next clean picks up where this one stopped. A truncation or retention between the read
and a chunk's write leaves the batches it changed alone (rewrite_batches checks each).
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftlite.broker.log_store import ReplicaLog
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.storage import compaction
from kraftlite.storage.compaction import CleanPolicy
from kraftlite.storage.log import BatchRewrite

READ_BYTES = 8 << 20  # what one read of the log holds
REWRITE_CHUNK = 256  # batches rewritten per transaction


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one clean did: the range it cleaned, the batches it rewrote, the bytes freed."""

    start: int
    end: int
    rewritten: int
    freed_bytes: int


def _read(log: ReplicaLog, offset: int, limit: int) -> bytes:
    """The batches from `offset` below `limit`; b"" once retention or truncation took the
    range meanwhile (the pass ends; the next one starts from the log as it is)."""
    try:
        return log.read(offset, READ_BYTES, max_offset=limit)
    except KraftliteError as exc:
        if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE:
            return b""
        raise


def clean(
    log: ReplicaLog, now_ms: int, policy: CleanPolicy, *, force: bool = False
) -> CleanResult | None:
    """One pass of the cleaner over `log` (compaction.py's rules), if one is due (rule 6)
    or `force`d; None when none was. The pass ends by recording where it stopped (the
    log's `cleaned_offset`), in a transaction of its own after its last rewrite."""
    high_watermark = log.high_watermark
    start = log.log_start_offset
    headers: list[batch_format.BatchHeader] = []
    latest: dict[bytes, int] = {}
    offset = start
    while offset < high_watermark:
        data = _read(log, offset, high_watermark)
        if not data:
            break
        decoded = list(batch_format.decode_stream(data))
        headers += [batch.header for batch in decoded]
        compaction.latest(decoded, latest)
        offset = decoded[-1].header.next_offset
    end = compaction.cleanable_end(
        headers, start, high_watermark, log.log_end_offset, now_ms, policy
    )
    if not force and not compaction.due(headers, log.cleaned_offset, end, now_ms, policy):
        return None
    whole = compaction.last_producer_batches(headers)
    pinned: set[bytes] = set()  # keys with a record in a batch left whole (rule 2)
    rewritten = freed = 0
    offset = max(start, headers[0].base_offset) if headers else start
    while offset < end:
        data = _read(log, offset, end)
        if not data:
            break
        chunk: list[BatchRewrite] = []
        for view in batch_format.split_batches(data):
            batch = batch_format.decode(view)
            offset = batch.header.next_offset
            if batch.header.base_offset in whole or batch.header.base_offset < start:
                pinned.update(key for key in batch.keys if key is not None)
                continue
            change = compaction.rewrite(batch, latest, now_ms, policy, len(view), pinned)
            if change is not None:
                chunk.append(change)
            if len(chunk) >= REWRITE_CHUNK:
                freed += log.rewrite_batches(chunk)
                rewritten += len(chunk)
                chunk = []
        if chunk:
            freed += log.rewrite_batches(chunk)
            rewritten += len(chunk)
    cleaned = min(offset, end)  # where this pass stopped (earlier if the log changed)
    log.rewrite_batches([], cleaned_to=cleaned)  # a small transaction of its own
    return CleanResult(start, cleaned, rewritten, freed)
