"""Composition root: a config in, a running process out. No decisions here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid

import structlog
from aiohttp import web

from kraftlite.api.controller_app import make_controller_app
from kraftlite.clock import SystemClock
from kraftlite.config import ControllerConfig
from kraftlite.controller.quorum_controller import ControllerSettings, QuorumController
from kraftlite.raft.pysyncobj_log import RaftMetadataLog, RaftSettings

log = structlog.get_logger(__name__)
EXIT_FATAL = 70  # EX_SOFTWARE: a broken invariant; stop rather than diverge


def cluster_id_for(quorum: tuple[str, ...]) -> str:
    """Every voter derives the same id from the static voter set, with no coordination."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "kraftlite:" + ",".join(sorted(quorum))))


def _fatal(exc: Exception) -> None:
    log.critical("metadata_log_fatal", error=repr(exc))
    os._exit(EXIT_FATAL)


async def _wait_for_signal() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def run_controller(config: ControllerConfig, password: str) -> None:
    loop = asyncio.get_running_loop()
    voters = config.voters()
    peers = tuple(address for address in voters if address != config.raft)
    raft_log = RaftMetadataLog(
        RaftSettings(
            self_address=config.raft,
            peer_addresses=peers,
            data_dir=config.data_dir,
            password=password,
        ),
        loop,
        _fatal,
    )
    host, port = config.listen.rsplit(":", 1)
    controller = QuorumController(
        ControllerSettings(
            node_id=config.node_id,
            url=f"http://{config.listen}",
            voters=voters,
            cluster_id=cluster_id_for(config.quorum),
            session_timeout_ms=config.broker_session_timeout_ms,
            heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
            leader_imbalance_check_interval_ms=config.leader_imbalance_check_interval_ms,
        ),
        raft_log,
        SystemClock(),
    )
    runner = web.AppRunner(make_controller_app(controller), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, int(port)).start()
        controller.start()
        log.info("controller_started", listen=config.listen, raft=config.raft, voters=len(voters))
        await _wait_for_signal()
        log.info("controller_stopping")
    finally:
        await controller.stop()
        await runner.cleanup()
        with contextlib.suppress(Exception):
            raft_log.close()
