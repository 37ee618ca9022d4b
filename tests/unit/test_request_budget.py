"""The broker's budget of request bytes (issue 24, `queued.max.request.bytes`): the
accounting's shares, waiting and handing over without ever going over the capacity, the
HTTP listener taking a body's bytes before reading it, and the listener settings."""

from __future__ import annotations

import asyncio
import gzip
import io
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kraftlite.api.listener import REQUEST_BUDGET, read_body, runner_for
from kraftlite.config import (
    DEFAULT_MAX_CONNECTIONS_PER_IP,
    BrokerConfig,
    ConfigError,
    ListenerLimits,
)
from kraftlite.errors import KraftliteError
from kraftlite.security.request_budget import (
    SMALL_REQUEST_BYTES,
    ByteBudget,
    Lease,
    RequestBudget,
)

MIB = 1 << 20

# ----------------------------------------------------------------- the accounting (pure)


def test_strangers_share_an_eighth() -> None:
    budget = ByteBudget(64 * MIB)
    assert budget.unauthenticated_capacity == 8 * MIB
    for _ in range(16):
        assert budget.try_take(512 << 10, authenticated=False)
    assert not budget.try_take(1, authenticated=False)  # their share is full
    assert budget.try_take(MIB, authenticated=True)  # the rest is not theirs to take
    budget.give(512 << 10, authenticated=False)
    assert budget.try_take(512 << 10, authenticated=False)
    assert not budget.possible(8 * MIB + 1, authenticated=False)
    assert budget.possible(8 * MIB + 1, authenticated=True)


def test_big_requests_leave_a_quarter_to_small_ones() -> None:
    budget = ByteBudget(64 * MIB)
    big = 16 * MIB
    assert [budget.try_take(big, True) for _ in range(4)] == [True, True, True, False]
    assert budget.in_use == 48 * MIB
    for _ in range(16):  # the last quarter: requests of up to 1 MiB only
        assert budget.try_take(SMALL_REQUEST_BYTES, True)
    assert budget.in_use == budget.capacity == budget.peak
    assert not budget.try_take(1, True)
    assert not budget.possible(48 * MIB + 1, True)  # could never fit: refused at once
    assert budget.possible(48 * MIB, True)


def test_giving_back_twice_is_a_bug() -> None:
    budget = ByteBudget(10)
    assert budget.try_take(4, True)
    budget.give(4, True)
    with pytest.raises(AssertionError):
        budget.give(4, True)


def test_a_budget_holds_something() -> None:
    with pytest.raises(ValueError):
        ByteBudget(0)


# ----------------------------------------------------------------------------- waiting


async def _settle() -> None:
    """Let every ready task run (no clock)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def _given_back(budget: RequestBudget) -> bool:
    """Whether the budget is empty once the server's request tasks have ended."""
    for _ in range(1000):
        if budget.in_use == 0:
            return True
        await asyncio.sleep(0)
    return False


async def test_a_waiter_gets_the_bytes_given_back() -> None:
    budget = RequestBudget(4 * MIB)
    first = await budget.acquire(3 * MIB)
    assert first is not None
    waiting = asyncio.create_task(budget.acquire(2 * MIB))
    await _settle()
    assert not waiting.done() and budget.waiting == 1
    first.release()
    second = await waiting
    assert second is not None and budget.in_use == 2 * MIB and budget.waiting == 0
    first.release()  # once only, however often it is called
    assert budget.in_use == 2 * MIB
    second.release()
    assert budget.in_use == 0


async def test_a_request_that_can_never_fit_is_refused_at_once() -> None:
    budget = RequestBudget(4 * MIB)
    assert await budget.acquire(3 * MIB + 1) is None  # over the big requests' 3/4
    assert await budget.acquire((512 << 10) + 1, authenticated=False) is None  # > 4 MiB / 8
    assert budget.in_use == 0 and budget.waiting == 0


async def test_a_big_waiter_does_not_hold_up_small_ones() -> None:
    budget = RequestBudget(8 * MIB)
    held = [await budget.acquire(2 * MIB) for _ in range(3)]  # the big ones' 6 MiB
    big = asyncio.create_task(budget.acquire(2 * MIB))
    small = asyncio.create_task(budget.acquire(MIB))
    await _settle()
    assert small.done() and not big.done()  # the reserved quarter is the small one's
    lease = small.result()
    assert lease is not None
    released = held.pop()
    assert released is not None
    released.release()
    # big ones hold at most 3/4 between them (4 + 2 MiB), and all together 5 + 2 <= 8
    assert (await big) is not None
    assert budget.in_use == 7 * MIB and budget.accounts.big_in_use == 6 * MIB
    lease.release()


async def test_a_steady_stream_of_small_requests_does_not_starve_a_big_one() -> None:
    """The review of issue 24's first slice: a big request could wait out its read timeout
    behind small ones that kept the budget full. While it waits, small ones take only their
    quarter or what leaves it room, so it is served once what was held before it goes."""
    budget = RequestBudget(8 * MIB)
    small = SMALL_REQUEST_BYTES
    held = [await budget.acquire(small) for _ in range(8)]  # small ones fill it all
    big = asyncio.create_task(budget.acquire(6 * MIB))
    await _settle()
    assert not big.done()
    granted_after = None
    for round_ in range(40):  # each round one small request ends and a new one comes
        first = held.pop(0)
        assert first is not None
        first.release()
        newcomer = asyncio.create_task(budget.acquire(small))
        await _settle()
        if newcomer.done():
            held.append(newcomer.result())
        else:
            newcomer.cancel()
        if big.done() and granted_after is None:
            granted_after = round_
    assert granted_after is not None and granted_after <= 8, granted_after
    assert budget.accounts.small_in_use <= 2 * MIB  # the small ones kept their quarter
    lease = big.result()
    assert lease is not None
    lease.release()
    for h in held:
        assert h is not None
        h.release()
    assert budget.in_use == 0


async def test_big_requests_are_served_in_arrival_order() -> None:
    budget = RequestBudget(8 * MIB)
    holder = await budget.acquire(5 * MIB)
    assert holder is not None
    first = asyncio.create_task(budget.acquire(3 * MIB))  # does not fit with 5 held: waits
    await _settle()
    second = asyncio.create_task(budget.acquire(2 * MIB))  # would fit, but first waits
    await _settle()
    assert not first.done() and not second.done()
    holder.release()
    await _settle()
    assert first.done() and second.done()
    assert budget.accounts.big_in_use == 5 * MIB


async def test_cancelled_waiters_take_nothing() -> None:
    budget = RequestBudget(4 * MIB)
    holder = await budget.acquire(3 * MIB)
    assert holder is not None
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):  # the caller's read timeout, already over
            await budget.acquire(2 * MIB)
    assert budget.waiting == 0
    waiting = asyncio.create_task(budget.acquire(2 * MIB))
    await _settle()
    holder.release()  # granted to the waiter...
    waiting.cancel()  # ...which is cancelled before it runs: the grant goes back
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert budget.in_use == 0 and budget.waiting == 0


async def test_many_holders_never_exceed_the_capacity() -> None:
    """A seeded crowd of big and small, trusted and stranger requests."""
    rng = random.Random(24)
    budget = RequestBudget(32 * MIB)
    sizes = [SMALL_REQUEST_BYTES // 2, SMALL_REQUEST_BYTES, 3 * MIB, 8 * MIB, 24 * MIB]
    seen: list[int] = []

    async def one() -> None:
        stranger = rng.random() < 0.3
        size = rng.choice(sizes[:2] if stranger else sizes)
        lease = await budget.acquire(size, authenticated=not stranger)
        assert lease is not None
        seen.append(budget.in_use)
        for _ in range(rng.randrange(5)):
            await asyncio.sleep(0)
        lease.release()

    await asyncio.gather(*(one() for _ in range(300)))
    assert max(seen) <= budget.capacity and budget.accounts.peak <= budget.capacity
    assert budget.in_use == 0 and budget.accounts.unauthenticated_in_use == 0


# ----------------------------------------------------------------- the HTTP listener


@pytest.fixture
async def http_budget() -> AsyncIterator[tuple[Any, RequestBudget]]:
    budget = RequestBudget(8 * MIB)
    held: list[int] = []

    async def echo(request: web.Request) -> web.Response:
        try:
            body = await read_body(request)
        except KraftliteError as exc:
            return web.Response(status=exc.http_status, text=exc.code.name)
        held.append(budget.in_use)  # while the handler runs, its body is held
        return web.Response(text=f"{len(body)} {held[-1]}")

    app = web.Application(client_max_size=16 * MIB)
    app[REQUEST_BUDGET] = budget
    app.router.add_post("/", echo)
    async with TestClient(TestServer(app)) as client:
        yield client, budget


async def test_a_body_is_taken_from_the_budget_until_its_request_ends(
    http_budget: tuple[Any, RequestBudget],
) -> None:
    client, budget = http_budget
    answer = await client.post("/", data=io.BytesIO(b"x" * (3 * MIB)))
    assert answer.status == 200 and await answer.text() == f"{3 * MIB} {3 * MIB}"
    assert await _given_back(budget)


async def test_a_body_that_could_never_fit_is_refused_unread(
    http_budget: tuple[Any, RequestBudget],
) -> None:
    client, budget = http_budget
    answer = await client.post("/", data=io.BytesIO(b"x" * (7 * MIB)))  # over the big ones' 6 MiB
    assert answer.status == 413 and await answer.text() == "RECORD_LIST_TOO_LARGE"
    assert await _given_back(budget) and budget.accounts.peak == 0


async def test_a_body_waits_for_room_within_the_read_timeout(
    http_budget: tuple[Any, RequestBudget],
) -> None:
    client, budget = http_budget
    holder = await budget.acquire(6 * MIB)  # big requests' share is full
    assert holder is not None
    sending = asyncio.create_task(client.post("/", data=io.BytesIO(b"x" * (2 * MIB))))
    for _ in range(10_000):  # until the body's request waits for room, unread
        if budget.waiting:
            break
        await asyncio.sleep(0)
    assert budget.waiting == 1
    assert budget.in_use == 6 * MIB
    holder.release()
    answer = await sending
    assert answer.status == 200 and await answer.text() == f"{2 * MIB} {2 * MIB}"
    assert await _given_back(budget)


async def test_a_compressed_body_is_refused_and_nothing_is_inflated(
    http_budget: tuple[Any, RequestBudget],
) -> None:
    """Rule 6 (a review finding): a 90 KB gzip body that inflates to 100 MiB was counted
    as 90 KB and inflated on the loop. Now any Content-Encoding is 415, unread."""
    client, budget = http_budget
    bomb = gzip.compress(bytes(8 * MIB))
    answer = await client.post("/", data=bomb, headers={"Content-Encoding": "gzip"})
    assert answer.status == 415 and await answer.text() == "UNSUPPORTED_MEDIA_TYPE"
    assert budget.accounts.peak == 0
    plain = await client.post("/", data=b"x", headers={"Content-Encoding": "identity"})
    assert plain.status == 200


def test_the_listener_does_not_inflate_bodies() -> None:
    runner = runner_for(web.Application(), ListenerLimits(), 1.0)
    assert runner._kwargs["auto_decompress"] is False


async def test_no_body_takes_nothing_and_a_chunked_one_takes_the_limit() -> None:
    """A node's signed GETs (read_body checks their signature) and long-polls hold nothing
    while they last; a body of unknown length holds the most it may be."""
    budget = RequestBudget(8 * MIB)

    async def held(request: web.Request) -> web.Response:
        body = await read_body(request)
        return web.Response(text=f"{len(body)} {budget.in_use}")

    app = web.Application(client_max_size=2 * MIB)
    app[REQUEST_BUDGET] = budget
    app.router.add_route("*", "/", held)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"x" * 1000

    async with TestClient(TestServer(app)) as client:
        assert await (await client.get("/")).text() == "0 0"
        assert await (await client.post("/")).text() == "0 0"
        assert await (await client.post("/", data=chunks())).text() == f"3000 {2 * MIB}"
    assert await _given_back(budget)


# ------------------------------------------------------------------------ the settings


def _broker(**settings: object) -> BrokerConfig:
    return BrokerConfig.from_mapping(
        {"broker.id": 1, "controllers": ["http://127.0.0.1:9401"], "log.dir": "d", **settings},
        "test",
    )


def test_the_listener_settings_defaults() -> None:
    config = _broker()
    assert config.queued_max_request_bytes == 256 * MIB
    limits = config.listener_limits()
    assert limits.max_connections_per_ip == DEFAULT_MAX_CONNECTIONS_PER_IP == 2_000
    assert limits.authentication_timeout_ms == 10_000
    assert ListenerLimits().max_connections_per_ip == DEFAULT_MAX_CONNECTIONS_PER_IP
    # a big request of socket.request.max.bytes fits the default budget's big share
    assert ByteBudget(config.queued_max_request_bytes).possible(
        config.socket_request_max_bytes, authenticated=True
    )


def test_per_address_overrides_kafka_style() -> None:
    limits = _broker(
        **{
            "max.connections.per.ip.overrides": "127.0.0.2:3, [::1]:0,10.0.0.1:50000",
            "kafka.authentication.timeout.ms": 2000,
        }
    ).listener_limits()
    assert limits.connections_allowed("127.0.0.2") == 3
    assert limits.connections_allowed("::1") == 0
    assert limits.connections_allowed("10.0.0.1") == 50_000
    assert limits.connections_allowed("127.0.0.1") == DEFAULT_MAX_CONNECTIONS_PER_IP
    assert limits.authentication_timeout_ms == 2000
    for bad in ("localhost:3", "127.0.0.2", "127.0.0.2:-1", "127.0.0.2:x"):
        with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
            _broker(**{"max.connections.per.ip.overrides": bad})
    with pytest.raises(ConfigError, match=r"queued\.max\.request\.bytes"):
        _broker(**{"queued.max.request.bytes": 0})


def test_a_lease_is_what_was_taken() -> None:
    budget = RequestBudget(80)  # strangers' share: 10
    assert budget.accounts.try_take(4, False)
    lease = Lease(budget, 4, False)
    lease.release()
    assert budget.in_use == 0 and budget.accounts.unauthenticated_in_use == 0


async def test_a_big_waiter_leaving_lets_those_it_held_back_in() -> None:
    """The review of the fair budget: the first big waiter timing out left the one behind
    it waiting, though it fit, until some unrelated request gave bytes back."""
    budget = RequestBudget(8 * MIB)
    big_holder = await budget.acquire(4 * MIB)
    small_holders = [await budget.acquire(SMALL_REQUEST_BYTES) for _ in range(2)]
    first = asyncio.create_task(budget.acquire(3 * MIB))  # 4 + 3 > the bigs' 6: waits
    await _settle()
    second = asyncio.create_task(budget.acquire(2 * MIB))  # fits, but behind `first`
    await _settle()
    assert not first.done() and not second.done()
    first.cancel()  # its read timeout
    await _settle()
    assert second.done() and second.result() is not None
    assert budget.in_use == 8 * MIB and budget.waiting == 0
    for lease in (big_holder, *small_holders, second.result()):
        assert lease is not None
        lease.release()
    assert budget.in_use == 0
