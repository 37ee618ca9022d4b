"""Client quotas on the HTTP edge (security/quotas.py): bytes produced and fetched, and
handling time, per principal, on the broker a client called; over quota, the answer is
held back and says for how long (`X-Kraftlite-Throttle-Time-Ms`, Kafka's throttle_time_ms).
A request a node passed on is not counted again where it lands."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from kraftlite.api.auth import AUTH
from kraftlite.api.internal_auth import caller
from kraftlite.clock import Clock
from kraftlite.security.quotas import FETCH, PRODUCE, REQUEST, QuotaTracker

THROTTLE_HEADER = "X-Kraftlite-Throttle-Time-Ms"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Throttle:
    def __init__(self, clock: Clock) -> None:
        self.tracker = QuotaTracker()
        self.clock = clock


THROTTLE = web.AppKey("throttle", Throttle)


def _records_route(request: web.Request) -> bool:
    return request.path.endswith("/records") and request.path.startswith("/v1/topics/")


@web.middleware
async def throttle_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    who = caller(request)
    quotas = None if who.node is not None else request.app[AUTH].image.quotas.get(who.principal)
    if not quotas:
        return await handler(request)
    started = time.perf_counter()
    try:
        response = await handler(request)
    except asyncio.CancelledError:  # the client went away: nothing to hold back
        raise
    except BaseException:  # a request that failed cost time too, and is held back the same
        delay_ms = await _account(request, who.principal, quotas, None, started)
        await asyncio.sleep(delay_ms / 1000)
        raise
    delay_ms = await _account(request, who.principal, quotas, response, started)
    if delay_ms:
        response.headers[THROTTLE_HEADER] = str(delay_ms)
        await asyncio.sleep(delay_ms / 1000)
    return response


async def _account(
    request: web.Request,
    principal: str,
    quotas: Mapping[str, float],
    response: web.StreamResponse | None,
    started: float,
) -> int:
    throttle = request.app[THROTTLE]
    now = throttle.clock.now_ms()
    elapsed = time.perf_counter() - started
    delays = [throttle.tracker.record(quotas, principal, REQUEST, elapsed, now)]
    if _records_route(request) and request.method == "POST":
        cost = len(await request.read())
        delays.append(throttle.tracker.record(quotas, principal, PRODUCE, cost, now))
    elif _records_route(request) and isinstance(response, web.Response):
        cost = len(response.body) if isinstance(response.body, bytes) else 0
        delays.append(throttle.tracker.record(quotas, principal, FETCH, cost, now))
    return max(delays)
