"""Client quotas on the HTTP edge: the node's one set of trackers (security/gate.py rule 3,
shared with the Kafka listener) charged with each request's handling time and the record
bytes it produced or fetched; over quota, the answer is held back and says for how long
(`X-Kraftlite-Throttle-Time-Ms`, Kafka's throttle_time_ms). A request a node passed on is
not counted again where it lands."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from kraftlite.api.app_keys import PRODUCED_BYTES
from kraftlite.api.auth import GATE
from kraftlite.api.internal_auth import caller
from kraftlite.api.listener import give_back_budget
from kraftlite.protocol import headers
from kraftlite.security.principal import Caller

THROTTLE_HEADER = "X-Kraftlite-Throttle-Time-Ms"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _records_route(request: web.Request) -> bool:
    return request.path.endswith("/records") and request.path.startswith("/v1/topics/")


_KEY_ROUTE = re.compile(r"^/v1/topics/[^/]+/(keys/[^/]+|table|partitions/[^/]+/table)$")


def _key_route(request: web.Request) -> bool:
    """A compacted topic's key read or table page: consumed bytes, as a fetch's."""
    return _KEY_ROUTE.match(request.path) is not None


@web.middleware
async def throttle_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    who = caller(request)
    quotas = request.app[GATE].quotas_of(who)
    if not quotas:
        return await handler(request)
    started = time.perf_counter()
    try:
        response = await handler(request)
    except asyncio.CancelledError:  # the client went away: nothing to hold back
        raise
    except BaseException:  # a request that failed cost time too, and is held back the same
        delay_ms = await _account(request, who, quotas, None, started)
        if delay_ms:
            give_back_budget(request)  # a throttled client holds no request bytes
            await asyncio.sleep(delay_ms / 1000)
        raise
    delay_ms = await _account(request, who, quotas, response, started)
    if delay_ms:
        response.headers[THROTTLE_HEADER] = str(delay_ms)
        give_back_budget(request)
        await asyncio.sleep(delay_ms / 1000)
    return response


async def _account(
    request: web.Request,
    who: Caller,
    quotas: Mapping[str, float],
    response: web.StreamResponse | None,
    started: float,
) -> int:
    produced = fetched = 0
    if _records_route(request) and request.method == "POST":
        # the body, or what its records came to (app_keys.PRODUCED_BYTES), or what the
        # leader it was relayed to says they came to (a node's answer, never the client's)
        produced = max(len(await request.read()), request.get(PRODUCED_BYTES, 0))
        if response is not None and (said := response.headers.get(headers.PRODUCED_BYTES)):
            produced = max(produced, int(said))
    elif (_records_route(request) or _key_route(request)) and isinstance(response, web.Response):
        fetched = len(response.body) if isinstance(response.body, bytes) else 0
    return request.app[GATE].throttle_ms(
        who,
        quotas,
        handling_s=time.perf_counter() - started,
        produced=produced,
        fetched=fetched,
    )
