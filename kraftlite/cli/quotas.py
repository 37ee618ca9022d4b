"""`kraftlite quotas`: byte-rate and request quotas per principal (always JSON)."""

from __future__ import annotations

import click

from kraftlite.cli.common import Connection, api_errors, bootstrap_option, print_json


@click.group()
def quotas() -> None:
    """Byte-rate quotas per principal: set, list."""


@quotas.command("set")
@click.argument("principal")
@click.option("--producer-byte-rate", type=click.FloatRange(min=0, min_open=True))
@click.option("--consumer-byte-rate", type=click.FloatRange(min=0, min_open=True))
@click.option("--request-percentage", type=click.FloatRange(min=0, min_open=True))
@click.option("--remove", "removed", multiple=True, help="A quota to remove (repeatable).")
@bootstrap_option
@api_errors
def quotas_set(  # noqa: PLR0917 - click passes every option positionally
    principal: str,
    producer_byte_rate: float | None,
    consumer_byte_rate: float | None,
    request_percentage: float | None,
    removed: tuple[str, ...],
    bootstrap: Connection,
) -> None:
    values: dict[str, float | None] = {
        k: v
        for k, v in {
            "producer_byte_rate": producer_byte_rate,
            "consumer_byte_rate": consumer_byte_rate,
            "request_percentage": request_percentage,
        }.items()
        if v is not None
    }
    values |= dict.fromkeys(removed)
    with bootstrap.admin() as admin:
        print_json(admin.alter_quotas(principal, **values))


@quotas.command("list")
@bootstrap_option
@api_errors
def quotas_list(bootstrap: Connection) -> None:
    with bootstrap.admin() as admin:
        print_json(admin.list_quotas())
