"""The format of a node's data directory, recorded in it (`kraftlite-format.json`), so that a
node never starts on data it cannot read (issue 28: rolling upgrades, and a downgrade after
one).

Rules:
1. Every data directory says what wrote it: the node kind (a broker's partition logs, a
   controller's Raft journal), the storage format (the on-disk layout: LMDB databases and
   keys for a broker, pysyncobj's journal and snapshots for a controller) and the record
   format (the newest batch format it may hold: a broker's batch `magic`, a controller's
   metadata record encoding).
2. A node refuses, before opening anything, a directory of another kind, or one whose
   storage or record format is newer than it reads, with an error naming both versions; it
   never rewrites such a file. An older format than ours would be migrated here (there is
   none yet: format 1 is the first).
3. A directory with data but no format file was written before formats were recorded: it
   holds format 1, which this code reads; the file is added. An empty or missing one gets
   the current format.
4. The file is replaced atomically (a temporary file, fsync, rename, fsync of the directory):
   a crash leaves the old file or the new, never half of one.
5. The record format recorded is what the directory may hold, not all this node reads: a
   new broker directory records format 2, and a broker raises it to 3 just before it
   first stores a format 3 batch (`raise_record_format`, storage/log.py), so until then
   the kraftlite it was upgraded from still opens it (a rollback).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

from kraftlite import __version__
from kraftlite.protocol.batch import MAGIC_KAFKA, MAGIC_V2

FORMAT_FILE = "kraftlite-format.json"
Kind = Literal["broker", "controller"]
STORAGE_FORMAT = 1
RECORD_FORMAT: dict[str, int] = {"broker": MAGIC_V2, "controller": 1}  # a new directory's
READS_RECORD_FORMAT: dict[str, int] = {"broker": MAGIC_KAFKA, "controller": 1}  # rule 5


class DataFormatError(ValueError):
    """A data directory this node must not open."""


@dataclass(frozen=True)
class DataFormat:
    kind: str
    storage_format: int
    record_format: int
    written_by: str  # the kraftlite version that last recorded it (informational)


def current(kind: Kind) -> DataFormat:
    return DataFormat(kind, STORAGE_FORMAT, RECORD_FORMAT[kind], __version__)


def decide(kind: Kind, found: DataFormat | None, where: Path) -> DataFormat:
    """Rules 2, 3 and 5 (pure): the format to record, or DataFormatError."""
    ours = current(kind)
    if found is None:
        return ours  # empty, or written before formats were recorded (format 1)
    reads = DataFormat(kind, STORAGE_FORMAT, READS_RECORD_FORMAT[kind], __version__)
    if found.kind != kind:
        raise DataFormatError(
            f"{where} holds a kraftlite {found.kind}'s data, not a {kind}'s: "
            "point this node at its own directory"
        )
    for name, theirs, mine in (
        ("storage", found.storage_format, reads.storage_format),
        ("record", found.record_format, reads.record_format),
    ):
        if theirs > mine:
            raise DataFormatError(
                f"{where} has {name} format {theirs} (written by kraftlite {found.written_by}); "
                f"this kraftlite ({__version__}) reads {name} formats up to {mine}: run "
                f"kraftlite {found.written_by} or newer on it"
            )
    return replace(ours, record_format=max(found.record_format, ours.record_format))


def _read(path: Path) -> DataFormat | None:
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return None
    try:
        fields = json.loads(raw)
        return DataFormat(
            str(fields["kind"]),
            int(fields["storage_format"]),
            int(fields["record_format"]),
            str(fields.get("written_by", "unknown")),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise DataFormatError(f"{path} is not a kraftlite format file ({exc})") from None


def _write(directory: Path, recorded: DataFormat) -> None:
    """Rule 4."""
    target = directory / FORMAT_FILE
    temporary = directory / f".{FORMAT_FILE}.tmp"
    with temporary.open("w") as out:
        json.dump(asdict(recorded), out, indent=2)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())
    temporary.replace(target)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def check_data_dir(directory: Path, kind: Kind) -> DataFormat:
    """Check (and record) the format of `directory` before a node of `kind` opens it;
    DataFormatError if it must not."""
    directory.mkdir(parents=True, exist_ok=True)
    found = _read(directory / FORMAT_FILE)
    recorded = decide(kind, found, directory)
    if found != recorded:
        _write(directory, recorded)
    return recorded


def raise_record_format(directory: Path, kind: Kind, record_format: int) -> None:
    """Rule 5: record that `directory` may now hold batches of `record_format` (at once,
    before the first is written); nothing when it already says so."""
    found = _read(directory / FORMAT_FILE)
    recorded = decide(kind, found, directory)
    if recorded.record_format < record_format:
        _write(directory, replace(recorded, record_format=record_format))
