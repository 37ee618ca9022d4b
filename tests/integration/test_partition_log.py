"""The LMDB partition log, operation by operation, on real LMDB files. Scenarios every
adapter of the port must pass are in tests/contract/test_partition_log_contract.py (run on
LMDB too); those left here are LMDB's own or assert details the contract words otherwise."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as fmt
from kraftlite.storage.log import LogStorage, PartitionLog, StorageConfig

pytestmark = pytest.mark.integration


def make_batch(count: int, ts: int = 1000, value: bytes = b"v", step: int = 0) -> bytes:
    return fmt.encode_batch(
        [value + str(i).encode() for i in range(count)],
        keys=[str(i).encode() for i in range(count)],
        timestamps=[ts + i * step for i in range(count)],
    )


def offsets(stream: bytes) -> list[int]:
    return [r.offset for b in fmt.decode_stream(stream) for r in b.records()]


def test_append_assigns_dense_offsets_and_reads_back(storage: LogStorage) -> None:
    log = storage.open_partition("t-0")
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    first = log.append(make_batch(3), leader_epoch=0)
    second = log.append(make_batch(2), leader_epoch=0)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.log_end_offset) == (3, 4, 5)
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


def test_reads_outside_the_log_are_out_of_range(storage: LogStorage) -> None:
    log = storage.open_partition("t-0")
    log.append(make_batch(2), leader_epoch=0)
    for offset in (-1, 3):
        with pytest.raises(KraftliteError) as info:
            log.read(offset, 100)
        assert info.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
        assert info.value.details == {"log_start_offset": 0, "high_watermark": 0}


def test_corrupt_batches_and_stale_epochs_are_refused_without_change(
    storage: LogStorage,
) -> None:
    log = storage.open_partition("t-0")
    log.append(make_batch(1), leader_epoch=3)
    bad = bytearray(make_batch(2))
    bad[-9] ^= 0xFF
    with pytest.raises(KraftliteError) as info:
        log.append(bad, leader_epoch=3)
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KraftliteError) as info:
        log.append(make_batch(1), leader_epoch=2)
    assert info.value.code is ErrorCode.FENCED_LEADER_EPOCH
    assert log.log_end_offset == 1
    assert offsets(log.read(0, 1 << 20)) == [0]


def test_partitions_are_isolated(storage: LogStorage) -> None:
    logs = [storage.open_partition(f"t-{i}") for i in range(5)]
    for i, log in enumerate(logs):
        for _ in range(i + 1):
            log.append(make_batch(2), leader_epoch=0)
    for i, log in enumerate(logs):
        assert offsets(log.read(0, 1 << 20)) == list(range(2 * (i + 1)))
    assert sorted(storage.partition_names()) == [f"t-{i}" for i in range(5)]


def test_state_survives_reopen(tmp_path: Path) -> None:
    config = StorageConfig(path=tmp_path / "log")
    storage = LogStorage(config)
    log = storage.open_partition("t-0")
    for i in range(4):
        log.append(make_batch(2, ts=i * 1000), leader_epoch=i)
    log.set_high_watermark(6)
    log.apply_retention(now_ms=10_000, retention_ms=9500, retention_bytes=-1)
    storage.close()

    storage = LogStorage(config)
    log = storage.open_partition("t-0")
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (2, 8, 6)
    assert log.epochs() == [(1, 2), (2, 4), (3, 6)]
    assert log.offset_for_time(2500) == (6, 3000)
    assert offsets(log.read(2, 1 << 20)) == list(range(2, 8))
    storage.close()


def test_replicated_append_keeps_the_leaders_offsets_and_epochs(storage: LogStorage) -> None:
    leader = storage.open_partition("leader")
    follower = storage.open_partition("follower")
    leader.append(make_batch(2), leader_epoch=1)
    leader.append(make_batch(3), leader_epoch=2)
    stream = leader.read(0, 1 << 20)
    info = follower.append_replicated(stream)
    assert info is not None and info.log_end_offset == 5
    assert follower.epochs() == leader.epochs() == [(1, 0), (2, 2)]
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    assert follower.append_replicated(b"") is None
    # a gap or an overlap is refused
    with pytest.raises(KraftliteError) as info_error:
        follower.append_replicated(leader.read(2, 1 << 20))
    assert info_error.value.code is ErrorCode.INVALID_REQUEST
    assert follower.log_end_offset == 5


def test_deleted_partition_is_gone_and_its_name_reusable(storage: LogStorage) -> None:
    log = storage.open_partition("t-0")
    log.append(make_batch(3), leader_epoch=0)
    storage.delete_partition("t-0")
    with pytest.raises(KraftliteError):
        log.read(0, 100)
    assert storage.partition_names() == []
    fresh = storage.open_partition("t-0")
    assert fresh.log_end_offset == 0
    assert fresh.append(make_batch(1), leader_epoch=0).first_offset == 0


def test_a_full_map_grows_and_a_maximum_fails_cleanly(tmp_path: Path) -> None:
    storage = LogStorage(
        StorageConfig(path=tmp_path / "log", map_size_bytes=1 << 20, map_max_bytes=8 << 20)
    )
    log = storage.open_partition("t-0")
    big = make_batch(100, value=b"x" * 1000)
    appended = 0
    with pytest.raises(KraftliteError) as info:
        for _ in range(200):
            log.append(big, leader_epoch=0)
            appended += 1
    assert info.value.code is ErrorCode.KAFKA_STORAGE_ERROR
    assert "full" in info.value.message
    assert storage.map_size_bytes() == 8 << 20
    assert appended > 10  # it grew past the initial 1 MiB before giving up
    # nothing half-written: the log holds exactly the appends that succeeded
    assert log.log_end_offset == 100 * appended
    assert offsets(log.read(0, 1 << 30)) == list(range(100 * appended))
    storage.close()


def test_fsync_every_append_policy(tmp_path: Path) -> None:
    storage = LogStorage(StorageConfig(path=tmp_path / "log", flush_interval_ms=0))
    log = storage.open_partition("t-0")
    log.append(make_batch(2), leader_epoch=0)
    assert offsets(log.read(0, 100)) == [0, 1]
    storage.close()


def test_periodic_flusher_checkpoints_the_high_watermark(tmp_path: Path) -> None:
    config = StorageConfig(path=tmp_path / "log", flush_interval_ms=10)
    storage = LogStorage(config)
    storage.start_flusher()
    log: PartitionLog = storage.open_partition("t-0")
    log.append(make_batch(2), leader_epoch=0)
    log.set_high_watermark(2)
    storage.close()
    storage = LogStorage(config)
    assert storage.open_partition("t-0").high_watermark == 2
    storage.close()


def test_epochs_out_of_range_and_unstamped_replicas_are_refused(storage: LogStorage) -> None:
    log = storage.open_partition("t-0")
    for epoch in (-1, 2**31):
        with pytest.raises(KraftliteError) as info:
            log.append(make_batch(1), leader_epoch=epoch)
        assert info.value.code is ErrorCode.INVALID_REQUEST
    with pytest.raises(KraftliteError) as info:
        log.append_replicated(make_batch(1))  # a producer's batch: epoch -1, never stamped
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0


def test_a_failed_flush_does_not_stop_the_flusher(tmp_path: Path, monkeypatch) -> None:
    storage = LogStorage(StorageConfig(path=tmp_path / "log", flush_interval_ms=5))
    calls = []
    real_sync = storage.sync

    def flaky_sync() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(5, "simulated EIO")
        real_sync()

    monkeypatch.setattr(storage, "sync", flaky_sync)
    storage.start_flusher()
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(calls) >= 3
    monkeypatch.undo()
    storage.close()


def test_a_full_map_can_still_delete_its_way_out(tmp_path: Path) -> None:
    storage = LogStorage(
        StorageConfig(path=tmp_path / "log", map_size_bytes=1 << 20, map_max_bytes=2 << 20)
    )
    log = storage.open_partition("t-0")
    with pytest.raises(KraftliteError):
        for _ in range(100):
            log.append(make_batch(100, value=b"x" * 1000), leader_epoch=0)
    log.set_high_watermark(log.log_end_offset)
    end = log.log_end_offset
    log.truncate_to(end - 100)
    assert log.apply_retention(now_ms=10**12, retention_ms=0, retention_bytes=-1) > 0
    assert log.log_start_offset == log.log_end_offset == end - 100
    storage.delete_partition("t-0")
    storage.close()


def test_sync_checkpoints_the_logs_that_moved_and_only_those(tmp_path: Path) -> None:
    """The flusher's sync visits only logs whose high watermark or end moved (it walked
    every log: at 100,000 replicas most of an idle broker's CPU); what moved is durable."""
    config = StorageConfig(path=tmp_path / "log")
    storage = LogStorage(config)
    logs = [storage.open_partition(f"t-{i}") for i in range(3)]
    storage.sync()
    checked: list[str] = []
    for log in logs:
        original = log.checkpoint_high_watermark

        def spy(log: PartitionLog = log, original=original) -> None:  # type: ignore[no-untyped-def]
            checked.append(log.name)
            original()

        log.checkpoint_high_watermark = spy  # type: ignore[method-assign]
    storage.sync()
    assert checked == []  # nothing moved: nothing visited
    logs[1].append(make_batch(3), leader_epoch=0)
    logs[1].set_high_watermark(2)
    storage.sync()
    assert checked == ["t-1"]
    # the checkpoint is on disk: a process killed now (no close) restarts with that HW
    storage._closed.set()
    storage._env.close()
    reopened = LogStorage(config)
    assert reopened.open_partition("t-1").high_watermark == 2
    reopened.close()
