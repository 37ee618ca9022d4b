"""`kraftlite groups`: consumer groups, their members, assignments, offsets and lag."""

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
    show,
)


@click.group()
def groups() -> None:
    """Consumer groups: list, describe (members, assignments, offsets and lag), delete
    offsets."""


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


@groups.command("delete-offsets")
@click.argument("group")
@click.argument("topics", nargs=-1, required=True, metavar="TOPIC[:PARTITION,...]...")
@bootstrap_option
@output_option
@api_errors
def groups_delete_offsets(
    group: str, topics: tuple[str, ...], bootstrap: Connection, output: str
) -> None:
    """Delete GROUP's committed offsets (Kafka's OffsetDelete, kafka-consumer-groups.sh
    --delete-offsets): of every partition of each TOPIC, or of those listed after it
    (orders:0,2). The group must have no members consuming those topics: a partition whose
    topic they consume keeps its offset (GROUP_SUBSCRIBED_TO_TOPIC), and the exit code is 1."""
    wanted: list[tuple[str, int]] = []
    with bootstrap.admin() as admin:
        for spec in topics:
            topic, listed, indexes = spec.partition(":")
            if not listed:
                count = len(admin.describe_topic(topic)["partitions"])
                wanted += [(topic, index) for index in range(count)]
                continue
            try:
                wanted += [(topic, int(index)) for index in indexes.split(",")]
            except ValueError:
                raise click.BadParameter(
                    f"{spec!r} is not TOPIC or TOPIC:PARTITION,...", param_hint="TOPICS"
                ) from None
        answered = admin.delete_group_offsets(group, wanted)
    show(answered, output, _deleted_table)
    kept = [a for a in answered if "error_code" in a]
    if kept:
        fail(
            f"{kept[0]['error_code']}: {len(kept)} of {len(answered)} offsets not deleted",
            EXIT_API_ERROR,
        )


def _deleted_table(answered: list[dict[str, Any]]) -> Table:
    table = Table("topic", "partition", "deleted")
    for entry in answered:
        table.add_row(entry["topic"], str(entry["partition"]), entry.get("error_code", "yes"))
    return table


def _groups_table(listed: list[dict[str, Any]]) -> Table:
    table = Table("group", "state", "members")
    for group in listed:
        table.add_row(group["group"], group["state"], str(group["members"]))
    return table
