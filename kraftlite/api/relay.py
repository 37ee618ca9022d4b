"""The HTTP edge's one forwarding relay (issue 16): a partition request that reached a
broker which does not lead the partition, or a group request that reached a broker which
does not coordinate the group, goes on to the broker that does, one hop, and its answer
comes back as it was.

The hop is signed as this node acting for the client (`forwarded_for`), so the next broker
authorizes the client, not us; it carries `X-Kraftlite-Forwarded` so it is never forwarded
again, and this broker's metadata version so the next broker first catches up to it. A
request the caller marked `X-Kraftlite-No-Forward` is answered with the error instead (421
with the leader or coordinator), as a Kafka broker would answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp
import orjson
from aiohttp import web

from kraftlite.api.internal_auth import forwarded_for
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.observability import label_relayed_error
from kraftlite.protocol.headers import FORWARDED, METADATA_VERSION, NO_FORWARD, TRANSACTIONAL_ID

if TYPE_CHECKING:  # the controller's app loads this module too, not the broker's planes
    from kraftlite.broker.broker import Broker

_PASSED_ON = {"content-type", "accept", TRANSACTIONAL_ID.lower()}


FENCE_CHECK_S = 0.1  # how often a hop in flight checks whether its target was fenced


def may_forward(request: web.Request) -> bool:
    return not (request.headers.get(NO_FORWARD) or request.headers.get(FORWARDED))


async def relay(
    broker: Broker,
    request: web.Request,
    error: KraftliteError,
    body: bytes,
    *,
    path_qs: str | None = None,
    content_type: str | None = None,
    timeout_s: float = 330.0,
    obey_no_forward: bool = True,
) -> web.Response:
    """Answer `request` with the answer of the broker `error` names (`leader_url`), or
    raise `error` when it names none, the caller asked for no forwarding, or the request was
    forwarded already. `path_qs` and `content_type` replace the request's own (a JSON
    produce is forwarded as its per-partition binary batches). A target that does not answer
    is `error`'s code (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR): the client looks again.
    A produce to a topic spreads over partitions the client did not choose, so it relays
    its per-partition batches whatever `X-Kraftlite-No-Forward` says (`obey_no_forward`).
    """
    url = error.details.get("leader_url")
    forwarded = bool(request.headers.get(FORWARDED))
    if not isinstance(url, str) or forwarded or (obey_no_forward and not may_forward(request)):
        raise error
    headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED_ON}
    if content_type is not None:
        headers["Content-Type"] = content_type
    headers[FORWARDED] = "1"
    headers[METADATA_VERSION] = str(broker.replicas.image.version)
    headers.update(forwarded_for(request))
    code = (
        ErrorCode.COORDINATOR_NOT_AVAILABLE
        if error.code is ErrorCode.NOT_COORDINATOR
        else ErrorCode.NOT_LEADER_OR_FOLLOWER
    )

    async def exchange() -> web.Response:
        async with broker.forward_session.request(
            request.method,
            url + (request.path_qs if path_qs is None else path_qs),
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as upstream:
            relayed = {
                k: v
                for k, v in upstream.headers.items()
                if k.lower() == "content-type" or k.lower().startswith("x-kraftlite-")
            }
            answer_body = await upstream.read()
            answer = web.Response(status=upstream.status, body=answer_body, headers=relayed)
            if upstream.status >= 400:
                with contextlib.suppress(orjson.JSONDecodeError):
                    label_relayed_error(answer, orjson.loads(answer_body))
            return answer

    waiting = asyncio.ensure_future(exchange())
    try:
        # A target that goes silent holds the hop until its timeout; once our metadata says
        # it was fenced (its partitions and groups moved), the client is told to look again.
        while not (await asyncio.wait({waiting}, timeout=FENCE_CHECK_S))[0]:
            if _fenced(broker, url):
                raise KraftliteError(code, f"{url} was fenced while it had the request")
        return waiting.result()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise KraftliteError(code, f"{url} did not answer: {exc!r}") from None
    finally:
        if not waiting.done():
            waiting.cancel()


def _fenced(broker: Broker, url: str) -> bool:
    """Whether our metadata has the broker at `url` fenced now."""
    return any(
        b.fenced and b.url.rstrip("/") == url.rstrip("/")
        for b in broker.replicas.image.brokers.values()
    )


async def at_coordinator(
    broker: Broker, request: web.Request, locate: Callable[[], object]
) -> web.Response | None:
    """None when `locate` (a coordinator's lookup of the request's group or transactional
    id) finds this broker coordinates it; else the coordinator's answer (`relay`)."""
    try:
        locate()
    except KraftliteError as exc:
        if exc.code is not ErrorCode.NOT_COORDINATOR:
            raise
        return await relay(broker, request, exc, await request.read(), timeout_s=60)
    return None
