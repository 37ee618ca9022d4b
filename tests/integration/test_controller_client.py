"""broker/controller_client.py with the controllers it learns from metadata, against real
HTTP servers on loopback (regressions from a review)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from kraftlite.broker.controller_client import ControllerClient
from kraftlite.errors import KraftliteError
from tests.harness.processes import free_ports

pytestmark = pytest.mark.integration


async def serve(handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_ports(1)[0]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def not_controller() -> web.Response:
    return web.json_response(
        {"error_code": "NOT_CONTROLLER", "message": "no", "status": 503, "retriable": True},
        status=503,
    )


async def test_learning_a_url_during_a_failing_over_call_does_not_crash_it() -> None:
    client_box: list[ControllerClient] = []
    runners = []

    async def first(request: web.Request) -> web.Response:
        client_box[0].learn([url3])  # metadata names a new voter meanwhile
        return not_controller()

    async def other(request: web.Request) -> web.Response:
        return not_controller()

    async def active(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    r1, url1 = await serve(first)
    r2, url2 = await serve(other)
    r3, url3 = await serve(active)
    runners += [r1, r2, r3]
    try:
        async with aiohttp.ClientSession() as session:
            client = ControllerClient((url1, url2), session)
            client_box.append(client)
            _status, body = await client.call("GET", "/x", timeout_s=3)
            assert body == {"ok": True}
    finally:
        for r in runners:
            await r.cleanup()


async def test_a_stale_learned_url_answering_something_else_is_passed_over() -> None:
    """A learned URL now served by something else (a port reused) answers 404: that is no
    controller's answer, so it is passed over like one that does not answer, never
    preferred, and the real controller is found once it is back."""
    state = {"active": False}
    runners = []

    async def real(request: web.Request) -> web.Response:
        return web.json_response({"ok": True}) if state["active"] else not_controller()

    async def stranger(request: web.Request) -> web.Response:
        return web.Response(status=404, text="404: Not Found")

    r1, url1 = await serve(real)
    r2, url2 = await serve(stranger)
    runners += [r1, r2]
    try:
        async with aiohttp.ClientSession() as session:
            client = ControllerClient((url1,), session)
            client.learn([url2])
            with pytest.raises(KraftliteError):  # during a failover
                await client.call("GET", "/x", timeout_s=2)
            state["active"] = True  # the real controller is back
            _status, body = await client.call("GET", "/x", timeout_s=2)
            assert body == {"ok": True}
    finally:
        for r in runners:
            await r.cleanup()


async def test_removed_voters_are_forgotten() -> None:
    async with aiohttp.ClientSession() as session:
        client = ControllerClient(("http://c1:1",), session)
        client.learn(["http://c1:1", "http://c4:4", "http://c5:5"])
        assert client.urls == ("http://c1:1", "http://c4:4", "http://c5:5")
        client.learn(["http://c5:5"])  # 4 removed from the quorum
        assert client.urls == ("http://c1:1", "http://c5:5")
