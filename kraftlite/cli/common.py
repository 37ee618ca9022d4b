"""What every client command shares: the connection options and the clients built from them,
`--output`, turning the cluster's error answers into exit codes, and JSON or a rich table.

Exit codes: 0 success, 1 an error answer from the cluster (its error code printed), 2 a
usage or configuration error (the code click uses for usage errors).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
import orjson

from kraftlite.errors import KraftliteError

if TYPE_CHECKING:  # loaded when a command uses them: `kraftlite broker` needs neither
    from rich.table import Table

    from kraftlite.client import Credentials, SyncAdmin, SyncConsumer, SyncProducer

DEFAULT_BOOTSTRAP = "http://127.0.0.1:9092"
EXIT_API_ERROR = 1
EXIT_CONFIG = 2  # the same code click uses for usage errors
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def fail(message: str, code: int) -> NoReturn:
    """`kraftlite: <message>` on stderr, then exit with `code`."""
    click.echo(f"kraftlite: {message}", err=True)
    sys.exit(code)


def stack_options(options: Iterable[Callable[[F], F]]) -> Callable[[F], F]:
    """One decorator applying `options` in order (the first is the first in --help)."""
    ordered = list(options)

    def decorate(command: F) -> F:
        for option in reversed(ordered):
            command = option(command)
        return command

    return decorate


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the cluster is and how to authenticate (every client command's options)."""

    urls: str
    credentials: Credentials

    def admin(self) -> SyncAdmin:
        from kraftlite.client import SyncAdmin  # noqa: PLC0415 - see the imports

        return SyncAdmin(self.urls, credentials=self.credentials)

    def producer(self, **settings: Any) -> SyncProducer:
        from kraftlite.client import SyncProducer  # noqa: PLC0415 - see the imports

        return SyncProducer(self.urls, credentials=self.credentials, **settings)

    def consumer(self, **settings: Any) -> SyncConsumer:
        from kraftlite.client import SyncConsumer  # noqa: PLC0415 - see the imports

        return SyncConsumer(self.urls, credentials=self.credentials, **settings)


_FILE = click.Path(exists=True, dir_okay=False)
_connection_options = stack_options(
    [
        click.option(
            "--bootstrap",
            default=DEFAULT_BOOTSTRAP,
            show_default=True,
            envvar="KRAFTLITE_BOOTSTRAP",
            help="Broker URL(s), comma-separated.",
        ),
        click.option("--user", envvar="KRAFTLITE_USER", help="A SCRAM user (HTTP Basic)."),
        click.option(
            "--password",
            envvar="KRAFTLITE_PASSWORD",
            help="The user's password; prefer KRAFTLITE_PASSWORD (asked for if missing).",
        ),
        click.option(
            "--token", envvar="KRAFTLITE_TOKEN", help="A bearer token (`kraftlite token`)."
        ),
        click.option("--ca-file", envvar="KRAFTLITE_CA_FILE", type=_FILE, help="CA for https://."),
        click.option("--cert-file", type=_FILE, help="A TLS client certificate (PEM)."),
        click.option("--key-file", type=_FILE, help="The client certificate's key (PEM)."),
    ]
)


def bootstrap_option(command: F) -> F:
    """The connection options; the command gets them as one `bootstrap: Connection`."""

    @functools.wraps(command)
    def wrapper(
        *args: Any,
        bootstrap: str,
        user: str | None,
        password: str | None,
        token: str | None,
        ca_file: str | None,
        cert_file: str | None,
        key_file: str | None,
        **kwargs: Any,
    ) -> Any:
        if user is not None and password is None:
            password = click.prompt(f"Password for {user}", hide_input=True, err=True)
        from kraftlite.client import Credentials  # noqa: PLC0415 - see the imports

        try:
            credentials = Credentials(user, password, token, ca_file, cert_file, key_file)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return command(*args, bootstrap=Connection(bootstrap, credentials), **kwargs)

    return _connection_options(wrapper)  # type: ignore[return-value]


output_option = click.option(
    "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)


def api_errors(command: F) -> F:
    """An error answer from the cluster becomes one line on stderr and exit code 1."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KraftliteError as exc:
            fail(f"{exc.code.name}: {exc.message}", EXIT_API_ERROR)

    return wrapper  # type: ignore[return-value]


def print_json(value: Any) -> None:
    click.echo(orjson.dumps(value).decode())


def show(value: T, output: str, table: Callable[[T], Table]) -> None:
    """`value` as one line of JSON with `--output json`, else `table(value)` on stdout."""
    if output == "json":
        print_json(value)
        return
    from rich.console import Console  # noqa: PLC0415 - see the imports

    Console().print(table(value))


def parse_configs(configs: tuple[str, ...]) -> dict[str, str]:
    """KEY=VALUE options as a mapping (a malformed one is a usage error of --config)."""
    parsed = {}
    for item in configs:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        parsed[key] = value
    return parsed
