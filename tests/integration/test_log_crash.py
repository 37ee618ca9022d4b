"""kill -9 in the middle of appends: reopening gives a clean prefix, nothing acknowledged lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kraftlite.broker import cleaner
from kraftlite.protocol import batch as fmt
from kraftlite.storage.compaction import CleanPolicy
from kraftlite.storage.log import LogStorage, PartitionLog, StorageConfig

pytestmark = pytest.mark.integration

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from kraftlite.protocol import batch as fmt
    from kraftlite.storage.log import LogStorage, StorageConfig

    storage = LogStorage(StorageConfig(path=Path(sys.argv[1]), flush_interval_ms=int(sys.argv[2])))
    storage.start_flusher()
    logs = [storage.open_partition(f"t-{p}") for p in range(3)]
    n = 0
    while True:
        log = logs[n % 3]
        start = log.log_end_offset
        values = [f"{log.name}:{start + i}".encode() for i in range(50)]
        batch = fmt.encode_batch(values, timestamps=[n] * 50)
        info = log.append(batch, leader_epoch=int(sys.argv[3]))
        log.set_high_watermark(info.log_end_offset)
        print(log.name, info.log_end_offset, flush=True)  # acknowledged
        n += 1
    """
)


@pytest.mark.parametrize("flush_interval_ms", [1000, 0])
def test_kill_9_during_appends_leaves_a_clean_prefix(tmp_path: Path, flush_interval_ms) -> None:
    rng = random.Random(flush_interval_ms)
    path = tmp_path / "log"
    for round_number in range(3):
        acknowledged: dict[str, int] = {}
        with subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(flush_interval_ms), str(round_number)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        ) as writer:
            assert writer.stdout is not None
            for _ in range(rng.randrange(20, 120)):
                line = writer.stdout.readline()
                assert line, "writer died"
                name, end = line.split()
                acknowledged[name] = int(end)
            writer.send_signal(signal.SIGKILL)

        storage = LogStorage(StorageConfig(path=path))
        try:
            for name, end in acknowledged.items():
                log = storage.open_partition(name)
                assert log.log_end_offset >= end, f"round {round_number}: lost acknowledged data"
                expected = 0
                for decoded in fmt.decode_stream(log.read(0, 1 << 30)):
                    # every batch whole: decode checks CRCs and structure
                    for record in decoded.records():
                        assert record.offset == expected  # dense and ordered
                        assert record.value == f"{name}:{expected}".encode()
                        expected += 1
                assert expected == log.log_end_offset
                assert log.high_watermark <= log.log_end_offset
        finally:
            storage.close()


CLEANER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from kraftlite.broker import cleaner
    from kraftlite.storage.compaction import CleanPolicy
    from kraftlite.storage.log import LogStorage, StorageConfig

    storage = LogStorage(StorageConfig(path=Path(sys.argv[1])))
    log = storage.open_partition("compacted")
    # small reads and transactions: a pass of many steps, each a place to die
    cleaner.READ_BYTES, cleaner.REWRITE_CHUNK = 4096, 8

    def step():  # after each read and each rewrite transaction
        print("step", flush=True)
        return False

    print(cleaner.clean(log, 10**13, CleanPolicy(), force=True, stopping=step), flush=True)
    """
)


def _records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of `log`, each batch decoded whole (CRCs and structure checked)."""
    return [
        (record.offset, record.key, record.value)
        for decoded in fmt.decode_stream(log.read(log.log_start_offset, 1 << 30))
        for record in decoded.records()
    ]


def test_kill_9_in_the_middle_of_a_clean_leaves_the_log_as_before_or_after_it(
    tmp_path: Path,
) -> None:
    """Issue 26: the cleaner killed with SIGKILL at a random moment of a pass leaves every
    batch as it was or as cleaned: no record is renumbered or changed, none a full pass
    keeps is missing, each key still reads its latest value, and the next pass finishes
    the job."""
    rng = random.Random(26)
    path = tmp_path / "log"
    storage = LogStorage(StorageConfig(path=path))
    log = storage.open_partition("compacted")
    for n in range(600):
        keys = [f"key-{rng.randrange(40)}".encode() for _ in range(10)]
        values = [f"value-{n}-{i}".encode() for i in range(10)]
        info = log.append(fmt.encode_batch(values, keys=keys, timestamps=[n] * 10), 0)
    log.set_high_watermark(info.log_end_offset)
    before = _records(log)
    end, high_watermark = log.log_end_offset, log.high_watermark
    storage.close()
    last: dict[bytes | None, tuple[int, bytes | None, bytes | None]] = {}
    for record in before:
        last[record[1]] = record
    newest = [r for r in before if r[0] >= before[-1][0] - 9]  # the batch ending at the HW
    after = sorted(set(last.values()) | set(newest))
    table = {key: value for _, key, value in before}

    torn = 0
    for _ in range(4):
        with subprocess.Popen(
            [sys.executable, "-c", CLEANER, str(path)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        ) as worker:
            assert worker.stdout is not None
            # ~58 reads to find each key's latest, then reads and ~75 rewrites: killed
            # while it rewrites (or after, once a kill before it left less to do)
            for _ in range(rng.randrange(60, 130)):
                if worker.stdout.readline() != "step\n":
                    break
            worker.send_signal(signal.SIGKILL)
        storage = LogStorage(StorageConfig(path=path))
        try:
            log = storage.open_partition("compacted")
            now = _records(log)
            assert set(now) <= set(before), "a record changed or was renumbered"
            assert set(after) <= set(now), "a record a full pass keeps is gone"
            assert {key: value for _, key, value in now} == table
            assert (log.log_end_offset, log.high_watermark) == (end, high_watermark)
            torn += set(now) not in (set(before), set(after))
            before = now  # the next kill starts from here
        finally:
            storage.close()
    storage = LogStorage(StorageConfig(path=path))
    try:
        log = storage.open_partition("compacted")
        cleaner.clean(log, 10**13, CleanPolicy(), force=True)
        assert _records(log) == after
    finally:
        storage.close()
    assert torn, "no kill landed in the middle of a pass: the test proved nothing"
