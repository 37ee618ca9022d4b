"""What must hold after any fault scenario, checked on plain values (no I/O here).

Each check takes what was observed and returns the violations it found, as values, so a
scenario can report all of them at once and the checks themselves can be tested on hand-made
histories (tests/unit/test_checker.py shows each one failing). The observations are gathered
by tests/harness/observe.py: acknowledgements recorded by the producers, the log read back
through the API, and every replica's log read from its data dir after shutdown.

The invariants (docs/design/fault-injection.md lists which scenario relies on which):
1. lost = 0: every acknowledged record is readable at the offset it was acknowledged with,
   with the content that was sent; and a record refused "before the append" (acks=all,
   NOT_ENOUGH_REPLICAS with appended=false) is nowhere in the log.
2. Offsets in a partition are dense and ordered from the log start offset.
3. Replicas in the ISR hold identical logs below the high watermark.
4. One writer per leader epoch: a leader epoch belongs to one leader, which writes each
   offset once, so any two stored copies of (leader epoch, offset) anywhere hold the same
   record; and within one replica, leader epochs never decrease along the log (KIP-101
   lineage). Two brokers accepting writes in one epoch break the first half.
5. Committed group offsets never go backwards.
6. An idempotent producer's records are each written once, in order (`written_once`).
7. Transactions (issue 27), for a read_committed reader of a consume-transform-produce
   job's output, each output record naming its transaction and that transaction's size
   (`transactions_seen_whole`): no record of a transaction its producer aborted; every
   transaction seen is seen whole; every transaction whose commit was acknowledged is
   seen. And every input record's output is there exactly once (`outputs_exactly_once`).

On a compacted topic (issue 26) the cleaner removes every record of a key but its latest,
on each replica on its own, so 1-3 become (`key_of` gives a record's key from its value):
1c. every key's latest acknowledged record is readable, or a later record of that key is,
    and no acknowledged record reads differently (`latest_kept`);
2c. offsets are ordered, not dense (`ordered_offsets`);
3c. ISR members agree below the high watermark on each offset two of them hold and on
    every key's latest record (`isr_tables_agree`); a consumer consumed every key's latest
    record and nothing the log never held (`consumed_as_compacted`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as a replica stores it: its offset, the epoch of its batch, its value."""

    offset: int
    leader_epoch: int
    value: bytes


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


def lost_acknowledged(
    acked: Mapping[int, bytes], readable: Iterable[tuple[int, bytes]]
) -> list[Violation]:
    """Invariant 1. `acked`: offset -> value acknowledged there; `readable`: the log read back."""
    stored = dict(readable)
    found = []
    for offset in sorted(acked):
        if offset not in stored:
            found.append(Violation("lost", f"offset {offset} acknowledged, not readable"))
        elif stored[offset] != acked[offset]:
            found.append(
                Violation(
                    "lost",
                    f"offset {offset} acknowledged {acked[offset]!r}, reads {stored[offset]!r}",
                )
            )
    return found


def refused_not_appended(
    refused: Iterable[bytes], readable: Iterable[tuple[int, bytes]]
) -> list[Violation]:
    """Invariant 1, its other half. Values must be unique per request for this to mean
    anything (the producers in observe.py make them so)."""
    stored = {value: offset for offset, value in readable}
    return [
        Violation("refused-appended", f"{value!r} was refused, yet is at offset {stored[value]}")
        for value in sorted(set(refused))
        if value in stored
    ]


def written_once(sent: Sequence[bytes], readable: Iterable[tuple[int, bytes]]) -> list[Violation]:
    """An idempotent producer's guarantee (issue 16): each value sent, and acknowledged,
    is in the log exactly once, and in the order sent (values must be unique)."""
    found = []
    stored = [value for _, value in sorted(readable)]
    counts: dict[bytes, int] = {}
    for value in stored:
        counts[value] = counts.get(value, 0) + 1
    for value in sent:
        if counts.get(value, 0) != 1:
            found.append(
                Violation("written-once", f"{value!r} is in the log {counts.get(value, 0)} times")
            )
    order = [value for value in stored if value in set(sent)]
    if order != [v for v in sent if counts.get(v, 0) >= 1][: len(order)] and not found:
        found.append(Violation("written-once", "the log does not keep the order they were sent in"))
    return found


def dense_offsets(offsets: Sequence[int], log_start_offset: int = 0) -> list[Violation]:
    """Invariant 2: the offsets read are exactly log_start_offset, +1, +2, ..."""
    expected = list(range(log_start_offset, log_start_offset + len(offsets)))
    if list(offsets) == expected:
        return []
    first = next(i for i, (a, b) in enumerate(zip(offsets, expected, strict=True)) if a != b)
    return [
        Violation(
            "dense",
            f"position {first}: offset {offsets[first]}, expected {expected[first]}",
        )
    ]


def isr_logs_agree(
    logs: Mapping[int, Sequence[StoredRecord]],
    isr: Iterable[int],
    high_watermark: int,
    log_starts: Mapping[int, int] | None = None,
) -> list[Violation]:
    """Invariant 3: every ISR member holds the same records at every offset below the HW,
    from offset 0, or, where retention ran (`log_starts` given, per replica), from the
    highest log start among them."""
    members = sorted(isr)
    missing = [b for b in members if b not in logs]
    if missing:
        return [Violation("isr-agree", f"no log for ISR members {missing}")]
    below = {b: {r.offset: r for r in logs[b] if r.offset < high_watermark} for b in members}
    start = max((log_starts[b] for b in members), default=0) if log_starts else 0
    found = []
    reference_id = members[0] if members else None
    for broker_id in members:
        for offset in range(start, high_watermark):
            mine = below[broker_id].get(offset)
            if mine is None:
                found.append(Violation("isr-agree", f"broker {broker_id} lacks offset {offset}"))
                break
            assert reference_id is not None
            theirs = below[reference_id].get(offset)
            if theirs is not None and theirs != mine:
                found.append(
                    Violation(
                        "isr-agree",
                        f"offset {offset}: broker {reference_id} has {theirs}, "
                        f"broker {broker_id} has {mine}",
                    )
                )
                break
    return found


def one_writer_per_epoch(logs: Mapping[int, Sequence[StoredRecord]]) -> list[Violation]:
    """Invariant 4, over every replica (in the ISR or not)."""
    found = []
    seen: dict[tuple[int, int], tuple[int, bytes]] = {}
    for broker_id in sorted(logs):
        last_epoch, last_offset = -1, -1
        for record in logs[broker_id]:
            if record.offset <= last_offset:
                found.append(
                    Violation("lineage", f"broker {broker_id}: offset {record.offset} repeats")
                )
            if record.leader_epoch < last_epoch:
                found.append(
                    Violation(
                        "lineage",
                        f"broker {broker_id}: epoch {record.leader_epoch} at offset "
                        f"{record.offset} after epoch {last_epoch}",
                    )
                )
            last_epoch, last_offset = max(last_epoch, record.leader_epoch), record.offset
            key = (record.leader_epoch, record.offset)
            other = seen.setdefault(key, (broker_id, record.value))
            if other[1] != record.value:
                found.append(
                    Violation(
                        "one-writer",
                        f"epoch {record.leader_epoch} offset {record.offset}: broker "
                        f"{other[0]} has {other[1]!r}, broker {broker_id} has {record.value!r}",
                    )
                )
    return found


def group_offsets_monotone(
    observations: Iterable[tuple[tuple[str, str, int], int]],
) -> list[Violation]:
    """Invariant 5. `observations`: ((group, topic, partition), committed offset) in the order
    they were observed."""
    found = []
    last: dict[tuple[str, str, int], int] = {}
    for key, offset in observations:
        if key in last and offset < last[key]:
            found.append(Violation("group-offsets", f"{key}: {last[key]} then {offset}"))
        last[key] = max(offset, last.get(key, offset))
    return found


def committed_offsets_monotone(
    observations: Iterable[tuple[float, float, tuple[str, str, int], int]],
) -> list[Violation]:
    """Invariant 5 across observers, in real time: `observations` are (sent, answered,
    (group, topic, partition), committed offset). A read sent after another was answered
    must not see a lower offset (whichever client made it, whichever broker answered)."""
    ordered = sorted(observations, key=lambda o: o[0])
    by_answer = sorted(ordered, key=lambda o: o[1])
    found = []
    seen: dict[tuple[str, str, int], tuple[int, float]] = {}  # highest offset, answered at
    done = 0
    for sent, _, key, offset in ordered:
        while done < len(by_answer) and by_answer[done][1] < sent:
            _, answered, other, value = by_answer[done]
            if other not in seen or value > seen[other][0]:
                seen[other] = (value, answered)
            done += 1
        if key in seen and offset < seen[key][0]:
            highest, answered = seen[key]
            found.append(
                Violation(
                    "group-offsets",
                    f"{key}: {highest} read by t={answered:.3f}, then {offset} "
                    f"read from t={sent:.3f}",
                )
            )
    return found


def reads_not_stale(
    reads: Iterable[tuple[float, float, int]], acks: Iterable[tuple[float, int]]
) -> list[Violation]:
    """Reads of the high watermark (sent, answered, HW), from any broker, against
    acknowledged writes (answered, highest offset): a read sent after a write was
    acknowledged must see it below the HW. A deposed leader still answering fails this."""
    by_time = sorted(acks)
    found = []
    highest, done = -1, 0
    for sent, answered, hw in sorted(reads):
        while done < len(by_time) and by_time[done][0] < sent:
            highest = max(highest, by_time[done][1])
            done += 1
        if hw <= highest:
            found.append(
                Violation(
                    "stale-read",
                    f"HW {hw} read at t={sent:.3f}-{answered:.3f}, after offset {highest} "
                    "was acknowledged",
                )
            )
    return found


def consumed_as_logged(
    consumed: Iterable[tuple[int, bytes]], readable: Sequence[tuple[int, bytes]]
) -> list[Violation]:
    """A consumer was given only committed records: every (offset, value) it consumed is
    in the final log at that offset (a record read from a deposed leader that the new one
    truncated would not be)."""
    log = dict(readable)
    return [
        Violation("consumed", f"offset {offset}: consumed {value!r}, log has {log.get(offset)!r}")
        for offset, value in sorted(set(consumed))
        if log.get(offset) != value
    ]


def _newest(
    records: Iterable[tuple[int, bytes]], key_of: Callable[[bytes], bytes]
) -> dict[bytes, tuple[int, bytes]]:
    """Each key's record (offset, value) at its highest offset."""
    newest: dict[bytes, tuple[int, bytes]] = {}
    for offset, value in records:
        key = key_of(value)
        if offset > newest.get(key, (-1, b""))[0]:
            newest[key] = (offset, value)
    return newest


def latest_kept(
    acked: Mapping[int, bytes],
    readable: Iterable[tuple[int, bytes]],
    key_of: Callable[[bytes], bytes],
) -> list[Violation]:
    """Invariant 1c: the cleaner may remove an acknowledged record only for a later one of
    its key (which an unacknowledged write may be), and changes none."""
    stored = dict(readable)
    found = [
        Violation("lost", f"offset {offset} acknowledged {value!r}, reads {stored[offset]!r}")
        for offset, value in sorted(acked.items())
        if offset in stored and stored[offset] != value
    ]
    have = _newest(stored.items(), key_of)
    for key, (offset, _) in sorted(_newest(acked.items(), key_of).items()):
        if have.get(key, (-1, b""))[0] < offset:
            found.append(
                Violation(
                    "lost",
                    f"key {key!r}: acknowledged at {offset}, the newest readable is "
                    f"{have.get(key, (None,))[0]}",
                )
            )
    return found


def ordered_offsets(offsets: Sequence[int], log_start_offset: int = 0) -> list[Violation]:
    """Invariant 2c: strictly increasing from the log start (a compacted log has gaps)."""
    previous = log_start_offset - 1
    for position, offset in enumerate(offsets):
        if offset <= previous:
            return [Violation("ordered", f"position {position}: offset {offset} after {previous}")]
        previous = offset
    return []


def isr_tables_agree(
    logs: Mapping[int, Sequence[StoredRecord]],
    isr: Iterable[int],
    high_watermark: int,
    key_of: Callable[[bytes], bytes],
) -> list[Violation]:
    """Invariant 3c: below the HW every ISR member holds a subset of one log (what its own
    cleaner left of it), with the same latest record of every key."""
    members = sorted(isr)
    missing = [b for b in members if b not in logs]
    if missing:
        return [Violation("isr-agree", f"no log for ISR members {missing}")]
    found = []
    union: dict[int, tuple[int, StoredRecord]] = {}
    tables = {}
    for broker_id in members:
        below = [r for r in logs[broker_id] if r.offset < high_watermark]
        for record in below:
            other = union.setdefault(record.offset, (broker_id, record))
            if other[1] != record:
                found.append(
                    Violation(
                        "isr-agree",
                        f"offset {record.offset}: broker {other[0]} has {other[1]}, "
                        f"broker {broker_id} has {record}",
                    )
                )
        tables[broker_id] = _newest(((r.offset, r.value) for r in below), key_of)
    for broker_id in members[1:]:
        if tables[broker_id] != tables[members[0]]:
            differ = sorted(
                k
                for k in tables[broker_id].keys() | tables[members[0]].keys()
                if tables[broker_id].get(k) != tables[members[0]].get(k)
            )
            found.append(
                Violation(
                    "isr-agree",
                    f"brokers {members[0]} and {broker_id} differ on the latest record of "
                    f"keys {differ[:5]}",
                )
            )
    return found


def consumed_as_compacted(
    consumed: Iterable[tuple[int, bytes]],
    readable: Sequence[tuple[int, bytes]],
    key_of: Callable[[bytes], bytes],
) -> list[Violation]:
    """Invariant 3c for consumers: each record consumed is in the final log at its offset
    or was superseded there by a later record of its key (the cleaner removed it), and
    every key's latest record was consumed."""
    log = dict(readable)
    newest = _newest(readable, key_of)
    found = []
    seen = set()
    for offset, value in sorted(set(consumed)):
        seen.add(offset)
        if log.get(offset, value) != value or (
            offset not in log and newest.get(key_of(value), (-1, b""))[0] <= offset
        ):
            held = log.get(offset)
            found.append(
                Violation("consumed", f"offset {offset}: consumed {value!r}, log has {held!r}")
            )
    missed = sorted(offset for offset, _ in newest.values() if offset not in seen)
    if missed:
        found.append(Violation("consumed", f"no one consumed the latest record at {missed[:10]}"))
    return found


@dataclass(frozen=True, slots=True)
class TxnOutput:
    """One output record of a transactional job as a reader saw it: the input it came from,
    the transaction it was written in, and how many records that transaction wrote."""

    source: str
    transaction: str
    size: int


def transactions_seen_whole(
    seen: Sequence[TxnOutput], committed: Iterable[str], aborted: Iterable[str]
) -> list[Violation]:
    """Invariant 7, the transactions: `committed` (commit acknowledged) and `aborted`
    (abort acknowledged) as the producers learnt them; others' outcome is unknown, and
    they must be seen whole or not at all."""
    found: list[Violation] = []
    counts: dict[str, int] = {}
    sizes: dict[str, set[int]] = {}
    for record in seen:
        counts[record.transaction] = counts.get(record.transaction, 0) + 1
        sizes.setdefault(record.transaction, set()).add(record.size)
    dropped = sorted(set(aborted) & set(counts))
    if dropped:
        found.append(Violation("aborted", f"records of aborted transactions {dropped[:10]} read"))
    partial = sorted(
        f"{t} ({counts[t]} of {sorted(sizes[t])})" for t in counts if sizes[t] != {counts[t]}
    )
    if partial:
        found.append(Violation("whole", f"transactions not seen whole: {partial[:10]}"))
    missing = sorted(set(committed) - set(counts))
    if missing:
        found.append(Violation("committed", f"committed transactions never read: {missing[:10]}"))
    return found


def outputs_exactly_once(sources: Iterable[str], seen: Sequence[TxnOutput]) -> list[Violation]:
    """Invariant 7, the job: each input's output read exactly once, and nothing else."""
    wanted = set(sources)
    counts: dict[str, int] = {}
    for record in seen:
        counts[record.source] = counts.get(record.source, 0) + 1
    found: list[Violation] = []
    twice = sorted(s for s, n in counts.items() if n > 1)
    if twice:
        found.append(Violation("once", f"{len(twice)} inputs' outputs read twice: {twice[:10]}"))
    missing = sorted(wanted - set(counts))
    if missing:
        found.append(Violation("once", f"{len(missing)} inputs have no output: {missing[:10]}"))
    strange = sorted(set(counts) - wanted)
    if strange:
        found.append(Violation("once", f"outputs of no input: {strange[:10]}"))
    return found


def assert_no_violations(violations: Sequence[Violation]) -> None:
    assert not violations, f"{len(violations)} violations:\n" + "\n".join(
        str(v) for v in violations[:20]
    )
