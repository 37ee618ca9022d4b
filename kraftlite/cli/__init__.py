"""The `kraftlite` command: the root group (`main`, the entry point) and its sub-commands, one
module per noun, in the shape of the contract's "Processes and the command line".

- nodes: the processes, `controller`, `broker` and `dev`
- config, log: `config check` and `log dump`, offline tools
- topics, records (`produce`, `consume`), groups, cluster, brokers, reassignments, leaders,
  quorum, users, acls, quotas, tokens (`token`): the admin and data tools, built on the client
- certs: a cluster CA and the certificates it signs, offline
- common, moves: what those share (connection options, output, exit codes; data moves)
"""

from __future__ import annotations

import difflib
import gc
import importlib

import click

from kraftlite import __version__
from kraftlite.logs import configure_logging

# Each command's module, imported only when that command runs (or --help lists them all):
# `kraftlite broker` loads no client and no table printer, and a tool no node code.
COMMANDS = {
    "controller": "nodes",
    "broker": "nodes",
    "dev": "nodes",
    "config": "config",
    "log": "log",
    "topics": "topics",
    "produce": "records",
    "consume": "records",
    "cluster": "cluster",
    "brokers": "brokers",
    "reassignments": "reassignments",
    "leaders": "leaders",
    "quorum": "quorum",
    "groups": "groups",
    "users": "users",
    "acls": "acls",
    "quotas": "quotas",
    "token": "tokens",
    "certs": "certs",
}


class _Commands(click.Group):
    """The root group, its sub-commands loaded by name (click's lazy-group pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        gc.disable()  # as kraftlite/__main__.py says: imports only make objects
        try:
            loaded = importlib.import_module(f"kraftlite.cli.{module}")
        finally:
            gc.enable()
        command = getattr(loaded, cmd_name)
        assert isinstance(command, click.Command)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's, with its "did you mean" for a mistyped name (click takes the names
        from the commands it holds, and this group holds none until one is asked for)."""
        name = args[0]
        if name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            close = sorted(difflib.get_close_matches(name, COMMANDS))
            hint = ""
            if len(close) == 1:
                hint = f" Did you mean {close[0]!r}?"
            elif close:
                hint = f" (Did you mean one of: {', '.join(map(repr, close))}?)"
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kraftlite")
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    help="Log lines on stderr: JSON, readable, or JSON unless stderr is a terminal.",
)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info"
)
def main(log_format: str, log_level: str) -> None:
    """kraftlite: a Kafka-style replicated commit log with a Raft controller quorum."""
    configure_logging(role="cli", node_id=None, log_format=log_format, level=log_level)


__all__ = ["main"]
