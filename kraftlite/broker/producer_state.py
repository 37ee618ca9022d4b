"""Idempotent and transactional producers on a partition's leader (issues 16 and 27;
Kafka's ProducerStateManager): a batch that names its producer id, epoch and base sequence
(batch format v2) is appended only if it is the next one that producer sends to this
partition, so a retried send is never written twice; a transactional producer's batches
open a transaction here that its marker ends, and the partition's last stable offset and
aborted transactions follow from them. Pure: the leader feeds it headers and offsets.

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

Transactions (docs/design/kafka-transactions.md, rule ids there in brackets):
7. A producer's first transactional batch opens its transaction in the partition at the
   batch's first offset [P6]; a non-transactional batch of a producer with one open is
   INVALID_TXN_STATE. An epoch below the producer's is INVALID_PRODUCER_EPOCH whether or
   not its batches are known (a marker that fenced it left none) [P4]. Unlike Kafka's
   [P4], an epoch above the producer's while its transaction is open here is
   INVALID_TXN_STATE: only the coordinator's marker ends that transaction or moves the
   epoch on (a new instance's InitProducerId is answered once the older one's abort
   markers are written), so such a batch is someone else's, or a marker was lost.
8. A marker (`check_marker`, `record_marker`) needs an epoch at least the producer's
   (INVALID_PRODUCER_EPOCH) and a coordinator epoch at least the last marker's
   (TRANSACTION_COORDINATOR_FENCED) [P10]. It takes the producer to its epoch (a higher one
   forgets the producer's batches: sequences start over) and ends its open transaction, if
   any: an aborted one is listed with the last stable offset it ended at [P11, P12]. A
   marker with nothing open is appended and changes nothing else.
9. The last stable offset is the first offset of the earliest transaction still open, or
   ended by a marker that is not below the high watermark yet, else the high watermark
   [P14, P15]. Open transactions are kept in the order they opened (offsets only grow), so
   the earliest is the first.
11. Verification (KIP-890 part 1 [P8-P9]): a producer's first transactional batch in the
   partition (none open) is appended only with the token `begin_verification` gave for the
   producer before its leader asked the coordinator that the partition is in its
   transaction, and only while that token is the producer's latest. A marker of the
   producer, or any of its transactional batches, drops it: so a batch verified just before
   the coordinator's marker ended the transaction is refused, never left open forever.
10. `aborted(fetch_offset, upper)` lists the aborted transactions a read_committed reader
   of [fetch_offset, upper) must skip [P19]: each one's marker at or after fetch_offset and
   its first offset below upper. They are kept in their markers' order; a list entry's
   last stable offset is at most the first offset of any transaction ended after it, so
   the search stops at the first entry whose last stable offset reaches `upper`.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol.batch import (
    ATTR_COMMIT,
    BatchHeader,
    Marker,
    is_control,
    is_transactional,
)

SEQUENCE_SPAN = 2**31
MAX_PRODUCERS = 100_000  # per partition: past it, the longest silent is forgotten
KEPT_BATCHES = 5  # Kafka's: a producer has at most 5 requests in flight per connection
DEFAULT_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms


class Appended(NamedTuple):
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


class AbortedTxn(NamedTuple):
    """An aborted transaction of one producer in the partition (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # its marker's
    last_stable_offset: int  # the partition's when the marker was appended (rule 10)


@dataclass
class ProducerEntry:
    epoch: int
    last_seen_ms: int
    batches: deque[Appended] = field(default_factory=lambda: deque(maxlen=KEPT_BATCHES))
    coordinator_epoch: int = -1  # of the last marker (rule 8)
    txn_first_offset: int | None = None  # its open transaction's first offset (rule 7)


def _ahead(sequence: int, of: int) -> int:
    """How far `sequence` is past `of`, modulo the wrap, in (-2**30, 2**30]."""
    delta = (sequence - of) % SEQUENCE_SPAN
    return delta - SEQUENCE_SPAN if delta > SEQUENCE_SPAN // 2 else delta


class ProducerStates:
    def __init__(self, expiration_ms: int = DEFAULT_EXPIRATION_MS) -> None:
        self.expiration_ms = expiration_ms
        self.entries: dict[int, ProducerEntry] = {}
        # rule 9: producer id by open transaction, in the order they opened
        self.open_txns: dict[int, int] = {}
        # (first offset, marker offset) of transactions ended by a marker that may not be
        # below the high watermark yet, in the markers' order (rule 9)
        self.ending: deque[tuple[int, int]] = deque()
        self.aborted_txns: list[AbortedTxn] = []  # in the markers' order (rule 10)
        self.verifications: dict[int, object] = {}  # rule 11: producer id -> token

    def begin_verification(self, producer_id: int) -> object:
        """Rule 11: the producer's token, new if it has none (concurrent first batches of
        one producer share one, as Kafka's share its guard)."""
        token = self.verifications.get(producer_id)
        if token is None:
            if len(self.verifications) >= MAX_PRODUCERS:
                self.verifications.clear()  # tokens in flight: their batches are retried
            token = self.verifications[producer_id] = object()
        return token

    def check(
        self,
        header: BatchHeader,
        now_ms: int,
        verification: object | None = None,
        *,
        sequenced: bool = True,
    ) -> Appended | None:
        """Rules 2-4, 7 and 11 for an incoming batch: None to append it, the earlier append
        for a duplicate, or KraftliteError. `verification`: the token of rule 11, for a
        transactional batch. `sequenced` False: a coordinator's own batch for the producer
        (a group coordinator's transactional offset commit, Kafka's origin COORDINATOR),
        whose sequence is not checked."""
        pid, epoch = header.producer_id, header.producer_epoch
        entry = self.entries.get(pid)
        if (
            entry is not None
            and entry.txn_first_offset is None
            and now_ms - entry.last_seen_ms > self.expiration_ms
        ):
            del self.entries[pid]  # Kafka's: a producer with a transaction open never expires
            entry = None
        if entry is not None and epoch < entry.epoch:
            raise KraftliteError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                "a newer epoch of this producer exists: this one is fenced",
            )
        if entry is not None and entry.txn_first_offset is not None:
            if not is_transactional(header):
                raise KraftliteError(
                    ErrorCode.INVALID_TXN_STATE,
                    "a producer with a transaction open here wrote outside it",
                )
            if epoch > entry.epoch:  # only the coordinator's marker ends it or moves it on
                raise KraftliteError(
                    ErrorCode.INVALID_TXN_STATE,
                    "a newer epoch of the producer wrote while its transaction is open here",
                )
        earlier = self._check_sequence(header, entry) if sequenced else None
        if (
            earlier is None  # a duplicate is answered as it was (Kafka checks those first)
            and is_transactional(header)
            and (entry is None or entry.txn_first_offset is None)
            and (verification is None or self.verifications.get(pid) is not verification)
        ):
            # retriable: the producer's leader asks the coordinator again (the transaction
            # ended since, or its token went with a rebuild)
            raise KraftliteError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                "the batch's transaction was not verified here: retry",
            )
        return earlier

    @staticmethod
    def _check_sequence(header: BatchHeader, entry: ProducerEntry | None) -> Appended | None:
        """Rules 2-4 past the epoch: None to append, the earlier append for a duplicate."""
        epoch, first = header.producer_epoch, header.base_sequence
        if entry is None or not entry.batches:
            if first != 0:
                raise KraftliteError(
                    ErrorCode.UNKNOWN_PRODUCER_ID,
                    "the producer has no state here and its batch does not start at sequence 0",
                )
            return None
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
        entry = self._entry(pid, header.producer_epoch, now_ms)
        entry.last_seen_ms = now_ms
        if is_transactional(header):
            self.verifications.pop(pid, None)  # rule 11
            if entry.txn_first_offset is None:
                entry.txn_first_offset = first_offset  # rule 7
                self.open_txns[first_offset] = pid
        entry.batches.append(
            Appended(
                header.base_sequence,
                header.last_sequence,
                first_offset,
                first_offset + header.record_count - 1,
            )
        )

    def _entry(self, pid: int, epoch: int, now_ms: int) -> ProducerEntry:
        """The producer's entry at `epoch` (a new epoch forgets its batches, rule 4)."""
        entry = self.entries.get(pid)
        if entry is None:
            if len(self.entries) >= MAX_PRODUCERS:
                self._make_room(now_ms)
            entry = self.entries[pid] = ProducerEntry(epoch, now_ms)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        return entry

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Rule 8's checks for a marker the coordinator asks for."""
        entry = self.entries.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise KraftliteError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                "the marker's producer epoch is older than the producer's",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise KraftliteError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                "a newer transaction coordinator has written this producer's markers",
            )

    def record_marker(
        self, header: BatchHeader, marker: Marker, offset: int, now_ms: int
    ) -> AbortedTxn | None:
        """A marker was appended at `offset` (rules 8-10); the aborted transaction it ended,
        if it aborted one."""
        entry = self._entry(header.producer_id, header.producer_epoch, now_ms)
        self.verifications.pop(header.producer_id, None)  # rule 11
        entry.last_seen_ms = now_ms
        entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        first = entry.txn_first_offset
        if first is None:
            return None
        entry.txn_first_offset = None
        del self.open_txns[first]
        self.ending.append((first, offset))
        if marker.commit:
            return None
        lso = next(iter(self.open_txns), offset + 1)  # rule 10: the earliest other's
        aborted = AbortedTxn(header.producer_id, first, offset, lso)
        self.aborted_txns.append(aborted)
        return aborted

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        """Rule 9, for a partition at `high_watermark` (forgetting the ended transactions
        whose markers are below it)."""
        ending = self.ending
        while ending and ending[0][1] < high_watermark:
            ending.popleft()
        unstable = min((first for first, _ in ending), default=high_watermark)
        if self.open_txns:
            unstable = min(unstable, next(iter(self.open_txns)))
        return min(max(unstable, log_start_offset), high_watermark)

    def aborted(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """Rule 10: the aborted transactions a read_committed read of [fetch_offset, upper)
        must skip, in their markers' order."""
        txns = self.aborted_txns
        found: list[AbortedTxn] = []
        start = bisect.bisect_left(txns, fetch_offset, key=lambda t: t.last_offset)
        for txn in itertools.islice(txns, start, None):
            if txn.first_offset < upper:
                found.append(txn)
            if txn.last_stable_offset >= upper:
                break
        return found

    def forget_aborted_below(self, log_start_offset: int) -> None:
        """Retention moved the log start: the aborted transactions wholly below it go."""
        txns = self.aborted_txns
        cut = bisect.bisect_left(txns, log_start_offset, key=lambda t: t.last_offset)
        if cut:
            del txns[:cut]

    def _make_room(self, now_ms: int) -> None:
        """Rule 5: forget expired producers; if none is, the one silent longest."""
        expired = [
            p
            for p, e in self.entries.items()
            if now_ms - e.last_seen_ms > self.expiration_ms and e.txn_first_offset is None
        ]
        for pid in expired:
            del self.entries[pid]
        if len(self.entries) >= MAX_PRODUCERS:
            idle = [p for p, e in self.entries.items() if e.txn_first_offset is None]
            if idle:
                del self.entries[min(idle, key=lambda p: self.entries[p].last_seen_ms)]

    @classmethod
    def rebuild(
        cls,
        headers: Iterable[BatchHeader],
        now_ms: int,
        expiration_ms: int = DEFAULT_EXPIRATION_MS,
        *,
        marker_at: Callable[[int], Marker] | None = None,
        high_watermark: int | None = None,
    ) -> ProducerStates:
        """Rule 5: the state the log's batches (stamped headers, in offset order) imply.
        Each producer counts as seen now: the batches' timestamps are the producers' own
        (any clock), and forgetting a producer whose batch is in the log too early would let
        its retry in as a new producer's. `marker_at` reads the marker of the control batch
        at an offset (its coordinator epoch is in its record, not its header); ended
        transactions below `high_watermark` are forgotten as they are met."""
        states = cls(expiration_ms)
        for header in headers:
            if header.producer_id < 0:
                continue
            if is_control(header):
                commit = bool(header.attributes & ATTR_COMMIT)
                coordinator_epoch = (
                    -1 if marker_at is None else marker_at(header.base_offset).coordinator_epoch
                )
                marker = Marker(commit, coordinator_epoch)
                states.record_marker(header, marker, header.base_offset, now_ms)
                if high_watermark is not None:
                    states.last_stable_offset(high_watermark, 0)
            else:
                states.record(header, header.base_offset, now_ms)
        return states
