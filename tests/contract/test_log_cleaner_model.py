"""The log cleaner (kraftlite/broker/cleaner.py, storage/compaction.py) against a model: a
dict of every key's latest value, after any interleaving of appends (values and
tombstones, with and without keys, idempotent producers), cleans, high watermark moves,
truncation, retention and restarts, on both log adapters (LMDB files and the twin).

After every step:
- every key's latest record below the high watermark is readable, at its offset, with its
  value (a tombstone too, until delete.retention.ms has passed since its timestamp);
- no record of a key older than its latest below the cleanable end survives a clean (no
  resurrection), and no record in the log was ever changed or renumbered: each one is a
  record appended at that offset;
- records from the cleanable end on (above the high watermark, in the newest batch,
  younger than min.compaction.lag.ms) are all still there.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
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

from kraftlite.broker import cleaner
from kraftlite.broker.cleaner_process import CleanerProcess
from kraftlite.protocol import batch as fmt
from kraftlite.storage.compaction import CleanPolicy, PassPlan
from tests.contract.test_partition_log_contract import ADAPTERS

pytestmark = pytest.mark.contract

KEYS = [b"a", b"b", b"c", b"d", None]  # None: a record without a key
POLICY = CleanPolicy(min_compaction_lag_ms=50, delete_retention_ms=300)

Appended = tuple[bytes | None, bytes | None, int]  # key, value, timestamp


class CleanerMachine(RuleBasedStateMachine):
    adapter_name: ClassVar[str]

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="kl-cleaner-"))
        self.adapter = ADAPTERS[self.adapter_name](self.dir)
        self.log = self.adapter.storage.open_partition("p")
        self.appended: dict[int, Appended] = {}  # offset -> what was appended there
        # (first, next offset, idempotent) of each batch appended
        self.batches: list[tuple[int, int, bool]] = []
        self.now = 1000
        self.planner: cleaner.Planner = PassPlan
        self.producer_sequence = 0
        self.sequences: dict[int, int] = {}  # offset -> its idempotent record's sequence

    def teardown(self) -> None:
        self.adapter.close()
        shutil.rmtree(self.dir)

    @initialize()
    def start(self) -> None:
        pass

    @rule(
        records=st.lists(
            st.tuples(st.sampled_from(KEYS), st.booleans(), st.integers(0, 400)),
            min_size=1,
            max_size=6,
        ),
        idempotent=st.booleans(),
    )
    def append(self, records: list[tuple[bytes | None, bool, int]], idempotent: bool) -> None:
        """Records stamped up to 400 ms before now (producers' clocks differ)."""
        values = [None if tombstone else b"v%d" % self.now for _, tombstone, _ in records]
        stamps = [self.now - age for _, _, age in records]
        producer = {}
        if idempotent:
            producer = {"producer_id": 7, "producer_epoch": 0}
            producer["base_sequence"] = self.producer_sequence
            for i in range(len(records)):
                self.sequences[self.log.log_end_offset + i] = self.producer_sequence + i
            self.producer_sequence += len(records)
        batch = fmt.encode_batch(
            values, keys=[key for key, _, _ in records], timestamps=stamps, **producer
        )
        info = self.log.append(batch, leader_epoch=1)
        for i, ((key, _, _), value, stamp) in enumerate(zip(records, values, stamps, strict=True)):
            self.appended[info.first_offset + i] = (key, value, stamp)
        self.batches.append((info.first_offset, info.log_end_offset, idempotent))
        self.now += 10

    @rule(fraction=st.floats(0, 1))
    def move_high_watermark(self, fraction: float) -> None:
        log = self.log
        target = log.log_start_offset + int(fraction * (log.log_end_offset - log.log_start_offset))
        log.set_high_watermark(max(target, log.high_watermark))

    @rule()
    def commit_everything(self) -> None:
        self.log.set_high_watermark(self.log.log_end_offset)

    @rule(ms=st.integers(1, 500))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    def committed_offsets(self) -> set[int]:
        """The offsets of batches that end at or below the high watermark (what the
        cleaner reads)."""
        hw = self.log.high_watermark
        return {o for first, end, _ in self.batches if end <= hw for o in range(first, end)}

    @rule()
    def clean(self) -> None:
        before = self.readable()
        committed = self.committed_offsets()
        hw, start = self.log.high_watermark, self.log.log_start_offset
        idempotent = [
            (first, end) for first, end, yes in self.batches if yes and start <= first and end <= hw
        ]
        whole = set(range(*idempotent[-1])) if idempotent else set()  # rule 4
        result = cleaner.clean(self.log, self.now, POLICY, force=True, planner=self.planner)
        assert result is not None
        assert self.log.cleaned_offset == max(
            min(result.end, self.log.high_watermark), self.log.log_start_offset
        )
        after = self.readable()
        assert set(after) <= set(before)  # nothing new, nothing moved
        for offset, (key, value, stamp) in before.items():
            if offset >= result.end or offset in whole:
                assert offset in after, offset  # uncleanable, or a producer's last batch
                continue
            newer = [o for o in committed if o > offset and self.appended[o][0] == key]
            pinned = any(before[o][0] == key for o in whole if o in before and o < offset)
            if key is None or newer:
                assert offset not in after, (offset, key)  # superseded: gone
            elif value is None and self.now - stamp > POLICY.delete_retention_ms and not pinned:
                assert offset not in after, (offset, key)  # an old tombstone: gone
            else:
                assert offset in after, (offset, key)  # the latest of its key: kept

    @precondition(lambda self: self.log.log_end_offset > self.log.log_start_offset)
    @rule(fraction=st.floats(0, 1))
    def truncate(self, fraction: float) -> None:
        log = self.log
        target = log.log_start_offset + int(fraction * (log.log_end_offset - log.log_start_offset))
        target = max(target, log.high_watermark)  # a follower never truncates committed records
        log.truncate_to(target)
        self.appended = {o: r for o, r in self.appended.items() if o < log.log_end_offset}
        # (after a clean, the log may end below a batch as appended: its gap went)
        end = log.log_end_offset
        self.batches = [
            (first, min(last, end), yes) for first, last, yes in self.batches if first < end
        ]

    @rule(retention_bytes=st.integers(0, 5000))
    def retention(self, retention_bytes: int) -> None:
        self.log.apply_retention(self.now, -1, retention_bytes)

    @rule()
    def restart(self) -> None:
        self.adapter.restart(crashed=False)
        self.log = self.adapter.storage.open_partition("p")

    def readable(self) -> dict[int, Appended]:
        log = self.log
        records: dict[int, Appended] = {}
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20)
            if not data:
                break
            for batch in fmt.decode_stream(data):
                for record in batch.records():
                    if record.offset >= log.log_start_offset:
                        records[record.offset] = (record.key, record.value, record.timestamp)
                offset = batch.header.next_offset
        return records

    @invariant()
    def the_producers_last_committed_sequence_stays(self) -> None:
        """Rule 4: rebuilt from the log's batches, the producer's last sequence below the
        high watermark is that of its last committed record."""
        hw, start = self.log.high_watermark, self.log.log_start_offset
        committed = [
            (first, end) for first, end, yes in self.batches if yes and start <= first and end <= hw
        ]
        stored = [h for h in self.log.producer_headers() if h.next_offset <= hw]
        if committed:
            first, end = committed[-1]
            assert stored and stored[-1].base_offset == first
            assert stored[-1].last_sequence == self.sequences[end - 1]

    @invariant()
    def a_deleted_key_never_comes_back(self) -> None:
        """Once a key's latest committed record is a tombstone that is no longer readable,
        no record of that key is (the cleaner removed it with everything before it)."""
        readable = self.readable()
        latest: dict[bytes | None, int] = {}
        for offset in sorted(self.committed_offsets()):
            latest[self.appended[offset][0]] = offset
        for key, offset in latest.items():
            if key is not None and self.appended[offset][1] is None and offset not in readable:
                back = [o for o, (k, _, _) in readable.items() if k == key and o < offset]
                assert not back, (key, back)

    @invariant()
    def every_record_is_as_appended_and_each_keys_latest_is_there(self) -> None:
        readable = self.readable()
        for offset, record in readable.items():
            assert self.appended[offset] == record, offset  # never changed, never renumbered
        log = self.log
        latest: dict[bytes | None, int] = {}
        for offset in sorted(self.committed_offsets()):
            if offset >= log.log_start_offset:
                latest[self.appended[offset][0]] = offset
        for key, offset in latest.items():
            _, value, stamp = self.appended[offset]
            if key is None or (value is None and self.now - stamp > POLICY.delete_retention_ms):
                continue  # may be gone
            assert offset in readable, (key, offset)  # the latest of a key stays readable


class LmdbCleanerMachine(CleanerMachine):
    adapter_name = "lmdb"


class LmdbProcessCleanerMachine(CleanerMachine):
    """Passes decided in the cleaner's process (broker/cleaner_process.py), as a broker's."""

    adapter_name = "lmdb"
    process: ClassVar[CleanerProcess | None] = None

    def __init__(self) -> None:
        super().__init__()
        assert self.process is not None
        self.planner = self.process.start_pass


class MemoryCleanerMachine(CleanerMachine):
    adapter_name = "memory"


@pytest.mark.parametrize(
    "machine",
    [LmdbCleanerMachine, MemoryCleanerMachine, LmdbProcessCleanerMachine],
    ids=["lmdb", "memory", "lmdb-process"],
)
def test_the_cleaner_against_a_model(
    machine: type[CleanerMachine], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cleaner, "READ_BYTES", 300)  # a pass reads batch by batch or so
    with contextlib.closing(CleanerProcess()) as process:
        LmdbProcessCleanerMachine.process = process
        run_state_machine_as_test(
            machine, settings=settings(max_examples=40, stateful_step_count=40, deadline=None)
        )
