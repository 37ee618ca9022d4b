"""What the log cleaner keeps of a compacted partition (Kafka's LogCleaner, cleanup.policy
compact): the decisions, apart from the I/O that reads batches and writes their rewrites
(storage/log.py `rewrite_batches`, rule 7). Pure.

Rules (Kafka's semantics and names, docs/design/storage.md "Compaction"):
1. The cleanable range is [log start, cleanable end): batches ending below the high
   watermark (the one ending at it stays, so every gap below the high watermark is followed
   by a committed batch, and a read there always finds one), never the newest batch
   (Kafka's active segment), and ending at the first batch that holds a record younger than
   `min.compaction.lag.ms`, so every record stays uncompacted at least that long
   (`cleanable_end`).
2. A record in the cleanable range is kept when it is the latest of its key in the log
   (`latest`: the key's last offset anywhere below the last stable offset, the range past
   the cleanable end included: a newer record of the key there is already readable, to
   read_committed consumers and the key index too; one past the first undecided
   transaction is not, whoever wrote it, so it supersedes nothing yet), except a
   tombstone (null value) whose timestamp is more than `delete.retention.ms` old, which
   goes with everything before it: a consumer that read the log's head within
   delete.retention.ms has seen it; unless an older record of its key stays (rule 4's
   batches, or the batch holding the log start): then so does the tombstone, or the key
   would come back. Timestamps are the producers' (CreateTime), as retention's are; Kafka
   measures from the first clean that saw the tombstone (KIP-534's delete horizon), so a
   tombstone stamped long ago goes at the first clean here.
3. A record without a key is dropped, as Kafka's cleaner drops it (a compacted topic
   refuses them on produce; these were written before the topic became compacted).
4. An idempotent producer's last batch (not a marker) below the high watermark is kept whole: the
   producer's state is rebuilt from its batches (broker/producer_state.py), and its last
   committed sequence must stay. (Its later batches, above the high watermark, may still be
   truncated away; the committed ones never are, so a batch cleaned because a later
   committed one existed never becomes the last again.)
5. Offsets are never renumbered: `stored.kept_runs` keeps each record's offset, and a batch
   that keeps everything is not rewritten.
6. A pass is due (`due`) when the dirty part of the cleanable range (from where the last
   pass ended, the log's `cleaned_offset`) is at least `min.cleanable.dirty.ratio` of it
   by bytes, or when its oldest dirty record is older than `max.compaction.lag.ms`; never
   when nothing in the range is dirty.
7. A pass decides from the bytes it is given (`PassPlan`), so its decoding and deciding
   (most of a pass's CPU) can run in a process of its own (broker/cleaner_process.py) while
   the broker's thread reads the log and writes the rewrites.
8. Transactions (issue 27; docs/design/kafka-transactions.md [P26-P28]), from the headers
   alone (`transactions`): the cleanable range also ends at the first batch of a
   transaction whose marker is not below the high watermark, so a pass only rewrites
   decided transactions; an aborted transaction's batches go whole, and they and an
   undecided one's never count as a key's latest record (that one may yet abort); a
   committed one's records are compacted as any others; markers are kept
   whole (Kafka removes a marker once its transaction's records are all gone, after
   delete.retention.ms: kraftlite keeps them, a batch of one record per transaction and
   partition).
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import stored as stored_batch
from kraftlite.protocol.batch import BatchHeader, DecodedBatch
from kraftlite.storage.log import BatchRewrite
from kraftlite.storage.txn_headers import Transactions, transactions

__all__ = ["Transactions", "transactions"]  # rule 8's view, shared with the key index


@dataclass(frozen=True, slots=True)
class CleanPolicy:
    """A compacted topic's configs, as Kafka names them."""

    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    delete_retention_ms: int = 86_400_000  # delete.retention.ms
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    max_compaction_lag_ms: int = 2**63 - 1  # max.compaction.lag.ms


def cleanable_end(  # noqa: PLR0917 - the log's bounds, as the cleaner read them
    headers: Sequence[BatchHeader],
    log_start: int,
    high_watermark: int,
    log_end: int,
    now_ms: int,
    policy: CleanPolicy,
) -> int:
    """Rule 1: the offset the cleanable range ends at, given the headers of the log's
    batches from its start (first to last). Every batch below it ends below the high
    watermark, is not the newest (it ends below `log_end`) and holds no record younger
    than min.compaction.lag.ms; `log_start` when there is none."""
    end = log_start
    for header in headers:
        if header.next_offset >= high_watermark or header.next_offset >= log_end:
            break
        if now_ms - header.max_timestamp < policy.min_compaction_lag_ms:
            break
        end = header.next_offset
    return end


def dirty_ratio(headers: Sequence[BatchHeader], cleaned: int, end: int) -> float:
    """Rule 6: the bytes of the batches in [cleaned, end) over those below `end`."""
    total = dirty = 0
    for header in headers:
        if header.base_offset >= end:
            break
        total += header.batch_length
        if header.next_offset > cleaned:
            dirty += header.batch_length
    return dirty / total if total else 0.0


@dataclass(frozen=True, slots=True)
class Dirtiness:
    """What the cleaner has left to do in a partition (its metrics, docs/metrics.md): the
    dirty part's share of the cleanable range by bytes (rule 6), its bytes, and the
    producer timestamp of its oldest record (None when nothing dirty has one)."""

    ratio: float
    dirty_bytes: int
    oldest_dirty_ms: int | None

    def lag_ms(self, now_ms: int) -> int:
        """How long the oldest dirty record has waited (0 when there is none)."""
        return 0 if self.oldest_dirty_ms is None else max(0, now_ms - self.oldest_dirty_ms)


def dirtiness(headers: Sequence[BatchHeader], cleaned: int, end: int) -> Dirtiness:
    """Rule 6's figures for [log start, `end`) with the log cleaned up to `cleaned`."""
    dirty = [h for h in headers if h.base_offset < end and h.next_offset > cleaned]
    return Dirtiness(
        dirty_ratio(headers, cleaned, end),
        sum(h.batch_length for h in dirty),
        min((h.first_timestamp for h in dirty if h.first_timestamp >= 0), default=None),
    )


def due(
    headers: Sequence[BatchHeader], cleaned: int, end: int, now_ms: int, policy: CleanPolicy
) -> bool:
    """Rule 6: whether a pass over [log start, `end`) is worth making now."""
    dirty = [h for h in headers if h.base_offset < end and h.next_offset > cleaned]
    if not dirty:
        return False
    if dirty_ratio(headers, cleaned, end) >= policy.min_cleanable_dirty_ratio:
        return True
    oldest = min(h.first_timestamp for h in dirty)
    return now_ms - oldest > policy.max_compaction_lag_ms


def last_producer_batches(headers: Iterable[BatchHeader]) -> set[int]:
    """Rule 4: the base offsets of each idempotent producer's last batch."""
    last: dict[int, int] = {}
    for header in headers:
        # a marker is kept anyway (rule 8); the batch with the producer's last sequence
        # must stay too (Kafka's P29), even an aborted one
        if header.producer_id >= 0 and not batch_format.is_control(header):
            last[header.producer_id] = header.base_offset
    return set(last.values())


def keep(
    batch: DecodedBatch,
    latest_offsets: Mapping[bytes | None, int],
    now_ms: int,
    policy: CleanPolicy,
    pinned: Collection[bytes] = frozenset(),
) -> list[bool]:
    """Rules 2 and 3 for each record of a batch in the cleanable range. `pinned`: keys
    with an older record the cleaner leaves in place (in a batch kept whole, rule 4, even
    an aborted one, or the batch holding the log start); their tombstones stay, or that
    record would be the key's latest again, to read_uncommitted consumers at least (Kafka
    keeps only such a batch's header; kraftlite's format has no empty batch)."""
    base = batch.header.base_offset
    latest_of = latest_offsets.get
    kept = [  # the latest of its key (a record without a key has none, rule 3)
        key is not None and latest_of(key) == offset
        for key, offset in zip(batch.keys, range(base, base + len(batch.keys)), strict=True)
    ]
    values, timestamps, keys = batch.values, batch.timestamps, batch.keys
    for i in [i for i, value in enumerate(values) if value is None and kept[i]]:  # tombstones
        kept[i] = now_ms - timestamps[i] <= policy.delete_retention_ms or keys[i] in pinned
    return kept


def rewrite(  # noqa: PLR0917 - keep's inputs and the stored batch
    batch: DecodedBatch,
    latest_offsets: Mapping[bytes | None, int],
    now_ms: int,
    policy: CleanPolicy,
    stored: memoryview,
    pinned: Collection[bytes] = frozenset(),
) -> BatchRewrite | None:
    """The batch as the cleaner leaves it (rule 5), or None when it keeps every record.
    `stored`: the batch as stored, which `batch` decodes (a Kafka batch kept as sent is
    rewritten as such: protocol/stored.py `kept_runs`, each run compressed on its own, so
    what a run holds is at most its records compressed alone plus a header's 125 bytes;
    never their decompressed bytes)."""
    kept = keep(batch, latest_offsets, now_ms, policy, pinned)
    if all(kept):
        return None
    runs = stored_batch.kept_runs(stored, batch, kept)
    header = batch.header
    return BatchRewrite(header.base_offset, len(stored), header.header_crc, tuple(runs))


class PassPlan:
    """One pass's decisions (rules 2 to 5) over the log's bytes as the cleaner reads them:
    first `fold` every batch below the last stable offset, first to last (rule 2's map), then
    `plan` the cleanable range's batches, first to last; `end` frees the map. `whole`: rule
    4's batches (by base offset), left as they are, as is everything below `log_start`;
    their keys are pinned (`keep`). Each read (bytes) holds whole batches, one at least."""

    def __init__(  # noqa: PLR0917 - a Planner (broker/cleaner.py)
        self,
        now_ms: int,
        policy: CleanPolicy,
        log_start: int,
        whole: Collection[int],
        aborted: Collection[int] = frozenset(),
        undecided: Collection[int] = frozenset(),
    ) -> None:
        self.now_ms = now_ms
        self.policy = policy
        self.log_start = log_start
        self.whole = frozenset(whole)
        self.aborted = frozenset(aborted)  # rule 8: batches that go whole
        self.unfolded = self.aborted | frozenset(undecided)  # rule 8: no key's latest
        self.latest: dict[bytes | None, int] = {}  # rule 2's map (never a None key)
        self.pinned: set[bytes] = set()

    def fold(self, reads: Iterable[bytes]) -> None:
        for data in reads:
            self.fold_one(data)

    def plan(self, reads: Iterable[bytes]) -> Generator[list[BatchRewrite]]:
        for data in reads:
            yield self.plan_one(data)

    def end(self) -> None:
        """The pass is over: its keys are no longer needed."""
        self.latest, self.pinned = {}, set()

    def fold_one(self, data: bytes) -> None:
        """Take the keys of `data`'s batches into rule 2's map."""
        latest_offsets = self.latest
        for view in batch_format.split_batches(data):
            header, keys = stored_batch.keys_of(view)
            base = header.base_offset
            if base in self.unfolded or batch_format.is_control(header):
                continue  # rule 8: never a key's latest record
            latest_offsets.update(zip(keys, range(base, base + len(keys)), strict=True))
        latest_offsets.pop(None, None)  # records without a key (rule 3) are in no map

    def plan_one(self, data: bytes) -> list[BatchRewrite]:
        """The rewrites of `data`'s batches (those that keep every record need none)."""
        rewrites = []
        for view in batch_format.split_batches(data):
            batch = stored_batch.decode(view)
            base = batch.header.base_offset
            if base in self.aborted and base not in self.whole and base >= self.log_start:
                header = batch.header
                rewrites.append(BatchRewrite(base, len(view), header.header_crc, ()))
                continue
            if batch_format.is_control(batch.header):
                continue  # rule 8: kept whole
            if base in self.whole or base < self.log_start:
                # an aborted batch kept whole pins its keys too: a read_uncommitted consumer
                # reads its records, so a later tombstone of theirs must stay with it
                self.pinned.update(key for key in batch.keys if key is not None)
                continue
            change = rewrite(batch, self.latest, self.now_ms, self.policy, view, self.pinned)
            if change is not None:
                rewrites.append(change)
        return rewrites
