"""The root command loads each sub-command's module by name, only when it runs: every name
resolves to its command, a mistyped one is refused with the closest names, and a node's
command loads only what that kind of node runs (a node's start is mostly its imports)."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from kraftlite.cli import COMMANDS, main


def test_every_command_loads_under_its_name() -> None:
    context = click.Context(main)
    for name in COMMANDS:
        command = main.get_command(context, name)
        assert command is not None and command.name == name, name
    assert main.get_command(context, "nope") is None
    assert main.list_commands(context) == sorted(COMMANDS)


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("topic", "No such command 'topic'. Did you mean 'topics'?"),
        ("zzz", "No such command 'zzz'."),
    ],
)
def test_a_mistyped_command_is_refused_with_the_closest_names(typed: str, said: str) -> None:
    result = CliRunner().invoke(main, [typed])
    assert result.exit_code == 2 and said in result.output, result.output


@pytest.mark.parametrize(
    ("node", "never"),
    [
        ("controller", ("kraftlite.client", "kraftlite.broker", "kraftlite.service",
                        "kraftlite.groups", "kraftlite.kafka", "kraftlite.transactions")),
        ("broker", ("kraftlite.client", "kraftlite.api.controller_app",
                    "kraftlite.controller.quorum_controller", "kraftlite.raft")),
    ],
)  # fmt: skip
def test_a_node_loads_only_its_own_planes(node: str, never: tuple[str, ...]) -> None:
    script = (
        "import sys\n"
        "from kraftlite.cli import main\n"
        f"main.get_command(None, {node!r})\n"
        f"import kraftlite.node.{node}\n"
        f"print([m for m in sys.modules if m.startswith({never!r})])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout
