"""Broker sessions: soft state on the active controller, never written to the log.

Only its decisions are (FenceBrokerRecord), as Kafka's BrokerHeartbeatManager feeds its
ClusterControlManager. Rules:
1. Contact is recorded when a heartbeat *arrives*, before it waits for the controller's
   queue, so a slow controller never fences a healthy broker.
2. A controller that becomes active gives every registered broker a full session from that
   moment (it cannot know when they last heard from its predecessor), plus the time its
   predecessor may have gone on answering them (broker/lease.py rule 3).
3. Pure: time is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable


class BrokerSessions:
    """Last contact time per broker id, in milliseconds."""

    def __init__(self) -> None:
        self._last_contact: dict[int, int] = {}

    def contact(self, broker_id: int, now_ms: int) -> None:
        self._last_contact[broker_id] = max(now_ms, self._last_contact.get(broker_id, now_ms))

    def reset(self, broker_ids: Iterable[int], now_ms: int) -> None:
        """Every broker gets a full session from `now_ms`; a later contact already seen (a
        heartbeat that arrived while the new controller caught up) is kept.
        """
        self._last_contact = {
            broker_id: max(now_ms, self._last_contact.get(broker_id, now_ms))
            for broker_id in broker_ids
        }

    def expired(self, live_broker_ids: Iterable[int], now_ms: int, timeout_ms: int) -> list[int]:
        """Live brokers not heard from for longer than `timeout_ms` (unknown ones start now)."""
        result = []
        for broker_id in live_broker_ids:
            last = self._last_contact.setdefault(broker_id, now_ms)
            if now_ms - last > timeout_ms:
                result.append(broker_id)
        return result

    def silent(self, broker_ids: Iterable[int], now_ms: int, longer_than_ms: int) -> list[int]:
        """Of `broker_ids` (fenced ones), those not heard from for longer than
        `longer_than_ms`: self-healing replaces their replicas (controller/elastic.py)."""
        return [
            broker_id
            for broker_id in broker_ids
            if now_ms - self._last_contact.setdefault(broker_id, now_ms) > longer_than_ms
        ]

    def last_contact(self, broker_id: int) -> int | None:
        """When the broker was last heard from (None: never)."""
        return self._last_contact.get(broker_id)

    def silent_for(self, broker_id: int, now_ms: int) -> int:
        """Milliseconds since the broker was last heard from (0 if never: it starts now)."""
        return now_ms - self._last_contact.setdefault(broker_id, now_ms)
