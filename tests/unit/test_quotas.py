"""Client quotas (security/quotas.py): a bucket per principal and kind, throttling debt."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kraftlite.security.quotas import FETCH, MAX_THROTTLE_MS, PRODUCE, REQUEST, QuotaTracker

QUOTAS = {PRODUCE: 1000.0, REQUEST: 50.0}


def test_within_the_rate_nothing_is_throttled() -> None:
    tracker = QuotaTracker()
    for second in range(10):  # 1000 bytes a second, in 4 requests each
        for quarter in range(4):
            assert tracker.record(QUOTAS, "User:a", PRODUCE, 250, second * 1000 + quarter) == 0


def test_debt_is_paid_off_at_the_rate() -> None:
    tracker = QuotaTracker()
    assert tracker.record(QUOTAS, "User:a", PRODUCE, 1000, 0) == 0  # the burst allowance
    assert tracker.record(QUOTAS, "User:a", PRODUCE, 2000, 0) == 2001  # 2000 bytes over
    assert tracker.record(QUOTAS, "User:a", PRODUCE, 0, 1000) == 1001  # 1 s paid back
    assert tracker.record(QUOTAS, "User:a", PRODUCE, 0, 2001) == 0  # recovered
    assert tracker.record(QUOTAS, "User:b", PRODUCE, 1000, 0) == 0  # others unaffected


def test_request_time_and_missing_quotas() -> None:
    tracker = QuotaTracker()
    assert tracker.record(QUOTAS, "User:a", REQUEST, 0.5, 0) == 0  # half a second of 50 %
    assert tracker.record(QUOTAS, "User:a", REQUEST, 0.5, 0) == 1001
    assert tracker.record(QUOTAS, "User:a", FETCH, 10**9, 0) == 0  # no fetch quota
    assert tracker.record({}, "User:a", REQUEST, 5, 0) == 0  # removed: debt forgotten
    assert tracker.record(QUOTAS, "User:a", PRODUCE, 10**12, 0) == MAX_THROTTLE_MS


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 5000)), max_size=60))
def test_throttled_clients_never_exceed_the_rate(requests: list[tuple[int, int]]) -> None:
    """A client that waits out each throttle gets at most rate x (time + window) through."""
    tracker = QuotaTracker()
    now, sent = 0, 0
    for gap, size in requests:
        now += gap
        throttle = tracker.record(QUOTAS, "User:a", PRODUCE, size, now)
        sent += size
        now += throttle
        assert sent <= QUOTAS[PRODUCE] * (now / 1000 + 1) + 1
