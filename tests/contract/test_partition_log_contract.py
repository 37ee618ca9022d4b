"""The replica log's contract (kraftlite/broker/log_store.py), one suite over every adapter:
LMDB files in a temporary directory (storage/log.py, production) and memory
(storage/memory.py, the twin the in-process tests run on). A scenario that passes on one
adapter and fails on the other is a drift of the twin, or a bug of production.

The scenarios are those of tests/integration/test_partition_log.py that a caller of the
port can observe, and the random-sequence model that had a file of its own; what only LMDB
has (map growth, fsync policy, the flusher thread) stays in the integration file.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kraftlite.broker.log_store import LogStore, ReplicaLog
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as fmt
from kraftlite.protocol import stored
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.protocol.kafka.records import Compression
from kraftlite.storage import keys as key_index
from kraftlite.storage.log import BatchRewrite, LogStorage, StorageConfig
from kraftlite.storage.memory import MemoryLogStorage

pytestmark = pytest.mark.contract


# -- the adapters ----------------------------------------------------------------------------


class Adapter:
    """One adapter under test: its storage, and the storage a new process would find."""

    name: str
    storage: LogStore

    def restart(self, *, crashed: bool = False) -> None:
        """Stop (cleanly, or killed with nothing flushed by hand) and open it again."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Lmdb(Adapter):
    name = "lmdb"

    def __init__(self, path: Path) -> None:
        self._config = StorageConfig(path=path, map_size_bytes=1 << 20)
        self._lmdb = LogStorage(self._config)
        self.storage = self._lmdb

    def restart(self, *, crashed: bool = False) -> None:
        if crashed:  # kill -9: committed transactions stay, nothing is checkpointed
            self._lmdb._closed.set()
            self._lmdb._env.close()
        else:
            self._lmdb.close()
        self._lmdb = LogStorage(self._config)
        self.storage = self._lmdb

    def close(self) -> None:
        self._lmdb.close()


class Memory(Adapter):
    name = "memory"

    def __init__(self) -> None:
        self._memory = MemoryLogStorage()
        self.storage = self._memory

    def restart(self, *, crashed: bool = False) -> None:
        self._memory = self._memory.restarted(crashed=crashed)
        self.storage = self._memory

    def close(self) -> None:
        pass


ADAPTERS: dict[str, Callable[[Path], Adapter]] = {
    "lmdb": lambda path: Lmdb(path / "log"),
    "memory": lambda _: Memory(),
}


@pytest.fixture(params=sorted(ADAPTERS))
def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Adapter]:
    made = ADAPTERS[request.param](tmp_path)
    yield made
    made.close()


@pytest.fixture
def log(adapter: Adapter) -> ReplicaLog:
    return adapter.storage.open_partition("t-0")


def make_batch(count: int, ts: int = 1000, value: bytes = b"v", step: int = 0) -> bytes:
    return fmt.encode_batch(
        [value + str(i).encode() for i in range(count)],
        keys=[str(i).encode() for i in range(count)],
        timestamps=[ts + i * step for i in range(count)],
    )


def offsets(stream: bytes) -> list[int]:
    return [r.offset for b in stored.decode_stream(stream) for r in b.records()]


def refused(call: Callable[[], object]) -> KraftliteError:
    with pytest.raises(KraftliteError) as info:
        call()
    return info.value


# -- appends and reads -----------------------------------------------------------------------


def test_append_assigns_dense_offsets_and_reads_back(log: ReplicaLog) -> None:
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    first = log.append(make_batch(3), leader_epoch=0)
    second = log.append(make_batch(2, ts=2000, step=5), leader_epoch=0)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset, second.log_end_offset) == (3, 4, 5)
    assert second.max_timestamp == 2005
    assert offsets(log.read(0, 1 << 20)) == [0, 1, 2, 3, 4]
    # a read from the middle of a batch starts with the batch that holds the offset
    assert offsets(log.read(1, 1 << 20)) == [0, 1, 2, 3, 4]
    assert offsets(log.read(3, 1 << 20)) == [3, 4]
    assert log.read(5, 1 << 20) == b""
    # at least one batch even if larger than max_bytes, then only whole batches that fit
    assert offsets(log.read(0, 1)) == [0, 1, 2]
    # never past max_offset (the high watermark for consumers)
    assert offsets(log.read(0, 1 << 20, max_offset=3)) == [0, 1, 2]
    assert log.read(3, 1 << 20, max_offset=3) == b""
    assert log.size_bytes == len(log.read(0, 1 << 20))


def test_the_leader_stamps_its_epoch_and_offsets_into_the_stored_batch(log: ReplicaLog) -> None:
    log.append(make_batch(2), leader_epoch=0)
    log.append(make_batch(1), leader_epoch=7)
    headers = [b.header for b in fmt.decode_stream(log.read(0, 1 << 20))]
    assert [(h.base_offset, h.leader_epoch) for h in headers] == [(0, 0), (2, 7)]
    for view in fmt.split_batches(log.read(0, 1 << 20)):
        fmt.validate(view)  # stamped with a fresh header CRC


def test_reads_outside_the_log_are_out_of_range(log: ReplicaLog) -> None:
    log.append(make_batch(2), leader_epoch=0)
    log.set_high_watermark(1)
    for offset in (-1, 3):
        error = refused(functools.partial(log.read, offset, 100))
        assert error.code is ErrorCode.OFFSET_OUT_OF_RANGE
        assert error.details == {"log_start_offset": 0, "high_watermark": 1}


def test_corrupt_batches_and_stale_epochs_are_refused_without_change(log: ReplicaLog) -> None:
    log.append(make_batch(1), leader_epoch=3)
    bad = bytearray(make_batch(2))
    bad[-9] ^= 0xFF
    assert refused(lambda: log.append(bad, leader_epoch=3)).code is ErrorCode.CORRUPT_MESSAGE
    stale = refused(lambda: log.append(make_batch(1), leader_epoch=2))
    assert stale.code is ErrorCode.FENCED_LEADER_EPOCH
    assert log.log_end_offset == 1
    assert offsets(log.read(0, 1 << 20)) == [0]


def test_epochs_out_of_range_and_unstamped_replicas_are_refused(log: ReplicaLog) -> None:
    for epoch in (-1, 2**31):
        error = refused(functools.partial(log.append, make_batch(1), leader_epoch=epoch))
        assert error.code is ErrorCode.INVALID_REQUEST
    # a producer's batch: epoch -1, never stamped
    unstamped = refused(lambda: log.append_replicated(make_batch(1)))
    assert unstamped.code is ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0


def test_partitions_are_isolated(adapter: Adapter) -> None:
    logs = [adapter.storage.open_partition(f"t-{i}") for i in range(5)]
    for i, log in enumerate(logs):
        for _ in range(i + 1):
            log.append(make_batch(2), leader_epoch=0)
    for i, log in enumerate(logs):
        assert offsets(log.read(0, 1 << 20)) == list(range(2 * (i + 1)))
    assert sorted(adapter.storage.partition_names()) == [f"t-{i}" for i in range(5)]
    assert adapter.storage.open_partition("t-3") is logs[3]


def test_invalid_partition_names_are_refused(adapter: Adapter) -> None:
    for name in ("", "a\x00b", "x" * 401):
        with pytest.raises(ValueError, match="invalid partition log name"):
            adapter.storage.open_partition(name)


def test_replicated_append_keeps_the_leaders_offsets_and_epochs(adapter: Adapter) -> None:
    leader = adapter.storage.open_partition("leader")
    follower = adapter.storage.open_partition("follower")
    leader.append(make_batch(2), leader_epoch=1)
    leader.append(make_batch(3), leader_epoch=2)
    info = follower.append_replicated(leader.read(0, 1 << 20))
    assert info is not None
    assert (info.first_offset, info.last_offset, info.log_end_offset) == (0, 4, 5)
    assert follower.epochs() == leader.epochs() == [(1, 0), (2, 2)]
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    assert follower.append_replicated(b"") is None
    # a gap or an overlap is refused, and nothing of it is taken
    overlap = refused(lambda: follower.append_replicated(leader.read(2, 1 << 20)))
    assert overlap.code is ErrorCode.INVALID_REQUEST
    assert follower.log_end_offset == 5
    damaged = bytearray(leader.read(0, 1 << 20))
    damaged[-9] ^= 0xFF
    fresh = adapter.storage.open_partition("fresh")
    assert refused(lambda: fresh.append_replicated(damaged)).code is ErrorCode.CORRUPT_MESSAGE
    assert fresh.log_end_offset == 0


def test_a_follower_starting_inside_a_batch_takes_the_batch_holding_its_start(
    adapter: Adapter,
) -> None:
    """A new replica of a partition whose log start a DeleteRecords put inside a batch
    starts there; the leader serves the whole batch holding it."""
    leader = adapter.storage.open_partition("leader")
    leader.append(make_batch(4), leader_epoch=1)  # 0-3
    leader.append(make_batch(4), leader_epoch=2)  # 4-7
    leader.set_high_watermark(8)
    leader.advance_log_start(6)
    follower = adapter.storage.open_partition("follower")
    follower.truncate_fully_and_start_at(6)
    info = follower.append_replicated(leader.read(6, 1 << 20))
    assert info is not None
    assert (info.first_offset, info.log_end_offset) == (6, 8)
    assert (follower.log_start_offset, follower.log_end_offset) == (6, 8)
    assert follower.epochs() == leader.epochs() == [(2, 6)]
    assert follower.read(6, 1 << 20) == leader.read(6, 1 << 20)
    assert refused(lambda: follower.read(5, 1)).code is ErrorCode.OFFSET_OUT_OF_RANGE
    # only where the log is empty and the batch holds its start
    again = refused(lambda: follower.append_replicated(leader.read(6, 1 << 20)))
    assert again.code is ErrorCode.INVALID_REQUEST
    # a gap is refused, unless the topic is compacted (rule 7: its leader's log has gaps)
    other = adapter.storage.open_partition("other")
    other.truncate_fully_and_start_at(3)
    beyond = refused(lambda: other.append_replicated(leader.read(6, 1 << 20)))
    assert beyond.code is ErrorCode.INVALID_REQUEST
    across = other.append_replicated(leader.read(6, 1 << 20), allow_gaps=True)
    assert across is not None and (other.log_start_offset, other.log_end_offset) == (3, 8)
    assert other.read(3, 1 << 20) == leader.read(6, 1 << 20)  # from the gap: the next batch
    size = follower.size_bytes
    adapter.restart(crashed=True)
    follower = adapter.storage.open_partition("follower")
    assert (follower.log_start_offset, follower.log_end_offset, follower.size_bytes) == (6, 8, size)


def test_a_replicated_epoch_below_the_logs_is_fenced(adapter: Adapter) -> None:
    old = adapter.storage.open_partition("old")
    old.append(make_batch(1), leader_epoch=1)
    follower = adapter.storage.open_partition("follower")
    follower.append(make_batch(1), leader_epoch=5)
    stream = bytes(fmt.stamp(old.read(0, 1 << 20), 1, 1))  # at the right offset, epoch 1 < 5
    assert refused(lambda: follower.append_replicated(stream)).code is (
        ErrorCode.FENCED_LEADER_EPOCH
    )
    assert follower.log_end_offset == 1


def test_producer_headers_are_the_idempotent_batches_in_order(log: ReplicaLog) -> None:
    def idempotent(sequence: int) -> bytes:
        return fmt.encode_batch(
            [b"a", b"b"],
            timestamps=[1, 2],
            producer_id=42,
            producer_epoch=0,
            base_sequence=sequence,
        )

    log.append(idempotent(0), leader_epoch=0)
    log.append(make_batch(1), leader_epoch=0)  # not a producer's: left out
    log.append(idempotent(2), leader_epoch=1)
    headers = log.producer_headers()
    assert [(h.base_offset, h.producer_id, h.base_sequence, h.leader_epoch) for h in headers] == [
        (0, 42, 0, 0),
        (3, 42, 2, 1),
    ]


# -- leader epochs ---------------------------------------------------------------------------


def test_epoch_cache_and_end_offset_for(log: ReplicaLog) -> None:
    assert log.latest_epoch == -1
    assert log.end_offset_for(0) == (-1, -1)
    log.append(make_batch(2), leader_epoch=1)  # offsets 0-1
    log.append(make_batch(3), leader_epoch=1)  # 2-4
    log.append(make_batch(1), leader_epoch=4)  # 5
    assert log.epochs() == [(1, 0), (4, 5)]
    assert log.latest_epoch == 4
    assert log.end_offset_for(4) == (4, 6)
    assert log.end_offset_for(1) == (1, 5)
    assert log.end_offset_for(2) == (1, 5)  # the largest epoch <= 2 is 1, it ends where 4 starts
    assert log.end_offset_for(0) == (0, 0)  # below every known epoch: ends where the first starts
    assert log.end_offset_for(7) == (-1, -1)
    assert log.end_offset_for(-1) == (-1, -1)


# -- truncation ------------------------------------------------------------------------------


def test_truncate_to_removes_whole_batches_and_their_epochs(log: ReplicaLog) -> None:
    log.append(make_batch(2), leader_epoch=1)  # 0-1
    log.append(make_batch(3, ts=5000), leader_epoch=2)  # 2-4
    log.append(make_batch(2, ts=9000), leader_epoch=3)  # 5-6
    size_of_first = len(log.read(0, 1))
    log.set_high_watermark(7)
    log.truncate_to(3)  # inside the batch 2-4: the whole batch goes
    assert log.log_end_offset == 2
    assert log.high_watermark == 2
    assert log.size_bytes == size_of_first
    assert log.epochs() == [(1, 0)]
    assert log.offset_for_time(5000) is None
    log.append(make_batch(1, ts=6000), leader_epoch=5)
    assert offsets(log.read(0, 1 << 20)) == [0, 1, 2]
    assert log.epochs() == [(1, 0), (5, 2)]
    assert log.offset_for_time(5500) == (2, 6000)
    log.truncate_to(10)  # past the end: nothing to do
    assert log.log_end_offset == 3


def test_truncate_below_the_log_start_empties_the_log_there(log: ReplicaLog) -> None:
    for _ in range(3):
        log.append(make_batch(2), leader_epoch=0)
    log.set_high_watermark(6)
    log.advance_log_start(2)
    log.truncate_to(1)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1, 1, 1)
    assert (log.epochs(), log.size_bytes) == ([], 0)
    assert log.append(make_batch(1), leader_epoch=0).first_offset == 1


def test_truncate_fully_and_start_at(log: ReplicaLog) -> None:
    log.append(make_batch(4), leader_epoch=1)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.epochs() == []
    assert log.size_bytes == 0
    assert log.append(make_batch(1), leader_epoch=2).first_offset == 100
    assert refused(lambda: log.read(99, 100)).code is ErrorCode.OFFSET_OUT_OF_RANGE


# -- offsets by time -------------------------------------------------------------------------


def test_offset_for_time_finds_the_first_record_at_or_after(log: ReplicaLog) -> None:
    log.append(make_batch(3, ts=100, step=10), leader_epoch=0)  # 100,110,120 @ 0-2
    log.append(make_batch(2, ts=50, step=1), leader_epoch=0)  # 50,51 (late) @ 3-4
    log.append(make_batch(2, ts=200, step=100), leader_epoch=0)  # 200,300 @ 5-6
    assert log.offset_for_time(0) == (0, 100)
    assert log.offset_for_time(51) == (0, 100)
    assert log.offset_for_time(111) == (2, 120)
    assert log.offset_for_time(121) == (5, 200)
    assert log.offset_for_time(250) == (6, 300)
    assert log.offset_for_time(301) is None
    assert log.offset_for_time(250, max_offset=6) is None  # not below the high watermark
    assert log.offset_for_time(250, max_offset=7) == (6, 300)


def test_time_lookup_after_retention_took_the_batch_that_set_the_running_max(
    log: ReplicaLog,
) -> None:
    log.append(make_batch(1, ts=500), leader_epoch=0)
    log.append(make_batch(1, ts=500), leader_epoch=0)
    log.append(make_batch(1, ts=400), leader_epoch=0)
    log.set_high_watermark(1)
    assert log.apply_retention(now_ms=0, retention_ms=-1, retention_bytes=0) == 1
    assert log.offset_for_time(0) == (1, 500)
    assert log.offset_for_time(450) == (1, 500)
    assert log.offset_for_time(501) is None


def test_time_lookup_after_retention_emptied_the_log(log: ReplicaLog) -> None:
    log.append(make_batch(1, ts=100), leader_epoch=0)
    log.set_high_watermark(1)
    assert log.apply_retention(now_ms=10**6, retention_ms=0, retention_bytes=-1) == 1
    log.append(make_batch(1, ts=50), leader_epoch=0)
    assert log.offset_for_time(0) == (1, 50)
    assert log.offset_for_time(0, max_offset=1) is None  # not below the high watermark yet


# -- the high watermark, retention -----------------------------------------------------------


def test_the_high_watermark_stays_within_the_log(log: ReplicaLog) -> None:
    log.append(make_batch(3), leader_epoch=0)
    log.set_high_watermark(10)
    assert log.high_watermark == 3
    log.set_high_watermark(2)
    assert log.high_watermark == 2
    log.set_high_watermark(-5)
    assert log.high_watermark == 0


def test_retention_by_time_and_size_stops_at_the_high_watermark(log: ReplicaLog) -> None:
    for i in range(5):  # batches of 2 records, timestamps 1000, 2000, ... per batch
        log.append(make_batch(2, ts=(i + 1) * 1000), leader_epoch=i // 2)
    batch_size = log.size_bytes // 5
    log.set_high_watermark(6)
    # older than 2500 ms at now=4000: batches with max ts 1000 (and 1001) -> only the first
    assert log.apply_retention(now_ms=4000, retention_ms=2500, retention_bytes=-1) == 2
    assert log.log_start_offset == 2
    assert log.epochs() == [(0, 2), (1, 4), (2, 8)]
    # everything is expired, but the high watermark (6) protects batches 6-7 and 8-9
    assert log.apply_retention(now_ms=10**9, retention_ms=1, retention_bytes=-1) == 4
    assert (log.log_start_offset, log.size_bytes) == (6, 2 * batch_size)
    assert log.epochs() == [(1, 6), (2, 8)]
    log.set_high_watermark(10)
    # size: keep at most one batch's worth
    assert log.apply_retention(now_ms=0, retention_ms=-1, retention_bytes=batch_size) == 2
    assert log.log_start_offset == 8
    assert offsets(log.read(8, 1 << 20)) == [8, 9]
    assert log.offset_for_time(0) == (8, 5000)
    assert refused(lambda: log.read(7, 100)).code is ErrorCode.OFFSET_OUT_OF_RANGE
    # a fully expired log stays empty at its end offset and keeps its latest epoch
    assert log.apply_retention(now_ms=10**9, retention_ms=1, retention_bytes=-1) == 2
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    assert log.epochs() == [(2, 10)]
    assert log.append(make_batch(1), leader_epoch=2).first_offset == 10


def test_retention_never_passes_the_high_watermark_even_when_asked(log: ReplicaLog) -> None:
    for _ in range(4):
        log.append(make_batch(2), leader_epoch=0)
    log.set_high_watermark(2)
    deleted = log.apply_retention(now_ms=10**9, retention_ms=0, retention_bytes=-1, max_offset=8)
    assert deleted == 2
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (2, 2, 8)


def test_advance_log_start_moves_it_exactly_and_keeps_the_batch_holding_it(
    log: ReplicaLog,
) -> None:
    for n in range(4):
        log.append(make_batch(2, ts=1000 + 10 * n, step=1), leader_epoch=n)  # 0-1 .. 6-7
    log.set_high_watermark(6)
    assert log.advance_log_start(5) == 5  # 4-5 holds offset 5: it stays, 4 is gone
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (5, 8, 6)
    assert refused(lambda: log.read(4, 1 << 20)).code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert offsets(log.read(5, 1 << 20))[0] == 4  # the batch, whole (readers skip 4)
    assert log.epochs() == [(2, 5), (3, 6)]
    assert log.offset_for_time(0) == (5, 1021)  # never a record below the log start
    assert log.offset_for_time(1021) == (5, 1021)
    assert log.advance_log_start(3) == 0  # never backwards
    assert log.advance_log_start(8) == 1  # bounded by the high watermark (6)
    assert (log.log_start_offset, log.log_end_offset) == (6, 8)
    assert offsets(log.read(6, 1 << 20)) == [6, 7]


def test_truncating_into_the_batch_holding_the_log_start_empties_the_log(
    log: ReplicaLog,
) -> None:
    log.append(make_batch(4), leader_epoch=0)  # 0-3
    log.append(make_batch(2), leader_epoch=0)  # 4-5
    log.set_high_watermark(4)
    log.advance_log_start(2)
    log.truncate_to(3)  # the cut would end the log at 0, below its start: it ends there
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (2, 2, 2)
    assert log.append(make_batch(1), leader_epoch=1).first_offset == 2


def test_a_log_start_inside_a_batch_survives_a_crash(adapter: Adapter) -> None:
    log = adapter.storage.open_partition("t-0")
    log.append(make_batch(4), leader_epoch=0)
    log.append(make_batch(4), leader_epoch=1)
    log.set_high_watermark(8)
    log.advance_log_start(6)
    adapter.restart(crashed=True)
    log = adapter.storage.open_partition("t-0")
    assert (log.log_start_offset, log.log_end_offset) == (6, 8)
    assert log.epochs() == [(1, 6)]
    assert refused(lambda: log.read(5, 1 << 20)).code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.size_bytes == len(log.read(6, 1 << 20))


# -- deletion --------------------------------------------------------------------------------


def test_deleted_partition_is_gone_and_its_name_reusable(adapter: Adapter) -> None:
    log = adapter.storage.open_partition("t-0")
    log.append(make_batch(3), leader_epoch=0)
    adapter.storage.delete_partition("t-0")
    for call in (
        lambda: log.read(0, 100),
        lambda: log.append(make_batch(1), leader_epoch=0),
        lambda: log.truncate_to(0),
        lambda: log.apply_retention(0, 0, 0),
        lambda: log.offset_for_time(0),
        lambda: log.end_offset_for(0),
        log.producer_headers,
    ):
        assert refused(call).code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    log.checkpoint_high_watermark()  # a checkpoint of a deleted log is a no-op
    assert adapter.storage.partition_names() == []
    adapter.storage.delete_partition("t-0")  # again: nothing to do
    fresh = adapter.storage.open_partition("t-0")
    assert fresh.log_end_offset == 0
    assert fresh.append(make_batch(1), leader_epoch=0).first_offset == 0


# -- restarts and checkpoints ----------------------------------------------------------------


def test_state_survives_a_clean_restart(adapter: Adapter) -> None:
    log = adapter.storage.open_partition("t-0")
    adapter.storage.open_partition("empty")
    for i in range(4):
        log.append(make_batch(2, ts=i * 1000), leader_epoch=i)
    log.set_high_watermark(6)
    log.apply_retention(now_ms=10_000, retention_ms=9500, retention_bytes=-1)
    size = log.size_bytes
    adapter.restart()

    log = adapter.storage.open_partition("t-0")
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (2, 8, 6)
    assert (log.epochs(), log.size_bytes) == ([(1, 2), (2, 4), (3, 6)], size)
    assert log.offset_for_time(2500) == (6, 3000)
    assert offsets(log.read(2, 1 << 20)) == list(range(2, 8))
    assert sorted(adapter.storage.partition_names()) == ["empty", "t-0"]


def test_a_crash_keeps_the_high_watermark_last_checkpointed(adapter: Adapter) -> None:
    log = adapter.storage.open_partition("t-0")
    log.append(make_batch(4), leader_epoch=0)
    log.set_high_watermark(2)
    log.checkpoint_high_watermark()
    log.append(make_batch(4), leader_epoch=1)
    log.set_high_watermark(7)  # not checkpointed: a crash loses it, never the records
    adapter.restart(crashed=True)

    log = adapter.storage.open_partition("t-0")
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 8, 2)
    assert log.epochs() == [(0, 0), (1, 4)]
    log.set_high_watermark(8)
    log.checkpoint_high_watermark()
    adapter.restart(crashed=True)
    assert adapter.storage.open_partition("t-0").high_watermark == 8


def test_truncation_and_retention_write_the_high_watermark_they_leave(adapter: Adapter) -> None:
    log = adapter.storage.open_partition("t-0")
    for _ in range(4):
        log.append(make_batch(2), leader_epoch=0)
    log.set_high_watermark(8)
    log.truncate_to(6)  # the HW comes down with the log end, and is written with it
    adapter.restart(crashed=True)
    log = adapter.storage.open_partition("t-0")
    assert (log.log_end_offset, log.high_watermark) == (6, 6)
    log.set_high_watermark(0)
    log.checkpoint_high_watermark()
    log.set_high_watermark(4)
    assert log.advance_log_start(2) == 2  # written with the log start and the current HW
    adapter.restart(crashed=True)
    log = adapter.storage.open_partition("t-0")
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (2, 4, 6)


def test_a_checkpoint_after_retention_makes_a_lower_high_watermark_durable(
    adapter: Adapter,
) -> None:
    log = adapter.storage.open_partition("t-0")
    for _ in range(4):
        log.append(make_batch(2), leader_epoch=0)
    log.set_high_watermark(4)
    log.checkpoint_high_watermark()
    log.set_high_watermark(6)
    assert log.advance_log_start(2) == 2
    log.set_high_watermark(4)  # a new leader tells a lower one (partition.py's read)
    log.checkpoint_high_watermark()
    adapter.restart(crashed=True)
    assert adapter.storage.open_partition("t-0").high_watermark == 4


# -- random sequences against a model --------------------------------------------------------


KEYS: list[bytes | None] = [b"a", b"b", b"c", None, b"x" * 450]  # the long one: a digest


@dataclass
class ModelBatch:
    base: int
    epoch: int
    timestamps: list[int]
    values: list[bytes | None]
    size: int
    keys: list[bytes | None] = field(default_factory=list)

    @property
    def next(self) -> int:
        return self.base + len(self.values)


@dataclass
class Model:
    """The log as a list of batches: every expectation is computed the slow, obvious way."""

    batches: list[ModelBatch] = field(default_factory=list)
    log_start: int = 0
    high_watermark: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)
    # the key index (storage/log.py rule 8): key -> offset, and where it ends
    index: dict[bytes, int] = field(default_factory=dict)
    indexed: int = 0

    @property
    def log_end(self) -> int:
        return self.batches[-1].next if self.batches else self.log_start

    @property
    def size(self) -> int:
        return sum(b.size for b in self.batches)

    def records(self) -> list[tuple[int, int, bytes]]:
        return [
            (b.base + i, ts, v)
            for b in self.batches
            for i, (ts, v) in enumerate(zip(b.timestamps, b.values, strict=True))
        ]


class LogMachine(RuleBasedStateMachine):
    """Random appends, high watermark moves, truncations, retention, restarts and reads, each
    checked against `Model`, with a neighbour partition that must never be disturbed."""

    adapter_name: ClassVar[str]

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="kl-contract-"))
        self.adapter = ADAPTERS[self.adapter_name](self.dir)
        self.model = Model()
        self._open()
        self.other.append(fmt.encode_batch([b"n"], timestamps=[1]), 0)

    def _open(self) -> None:
        self.log = self.adapter.storage.open_partition("p")
        self.other = self.adapter.storage.open_partition("neighbour")

    def teardown(self) -> None:
        self.adapter.close()
        shutil.rmtree(self.dir)

    @initialize()
    def start(self) -> None:
        pass

    @rule(
        count=st.integers(1, 5),
        epoch_bump=st.integers(0, 2),
        stamps=st.lists(st.integers(0, 1000), min_size=5, max_size=5),
        size=st.integers(0, 3000),
        keys=st.lists(st.sampled_from(KEYS), min_size=5, max_size=5),
        tombstones=st.lists(st.booleans(), min_size=5, max_size=5),
        kafka=st.sampled_from([None, *Compression]),
    )
    def append(
        self,
        count: int,
        epoch_bump: int,
        stamps: list[int],
        size: int,
        keys: list[bytes | None],
        tombstones: list[bool],
        kafka: Compression | None,
    ) -> None:
        """A producer's batch: kraftlite's columnar one, or a Kafka batch kept as sent
        (format 3, in any codec: protocol/stored.py)."""
        epoch = max(self.model.epochs[-1][0] if self.model.epochs else 0, 0) + epoch_bump
        values: list[bytes | None] = [
            None if tombstones[i] else bytes([i]) * size for i in range(count)
        ]
        encoded: bytes
        if kafka is None:
            encoded = fmt.encode_batch(values, keys=keys[:count], timestamps=stamps[:count])
        else:
            sent = kafka_records.encode_batch(
                [kafka_records.KafkaRecord(i, stamps[i], keys[i], values[i]) for i in range(count)],
                compression=kafka,
            )
            kept = stored.kafka_form(sent, kafka_records.decode_batches(sent)[0], None)
            assert kept is not None
            encoded = kept
        info = self.log.append(encoded, leader_epoch=epoch)
        base = self.model.log_end
        assert (info.first_offset, info.log_end_offset) == (base, base + count)
        if not self.model.epochs or epoch > self.model.epochs[-1][0]:
            self.model.epochs.append((epoch, base))
        self.model.batches.append(
            ModelBatch(base, epoch, stamps[:count], values, len(encoded), keys[:count])
        )

    @rule(fraction=st.floats(0, 1))
    def move_high_watermark(self, fraction: float) -> None:
        target = self.model.log_start + int(fraction * (self.model.log_end - self.model.log_start))
        self.log.set_high_watermark(target)
        self.model.high_watermark = target

    @precondition(lambda self: self.model.batches)
    @rule(fraction=st.floats(0, 1))
    def truncate(self, fraction: float) -> None:
        target = self.model.log_start + int(fraction * (self.model.log_end - self.model.log_start))
        self.log.truncate_to(target)
        if target >= self.model.log_end:
            return
        if target <= self.model.log_start:
            self.model = Model(log_start=target, high_watermark=target, indexed=target)
            return
        self.model.batches = [b for b in self.model.batches if b.next <= target]
        if self.model.log_end < self.model.log_start:  # the cut took the batch holding it
            start = self.model.log_start
            self.model = Model(log_start=start, high_watermark=start, indexed=start)
            return
        end = self.model.log_end
        self.model.epochs = [(e, s) for e, s in self.model.epochs if s < end]
        self.model.high_watermark = min(self.model.high_watermark, end)
        if self.model.indexed > end:  # rule 8: emptied, built again from the log start
            self.model.index, self.model.indexed = {}, self.model.log_start

    @rule(
        retention_bytes=st.integers(0, 20000),
        retention_ms=st.integers(-1, 1000),
        now=st.integers(0, 2000),
    )
    def retention(self, retention_bytes: int, retention_ms: int, now: int) -> None:
        before = self.model.log_start
        deleted = self.log.apply_retention(now, retention_ms, retention_bytes)
        model = self.model
        size = model.size
        while model.batches:
            first = model.batches[0]
            expired = retention_ms >= 0 and now - max(first.timestamps) > retention_ms
            if first.next > model.high_watermark or not (
                expired or size - first.size >= retention_bytes
            ):
                break
            size -= first.size
            model.batches.pop(0)
            model.log_start = first.next
            kept = [(e, s) for e, s in model.epochs if s <= model.log_start]
            after = [(e, s) for e, s in model.epochs if s > model.log_start]
            model.epochs = ([(kept[-1][0], model.log_start)] if kept else []) + after
        assert deleted == model.log_start - before

    @rule(fraction=st.floats(0, 1.2))
    def advance_log_start(self, fraction: float) -> None:
        model = self.model
        target = model.log_start + int(fraction * (model.log_end - model.log_start))
        before = model.log_start
        deleted = self.log.advance_log_start(target)
        new_start = max(before, min(target, max(model.high_watermark, before)))
        while model.batches and model.batches[0].next <= new_start:
            model.batches.pop(0)
        if new_start == before:  # the log start stays: so does the epoch cache
            assert deleted == 0
            return
        model.log_start = new_start
        kept = [(e, s) for e, s in model.epochs if s <= new_start]
        after = [(e, s) for e, s in model.epochs if s > new_start]
        model.epochs = ([(kept[-1][0], new_start)] if kept else []) + after
        assert deleted == new_start - before

    @precondition(lambda self: len(self.model.batches) > 1)
    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        """Rewrite some batches below the high watermark, but the newest, to a random
        subset of their records (rule 7: runs of consecutive offsets, gaps between)."""
        model = self.model
        if data.draw(st.booleans()):  # everything committed: all but the newest batch may go
            self.log.set_high_watermark(model.log_end)
            model.high_watermark = model.log_end
        rewrites: list[BatchRewrite] = []
        batches: list[ModelBatch] = []
        for i, batch in enumerate(model.batches):
            cleanable = (
                i < len(model.batches) - 1
                and batch.next < model.high_watermark
                and batch.base >= model.log_start
            )
            if not (cleanable and data.draw(st.booleans())):
                batches.append(batch)
                continue
            count = len(batch.values)
            keep = data.draw(st.lists(st.booleans(), min_size=count, max_size=count))
            raw = next(fmt.split_batches(self.log.read(batch.base, 1)))
            runs = stored.kept_runs(raw, stored.decode(raw), keep)
            crc = fmt.read_header(raw).header_crc
            rewrites.append(BatchRewrite(batch.base, len(raw), crc, tuple(runs)))
            for run in runs:
                header = fmt.read_header(run)
                at = slice(header.base_offset - batch.base, header.next_offset - batch.base)
                batches.append(
                    ModelBatch(
                        header.base_offset,
                        batch.epoch,
                        batch.timestamps[at],
                        batch.values[at],
                        len(run),
                        batch.keys[at],
                    )
                )
        freed = self.log.rewrite_batches(rewrites)
        assert freed == model.size - sum(b.size for b in batches)
        model.batches = batches

    @rule(max_bytes=st.sampled_from([1, 3000, 1 << 20]))
    def index_keys(self, max_bytes: int) -> None:
        """Rule 8: the index gains whole batches from where it ended, below the HW only;
        each key names its latest record then present (a tombstone removes it)."""
        model = self.model
        start = max(model.indexed, model.log_start)
        high_watermark = max(model.high_watermark, model.log_start)
        end = self.log.index_keys(max_bytes)
        # whole batches below the HW as it is now (none past it, unless it was there before)
        assert end == start if start >= high_watermark else start <= end <= high_watermark
        for batch in model.batches:
            for i, key in enumerate(batch.keys):
                offset = batch.base + i
                if key is not None and start <= offset < end:
                    if batch.values[i] is None:
                        model.index.pop(key, None)
                    else:
                        model.index[key] = offset
        model.indexed = end
        for key in KEYS:
            if key is not None:
                assert self.log.key_offset(key) == model.index.get(key), key
        in_order = sorted((key_index.index_key(k), offset) for k, offset in model.index.items())
        assert self.log.index_page(None, 100) == in_order
        assert self.log.index_page(None, 2) == in_order[:2]
        if in_order:
            assert self.log.index_page(in_order[0][0], 100) == in_order[1:]

    @rule()
    def restart(self) -> None:
        self.adapter.restart()  # a clean one: the high watermark is checkpointed on close
        self._open()
        assert self.log.high_watermark == max(self.model.high_watermark, self.model.log_start)

    @rule(fraction=st.floats(0, 1))
    def read(self, fraction: float) -> None:
        span = self.model.log_end - self.model.log_start
        offset = self.model.log_start + int(fraction * span)
        got = [
            (r.offset, r.timestamp, r.value)
            for b in stored.decode_stream(self.log.read(offset, 1 << 30))
            for r in b.records()
        ]
        holding = [b for b in self.model.batches if b.next > offset]
        first_base = holding[0].base if holding else offset
        assert got == [r for r in self.model.records() if r[0] >= first_base]

    @rule(timestamp=st.integers(-5, 1005))
    def offset_for_time(self, timestamp: int) -> None:
        expected = next(
            (
                (o, ts)
                for o, ts, _ in self.model.records()
                if ts >= timestamp and o >= self.model.log_start
            ),
            None,
        )
        assert self.log.offset_for_time(timestamp) == expected

    @rule(epoch=st.integers(-1, 12))
    def end_offset_for(self, epoch: int) -> None:
        epochs = self.model.epochs
        if epoch == -1 or not epochs:
            expected = (-1, -1)
        elif epoch == epochs[-1][0]:
            expected = (epoch, self.model.log_end)
        else:
            higher = [s for e, s in epochs if e > epoch]
            floor = [e for e, _ in epochs if e <= epoch]
            expected = (-1, -1) if not higher else (floor[-1] if floor else epoch, higher[0])
        assert self.log.end_offset_for(epoch) == expected

    @invariant()
    def offsets_and_bounds_agree(self) -> None:
        log, model = self.log, self.model
        assert (log.log_start_offset, log.log_end_offset) == (model.log_start, model.log_end)
        assert log.high_watermark == max(min(model.high_watermark, model.log_end), model.log_start)
        assert log.size_bytes == model.size
        assert log.epochs() == model.epochs
        assert log.latest_epoch == (model.epochs[-1][0] if model.epochs else -1)
        assert offsets(self.other.read(0, 1 << 20)) == [0]
        with pytest.raises(KraftliteError):
            log.read(model.log_end + 1, 100)
        assert log.indexed_offset == max(model.indexed, model.log_start)
        assert self.other.index_page(None, 10) == []


class LmdbLogMachine(LogMachine):
    adapter_name = "lmdb"


class MemoryLogMachine(LogMachine):
    adapter_name = "memory"


@pytest.mark.parametrize("machine", [LmdbLogMachine, MemoryLogMachine], ids=["lmdb", "memory"])
def test_log_against_model(machine: type[LogMachine]) -> None:
    run_state_machine_as_test(
        machine, settings=settings(max_examples=30, stateful_step_count=30, deadline=None)
    )


def test_the_cleaners_checkpoint_is_kept_and_lowered_by_a_truncation(adapter: Adapter) -> None:
    """Where the cleaner's last pass ended (rule 7): written with its rewrites, kept over a
    restart, never past the high watermark, lowered when a truncation cuts below it."""
    log = adapter.storage.open_partition("t-0")
    assert log.cleaned_offset == 0
    for _ in range(5):
        log.append(make_batch(2), leader_epoch=0)  # 0-9
    log.set_high_watermark(6)
    assert log.rewrite_batches([], cleaned_to=8) == 0
    assert log.cleaned_offset == 6  # not past the high watermark
    log.set_high_watermark(10)
    log.rewrite_batches([], cleaned_to=8)
    adapter.restart(crashed=True)
    log = adapter.storage.open_partition("t-0")
    assert log.cleaned_offset == 8
    log.truncate_to(4)
    assert log.cleaned_offset == 4
    adapter.restart(crashed=True)
    log = adapter.storage.open_partition("t-0")
    assert log.cleaned_offset == 4
    log.truncate_fully_and_start_at(20)
    assert log.cleaned_offset == 20
