"""`kraftlite cluster`: the one-screen status, the rebalance, the rolling restart (roll.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click
from rich import filesize
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kraftlite.cli.common import (
    Connection,
    api_errors,
    bootstrap_option,
    output_option,
    print_json,
)
from kraftlite.cli.moves import await_moves, moved, show_moves, wait_options
from kraftlite.cli.roll import cluster_roll
from kraftlite.client import KraftliteError


@click.group()
def cluster() -> None:
    """The cluster's brokers and controllers: status, rebalance, a rolling restart."""


cluster.add_command(cluster_roll)


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
        print_json({**described, "quorum": quorum, "registered_brokers": brokers, "stats": stats})
        return
    console = Console()
    console.print(_status_headline(described, quorum, stats))
    if quorum is not None:
        console.print(_quorum_table(quorum))
    console.print(_brokers_table(brokers, stats))


@cluster.command("rebalance")
@click.option("--dry-run", is_flag=True, help="Print the plan; move nothing.")
@wait_options
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
        show_moves(moves, output, "moves planned (dry run)" if dry_run else "moves started")
        if wait and moves:
            await_moves(admin, moved(moves), timeout_s)
    if dry_run:
        click.echo(f"dry run: {len(moves)} moves planned, nothing changed", err=True)


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
