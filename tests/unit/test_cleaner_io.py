"""The log cleaner's I/O limits (broker/cleaner.py): the throttle that holds passes to
log.cleaner.io.max.bytes.per.second, and a pass that ends early when the broker stops."""

from __future__ import annotations

import pytest

from kraftlite.broker import cleaner
from kraftlite.clock import ManualClock
from kraftlite.protocol import batch as fmt
from kraftlite.storage.compaction import CleanPolicy
from kraftlite.storage.memory import MemoryPartitionLog


def throttle(rate: int) -> tuple[cleaner.IoThrottle, ManualClock, list[float]]:
    clock, slept = ManualClock(), []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(round(seconds * 1000))

    return cleaner.IoThrottle(rate, clock, sleep), clock, slept


def test_the_throttle_sleeps_off_what_is_ahead_of_the_rate() -> None:
    io, clock, slept = throttle(1000)
    io.spent(500)  # half a second's worth at once: ahead by 0.5 s
    assert slept == [0.5]
    clock.advance(2000)
    io.spent(100)  # 2 s into the window that began after the sleep: behind the rate,
    assert slept == [0.5]  # and the window ends (a second went by)
    io.spent(4000)  # 4,000 bytes at once at 1,000/s: 4 s ahead
    assert slept == [0.5, 4.0]


def test_idle_time_earns_no_burst_longer_than_a_second() -> None:
    io, clock, slept = throttle(1000)
    io.spent(1)  # 1 ms worth: slept off
    clock.advance(60_000)  # an idle minute
    io.spent(1)  # the window ends here: more than a second went by
    io.spent(3000)  # 3 s worth in a window just begun: slept off, not covered by the minute
    assert slept == [0.001, 3.0]


def test_a_pass_told_to_stop_ends_between_two_steps_and_leaves_the_log_whole() -> None:
    log = MemoryPartitionLog("t-0")
    for n in range(40):
        log.append(fmt.encode_batch([b"v%d" % n], keys=[b"k"], timestamps=[n]), 0)
    log.set_high_watermark(log.log_end_offset)
    before = log.read(0, 1 << 20)
    steps = []

    def stopping() -> bool:
        steps.append(1)
        return len(steps) >= 2  # after the first read of the rewrite loop

    with pytest.raises(cleaner.Stopped):
        cleaner.clean(log, 10**13, CleanPolicy(), force=True, stopping=stopping)
    assert log.read(0, 1 << 20) == before  # nothing rewritten yet
    assert log.cleaned_offset == 0  # and no checkpoint claims otherwise
    result = cleaner.clean(log, 10**13, CleanPolicy(), force=True)
    assert result is not None and result.rewritten == 39  # all but the newest batch
