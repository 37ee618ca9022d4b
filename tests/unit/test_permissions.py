"""Every route of both apps has an authorization rule (api/permissions.py, rule 1), and every
rule belongs to a route: an endpoint cannot be served unchecked, nor a rule go stale."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiohttp import web

from kraftlite.api.broker_app import make_broker_app
from kraftlite.api.controller_app import make_controller_app
from kraftlite.api.internal_auth import ClusterAuth
from kraftlite.api.permissions import NODES, PERMISSIONS
from kraftlite.broker.broker import RequestLimits
from kraftlite.clock import SystemClock
from kraftlite.metadata.image import MetadataImage
from kraftlite.security.authenticator import Authenticator, AuthSettings
from kraftlite.security.gate import Gate

SECRET = "a-cluster-secret-of-some-length"


def _routes(app: web.Application) -> set[tuple[str, str]]:
    return {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }


def _apps() -> tuple[web.Application, web.Application]:
    clock = SystemClock()
    auth = ClusterAuth(SECRET, "test", clock)
    gate = Gate(Authenticator(AuthSettings(), SECRET, lambda: MetadataImage.EMPTY, clock), clock)
    broker: Any = SimpleNamespace(settings=SimpleNamespace(limits=RequestLimits()))
    service: Any = SimpleNamespace(broker=broker)
    controller: Any = SimpleNamespace(log=None)
    return (
        make_broker_app(service, auth, gate),
        make_controller_app(controller, auth, gate),
    )


def test_every_route_has_a_rule_and_every_rule_a_route() -> None:
    broker, controller = _apps()
    routes = _routes(broker) | _routes(controller)
    assert routes - set(PERMISSIONS) == set()
    assert set(PERMISSIONS) - routes == set()


def test_internal_routes_are_for_nodes_only() -> None:
    for (_, path), rule in PERMISSIONS.items():
        assert (rule == NODES) is path.startswith("/v1/internal/"), path
