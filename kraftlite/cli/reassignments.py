"""`kraftlite reassignments`: the partition moves (KIP-455) in progress; execute a plan file,
cancel moves."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson
from rich.table import Table

from kraftlite.cli.common import (
    EXIT_API_ERROR,
    Connection,
    api_errors,
    bootstrap_option,
    output_option,
    show,
)
from kraftlite.cli.moves import await_moves, ids, wait_options

_REASSIGNMENT_COLUMNS = ("topic", "partition", "replicas", "adding", "removing", "isr", "leader")
_PLAN_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.group()
def reassignments() -> None:
    """Partition moves (KIP-455): list, execute a plan, cancel."""


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
    show(listed, output, _reassignments_table)


@reassignments.command("execute")
@click.option("--file", "plan_file", type=_PLAN_FILE, required=True, help="The plan (JSON).")
@wait_options
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
        show(answers, output, _reassignments_table)
        refused = _refused(answers)
        moving = [
            (a["topic"], a["partition"])
            for a in answers
            if "error_code" not in a and (a["adding"] or a["removing"])
        ]
        if wait:
            await_moves(admin, moving, timeout_s)
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
    show(answers, output, _reassignments_table)
    if _refused(answers):
        sys.exit(EXIT_API_ERROR)


def _reassignments_table(listed: list[dict[str, Any]]) -> Table:
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
            ids(r["replicas"]),
            ids(r["adding"]),
            ids(r["removing"]),
            ids(r["isr"]),
            str(r["leader"]),
            "",
        )
    return table


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
