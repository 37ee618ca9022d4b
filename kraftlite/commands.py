"""The admin and data tools of the command line, built on the client: `kraftlite topics`,
`produce`, `consume`, `cluster status`.

Readable tables on a terminal, JSON with `--output json`. Exit codes: 0 success, 1 an
error answer from the cluster (its error code printed), 2 a usage error.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
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

from kraftlite.client import Credentials, KraftliteError, SyncAdmin, SyncConsumer, SyncProducer
from kraftlite.clock import SystemClock

DEFAULT_BOOTSTRAP = "http://127.0.0.1:9092"
COMMIT_INTERVAL_MS = 5000
EXIT_API_ERROR = 1
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
    parsed = {}
    for item in configs:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        parsed[key] = value
    with bootstrap.admin() as admin:
        created = admin.create_topic(name, partitions, replication_factor, parsed)
    _show_topic(created, output)


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
    """The cluster's brokers and controllers."""


@cluster.command("status")
@bootstrap_option
@output_option
@api_errors
def cluster_status(bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        described = admin.cluster()
    if output == "json":
        _json(described)
        return
    controller = described["controller"]
    table = Table(
        "broker", "url", "rack", "fenced",
        title=f"cluster {described['cluster_id']} - active controller "
        f"{controller['leader_id']} (term {controller['term']})",
    )  # fmt: skip
    for broker in described["brokers"]:
        table.add_row(
            str(broker["id"]), broker["url"], broker["rack"] or "-", str(broker["fenced"])
        )
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


COMMANDS = (topics, produce, consume, cluster, groups, users, acls, quotas, token)
