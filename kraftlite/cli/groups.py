"""`kraftlite groups`: consumer groups, their members, assignments, offsets and lag."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kraftlite.cli.common import (
    Connection,
    api_errors,
    bootstrap_option,
    output_option,
    print_json,
    show,
)


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
    show(listed, output, _groups_table)


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
        print_json({**described, "offsets": offsets})
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


def _groups_table(listed: list[dict[str, Any]]) -> Table:
    table = Table("group", "state", "members")
    for group in listed:
        table.add_row(group["group"], group["state"], str(group["members"]))
    return table
