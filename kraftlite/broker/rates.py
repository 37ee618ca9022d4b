"""Per-second rates from monotonic counters, over a sliding window of samples. Pure: the
caller passes the time and the counters' totals; nothing here reads a clock or a metric.

Rules:
1. Samples are taken when someone asks (the console's stats calls), not on a timer: a
   cluster nobody watches pays nothing. A sample is kept only when the newest kept one is at
   least `sample_interval_ms` old, so many callers asking at once add no samples (and the
   memory is bounded by window / interval samples of the counters' keys).
2. A rate is the change since the oldest kept sample, divided by the time between them. The
   oldest kept sample is the newest one at least `window_ms` old (or the oldest there is), so
   a rate covers about the last `window_ms`, or less just after the first call.
3. With less than `min_span_ms` between the oldest kept sample and now, there is no rate yet
   (None): one sample, or two a moment apart, would give noise, not a rate.
4. Counters only grow (Prometheus counters in this process); a key missing from the old
   sample counts from zero, and a total that went down counts as no change.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Rates(Generic[K]):
    """Per-second rates by key, over `span_ms` milliseconds ending now."""

    per_second: Mapping[K, float]
    span_ms: int


class RateWindow(Generic[K]):
    """Samples of counter totals; `observe` is its single mutation entry point.

    Each sample is a flat array of doubles indexed through one key table shared by every
    sample (10,000 topics x 4 counters is 320 KB a sample, not tens of MB of dicts).
    """

    def __init__(
        self, window_ms: int = 10_000, sample_interval_ms: int = 1_000, min_span_ms: int = 1_000
    ) -> None:
        if not 0 < min_span_ms <= window_ms or sample_interval_ms <= 0:
            raise ValueError("need 0 < min_span_ms <= window_ms and sample_interval_ms > 0")
        self.window_ms = window_ms
        self.sample_interval_ms = sample_interval_ms
        self.min_span_ms = min_span_ms
        self._index: dict[K, int] = {}
        self._samples: deque[tuple[int, array[float]]] = deque()

    def __len__(self) -> int:
        return len(self._samples)

    def observe(self, now_ms: int, totals: Mapping[K, float]) -> Rates[K] | None:
        """Record `totals` as of `now_ms` (rule 1) and answer the rates up to now (rules 2-4),
        or None while the window is shorter than `min_span_ms`."""
        samples, index = self._samples, self._index
        if samples and now_ms < samples[-1][0]:
            now_ms = samples[-1][0]  # a clock that stepped back: never a negative span
        if not samples or now_ms - samples[-1][0] >= self.sample_interval_ms:
            for key in totals:
                index.setdefault(key, len(index))
            values = array("d", bytes(8 * len(index)))
            for key, total in totals.items():
                values[index[key]] = total
            samples.append((now_ms, values))
        while len(samples) >= 2 and samples[1][0] <= now_ms - self.window_ms:
            samples.popleft()
        start_ms, start = samples[0]
        span_ms = now_ms - start_ms
        if span_ms < self.min_span_ms:
            return None
        rates = {}
        for key, total in totals.items():
            at = index.get(key)
            before = start[at] if at is not None and at < len(start) else 0.0
            rates[key] = max(total - before, 0.0) * 1000 / span_ms
        return Rates(rates, span_ms)


__all__ = ["RateWindow", "Rates"]
