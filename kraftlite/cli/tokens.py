"""`kraftlite token`: a bearer token for the authenticated user."""

from __future__ import annotations

import click

from kraftlite.cli.common import Connection, api_errors, bootstrap_option


@click.command()
@bootstrap_option
@api_errors
def token(bootstrap: Connection) -> None:
    """Print a bearer token for the authenticated user (use it with --token)."""
    with bootstrap.admin() as admin:
        issued = admin.create_token()
    click.echo(issued["token"])
