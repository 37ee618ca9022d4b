"""`kraftlite log dump`: a stopped broker's partition logs on disk (like kafka-dump-log)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kraftlite.cli.common import print_json
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import stored as stored_batch
from kraftlite.storage.log import LogStorage, StorageConfig


@click.group()
def log() -> None:
    """Inspect a broker's partition logs on disk (like kafka-dump-log)."""


@log.command("dump")
@click.argument("log_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--partition", "partitions", multiple=True, help="Only this partition log.")
@click.option("--records", is_flag=True, help="Print every record, not only the summary.")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
def log_dump(log_dir: Path, partitions: tuple[str, ...], records: bool, output: str) -> None:
    """Summarise the partition logs in LOG_DIR (a stopped broker's log.dir)."""
    storage = LogStorage(StorageConfig(path=log_dir))
    try:
        names = list(partitions) or sorted(storage.partition_names())
        summaries = [_summary(storage, name, records) for name in names]
    finally:
        storage.close()
    if output == "json":
        print_json({"partitions": summaries})
        return
    console = Console()
    table = Table("partition", "log start", "log end", "high watermark", "bytes", "epochs")
    for s in summaries:
        table.add_row(
            s["name"],
            str(s["log_start_offset"]),
            str(s["log_end_offset"]),
            str(s["high_watermark"]),
            str(s["size_bytes"]),
            " ".join(f"{e}@{o}" for e, o in s["epochs"]),
        )
    console.print(table)
    for s in summaries:
        for r in s.get("records", []):
            click.echo(
                f"{s['name']} offset={r['offset']} timestamp={r['timestamp']} "
                f"key={r['key']!r} value={r['value']!r}"
            )


def _summary(storage: LogStorage, name: str, with_records: bool) -> dict[str, Any]:
    log = storage.open_partition(name)
    summary: dict[str, Any] = {
        "name": name,
        "log_start_offset": log.log_start_offset,
        "log_end_offset": log.log_end_offset,
        "high_watermark": log.high_watermark,
        "size_bytes": log.size_bytes,
        "epochs": log.epochs(),
    }
    if with_records:
        summary["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": _text(r.key),
                "value": _text(r.value),
            }
            for batch in stored_batch.decode_stream(log.read(log.log_start_offset, 1 << 62))
            if not batch_format.is_control(batch.header)  # a transaction's marker
            for r in batch.records()
            if r.offset >= log.log_start_offset  # the first batch may hold deleted ones
        ]
    return summary


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")
