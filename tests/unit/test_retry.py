"""kraftlite/retry.py: which errors are tried again, how often, until when, over which
targets, and what surfaces at the end. Time is a ManualClock and every wait only moves it:
nothing here really sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from kraftlite.clock import ManualClock
from kraftlite.errors import ERROR_INFO, ErrorCode, KraftliteError
from kraftlite.retry import (
    NO_WAIT,
    Backoff,
    NotYet,
    RetryPolicy,
    codes,
    not_yet,
    retriable,
)


class Waits:
    """The policy's sleep, sync and async: records each wait and moves the clock by it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(round(seconds * 1000))

    async def sleep(self, seconds: float) -> None:
        self(seconds)


def run_sync(
    policy: RetryPolicy,
    outcomes: Sequence[BaseException | str],
    *,
    over: Callable[[], Sequence[Any]] | None = None,
    clock: ManualClock | None = None,
    each_ms: int = 0,
) -> tuple[str | BaseException, list[Any], Waits]:
    """Runs `policy` over a call whose tries raise or return `outcomes` in turn (each taking
    `each_ms`): what it returned or raised, the targets tried, and the waits."""
    clock = clock or ManualClock()
    waits = Waits(clock)
    tried: list[Any] = []
    remaining = list(outcomes)
    attempts = (
        policy.run(clock, sleep=waits) if over is None else policy.run(clock, over, sleep=waits)
    )

    def call() -> str:
        for attempt in attempts:
            with attempt:
                tried.append(attempt.target)
                clock.advance(each_ms)
                outcome = remaining.pop(0)
                if isinstance(outcome, BaseException):
                    raise outcome
                return outcome
        raise AssertionError("unreachable")

    try:
        return call(), tried, waits
    except BaseException as exc:  # the test looks at what surfaced
        return exc, tried, waits


LEADER_MOVED = KraftliteError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
TOO_LARGE = KraftliteError(ErrorCode.MESSAGE_TOO_LARGE)


# -- which errors ------------------------------------------------------------------------


@pytest.mark.parametrize("code", list(ErrorCode))
def test_retriable_follows_error_info_for_every_code(code: ErrorCode) -> None:
    policy = RetryPolicy(retriable, max_attempts=3)
    error = KraftliteError(code)
    result, tried, waits = run_sync(policy, [error, "ok"])
    if ERROR_INFO[code].retriable:
        assert (result, len(tried), waits.waits) == ("ok", 2, [0.05])
    else:
        assert (result, len(tried), waits.waits) == (error, 1, [])


def test_errors_that_are_no_kraftlite_errors_surface_at_once() -> None:
    refused = ConnectionRefusedError("no one there")
    result, tried, waits = run_sync(RetryPolicy(retriable, max_attempts=5), [refused])
    assert result is refused
    assert (len(tried), waits.waits) == (1, [])


def test_chosen_codes_retry_whatever_error_info_says() -> None:
    """The controller client's failover: only NOT_CONTROLLER and REQUEST_TIMED_OUT move on
    (UNKNOWN_TOPIC_OR_PARTITION is retriable for clients, but it is the quorum's answer)."""
    policy = RetryPolicy(codes(ErrorCode.NOT_CONTROLLER), max_attempts=3, backoff=NO_WAIT)
    assert run_sync(policy, [KraftliteError(ErrorCode.NOT_CONTROLLER), "ok"])[0] == "ok"
    unknown = KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert run_sync(policy, [unknown, "ok"])[0] is unknown


def test_not_yet_is_retried_only_where_asked_and_surfaces_as_its_code() -> None:
    no_leader = NotYet(ErrorCode.NOT_LEADER_OR_FOLLOWER, "t-0 has no leader")
    policy = RetryPolicy(not_yet, max_attempts=2, backoff=NO_WAIT)
    result, tried, _ = run_sync(policy, [no_leader, no_leader])
    assert result is no_leader and len(tried) == 2
    assert isinstance(result, KraftliteError) and result.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    # a real answer of the same code is not "not yet": another policy's business
    assert run_sync(policy, [LEADER_MOVED, "ok"])[0] is LEADER_MOVED


def test_cancellation_is_never_retried() -> None:
    cancelled = asyncio.CancelledError()
    policy = RetryPolicy(lambda exc: True, max_attempts=5)
    result, tried, _ = run_sync(policy, [cancelled, "ok"])
    assert result is cancelled and len(tried) == 1


# -- how many times, how long between ------------------------------------------------------


def test_max_attempts_tries_then_the_last_error_surfaces_with_no_wait_after_it() -> None:
    errors = [KraftliteError(ErrorCode.REQUEST_TIMED_OUT, str(i)) for i in range(8)]
    policy = RetryPolicy(retriable, max_attempts=8, backoff=Backoff(0.05, 1.0))
    result, tried, waits = run_sync(policy, errors)
    assert result is errors[-1]
    assert len(tried) == 8
    assert waits.waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]  # doubling, capped; 7 waits


def test_success_after_failures_returns_its_value() -> None:
    policy = RetryPolicy(retriable, max_attempts=3, backoff=Backoff(0.1, 2.0))
    result, tried, waits = run_sync(policy, [LEADER_MOVED, LEADER_MOVED, "offsets"])
    assert (result, len(tried), waits.waits) == ("offsets", 3, [0.1, 0.2])


def test_one_attempt_means_no_retry() -> None:
    result, tried, waits = run_sync(RetryPolicy(retriable, max_attempts=1), [LEADER_MOVED])
    assert (result, len(tried), waits.waits) == (LEADER_MOVED, 1, [])


def test_exhausted_maps_only_the_error_that_ends_the_budget() -> None:
    def timed_out(last: Exception) -> BaseException:
        return KraftliteError(ErrorCode.REQUEST_TIMED_OUT, f"no broker answered: {last!r}")

    policy = RetryPolicy(
        lambda exc: isinstance(exc, OSError) or retriable(exc),
        max_attempts=2,
        backoff=NO_WAIT,
        exhausted=timed_out,
    )
    refused = ConnectionRefusedError()
    result, _, _ = run_sync(policy, [refused, refused])
    assert isinstance(result, KraftliteError) and result.code is ErrorCode.REQUEST_TIMED_OUT
    assert result.__cause__ is refused
    assert run_sync(policy, [TOO_LARGE])[0] is TOO_LARGE  # never retried: surfaces as is


def test_the_block_ending_without_a_return_ends_the_attempts() -> None:
    policy = RetryPolicy(retriable, max_attempts=3)
    tries = 0
    for attempt in policy.run(ManualClock(), sleep=Waits(ManualClock())):
        with attempt:
            tries += 1
    assert tries == 1


def test_a_policy_needs_a_budget() -> None:
    with pytest.raises(ValueError, match="max_attempts, timeout_s"):
        RetryPolicy(retriable)
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(retriable, max_attempts=0)


# -- the deadline ---------------------------------------------------------------------------


def test_the_deadline_stops_before_a_wait_that_would_pass_it() -> None:
    clock = ManualClock()
    policy = RetryPolicy(retriable, timeout_s=1.0, backoff=Backoff(0.1, 0.4))
    result, tried, waits = run_sync(policy, [LEADER_MOVED] * 50, clock=clock)
    # 0.1 + 0.2 + 0.4 = 0.7 s; the next 0.4 s wait would end at 1.1 s
    assert result is LEADER_MOVED
    assert waits.waits == [0.1, 0.2, 0.4]
    assert len(tried) == 4
    assert clock.monotonic_ms() == 700


def test_the_deadline_counts_the_tries_own_time_and_reports_what_is_left() -> None:
    clock = ManualClock()
    policy = RetryPolicy(retriable, timeout_s=1.0, backoff=NO_WAIT)
    left: list[float | None] = []
    for attempt in policy.run(clock, sleep=Waits(clock)):
        left.append(attempt.remaining_s)
        try:
            with attempt:
                clock.advance(300)  # each try takes 0.3 s
                raise LEADER_MOVED
        except KraftliteError:
            break
    assert left == [1.0, 0.7, 0.4, 0.1]  # no try starts at or after 1 s


def test_attempts_and_deadline_together_end_at_the_first_spent() -> None:
    policy = RetryPolicy(retriable, max_attempts=3, timeout_s=60.0, backoff=NO_WAIT)
    assert len(run_sync(policy, [LEADER_MOVED] * 10)[1]) == 3
    policy = RetryPolicy(retriable, max_attempts=100, timeout_s=1.0, backoff=NO_WAIT)
    assert len(run_sync(policy, [LEADER_MOVED] * 10, each_ms=400)[1]) == 3


def test_without_a_deadline_nothing_is_left_to_report() -> None:
    policy = RetryPolicy(retriable, max_attempts=1)
    attempt = next(iter(policy.run(ManualClock())))
    assert attempt.remaining_s is None
    assert attempt.target is None


# -- rotation -----------------------------------------------------------------------------


def test_a_round_tries_each_target_in_order_without_waiting() -> None:
    policy = RetryPolicy(retriable, max_attempts=1, backoff=Backoff(1.0, 1.0))
    result, tried, waits = run_sync(
        policy, [LEADER_MOVED, LEADER_MOVED, "ok"], over=lambda: ["b1", "b2", "b3"]
    )
    assert (result, tried, waits.waits) == ("ok", ["b1", "b2", "b3"], [])


def test_max_attempts_counts_rounds_and_waits_come_between_them() -> None:
    policy = RetryPolicy(retriable, max_attempts=3, backoff=Backoff(0.1, 2.0))
    result, tried, waits = run_sync(policy, [LEADER_MOVED] * 10, over=lambda: ["b1", "b2"])
    assert result is LEADER_MOVED
    assert tried == ["b1", "b2"] * 3
    assert waits.waits == [0.1, 0.2]


def test_a_non_retried_error_ends_the_round_at_once() -> None:
    policy = RetryPolicy(retriable, max_attempts=3)
    result, tried, _ = run_sync(policy, [LEADER_MOVED, TOO_LARGE], over=lambda: ["b1", "b2", "b3"])
    assert result is TOO_LARGE and tried == ["b1", "b2"]


def test_each_round_asks_for_the_targets_afresh() -> None:
    """The controller client learns a voter during a round: the next round includes it."""
    known = ["c1", "c2"]

    def over() -> list[str]:
        order = list(known)
        if "c3" not in known:
            known.append("c3")  # learned while this round runs
        return order

    policy = RetryPolicy(retriable, max_attempts=2, backoff=NO_WAIT)
    result, tried, _ = run_sync(policy, [LEADER_MOVED] * 4 + ["ok"], over=over)
    assert result == "ok"
    assert tried == ["c1", "c2", "c1", "c2", "c3"]


def test_rotation_until_a_deadline_pauses_only_between_rounds() -> None:
    clock = ManualClock()
    policy = RetryPolicy(retriable, timeout_s=1.0, backoff=Backoff(0.1, 0.1))
    result, tried, waits = run_sync(
        policy, [LEADER_MOVED] * 50, over=lambda: ["c1", "c2"], clock=clock, each_ms=200
    )
    # c1 c2 (0.4 s) pause (0.5 s) c1 c2 (0.9 s): a pause would reach the deadline
    assert result is LEADER_MOVED
    assert tried == ["c1", "c2", "c1", "c2"]
    assert waits.waits == [0.1]


def test_an_empty_rotation_is_refused() -> None:
    policy = RetryPolicy(retriable, max_attempts=1)
    with pytest.raises(ValueError, match="at least one target"):
        next(iter(policy.run(ManualClock(), list)))


# -- the async twin -----------------------------------------------------------------------


async def test_async_attempts_rotate_wait_and_surface_the_same_way() -> None:
    clock = ManualClock()
    waits = Waits(clock)
    policy = RetryPolicy(retriable, max_attempts=2, backoff=Backoff(0.25, 1.0))
    tried: list[str] = []

    async def call() -> str:
        async for attempt in policy.run_async(clock, lambda: ["b1", "b2"], sleep=waits.sleep):
            with attempt:
                tried.append(attempt.target)
                await asyncio.sleep(0)
                raise LEADER_MOVED
        raise AssertionError("unreachable")

    with pytest.raises(KraftliteError) as caught:
        await call()
    assert caught.value is LEADER_MOVED
    assert tried == ["b1", "b2", "b1", "b2"]
    assert waits.waits == [0.25]
    assert clock.monotonic_ms() == 250


async def test_async_success_returns_and_cancellation_passes_through() -> None:
    clock = ManualClock()
    waits = Waits(clock)
    policy = RetryPolicy(retriable, max_attempts=5)
    outcomes: list[BaseException | str] = [LEADER_MOVED, "ok"]

    async def call() -> str:
        async for attempt in policy.run_async(clock, sleep=waits.sleep):
            with attempt:
                outcome = outcomes.pop(0)
                if isinstance(outcome, BaseException):
                    raise outcome
                return outcome
        raise AssertionError("unreachable")

    assert await call() == "ok"
    assert waits.waits == [0.05]
    outcomes[:] = [asyncio.CancelledError(), "ok"]
    with pytest.raises(asyncio.CancelledError):
        await call()
