"""One retry policy for every call that tries again: the Python client, the Spark source and
sink, and the broker's calls to the controllers (docs/adr/0003-one-retry-policy.md).

Rules:
1. A policy is a budget: at most `max_attempts` attempts, and no try started once
   `timeout_s` has passed since the first one (read on the injected Clock). Either may be
   left out, not both.
2. Only an error `retry_on` accepts is tried again; any other surfaces at once, as raised.
3. Between attempts the policy waits `backoff` (from `first_s`, doubling, at most `max_s`).
   A wait that would end at or past the deadline is not waited: the last error surfaces.
4. With `over` (a rotation: the brokers or controllers, in the order to try them), one
   attempt is a round: one try per target, in that order, with no wait inside the round.
   Each round asks `over` afresh (a broker may be preferred now, a controller learned).
5. When the budget is spent, the last error surfaces, or what `exhausted` makes of it (a
   call that says "no broker answered" rather than repeating the last broker's error).
6. Time is read only from the Clock and waits go only through the given `sleep`: tests pass
   a ManualClock and a sleep that moves it, so nothing really waits.

Use: `for attempt in policy.run(clock): with attempt: ... return result`. The `with` block
is one try; an error leaving it is either taken in (another try follows) or surfaces.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Generic, TypeVar, overload

from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError

T = TypeVar("T")


class NotYet(KraftliteError):
    """Raised inside an attempt for a state that is not there yet (no leader elected, offsets
    not known): a policy whose `retry_on` is `not_yet` tries again, and when its budget is
    spent this error surfaces as the KraftliteError it is."""


def retriable(exc: BaseException) -> bool:
    """A KraftliteError whose code is retriable (errors.ERROR_INFO)."""
    return isinstance(exc, KraftliteError) and exc.retriable


def not_yet(exc: BaseException) -> bool:
    return isinstance(exc, NotYet)


def codes(*wanted: ErrorCode) -> Callable[[BaseException], bool]:
    """A KraftliteError with one of these codes (retriable per ERROR_INFO or not)."""
    chosen = frozenset(wanted)
    return lambda exc: isinstance(exc, KraftliteError) and exc.code in chosen


@dataclass(frozen=True, slots=True)
class Backoff:
    """Wait n (from 0) is `first_s * factor**n`, at most `max_s`; no jitter (the callers are
    few per cluster, and a fixed schedule keeps the tests' waits exact)."""

    first_s: float = 0.05
    max_s: float = 1.0
    factor: float = 2.0

    def wait_s(self, n: int) -> float:
        return min(self.first_s * self.factor**n, self.max_s)


NO_WAIT = Backoff(0.0, 0.0)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retry_on: Callable[[BaseException], bool]
    max_attempts: int | None = None
    timeout_s: float | None = None
    backoff: Backoff = field(default_factory=Backoff)
    exhausted: Callable[[Exception], BaseException] | None = None

    def __post_init__(self) -> None:
        if self.max_attempts is None and self.timeout_s is None:
            raise ValueError("a retry policy needs max_attempts, timeout_s or both")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    @overload
    def run(self, clock: Clock, *, sleep: Callable[[float], None] = ...) -> Attempts[None]: ...

    @overload
    def run(
        self,
        clock: Clock,
        over: Callable[[], Sequence[T]],
        *,
        sleep: Callable[[float], None] = ...,
    ) -> Attempts[T]: ...

    def run(
        self,
        clock: Clock,
        over: Callable[[], Sequence[T]] | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Attempts[T] | Attempts[None]:
        """The attempts of one call, waiting with `sleep` (blocking code)."""
        if over is None:
            return Attempts(_Run(self, clock, _alone), sleep)
        return Attempts(_Run(self, clock, over), sleep)

    @overload
    def run_async(
        self, clock: Clock, *, sleep: Callable[[float], Awaitable[None]] = ...
    ) -> AsyncAttempts[None]: ...

    @overload
    def run_async(
        self,
        clock: Clock,
        over: Callable[[], Sequence[T]],
        *,
        sleep: Callable[[float], Awaitable[None]] = ...,
    ) -> AsyncAttempts[T]: ...

    def run_async(
        self,
        clock: Clock,
        over: Callable[[], Sequence[T]] | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> AsyncAttempts[T] | AsyncAttempts[None]:
        """The attempts of one call, waiting with `sleep` (on an event loop)."""
        if over is None:
            return AsyncAttempts(_Run(self, clock, _alone), sleep)
        return AsyncAttempts(_Run(self, clock, over), sleep)


def _alone() -> Sequence[None]:
    return (None,)


class Attempt(Generic[T]):
    """One try: `number` counts the tries before it, `round` the rounds (rule 4), `target`
    is the rotation's entry for it, `remaining_s` the time left before the deadline."""

    __slots__ = ("_run", "number", "remaining_s", "round", "target")

    def __init__(
        self, run: _Run[T], number: int, round_: int, target: T, remaining_s: float | None
    ) -> None:
        self._run = run
        self.number = number
        self.round = round_
        self.target = target
        self.remaining_s = remaining_s

    def __enter__(self) -> Attempt[T]:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return exc is not None and self._run.failed(exc)


class _Run(Generic[T]):
    """The budget of one call, shared by its sync and async iterators."""

    def __init__(self, policy: RetryPolicy, clock: Clock, over: Callable[[], Sequence[T]]):
        self.policy = policy
        self.clock = clock
        self.over = over
        start = clock.monotonic_ms()
        timeout = policy.timeout_s
        self.deadline_ms = None if timeout is None else start + round(timeout * 1000)
        self.tries = 0
        self.rounds = 0  # rounds started
        self.left: list[T] = []  # targets of the current round not tried yet
        self.wait_s: float | None = 0.0  # before the next try; None: no next try

    def next_wait(self) -> float | None:
        wait, self.wait_s = self.wait_s, None
        return wait

    def attempt(self) -> Attempt[T]:
        if not self.left:
            self.left = list(self.over())
            if not self.left:
                raise ValueError("a rotation needs at least one target")
            self.rounds += 1
        remaining_s = None
        if self.deadline_ms is not None:
            remaining_s = (self.deadline_ms - self.clock.monotonic_ms()) / 1000
        self.tries += 1
        return Attempt(self, self.tries - 1, self.rounds - 1, self.left.pop(0), remaining_s)

    def failed(self, exc: BaseException) -> bool:
        """Whether another try follows this error (rules 1-3); if not, it surfaces (rule 5)."""
        if not isinstance(exc, Exception) or not self.policy.retry_on(exc):
            return False  # (cancellation and exits are never retried)
        policy = self.policy
        if self.left:  # the next target of this round, at once
            wait = 0.0
        elif policy.max_attempts is not None and self.rounds >= policy.max_attempts:
            return self._give_up(exc)
        else:
            wait = policy.backoff.wait_s(self.rounds - 1)
        if self.deadline_ms is not None and (
            self.clock.monotonic_ms() + wait * 1000 >= self.deadline_ms
        ):
            return self._give_up(exc)
        self.wait_s = wait
        return True

    def _give_up(self, exc: Exception) -> bool:
        policy = self.policy
        if policy.exhausted is not None:
            surfacing = policy.exhausted(exc)
            if surfacing is not exc:
                raise surfacing from exc
        return False


class Attempts(Generic[T]):
    """Blocking iteration over a call's attempts; ends only in the block's return or error."""

    def __init__(self, run: _Run[T], sleep: Callable[[float], None]) -> None:
        self._run = run
        self._sleep = sleep

    def __iter__(self) -> Attempts[T]:
        return self

    def __next__(self) -> Attempt[T]:
        wait = self._run.next_wait()
        if wait is None:  # the last try ended without an error to retry
            raise StopIteration
        if wait > 0:
            self._sleep(wait)
        return self._run.attempt()


class AsyncAttempts(Generic[T]):
    """`Attempts` for coroutines: the waits are awaited."""

    def __init__(self, run: _Run[T], sleep: Callable[[float], Awaitable[None]]) -> None:
        self._run = run
        self._sleep = sleep

    def __aiter__(self) -> AsyncAttempts[T]:
        return self

    async def __anext__(self) -> Attempt[T]:
        wait = self._run.next_wait()
        if wait is None:
            raise StopAsyncIteration
        if wait > 0:
            await self._sleep(wait)
        return self._run.attempt()
