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

from kraftlite.protocol import batch as fmt
from kraftlite.storage.log import LogStorage, StorageConfig

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
