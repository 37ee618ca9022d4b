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
   - requests over SMALL_REQUEST_BYTES (1 MiB, Kafka producers' default
     `max.request.size`: ordinary produce, fetch, metadata and heartbeat requests are
     under it) hold at most three quarters of the capacity between them: the last
     quarter is kept for small requests, so slow uploads of big ones cannot stop ordinary
     clients being served.
3. A request that can never fit its share is refused at once (`acquire` returns None). One
   that does not fit now waits, and the wait is fair (`RequestBudget._fits`):
   - big requests are served in arrival order: none takes bytes while an earlier big one
     waits;
   - while a big request waits, a small one takes bytes only within the small requests'
     quarter, or where it leaves the waiting big one room; so a steady stream of small
     requests cannot keep a big one waiting for ever (it is served once the big ones
     before it are done), and a big one waiting cannot stop the small ones' quarter;
   - released bytes go to the waiters in arrival order by the same rules.
   The caller bounds the wait (its read timeout, `asyncio.timeout`): a waiter cancelled
   has taken nothing.
4. `ByteBudget` is the accounting, pure (no I/O, no clock); `RequestBudget` adds waiting on
   one event loop, and hands out `Lease`s whose `release` gives the bytes back once.
"""

from __future__ import annotations

import asyncio
import collections
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
    big_in_use: int = 0  # held by requests over SMALL_REQUEST_BYTES
    peak: int = 0  # the most ever held at once (what tests and operators check)

    def __post_init__(self) -> None:
        if self.capacity <= 0:
            raise ValueError(f"a budget of {self.capacity} bytes")

    @property
    def unauthenticated_capacity(self) -> int:
        return self.capacity // UNAUTHENTICATED_SHARE

    @property
    def big_capacity(self) -> int:
        """What big requests may hold between them (rule 2)."""
        return self.capacity - self.capacity // SMALL_RESERVE

    @property
    def small_in_use(self) -> int:
        return self.in_use - self.big_in_use

    def possible(self, size: int, authenticated: bool) -> bool:
        """Whether `size` bytes could ever be taken (rule 3: if not, refuse at once)."""
        if size < 0 or size > (self.big_capacity if is_big(size) else self.capacity):
            return False
        return authenticated or size <= self.unauthenticated_capacity

    def try_take(self, size: int, authenticated: bool) -> bool:
        """Take `size` bytes if they fit now (rule 2; the waiting order is rule 3's)."""
        if self.in_use + size > self.capacity:
            return False
        big = is_big(size)
        if big and self.big_in_use + size > self.big_capacity:
            return False
        if not authenticated:
            if self.unauthenticated_in_use + size > self.unauthenticated_capacity:
                return False
            self.unauthenticated_in_use += size
        self.in_use += size
        if big:
            self.big_in_use += size
        self.peak = max(self.peak, self.in_use)
        return True

    def give(self, size: int, authenticated: bool) -> None:
        """Give back what `try_take` took (with the same arguments)."""
        self.in_use -= size
        if is_big(size):
            self.big_in_use -= size
        if not authenticated:
            self.unauthenticated_in_use -= size
        assert min(self.in_use, self.big_in_use, self.unauthenticated_in_use) >= 0, (
            "given back twice"
        )


def is_big(size: int) -> bool:
    return size > SMALL_REQUEST_BYTES


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
        # the big ones among them, in arrival order (the first is found in O(1))
        self._big: collections.deque[tuple[asyncio.Future[bool], int]] = collections.deque()

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
        if self._fits(size, authenticated, self._first_big_waiting()):
            return Lease(self, size, authenticated)
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = (size, authenticated)
        if is_big(size):
            self._big.append((waiter, size))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # granted just as it was cancelled: give the grant to the next that fits
                self.give(size, authenticated)
            elif is_big(size):
                # a big one leaving ungranted: those it held back may fit now
                self._waiters.pop(waiter, None)
                self._grant()
            raise
        finally:
            self._waiters.pop(waiter, None)
        return Lease(self, size, authenticated)

    def _first_big_waiting(self) -> int | None:
        """The size of the big request that has waited longest, if one waits."""
        big = self._big
        while big and (big[0][0].done() or big[0][0] not in self._waiters):
            big.popleft()  # granted or gone
        return big[0][1] if big else None

    def _fits(self, size: int, authenticated: bool, big_waiting: int | None) -> bool:
        """Rule 3: take `size` bytes now if they fit and no earlier waiter is owed them."""
        accounts = self.accounts
        if big_waiting is not None:
            if is_big(size):
                return False  # big requests in arrival order
            within_quarter = accounts.small_in_use + size <= accounts.capacity // SMALL_RESERVE
            if not within_quarter and accounts.in_use + size + big_waiting > accounts.capacity:
                return False
        return accounts.try_take(size, authenticated)

    def give(self, size: int, authenticated: bool) -> None:
        """Give back bytes (a `Lease` does this) and grant waiters that now fit, in order."""
        self.accounts.give(size, authenticated)
        self._grant()

    def _grant(self) -> None:
        """Grant the waiters that fit now, in arrival order (rule 3)."""
        accounts = self.accounts
        big_waiting: int | None = None  # the first big one still waiting, in this pass
        for waiter, (wanted, trusted) in list(self._waiters.items()):
            if accounts.in_use >= accounts.capacity:
                return  # full: no one else fits
            if waiter.done():  # cancelled, leaving on its own
                continue
            if (
                not trusted
                and accounts.unauthenticated_in_use + wanted > accounts.unauthenticated_capacity
            ):
                continue  # strangers' share full (the cheap test first: a flood of them)
            if self._fits(wanted, trusted, big_waiting):
                del self._waiters[waiter]
                waiter.set_result(True)
            elif big_waiting is None and is_big(wanted):
                big_waiting = wanted
