"""A broker's budget of request bytes held at once (Kafka's `queued.max.request.bytes`),
shared by its Kafka and HTTP listeners.

Each connection alone is bounded (`socket.request.max.bytes`, 100 MiB a request), but a
listener reads a request's bytes whole before anything can check them, so many connections
sending big requests slowly add up: in review, slowly sent 100 MiB Kafka frames held 788 MB
in one broker. This budget bounds the sum. (Kafka's own `queued.max.request.bytes` is
unbounded by default; kraftlite's is not: docs/configuration.md.)

Rules:
1. A request's bytes are taken BEFORE its body is read: the Kafka listener takes a frame's
   size once its 4-byte size has come, the HTTP listener a body's Content-Length (the body
   limit when the body is chunked). They are given back once the request has been handled.
   So the request bytes a broker holds, arriving or being handled, never exceed `capacity`.
2. Shares, so that no one kind of sender starves the others:
   - connections that have not authenticated (the Kafka listener with `auth.required`,
     before SASL completes; their frames are at most 512 KiB) hold at most an eighth of
     the capacity between them;
   - a request over SMALL_REQUEST_BYTES (1 MiB, Kafka producers' default
     `max.request.size`: ordinary produce, fetch, metadata and heartbeat requests are
     under it) may fill the budget only to three quarters: the last quarter is kept for
     small requests, so slow uploads of big ones cannot stop ordinary clients being served.
3. A request that can never fit its share is refused at once (`acquire` returns None). One
   that does not fit now waits; released bytes go to the first waiter, in arrival order,
   that they fit (a big waiter does not hold up small ones behind it). The caller bounds
   the wait (its read timeout, `asyncio.timeout`): a waiter cancelled has taken nothing.
4. `ByteBudget` is the accounting, pure (no I/O, no clock); `RequestBudget` adds waiting on
   one event loop, and hands out `Lease`s whose `release` gives the bytes back once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

SMALL_REQUEST_BYTES: Final = 1 << 20  # rule 2: Kafka producers' default max.request.size
UNAUTHENTICATED_SHARE: Final = 8  # rule 2: strangers hold at most capacity // 8
SMALL_RESERVE: Final = 4  # rule 2: capacity // 4 is for small requests only


@dataclass(slots=True)
class ByteBudget:
    """Rule 2's accounting: what is held, in all and by strangers; pure."""

    capacity: int
    in_use: int = 0
    unauthenticated_in_use: int = 0
    peak: int = 0  # the most ever held at once (what tests and operators check)

    def __post_init__(self) -> None:
        if self.capacity <= 0:
            raise ValueError(f"a budget of {self.capacity} bytes")

    @property
    def unauthenticated_capacity(self) -> int:
        return self.capacity // UNAUTHENTICATED_SHARE

    def limit(self, size: int) -> int:
        """How full the budget may be once `size` bytes are taken (rule 2)."""
        if size <= SMALL_REQUEST_BYTES:
            return self.capacity
        return self.capacity - self.capacity // SMALL_RESERVE

    def possible(self, size: int, authenticated: bool) -> bool:
        """Whether `size` bytes could ever be taken (rule 3: if not, refuse at once)."""
        if size < 0 or size > self.limit(size):
            return False
        return authenticated or size <= self.unauthenticated_capacity

    def try_take(self, size: int, authenticated: bool) -> bool:
        """Take `size` bytes if they fit now."""
        if self.in_use + size > self.limit(size):
            return False
        if not authenticated:
            if self.unauthenticated_in_use + size > self.unauthenticated_capacity:
                return False
            self.unauthenticated_in_use += size
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        return True

    def give(self, size: int, authenticated: bool) -> None:
        """Give back what `try_take` took (with the same arguments)."""
        self.in_use -= size
        if not authenticated:
            self.unauthenticated_in_use -= size
        assert self.in_use >= 0 and self.unauthenticated_in_use >= 0, "given back twice"


class Lease:
    """Bytes taken from a `RequestBudget`; `release` gives them back (once, however often
    it is called)."""

    __slots__ = ("_budget", "authenticated", "size")

    def __init__(self, budget: RequestBudget, size: int, authenticated: bool) -> None:
        self._budget: RequestBudget | None = budget
        self.size = size
        self.authenticated = authenticated

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget.give(self.size, self.authenticated)


class RequestBudget:
    """Rules 1-3 on one event loop: one per broker, shared by its listeners."""

    def __init__(self, capacity: int) -> None:
        self.accounts = ByteBudget(capacity)
        # waiting acquisitions in arrival order; a future's result True means granted
        self._waiters: dict[asyncio.Future[bool], tuple[int, bool]] = {}

    @property
    def capacity(self) -> int:
        return self.accounts.capacity

    @property
    def in_use(self) -> int:
        return self.accounts.in_use

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self, size: int, *, authenticated: bool = True) -> Lease | None:
        """A lease on `size` bytes, once they fit (rule 3); None at once if they never
        can. Cancel it to stop waiting (the caller's timeout): nothing is then held."""
        if not self.accounts.possible(size, authenticated):
            return None
        if self.accounts.try_take(size, authenticated):
            return Lease(self, size, authenticated)
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = (size, authenticated)
        try:
            await waiter
        except asyncio.CancelledError:
            # granted just as it was cancelled: give the grant to the next that fits
            if waiter.done() and not waiter.cancelled():
                self.give(size, authenticated)
            raise
        finally:
            self._waiters.pop(waiter, None)
        return Lease(self, size, authenticated)

    def give(self, size: int, authenticated: bool) -> None:
        """Give back bytes (a `Lease` does this) and grant waiters that now fit, in order."""
        self.accounts.give(size, authenticated)
        for waiter, (wanted, trusted) in list(self._waiters.items()):
            if waiter.done():  # cancelled, leaving on its own
                continue
            if self.accounts.try_take(wanted, trusted):
                del self._waiters[waiter]
                waiter.set_result(True)
