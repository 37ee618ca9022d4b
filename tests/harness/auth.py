"""Clusters with authentication on, for the tests of the trust boundary: one super user made
at bootstrap, and the calls tests make as it or as other users."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

from tests.harness.processes import Cluster, http

ADMIN = ("admin", "admin-password-1")
AUTH = {"auth.required": True, "super.users": ["User:admin"]}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def auth_cluster(
    root: Path,
    *,
    broker_config: dict[str, Any] | None = None,
    controller_config: dict[str, Any] | None = None,
    **cluster: Any,
) -> Cluster:
    """A cluster (not started) whose every node requires authentication, with ADMIN as its
    bootstrap super user; `broker_config` and `controller_config` add to AUTH."""
    return Cluster(
        root,
        broker_config={**AUTH, **(broker_config or {})},
        controller_config={
            **AUTH,
            "auth.bootstrap.user": ADMIN[0],
            "auth.bootstrap.password": ADMIN[1],
            **(controller_config or {}),
        },
        **cluster,
    )


def as_admin(method: str, url: str, body: Any = None, timeout_s: float = 30) -> tuple[int, Any]:
    """`http` as ADMIN, retried while ADMIN is unknown: the bootstrap user appears once a
    controller is active, and reaches a broker with its metadata."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, answer = http(method, url, body, headers=basic(*ADMIN))
        if status != 401 or time.monotonic() > deadline:
            return status, answer
        time.sleep(0.2)
