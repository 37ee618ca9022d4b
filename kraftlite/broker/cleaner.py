"""The log cleaner's I/O for one compacted partition (storage/compaction.py decides what
stays): read the log below the high watermark, then rewrite the cleanable range's batches
a chunk at a time. Blocking: run it on a worker thread, never on the event loop (each
chunk is one write transaction under the partition's lock, held for that chunk only).

A crash between chunks leaves every batch as it was or as cleaned (storage/log.py rule 7);
the next clean picks up where this one stopped. Retention between the read and a chunk's
write leaves the batches it took alone (rewrite_batches checks each); a truncation, or the
log start moved into a batch the pass planned to rewrite, ends the pass there.

`IoThrottle` holds a pass to `log.cleaner.io.max.bytes.per.second` (Kafka's name: the bytes
the cleaner reads and writes, together), sleeping on the cleaner's thread.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from kraftlite.broker.log_store import ReplicaLog
from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.storage import compaction
from kraftlite.storage.compaction import CleanPolicy
from kraftlite.storage.log import BatchRewrite, LogChanged

# What one read of the log holds, and the batches rewritten per transaction: each read is
# copied out of the map and handed to the cleaner's process, each transaction holds the
# partition's lock, and all of it the GIL, while a producer's append may wait
# (scripts/bench_compaction.py "append": p99 4.1 ms with 8 MiB and 32, 2.5 ms with these)
READ_BYTES = 1 << 20
REWRITE_CHUNK = 8


class Planning(Protocol):
    """One pass's decisions (compaction.PassPlan, or its proxy in the cleaner's process),
    over the reads the pass makes: the proxy reads ahead of the process by one, so the
    broker's reads and writes overlap the process's work."""

    def fold(self, reads: Iterable[bytes]) -> None: ...

    def plan(self, reads: Iterable[bytes]) -> Generator[list[BatchRewrite]]: ...

    def end(self) -> None: ...


# (now_ms, policy, log start, rule 4's whole batches, rule 8's aborted and undecided ones)
# -> a pass's decisions
Planner = Callable[
    [int, CleanPolicy, int, Collection[int], Collection[int], Collection[int]], Planning
]


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one clean did: the range it cleaned, the batches it rewrote, the bytes freed;
    `ended_early`: the log changed under it (LogChanged), the rest left to the next pass."""

    start: int
    end: int
    rewritten: int
    freed_bytes: int
    ended_early: bool = False


@dataclass
class CleanerState:
    """What the cleaner last saw of one partition, for its metrics (docs/metrics.md): set
    on the cleaner's thread, read by a scrape (each field replaced whole)."""

    dirtiness: compaction.Dirtiness | None = None  # at the last look (None: none yet)
    last_pass_ms: int | None = None  # wall clock of the last pass's end (this process)
    passes: int = 0
    freed_bytes: int = 0

    def passed(self, result: CleanResult, now_ms: int) -> None:
        self.last_pass_ms = now_ms
        self.passes += 1
        self.freed_bytes += max(0, result.freed_bytes)


@dataclass
class IoThrottle:
    """At most `rate` bytes a second (Kafka's Throttler): `spent(n)` sleeps while the bytes
    of the current window are ahead of the rate; a window ends with each sleep, or after a
    second, so idle time earns no burst longer than a second's worth."""

    rate: int
    clock: Clock
    sleep: Callable[[float], object] = field(default=time.sleep)
    _window_ms: int | None = None  # when the current window started
    _bytes: int = 0  # spent in it

    def spent(self, count: int) -> None:
        now = self.clock.monotonic_ms()
        if self._window_ms is None:
            self._window_ms = now
        self._bytes += count
        elapsed_s = (now - self._window_ms) / 1000
        ahead_s = self._bytes / self.rate - elapsed_s
        if ahead_s > 0:
            self.sleep(ahead_s)
            self._window_ms, self._bytes = self.clock.monotonic_ms(), 0
        elif elapsed_s >= 1:
            self._window_ms, self._bytes = now, 0


class Stopped(Exception):
    """The broker is stopping: the pass ends between two chunks (`clean`'s `stopping`)."""


class _Reader:
    """The log's batches from `offset` below `limit`, a read at a time (each counted by
    `spent`); `offset` is where the reads got to. It ends early when retention or a
    truncation took the rest (the next pass starts from the log as it is then)."""

    def __init__(
        self, log: ReplicaLog, offset: int, limit: int, spent: Callable[[int], None]
    ) -> None:
        self.offset = offset
        self._log = log
        self._limit = limit
        self._spent = spent

    def __iter__(self) -> Iterator[bytes]:
        while self.offset < self._limit:
            data = _read(self._log, self.offset, self._limit)
            if not data:
                return
            self._spent(len(data))
            self.offset = batch_format.next_offset_after(data)
            yield data


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
    log: ReplicaLog,
    now_ms: int,
    policy: CleanPolicy,
    *,
    force: bool = False,
    throttle: IoThrottle | None = None,
    stopping: Callable[[], bool] = lambda: False,
    observe: Callable[[compaction.Dirtiness], object] = lambda _: None,
    planner: Planner = compaction.PassPlan,
) -> CleanResult | None:
    """One pass of the cleaner over `log` (compaction.py's rules), if one is due (rule 6)
    or `force`d; None when none was. The pass ends by recording where it stopped (the
    log's `cleaned_offset`), in a transaction of its own after its last rewrite. Every
    read and rewrite is counted by `throttle`; `stopping()` true before one of them ends
    the pass there (Stopped), what it rewrote so far kept. `observe` is told what is
    dirty, from the headers read to decide, and again after a pass (by the same headers:
    the rewritten batches' sizes are not read again). `planner` makes the pass's
    decisions from the bytes read (compaction.py rule 7): on this thread by default, or in
    the cleaner's process (cleaner_process.py)."""

    def spent(count: int) -> None:
        if throttle is not None:
            throttle.spent(count)
        if stopping():
            raise Stopped

    truncations = log.truncations  # every rewrite of the pass is held to it
    high_watermark = log.high_watermark
    start = log.log_start_offset
    # whether a pass is due, from the batch headers alone (compaction.py rule 6): a
    # compacted partition with nothing to clean costs a scan of its headers, not a read
    headers = [h for h in log.batch_headers() if h.next_offset <= high_watermark]
    spent(batch_format.HEADER_V2_SIZE * len(headers))
    end = compaction.cleanable_end(
        headers, start, high_watermark, log.log_end_offset, now_ms, policy
    )
    txns = compaction.transactions(headers)  # rule 8
    if txns.first_unstable is not None:
        end = max(start, min(end, txns.first_unstable))
    observe(compaction.dirtiness(headers, log.cleaned_offset, end))
    if not force and not compaction.due(headers, log.cleaned_offset, end, now_ms, policy):
        return None
    whole = compaction.last_producer_batches(headers)
    plan = planner(now_ms, policy, start, whole, txns.aborted, txns.undecided)
    # rule 2's map, from the whole log below the last stable offset: a record past the
    # first undecided transaction is not readable yet to a read_committed consumer, and
    # not to the key index, so it supersedes nothing
    stable = high_watermark if txns.first_unstable is None else txns.first_unstable
    plan.fold(_Reader(log, start, max(start, stable), spent))
    rewritten = freed = 0
    reader = _Reader(log, max(start, headers[0].base_offset) if headers else start, end, spent)
    try:
        with contextlib.closing(plan.plan(reader)) as planned:  # closed, whatever happens
            for changes in planned:
                for at in range(0, len(changes), REWRITE_CHUNK):
                    chunk = changes[at : at + REWRITE_CHUNK]
                    freed += log.rewrite_batches(chunk, truncations=truncations)
                    rewritten += len(chunk)
                    spent(_written(chunk))
    except LogChanged:
        # a truncation, or the log start moved into a batch planned as any other: what
        # was rewritten so far stands (each chunk held), the rest waits for the next pass
        return CleanResult(start, log.cleaned_offset, rewritten, freed, ended_early=True)
    plan.end()
    offset = reader.offset
    cleaned = min(offset, end)  # where this pass stopped (earlier if the log changed)
    with contextlib.suppress(LogChanged):  # then the next pass starts where the last did
        log.rewrite_batches([], cleaned_to=cleaned, truncations=truncations)
    observe(compaction.dirtiness(headers, cleaned, end))
    return CleanResult(start, cleaned, rewritten, freed)


def _written(chunk: list[BatchRewrite]) -> int:
    return sum(len(run) for rewrite in chunk for run in rewrite.runs)
