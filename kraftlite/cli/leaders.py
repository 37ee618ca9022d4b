"""`kraftlite leaders elect`: preferred (or, asked for, unclean) leader election."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kraftlite.cli.common import (
    EXIT_API_ERROR,
    Connection,
    api_errors,
    bootstrap_option,
    fail,
    output_option,
    print_json,
)
from kraftlite.client import ErrorCode


@click.group()
def leaders() -> None:
    """Partition leadership: preferred leader election."""


@leaders.command("elect")
@click.option("--topic", help="Only this topic's partitions (default: every partition).")
@click.option("--partition", "partitions", type=click.IntRange(0), multiple=True)
@click.option(
    "--unclean",
    is_flag=True,
    help="Give leaderless partitions a leader from any live replica, in sync or not "
    "(records only the lost in-sync replicas held are lost).",
)
@bootstrap_option
@output_option
@api_errors
def leaders_elect(
    topic: str | None,
    partitions: tuple[int, ...],
    unclean: bool,
    bootstrap: Connection,
    output: str,
) -> None:
    """Move leadership back to each partition's preferred (first) replica where it is live
    and in sync (with --unclean: elect a leader where there is none, from any live
    replica). Exit 1 if one could not move."""
    if partitions and topic is None:
        raise click.UsageError("--partition needs --topic")
    with bootstrap.admin() as admin:
        wanted: list[tuple[str, int]] | None = None
        if topic is not None:
            indexes = partitions or [
                p["partition"] for p in admin.describe_topic(topic)["partitions"]
            ]
            wanted = [(topic, i) for i in indexes]
        elections: list[dict[str, Any]] = admin.elect_preferred_leaders(wanted, unclean=unclean)
    failed = [
        e
        for e in elections
        if e.get("error_code") not in {None, ErrorCode.ELECTION_NOT_NEEDED.name}
    ]
    if output == "json":
        print_json(elections)
    elif not elections:
        click.echo("every partition is led by its preferred replica", err=True)
    else:
        table = Table("topic", "partition", "leader", "result")
        for e in elections:
            result = "elected" if "error_code" not in e else f"{e['error_code']}: {e['message']}"
            table.add_row(e["topic"], str(e["partition"]), str(e["leader"]), result)
        Console().print(table)
    if failed:
        fail(f"{len(failed)} of {len(elections)} partitions kept their leader", EXIT_API_ERROR)
