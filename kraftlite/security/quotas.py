"""Client quotas (Kafka's, KIP-13 and KIP-124): per principal, bytes produced and fetched
per second and a share of request-handling time, enforced by delaying the answer.

Rules:
1. Each (principal, quota) has a bucket that refills at the quota's rate and holds at most
   WINDOW_S seconds of it (a burst of that size goes through at once, as Kafka's sampled
   window allows). A request takes its cost from the bucket, which may go below zero.
2. A bucket below zero throttles: the answer waits until the bucket would be back at zero
   (debt / rate), at most MAX_THROTTLE_MS, and says how long in a response header. A client
   that waits for its answers (every kraftlite client does) is held to the rate.
3. Quotas apply per broker, as Kafka's do; a node acting for itself is never throttled.

Pure: time is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

WINDOW_S: Final = 1.0
MAX_THROTTLE_MS: Final = 30_000
PRODUCE: Final = "producer_byte_rate"
FETCH: Final = "consumer_byte_rate"
REQUEST: Final = "request_percentage"  # 100 = one whole second of handling per second


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated_ms: int


class QuotaTracker:
    """Rule 1's buckets; one mutation entry point, `record`."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], _Bucket] = {}

    def record(
        self,
        quotas: Mapping[str, float],
        principal: str,
        kind: str,
        cost: float,
        now_ms: int,
    ) -> int:
        """Take `cost` (bytes, or seconds of handling for REQUEST) from the principal's
        bucket for `kind`; the throttle time in ms (0: none, or no such quota)."""
        quota = quotas.get(kind)
        if quota is None:
            self._buckets.pop((principal, kind), None)  # quota removed: forget its debt
            return 0
        rate = quota / 100 if kind == REQUEST else quota  # per second
        key = (principal, kind)
        bucket = self._buckets.get(key)
        capacity = rate * WINDOW_S
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(capacity, now_ms)
        elapsed_s = max(now_ms - bucket.updated_ms, 0) / 1000
        bucket.tokens = min(capacity, bucket.tokens + elapsed_s * rate) - cost
        bucket.updated_ms = now_ms
        if bucket.tokens >= 0:
            return 0
        return min(int(-bucket.tokens / rate * 1000) + 1, MAX_THROTTLE_MS)

    def __len__(self) -> int:
        return len(self._buckets)
