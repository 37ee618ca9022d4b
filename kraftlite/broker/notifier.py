"""Wake every task waiting for "something changed" (new records, a higher watermark).

Waiters re-check their own condition after each wake-up, so a notification carries no data
and spurious wake-ups are harmless.
"""

from __future__ import annotations

import asyncio
import contextlib


class Notifier:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        """Return at the next notification or after `timeout_s`, whichever comes first."""
        if timeout_s <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout_s)


async def wait_any(notifiers: list[Notifier], timeout_s: float) -> None:
    """Return when any of `notifiers` fires, or after `timeout_s`."""
    if timeout_s <= 0 or not notifiers:
        await asyncio.sleep(max(timeout_s, 0))
        return
    events = [n._event for n in notifiers]  # the events current now: none is missed
    tasks = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(tasks, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
