"""`kraftlite acls`: access control lists (Kafka's semantics)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from kraftlite.cli.common import (
    Connection,
    api_errors,
    bootstrap_option,
    output_option,
    show,
    stack_options,
)

_ACL_COLUMNS = (
    "principal",
    "permission",
    "operation",
    "resource_type",
    "pattern_type",
    "resource_name",
    "host",
)
_acl_options = stack_options(
    [
        click.option("--principal", help="User:<name>, or User:* for everyone."),
        click.option("--operation", help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, ..."),
        click.option(
            "--resource-type", type=click.Choice(["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"])
        ),
        click.option("--resource-name", help="A name, or * (every one)."),
        click.option("--pattern-type", type=click.Choice(["LITERAL", "PREFIXED"])),
        click.option("--permission", type=click.Choice(["ALLOW", "DENY"])),
        click.option("--host", help="A client address, or * (any)."),
    ]
)


@click.group()
def acls() -> None:
    """ACLs (Kafka's semantics: deny wins, no match is denied): add, list, remove."""


@acls.command("add")
@_acl_options
@bootstrap_option
@output_option
@api_errors
def acls_add(bootstrap: Connection, output: str, **fields: str | None) -> None:
    with bootstrap.admin() as admin:
        created = admin.create_acl(**_given(**fields))
    show([created], output, _acls_table)


@acls.command("list")
@_acl_options
@bootstrap_option
@output_option
@api_errors
def acls_list(bootstrap: Connection, output: str, **fields: str | None) -> None:
    with bootstrap.admin() as admin:
        listed = admin.list_acls(**_given(**fields))
    show(listed, output, _acls_table)


@acls.command("remove")
@_acl_options
@bootstrap_option
@output_option
@api_errors
def acls_remove(bootstrap: Connection, output: str, **fields: str | None) -> None:
    """Every ACL matching all the options given (at least one)."""
    given = _given(**fields)
    if not given:
        raise click.UsageError("name at least one field of the ACLs to remove")
    with bootstrap.admin() as admin:
        removed = admin.delete_acls(**given)
    show(removed, output, _acls_table)


def _given(**fields: str | None) -> dict[str, str]:
    return {k: v for k, v in fields.items() if v is not None}


def _acls_table(listed: list[dict[str, Any]]) -> Table:
    table = Table(*_ACL_COLUMNS)
    for acl in listed:
        table.add_row(*(str(acl[c]) for c in _ACL_COLUMNS))
    return table
