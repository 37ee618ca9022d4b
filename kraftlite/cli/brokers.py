"""`kraftlite brokers`: the registered brokers; drain, undrain, remove, dynamic configs."""

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

_BROKER_COLUMNS = ("id", "url", "rack", "state", "replicas", "leaders")


@click.group()
def brokers() -> None:
    """Registered brokers: list, describe, drain (move everything off), remove."""


@brokers.command("list")
@bootstrap_option
@output_option
@api_errors
def brokers_list(bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        show(admin.list_brokers(), output, _brokers_table)


@brokers.command("describe")
@click.argument("broker_id", metavar="ID", type=click.IntRange(0))
@bootstrap_option
@output_option
@api_errors
def brokers_describe(broker_id: int, bootstrap: Connection, output: str) -> None:
    with bootstrap.admin() as admin:
        described = admin.describe_broker(broker_id)
    show(described, output, lambda one: _brokers_table([one]))


@brokers.command("drain")
@click.argument("broker_id", metavar="ID", type=click.IntRange(0))
@wait_options
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
        show_moves(moves, output, f"broker {broker_id} draining: moves started")
        if wait:
            if moves:
                await_moves(admin, moved(moves), timeout_s)
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
    changes: dict[str, Any] = {**parse_configs(settings), **dict.fromkeys(deleted)}
    with bootstrap.admin() as admin:
        configs = (
            admin.alter_broker_configs(broker_id, changes)
            if changes
            else admin.broker_configs(broker_id)
        )
    if output == "json":
        print_json({"id": broker_id, "configs": configs})
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


def _brokers_table(listed: list[dict[str, Any]]) -> Table:
    table = Table(*_BROKER_COLUMNS)
    for broker in listed:
        table.add_row(*("-" if broker[c] is None else str(broker[c]) for c in _BROKER_COLUMNS))
    return table
