"""Wake every task waiting for "something changed" (new records, a higher watermark).

Waiters re-check their own condition after each wake-up, so a notification carries no data
and spurious wake-ups are harmless. The event exists only while someone waits: a partition
nobody waits on costs no event, and a notification nobody waits for costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib


class Notifier:
    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def notify(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    def current(self) -> asyncio.Event:
        """The event the next notification sets."""
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    async def wait(self, timeout_s: float) -> None:
        """Return at the next notification or after `timeout_s`, whichever comes first."""
        if timeout_s <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.current().wait(), timeout_s)


async def wait_any(notifiers: list[Notifier], timeout_s: float) -> None:
    """Return when any of `notifiers` fires, or after `timeout_s`."""
    if timeout_s <= 0 or not notifiers:
        await asyncio.sleep(max(timeout_s, 0))
        return
    events = [n.current() for n in notifiers]  # the events current now: none is missed
    tasks = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(tasks, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
