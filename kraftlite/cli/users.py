"""`kraftlite users`: SCRAM users."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from kraftlite.cli.common import Connection, api_errors, bootstrap_option, output_option, show


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
    show(listed, output, _users_table)


@users.command("delete")
@click.argument("name")
@bootstrap_option
@api_errors
def users_delete(name: str, bootstrap: Connection) -> None:
    with bootstrap.admin() as admin:
        admin.delete_user(name)
    click.echo(f"deleted user {name}")


def _users_table(listed: list[dict[str, Any]]) -> Table:
    table = Table("user", "mechanisms")
    for user in listed:
        table.add_row(user["name"], ", ".join(c["mechanism"] for c in user["credentials"]))
    return table
