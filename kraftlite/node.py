"""Composition root: a config in, a running process out. No decisions here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import urllib.parse
import uuid
from collections.abc import Callable

import aiohttp
import structlog

from kraftlite import observability
from kraftlite.api import tls
from kraftlite.api.broker_app import make_broker_app
from kraftlite.api.controller_app import make_controller_app
from kraftlite.api.internal_auth import ClusterAuth
from kraftlite.api.listener import REQUEST_BUDGET, BoundedSite, runner_for
from kraftlite.api.restart import RESTART
from kraftlite.broker.broker import Broker, BrokerSettings, RequestLimits
from kraftlite.broker.replica_manager import ReplicationSettings
from kraftlite.clock import Clock, SystemClock
from kraftlite.config import BrokerConfig, ControllerConfig
from kraftlite.controller.quorum_controller import ControllerSettings, QuorumController
from kraftlite.groups.coordinator import GroupCoordinator, GroupSettings
from kraftlite.kafka.handlers import Handlers
from kraftlite.kafka.server import KafkaServer
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.records import UserScramCredentialRecord
from kraftlite.raft.pysyncobj_log import RaftMetadataLog, RaftSettings
from kraftlite.security import scram
from kraftlite.security.authenticator import Authenticator, AuthSettings
from kraftlite.security.cluster_auth import derive_key
from kraftlite.security.gate import Gate
from kraftlite.security.request_budget import RequestBudget
from kraftlite.service import BrokerService, TopicDefaults
from kraftlite.storage.log import LogStorage, StorageConfig
from kraftlite.transactions.coordinator import TransactionSettings

log = structlog.get_logger(__name__)
EXIT_FATAL = 70  # EX_SOFTWARE: a broken invariant; stop rather than diverge
# On SIGTERM, requests in flight get this long to finish; long-polls (metadata, fetch) are
# cut short rather than waited out.
SHUTDOWN_GRACE_S = 2.0


def cluster_id_for(quorum: tuple[str, ...]) -> str:
    """Every voter derives the same id from the static voter set, with no coordination."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "kraftlite:" + ",".join(sorted(quorum))))


def _fatal(exc: Exception) -> None:
    log.critical("metadata_log_fatal", error=repr(exc))
    os._exit(EXIT_FATAL)


class _Stop:
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


def _authenticator(
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


def _node_sessions_connector(
    config: BrokerConfig | ControllerConfig, limit: int
) -> aiohttp.TCPConnector:
    context = tls.client_context(config)
    return aiohttp.TCPConnector(limit=limit, ssl=context if context is not None else True)


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
        _fatal,
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
    gate = Gate(_authenticator(config, secret, lambda: controller.image, clock), clock)
    app = make_controller_app(
        controller,
        auth,
        gate,
        limits,
        connector=lambda: _node_sessions_connector(config, 100),
    )
    stop = _Stop()
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


async def run_broker(config: BrokerConfig, secret: str) -> bool:
    """Run a broker until stopped; whether it is to start again (api/restart.py)."""
    clock = SystemClock()  # the node's one clock
    storage = LogStorage(
        StorageConfig(
            path=config.log_dir,
            flush_interval_ms=config.log_flush_interval_ms,
            map_size_bytes=config.log_map_size_bytes,
            map_max_bytes=config.log_map_max_bytes,
        )
    )
    storage.start_flusher()
    host, port = config.listen.rsplit(":", 1)
    auth = ClusterAuth(secret, f"broker-{config.broker_id}", clock)
    signed = (auth.client_middleware(),)  # every call a broker makes is to another node
    async with (
        aiohttp.ClientSession(
            connector=_node_sessions_connector(config, 64), middlewares=signed
        ) as session,
        aiohttp.ClientSession(
            connector=_node_sessions_connector(config, 512), middlewares=signed
        ) as forwarding,
    ):
        broker = Broker(
            BrokerSettings(
                broker_id=config.broker_id,
                url=config.url,
                controllers=config.controllers,
                controllers_discovery=config.controllers_discovery,
                rack=config.rack,
                kafka=config.kafka_address,
                replication=ReplicationSettings(
                    broker_id=config.broker_id,
                    replica_lag_time_max_ms=config.replica_lag_time_max_ms,
                    replica_fetch_wait_max_ms=config.replica_fetch_wait_max_ms,
                    retention_check_interval_ms=config.retention_check_interval_ms,
                    throttled_rate=config.replication_throttled_rate,
                    cleaner_enable=config.log_cleaner_enable,
                    cleaner_backoff_ms=config.log_cleaner_backoff_ms,
                    cleaner_io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
                ),
                limits=RequestLimits(
                    socket_request_max_bytes=config.socket_request_max_bytes,
                    json_request_max_bytes=config.json_request_max_bytes,
                    fetch_max_bytes=config.fetch_max_bytes,
                    timestamp_after_max_ms=config.timestamp_after_max_ms,
                    timestamp_before_max_ms=config.timestamp_before_max_ms,
                ),
            ),
            storage,
            session,
            clock,
            forward_session=forwarding,
        )
        observability.node_info("broker", config.broker_id)
        limits = config.listener_limits()
        # one front door (security/gate.py): the same gate, service and group coordinator
        # behind both edges
        gate = Gate(
            _authenticator(config, secret, lambda: broker.replicas.image, clock),
            clock,
            ready=broker.starting,
        )
        service = BrokerService(
            broker,
            GroupCoordinator(
                broker,
                GroupSettings(
                    offsets_partitions=config.offsets_topic_partitions,
                    heartbeat_interval_ms=config.group_heartbeat_interval_ms,
                    min_session_timeout_ms=config.group_min_session_timeout_ms,
                    max_session_timeout_ms=config.group_max_session_timeout_ms,
                    max_size=config.group_max_size,
                    offset_metadata_max_bytes=config.offset_metadata_max_bytes,
                    classic_min_session_timeout_ms=config.classic_min_session_timeout_ms,
                    classic_max_session_timeout_ms=config.classic_max_session_timeout_ms,
                    initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                    offsets_retention_ms=config.offsets_retention_minutes * 60_000,
                    offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
                ),
            ),
            derive_key(secret, "producer ids"),
            topic_defaults=TopicDefaults(
                config.auto_create_topics,
                config.num_partitions,
                config.default_replication_factor,
            ),
            transaction_settings=TransactionSettings(
                partitions=config.transaction_state_partitions,
                max_timeout_ms=config.transaction_max_timeout_ms,
                id_expiration_ms=config.transactional_id_expiration_ms,
                abort_check_interval_ms=config.transaction_abort_check_interval_ms,
                expire_check_interval_ms=config.transaction_expire_check_interval_ms,
            ),
        )
        app = make_broker_app(service, auth, gate, limits)
        stop = _Stop()
        app[RESTART] = stop.restart
        # one budget of request bytes for both listeners (queued.max.request.bytes)
        budget = RequestBudget(config.queued_max_request_bytes)
        app[REQUEST_BUDGET] = budget
        runner = runner_for(app, limits, SHUTDOWN_GRACE_S)
        kafka: KafkaServer | None = None
        await runner.setup()
        try:
            await BoundedSite(runner, host, int(port), limits, tls.server_context(config)).start()
            if config.kafka_listen is not None:
                kafka = KafkaServer(
                    Handlers(service, gate, config.sasl_enabled_mechanisms),
                    limits,
                    config.socket_request_max_bytes,
                    budget,
                )
                kafka_host, kafka_port = config.kafka_listen.rsplit(":", 1)
                await kafka.start(
                    kafka_host.strip("[]"), int(kafka_port), tls.server_context(config)
                )
            await broker.start()  # register, heartbeats, metadata
            service.coordinator.start()  # group loads, offset expiry
            service.transactions.start()  # transaction loads, timeouts, id expiry
            log.info(
                "broker_started", listen=config.listen, url=config.url, log_dir=str(config.log_dir)
            )
            await stop.wait()
            log.info("broker_stopping", restarting=stop.restarting)
        finally:
            await broker.stop()  # controlled shutdown while still serving followers
            await service.transactions.stop()  # before storage closes: its loader reads logs
            await service.coordinator.stop()
            if kafka is not None:
                await kafka.close()
            await runner.cleanup()
            storage.close()
    return stop.restarting
