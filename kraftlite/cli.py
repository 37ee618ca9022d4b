"""The `kraftlite` command. Sub-commands arrive with the issues that need them, in the shape of
the contract's "Processes and the command line" (docs/cli.md).
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Any

import click
import orjson
import structlog
from rich.console import Console
from rich.table import Table

from kraftlite import __version__, eventloop
from kraftlite.api import tls
from kraftlite.config import ROLES, BrokerConfig, ConfigError, ControllerConfig
from kraftlite.logs import configure_logging
from kraftlite.protocol import batch as batch_format
from kraftlite.security.cluster_auth import MIN_SECRET_LENGTH, raft_password
from kraftlite.storage.log import LogStorage, StorageConfig

EXIT_CONFIG = 2  # the same code click uses for usage errors
INSECURE_HELP = (
    "Listen on a non-loopback address without TLS or client authentication (logged loudly)."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kraftlite")
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    help="Log lines on stderr: JSON, readable, or JSON unless stderr is a terminal.",
)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info"
)
def main(log_format: str, log_level: str) -> None:
    """kraftlite: a Kafka-style replicated commit log with a Raft controller quorum."""
    configure_logging(role="cli", node_id=None, log_format=log_format, level=log_level)


@main.command()
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
        click.echo(f"kraftlite: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    secret = _cluster_secret(loaded)
    password = (
        os.environ.get("KRAFTLITE_RAFT_PASSWORD") or loaded.raft_password or raft_password(secret)
    )
    if loaded.join and loaded.cluster_id is None:
        click.echo(
            "kraftlite: a joining voter needs the quorum's cluster.id (GET /v1/cluster)",
            err=True,
        )
        sys.exit(EXIT_CONFIG)
    if loaded.raft not in loaded.voters():
        click.echo(f"kraftlite: raft address {loaded.raft} is not one of quorum's voters", err=True)
        sys.exit(EXIT_CONFIG)
    _configure_logging(ctx, "controller", loaded.node_id, loaded.log_format, loaded.log_level)
    _check_exposure(loaded, insecure)
    bootstrap = os.environ.get("KRAFTLITE_BOOTSTRAP_PASSWORD") or loaded.bootstrap_password
    from kraftlite.node import run_controller  # noqa: PLC0415 - keep light commands light

    eventloop.run(run_controller(loaded, password, secret, bootstrap))


@main.command()
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
        click.echo(f"kraftlite: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    secret = _cluster_secret(loaded)
    _configure_logging(ctx, "broker", loaded.broker_id, loaded.log_format, loaded.log_level)
    _check_exposure(loaded, insecure)
    from kraftlite.node import run_broker  # noqa: PLC0415 - keep light commands light

    eventloop.run(run_broker(loaded, secret))


def _check_exposure(loaded: BrokerConfig | ControllerConfig, insecure: bool) -> None:
    """TLS settings must fit together; a listener others can reach needs TLS and client
    authentication unless --insecure says otherwise (exit 2)."""
    try:
        tls.check(loaded)
    except ConfigError as exc:
        click.echo(f"kraftlite: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
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
        click.echo(
            f"kraftlite: {loaded.listen} is reachable from other hosts but has no "
            f"{' and no '.join(missing)}; configure them, or pass --insecure",
            err=True,
        )
        sys.exit(EXIT_CONFIG)
    structlog.get_logger("kraftlite.audit").critical(
        "insecure_listener", listen=loaded.listen, missing=missing
    )


_WILDCARDS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - names them, binds nothing


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
        click.echo(f"kraftlite: {problem}", err=True)
        sys.exit(EXIT_CONFIG)
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
    click.echo(
        f"kraftlite: kafka.listen {loaded.kafka_listen} is reachable from other hosts but has "
        "no TLS or no client authentication (SASL SCRAM, with auth.required); configure "
        "them, or pass --insecure",
        err=True,
    )
    sys.exit(EXIT_CONFIG)


def _cluster_secret(loaded: BrokerConfig | ControllerConfig) -> str:
    """The cluster secret from KRAFTLITE_CLUSTER_SECRET or the config; exit 2 without one:
    a node that took unsigned internal calls would let anyone act as a broker.
    """
    secret = os.environ.get("KRAFTLITE_CLUSTER_SECRET") or loaded.cluster_secret
    if not secret or len(secret) < MIN_SECRET_LENGTH:
        click.echo(
            "kraftlite: set cluster.secret in the config or KRAFTLITE_CLUSTER_SECRET (the same "
            f"on every node, {MIN_SECRET_LENGTH}+ characters): nodes sign their calls to each "
            "other with it",
            err=True,
        )
        sys.exit(EXIT_CONFIG)
    return secret


@main.command()
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


def _configure_logging(
    ctx: click.Context, role: str, node_id: int, log_format: str, level: str
) -> None:
    parent = ctx.parent.params if ctx.parent else {}
    chosen = parent.get("log_format", "auto")
    configure_logging(
        role=role,
        node_id=node_id,
        log_format=log_format if chosen == "auto" else str(chosen),
        level=level,
    )


@main.group()
def config() -> None:
    """Check configuration files."""


@config.command("check")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--role",
    type=click.Choice(sorted(ROLES)),
    required=True,
    help="The process role the file configures.",
)
def config_check(file: Path, role: str) -> None:
    """Validate FILE for ROLE and print the effective configuration as JSON."""
    try:
        loaded = ROLES[role].load(file)
    except ConfigError as exc:
        click.echo(f"kraftlite: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    click.echo(orjson.dumps(loaded.as_mapping(), option=orjson.OPT_INDENT_2).decode())


@main.group()
def log() -> None:
    """Inspect a broker's partition logs on disk (like kafka-dump-log)."""


@log.command("dump")
@click.argument("log_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--partition", "partitions", multiple=True, help="Only this partition log.")
@click.option("--records", is_flag=True, help="Print every record, not only the summary.")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
def log_dump(log_dir: Path, partitions: tuple[str, ...], records: bool, output: str) -> None:
    """Summarise the partition logs in LOG_DIR (a stopped broker's log.dir)."""
    storage = LogStorage(StorageConfig(path=log_dir))
    try:
        names = list(partitions) or sorted(storage.partition_names())
        summaries = [_summary(storage, name, records) for name in names]
    finally:
        storage.close()
    if output == "json":
        click.echo(orjson.dumps({"partitions": summaries}).decode())
        return
    console = Console()
    table = Table("partition", "log start", "log end", "high watermark", "bytes", "epochs")
    for s in summaries:
        table.add_row(
            s["name"],
            str(s["log_start_offset"]),
            str(s["log_end_offset"]),
            str(s["high_watermark"]),
            str(s["size_bytes"]),
            " ".join(f"{e}@{o}" for e, o in s["epochs"]),
        )
    console.print(table)
    for s in summaries:
        for r in s.get("records", []):
            click.echo(
                f"{s['name']} offset={r['offset']} timestamp={r['timestamp']} "
                f"key={r['key']!r} value={r['value']!r}"
            )


def _summary(storage: LogStorage, name: str, with_records: bool) -> dict[str, Any]:
    log = storage.open_partition(name)
    summary: dict[str, Any] = {
        "name": name,
        "log_start_offset": log.log_start_offset,
        "log_end_offset": log.log_end_offset,
        "high_watermark": log.high_watermark,
        "size_bytes": log.size_bytes,
        "epochs": log.epochs(),
    }
    if with_records:
        summary["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": _text(r.key),
                "value": _text(r.value),
            }
            for batch in batch_format.decode_stream(log.read(log.log_start_offset, 1 << 62))
            for r in batch.records()
        ]
    return summary


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _add_client_commands() -> None:
    from kraftlite.commands import COMMANDS  # noqa: PLC0415 - after main exists

    for command in COMMANDS:
        main.add_command(command)


_add_client_commands()
