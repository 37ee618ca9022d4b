"""A controller node: the quorum's Raft log, the quorum controller and its HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import secrets

from kraftlite import observability
from kraftlite.api import tls
from kraftlite.api.controller_app import make_controller_app
from kraftlite.api.internal_auth import ClusterAuth
from kraftlite.api.listener import BoundedSite, runner_for
from kraftlite.api.restart import RESTART
from kraftlite.clock import SystemClock
from kraftlite.config import ControllerConfig
from kraftlite.controller.quorum_controller import ControllerSettings, QuorumController
from kraftlite.metadata.records import UserScramCredentialRecord
from kraftlite.node import (
    SHUTDOWN_GRACE_S,
    Stop,
    authenticator,
    cluster_id_for,
    fatal,
    log,
    sessions_connector,
)
from kraftlite.raft.pysyncobj_log import RaftMetadataLog, RaftSettings
from kraftlite.security import scram
from kraftlite.security.gate import Gate


def _bootstrap_credential(
    config: ControllerConfig, bootstrap_password: str | None
) -> UserScramCredentialRecord | None:
    if config.bootstrap_user is None or not bootstrap_password:
        return None
    return scram.make_credential(
        config.bootstrap_user, bootstrap_password, scram.DEFAULT_MECHANISM, secrets.token_bytes(32)
    )


async def run_controller(
    config: ControllerConfig, password: str, secret: str, bootstrap_password: str | None = None
) -> bool:
    """Run a controller until stopped; whether it is to start again (api/restart.py)."""
    loop = asyncio.get_running_loop()
    clock = SystemClock()  # the node's one clock
    voters = config.voters()
    peers = tuple(address for address in voters if address != config.raft)
    raft_log = RaftMetadataLog(
        RaftSettings(
            self_address=config.raft,
            bind_address=config.raft_bind,
            peer_addresses=peers,
            data_dir=config.data_dir,
            password=password,
            retained_batches=config.metadata_log_retained_batches,
            join=config.join,
            membership_changes=config.membership_changes,
        ),
        loop,
        fatal,
    )
    host, port = config.listen.rsplit(":", 1)
    controller = QuorumController(
        ControllerSettings(
            node_id=config.node_id,
            url=f"{config.scheme}://{config.listen}",
            voters=voters,
            cluster_id=config.cluster_id or cluster_id_for(config.quorum),
            session_timeout_ms=config.broker_session_timeout_ms,
            heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
            leader_imbalance_check_interval_ms=config.leader_imbalance_check_interval_ms,
            replacement_delay_ms=config.broker_replacement_delay_ms,
            liveness_probes=config.broker_liveness_probes,
            unreachable_timeout_ms=config.broker_unreachable_timeout_ms,
            bootstrap_credential=_bootstrap_credential(config, bootstrap_password),
        ),
        raft_log,
        clock,
    )
    observability.node_info("controller", config.node_id)
    auth = ClusterAuth(secret, f"controller-{config.node_id}", clock)
    limits = config.listener_limits()
    gate = Gate(authenticator(config, secret, lambda: controller.image, clock), clock)
    app = make_controller_app(
        controller,
        auth,
        gate,
        limits,
        connector=lambda: sessions_connector(config, 100),
    )
    stop = Stop()
    app[RESTART] = stop.restart
    runner = runner_for(app, limits, SHUTDOWN_GRACE_S)
    await runner.setup()
    try:
        await BoundedSite(runner, host, int(port), limits, tls.server_context(config)).start()
        controller.start()
        log.info("controller_started", listen=config.listen, raft=config.raft, voters=len(voters))
        await stop.wait()
        log.info("controller_stopping", restarting=stop.restarting)
    finally:
        await controller.stop()
        await runner.cleanup()
        with contextlib.suppress(Exception):
            raft_log.close()
    return stop.restarting
