"""Records in and out: `kraftlite produce` (one record per line) and `kraftlite consume`."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from kraftlite.cli.common import Connection, api_errors, bootstrap_option, print_json
from kraftlite.client import SyncConsumer, SyncProducer
from kraftlite.client.producer import CODECS
from kraftlite.clock import SystemClock

COMMIT_INTERVAL_MS = 5000


@click.command()
@click.argument("topic")
@click.option("--file", "source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key-separator", help="Split each line into KEY<sep>VALUE.")
@click.option("--acks", type=click.Choice(["all", "1", "0"]), default="all", show_default=True)
@click.option("--progress", is_flag=True, help="A progress bar with the rate on stderr.")
@click.option(
    "--transactional-id",
    help="Write every line in one transaction of this id: all of them become visible to "
    "read_committed readers, or (on any error) none.",
)
@click.option(
    "--compression",
    type=click.Choice(list(CODECS)),
    default="none",
    show_default=True,
    help="Send compressed Kafka batches, stored as sent (Kafka's compression.type).",
)
@bootstrap_option
@api_errors
def produce(  # noqa: PLR0917 - click passes every option positionally
    topic: str,
    source: Path | None,
    key_separator: str | None,
    acks: str,
    progress: bool,
    transactional_id: str | None,
    compression: str,
    bootstrap: Connection,
) -> None:
    """Produce one record per line of stdin (or --file)."""
    if transactional_id is not None and acks != "all":
        raise click.UsageError("--transactional-id writes with --acks all")
    lines = source.open("rb") if source else sys.stdin.buffer
    sent = 0
    settings: dict[str, Any] = {"acks": acks, "compression": compression}
    if transactional_id is not None:
        settings["transactional_id"] = transactional_id
    with (
        bootstrap.producer(**settings) as producer,
        _rate_bar("produced", total=None, enabled=progress) as advance,
        _transaction(producer, enabled=transactional_id is not None),
    ):
        futures = []
        for raw in lines:
            line = raw.rstrip(b"\r\n")
            key = None
            if key_separator is not None:
                head, sep, tail = line.partition(key_separator.encode())
                if sep:
                    key, line = head, tail
            futures.append(producer.send(topic, line, key))
            sent += 1
            advance(1)
        producer.flush()
        for future in futures:
            future.result()  # raises the first failure
    done = "committed" if transactional_id is not None else "produced"
    click.echo(f"{done} {sent} records to {topic}", err=True)


@contextlib.contextmanager
def _transaction(producer: SyncProducer, *, enabled: bool) -> Iterator[None]:
    """The block's records in one transaction, committed at its end, aborted on an error."""
    if not enabled:
        yield
        return
    producer.init_transactions()
    producer.begin_transaction()
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            producer.abort_transaction()
        raise
    producer.commit_transaction()


@click.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset.")
@click.option("--max-messages", type=click.IntRange(1), help="Stop after this many records.")
@click.option("--timeout-ms", type=click.IntRange(1), help="Stop after this long without one.")
@click.option("--partition", "partitions", type=int, multiple=True, help="Only these.")
@click.option("--group", help="Consume as a member of this group (offsets are committed).")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--progress", is_flag=True, help="A progress bar with the rate on stderr.")
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
    help="read_committed: only records of committed transactions (Kafka's isolation.level).",
)
@bootstrap_option
@api_errors
def consume(  # noqa: PLR0917 - click passes every option positionally
    topic: str,
    from_beginning: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    partitions: tuple[int, ...],
    group: str | None,
    output: str,
    progress: bool,
    isolation_level: str,
    bootstrap: Connection,
) -> None:
    """Print a topic's records (value per line; JSON lines with --output json)."""
    if group and partitions:
        raise click.UsageError("--group and --partition do not go together")
    reset = "earliest" if from_beginning else "latest"
    seen = 0
    # With a group, commit exactly what was printed (a poll may return more than we print).
    printed: dict[tuple[str, int], int] = {}
    clock = SystemClock()
    last_commit = clock.monotonic_ms()
    with (
        bootstrap.consumer(
            auto_offset_reset=reset,
            group_id=group,
            enable_auto_commit=False,
            isolation_level=isolation_level,
        ) as consumer,
        _rate_bar("consumed", total=max_messages, enabled=progress) as advance,
    ):
        if group:
            consumer.subscribe([topic])
        elif partitions:
            consumer.assign([(topic, p) for p in partitions])
        else:
            consumer.assign_topic(topic)
        idle_ms = 0
        while max_messages is None or seen < max_messages:
            records = consumer.poll(500)
            idle_ms = 0 if records else idle_ms + 500
            shown = records[: None if max_messages is None else max_messages - seen]
            for record in shown:
                _print_record(record, output)
                printed[(record.topic, record.partition)] = record.offset + 1
            seen += len(shown)
            advance(len(shown))
            if group and printed and clock.monotonic_ms() - last_commit > COMMIT_INTERVAL_MS:
                _commit_owned(consumer, printed)
                last_commit = clock.monotonic_ms()
            if timeout_ms is not None and idle_ms >= timeout_ms:
                break
        if group and printed:
            _commit_owned(consumer, printed)
    click.echo(f"consumed {seen} records", err=True)


def _commit_owned(consumer: SyncConsumer, printed: dict[tuple[str, int], int]) -> None:
    """Commit what was printed, for the partitions this member still owns only (a
    partition the group moved away is another member's to commit now)."""
    owned = set(consumer.assignment())
    for tp in [tp for tp in printed if tp not in owned]:
        del printed[tp]
    if printed:
        consumer.commit(dict(printed))


class RateColumn(ProgressColumn):
    """Records per second (rich's own speed columns speak bytes)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f} records/s")


@contextlib.contextmanager
def _rate_bar(what: str, *, total: int | None, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A rich progress bar with records/s on stderr, or a no-op."""
    if not enabled:
        yield lambda _: None
        return
    columns = (
        TextColumn(f"{what}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)


def _print_record(record: Any, output: str) -> None:
    if output == "json":
        print_json(
            {
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": None if record.key is None else record.key.decode("utf-8", "replace"),
                "value": None if record.value is None else record.value.decode("utf-8", "replace"),
            }
        )
    else:
        click.echo((record.value or b"").decode("utf-8", "replace"))
