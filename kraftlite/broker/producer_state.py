"""Idempotent producers on a partition's leader (issue 16; Kafka's ProducerStateManager, no
transactions): a batch that names its producer id, epoch and base sequence (batch format v2)
is appended only if it is the next one that producer sends to this partition, so a retried
send is never written twice. Pure: the leader feeds it headers and offsets.

Rules (Kafka's, for idempotent producers):
1. Per producer id: its epoch, and the last five batches appended (sequences and offsets).
2. A batch whose sequences are exactly one of those five is a duplicate: it is not appended;
   the answer is the offsets it got the first time (Kafka answers success the same way).
3. Otherwise the batch must start at the sequence after the last one (sequences wrap at
   2**31), else OUT_OF_ORDER_SEQUENCE_NUMBER when it is ahead (a gap: a batch was lost), or
   DUPLICATE_SEQUENCE_NUMBER when it is behind (already written, too long ago to say where).
4. A higher epoch starts over at sequence 0; a lower one is INVALID_PRODUCER_EPOCH (a newer
   instance of the producer exists). A producer id with no state must start at sequence 0,
   else UNKNOWN_PRODUCER_ID (its state expired, or its batches were removed by retention):
   the client then starts a new sequence.
5. The state is rebuilt from the log's batch headers when a replica becomes leader
   (`rebuild`), so it survives failover: every acknowledged batch is in the new leader's
   log. Producers silent for `expiration_ms` are forgotten (Kafka's producer.id.expiration.ms).
6. Error texts name no id, epoch or sequence: a producer's next sequence told to whoever
   sent a batch would help them write under its id (issue 24; ids are also bound to their
   principal, security/producer_ids.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol.batch import BatchHeader

SEQUENCE_SPAN = 2**31
MAX_PRODUCERS = 100_000  # per partition: past it, the longest silent is forgotten
KEPT_BATCHES = 5  # Kafka's: a producer has at most 5 requests in flight per connection
DEFAULT_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms


class Appended(NamedTuple):
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    last_seen_ms: int
    batches: deque[Appended] = field(default_factory=lambda: deque(maxlen=KEPT_BATCHES))


def _ahead(sequence: int, of: int) -> int:
    """How far `sequence` is past `of`, modulo the wrap, in (-2**30, 2**30]."""
    delta = (sequence - of) % SEQUENCE_SPAN
    return delta - SEQUENCE_SPAN if delta > SEQUENCE_SPAN // 2 else delta


class ProducerStates:
    def __init__(self, expiration_ms: int = DEFAULT_EXPIRATION_MS) -> None:
        self.expiration_ms = expiration_ms
        self.entries: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader, now_ms: int) -> Appended | None:
        """Rules 2-4 for an incoming batch: None to append it, the earlier append for a
        duplicate, or KraftliteError."""
        pid, epoch, first = header.producer_id, header.producer_epoch, header.base_sequence
        entry = self.entries.get(pid)
        if entry is not None and now_ms - entry.last_seen_ms > self.expiration_ms:
            del self.entries[pid]
            entry = None
        if entry is None or not entry.batches:
            if first != 0:
                raise KraftliteError(
                    ErrorCode.UNKNOWN_PRODUCER_ID,
                    "the producer has no state here and its batch does not start at sequence 0",
                )
            return None
        if epoch < entry.epoch:
            raise KraftliteError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                "a newer epoch of this producer exists: this one is fenced",
            )
        if epoch > entry.epoch:
            if first != 0:
                raise KraftliteError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    "a producer's new epoch must start at sequence 0",
                )
            return None
        last = header.last_sequence
        for earlier in entry.batches:
            if earlier.first_sequence == first and earlier.last_sequence == last:
                return earlier
        expected = (entry.batches[-1].last_sequence + 1) % SEQUENCE_SPAN
        if first == expected:
            return None
        if _ahead(first, expected) > 0:
            raise KraftliteError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                "the batch is ahead of the producer's next sequence: one before it is missing",
            )
        raise KraftliteError(
            ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
            "the sequence was written before, too long ago to answer with its offsets",
        )

    def record(self, header: BatchHeader, first_offset: int, now_ms: int) -> None:
        """A batch of an idempotent producer was appended at `first_offset`."""
        pid = header.producer_id
        entry = self.entries.get(pid)
        if entry is None or header.producer_epoch != entry.epoch:
            if entry is None and len(self.entries) >= MAX_PRODUCERS:
                self._make_room(now_ms)
            entry = self.entries[pid] = ProducerEntry(header.producer_epoch, now_ms)
        entry.last_seen_ms = now_ms
        entry.batches.append(
            Appended(
                header.base_sequence,
                header.last_sequence,
                first_offset,
                first_offset + header.record_count - 1,
            )
        )

    def _make_room(self, now_ms: int) -> None:
        """Rule 5: forget expired producers; if none is, the one silent longest."""
        expired = [
            p for p, e in self.entries.items() if now_ms - e.last_seen_ms > self.expiration_ms
        ]
        for pid in expired:
            del self.entries[pid]
        if len(self.entries) >= MAX_PRODUCERS:
            del self.entries[min(self.entries, key=lambda p: self.entries[p].last_seen_ms)]

    @classmethod
    def rebuild(
        cls, headers: Iterable[BatchHeader], now_ms: int, expiration_ms: int = DEFAULT_EXPIRATION_MS
    ) -> ProducerStates:
        """Rule 5: the state the log's batches (stamped headers, in offset order) imply.
        Each producer counts as seen now: the batches' timestamps are the producers' own
        (any clock), and forgetting a producer whose batch is in the log too early would let
        its retry in as a new producer's."""
        states = cls(expiration_ms)
        for header in headers:
            if header.producer_id >= 0:
                states.record(header, header.base_offset, now_ms)
        return states
