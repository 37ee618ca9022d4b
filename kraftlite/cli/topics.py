"""`kraftlite topics`: create, list, describe, alter and delete topics, and read a
compacted one as a table (`get`)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from kraftlite.cli.common import (
    Connection,
    api_errors,
    bootstrap_option,
    output_option,
    parse_configs,
    print_json,
    show,
)
from kraftlite.cli.moves import await_moves, moved, show_moves, wait_options


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
    parsed = parse_configs(configs)
    with bootstrap.admin() as admin:
        created = admin.create_topic(name, partitions, replication_factor, parsed)
    show(created, output, _topic_table)


@topics.command("list")
@bootstrap_option
@output_option
@api_errors
def topics_list(bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        listed = admin.list_topics()
    show(listed, output, _topics_table)


@topics.command("describe")
@click.argument("name")
@bootstrap_option
@output_option
@api_errors
def topics_describe(name: str, bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        show(admin.describe_topic(name), output, _topic_table)


@topics.command("get")
@click.argument("name")
@click.argument("key")
@click.option(
    "--partition",
    type=click.IntRange(0),
    default=None,
    help="Read this partition (default: the one Kafka's default partitioner sends KEY to).",
)
@bootstrap_option
@output_option
@api_errors
def topics_get(
    name: str, key: str, partition: int | None, bootstrap: Connection, output: str
) -> None:
    """A compacted topic read as a table: KEY's latest value (exit code 1 when it has
    none: never written, or deleted)."""
    with bootstrap.admin() as admin:
        found = admin.latest_value(name, key.encode(), partition=partition)
    if found is None:
        click.echo(f"{name} has no value for key {key!r}", err=True)
        raise SystemExit(1)
    value = found["value"].decode("utf-8", "backslashreplace")
    if output == "json":
        print_json({**{k: found[k] for k in ("partition", "offset", "timestamp")}, "key": key,
                    "value": value})  # fmt: skip
    else:
        click.echo(value)


@topics.command("table")
@click.argument("name")
@click.option(
    "--partition", type=click.IntRange(0), default=None, help="Only this partition's keys."
)
@click.option(
    "--limit", type=click.IntRange(1), default=None, help="At most this many keys (default: all)."
)
@bootstrap_option
@output_option
@api_errors
def topics_table(
    name: str, partition: int | None, limit: int | None, bootstrap: Connection, output: str
) -> None:
    """A compacted topic read as a table: each live key and its latest value, in key order,
    one per line (KEY<TAB>VALUE; with --output json, one JSON object per line)."""
    shown, after = 0, None
    with bootstrap.admin() as admin:
        while limit is None or shown < limit:
            page = 1000 if limit is None else min(1000, limit - shown)
            rows, after = admin.table_page(name, after=after, limit=page, partition=partition)
            if limit is not None:  # a key in several partitions may make a page longer
                rows = rows[: limit - shown]
            for row in rows:
                key = row["key"].decode("utf-8", "backslashreplace")
                value = row["value"].decode("utf-8", "backslashreplace")
                if output == "json":
                    print_json({**{k: row[k] for k in ("partition", "offset", "timestamp")},
                                "key": key, "value": value})  # fmt: skip
                else:
                    click.echo(f"{key}\t{value}")
            shown += len(rows)
            if after is None:
                break


@topics.command("delete")
@click.argument("name")
@bootstrap_option
@api_errors
def topics_delete(name: str, bootstrap: Connection) -> None:
    with bootstrap.admin() as admin:
        admin.delete_topic(name)
    click.echo(f"deleted {name}", err=True)


@topics.command("delete-records")
@click.argument("name")
@click.option(
    "--offset",
    type=click.IntRange(-1),
    required=True,
    help="Delete the records below this offset; -1: every committed record (the HW).",
)
@click.option(
    "--partition",
    "partitions",
    type=click.IntRange(0),
    multiple=True,
    help="Only these partitions (repeatable); default: all.",
)
@bootstrap_option
@output_option
@api_errors
def topics_delete_records(
    name: str, offset: int, partitions: tuple[int, ...], bootstrap: Connection, output: str
) -> None:
    """Delete a topic's records below an offset (Kafka's kafka-delete-records): each
    partition's log start moves there on every replica that could lead it."""
    with bootstrap.admin() as admin:
        chosen = partitions or tuple(
            p["partition"] for p in admin.describe_topic(name)["partitions"]
        )
        moved = [
            {"partition": p, "low_watermark": admin.delete_records(name, p, offset)} for p in chosen
        ]
    show(moved, output, _low_watermarks_table)


def _low_watermarks_table(moved: list[dict[str, Any]]) -> Table:
    table = Table("partition", "low watermark")
    for entry in moved:
        table.add_row(str(entry["partition"]), str(entry["low_watermark"]))
    return table


@topics.command("alter")
@click.argument("name")
@click.option(
    "--replication-factor",
    type=click.IntRange(1),
    help="Reassign every partition to this many replicas.",
)
@click.option("--partitions", type=click.IntRange(1), help="Grow the topic to this many.")
@click.option("--config", "configs", multiple=True, help="KEY=VALUE, repeatable.")
@wait_options
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
    parsed = parse_configs(configs)
    moves: list[dict[str, Any]] = []
    with bootstrap.admin() as admin:
        if parsed:
            admin.alter_configs(name, parsed)
        if partitions is not None:
            admin.create_partitions(name, partitions)
        if replication_factor is not None:
            moves = admin.alter_replication_factor(name, replication_factor)
        if output == "json":
            print_json({**admin.describe_topic(name), "moves": moves})
        elif replication_factor is not None:
            show_moves(moves, output, f"{name}: moves started")
        if wait and moves:
            await_moves(admin, moved(moves), timeout_s)
        if output != "json":
            show(admin.describe_topic(name), output, _topic_table)


def _topics_table(listed: list[dict[str, Any]]) -> Table:
    table = Table("topic", "partitions", "replication factor")
    for topic in listed:
        table.add_row(topic["name"], str(topic["partitions"]), str(topic["replication_factor"]))
    return table


def _topic_table(topic: dict[str, Any]) -> Table:
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
    return table
