"""A cleaner pass (broker/cleaner.py) over a log that changes under it, and what it reads to
decide: a truncation or a log start moved into a batch it planned to rewrite ends the pass
with nothing of it written that would resurrect or lose a key; a record past the last
stable offset supersedes nothing; an aborted batch kept whole keeps the tombstones of its
keys. On both logs (LMDB and memory)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kraftlite.broker import cleaner
from kraftlite.broker.log_store import ReplicaLog
from kraftlite.protocol import batch as fmt
from kraftlite.protocol import stored
from kraftlite.storage.compaction import CleanPolicy, transactions
from kraftlite.storage.log import LogStorage, StorageConfig
from kraftlite.storage.memory import MemoryPartitionLog

T = 1_000  # every record's timestamp
LATER = T + 10_000  # when the passes run: tombstones past 100 ms of delete.retention.ms
EXPIRED = CleanPolicy(delete_retention_ms=100)


@pytest.fixture(params=["lmdb", "memory"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ReplicaLog]:
    if request.param == "memory":
        yield MemoryPartitionLog("t-0")
        return
    storage = LogStorage(StorageConfig(path=tmp_path, map_size_bytes=1 << 24))
    try:
        yield storage.open_partition("t-0")
    finally:
        storage.close()


def append(log: ReplicaLog, key: bytes, value: bytes | None, **producer: int | bool) -> None:
    log.append(fmt.encode_batch([value], keys=[key], timestamps=[T], **producer), 0)  # type: ignore[arg-type]


def visible(
    log: ReplicaLog, below: int | None = None
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the log start below `below` (default:
    the high watermark), as a read_uncommitted reader sees them; markers left out."""
    limit = log.high_watermark if below is None else below
    seen = []
    for batch in stored.decode_stream(log.read(log.log_start_offset, 1 << 20, max_offset=limit)):
        if fmt.is_control(batch.header):
            continue
        base = batch.header.base_offset
        for i, (key, value) in enumerate(zip(batch.keys, batch.values, strict=True)):
            if log.log_start_offset <= base + i < limit:
                seen.append((base + i, key, value))
    return seen


def latest(log: ReplicaLog, below: int | None = None) -> dict[bytes | None, bytes | None]:
    """Each key's latest value, tombstones dropped (the table a reader builds)."""
    table: dict[bytes | None, bytes | None] = {}
    for _, key, value in visible(log, below):
        table[key] = value
    return {k: v for k, v in table.items() if v is not None}


def after_steps(count: int, change: Callable[[], object]) -> Callable[[], bool]:
    """A `stopping` callback that makes `change` to the log at the pass's `count`th step
    (each read and rewrite is one) and never stops the pass."""
    steps: list[int] = []

    def stopping() -> bool:
        steps.append(1)
        if len(steps) == count:
            change()
        return False

    return stopping


def test_a_log_start_moved_into_a_planned_batch_ends_the_pass_and_the_key_stays_deleted(
    log: ReplicaLog,
) -> None:
    """DeleteRecords (or a follower taking its leader's log start) lands inside a batch the
    pass planned as any other: that batch stays whole (it holds the log start), so the
    tombstone after its superseded record must stay too."""
    log.append(fmt.encode_batch([b"a", b"v1"], keys=[b"A", b"K"], timestamps=[T, T]), 0)
    append(log, b"K", None)  # 2: K's tombstone, past delete.retention.ms when cleaned
    append(log, b"Z", b"z")  # 3: the newest
    log.set_high_watermark(log.log_end_offset)
    # step 3 is right after the plan's read of the log, before its first rewrite
    moved = after_steps(3, lambda: log.advance_log_start(1))
    result = cleaner.clean(log, LATER, EXPIRED, force=True, stopping=moved)
    assert log.log_start_offset == 1
    assert result is not None and result.ended_early and result.rewritten == 0
    assert log.cleaned_offset == 1  # the new log start: no pass claims more
    assert latest(log) == {b"Z": b"z"}  # K stays deleted
    cleaner.clean(log, LATER, EXPIRED, force=True)  # the next pass plans from the log as it is
    assert latest(log) == {b"Z": b"z"}
    assert [offset for offset, key, _ in visible(log) if key == b"K"] == [1, 2]


def test_a_truncation_under_a_pass_ends_it_before_it_removes_what_only_the_cut_superseded(
    log: ReplicaLog,
) -> None:
    """An unclean leader's history ends below this replica's high watermark: the map the
    pass built names records the truncation took, so nothing more may be removed by it."""
    for key, value in [(b"K", b"v0"), (b"A", b"a"), (b"K", b"v2"), (b"B", b"b"), (b"C", b"c")]:
        append(log, key, value)
    log.set_high_watermark(log.log_end_offset)
    result = cleaner.clean(
        log, LATER, CleanPolicy(), force=True, stopping=after_steps(3, lambda: log.truncate_to(2))
    )
    assert log.log_end_offset == 2
    assert result is not None and result.ended_early and result.rewritten == 0
    log.set_high_watermark(log.log_end_offset)
    assert latest(log) == {b"K": b"v0", b"A": b"a"}  # K=v0 is the key's latest again


def test_a_record_past_the_last_stable_offset_supersedes_nothing(log: ReplicaLog) -> None:
    """A transaction still open holds read_committed readers (and the key index) below its
    first batch: a later record of a key there, even one not in the transaction, must not
    take the key's earlier record from them."""
    append(log, b"K", b"v0")  # 0
    append(log, b"other", b"x")  # 1
    append(log, b"txn", b"t", producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    append(log, b"K", b"v3")  # 3: past the open transaction
    append(log, b"Y", b"y")  # 4: the newest
    log.set_high_watermark(log.log_end_offset)
    stable = transactions(log.batch_headers()).first_unstable
    assert stable == 2
    cleaner.clean(log, LATER, CleanPolicy(), force=True)
    assert latest(log, below=stable) == {b"K": b"v0", b"other": b"x"}
    log.index_keys(1 << 20)  # the key index, as far as it goes: the last stable offset
    at = log.key_offset(b"K")
    assert at == 0 and visible(log, below=1)[0][:2] == (0, b"K")  # it names what is there
    log.append(fmt.encode_marker(7, 0, True, 0, T), 0)  # 5: the transaction commits
    append(log, b"W", b"w")  # 6: the newest
    log.set_high_watermark(log.log_end_offset)
    cleaner.clean(log, LATER, CleanPolicy(), force=True)
    assert latest(log) == {b"other": b"x", b"txn": b"t", b"K": b"v3", b"Y": b"y", b"W": b"w"}
    assert [offset for offset, key, _ in visible(log) if key == b"K"] == [3]  # now it goes


def test_an_aborted_batch_kept_whole_keeps_its_keys_tombstones(log: ReplicaLog) -> None:
    """A producer's last batch stays whole even when its transaction aborted (its sequence
    is needed): a read_uncommitted reader reads its record, so the key's later tombstone
    stays while it does, or that aborted value would be the key's last word."""
    append(log, b"K", b"y")  # 0
    append(
        log,
        b"K",
        b"x-aborted",
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    log.append(fmt.encode_marker(7, 0, False, 0, T), 0)  # 2: ABORT
    append(log, b"K", None)  # 3: K's tombstone, past delete.retention.ms
    append(log, b"Z", b"z")  # 4
    append(log, b"W", b"w")  # 5: the newest
    log.set_high_watermark(log.log_end_offset)
    result = cleaner.clean(log, LATER, EXPIRED, force=True)
    assert result is not None and result.rewritten > 0  # K=y went
    assert latest(log) == {b"Z": b"z", b"W": b"w"}  # K stays deleted for every reader
    assert [(offset, value) for offset, key, value in visible(log) if key == b"K"] == [
        (1, b"x-aborted"),
        (3, None),
    ]
