"""Data moves, shared by the commands that start them (`topics alter`, `cluster rebalance`,
`brokers drain`, `reassignments execute`). Every data move is a reassignment (KIP-455) that
the controller starts and the brokers complete; --wait follows the moves started through
GET /v1/reassignments.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kraftlite.cli.common import EXIT_API_ERROR, fail, print_json, stack_options
from kraftlite.client import KraftliteError, SyncAdmin
from kraftlite.clock import SystemClock

POLL_INTERVAL_S = 0.5  # how often --wait asks which partitions are still moving
DEFAULT_WAIT_TIMEOUT_S = 600.0

wait_options = stack_options(  # --wait and --timeout-s, for commands that start moves
    [
        click.option("--wait", is_flag=True, help="Follow the moves started until they complete."),
        click.option(
            "--timeout-s",
            type=click.FloatRange(min=0, min_open=True),
            default=DEFAULT_WAIT_TIMEOUT_S,
            show_default=True,
            help="With --wait: give up (exit 1) after this long.",
        ),
    ]
)


def ids(brokers: Sequence[int]) -> str:
    return ",".join(map(str, brokers)) or "-"


def show_moves(moves: list[dict[str, Any]], output: str, title: str) -> None:
    if output == "json":
        print_json(moves)
        return
    if not moves:
        click.echo(f"{title}: none", err=True)
        return
    table = Table("topic", "partition", "from", "to", title=f"{title}: {len(moves)}")
    for move in moves:
        table.add_row(move["topic"], str(move["partition"]), ids(move["from"]), ids(move["to"]))
    Console().print(table)


def moved(moves: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(m["topic"], m["partition"]) for m in moves]


@contextlib.contextmanager
def _moves_bar(what: str, total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar of partitions moved on stderr (the style of `produce --progress`)."""
    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(what, total=total)
        yield lambda completed: bar.update(task, completed=completed)


def await_moves(
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
        fail(
            f"timed out after {timeout_s:g} s: {len(moving)} of {len(watched)} "
            "partitions still moving (`kraftlite reassignments list`)",
            EXIT_API_ERROR,
        )
    click.echo(f"{len(watched)} partitions moved", err=True)
