"""The slots an HTTP listener reserves for the nodes (api/listener.py rule 1), behind the
real cluster_auth_middleware on a real socket: a node's calls for itself keep them; calls
a node passes on for clients (a relayed long-poll fetch, an admin call) do not, so clients
cannot make the nodes fill the reserve for them (the review of issue 24's slice)."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import aiohttp
import pytest
from aiohttp import web

from kraftlite.api.internal_auth import CLUSTER_AUTH, ClusterAuth, caller, cluster_auth_middleware
from kraftlite.api.listener import CONNECTIONS, BoundedSite, runner_for
from kraftlite.clock import SystemClock
from kraftlite.config import ListenerLimits
from kraftlite.security.cluster_auth import CLIENT_HOST_HEADER, PRINCIPAL_HEADER

pytestmark = [pytest.mark.security, pytest.mark.timeout(60)]
SECRET = "s" * 32
FOR_A_CLIENT = {PRINCIPAL_HEADER: "User:mallory", CLIENT_HOST_HEADER: "203.0.113.9"}


async def _answer(request: web.Request) -> web.Response:  # a relayed long-poll, say
    await asyncio.sleep(float(request.query.get("wait", "0")))
    return web.Response(text=str(caller(request).principal))


async def test_calls_passed_on_for_clients_take_no_reserved_slot() -> None:
    limits = ListenerLimits(max_connections=10, reserved_for_nodes=8)
    app = web.Application(middlewares=[cluster_auth_middleware])
    app[CLUSTER_AUTH] = ClusterAuth(SECRET, "broker-1", SystemClock())
    app.router.add_get("/v1/topics/t/partitions/0/records", _answer)
    app.router.add_get("/v1/internal/metadata", _answer)
    runner = runner_for(app, limits, 1)
    await runner.setup()
    site = BoundedSite(runner, "127.0.0.1", 0, limits)
    await site.start()
    port = site._bound_port
    base = f"http://127.0.0.1:{port}"
    node = ClusterAuth(SECRET, "broker-2", SystemClock())
    forwarding = aiohttp.ClientSession(middlewares=(node.client_middleware(),))
    own = aiohttp.ClientSession(middlewares=(node.client_middleware(),))
    held: list[socket.socket] = []
    try:
        # clients hold every regular slot
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        await asyncio.sleep(0.2)
        counts = app[CONNECTIONS]
        assert counts.total == 10

        async def relayed() -> int | str:
            url = base + "/v1/topics/t/partitions/0/records?wait=1"
            try:
                async with forwarding.get(url, headers=FOR_A_CLIENT) as response:
                    return response.status
            except aiohttp.ClientError as exc:
                return type(exc).__name__

        relays = [asyncio.create_task(relayed()) for _ in range(20)]
        await asyncio.sleep(0.3)
        assert not any(counts.reserved.values())  # none of the relays kept a slot
        # the node's own call gets a reserved slot, keeps it, and is answered
        async with own.get(base + "/v1/internal/metadata") as response:
            assert response.status == 200 and await response.text() == "cluster"
        assert sum(counts.reserved.values()) == 1
        outcomes = await asyncio.gather(*relays)
        assert 200 not in outcomes  # in the reserve, a client's call is closed unanswered
        async with own.get(base + "/v1/internal/metadata") as response:
            assert response.status == 200
    finally:
        await forwarding.close()
        await own.close()
        for sock in held:
            with contextlib.suppress(OSError):
                sock.close()
        await runner.cleanup()
