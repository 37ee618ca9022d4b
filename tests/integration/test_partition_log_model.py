"""Random sequences of log operations, checked step by step against a plain in-memory model."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kraftlite.errors import KraftliteError
from kraftlite.protocol import batch as fmt
from kraftlite.storage.log import LogStorage, StorageConfig

pytestmark = pytest.mark.integration


@dataclass
class ModelBatch:
    base: int
    epoch: int
    timestamps: list[int]
    values: list[bytes]
    size: int

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
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="kl-model-"))
        self.config = StorageConfig(path=self.dir / "log", map_size_bytes=1 << 20)
        self.storage = LogStorage(self.config)
        self.log = self.storage.open_partition("p")
        self.other = self.storage.open_partition("neighbour")  # must never be disturbed
        self.other.append(fmt.encode_batch([b"n"], timestamps=[1]), 0)
        self.model = Model()

    def teardown(self) -> None:
        self.storage.close()
        shutil.rmtree(self.dir)

    @initialize()
    def start(self) -> None:
        pass

    @rule(
        count=st.integers(1, 5),
        epoch_bump=st.integers(0, 2),
        stamps=st.lists(st.integers(0, 1000), min_size=5, max_size=5),
        size=st.integers(0, 3000),
    )
    def append(self, count: int, epoch_bump: int, stamps: list[int], size: int) -> None:
        epoch = max(self.model.epochs[-1][0] if self.model.epochs else 0, 0) + epoch_bump
        values = [bytes([i]) * size for i in range(count)]
        encoded = fmt.encode_batch(values, timestamps=stamps[:count])
        info = self.log.append(encoded, leader_epoch=epoch)
        base = self.model.log_end
        assert info.first_offset == base
        if not self.model.epochs or epoch > self.model.epochs[-1][0]:
            self.model.epochs.append((epoch, base))
        self.model.batches.append(ModelBatch(base, epoch, stamps[:count], values, len(encoded)))

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
        if target <= self.model.log_start:
            self.model = Model(log_start=target, high_watermark=target)
            return
        self.model.batches = [b for b in self.model.batches if b.next <= target]
        end = self.model.log_end
        self.model.epochs = [(e, s) for e, s in self.model.epochs if s < end]
        self.model.high_watermark = min(self.model.high_watermark, end)

    @rule(
        retention_bytes=st.integers(0, 20000),
        retention_ms=st.integers(-1, 1000),
        now=st.integers(0, 2000),
    )
    def retention(self, retention_bytes: int, retention_ms: int, now: int) -> None:
        self.log.apply_retention(now, retention_ms, retention_bytes)
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
            before = [(e, s) for e, s in model.epochs if s <= model.log_start]
            after = [(e, s) for e, s in model.epochs if s > model.log_start]
            model.epochs = ([(before[-1][0], model.log_start)] if before else []) + after

    @rule()
    def reopen(self) -> None:
        self.storage.close()
        self.storage = LogStorage(self.config)
        self.log = self.storage.open_partition("p")
        self.other = self.storage.open_partition("neighbour")
        # the high watermark is checkpointed on close, so it survives a clean restart
        assert self.log.high_watermark == max(self.model.high_watermark, self.model.log_start)

    @rule(fraction=st.floats(0, 1))
    def read(self, fraction: float) -> None:
        span = self.model.log_end - self.model.log_start
        offset = self.model.log_start + int(fraction * span)
        got = [
            (r.offset, r.timestamp, r.value)
            for b in fmt.decode_stream(self.log.read(offset, 1 << 30))
            for r in b.records()
        ]
        holding = [b for b in self.model.batches if b.next > offset]
        first_base = holding[0].base if holding else offset
        assert got == [r for r in self.model.records() if r[0] >= first_base]

    @rule(timestamp=st.integers(-5, 1005))
    def offset_for_time(self, timestamp: int) -> None:
        expected = next(((o, ts) for o, ts, _ in self.model.records() if ts >= timestamp), None)
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
        assert [
            r.offset for b in fmt.decode_stream(self.other.read(0, 1 << 20)) for r in b.records()
        ] == [0]
        with pytest.raises(KraftliteError):
            log.read(model.log_end + 1, 100)


LogMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_log_against_model = LogMachine.TestCase
