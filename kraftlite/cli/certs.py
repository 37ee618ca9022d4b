"""`kraftlite certs`: a cluster CA, and certificates it signs for hosts and clients
(kraftlite/security/certs.py; docs/operations.md: A cluster across hosts)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import click

from kraftlite.security import certs as making

CA_CERT, CA_KEY = "ca.pem", "ca.key"


def _write(path: Path, data: bytes, *, secret: bool, force: bool) -> None:
    if path.exists() and not force:
        raise click.ClickException(f"{path} exists (--force replaces it)")
    # a private key is created readable by its owner only, never briefly by others
    mode = 0o600 if secret else 0o644
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)
    path.chmod(mode)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@click.group()
def certs() -> None:
    """Make a cluster's TLS certificates: its CA, one per host, one per client."""


@certs.command("ca")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", default="kraftlite cluster CA", show_default=True, help="Its subject CN.")
@click.option("--days", type=click.IntRange(1, 36500), default=making.CA_DAYS, show_default=True)
@click.option("--force", is_flag=True, help="Replace a CA already there.")
def ca(directory: Path, name: str, days: int, force: bool) -> None:
    """Create DIRECTORY/ca.pem (give it to every node and client) and DIRECTORY/ca.key
    (keep it off the cluster: it signs certificates)."""
    directory.mkdir(parents=True, exist_ok=True)
    made = making.make_ca(name, _now(), days)
    _write(directory / CA_KEY, made.key_pem, secret=True, force=force)
    _write(directory / CA_CERT, made.cert_pem, secret=False, force=force)
    click.echo(f"{directory / CA_CERT}")


@certs.command("issue")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("name")
@click.option(
    "--host",
    "hosts",
    multiple=True,
    help="An address the host is reached at (IP or DNS name); repeat for each. None: a "
    "client certificate, whose principal is User:CN=NAME.",
)
@click.option("--days", type=click.IntRange(1, 36500), default=making.LEAF_DAYS, show_default=True)
@click.option("--force", is_flag=True, help="Replace NAME's certificate if there is one.")
def issue(directory: Path, name: str, hosts: tuple[str, ...], days: int, force: bool) -> None:
    """Sign DIRECTORY/NAME.pem and DIRECTORY/NAME.key with DIRECTORY's CA."""
    if not name or "/" in name or name.startswith("."):
        raise click.BadParameter("a plain file name", param_hint="NAME")
    try:
        ca_made = making.Issued(
            (directory / CA_CERT).read_bytes(), (directory / CA_KEY).read_bytes()
        )
    except OSError as exc:
        raise click.ClickException(
            f"no CA in {directory} ({exc.strerror}): run `kraftlite certs ca`"
        ) from None
    try:
        made = making.issue(ca_made, name, list(hosts), _now(), days)
    except (ValueError, TypeError) as exc:
        raise click.ClickException(str(exc)) from None
    _write(directory / f"{name}.key", made.key_pem, secret=True, force=force)
    _write(directory / f"{name}.pem", made.cert_pem, secret=False, force=force)
    click.echo(f"{directory / f'{name}.pem'}")
