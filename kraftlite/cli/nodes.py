"""The processes: `kraftlite controller` (one voter of the quorum), `kraftlite broker`, and
`kraftlite dev` (a whole local cluster). Each checks its configuration first: a bad one, a
missing cluster secret or a listener others can reach without TLS and client authentication
exits 2 before anything starts.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import click
import structlog

from kraftlite import eventloop
from kraftlite.api import tls
from kraftlite.cli.common import EXIT_CONFIG, fail
from kraftlite.config import BrokerConfig, ConfigError, ControllerConfig
from kraftlite.logs import configure_logging
from kraftlite.security.cluster_auth import MIN_SECRET_LENGTH, raft_password
from kraftlite.storage.data_format import DataFormatError, Kind, check_data_dir

INSECURE_HELP = (
    "Listen on a non-loopback address without TLS or client authentication (logged loudly)."
)
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - names them, binds nothing


@click.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="TOML file.")
@click.option("--node-id", type=int, help="This voter's id (node.id).")
@click.option("--listen", help="HTTP address HOST:PORT.")
@click.option("--raft", help="Raft address HOST:PORT.")
@click.option("--quorum", help="Every voter as ID@HOST:PORT, comma-separated.")
@click.option("--data-dir", type=click.Path(path_type=Path), help="Raft journal and snapshots.")
@click.option(
    "--join",
    is_flag=True,
    default=None,
    help="Join a running quorum: start no election until added (POST /v1/quorum/voters) "
    "and caught up.",
)
@click.option("--insecure", is_flag=True, help=INSECURE_HELP)
@click.pass_context
def controller(  # noqa: PLR0917 - click passes every option positionally
    ctx: click.Context,
    config_file: Path | None,
    node_id: int | None,
    listen: str | None,
    raft: str | None,
    quorum: str | None,
    data_dir: Path | None,
    join: bool | None,
    insecure: bool,
) -> None:
    """Run one voter of the controller quorum."""
    try:
        loaded = ControllerConfig.load(
            config_file,
            {
                "node.id": node_id,
                "listen": listen,
                "raft": raft,
                "quorum": quorum,
                "metadata.log.dir": data_dir,
                "quorum.join": join,
            },
        )
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    secret = _cluster_secret(loaded)
    password = (
        os.environ.get("KRAFTLITE_RAFT_PASSWORD") or loaded.raft_password or raft_password(secret)
    )
    if loaded.join and loaded.cluster_id is None:
        fail("a joining voter needs the quorum's cluster.id (GET /v1/cluster)", EXIT_CONFIG)
    if loaded.raft not in loaded.voters():
        fail(f"raft address {loaded.raft} is not one of quorum's voters", EXIT_CONFIG)
    _configure_logging(ctx, "controller", loaded.node_id, loaded.log_format, loaded.log_level)
    _check_exposure(loaded, insecure)
    _check_data_dir(loaded.data_dir, "controller")
    bootstrap = os.environ.get("KRAFTLITE_BOOTSTRAP_PASSWORD") or loaded.bootstrap_password
    with _loaded():
        from kraftlite.node.controller import run_controller  # noqa: PLC0415 - light commands

    if eventloop.run_node(run_controller(loaded, password, secret, bootstrap)):
        _start_again()


@click.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="TOML file.")
@click.option("--broker-id", type=int, help="This broker's id (broker.id).")
@click.option("--listen", help="HTTP address HOST:PORT.")
@click.option("--controllers", help="Controller URLs, comma-separated.")
@click.option("--data-dir", type=click.Path(path_type=Path), help="Partition logs (log.dir).")
@click.option("--rack", help="Rack or zone, for rack-aware replica placement.")
@click.option("--kafka-listen", help="Kafka protocol listener HOST:PORT (kafka.listen).")
@click.option("--insecure", is_flag=True, help=INSECURE_HELP)
@click.pass_context
def broker(  # noqa: PLR0917 - click passes every option positionally
    ctx: click.Context,
    config_file: Path | None,
    broker_id: int | None,
    listen: str | None,
    controllers: str | None,
    data_dir: Path | None,
    rack: str | None,
    kafka_listen: str | None,
    insecure: bool,
) -> None:
    """Run one broker."""
    try:
        loaded = BrokerConfig.load(
            config_file,
            {
                "broker.id": broker_id,
                "listen": listen,
                "controllers": controllers,
                "log.dir": data_dir,
                "broker.rack": rack,
                "kafka.listen": kafka_listen,
            },
        )
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    secret = _cluster_secret(loaded)
    _configure_logging(ctx, "broker", loaded.broker_id, loaded.log_format, loaded.log_level)
    _check_exposure(loaded, insecure)
    _check_data_dir(loaded.log_dir, "broker")
    with _loaded():
        from kraftlite.node.broker import run_broker  # noqa: PLC0415 - light commands

    if eventloop.run_node(run_broker(loaded, secret)):
        _start_again()


@contextlib.contextmanager
def _loaded() -> Iterator[None]:
    """The node's code imported with the cyclic collector off (see kraftlite/__main__.py),
    then everything made so far frozen out of its sight (gc.freeze): modules, classes and
    functions live as long as the process, so later full collections need not walk them.
    What the imports left unreachable in cycles (about 2,200 objects, 0.4 MiB) is frozen
    with them rather than collected first: a full collection here costs 57 ms a start."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def _start_again() -> NoReturn:
    """A restart asked through the API (api/restart.py), once the node has stopped as on
    SIGTERM: the same process runs the same command line again, with the code installed
    now. Its environment and open standard streams carry over; everything else was
    closed by the stop (Python opens files non-inheritable)."""
    structlog.get_logger(__name__).info("node_starting_again", argv=sys.orig_argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])  # noqa: S606 - ourselves


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("run/dev"),
    show_default=True,
    help="Every node's data, logs and the Raft password.",
)
@click.option("--controllers", type=click.IntRange(1, 5), default=3, show_default=True)
@click.option("--brokers", type=click.IntRange(1, 16), default=3, show_default=True)
@click.option("--base-port", type=click.IntRange(1024, 65000), default=9092, show_default=True)
def dev(data_dir: Path, controllers: int, brokers: int, base_port: int) -> None:
    """Run a whole local cluster in the foreground (every node its own process)."""
    from kraftlite.dev import run  # noqa: PLC0415 - keep light commands light

    sys.exit(run(data_dir, controllers, brokers, base_port))


def _check_data_dir(directory: Path, kind: Kind) -> None:
    """Refuse, before opening anything, a data directory this node cannot read (exit 2);
    record the format of one it can (kraftlite/storage/data_format.py)."""
    try:
        recorded = check_data_dir(directory, kind)
    except (DataFormatError, OSError) as exc:
        fail(f"kraftlite {kind}: {exc}", EXIT_CONFIG)
    structlog.get_logger().info(
        "data_format",
        data_dir=str(directory),
        storage_format=recorded.storage_format,
        record_format=recorded.record_format,
    )


def _check_exposure(loaded: BrokerConfig | ControllerConfig, insecure: bool) -> None:
    """TLS settings must fit together; a listener others can reach needs TLS and client
    authentication unless --insecure says otherwise (exit 2)."""
    try:
        tls.check(loaded)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    _check_kafka_exposure(loaded, insecure)
    if loaded.listens_on_loopback():
        return
    missing = [
        what
        for what, ok in (
            ("TLS (tls.cert.file, tls.key.file)", tls.enabled(loaded)),
            ("client authentication (auth.required)", loaded.clients_must_authenticate()),
        )
        if not ok
    ]
    if not missing:
        return
    if not insecure:
        fail(
            f"{loaded.listen} is reachable from other hosts but has no "
            f"{' and no '.join(missing)}; configure them, or pass --insecure",
            EXIT_CONFIG,
        )
    structlog.get_logger("kraftlite.audit").critical(
        "insecure_listener", listen=loaded.listen, missing=missing
    )


def _check_kafka_exposure(loaded: BrokerConfig | ControllerConfig, insecure: bool) -> None:
    """A Kafka listener reachable from other hosts needs the broker's TLS and client
    authentication (SASL SCRAM with auth.required), else --insecure (exit 2 otherwise)."""
    if not isinstance(loaded, BrokerConfig):
        return
    problem = None
    if loaded.kafka_listen is None and loaded.kafka_advertised_listener is not None:
        problem = "kafka.advertised.listener is set but kafka.listen is not"
    elif (
        loaded.kafka_listen is not None
        and loaded.kafka_advertised_listener is None
        and loaded.kafka_listen.rpartition(":")[0].strip("[]") in _WILDCARDS
    ):
        problem = (
            f"kafka.listen {loaded.kafka_listen} is a wildcard: clients cannot connect "
            "there; set kafka.advertised.listener"
        )
    if problem is not None:
        fail(problem, EXIT_CONFIG)
    if loaded.kafka_listen is None:
        return
    host = loaded.kafka_listen.rpartition(":")[0].strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        loopback = False
    secured = tls.enabled(loaded) and loaded.clients_must_authenticate()
    if loopback or secured or insecure:
        return
    fail(
        f"kafka.listen {loaded.kafka_listen} is reachable from other hosts but has "
        "no TLS or no client authentication (SASL SCRAM, with auth.required); configure "
        "them, or pass --insecure",
        EXIT_CONFIG,
    )


def _cluster_secret(loaded: BrokerConfig | ControllerConfig) -> str:
    """The cluster secret from KRAFTLITE_CLUSTER_SECRET or the config; exit 2 without one:
    a node that took unsigned internal calls would let anyone act as a broker.
    """
    secret = os.environ.get("KRAFTLITE_CLUSTER_SECRET") or loaded.cluster_secret
    if not secret or len(secret) < MIN_SECRET_LENGTH:
        fail(
            "set cluster.secret in the config or KRAFTLITE_CLUSTER_SECRET (the same "
            f"on every node, {MIN_SECRET_LENGTH}+ characters): nodes sign their calls to each "
            "other with it",
            EXIT_CONFIG,
        )
    return secret


def _configure_logging(
    ctx: click.Context, role: str, node_id: int, log_format: str, level: str
) -> None:
    """The node's own logging: its config's format unless the root's --log-format chose."""
    parent = ctx.parent.params if ctx.parent else {}
    chosen = parent.get("log_format", "auto")
    configure_logging(
        role=role,
        node_id=node_id,
        log_format=log_format if chosen == "auto" else str(chosen),
        level=level,
    )
