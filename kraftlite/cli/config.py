"""`kraftlite config check`: validate a configuration file."""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from kraftlite.cli.common import EXIT_CONFIG, fail
from kraftlite.config import ROLES, ConfigError


@click.group()
def config() -> None:
    """Check configuration files."""


@config.command("check")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--role",
    type=click.Choice(sorted(ROLES)),
    required=True,
    help="The process role the file configures.",
)
def config_check(file: Path, role: str) -> None:
    """Validate FILE for ROLE and print the effective configuration as JSON."""
    try:
        loaded = ROLES[role].load(file)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    click.echo(orjson.dumps(loaded.as_mapping(), option=orjson.OPT_INDENT_2).decode())
