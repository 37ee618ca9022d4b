"""A broker node: storage, replication, the broker service and both of its edges."""

from __future__ import annotations

import aiohttp

from kraftlite import observability
from kraftlite.api import tls
from kraftlite.api.broker_app import make_broker_app
from kraftlite.api.internal_auth import ClusterAuth
from kraftlite.api.listener import REQUEST_BUDGET, BoundedSite, runner_for
from kraftlite.api.restart import RESTART
from kraftlite.broker.broker import Broker, BrokerSettings, RequestLimits
from kraftlite.broker.replica_manager import ReplicationSettings
from kraftlite.clock import SystemClock
from kraftlite.config import BrokerConfig
from kraftlite.groups.coordinator import GroupCoordinator, GroupSettings
from kraftlite.kafka.handlers import Handlers
from kraftlite.kafka.server import KafkaServer
from kraftlite.node import (
    SHUTDOWN_GRACE_S,
    Stop,
    authenticator,
    log,
    sessions_connector,
)
from kraftlite.security.cluster_auth import derive_key
from kraftlite.security.gate import Gate
from kraftlite.security.request_budget import RequestBudget
from kraftlite.service import BrokerService, TopicDefaults
from kraftlite.storage.log import LogStorage, StorageConfig
from kraftlite.transactions.coordinator import TransactionSettings


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
            connector=sessions_connector(config, 64), middlewares=signed
        ) as session,
        aiohttp.ClientSession(
            connector=sessions_connector(config, 512), middlewares=signed
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
            authenticator(config, secret, lambda: broker.replicas.image, clock),
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
        stop = Stop()
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
