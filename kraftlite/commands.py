"""The admin and data tools of the command line, built on the client: `kraftlite topics`,
`produce`, `consume`, `cluster status`, and the elastic cluster's `brokers`, `cluster
rebalance`, `reassignments`, `leaders elect`, `quorum describe`.

Readable tables on a terminal, JSON with `--output json`. Exit codes: 0 success, 1 an
error answer from the cluster (its error code printed), 2 a usage error.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
from rich import filesize
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from kraftlite.client import (
    Credentials,
    ErrorCode,
    KraftliteError,
    SyncAdmin,
    SyncConsumer,
    SyncProducer,
)
from kraftlite.clock import SystemClock

DEFAULT_BOOTSTRAP = "http://127.0.0.1:9092"
COMMIT_INTERVAL_MS = 5000
EXIT_API_ERROR = 1
POLL_INTERVAL_S = 0.5  # how often --wait asks which partitions are still moving
DEFAULT_WAIT_TIMEOUT_S = 600.0
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the cluster is and how to authenticate (every client command's options)."""

    urls: str
    credentials: Credentials

    def admin(self) -> SyncAdmin:
        return SyncAdmin(self.urls, credentials=self.credentials)

    def producer(self, **settings: Any) -> SyncProducer:
        return SyncProducer(self.urls, credentials=self.credentials, **settings)

    def consumer(self, **settings: Any) -> SyncConsumer:
        return SyncConsumer(self.urls, credentials=self.credentials, **settings)


_FILE = click.Path(exists=True, dir_okay=False)
_CONNECTION_OPTIONS = [
    click.option(
        "--bootstrap",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        envvar="KRAFTLITE_BOOTSTRAP",
        help="Broker URL(s), comma-separated.",
    ),
    click.option("--user", envvar="KRAFTLITE_USER", help="A SCRAM user (HTTP Basic)."),
    click.option(
        "--password",
        envvar="KRAFTLITE_PASSWORD",
        help="The user's password; prefer KRAFTLITE_PASSWORD (asked for if missing).",
    ),
    click.option("--token", envvar="KRAFTLITE_TOKEN", help="A bearer token (`kraftlite token`)."),
    click.option("--ca-file", envvar="KRAFTLITE_CA_FILE", type=_FILE, help="CA for https://."),
    click.option("--cert-file", type=_FILE, help="A TLS client certificate (PEM)."),
    click.option("--key-file", type=_FILE, help="The client certificate's key (PEM)."),
]


def bootstrap_option(command: F) -> F:
    """The connection options; the command gets them as one `bootstrap: Connection`."""

    @functools.wraps(command)
    def wrapper(
        *args: Any,
        bootstrap: str,
        user: str | None,
        password: str | None,
        token: str | None,
        ca_file: str | None,
        cert_file: str | None,
        key_file: str | None,
        **kwargs: Any,
    ) -> Any:
        if user is not None and password is None:
            password = click.prompt(f"Password for {user}", hide_input=True, err=True)
        try:
            credentials = Credentials(user, password, token, ca_file, cert_file, key_file)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return command(*args, bootstrap=Connection(bootstrap, credentials), **kwargs)

    for option in reversed(_CONNECTION_OPTIONS):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


output_option = click.option(
    "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)


def api_errors(command: F) -> F:
    """An error answer from the cluster becomes one line on stderr and exit code 1."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KraftliteError as exc:
            click.echo(f"kraftlite: {exc.code.name}: {exc.message}", err=True)
            sys.exit(EXIT_API_ERROR)

    return wrapper  # type: ignore[return-value]


def _json(value: Any) -> None:
    click.echo(orjson.dumps(value).decode())


# ---------------------------------------------------------------------------- topics


@click.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", type=click.IntRange(1), default=1, show_default=True)
@click.option("--replication-factor", type=click.IntRange(1), default=None)
@click.option("--config", "configs", multiple=True, help="KEY=VALUE, repeatable.")
@bootstrap_option
@output_option
@api_errors
def topics_create(  # noqa: PLR0917 - click passes every option positionally
    name: str,
    partitions: int,
    replication_factor: int | None,
    configs: tuple[str, ...],
    bootstrap: Connection,
    output: str,
) -> None:
    parsed = _parse_configs(configs)
    with bootstrap.admin() as admin:
        created = admin.create_topic(name, partitions, replication_factor, parsed)
    _show_topic(created, output)


def _parse_configs(configs: tuple[str, ...]) -> dict[str, str]:
    parsed = {}
    for item in configs:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        parsed[key] = value
    return parsed


@topics.command("list")
@bootstrap_option
@output_option
@api_errors
def topics_list(bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        listed = admin.list_topics()
    if output == "json":
        _json(listed)
        return
    table = Table("topic", "partitions", "replication factor")
    for topic in listed:
        table.add_row(topic["name"], str(topic["partitions"]), str(topic["replication_factor"]))
    Console().print(table)


@topics.command("describe")
@click.argument("name")
@bootstrap_option
@output_option
@api_errors
def topics_describe(name: str, bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        _show_topic(admin.describe_topic(name), output)


@topics.command("delete")
@click.argument("name")
@bootstrap_option
@api_errors
def topics_delete(name: str, bootstrap: Connection) -> None:
    with bootstrap.admin() as admin:
        admin.delete_topic(name)
    click.echo(f"deleted {name}", err=True)


def _show_topic(topic: dict[str, Any], output: str) -> None:
    if output == "json":
        _json(topic)
        return
    configs = ", ".join(f"{k}={v}" for k, v in topic["configs"].items()) or "defaults"
    table = Table(
        "partition", "leader", "epoch", "replicas", "isr", "log start", "high watermark",
        title=f"{topic['name']} ({configs})",
    )  # fmt: skip
    for p in topic["partitions"]:
        table.add_row(
            str(p["partition"]),
            str(p["leader"]),
            str(p["leader_epoch"]),
            ",".join(map(str, p["replicas"])),
            ",".join(map(str, p["isr"])),
            str(p.get("log_start_offset", "")),
            str(p.get("high_watermark", "")),
        )
    Console().print(table)


# ---------------------------------------------------------------------------- produce


@click.command()
@click.argument("topic")
@click.option("--file", "source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key-separator", help="Split each line into KEY<sep>VALUE.")
@click.option("--acks", type=click.Choice(["all", "1", "0"]), default="all", show_default=True)
@click.option("--progress", is_flag=True, help="A progress bar with the rate on stderr.")
@bootstrap_option
@api_errors
def produce(  # noqa: PLR0917 - click passes every option positionally
    topic: str,
    source: Path | None,
    key_separator: str | None,
    acks: str,
    progress: bool,
    bootstrap: Connection,
) -> None:
    """Produce one record per line of stdin (or --file)."""
    lines = source.open("rb") if source else sys.stdin.buffer
    sent = 0
    with (
        bootstrap.producer(acks=acks) as producer,
        _rate_bar("produced", total=None, enabled=progress) as advance,
    ):
        futures = []
        for raw in lines:
            line = raw.rstrip(b"\r\n")
            key = None
            if key_separator is not None:
                head, sep, tail = line.partition(key_separator.encode())
                if sep:
                    key, line = head, tail
            futures.append(producer.send(topic, line, key))
            sent += 1
            advance(1)
        producer.flush()
        for future in futures:
            future.result()  # raises the first failure
    click.echo(f"produced {sent} records to {topic}", err=True)


# ---------------------------------------------------------------------------- consume


@click.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset.")
@click.option("--max-messages", type=click.IntRange(1), help="Stop after this many records.")
@click.option("--timeout-ms", type=click.IntRange(1), help="Stop after this long without one.")
@click.option("--partition", "partitions", type=int, multiple=True, help="Only these.")
@click.option("--group", help="Consume as a member of this group (offsets are committed).")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--progress", is_flag=True, help="A progress bar with the rate on stderr.")
@bootstrap_option
@api_errors
def consume(  # noqa: PLR0917 - click passes every option positionally
    topic: str,
    from_beginning: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    partitions: tuple[int, ...],
    group: str | None,
    output: str,
    progress: bool,
    bootstrap: Connection,
) -> None:
    """Print a topic's records (value per line; JSON lines with --output json)."""
    if group and partitions:
        raise click.UsageError("--group and --partition do not go together")
    reset = "earliest" if from_beginning else "latest"
    seen = 0
    # With a group, commit exactly what was printed (a poll may return more than we print).
    printed: dict[tuple[str, int], int] = {}
    clock = SystemClock()
    last_commit = clock.monotonic_ms()
    with (
        bootstrap.consumer(
            auto_offset_reset=reset, group_id=group, enable_auto_commit=False
        ) as consumer,
        _rate_bar("consumed", total=max_messages, enabled=progress) as advance,
    ):
        if group:
            consumer.subscribe([topic])
        elif partitions:
            consumer.assign([(topic, p) for p in partitions])
        else:
            consumer.assign_topic(topic)
        idle_ms = 0
        while max_messages is None or seen < max_messages:
            records = consumer.poll(500)
            idle_ms = 0 if records else idle_ms + 500
            shown = records[: None if max_messages is None else max_messages - seen]
            for record in shown:
                _print_record(record, output)
                printed[(record.topic, record.partition)] = record.offset + 1
            seen += len(shown)
            advance(len(shown))
            if group and printed and clock.monotonic_ms() - last_commit > COMMIT_INTERVAL_MS:
                _commit_owned(consumer, printed)
                last_commit = clock.monotonic_ms()
            if timeout_ms is not None and idle_ms >= timeout_ms:
                break
        if group and printed:
            _commit_owned(consumer, printed)
    click.echo(f"consumed {seen} records", err=True)


def _commit_owned(consumer: SyncConsumer, printed: dict[tuple[str, int], int]) -> None:
    """Commit what was printed, for the partitions this member still owns only (a
    partition the group moved away is another member's to commit now)."""
    owned = set(consumer.assignment())
    for tp in [tp for tp in printed if tp not in owned]:
        del printed[tp]
    if printed:
        consumer.commit(dict(printed))


class RateColumn(ProgressColumn):
    """Records per second (rich's own speed columns speak bytes)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f} records/s")


@contextlib.contextmanager
def _rate_bar(what: str, *, total: int | None, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A rich progress bar with records/s on stderr, or a no-op."""
    if not enabled:
        yield lambda _: None
        return
    columns = (
        TextColumn(f"{what}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)


def _print_record(record: Any, output: str) -> None:
    if output == "json":
        _json(
            {
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": None if record.key is None else record.key.decode("utf-8", "replace"),
                "value": None if record.value is None else record.value.decode("utf-8", "replace"),
            }
        )
    else:
        click.echo((record.value or b"").decode("utf-8", "replace"))


# ---------------------------------------------------------------------------- cluster


@click.group()
def cluster() -> None:
    """The cluster's brokers and controllers: status, rebalance."""


@cluster.command("status")
@bootstrap_option
@output_option
@api_errors
def cluster_status(bootstrap: Connection, output: str) -> None:
    """The overview in one screen: the quorum, the brokers with their load, and the
    partitions that are under-replicated or offline (in red). What the caller may not
    see (the quorum and the figures need DESCRIBE on the cluster) is left out, saying so."""
    with bootstrap.admin() as admin:
        described = admin.cluster()
        brokers = admin.list_brokers()
        quorum = _if_allowed(admin.quorum, "the quorum")
        stats = _if_allowed(admin.cluster_stats, "the brokers' figures")
        if stats is not None and stats.get("rates") is None and stats.get("brokers"):
            time.sleep(1)  # rates are measured between two asks: nobody asked lately
            stats = _if_allowed(admin.cluster_stats, "the brokers' figures")
    if output == "json":  # GET /v1/cluster's answer, and the rest beside it
        _json({**described, "quorum": quorum, "registered_brokers": brokers, "stats": stats})
        return
    console = Console()
    console.print(_status_headline(described, quorum, stats))
    if quorum is not None:
        console.print(_quorum_table(quorum))
    console.print(_brokers_table(brokers, stats))


def _if_allowed(call: Callable[[], dict[str, Any]], what: str) -> dict[str, Any] | None:
    try:
        return call()
    except KraftliteError as exc:
        click.echo(f"{what}: not shown ({exc.code.name}: {exc.message})", err=True)
        return None


def _status_headline(
    described: dict[str, Any], quorum: dict[str, Any] | None, stats: dict[str, Any] | None
) -> Text:
    controller = described["controller"]
    line = Text(
        f"cluster {described['cluster_id']}   active controller {controller['leader_id']} "
        f"(term {controller['term']})"
    )
    if quorum is not None:
        line.append(f"   metadata offset {quorum['metadata_offset']}")
    if stats is None:
        return line
    for label, key in (
        ("under-replicated", "under_replicated_partitions"),
        ("offline", "offline_partitions"),
    ):
        count = stats.get(key, 0)
        line.append(f"   {label} ")
        line.append(str(count), style="bold red" if count else "green")
    rates = stats.get("rates") or {}
    if rates:
        line.append(
            f"   in {_rate(rates.get('produce_bytes'))}  out {_rate(rates.get('fetch_bytes'))}"
        )
    return line


def _quorum_table(quorum: dict[str, Any]) -> Table:
    leader = quorum.get("leader_id")
    table = Table(
        "controller", "state", "address", "url",
        title=f"quorum: leader {leader if leader is not None else '-'}, term {quorum['term']}, "
        f"commit index {quorum['commit_index']}",
    )  # fmt: skip
    lag_known = any("lag" in v for v in quorum["voters"])
    if lag_known:
        table.add_column("commit lag")
    for voter in quorum["voters"]:
        state = Text(voter["state"], style="red" if voter["state"] == "unreachable" else "")
        row: list[str | Text] = [str(voter["id"]), state, voter["address"], voter["url"] or "-"]
        if lag_known:
            row.append("-" if voter.get("lag") is None else str(voter["lag"]))
        table.add_row(*row)
    return table


def _brokers_table(brokers: list[dict[str, Any]], stats: dict[str, Any] | None) -> Table:
    figures = {b["id"]: b for b in (stats or {}).get("brokers", []) if b.get("answered")}
    table = Table(
        "broker", "state", "rack", "url", "kafka", "leaders", "replicas", "disk", "in", "out",
        title=f"brokers: {len(brokers)}",
    )  # fmt: skip
    for broker in brokers:
        found = figures.get(broker["id"])
        rates = (found or {}).get("rates") or {}
        table.add_row(
            str(broker["id"]),
            _broker_state(broker),
            broker.get("rack") or "-",
            broker["url"],
            broker.get("kafka") or "-",
            str(broker["leaders"]),
            str(broker["replicas"]),
            "-" if found is None else filesize.decimal(found["disk_bytes"]),
            _rate(rates.get("produce_bytes")),
            _rate(rates.get("fetch_bytes")),
        )
    return table


def _broker_state(broker: dict[str, Any]) -> Text:
    """GET /v1/brokers' state (active, fenced, draining, drained), coloured."""
    state = str(broker["state"])
    if broker.get("in_controlled_shutdown"):
        state = "shutting down"
    style = {"active": "green", "fenced": "bold red"}.get(state, "yellow")
    return Text(state, style=style)


def _rate(bytes_per_s: float | None) -> str:
    return "-" if bytes_per_s is None else filesize.decimal(int(bytes_per_s)) + "/s"


# ---------------------------------------------------------------------------- elastic cluster
# Every data move is a reassignment (KIP-455) that the controller starts and the brokers
# complete; --wait follows the moves started through GET /v1/reassignments.


def _wait_options(command: F) -> F:
    """--wait and --timeout-s, for commands that start moves."""
    for option in reversed(
        [
            click.option(
                "--wait", is_flag=True, help="Follow the moves started until they complete."
            ),
            click.option(
                "--timeout-s",
                type=click.FloatRange(min=0, min_open=True),
                default=DEFAULT_WAIT_TIMEOUT_S,
                show_default=True,
                help="With --wait: give up (exit 1) after this long.",
            ),
        ]
    ):
        command = option(command)
    return command


def _ids(brokers: Sequence[int]) -> str:
    return ",".join(map(str, brokers)) or "-"


def _show_moves(moves: list[dict[str, Any]], output: str, title: str) -> None:
    if output == "json":
        _json(moves)
        return
    if not moves:
        click.echo(f"{title}: none", err=True)
        return
    table = Table("topic", "partition", "from", "to", title=f"{title}: {len(moves)}")
    for move in moves:
        table.add_row(move["topic"], str(move["partition"]), _ids(move["from"]), _ids(move["to"]))
    Console().print(table)


@contextlib.contextmanager
def _moves_bar(what: str, total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar of partitions moved on stderr (the style of `_rate_bar`)."""
    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(what, total=total)
        yield lambda completed: bar.update(task, completed=completed)


def _await_moves(
    admin: SyncAdmin, partitions: Collection[tuple[str, int]], timeout_s: float
) -> None:
    """Poll the ongoing reassignments until none of `partitions` is listed, with a progress
    bar of those completed; exit 1 after `timeout_s`."""
    watched = set(partitions)
    if not watched:
        return
    clock = SystemClock()
    deadline = clock.monotonic_ms() + int(timeout_s * 1000)
    moving = watched
    with _moves_bar("partitions moved", len(watched)) as completed:
        while clock.monotonic_ms() < deadline:
            try:
                listed: list[dict[str, Any]] = admin.list_reassignments()
            except KraftliteError as exc:
                if not exc.retriable:  # a controller election, say: ask again
                    raise
            else:
                moving = watched & {(r["topic"], r["partition"]) for r in listed}
                completed(len(watched) - len(moving))
                if not moving:
                    break
            time.sleep(POLL_INTERVAL_S)
    if moving:
        click.echo(
            f"kraftlite: timed out after {timeout_s:g} s: {len(moving)} of {len(watched)} "
            "partitions still moving (`kraftlite reassignments list`)",
            err=True,
        )
        sys.exit(EXIT_API_ERROR)
    click.echo(f"{len(watched)} partitions moved", err=True)


def _moved(moves: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(m["topic"], m["partition"]) for m in moves]


@topics.command("alter")
@click.argument("name")
@click.option(
    "--replication-factor",
    type=click.IntRange(1),
    help="Reassign every partition to this many replicas.",
)
@click.option("--partitions", type=click.IntRange(1), help="Grow the topic to this many.")
@click.option("--config", "configs", multiple=True, help="KEY=VALUE, repeatable.")
@_wait_options
@bootstrap_option
@output_option
@api_errors
def topics_alter(  # noqa: PLR0917 - click passes every option positionally
    name: str,
    replication_factor: int | None,
    partitions: int | None,
    configs: tuple[str, ...],
    wait: bool,
    timeout_s: float,
    bootstrap: Connection,
    output: str,
) -> None:
    """Change a topic's configs, partition count or replication factor (by moving
    replicas; --wait follows the moves)."""
    if replication_factor is None and partitions is None and not configs:
        raise click.UsageError("give --replication-factor, --partitions or --config")
    parsed = _parse_configs(configs)
    moves: list[dict[str, Any]] = []
    with bootstrap.admin() as admin:
        if parsed:
            admin.alter_configs(name, parsed)
        if partitions is not None:
            admin.create_partitions(name, partitions)
        if replication_factor is not None:
            moves = admin.alter_replication_factor(name, replication_factor)
        if output == "json":
            _json({**admin.describe_topic(name), "moves": moves})
        elif replication_factor is not None:
            _show_moves(moves, output, f"{name}: moves started")
        if wait and moves:
            _await_moves(admin, _moved(moves), timeout_s)
        if output != "json":
            _show_topic(admin.describe_topic(name), output)


@cluster.command("rebalance")
@click.option("--dry-run", is_flag=True, help="Print the plan; move nothing.")
@_wait_options
@bootstrap_option
@output_option
@api_errors
def cluster_rebalance(
    dry_run: bool, wait: bool, timeout_s: float, bootstrap: Connection, output: str
) -> None:
    """Even out replicas and preferred leaders across the live brokers."""
    if dry_run and wait:
        raise click.UsageError("--dry-run and --wait do not go together")
    with bootstrap.admin() as admin:
        moves: list[dict[str, Any]] = admin.rebalance(dry_run=dry_run)
        _show_moves(moves, output, "moves planned (dry run)" if dry_run else "moves started")
        if wait and moves:
            _await_moves(admin, _moved(moves), timeout_s)
    if dry_run:
        click.echo(f"dry run: {len(moves)} moves planned, nothing changed", err=True)


# ---------------------------------------------------------------------------- brokers

_BROKER_COLUMNS = ("id", "url", "rack", "state", "replicas", "leaders")


@click.group()
def brokers() -> None:
    """Registered brokers: list, describe, drain (move everything off), remove."""


def _show_brokers(listed: list[dict[str, Any]], output: str) -> None:
    if output == "json":
        _json(listed)
        return
    table = Table(*_BROKER_COLUMNS)
    for broker in listed:
        table.add_row(*("-" if broker[c] is None else str(broker[c]) for c in _BROKER_COLUMNS))
    Console().print(table)


@brokers.command("list")
@bootstrap_option
@output_option
@api_errors
def brokers_list(bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        _show_brokers(admin.list_brokers(), output)


@brokers.command("describe")
@click.argument("broker_id", metavar="ID", type=click.IntRange(0))
@bootstrap_option
@output_option
@api_errors
def brokers_describe(broker_id: int, bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        described = admin.describe_broker(broker_id)
    if output == "json":
        _json(described)
        return
    _show_brokers([described], output)


@brokers.command("drain")
@click.argument("broker_id", metavar="ID", type=click.IntRange(0))
@_wait_options
@bootstrap_option
@output_option
@api_errors
def brokers_drain(
    broker_id: int, wait: bool, timeout_s: float, bootstrap: Connection, output: str
) -> None:
    """Move the broker's leaders, then its replicas, to other brokers; it receives nothing
    from here on. Remove it once drained."""
    with bootstrap.admin() as admin:
        moves: list[dict[str, Any]] = admin.drain_broker(broker_id)
        _show_moves(moves, output, f"broker {broker_id} draining: moves started")
        if wait:
            if moves:
                _await_moves(admin, _moved(moves), timeout_s)
            state = admin.describe_broker(broker_id)["state"]
            click.echo(f"broker {broker_id} is {state}", err=True)


@brokers.command("configs")
@click.argument("broker_id", metavar="ID", type=click.IntRange(0))
@click.option("--set", "settings", multiple=True, help="KEY=VALUE, repeatable.")
@click.option("--delete", "deleted", multiple=True, help="KEY: back to the static config.")
@bootstrap_option
@output_option
@api_errors
def brokers_configs(
    broker_id: int,
    settings: tuple[str, ...],
    deleted: tuple[str, ...],
    bootstrap: Connection,
    output: str,
) -> None:
    """Show or change a broker's dynamic configs (replication.throttled.rate)."""
    changes: dict[str, Any] = {**_parse_configs(settings), **dict.fromkeys(deleted)}
    with bootstrap.admin() as admin:
        configs = (
            admin.alter_broker_configs(broker_id, changes)
            if changes
            else admin.broker_configs(broker_id)
        )
    if output == "json":
        _json({"id": broker_id, "configs": configs})
        return
    for name, value in sorted(configs.items()):
        click.echo(f"{name}={value}")


@brokers.command("undrain")
@click.argument("broker_id", metavar="ID", type=click.IntRange(0))
@bootstrap_option
@api_errors
def brokers_undrain(broker_id: int, bootstrap: Connection) -> None:
    """Undo a drain: the broker may lead and receive replicas again (moves already started
    go on; `cluster rebalance` brings replicas back)."""
    with bootstrap.admin() as admin:
        admin.stop_draining(broker_id)
    click.echo(f"broker {broker_id} is no longer draining")


@brokers.command("remove")
@click.argument("broker_id", metavar="ID", type=click.IntRange(0))
@click.option(
    "--force",
    is_flag=True,
    help="A dead (fenced) broker still holding replicas: replace them at once.",
)
@bootstrap_option
@api_errors
def brokers_remove(broker_id: int, force: bool, bootstrap: Connection) -> None:
    """Unregister a broker that holds no replicas (drain it first)."""
    with bootstrap.admin() as admin:
        admin.remove_broker(broker_id, force=force)
    click.echo(f"removed broker {broker_id}", err=True)


# ---------------------------------------------------------------------------- reassignments

_REASSIGNMENT_COLUMNS = ("topic", "partition", "replicas", "adding", "removing", "isr", "leader")


@click.group()
def reassignments() -> None:
    """Partition moves (KIP-455): list, execute a plan, cancel."""


def _show_reassignments(listed: list[dict[str, Any]], output: str) -> None:
    if output == "json":
        _json(listed)
        return
    table = Table(*_REASSIGNMENT_COLUMNS, "error")
    for r in listed:
        if "error_code" in r:
            table.add_row(
                r["topic"], str(r["partition"]), *[""] * 5, f"{r['error_code']}: {r['message']}"
            )
            continue
        table.add_row(
            r["topic"],
            str(r["partition"]),
            _ids(r["replicas"]),
            _ids(r["adding"]),
            _ids(r["removing"]),
            _ids(r["isr"]),
            str(r["leader"]),
            "",
        )
    Console().print(table)


def _refused(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The partitions the cluster did not change, each one line on stderr."""
    refused = [a for a in answers if "error_code" in a]
    for a in refused:
        click.echo(
            f"kraftlite: {a['topic']}-{a['partition']}: {a['error_code']}: {a['message']}",
            err=True,
        )
    return refused


def _read_plan(path: Path) -> list[dict[str, Any]]:
    """A plan file: the body of POST /v1/reassignments, `{"partitions": [...]}`."""
    try:
        plan = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"{path} is not JSON: {exc}", param_hint="--file") from None
    items = plan.get("partitions") if isinstance(plan, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise click.BadParameter(
            f'{path} is not {{"partitions": [{{"topic", "partition", "replicas"}}, ...]}}',
            param_hint="--file",
        )
    return items


def _topic_partition(item: str) -> tuple[str, int]:
    topic, sep, index = item.rpartition(":")
    if not sep or not topic or not index.isdigit():
        raise click.BadParameter(f"{item!r} is not TOPIC:PARTITION", param_hint="PARTITIONS")
    return topic, int(index)


def _planned_partition(path: Path, item: dict[str, Any]) -> tuple[str, int]:
    topic, index = item.get("topic"), item.get("partition")
    if not isinstance(topic, str) or isinstance(index, bool) or not isinstance(index, int):
        raise click.BadParameter(
            f"{path}: {item!r} has no topic and partition", param_hint="--file"
        )
    return topic, index


_PLAN_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@reassignments.command("list")
@bootstrap_option
@output_option
@api_errors
def reassignments_list(bootstrap: Connection, output: str) -> None:
    """Every partition being moved."""
    with bootstrap.admin() as admin:
        listed: list[dict[str, Any]] = admin.list_reassignments()
    if output != "json" and not listed:
        click.echo("no reassignment in progress", err=True)
        return
    _show_reassignments(listed, output)


@reassignments.command("execute")
@click.option("--file", "plan_file", type=_PLAN_FILE, required=True, help="The plan (JSON).")
@_wait_options
@bootstrap_option
@output_option
@api_errors
def reassignments_execute(
    plan_file: Path, wait: bool, timeout_s: float, bootstrap: Connection, output: str
) -> None:
    """Start the moves of a plan file: `{"partitions": [{"topic", "partition",
    "replicas": [ids] | null}]}` (null cancels that partition's move)."""
    plan = _read_plan(plan_file)
    with bootstrap.admin() as admin:
        answers: list[dict[str, Any]] = admin.alter_reassignments(plan)
        _show_reassignments(answers, output)
        refused = _refused(answers)
        moving = [
            (a["topic"], a["partition"])
            for a in answers
            if "error_code" not in a and (a["adding"] or a["removing"])
        ]
        if wait:
            _await_moves(admin, moving, timeout_s)
    if refused:
        sys.exit(EXIT_API_ERROR)


@reassignments.command("cancel")
@click.argument("partitions", nargs=-1)
@click.option("--file", "plan_file", type=_PLAN_FILE, help="A plan: cancel its partitions.")
@bootstrap_option
@output_option
@api_errors
def reassignments_cancel(
    partitions: tuple[str, ...], plan_file: Path | None, bootstrap: Connection, output: str
) -> None:
    """Cancel moves: back to the original replicas. PARTITIONS are TOPIC:PARTITION."""
    wanted = [_topic_partition(p) for p in partitions]
    if plan_file is not None:
        wanted += [_planned_partition(plan_file, i) for i in _read_plan(plan_file)]
    if not wanted:
        raise click.UsageError("name the partitions (TOPIC:PARTITION ...) or give --file")
    with bootstrap.admin() as admin:
        answers: list[dict[str, Any]] = admin.cancel_reassignments(list(dict.fromkeys(wanted)))
    _show_reassignments(answers, output)
    if _refused(answers):
        sys.exit(EXIT_API_ERROR)


# ---------------------------------------------------------------------------- leaders


@click.group()
def leaders() -> None:
    """Partition leadership: preferred leader election."""


@leaders.command("elect")
@click.option("--topic", help="Only this topic's partitions (default: every partition).")
@click.option("--partition", "partitions", type=click.IntRange(0), multiple=True)
@bootstrap_option
@output_option
@api_errors
def leaders_elect(
    topic: str | None, partitions: tuple[int, ...], bootstrap: Connection, output: str
) -> None:
    """Move leadership back to each partition's preferred (first) replica where it is live
    and in sync. Exit 1 if one could not move."""
    if partitions and topic is None:
        raise click.UsageError("--partition needs --topic")
    with bootstrap.admin() as admin:
        wanted: list[tuple[str, int]] | None = None
        if topic is not None:
            indexes = partitions or [
                p["partition"] for p in admin.describe_topic(topic)["partitions"]
            ]
            wanted = [(topic, i) for i in indexes]
        elections: list[dict[str, Any]] = admin.elect_preferred_leaders(wanted)
    failed = [
        e
        for e in elections
        if e.get("error_code") not in {None, ErrorCode.ELECTION_NOT_NEEDED.name}
    ]
    if output == "json":
        _json(elections)
    elif not elections:
        click.echo("every partition is led by its preferred replica", err=True)
    else:
        table = Table("topic", "partition", "leader", "result")
        for e in elections:
            result = "elected" if "error_code" not in e else f"{e['error_code']}: {e['message']}"
            table.add_row(e["topic"], str(e["partition"]), str(e["leader"]), result)
        Console().print(table)
    if failed:
        click.echo(
            f"kraftlite: {len(failed)} of {len(elections)} partitions kept their leader",
            err=True,
        )
        sys.exit(EXIT_API_ERROR)


# ---------------------------------------------------------------------------- quorum


@click.group()
def quorum() -> None:
    """The controller quorum (Raft voters)."""


@quorum.command("describe")
@bootstrap_option
@output_option
@api_errors
def quorum_describe(bootstrap: Connection, output: str) -> None:
    """The voters, the leader, term and commit index (GET /v1/quorum)."""
    with bootstrap.admin() as admin:
        described = admin.quorum()
    _show_quorum(described, output)


@quorum.command("add-voter")
@click.option("--id", "node_id", type=click.IntRange(0), required=True, help="Its node id.")
@click.option("--raft", required=True, help="Its Raft address, HOST:PORT.")
@click.option("--url", required=True, help="Its HTTP URL, http(s)://HOST:PORT.")
@bootstrap_option
@output_option
@api_errors
def quorum_add_voter(node_id: int, raft: str, url: str, bootstrap: Connection, output: str) -> None:
    """Add a voter (started with `kraftlite controller ... --join`), one at a time."""
    with bootstrap.admin() as admin:
        _show_quorum(admin.add_voter(node_id, raft, url), output)


@quorum.command("remove-voter")
@click.argument("node_id", type=click.IntRange(0))
@bootstrap_option
@api_errors
def quorum_remove_voter(node_id: int, bootstrap: Connection) -> None:
    """Remove a voter (refused if the rest would have no live majority)."""
    with bootstrap.admin() as admin:
        admin.remove_voter(node_id)
    click.echo(f"voter {node_id} removed")


def _show_quorum(described: dict[str, Any], output: str) -> None:
    if output == "json":
        _json(described)
        return
    table = Table(
        "id", "address", "state", "url",
        title=f"leader {described['leader_id']} (term {described['term']}), commit index "
        f"{described['commit_index']}, metadata offset {described['metadata_offset']}",
    )  # fmt: skip
    for voter in described["voters"]:
        table.add_row(str(voter["id"]), voter["address"], voter["state"], voter.get("url") or "-")
    Console().print(table)


# ---------------------------------------------------------------------------- groups


@click.group()
def groups() -> None:
    """Consumer groups: list, describe (members, assignments, offsets and lag)."""


@groups.command("list")
@bootstrap_option
@output_option
@api_errors
def groups_list(bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        listed = admin.list_groups()
    if output == "json":
        _json(listed)
        return
    table = Table("group", "state", "members")
    for group in listed:
        table.add_row(group["group"], group["state"], str(group["members"]))
    Console().print(table)


@groups.command("describe")
@click.argument("group")
@bootstrap_option
@output_option
@api_errors
def groups_describe(group: str, bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        described = admin.describe_group(group)
        offsets = admin.group_offsets(group)
    if output == "json":
        _json({**described, "offsets": offsets})
        return
    members = Table(
        "member", "client", "epoch", "assignment", title=f"{group} ({described['state']})"
    )
    for m in described["members"]:
        owned = "; ".join(
            f"{a['topic']}:{','.join(map(str, a['partitions']))}" for a in m["assignment"]
        )
        members.add_row(m["member_id"], m["client_id"], str(m["member_epoch"]), owned or "-")
    lag = Table("topic", "partition", "committed", "high watermark", "lag")
    for o in offsets:
        lag.add_row(
            o["topic"],
            str(o["partition"]),
            str(o["offset"]),
            str(o["high_watermark"]),
            str(o["lag"]),
        )
    console = Console()
    console.print(members)
    console.print(lag)


# ---------------------------------------------------------------------------- security


@click.group()
def users() -> None:
    """SCRAM users: create (or change a password), list, delete."""


@users.command("create")
@click.argument("name")
@click.option(
    "--user-password",
    envvar="KRAFTLITE_NEW_USER_PASSWORD",
    help="The new user's password (asked for if missing; or KRAFTLITE_NEW_USER_PASSWORD).",
)
@click.option(
    "--mechanism",
    type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
    default="SCRAM-SHA-256",
    show_default=True,
)
@bootstrap_option
@api_errors
def users_create(
    name: str, user_password: str | None, mechanism: str, bootstrap: Connection
) -> None:
    if user_password is None:
        user_password = click.prompt(
            f"Password for {name}", hide_input=True, confirmation_prompt=True, err=True
        )
    with bootstrap.admin() as admin:
        created = admin.create_user(name, user_password, mechanism)
    click.echo(f"user {created['name']} ({mechanism})")


@users.command("list")
@bootstrap_option
@output_option
@api_errors
def users_list(bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        listed = admin.list_users()
    if output == "json":
        _json(listed)
        return
    table = Table("user", "mechanisms")
    for user in listed:
        table.add_row(user["name"], ", ".join(c["mechanism"] for c in user["credentials"]))
    Console().print(table)


@users.command("delete")
@click.argument("name")
@bootstrap_option
@api_errors
def users_delete(name: str, bootstrap: Connection) -> None:
    with bootstrap.admin() as admin:
        admin.delete_user(name)
    click.echo(f"deleted user {name}")


_ACL_COLUMNS = (
    "principal",
    "permission",
    "operation",
    "resource_type",
    "pattern_type",
    "resource_name",
    "host",
)


def _acl_options(command: F) -> F:
    for option in reversed(
        [
            click.option("--principal", help="User:<name>, or User:* for everyone."),
            click.option("--operation", help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, ..."),
            click.option("--resource-type", type=click.Choice(["TOPIC", "GROUP", "CLUSTER"])),
            click.option("--resource-name", help="A name, or * (every one)."),
            click.option("--pattern-type", type=click.Choice(["LITERAL", "PREFIXED"])),
            click.option("--permission", type=click.Choice(["ALLOW", "DENY"])),
            click.option("--host", help="A client address, or * (any)."),
        ]
    ):
        command = option(command)
    return command


def _given(**fields: str | None) -> dict[str, str]:
    return {k: v for k, v in fields.items() if v is not None}


@click.group()
def acls() -> None:
    """ACLs (Kafka's semantics: deny wins, no match is denied): add, list, remove."""


@acls.command("add")
@_acl_options
@bootstrap_option
@output_option
@api_errors
def acls_add(bootstrap: Connection, output: str, **fields: str | None) -> None:
    with bootstrap.admin() as admin:
        created = admin.create_acl(**_given(**fields))
    _show_acls([created], output)


@acls.command("list")
@_acl_options
@bootstrap_option
@output_option
@api_errors
def acls_list(bootstrap: Connection, output: str, **fields: str | None) -> None:
    with bootstrap.admin() as admin:
        listed = admin.list_acls(**_given(**fields))
    _show_acls(listed, output)


@acls.command("remove")
@_acl_options
@bootstrap_option
@output_option
@api_errors
def acls_remove(bootstrap: Connection, output: str, **fields: str | None) -> None:
    """Every ACL matching all the options given (at least one)."""
    given = _given(**fields)
    if not given:
        raise click.UsageError("name at least one field of the ACLs to remove")
    with bootstrap.admin() as admin:
        removed = admin.delete_acls(**given)
    _show_acls(removed, output)


def _show_acls(listed: list[dict[str, Any]], output: str) -> None:
    if output == "json":
        _json(listed)
        return
    table = Table(*_ACL_COLUMNS)
    for acl in listed:
        table.add_row(*(str(acl[c]) for c in _ACL_COLUMNS))
    Console().print(table)


@click.group()
def quotas() -> None:
    """Byte-rate quotas per principal: set, list."""


@quotas.command("set")
@click.argument("principal")
@click.option("--producer-byte-rate", type=click.FloatRange(min=0, min_open=True))
@click.option("--consumer-byte-rate", type=click.FloatRange(min=0, min_open=True))
@click.option("--request-percentage", type=click.FloatRange(min=0, min_open=True))
@click.option("--remove", "removed", multiple=True, help="A quota to remove (repeatable).")
@bootstrap_option
@api_errors
def quotas_set(  # noqa: PLR0917 - click passes every option positionally
    principal: str,
    producer_byte_rate: float | None,
    consumer_byte_rate: float | None,
    request_percentage: float | None,
    removed: tuple[str, ...],
    bootstrap: Connection,
) -> None:
    values: dict[str, float | None] = {
        k: v
        for k, v in {
            "producer_byte_rate": producer_byte_rate,
            "consumer_byte_rate": consumer_byte_rate,
            "request_percentage": request_percentage,
        }.items()
        if v is not None
    }
    values |= dict.fromkeys(removed)
    with bootstrap.admin() as admin:
        _json(admin.alter_quotas(principal, **values))


@quotas.command("list")
@bootstrap_option
@api_errors
def quotas_list(bootstrap: Connection) -> None:
    with bootstrap.admin() as admin:
        _json(admin.list_quotas())


@click.command()
@bootstrap_option
@api_errors
def token(bootstrap: Connection) -> None:
    """Print a bearer token for the authenticated user (use it with --token)."""
    with bootstrap.admin() as admin:
        issued = admin.create_token()
    click.echo(issued["token"])


COMMANDS = (
    topics,
    produce,
    consume,
    cluster,
    brokers,
    reassignments,
    leaders,
    quorum,
    groups,
    users,
    acls,
    quotas,
    token,
)
