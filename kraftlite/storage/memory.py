"""Partition logs in memory: the twin of storage/log.py (LMDB) for in-process tests.

It keeps the port `kraftlite.broker.log_store.ReplicaLog` / `LogStore` with the LMDB
adapter's behaviour, down to its errors and their details: dense offsets, stamped leader
epochs and their cache, whole-batch truncation and retention bounded by the high watermark,
offsets by time, deleted partitions that refuse everything. tests/contract runs one suite
of scenarios over both adapters, so the twin cannot drift.

Durability is modelled, not performed: every committed change stays (as an LMDB
transaction would), and `restarted` gives the storage a new process would find. Appends
and high watermark moves are not written at once; a high watermark is as its partition's
meta record was last written (`checkpoint_high_watermark`, truncation, retention, reset),
with storage/log.py's bookkeeping of what it already checkpointed, and a clean close
checkpoints every log first.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import stored as stored_batch
from kraftlite.storage import keys as key_index
from kraftlite.storage import txn_headers
from kraftlite.storage.log import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    AppendInfo,
    BatchRewrite,
    LogChanged,
    StorageConfig,
    check_runs,
)

MEMORY_PATH: Final = Path(":memory:")  # the path a memory storage's config names
_MAX_EPOCH: Final = 2**31 - 1
_MAX_NAME_BYTES: Final = 400


@dataclass(frozen=True, slots=True)
class _Stored:
    """A batch as stored: its bytes (stamped) and their header."""

    header: batch_format.BatchHeader
    data: bytes

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset


class MemoryPartitionLog:
    """One partition's log: a list of stored batches. Every operation holds the
    partition's lock (reads too: they may come from worker threads)."""

    def __init__(
        self,
        name: str,
        *,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        batches: list[_Stored] | None = None,
        epochs: list[tuple[int, int]] | None = None,
        written_end: int = 0,
        cleaned: int | None = None,
        index: tuple[dict[bytes, int], int] | None = None,
    ) -> None:
        self.name = name
        self.closed = False
        self._lock = threading.Lock()
        self._batches: list[_Stored] = list(batches or [])
        self._epochs: list[tuple[int, int]] = list(epochs or [])
        self.log_start_offset = log_start_offset
        self.log_end_offset = self._batches[-1].next_offset if self._batches else log_start_offset
        self.size_bytes = sum(stored.header.batch_length for stored in self._batches)
        self.high_watermark = min(max(high_watermark, log_start_offset), self.log_end_offset)
        # The meta record as last written (high watermark, log end): what a restart finds,
        # and what the LMDB log believes it checkpointed when it opened.
        self._written = (high_watermark, written_end)
        self._checkpointed = self._written
        self._cleaned = log_start_offset if cleaned is None else cleaned
        # the key index (storage/log.py rule 8): index key -> offset, and where it ends
        self._index, self._indexed = index if index is not None else ({}, log_start_offset)
        self._truncations = 0

    # -- helpers ------------------------------------------------------------------------

    def mutating(self) -> threading.Lock:
        """The lock every operation on this partition holds."""
        return self._lock

    def _check_open(self) -> None:
        if self.closed:
            raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{self.name} was deleted")

    def _out_of_range(self, offset: int) -> KraftliteError:
        return KraftliteError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]",
            log_start_offset=self.log_start_offset,
            high_watermark=self.high_watermark,
        )

    def _holding(self, offset: int) -> int:
        """The index of the last batch starting at or before `offset` (-1: none)."""
        return bisect.bisect_right(self._batches, offset, key=lambda s: s.base_offset) - 1

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1][0] if self._epochs else UNDEFINED_EPOCH

    @property
    def cleaned_offset(self) -> int:
        """Where the cleaner's last pass ended, within [log start, log end]."""
        return max(min(self._cleaned, self.log_end_offset), self.log_start_offset)

    def epochs(self) -> list[tuple[int, int]]:
        """The leader-epoch cache: (leader_epoch, start_offset), oldest first."""
        with self._lock:
            return list(self._epochs)

    # -- appends ------------------------------------------------------------------------

    def append(self, batch: bytes | bytearray | memoryview, leader_epoch: int) -> AppendInfo:
        """Leader path: validate, assign the log end offset, stamp `leader_epoch`."""
        try:
            stored_batch.validate(batch)
        except batch_format.CorruptBatchError as exc:
            raise KraftliteError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
        with self._lock:
            self._check_open()
            if not 0 <= leader_epoch <= _MAX_EPOCH:
                raise KraftliteError(
                    ErrorCode.INVALID_REQUEST, f"leader epoch {leader_epoch} out of range"
                )
            if leader_epoch < self.latest_epoch:
                raise KraftliteError(
                    ErrorCode.FENCED_LEADER_EPOCH,
                    f"append with leader epoch {leader_epoch} below {self.latest_epoch}",
                )
            stamped = bytes(batch_format.stamp(batch, self.log_end_offset, leader_epoch))
            return self._persist([_Stored(batch_format.read_header(stamped), stamped)])

    def append_replicated(
        self, data: bytes | bytearray | memoryview, *, allow_gaps: bool = False
    ) -> AppendInfo | None:
        """Follower path: batches exactly as the leader stamped them, the first at the log
        end offset."""
        try:
            entries = [
                _Stored(header, bytes(view)) for header, view in batch_format.checked_batches(data)
            ]
        except batch_format.CorruptBatchError as exc:
            raise KraftliteError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
        if not entries:
            return None
        with self._lock:
            self._check_open()
            return self._persist(entries, replicated=True, allow_gaps=allow_gaps)

    def _persist(
        self, entries: list[_Stored], *, replicated: bool = False, allow_gaps: bool = False
    ) -> AppendInfo:
        """Check every entry, then take them all (all or nothing). A follower's empty log
        whose start lies inside the first batch takes it whole (storage/log.py rule 5)."""
        expected = self.log_end_offset
        head = entries[0].header
        straddles = (
            replicated and not self._batches and head.base_offset < expected < head.next_offset
        )
        if straddles:
            expected = head.base_offset
        epochs = list(self._epochs)
        size = self.size_bytes
        for stored in entries:
            header = stored.header
            if header.leader_epoch < 0:
                raise KraftliteError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"batch at offset {header.base_offset} has no leader epoch (not stamped)",
                )
            # storage/log.py rule 7: followers take a compacted log's gaps as they are
            if header.base_offset != expected and not (
                allow_gaps and header.base_offset > expected
            ):
                raise KraftliteError(
                    ErrorCode.INVALID_REQUEST,
                    f"batch at offset {header.base_offset} does not follow log end offset "
                    f"{expected}",
                )
            if epochs and header.leader_epoch < epochs[-1][0]:
                raise KraftliteError(
                    ErrorCode.FENCED_LEADER_EPOCH,
                    f"batch epoch {header.leader_epoch} below the log's {epochs[-1][0]}",
                )
            if not epochs or header.leader_epoch > epochs[-1][0]:
                epochs.append((header.leader_epoch, max(header.base_offset, self.log_start_offset)))
            expected = header.next_offset
            size += header.batch_length
        self._batches = [*self._batches, *entries]
        self._epochs = epochs
        self.log_end_offset = expected
        self.size_bytes = size
        if straddles:  # written with the size, as storage/log.py does
            self._written = self._checkpointed = (self.high_watermark, expected)
        first = max(entries[0].base_offset, self.log_start_offset)
        return AppendInfo(
            first_offset=first,
            last_offset=expected - 1,
            record_count=sum(stored.header.record_count for stored in entries)
            - (first - entries[0].base_offset),
            max_timestamp=max(stored.header.max_timestamp for stored in entries),
            log_end_offset=expected,
        )

    # -- reads --------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """The stored batches from the one holding `offset`: at least one if any, then whole
        batches within `max_bytes`, none ending above `max_offset`."""
        with self._lock:
            self._check_open()
            end = self.log_end_offset
            limit = end if max_offset is None else min(max_offset, end)
            if offset < self.log_start_offset or offset > end:
                raise self._out_of_range(offset)
            if offset >= limit:
                return b""
            first = self._holding(offset)
            if first < 0 or self._batches[first].next_offset <= offset:
                first += 1  # a gap compaction left (storage/log.py rule 7): the next batch
            parts: list[bytes] = []
            total = 0
            for stored in self._batches[first:]:
                length = stored.header.batch_length
                if stored.next_offset > limit or (parts and total + length > max_bytes):
                    break
                parts.append(stored.data)
                total += length
            return b"".join(parts)

    def offset_for_time(
        self, timestamp: int, max_offset: int | None = None
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record stamped at or after `timestamp`, or None
        if there is none below `max_offset`."""
        with self._lock:
            self._check_open()
            batches = self._batches
            log_start = self.log_start_offset
        found = None
        for stored in batches:
            header = stored.header
            if header.max_timestamp < timestamp or header.next_offset <= log_start:
                continue
            stamps = stored_batch.timestamps(stored.data)
            skipped = max(0, log_start - header.base_offset)  # below the log start
            later = np.flatnonzero(stamps[skipped:] >= timestamp)
            if later.size:
                position = skipped + int(later[0])
                found = (header.base_offset + position, int(stamps[position]))
                break
        if found is None or (max_offset is not None and found[0] >= max_offset):
            return None
        return found

    def batch_headers(self, start: int = 0) -> list[batch_format.BatchHeader]:
        """The header of every stored batch from the one holding `start` on, first to last."""
        with self._lock:
            self._check_open()
            return [s.header for s in self._batches if s.header.next_offset > start]

    def _index_bounds(
        self, start: int, high_watermark: int, window_bytes: int
    ) -> tuple[int, frozenset[int]]:
        return txn_headers.index_bounds(self.batch_headers(start), high_watermark, window_bytes)

    def producer_headers(self) -> list[batch_format.BatchHeader]:
        """The headers of every stored idempotent producer's batch, first to last."""
        with self._lock:
            self._check_open()
            return [s.header for s in self._batches if s.header.producer_id >= 0]

    def end_offset_for(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for a follower asking where `leader_epoch` ends (KIP-101/279)."""
        with self._lock:
            self._check_open()
            epochs, log_end_offset = list(self._epochs), self.log_end_offset
        if leader_epoch == UNDEFINED_EPOCH or not epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if leader_epoch == epochs[-1][0]:
            return leader_epoch, log_end_offset
        higher = next(((e, s) for e, s in epochs if e > leader_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        floor = [e for e, _ in epochs if e <= leader_epoch]
        return (floor[-1] if floor else leader_epoch), higher[1]

    # -- high watermark -----------------------------------------------------------------

    def set_high_watermark(self, offset: int) -> None:
        with self._lock:
            self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    def checkpoint_high_watermark(self) -> None:
        with self._lock:
            checkpoint = (self.high_watermark, self.log_end_offset)
            if self.closed or checkpoint == self._checkpointed:
                return
            self._written = (max(self.high_watermark, self.log_start_offset), self.log_end_offset)
            self._checkpointed = checkpoint

    # -- truncation and retention -------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= `offset`; below the log start the log is
        emptied and restarts at `offset`."""
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return
            if offset <= self.log_start_offset:
                self._reset_locked(offset)
                return
            cut = self._holding(offset)
            if cut < 0 or self._batches[cut].next_offset <= offset:
                cut += 1  # `offset` lies in a gap (storage/log.py rule 7)
            if self._batches[cut].base_offset < self.log_start_offset:  # it holds the log start
                self._reset_locked(self.log_start_offset)
                return
            new_end = self._batches[cut - 1].next_offset if cut else self.log_start_offset
            new_end = max(new_end, self.log_start_offset)
            freed = sum(stored.header.batch_length for stored in self._batches[cut:])
            self._batches = self._batches[:cut]
            self._epochs = [(e, s) for e, s in self._epochs if s < new_end]
            self.high_watermark = max(min(self.high_watermark, new_end), self.log_start_offset)
            self._written = (self.high_watermark, new_end)
            self.log_end_offset = new_end
            self.size_bytes -= freed
            self._checkpointed = (self.high_watermark, new_end)
            self._cleaned = min(self._cleaned, new_end)
            self._truncations += 1
            if self._indexed > new_end:
                self._index, self._indexed = {}, self.log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self._lock:
            self._check_open()
            self._reset_locked(offset)

    def _reset_locked(self, offset: int) -> None:
        self._batches = []
        self._epochs = []
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset
        self._written = self._checkpointed = (offset, offset)
        self.size_bytes = 0
        self._cleaned = offset
        self._truncations += 1
        self._index, self._indexed = {}, offset

    def advance_log_start(self, offset: int) -> int:
        """Move the log start up to `offset`, never past the high watermark: whole batches
        below it deleted, a batch holding it kept with its records below it unreadable
        (storage/log.py rule 5). The records no longer readable."""
        deleted = self.apply_retention(0, -1, -1, max_offset=offset, before_offset=offset)
        with self._lock:
            self._check_open()
            new_start = min(offset, self.high_watermark)
            if new_start <= self.log_start_offset:
                return deleted
            deleted += new_start - self.log_start_offset
            self._epochs = self._epochs_from_start(new_start)
            self.log_start_offset = new_start
            self._written = self._checkpointed = (self.high_watermark, self.log_end_offset)
            return deleted

    # -- the key index (storage/log.py rule 8) ---------------------------------------------

    @property
    def indexed_offset(self) -> int:
        return max(self._indexed, self.log_start_offset)

    def index_keys(self, max_bytes: int) -> int:
        """As the LMDB log's: about `max_bytes` of batches more, up to the high watermark."""
        self._check_open()
        start, truncations = self.indexed_offset, self._truncations
        high_watermark = self.high_watermark
        if start >= high_watermark:
            return start
        # only decided records (issue 27): up to the first undecided transaction, without
        # the aborted ones (txn_headers.py)
        limit, aborted = self._index_bounds(start, high_watermark, max_bytes)
        if start >= limit:
            return start
        try:
            data = self.read(start, max_bytes, max_offset=limit)
        except KraftliteError as exc:
            if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                return self.indexed_offset
            raise
        changed, end = key_index.updates(stored_batch.decode_stream(data), start, aborted)
        if end <= start:
            return start
        with self._lock:
            self._check_open()
            if self._truncations != truncations or self.indexed_offset != start:
                return self.indexed_offset
            index = dict(self._index)
            for key, offset in changed.items():
                if offset is None:
                    index.pop(key, None)
                else:
                    index[key] = offset
            self._index, self._indexed = index, end
            return end

    def key_offset(self, key: bytes) -> int | None:
        with self._lock:
            self._check_open()
            return self._index.get(key_index.index_key(key))

    def index_page(self, after: bytes | None, limit: int) -> list[tuple[bytes, int]]:
        with self._lock:
            self._check_open()
            keys = sorted(self._index)
            start = 0 if after is None else bisect.bisect_right(keys, after)
            return [(key, self._index[key]) for key in keys[start : start + limit]]

    @property
    def truncations(self) -> int:
        return self._truncations

    def rewrite_batches(
        self,
        rewrites: Sequence[BatchRewrite],
        cleaned_to: int | None = None,
        truncations: int | None = None,
    ) -> int:
        """Log compaction (storage/log.py rule 7): each batch the cleaner read as it
        rewrote it, if it is unchanged, not the newest and below the high watermark;
        LogChanged, nothing written, after a truncation since `truncations` or with a batch
        that now holds the log start. The bytes freed."""
        checked = [check_runs(rewrite) for rewrite in rewrites]
        with self._lock:
            self._check_open()
            if truncations is not None and truncations != self._truncations:
                raise LogChanged(f"truncated since the pass read the log ({self.name})")
            batches = list(self._batches)
            freed = 0
            for rewrite, (runs_end, kinds) in zip(rewrites, checked, strict=True):
                at = next(
                    (i for i, b in enumerate(batches) if b.base_offset == rewrite.base_offset), -1
                )
                if at < 0:
                    continue
                header = batches[at].header
                if (
                    header.batch_length != rewrite.batch_length
                    or header.header_crc != rewrite.header_crc
                    or header.next_offset >= self.high_watermark
                    or header.next_offset >= self.log_end_offset
                ):
                    continue
                if header.base_offset < self.log_start_offset:
                    raise LogChanged(f"the log start moved into batch {header.base_offset}")
                own = (header.leader_epoch, header.magic, header.producer_id)
                if runs_end > header.next_offset or any(
                    kind[:3] != own or kind[3] != header.producer_epoch for kind in kinds
                ):
                    raise ValueError(f"the runs of batch {header.base_offset} are not its own")
                batches[at : at + 1] = [
                    _Stored(batch_format.read_header(run), bytes(run)) for run in rewrite.runs
                ]
                freed += rewrite.batch_length - sum(map(len, rewrite.runs))
            if freed:
                self._written = (self.high_watermark, self.log_end_offset)
                self._checkpointed = self._written
            self._batches = batches
            self.size_bytes -= freed
            if cleaned_to is not None:
                self._cleaned = max(min(cleaned_to, self.high_watermark), self.log_start_offset)
            return freed

    def apply_retention(
        self,
        now_ms: int,
        retention_ms: int,
        retention_bytes: int,
        max_offset: int | None = None,
        before_offset: int | None = None,
    ) -> int:
        """Delete whole batches from the head while they are older than `retention_ms`, or
        the log is larger than `retention_bytes` without them, or they end at or below
        `before_offset` (-1 / None: off); never one ending above `max_offset` (default: the
        high watermark). The records deleted."""
        with self._lock:
            self._check_open()
            hw = self.high_watermark
            limit = hw if max_offset is None else min(max_offset, hw)
            before = -1 if before_offset is None else before_offset
            size = self.size_bytes
            removed = 0
            for stored in self._batches:
                header = stored.header
                expired = retention_ms >= 0 and now_ms - header.max_timestamp > retention_ms
                oversized = retention_bytes >= 0 and size - header.batch_length >= retention_bytes
                below = header.next_offset <= before
                if header.next_offset > limit or not (expired or oversized or below):
                    break
                size -= header.batch_length
                removed += 1
            if not removed:
                return 0
            new_start = self._batches[removed - 1].next_offset
            deleted = new_start - self.log_start_offset
            self._batches = self._batches[removed:]
            self._epochs = self._epochs_from_start(new_start)
            self.log_start_offset = new_start
            self.size_bytes = size
            self.high_watermark = max(hw, new_start)
            # written with the new log start, as storage/log.py does
            self._written = self._checkpointed = (self.high_watermark, self.log_end_offset)
            return deleted

    def _epochs_from_start(self, start_offset: int) -> list[tuple[int, int]]:
        """The epoch cache once the log starts at `start_offset` (Kafka's
        truncateFromStart): the last epoch starting at or before it now starts at it."""
        before = [(e, s) for e, s in self._epochs if s <= start_offset]
        after = [(e, s) for e, s in self._epochs if s > start_offset]
        return ([(before[-1][0], start_offset)] if before else []) + after

    # -- restarts -----------------------------------------------------------------------

    def _reopened(self, *, crashed: bool) -> MemoryPartitionLog:
        """This log as a new process opens it (after a clean close checkpointed it, unless
        `crashed`); this object is closed."""
        if not crashed:
            self.checkpoint_high_watermark()
        with self._lock:
            self.closed = True
            high_watermark, written_end = self._written
            return MemoryPartitionLog(
                self.name,
                log_start_offset=self.log_start_offset,
                high_watermark=high_watermark,
                batches=self._batches,
                epochs=self._epochs,
                written_end=written_end,
                cleaned=self._cleaned,
                index=(self._index, self._indexed),
            )


class MemoryLogStorage:
    """All partition logs of one broker, in memory (the twin of `LogStorage`)."""

    def __init__(self, config: StorageConfig | None = None) -> None:
        self.config = config or StorageConfig(path=MEMORY_PATH)
        self._partitions: dict[str, MemoryPartitionLog] = {}
        self._lock = threading.Lock()

    def open_partition(self, name: str) -> MemoryPartitionLog:
        """The log of partition `name`, created empty if it does not exist."""
        if not name or "\x00" in name or len(name.encode()) > _MAX_NAME_BYTES:
            raise ValueError(f"invalid partition log name {name!r}")
        with self._lock:
            log = self._partitions.get(name)
            if log is None:
                log = self._partitions[name] = MemoryPartitionLog(name)
            return log

    def partition_names(self) -> list[str]:
        with self._lock:
            return list(self._partitions)

    def delete_partition(self, name: str) -> None:
        """Delete a partition's data; its log object refuses everything from now on."""
        with self._lock:
            log = self._partitions.pop(name, None)
        if log is not None:
            with log.mutating():
                log.closed = True

    def restarted(self, *, crashed: bool = False) -> MemoryLogStorage:
        """The storage a new process finds once this one stopped: every committed change,
        and the high watermarks as last written (a clean close checkpoints them first; a
        crash does not). Every log of this storage is closed."""
        fresh = MemoryLogStorage(self.config)
        with self._lock:
            for name, log in self._partitions.items():
                fresh._partitions[name] = log._reopened(crashed=crashed)
            self._partitions = {}
        return fresh
