"""Process configuration: TOML files with Kafka's names, one frozen object per process role.

Rules:
1. Keys use Kafka's names where the concept matches (`log.flush.interval.ms`). In TOML they may
   be written quoted (`"log.flush.interval.ms" = 1000`) or as nested tables; both flatten to
   the same dotted name.
2. Loading validates everything: an unknown key, a wrong type or an impossible value raises
   ConfigError naming the key and the file, and changes nothing. The CLI prints that one line
   and exits 2.
3. Command-line flags override the file; they go through the same validation.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kraftlite.protocol import names
from kraftlite.protocol.urls import node_url_problem
from kraftlite.security import scram
from kraftlite.security.cluster_auth import MIN_SECRET_LENGTH

_C = TypeVar("_C", bound="_Config")


class ConfigError(ValueError):
    """One line that names the key and the file."""


def _key(name: str, check: Callable[[Any], str | None] | None = None, **kwargs: Any) -> Any:
    """A dataclass field read from config key `name`; `check` returns a complaint or None."""
    return field(metadata={"key": name, "check": check}, **kwargs)


def _port_address(value: Any) -> str | None:
    host, sep, port = str(value).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return "must be HOST:PORT with a port in 1-65535"
    return None


def _non_negative(value: Any) -> str | None:
    return "must be >= 0" if value < 0 else None


def _minus_one_or_more(value: Any) -> str | None:
    return "must be -1 (off) or >= 0" if value < -1 else None


def positive_option(value: Any) -> str | None:
    return "must be > 0" if value <= 0 else None


def _unreachable_timeout(value: Any) -> str | None:
    # the probe's four knocks and the first one's timeout (controller/liveness.py rule 4)
    return "must be >= 2000" if value < 2000 else None


def _positive_or_unset(value: Any) -> str | None:
    return None if value is None else positive_option(value)


def _partition_count(value: Any) -> str | None:
    return None if 0 < value <= 10_000 else "must be 1-10000"


def _http_urls(value: Any) -> str | None:
    if not value or any(node_url_problem(u) for u in value):
        return "must be a non-empty list of http(s)://HOST:PORT URLs"
    return None


def _http_url(value: Any) -> str | None:
    problem = node_url_problem(value)
    return None if problem is None else f"must be an http://HOST:PORT URL (or https); it {problem}"


def _secret(value: Any) -> str | None:
    if value is not None and len(value) < MIN_SECRET_LENGTH:
        return f"must be at least {MIN_SECRET_LENGTH} characters"
    return None


def _quorum(value: Any) -> str | None:
    if not value:
        return "must list the voters as ID@HOST:PORT"
    ids = []
    for voter in value:
        node, sep, address = str(voter).partition("@")
        if not sep or not node.isdigit() or _port_address(address):
            return f"voter {voter!r} must be ID@HOST:PORT"
        ids.append(int(node))
    if len(set(ids)) != len(ids):
        return "voter ids must be unique"
    return None


def _principals(value: Any) -> str | None:
    if any(not v.startswith("User:") or v == "User:" for v in value):
        return "must list principals as User:<name>"
    return None


# What a Kafka client may log in with (sasl.enabled.mechanisms): SCRAM, and PLAIN (a password
# sent as it is, so over TLS only, or turned off by leaving it out)
SASL_MECHANISMS = (*sorted(scram.MECHANISMS), "PLAIN")


def _sasl_mechanisms(value: Any) -> str | None:
    if not value or any(v not in SASL_MECHANISMS for v in value):
        return "must list one or more of " + ", ".join(SASL_MECHANISMS)
    return None


def _host_names(value: Any) -> str | None:
    if any(not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})", v) for v in value):
        return "must list host names (letters, digits, dots and dashes)"
    return None


def _client_auth(value: Any) -> str | None:
    return (
        None
        if value in {"none", "requested", "required"}
        else "must be none, requested or required"
    )


def _log_format(value: Any) -> str | None:
    return None if value in {"auto", "json", "console"} else "must be auto, json or console"


def _log_level(value: Any) -> str | None:
    levels = {"debug", "info", "warning", "error"}
    return None if value in levels else f"must be one of {', '.join(sorted(levels))}"


# One address's connections to one listener. Kafka's default is unlimited; this one is
# above what a whole local cluster opens from 127.0.0.1 (`kraftlite dev`, the tests: every
# node on one address): a broker reaches another's HTTP listener through two connection
# pools of at most 64 and 512 connections (kraftlite/node/), a controller through one of 100, so a
# broker of 3 controllers + 3 brokers sees at most 2 * 576 + 3 * 100 = 1,452 from them,
# which leaves 548 for the host's own clients; and one address still gets at most a fifth
# of `max.connections`.
DEFAULT_MAX_CONNECTIONS_PER_IP = 2_000
# Connections an HTTP listener takes beyond `max.connections` and the per-address cap, kept
# only by the nodes (api/listener.py rule 1): more than the connections the other nodes of a
# 3 + 3 cluster open to a restarted broker before it serves (a few dozen), and few enough
# that a flood's connections in them cost nothing much.
DEFAULT_CONNECTIONS_RESERVED_FOR_NODES = 256
# A broker's request bytes held at once (`queued.max.request.bytes`, BrokerConfig)
DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """A listener's bounds (kraftlite/api/listener.py and kraftlite/kafka/server.py
    enforce them)."""

    max_connections: int = 10_000
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    # (address, count) pairs that replace the per-address cap (Kafka's
    # max.connections.per.ip.overrides)
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    idle_ms: int = 60_000
    read_timeout_ms: int = 30_000
    # the Kafka listener: a connection that must authenticate and has not by then is closed
    authentication_timeout_ms: int = 10_000
    # the HTTP listener: slots beyond the caps above that only the cluster's nodes keep
    reserved_for_nodes: int = DEFAULT_CONNECTIONS_RESERVED_FOR_NODES

    def connections_allowed(self, ip: str) -> int:
        """How many connections `ip` may hold: its override, else the per-address cap."""
        for address, count in self.max_connections_per_ip_overrides:
            if address == ip:
                return count
        return self.max_connections_per_ip


def _ip_text(host: str) -> str | None:
    """An IP address in the form a listener sees a peer's (IPv6 compressed), or None."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def _per_ip_overrides(value: Any) -> str | None:
    for entry in value:
        host, sep, count = entry.rpartition(":")
        if not sep or _ip_text(host) is None or names.decimal(count, 10) is None:
            return "must list ADDRESS:COUNT entries (IP addresses: host names are not resolved)"
    return None


def _overrides(entries: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """`max.connections.per.ip.overrides` (checked) as (address, count) pairs."""
    pairs = []
    for entry in entries:
        host, _, count = entry.rpartition(":")
        pairs.append((_ip_text(host) or host, int(count)))
    return tuple(pairs)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Config:
    log_format: str = _key("logging.format", _log_format, default="auto")
    log_level: str = _key("logging.level", _log_level, default="info")
    # Shared by every node of the cluster: internal calls are signed with keys derived from
    # it (kraftlite/security/cluster_auth.py). Also read from KRAFTLITE_CLUSTER_SECRET.
    cluster_secret: str | None = _key("cluster.secret", _secret, default=None)
    # The HTTP listener's bounds (kraftlite/api/listener.py)
    max_connections: int = _key("max.connections", positive_option, default=10_000)
    max_connections_per_ip: int = _key(
        "max.connections.per.ip", positive_option, default=DEFAULT_MAX_CONNECTIONS_PER_IP
    )
    # "ADDRESS:COUNT,..." (or a list): per-address caps replacing the one above, Kafka's
    # format; 0 refuses an address. IP addresses only: a peer is known by its address.
    max_connections_per_ip_overrides: tuple[str, ...] = _key(
        "max.connections.per.ip.overrides", _per_ip_overrides, default=()
    )
    connections_reserved_for_nodes: int = _key(
        "connections.reserved.for.nodes",
        _non_negative,
        default=DEFAULT_CONNECTIONS_RESERVED_FOR_NODES,
    )
    connections_max_idle_ms: int = _key("connections.max.idle.ms", positive_option, default=60_000)
    request_read_timeout_ms: int = _key("request.read.timeout.ms", positive_option, default=30_000)
    # Clients (kraftlite/api/auth.py): unset means required unless `listen` is loopback
    auth_required: bool | None = _key("auth.required", default=None)
    super_users: tuple[str, ...] = _key("super.users", _principals, default=())
    token_lifetime_ms: int = _key("auth.token.lifetime.ms", positive_option, default=3_600_000)
    access_log_enabled: bool = _key("access.log.enabled", default=False)
    # Host names (beyond IP addresses, localhost and the node's own URL's) that clients
    # may reach this node by when they need not authenticate (kraftlite/api/browsers.py)
    http_allowed_hosts: tuple[str, ...] = _key("http.allowed.hosts", _host_names, default=())
    # TLS on the HTTP listener and on calls to other nodes (kraftlite/api/tls.py)
    tls_cert_file: Path | None = _key("tls.cert.file", default=None)
    tls_key_file: Path | None = _key("tls.key.file", default=None)
    tls_ca_file: Path | None = _key("tls.ca.file", default=None)
    tls_client_auth: str = _key("tls.client.auth", _client_auth, default="none")

    @property
    def scheme(self) -> str:
        return "http" if self.tls_cert_file is None else "https"

    def listens_on_loopback(self) -> bool:
        host = str(getattr(self, "listen", "")).rpartition(":")[0].strip("[]")
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:  # a host name: it may resolve anywhere
            return False

    def clients_must_authenticate(self) -> bool:
        """`auth.required`, or when unset: unless the listener is loopback only."""
        if self.auth_required is not None:
            return self.auth_required
        return not self.listens_on_loopback()

    def listener_limits(self) -> ListenerLimits:
        return ListenerLimits(
            max_connections=self.max_connections,
            max_connections_per_ip=self.max_connections_per_ip,
            max_connections_per_ip_overrides=_overrides(self.max_connections_per_ip_overrides),
            idle_ms=self.connections_max_idle_ms,
            read_timeout_ms=self.request_read_timeout_ms,
            reserved_for_nodes=self.connections_reserved_for_nodes,
        )

    @classmethod
    def load(cls: type[_C], path: Path | None, overrides: Mapping[str, Any] | None = None) -> _C:
        """Read `path` (optional), apply `overrides` (by key name; None = not given), validate."""
        values: dict[str, Any] = {}
        if path is not None:
            try:
                with path.open("rb") as file:
                    values = _flatten(tomllib.load(file))
            except FileNotFoundError:
                raise ConfigError(f"{path}: no such config file") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        where = dict.fromkeys(values, str(path))
        for key, value in (overrides or {}).items():
            if value is not None:
                values[key] = value
                where[key] = "command line"
        return cls.from_mapping(values, str(path) if path else "command line", where)

    @classmethod
    def from_mapping(
        cls: type[_C],
        values: Mapping[str, Any],
        source: str,
        where: Mapping[str, str] | None = None,
    ) -> _C:
        """Validate `values` (key name -> value); errors name the key and where it came from."""
        where = where or {}
        fields = {f.metadata["key"]: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ConfigError(f"{where.get(unknown[0], source)}: unknown key {unknown[0]!r}")
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            spec = fields[key]
            origin = where.get(key, source)
            coerced = _coerce(value, spec, key, origin)
            complaint = spec.metadata["check"](coerced) if spec.metadata["check"] else None
            if complaint:
                raise ConfigError(f"{origin}: {key} = {value!r} {complaint}")
            kwargs[spec.name] = coerced
        for key, spec in fields.items():
            if spec.name not in kwargs and spec.default is dataclasses.MISSING:
                raise ConfigError(f"{source}: missing required key {key!r}")
        return cls(**kwargs)

    def as_mapping(self) -> dict[str, Any]:
        """The effective configuration by key name (for `kraftlite config check`)."""
        shown = {
            f.metadata["key"]: str(v) if isinstance(v := getattr(self, f.name), Path) else v
            for f in dataclasses.fields(self)
        }
        return {
            key: "***" if key.endswith(("password", "secret")) and value is not None else value
            for key, value in shown.items()
        }


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _coerce(value: Any, spec: dataclasses.Field[Any], key: str, source: str) -> Any:
    kind = spec.type if isinstance(spec.type, str) else spec.type.__name__
    wrong = ConfigError(f"{source}: {key} = {value!r} must be of type {kind}")
    if kind in {"int", "int | None"}:
        if value is None and kind == "int | None":
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise wrong
        return value
    if kind in {"Path", "Path | None"}:
        if value is None and kind == "Path | None":
            return None
        if not isinstance(value, (str, Path)):
            raise wrong
        return Path(value)
    if kind in {"bool", "bool | None"}:
        if value is None and kind == "bool | None":
            return None
        if not isinstance(value, bool):
            raise wrong
        return value
    if kind == "str | None":
        if value is not None and not isinstance(value, str):
            raise wrong
        return value
    if kind == "tuple[str, ...]":
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise wrong
        return tuple(value)
    raise AssertionError(f"no coercion for {kind}")  # a field type this module forgot


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageSettings(_Config):
    """What every process that keeps partition logs needs (brokers)."""

    log_dir: Path = _key("log.dir")
    log_flush_interval_ms: int = _key("log.flush.interval.ms", _non_negative, default=1000)
    log_map_size_bytes: int = _key("log.map.size.bytes", positive_option, default=1 << 30)
    log_map_max_bytes: int = _key("log.map.max.bytes", positive_option, default=1 << 40)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig(StorageSettings):
    """`kraftlite broker`: one data-plane node."""

    broker_id: int = _key("broker.id", _non_negative)
    listen: str = _key("listen", _port_address, default="127.0.0.1:9092")
    # What this broker registers for others to reach it by (Kafka's advertised.listeners):
    # differs from `listen` behind a proxy or NAT; the fault-injection tests route through one.
    advertised_url: str | None = _key("advertised.url", _http_url, default=None)
    controllers: tuple[str, ...] = _key("controllers", _http_urls)
    # The Kafka wire protocol listener (kafka/server.py), off when unset; what clients are told
    # to connect to (Metadata) is `kafka.advertised.listener`, else `kafka.listen`.
    kafka_listen: str | None = _key("kafka.listen", _port_address, default=None)
    kafka_advertised_listener: str | None = _key(
        "kafka.advertised.listener", _port_address, default=None
    )
    # Also use the controllers metadata names (voters added since start); off where brokers
    # must reach controllers at addresses of their own (NAT, proxies).
    controllers_discovery: bool = _key("controllers.discovery.enable", default=True)
    rack: str | None = _key("broker.rack", default=None)
    replica_lag_time_max_ms: int = _key("replica.lag.time.max.ms", positive_option, default=30_000)
    replica_fetch_wait_max_ms: int = _key("replica.fetch.wait.max.ms", positive_option, default=500)
    # Bytes/s this broker, as leader, sends replicas catching up in a reassignment (unset:
    # unthrottled); PUT /v1/brokers/{id}/configs overrides it at runtime.
    replication_throttled_rate: int | None = _key(
        "replication.throttled.rate", positive_option, default=None
    )
    retention_check_interval_ms: int = _key(
        "log.retention.check.interval.ms", positive_option, default=300_000
    )
    # The log cleaner of compacted topics (broker/replica_manager.py rule 6): Kafka's names
    # and defaults (Kafka's rate is unbounded unless set)
    log_cleaner_enable: bool = _key("log.cleaner.enable", default=True)
    log_cleaner_backoff_ms: int = _key("log.cleaner.backoff.ms", positive_option, default=15_000)
    log_cleaner_io_max_bytes_per_second: int | None = _key(
        "log.cleaner.io.max.bytes.per.second", _positive_or_unset, default=None
    )
    socket_request_max_bytes: int = _key(
        "socket.request.max.bytes", positive_option, default=100 << 20
    )
    # Request bytes the broker holds at once, both listeners together, taken before a body
    # is read (security/request_budget.py). Kafka's name; its default is unbounded. 256 MiB:
    # three brokers on a 24 GiB host hold at most 768 MiB of requests between them, and a
    # request of `socket.request.max.bytes` (100 MiB) still fits the three quarters big
    # requests may fill; keep it at least 4/3 of socket.request.max.bytes.
    queued_max_request_bytes: int = _key(
        "queued.max.request.bytes", positive_option, default=DEFAULT_QUEUED_MAX_REQUEST_BYTES
    )
    # A Kafka connection that must authenticate (auth.required) and has not completed SASL
    # within this is closed, whatever it sends meanwhile (Kafka has no such key).
    kafka_authentication_timeout_ms: int = _key(
        "kafka.authentication.timeout.ms", positive_option, default=10_000
    )
    # The SASL mechanisms the Kafka listener offers (Kafka's name): leave PLAIN out to refuse
    # passwords sent as they are
    sasl_enabled_mechanisms: tuple[str, ...] = _key(
        "sasl.enabled.mechanisms", _sasl_mechanisms, default=SASL_MECHANISMS
    )
    json_request_max_bytes: int = _key("json.request.max.bytes", positive_option, default=8 << 20)
    fetch_max_bytes: int = _key("fetch.max.bytes", positive_option, default=55 << 20)
    timestamp_after_max_ms: int = _key(
        "log.message.timestamp.after.max.ms", _non_negative, default=3_600_000
    )
    timestamp_before_max_ms: int = _key(
        "log.message.timestamp.before.max.ms", _non_negative, default=2**63 - 1
    )
    offsets_topic_partitions: int = _key(
        "offsets.topic.num.partitions", positive_option, default=10
    )
    group_heartbeat_interval_ms: int = _key(
        "group.consumer.heartbeat.interval.ms", positive_option, default=1000
    )
    group_min_session_timeout_ms: int = _key(
        "group.consumer.min.session.timeout.ms", positive_option, default=1000
    )
    group_max_session_timeout_ms: int = _key(
        "group.consumer.max.session.timeout.ms", positive_option, default=30_000
    )
    group_max_size: int = _key("group.consumer.max.size", positive_option, default=200)
    # Kafka clients' classic groups (JoinGroup): Kafka's names and defaults
    classic_min_session_timeout_ms: int = _key(
        "group.min.session.timeout.ms", positive_option, default=6_000
    )
    classic_max_session_timeout_ms: int = _key(
        "group.max.session.timeout.ms", positive_option, default=1_800_000
    )
    group_initial_rebalance_delay_ms: int = _key(
        "group.initial.rebalance.delay.ms", _non_negative, default=3_000
    )
    offset_metadata_max_bytes: int = _key("offset.metadata.max.bytes", _non_negative, default=4096)
    # committed offsets of a group without members expire (groups/offsets.py rule 8)
    offsets_retention_minutes: int = _key(
        "offsets.retention.minutes", positive_option, default=10_080
    )
    offsets_retention_check_interval_ms: int = _key(
        "offsets.retention.check.interval.ms", positive_option, default=600_000
    )
    # transactions (issue 27; transactions/coordinator.py), Kafka's names and defaults but
    # the state topic's partitions (Kafka: 50)
    transaction_state_partitions: int = _key(
        "transaction.state.log.num.partitions", positive_option, default=10
    )
    transaction_max_timeout_ms: int = _key(
        "transaction.max.timeout.ms", positive_option, default=900_000
    )
    transactional_id_expiration_ms: int = _key(
        "transactional.id.expiration.ms", positive_option, default=604_800_000
    )
    transaction_abort_check_interval_ms: int = _key(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        positive_option,
        default=10_000,
    )
    transaction_expire_check_interval_ms: int = _key(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        positive_option,
        default=3_600_000,
    )
    # Topics a client's request creates (kraftlite/service.py rule 6): Kafka's names and,
    # but for the replication factor, its defaults (unset: min(3, live brokers), as any
    # topic created without one)
    auto_create_topics: bool = _key("auto.create.topics.enable", default=True)
    num_partitions: int = _key("num.partitions", _partition_count, default=1)
    default_replication_factor: int | None = _key(
        "default.replication.factor", _positive_or_unset, default=None
    )

    def listener_limits(self) -> ListenerLimits:
        # _Config's, plus the Kafka listener's authentication deadline (slots: no bare super)
        return dataclasses.replace(
            _Config.listener_limits(self),
            authentication_timeout_ms=self.kafka_authentication_timeout_ms,
        )

    @property
    def url(self) -> str:
        """The URL registered with the controllers: `advertised.url`, else `listen`'s."""
        return (self.advertised_url or f"{self.scheme}://{self.listen}").rstrip("/")

    @property
    def kafka_address(self) -> str | None:
        """The Kafka listener's "host:port" registered for clients, None without one."""
        if self.kafka_listen is None:
            return None
        return self.kafka_advertised_listener or self.kafka_listen


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig(_Config):
    """`kraftlite controller`: one voter of the metadata quorum."""

    node_id: int = _key("node.id", _non_negative)
    listen: str = _key("listen", _port_address, default="127.0.0.1:9401")
    raft: str = _key("raft", _port_address)
    # The address the Raft port binds, when `raft` (what the other voters dial) is not a local
    # interface (NAT, containers). Default: `raft` itself, never all interfaces.
    raft_bind: str | None = _key("raft.bind", _port_address, default=None)
    quorum: tuple[str, ...] = _key("quorum", _quorum)
    # Derived from `quorum` when unset; set it when voters list each other at different
    # addresses (NAT, proxies), since the derived id would then differ between them.
    cluster_id: str | None = _key("cluster.id", default=None)
    data_dir: Path = _key("metadata.log.dir")
    # Joining a running quorum (`--join`): no election until added and caught up.
    join: bool = _key("quorum.join", default=False)
    # Voters may be added and removed (pysyncobj's dynamic membership). Needs every voter to
    # list the others at the same addresses: a snapshot carries them (off for NAT, proxies).
    membership_changes: bool = _key("quorum.membership.changes.enable", default=True)
    # Shared by every voter: pysyncobj's transport is otherwise unauthenticated pickle. Also
    # read from the KRAFTLITE_RAFT_PASSWORD environment variable.
    raft_password: str | None = _key("raft.password", default=None)
    # The first super user, created by the active controller if it does not exist (its
    # password also from KRAFTLITE_BOOTSTRAP_PASSWORD); list it in super.users too.
    bootstrap_user: str | None = _key("auth.bootstrap.user", default=None)
    bootstrap_password: str | None = _key("auth.bootstrap.password", default=None)
    broker_session_timeout_ms: int = _key(
        "broker.session.timeout.ms", positive_option, default=9000
    )
    # Short, so a dead broker's heartbeats are soon late (fast fencing, controller/liveness.py)
    broker_heartbeat_interval_ms: int = _key(
        "broker.heartbeat.interval.ms", positive_option, default=500
    )
    leader_imbalance_check_interval_ms: int = _key(
        "leader.imbalance.check.interval.ms", positive_option, default=30_000
    )
    # Fast failure detection: a broker whose port refuses connections (its process is gone)
    # is fenced at once instead of after its session (controller/liveness.py).
    broker_liveness_probes: bool = _key("broker.liveness.probes.enable", default=True)
    # A broker whose heartbeats are this late and whose address answers none of the probes
    # meanwhile (a silent host, a pulled cable, a partition) is fenced then, not after its
    # session; leaders' leases run by it (controller/liveness.py rule 4). At or above the
    # session: off.
    broker_unreachable_timeout_ms: int = _key(
        "broker.unreachable.timeout.ms", _unreachable_timeout, default=2500
    )
    # Self-healing: a broker fenced this long has its replicas re-created on live brokers
    # (-1: never). Fifteen minutes by default, so a restart or a short outage moves nothing.
    broker_replacement_delay_ms: int = _key(
        "broker.replacement.delay.ms", _minus_one_or_more, default=900_000
    )
    # Committed metadata batches kept in memory for brokers that follow the log by offset; a
    # broker further behind gets a snapshot of the image first (docs/design/metadata.md).
    metadata_log_retained_batches: int = _key(
        "metadata.log.retained.batches", positive_option, default=100_000
    )

    def __post_init__(self) -> None:
        unreachable, interval = (
            self.broker_unreachable_timeout_ms,
            self.broker_heartbeat_interval_ms,
        )
        if unreachable < self.broker_session_timeout_ms and unreachable < 4 * interval:
            raise ConfigError(
                f"broker.unreachable.timeout.ms = {unreachable} must be at least four "
                f"broker.heartbeat.interval.ms ({4 * interval}): leases run by it"
            )

    def voters(self) -> dict[str, int]:
        """Raft address -> node id, from `quorum`."""
        return {address: int(node) for node, _, address in (v.partition("@") for v in self.quorum)}


ROLES: Mapping[str, type[_Config]] = {"broker": BrokerConfig, "controller": ControllerConfig}
