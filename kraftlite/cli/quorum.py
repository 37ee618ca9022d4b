"""`kraftlite quorum`: the controller quorum's Raft voters; add and remove one."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from kraftlite.cli.common import Connection, api_errors, bootstrap_option, output_option, show


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
    show(described, output, _quorum_table)


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
        show(admin.add_voter(node_id, raft, url), output, _quorum_table)


@quorum.command("remove-voter")
@click.argument("node_id", type=click.IntRange(0))
@bootstrap_option
@api_errors
def quorum_remove_voter(node_id: int, bootstrap: Connection) -> None:
    """Remove a voter (refused if the rest would have no live majority)."""
    with bootstrap.admin() as admin:
        admin.remove_voter(node_id)
    click.echo(f"voter {node_id} removed")


def _quorum_table(described: dict[str, Any]) -> Table:
    table = Table(
        "id", "address", "state", "url",
        title=f"leader {described['leader_id']} (term {described['term']}), commit index "
        f"{described['commit_index']}, metadata offset {described['metadata_offset']}",
    )  # fmt: skip
    for voter in described["voters"]:
        table.add_row(str(voter["id"]), voter["address"], voter["state"], voter.get("url") or "-")
    return table
