"""Composition root: a config in, a running process out. No decisions here.

What both kinds of node share; each kind is built in a module of its own
(`controller.py`, `broker.py`) so that a node imports only its own planes (a controller
started a fifth faster without the broker's modules, measured).
"""

from __future__ import annotations

import asyncio
import os
import signal
import urllib.parse
import uuid
from collections.abc import Callable

import aiohttp
import structlog

from kraftlite.api import tls
from kraftlite.clock import Clock
from kraftlite.config import BrokerConfig, ControllerConfig
from kraftlite.metadata.image import MetadataImage
from kraftlite.security.authenticator import Authenticator, AuthSettings

log = structlog.get_logger(__name__)
EXIT_FATAL = 70  # EX_SOFTWARE: a broken invariant; stop rather than diverge
# On SIGTERM, requests in flight get this long to finish; long-polls (metadata, fetch) are
# cut short rather than waited out.
SHUTDOWN_GRACE_S = 2.0


def cluster_id_for(quorum: tuple[str, ...]) -> str:
    """Every voter derives the same id from the static voter set, with no coordination."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "kraftlite:" + ",".join(sorted(quorum))))


def fatal(exc: Exception) -> None:
    log.critical("metadata_log_fatal", error=repr(exc))
    os._exit(EXIT_FATAL)


class Stop:
    """SIGTERM or SIGINT (`signalled`), or a restart asked through the API (api/restart.py,
    `restart`). A signal while a restart's shutdown runs wins: the node then exits."""

    def __init__(self) -> None:
        self.signalled = asyncio.Event()
        self.restart = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.signalled.set)

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        waits = [loop.create_task(e.wait()) for e in (self.signalled, self.restart)]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()

    @property
    def restarting(self) -> bool:
        return self.restart.is_set() and not self.signalled.is_set()


def authenticator(
    config: BrokerConfig | ControllerConfig,
    secret: str,
    image: Callable[[], MetadataImage],
    clock: Clock,
) -> Authenticator:
    own_url = config.url if isinstance(config, BrokerConfig) else f"//{config.listen}"
    settings = AuthSettings(
        required=config.clients_must_authenticate(),
        super_users=frozenset(config.super_users),
        token_lifetime_ms=config.token_lifetime_ms,
        access_log=config.access_log_enabled,
        host_names=frozenset(
            {
                name.lower()
                for name in (urllib.parse.urlsplit(own_url).hostname, *config.http_allowed_hosts)
                if name
            }
        ),
    )
    if not settings.required:
        log.warning("client_authentication_off", listen=config.listen)
    return Authenticator(settings, secret, image, clock)


def sessions_connector(config: BrokerConfig | ControllerConfig, limit: int) -> aiohttp.TCPConnector:
    context = tls.client_context(config)
    return aiohttp.TCPConnector(limit=limit, ssl=context if context is not None else True)
