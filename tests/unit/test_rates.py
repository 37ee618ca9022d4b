"""RateWindow (broker/rates.py): per-second rates from counter totals sampled when asked,
over about the last window; explicit clock values, no clock."""

from __future__ import annotations

import pytest

from kraftlite.broker.rates import RateWindow


def test_no_rate_until_two_samples_a_second_apart() -> None:
    window: RateWindow[str] = RateWindow(window_ms=10_000, min_span_ms=1_000)
    assert window.observe(0, {"a": 0}) is None
    assert window.observe(500, {"a": 50}) is None  # too close: noise, not a rate
    rates = window.observe(1_000, {"a": 100})
    assert rates is not None
    assert rates.per_second == {"a": 100.0}
    assert rates.span_ms == 1_000


def test_the_rate_covers_about_the_last_window() -> None:
    window: RateWindow[str] = RateWindow(window_ms=10_000, sample_interval_ms=1_000)
    for second in range(21):  # 10/s for 10 s, then 100/s
        total = second * 10 if second <= 10 else 100 + (second - 10) * 100
        rates = window.observe(second * 1000, {"a": total})
    assert rates is not None
    assert rates.span_ms == 10_000  # the newest sample at least a window old is the start
    assert rates.per_second["a"] == pytest.approx(100.0)
    assert len(window) == 11  # bounded: window / interval + 1


def test_many_callers_at_once_add_no_samples() -> None:
    window: RateWindow[str] = RateWindow(sample_interval_ms=1_000)
    window.observe(0, {"a": 0})
    for ms in range(1, 1000, 7):
        window.observe(ms, {"a": ms})
    assert len(window) == 1
    rates = window.observe(2_000, {"a": 400})
    assert rates is not None and rates.per_second["a"] == 200.0


def test_new_keys_count_from_zero_and_counters_never_go_negative() -> None:
    window: RateWindow[tuple[str, str]] = RateWindow()
    window.observe(0, {("produce_bytes", "t"): 100})
    rates = window.observe(2_000, {("produce_bytes", "t"): 50, ("produce_bytes", "new"): 10})
    assert rates is not None
    assert rates.per_second == {("produce_bytes", "t"): 0.0, ("produce_bytes", "new"): 5.0}


def test_a_clock_that_steps_back_gives_no_negative_span() -> None:
    window: RateWindow[str] = RateWindow()
    window.observe(5_000, {"a": 0})
    assert window.observe(4_000, {"a": 10}) is None
    rates = window.observe(6_000, {"a": 20})
    assert rates is not None and rates.per_second["a"] == 20.0


@pytest.mark.parametrize(
    ("window_ms", "interval_ms", "min_span_ms"),
    [(1_000, 1_000, 0), (1_000, 0, 500), (500, 100, 1_000)],
)
def test_bad_settings_are_refused(window_ms: int, interval_ms: int, min_span_ms: int) -> None:
    with pytest.raises(ValueError, match="min_span_ms"):
        RateWindow(window_ms=window_ms, sample_interval_ms=interval_ms, min_span_ms=min_span_ms)
