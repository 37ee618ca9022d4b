"""The log cleaner's process (kraftlite/broker/cleaner_process.py), a real one: passes
decided there leave the log as passes decided on the cleaner's thread; a failure or a
death ends one pass and the next starts a new process; a broker that stops or dies takes
the process with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftlite.broker import cleaner
from kraftlite.broker.cleaner_process import (
    Began,
    Begin,
    CleanerProcess,
    CleanerProcessError,
    Failed,
    Fold,
    Folded,
    Plan,
    Planned,
    answer,
)
from kraftlite.protocol import batch as fmt
from kraftlite.storage.compaction import CleanPolicy
from kraftlite.storage.memory import MemoryPartitionLog

pytestmark = pytest.mark.integration

NOW_MS = 10**13
POLICY = CleanPolicy(delete_retention_ms=1000)


def a_log(batches: int = 60) -> MemoryPartitionLog:
    """Batches of 5 records over 7 keys, every 9th record a tombstone (some old enough to
    go), one idempotent producer's batches among them."""
    log = MemoryPartitionLog("t-0")
    for n in range(batches):
        keys = [b"k%d" % ((n * 5 + i) % 7) for i in range(5)]
        values = [None if (n * 5 + i) % 9 == 0 else b"v%d" % (n * 5 + i) for i in range(5)]
        stamps = [NOW_MS - 5000 + n * 50] * 5
        producer: dict[str, Any] = (
            {"producer_id": 7, "producer_epoch": 0, "base_sequence": n * 5} if n % 4 else {}
        )
        log.append(fmt.encode_batch(values, keys=keys, timestamps=stamps, **producer), 0)
    log.set_high_watermark(log.log_end_offset)
    return log


def records(log: MemoryPartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    data = log.read(log.log_start_offset, 1 << 30)
    return [
        (batch.header.base_offset + i, key, value)
        for batch in fmt.decode_stream(data)
        for i, (key, value) in enumerate(zip(batch.keys, batch.values, strict=True))
    ]


@pytest.fixture
def process() -> Iterator[CleanerProcess]:
    owner = CleanerProcess()
    yield owner
    owner.close()


def test_a_pass_decided_in_the_process_leaves_the_log_as_one_decided_on_the_thread(
    process: CleanerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cleaner, "READ_BYTES", 700)  # many reads and folds per pass
    here, there = a_log(), a_log()
    ours = cleaner.clean(here, NOW_MS, POLICY, force=True)
    theirs = cleaner.clean(there, NOW_MS, POLICY, force=True, planner=process.start_pass)
    assert ours == theirs and ours is not None and ours.rewritten > 0 and ours.freed_bytes > 0
    assert records(here) == records(there)
    assert there.cleaned_offset == here.cleaned_offset
    # the same process serves the next pass, and a second pass has nothing left to do
    assert cleaner.clean(there, NOW_MS, POLICY, force=True, planner=process.start_pass) == (
        cleaner.clean(here, NOW_MS, POLICY, force=True)
    )


def test_the_process_answers_each_request_in_turn_and_refuses_one_out_of_order() -> None:
    data = a_log(3).read(0, 1 << 20)
    plan, reply = answer(None, Fold(data))
    assert plan is None and isinstance(reply, Failed) and "without a pass begun" in reply.error
    plan, reply = answer(None, Begin(NOW_MS, POLICY, 0, frozenset(), frozenset(), frozenset()))
    assert plan is not None and reply == Began()
    plan, reply = answer(plan, Fold(data))
    assert reply == Folded()
    _, reply = answer(plan, Plan(data))
    assert isinstance(reply, Planned) and reply.rewrites


def test_a_killed_process_fails_one_pass_and_the_next_pass_starts_another(
    process: CleanerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = a_log()
    before = records(log)
    process.start_pass(NOW_MS, POLICY, 0, ())  # running
    first = process._process
    assert first is not None
    reads = []
    original = cleaner._read

    def kill_on_second_read(*args: Any, **kwargs: Any) -> bytes:
        reads.append(1)
        if len(reads) == 2:
            first.kill()
            first.wait()
        return original(*args, **kwargs)

    monkeypatch.setattr(cleaner, "_read", kill_on_second_read)
    monkeypatch.setattr(cleaner, "READ_BYTES", 700)
    with pytest.raises(CleanerProcessError, match=r"died|gone"):
        cleaner.clean(log, NOW_MS, POLICY, force=True, planner=process.start_pass)
    assert records(log) == before and log.cleaned_offset == 0  # nothing written
    monkeypatch.setattr(cleaner, "_read", original)
    result = cleaner.clean(log, NOW_MS, POLICY, force=True, planner=process.start_pass)
    assert result is not None and result.rewritten > 0
    assert process._process is not None and process._process.pid != first.pid


def test_a_process_that_dies_during_a_request_fails_it(process: CleanerProcess) -> None:
    process.start_pass(NOW_MS, POLICY, 0, ())
    child = process._process
    assert child is not None
    child.send_signal(signal.SIGSTOP)  # the request waits on it
    threading.Timer(0.3, child.kill).start()
    with pytest.raises(CleanerProcessError, match=r"died|gone"):
        process.request(Fold(a_log(3).read(0, 1 << 20)), Folded)
    assert process._process is None


def test_a_stopping_broker_kills_the_process_and_starts_no_other() -> None:
    """Even a stopped process (SIGSTOP) with a MiB to send it: `kill` frees the request."""
    stopping = threading.Event()
    owner = CleanerProcess(stopping.is_set)
    try:
        owner.start_pass(NOW_MS, POLICY, 0, ())
        child = owner._process
        assert child is not None
        child.send_signal(signal.SIGSTOP)

        def stop() -> None:  # as ReplicaManager.stop does, from the event loop's thread
            stopping.set()
            owner.kill()

        threading.Timer(0.3, stop).start()
        started = time.monotonic()
        with pytest.raises(cleaner.Stopped):
            owner.request(Fold(os.urandom(4 << 20)), Folded)  # more than a socket buffers
        assert time.monotonic() - started < 10
        assert owner._process is None and child.poll() == -signal.SIGKILL
        with pytest.raises(cleaner.Stopped):
            owner.start_pass(NOW_MS, POLICY, 0, ())
        assert owner._process is None  # none started
    finally:
        owner.close()


def test_a_pass_ends_by_freeing_its_keys_in_the_process(process: CleanerProcess) -> None:
    log = a_log()
    plan = process.start_pass(NOW_MS, POLICY, 0, ())
    plan.fold([log.read(0, 1 << 20)])
    plan.end()
    with pytest.raises(CleanerProcessError, match="without a pass begun"):
        plan.fold([log.read(0, 1 << 20)])


def test_the_process_ignores_the_brokers_working_directory(
    process: CleanerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "signal.py").write_text("raise SystemExit('shadowed')\n")
    monkeypatch.chdir(tmp_path)
    log = a_log()
    result = cleaner.clean(log, NOW_MS, POLICY, force=True, planner=process.start_pass)
    assert result is not None and result.rewritten > 0


def test_the_process_ends_when_its_broker_is_killed(tmp_path: Path) -> None:
    """kill -9 of the process holding it closes its socket: it exits (rule 3)."""
    script = textwrap.dedent(
        """
        import sys, time
        from kraftlite.broker.cleaner_process import CleanerProcess
        from kraftlite.storage.compaction import CleanPolicy
        owner = CleanerProcess()
        owner.start_pass(0, CleanPolicy(), 0, ())
        print(owner._process.pid, flush=True)
        time.sleep(600)
        """
    )
    broker = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=Path(__file__).parents[2]
    )
    try:
        assert broker.stdout is not None
        child = int(broker.stdout.readline())
        os.kill(child, 0)  # running
    finally:
        broker.kill()
        broker.wait()
        assert broker.stdout is not None
        broker.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break  # gone (reaped by init once its parent died)
        if _zombie(child):
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the cleaner's process outlived its broker")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_a_pass_that_fails_with_a_request_unanswered_leaves_no_reply_for_the_next(
    process: CleanerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first write fails while the next read is with the process: that pass ends the
    process, and the next pass (another process) cleans as the thread would."""
    monkeypatch.setattr(cleaner, "READ_BYTES", 700)
    log, expected = a_log(), a_log()
    cleaner.clean(expected, NOW_MS, POLICY, force=True)
    first = process.start_pass(NOW_MS, POLICY, 0, ())._process
    original = log.rewrite_batches

    outstanding = []

    def failing(*args: Any, **kwargs: Any) -> int:
        outstanding.append(process.outstanding)  # the next read is with the process
        raise OSError("disk")

    monkeypatch.setattr(log, "rewrite_batches", failing)
    with pytest.raises(OSError, match="disk"):
        cleaner.clean(log, NOW_MS, POLICY, force=True, planner=process.start_pass)
    assert outstanding == [True]
    assert process._process is None and first.poll() is not None  # ended, not reused
    monkeypatch.setattr(log, "rewrite_batches", original)
    cleaner.clean(log, NOW_MS, POLICY, force=True, planner=process.start_pass)
    assert records(log) == records(expected)


def test_transactions_are_cleaned_as_decided_in_both_places(process: CleanerProcess) -> None:
    """compaction.py rule 8: an aborted transaction's batches go whole and supersede no
    key, but a producer's last batch with a sequence stays (rule 4, Kafka's P29); a
    committed one's records are compacted as any others; markers stay; nothing from the
    first undecided transaction on is cleaned, nor superseded by a record there. The same
    in the process as here."""

    def txn(pid: int, sequence: int, *pairs: tuple[bytes, bytes]) -> bytes:
        return fmt.encode_batch(
            [v for _, v in pairs],
            keys=[k for k, _ in pairs],
            timestamps=[NOW_MS - 5000] * len(pairs),
            producer_id=pid,
            producer_epoch=0,
            base_sequence=sequence,
            transactional=True,
        )

    def plain(*pairs: tuple[bytes, bytes]) -> bytes:
        return fmt.encode_batch(
            [v for _, v in pairs],
            keys=[k for k, _ in pairs],
            timestamps=[NOW_MS - 5000] * len(pairs),
        )

    def marker(pid: int, commit: bool) -> bytes:
        return fmt.encode_marker(pid, 0, commit, 0, NOW_MS - 5000)

    def a_transactional_log() -> MemoryPartitionLog:
        log = MemoryPartitionLog("t-0")
        for batch in (
            plain((b"a", b"a0"), (b"b", b"b0"), (b"c", b"c0")),  # 0-2
            txn(1, 0, (b"a", b"a-aborted")),  # 3: goes
            txn(1, 1, (b"y", b"y-aborted")),  # 4: producer 1's last batch, so it stays
            txn(2, 0, (b"b", b"b-committed")),  # 5
            marker(1, commit=False),  # 6
            marker(2, commit=True),  # 7
            txn(3, 0, (b"c", b"c-open")),  # 8: undecided
            plain((b"a", b"a1")),  # 9: behind it, so not cleaned yet
            plain((b"z", b"z")),  # 10
        ):
            log.append(batch, 0)
        log.set_high_watermark(log.log_end_offset)
        return log

    here, there = a_transactional_log(), a_transactional_log()
    mine = cleaner.clean(here, NOW_MS, POLICY, force=True)
    theirs = cleaner.clean(there, NOW_MS, POLICY, force=True, planner=process.start_pass)
    assert mine == theirs and mine is not None
    assert mine.end == 8  # the first undecided transaction's first offset
    assert (
        records(here)
        == records(there)
        == [
            # a1 is past the first undecided transaction, which read_committed readers
            # do not read past yet: a0 stays their latest a
            (0, b"a", b"a0"),
            (2, b"c", b"c0"),  # c's undecided c-open may yet abort: c0 stays
            (4, b"y", b"y-aborted"),  # kept whole, a key of no one's
            (5, b"b", b"b-committed"),  # b0 went: the committed record is b's latest
            (6, fmt.CONTROL_KEY.pack(0, fmt.CONTROL_ABORT), fmt.CONTROL_VALUE.pack(0, 0)),
            (7, fmt.CONTROL_KEY.pack(0, fmt.CONTROL_COMMIT), fmt.CONTROL_VALUE.pack(0, 0)),
            (8, b"c", b"c-open"),
            (9, b"a", b"a1"),
            (10, b"z", b"z"),
        ]
    )
