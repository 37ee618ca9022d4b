"""The binary record batch, format v1 (`application/vnd.kraftlite.batch`).

Records travel and rest in batches: a producer encodes one, the leader stamps it with a base
offset and its leader epoch and stores it as one LMDB value, followers and consumers receive
the same bytes. docs/batch-format.md is the byte-level specification; this module is the
reference implementation. The rules it keeps:

1. A batch is self-delimiting: its header carries its length, so batches concatenate into a
   stream (a fetch response body) that `split_batches` cuts apart again.
2. Offsets inside a batch are dense: record i has offset `base_offset + i`.
3. The leader assigns `base_offset` and `leader_epoch`. Rewriting them touches the 48-byte
   header and its CRC only, never the body or `body_crc` (`stamp`). No per-record work.
4. Every byte is covered by exactly one CRC-32C (Castagnoli, as Kafka's RecordBatch):
   `header_crc` covers header bytes [0, 44), `body_crc` covers [48, batch_length). CRC-32C
   detects every error burst of up to 32 bits, so any single corrupted byte is caught.
5. The body is columnar and every section starts 8-byte aligned (batch_length is a multiple
   of 8): timestamps are an int64 array, keys and values are Arrow-style validity bitmaps
   plus uint32 lengths plus one data buffer. Readers such as the Spark source hand these
   buffers to Arrow without touching each record in Python; encoding is a few bulk calls.
6. `validate` is what a broker runs on an incoming batch: both CRCs plus O(columns) structural
   checks (section sizes add up exactly to batch_length, lengths sum to the data sizes,
   timestamps agree with the header). A batch that passes can be decoded by any reader.
7. A header value may be null (as Kafka's). Only a batch that holds one says so (attributes
   bit 1) and carries the `header_value_validity` bitmap at the end of its headers section;
   every other batch is byte for byte what it was before null header values existed, and
   encoding and reading it costs what it did (no per-record work is added for it).

8. Transactions (issue 27) are format v2 under attribute bits (docs/batch-format.md): a
   transactional producer's batch sets `ATTR_TRANSACTIONAL`; the marker that ends its
   transaction in a partition is a control batch (`encode_marker`) of one record whose key
   and value are Kafka's control key and marker value, big-endian as Kafka writes them
   (so the Kafka edge passes them through), with the marker's kind also in the header
   (`ATTR_COMMIT`), so a log's transactions are known from its headers alone.

9. Format 3 (issue 29) keeps a Kafka record batch as its producer sent it: v2's header
   (magic 3, the producer's id, epoch and sequence or -1s, no headers or control bits), then
   the Kafka batch, then zero padding to a multiple of 8. Its `body_crc` is the Kafka
   batch's own CRC (of its attributes to its end), so nothing is computed twice; the
   Kafka header's fields outside that CRC (base offset, length, leader epoch, magic) and
   those the two headers share must agree, which `checked_batches` checks. `stamp` writes
   the base offset and leader epoch into both headers, so a Kafka fetch sends the inner
   batch untouched. This module checks the envelope only: its records are Kafka's, which
   protocol/stored.py decodes (`_check` refuses to read them as columns).

All integers are little-endian (the byte order of Arrow buffers and of every machine we run on).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Final, NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

MAGIC_V1: Final = 1
MAGIC_V2: Final = 2  # v1 plus the idempotent producer's id, epoch and base sequence
# v2's header (a producer's id, epoch and sequence, or -1s) around a Kafka record batch kept as
# its producer sent it, compressed or not (rule 9; protocol/stored.py reads its records)
MAGIC_KAFKA: Final = 3
HEADER = struct.Struct("<qIBBHiIqqII")
HEADER_SIZE: Final = HEADER.size  # 48 (v1)
HEADER_V2 = struct.Struct("<qIBBHiIqqqhhiII")
HEADER_V2_SIZE: Final = HEADER_V2.size  # 64
_HEADER_CRC_SPAN: Final = 44  # header_crc covers bytes [0, 44): everything before itself
_HEADER_V2_CRC_SPAN: Final = 60
NO_PRODUCER_ID: Final = -1
ATTR_HAS_HEADERS: Final = 0x01
# the headers section ends with header_value_validity: set only when a header value is null
ATTR_NULL_HEADER_VALUES: Final = 0x02
# Transactions (issue 27; bits 2-4 stay free for compression), format v2 only: a
# transactional producer's records, and the commit or abort marker that ends its transaction
# in a partition (a control batch: one record, Kafka's control key and value, rule 8).
ATTR_TRANSACTIONAL: Final = 0x20
ATTR_CONTROL: Final = 0x40  # with ATTR_TRANSACTIONAL
ATTR_COMMIT: Final = 0x80  # with ATTR_CONTROL: a commit marker (clear: an abort marker)
_KNOWN_ATTRIBUTES: Final = (
    ATTR_HAS_HEADERS | ATTR_NULL_HEADER_VALUES | ATTR_TRANSACTIONAL | ATTR_CONTROL | ATTR_COMMIT
)
NO_SEQUENCE: Final = -1  # a control batch's base_sequence (Kafka's)
CONTROL_KEY = struct.Struct(">hh")  # Kafka's control record key: version 0, type
CONTROL_VALUE = struct.Struct(">hi")  # Kafka's marker value: version 0, coordinator epoch
CONTROL_ABORT: Final = 0
CONTROL_COMMIT: Final = 1
NO_LEADER_EPOCH: Final = -1
MAX_BATCH_BYTES: Final = 2**31 - 8  # uint32 fits more, but 2 GiB keeps Arrow int32 offsets valid

_LITTLE_ENDIAN = sys.byteorder == "little"
# A format 3 batch's Kafka batch (rule 9): base offset, length (of what follows it), leader
# epoch, magic, CRC, attributes, last offset delta; then, at 43, producer id, epoch, base
# sequence and record count. Big-endian, as Kafka's.
_KAFKA_HEAD = struct.Struct(">qiibIhi")
_KAFKA_PRODUCER = struct.Struct(">qhii")
_KAFKA_STAMP = struct.Struct(">q")
_KAFKA_EPOCH = struct.Struct(">i")
KAFKA_HEADER_SIZE: Final = 61
_KAFKA_CRC_FROM: Final = 21
_KAFKA_MAGIC: Final = 2
_KAFKA_TRANSACTIONAL: Final = 0x10
_KAFKA_CONTROL: Final = 0x20


Header: TypeAlias = tuple[str, bytes | None]
"""One record header: a name (text) and a value, which may be null (Kafka's headers)."""
Headers: TypeAlias = tuple[Header, ...]


class CorruptBatchError(ValueError):
    """The bytes are not a valid batch (bad CRC, bad structure, truncated, unknown magic)."""


def body_start(buf: bytes | bytearray | memoryview) -> int:
    """Where the body of a stored (validated) batch begins: after its v1, v2 or v3 header."""
    return HEADER_SIZE if buf[12] == MAGIC_V1 else HEADER_V2_SIZE


def names_producer(buf: bytes | bytearray | memoryview) -> bool:
    """A batch of an idempotent producer (format 2, or 3 with a producer id), from its
    header's bytes, unchecked: which batches a leader checks against its producers first."""
    if len(buf) < HEADER_V2_SIZE:
        return False
    magic = buf[12]
    return magic == MAGIC_V2 or (
        magic == MAGIC_KAFKA and int.from_bytes(buf[40:48], "little", signed=True) >= 0
    )


class BatchHeader(NamedTuple):
    """The fixed 48-byte header of a batch. See docs/batch-format.md for the byte layout.

    A NamedTuple rather than a dataclass: brokers build one per incoming batch, and a tuple is
    several times cheaper to create.
    """

    base_offset: int
    batch_length: int
    magic: int
    attributes: int
    leader_epoch: int
    record_count: int
    first_timestamp: int
    max_timestamp: int
    body_crc: int
    header_crc: int
    producer_id: int = NO_PRODUCER_ID  # v2: an idempotent producer's batch
    producer_epoch: int = -1
    base_sequence: int = -1  # the producer's sequence number of record 0 in its partition

    @property
    def header_size(self) -> int:
        return HEADER_SIZE if self.magic == MAGIC_V1 else HEADER_V2_SIZE

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record (sequences wrap at 2**31, as Kafka's do)."""
        return (self.base_sequence + self.record_count - 1) % 2**31

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        """The offset right after this batch: the log end offset once it is appended."""
        return self.base_offset + self.record_count


@dataclass(frozen=True, slots=True)
class Record:
    """One record to produce. `timestamp` None means "now" at encoding time."""

    value: bytes | None
    key: bytes | None = None
    headers: Headers = ()
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One record read back from a batch, with the offset the leader assigned."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch decoded into columns; `records()` turns it into per-record objects."""

    header: BatchHeader
    timestamps: array[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Headers]

    def records(self) -> Iterator[ConsumedRecord]:
        base = self.header.base_offset
        for i, (ts, key, value, hdrs) in enumerate(
            zip(self.timestamps, self.keys, self.values, self.headers, strict=True)
        ):
            yield ConsumedRecord(base + i, ts, key, value, hdrs)

    def record_at(self, offset: int) -> ConsumedRecord | None:
        """The record at `offset`, if this batch holds one there (without making the
        others: a key read wants one record of a batch of thousands)."""
        i = offset - self.header.base_offset
        if not 0 <= i < len(self.keys):
            return None
        return ConsumedRecord(
            offset, self.timestamps[i], self.keys[i], self.values[i], self.headers[i]
        )


# --------------------------------------------------------------------------------- encoding


def _pad(size: int) -> bytes:
    return b"\x00" * (-size % 8)


def _le(arr: array[int]) -> bytes:
    if not _LITTLE_ENDIAN:  # pragma: no cover - every supported platform is little-endian
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def _validity_bitmap(present: Sequence[bool]) -> bytes:
    """Arrow validity bitmap: bit i (LSB first) is 1 when item i is not null."""
    bits = "".join("1" if p else "0" for p in reversed(present))
    return int(bits, 2).to_bytes((len(present) + 7) // 8, "little")


def _binary_column(items: Sequence[bytes | None], what: str) -> list[bytes]:
    """[validity, pad, lengths, pad, data, pad] for a nullable bytes column."""
    count = len(items)
    if None in items:
        present = [item is not None for item in items]
        validity = _validity_bitmap(present)
        non_null: Sequence[bytes | None] = [b"" if item is None else item for item in items]
    else:
        validity = _all_valid(count)
        non_null = items
    try:
        lengths = array("I", map(len, non_null))  # type: ignore[arg-type]
        data = b"".join(non_null)  # type: ignore[arg-type]
    except TypeError as exc:
        raise TypeError(f"every {what} must be bytes or None") from exc
    length_bytes = _le(lengths)
    return [
        validity,
        _pad(len(validity)),
        length_bytes,
        _pad(len(length_bytes)),
        data,
        _pad(len(data)),
    ]


def _all_valid(count: int) -> bytes:
    full, rest = divmod(count, 8)
    return b"\xff" * full + (bytes([(1 << rest) - 1]) if rest else b"")


def encode_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int],
    headers: Sequence[Sequence[Header]] | None = None,
    base_offset: int = 0,
    leader_epoch: int = NO_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """Encode records given as columns into one batch.

    Producers leave `base_offset` 0 and `leader_epoch` -1: the leader stamps them. An
    idempotent producer gives its `producer_id` (>= 0), epoch and the partition's next
    `base_sequence`: the batch is then format v2, whose header carries them; a
    transactional producer's batch says so (`transactional`, rule 8).
    """
    producer = _producer(producer_id, producer_epoch, base_sequence, transactional)
    count = len(values)
    if count == 0:
        raise ValueError("a batch holds at least one record")
    if keys is None:
        keys = [None] * count
    if (
        len(keys) != count
        or len(timestamps) != count
        or (headers is not None and len(headers) != count)
    ):
        raise ValueError("keys, values, timestamps and headers must have the same length")
    timestamp_array = array("q", timestamps)
    parts: list[bytes] = [_le(timestamp_array), _pad(8 * count)]
    parts += _binary_column(keys, "key")
    parts += _binary_column(values, "value")
    attributes = ATTR_TRANSACTIONAL if transactional else 0
    if headers is not None and any(headers):
        header_parts, null_values = _headers_section(headers)
        attributes |= ATTR_HAS_HEADERS | (ATTR_NULL_HEADER_VALUES if null_values else 0)
        parts += header_parts

    return _assemble(
        parts,
        attributes,
        count,
        (timestamp_array[0], max(timestamp_array)),
        base_offset,
        leader_epoch,
        producer,
    )


def _producer(
    producer_id: int, epoch: int, base_sequence: int, transactional: bool = False
) -> tuple[int, int, int] | None:
    """An idempotent producer's header fields (format v2), checked; None for no producer."""
    if producer_id < 0:
        if transactional:
            raise ValueError("a transactional batch names its producer")
        return None
    if not (0 <= epoch < 2**15 and 0 <= base_sequence < 2**31):
        raise ValueError("producer epoch must be in [0, 32767] and sequence in [0, 2**31)")
    return (producer_id, epoch, base_sequence)


def _assemble(  # noqa: PLR0917 - a header's fields, and the body's parts
    parts: Sequence[bytes | memoryview],
    attributes: int,
    count: int,
    timestamps: tuple[int, int],
    base_offset: int,
    leader_epoch: int,
    producer: tuple[int, int, int] | None,
) -> bytes:
    """The batch: its header (lengths, `timestamps` = first and max, the body's CRC) and
    the body's parts, refused over MAX_BATCH_BYTES."""
    body_length = sum(map(len, parts))
    batch_length = (HEADER_SIZE if producer is None else HEADER_V2_SIZE) + body_length
    if batch_length > MAX_BATCH_BYTES:
        raise ValueError(f"batch of {batch_length} bytes exceeds {MAX_BATCH_BYTES}")
    body_crc = 0
    for part in parts:
        body_crc = crc32c(part, body_crc)
    header = _pack_header(
        base_offset,
        batch_length,
        attributes,
        leader_epoch,
        count,
        timestamps[0],
        timestamps[1],
        body_crc,
        producer,
    )
    return b"".join([header, *parts])


def _headers_section(headers: Sequence[Sequence[Header]]) -> tuple[list[bytes], bool]:
    """The headers section's parts (sections 8-12, and 13 when a value is null), and
    whether a value is null. Values without a null take the same bulk calls as ever: a
    null is noticed only by the TypeError `len(None)` raises."""
    counts = array("I", map(len, headers))
    flat = [pair for record_headers in headers for pair in record_headers]
    validity = None
    try:
        names = [name.encode("utf-8") for name, _ in flat]
        values = [value for _, value in flat]
        try:
            value_lengths = array("I", map(len, values))  # type: ignore[arg-type]
            value_data = b"".join(values)  # type: ignore[arg-type]
        except TypeError:
            if None not in values:
                raise
            validity = _validity_bitmap([value is not None for value in values])
            present = [b"" if value is None else value for value in values]
            value_lengths = array("I", map(len, present))
            value_data = b"".join(present)
    except (TypeError, AttributeError) as exc:
        raise TypeError("headers must be (str, bytes or None) pairs") from exc
    name_lengths = array("I", map(len, names))
    name_data = b"".join(names)
    sections = [_le(counts), _le(name_lengths), name_data, _le(value_lengths), value_data]
    if validity is not None:
        sections.append(validity)
    parts: list[bytes] = []
    for section in sections:
        parts += [section, _pad(len(section))]
    return parts, validity is not None


def kafka_envelope(
    kafka: bytes | bytearray | memoryview,
    *,
    first_timestamp: int,
    max_timestamp: int,
    producer: tuple[int, int, int],
    transactional: bool,
) -> bytes:
    """A format 3 batch (rule 9, producer form: base offset 0, leader epoch -1) around the
    Kafka batch `kafka`, whose records the caller decoded and found to be `first_timestamp`
    first and `max_timestamp` at most. Raises CorruptBatchError if `kafka` and the fields
    given do not make a batch `checked_batches` takes."""
    size = len(kafka)
    if size < KAFKA_HEADER_SIZE:
        raise CorruptBatchError("no Kafka batch header")
    inner = bytearray(kafka)
    _KAFKA_STAMP.pack_into(inner, 0, 0)
    _KAFKA_EPOCH.pack_into(inner, 12, NO_LEADER_EPOCH)
    inner += bytes(-size % 8)
    count = _KAFKA_PRODUCER.unpack_from(inner, 43)[3]
    crc = _KAFKA_HEAD.unpack_from(inner)[4]
    partial = HEADER_V2.pack(
        0,
        HEADER_V2_SIZE + len(inner),
        MAGIC_KAFKA,
        ATTR_TRANSACTIONAL if transactional else 0,
        0,
        NO_LEADER_EPOCH,
        count,
        first_timestamp,
        max_timestamp,
        *producer[:2],
        0,
        producer[2],
        crc,
        0,
    )
    span = _HEADER_V2_CRC_SPAN
    batch = partial[:span] + struct.pack("<I", crc32c(partial[:span])) + inner
    header = read_header(batch)
    kafka_batch(memoryview(batch), header)
    return batch


def _pack_header(  # noqa: PLR0917 - the header's fields, in their byte order
    base_offset: int,
    batch_length: int,
    attributes: int,
    leader_epoch: int,
    count: int,
    first_timestamp: int,
    max_timestamp: int,
    body_crc: int,
    producer: tuple[int, int, int] | None = None,
) -> bytes:
    if producer is not None:
        partial = HEADER_V2.pack(
            base_offset,
            batch_length,
            MAGIC_V2,
            attributes,
            0,
            leader_epoch,
            count,
            first_timestamp,
            max_timestamp,
            *producer[:2],
            0,
            producer[2],
            body_crc,
            0,
        )
        span = _HEADER_V2_CRC_SPAN
        return partial[:span] + struct.pack("<I", crc32c(partial[:span]))
    partial = HEADER.pack(
        base_offset,
        batch_length,
        MAGIC_V1,
        attributes,
        0,
        leader_epoch,
        count,
        first_timestamp,
        max_timestamp,
        body_crc,
        0,
    )
    return partial[:_HEADER_CRC_SPAN] + struct.pack("<I", crc32c(partial[:_HEADER_CRC_SPAN]))


class BinaryColumn(NamedTuple):
    """A nullable bytes column already in the body's terms (sections 2-4 or 5-7):
    `present[i]` is False when item i is null (`present` None: no item is), `lengths` the
    byte length of each item (0 for a null one), `data` the items' bytes joined in order
    (bytes, or a flat memoryview of bytes such as one over a numpy uint8 array)."""

    present: npt.NDArray[np.bool_] | None
    lengths: npt.NDArray[np.uint32]
    data: bytes | memoryview


def encode_columns(
    timestamps: npt.NDArray[np.int64],
    keys: BinaryColumn,
    values: BinaryColumn,
    *,
    base_offset: int = 0,
    leader_epoch: int = NO_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """`encode_batch` for records that are already columns (a converter that decoded them
    into arrays, as the Kafka edge does): the bytes `encode_batch` writes for the same
    records without headers, and the same `ValueError`s, with no per-record object.
    tests/unit/test_kafka_records_fast.py checks the two agree byte for byte."""
    producer = _producer(producer_id, producer_epoch, base_sequence, transactional)
    count = len(values.lengths)
    if count == 0:
        raise ValueError("a batch holds at least one record")
    if len(keys.lengths) != count or len(timestamps) != count:
        raise ValueError("keys, values, timestamps and headers must have the same length")
    parts: list[bytes | memoryview] = [
        timestamps.astype("<i8", copy=False).tobytes(),
        _pad(8 * count),
    ]
    parts += _column_parts(keys, count)
    parts += _column_parts(values, count)

    first_and_max = (int(timestamps[0]), int(timestamps.max()))
    attributes = ATTR_TRANSACTIONAL if transactional else 0
    return _assemble(parts, attributes, count, first_and_max, base_offset, leader_epoch, producer)


def encode_marker(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp: int,
    *,
    base_offset: int = 0,
    leader_epoch: int = NO_LEADER_EPOCH,
) -> bytes:
    """The control batch that ends a producer's transaction in a partition (rule 8): one
    record, key Kafka's control key (version 0, COMMIT or ABORT), value its marker value
    (version 0, the coordinator's epoch), no sequence. Only a partition's leader writes one,
    for the transaction coordinator."""
    if producer_id < 0 or not 0 <= producer_epoch < 2**15:
        raise ValueError("a marker names its producer id and epoch")
    key = CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = CONTROL_VALUE.pack(0, coordinator_epoch)
    parts: list[bytes | memoryview] = [array("q", [timestamp]).tobytes(), _pad(8)]
    parts += _binary_column([key], "key")
    parts += _binary_column([value], "value")
    attributes = ATTR_TRANSACTIONAL | ATTR_CONTROL | (ATTR_COMMIT if commit else 0)
    producer = (producer_id, producer_epoch, NO_SEQUENCE)
    return _assemble(
        parts, attributes, 1, (timestamp, timestamp), base_offset, leader_epoch, producer
    )


class Marker(NamedTuple):
    """A control batch's marker (rule 8)."""

    commit: bool
    coordinator_epoch: int


def marker_of(buf: bytes | bytearray | memoryview) -> Marker:
    """The marker of one whole control batch, checked as `validate` checks it; ValueError
    for a batch that is not one."""
    header, layout = _check(memoryview(buf))
    if not header.attributes & ATTR_CONTROL:
        raise ValueError("not a control batch")
    value = _bytes_of(layout.values, 0)
    return Marker(bool(header.attributes & ATTR_COMMIT), CONTROL_VALUE.unpack_from(value)[1])


def committed_views(
    buf: bytes | bytearray | memoryview, aborted: Iterable[tuple[int, int]]
) -> list[memoryview]:
    """The batches of a stream a read_committed reader returns records of (rule 8, as
    Kafka's consumers filter a fetch, docs/design/kafka-transactions.md [P20]): no marker,
    and no batch of a transaction in `aborted` ((producer id, first offset) pairs, the
    fetch's aborted transactions). An aborted transaction's batches are skipped from its
    first offset until its producer's next marker."""
    pending = sorted((first, pid) for pid, first in aborted)
    at = 0
    skipping: set[int] = set()
    kept: list[memoryview] = []
    for view in split_batches(buf):
        header = read_header(view)
        while at < len(pending) and pending[at][0] <= header.last_offset:
            skipping.add(pending[at][1])
            at += 1
        if header.attributes & ATTR_CONTROL:
            skipping.discard(header.producer_id)
        elif not (header.attributes & ATTR_TRANSACTIONAL and header.producer_id in skipping):
            kept.append(view)
    return kept


def is_transactional(header: BatchHeader) -> bool:
    return bool(header.attributes & ATTR_TRANSACTIONAL)


def is_control(header: BatchHeader) -> bool:
    return bool(header.attributes & ATTR_CONTROL)


def _column_parts(column: BinaryColumn, count: int) -> list[bytes | memoryview]:
    """What `_binary_column` writes, from a `BinaryColumn`: [validity, pad, lengths, pad,
    data, pad]. np.packbits with bitorder "little" is Arrow's bitmap, trailing bits 0."""
    present, lengths, data = column
    if isinstance(data, memoryview) and not (
        data.ndim == 1 and data.itemsize == 1 and data.c_contiguous
    ):
        raise ValueError("a column's data must be one contiguous run of bytes")
    if (present is not None and len(present) != count) or len(lengths) != count:
        raise ValueError("keys, values, timestamps and headers must have the same length")
    if int(lengths.sum(dtype=np.uint64)) != len(data):
        raise ValueError("a column's lengths do not add up to its data")
    validity = (
        _all_valid(count) if present is None else np.packbits(present, bitorder="little").tobytes()
    )
    length_bytes = lengths.astype("<u4", copy=False).tobytes()
    return [
        validity,
        _pad(len(validity)),
        length_bytes,
        _pad(len(length_bytes)),
        data,
        _pad(len(data)),
    ]


def encode_records(records: Sequence[Record], now_ms: int) -> bytes:
    """Encode `Record`s; a record without a timestamp gets `now_ms` (CreateTime)."""
    return encode_batch(
        [r.value for r in records],
        keys=[r.key for r in records],
        timestamps=[now_ms if r.timestamp is None else r.timestamp for r in records],
        headers=[r.headers for r in records],
    )


def stamp(batch: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int) -> bytearray:
    """A copy of `batch` with the leader's base offset and epoch and a fresh header CRC."""
    stamped = bytearray(batch)
    struct.pack_into("<q", stamped, 0, base_offset)
    struct.pack_into("<i", stamped, 16, leader_epoch)
    if stamped[12] == MAGIC_KAFKA:  # the Kafka batch's own (rule 9)
        _KAFKA_STAMP.pack_into(stamped, HEADER_V2_SIZE, base_offset)
        _KAFKA_EPOCH.pack_into(stamped, HEADER_V2_SIZE + 12, leader_epoch)
    span = _HEADER_CRC_SPAN if stamped[12] == MAGIC_V1 else _HEADER_V2_CRC_SPAN
    struct.pack_into("<I", stamped, span, crc32c(stamped[:span]))
    return stamped


def kept_spans(keep: Sequence[bool], count: int) -> list[tuple[int, int]]:
    """The [start, end) spans of consecutive records `keep` marks, of a batch of `count`."""
    if len(keep) != count:
        raise ValueError(f"keep names {len(keep)} records of {count}")
    spans = []
    start = 0
    while start < count:
        if not keep[start]:
            start += 1
            continue
        end = start
        while end < count and keep[end]:
            end += 1
        spans.append((start, end))
        start = end
    return spans


def kept_runs(decoded: DecodedBatch, keep: Sequence[bool]) -> list[bytes]:
    """A stored batch's records that `keep` marks, as stamped batches of consecutive offsets
    (log compaction: storage/log.py rule 7): each run keeps its records' offsets, timestamps,
    keys, values and headers, the batch's leader epoch, and an idempotent producer's id and
    epoch with the sequence of its first record. [] when nothing is kept; the batch itself
    (re-encoded) when everything is."""
    header = decoded.header
    runs: list[bytes] = []
    for start, end in kept_spans(keep, header.record_count):
        producer = header.producer_id
        runs.append(
            encode_batch(
                decoded.values[start:end],
                keys=decoded.keys[start:end],
                timestamps=decoded.timestamps[start:end],
                headers=decoded.headers[start:end],
                base_offset=header.base_offset + start,
                leader_epoch=header.leader_epoch,
                producer_id=producer,
                producer_epoch=header.producer_epoch if producer >= 0 else -1,
                base_sequence=(header.base_sequence + start) % 2**31 if producer >= 0 else -1,
                transactional=is_transactional(header),
            )
        )
    return runs


# --------------------------------------------------------------------------------- decoding


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse and check the header at `pos` (header CRC, magic, attributes, length)."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatchError(f"truncated batch header: {len(buf) - pos} of {HEADER_SIZE} bytes")
    magic = buf[pos + 12]
    if magic == MAGIC_V1:
        fields = HEADER.unpack_from(buf, pos)
        header = BatchHeader(*fields[:4], *fields[5:])
        reserved, span = fields[4], _HEADER_CRC_SPAN
    elif magic in {MAGIC_V2, MAGIC_KAFKA}:
        if len(buf) - pos < HEADER_V2_SIZE:
            raise CorruptBatchError(f"truncated batch header: {len(buf) - pos} bytes")
        f = HEADER_V2.unpack_from(buf, pos)
        # (base offset .. max timestamp, the CRCs, then the producer's id, epoch, sequence)
        header = BatchHeader(
            base_offset=f[0],
            batch_length=f[1],
            magic=f[2],
            attributes=f[3],
            leader_epoch=f[5],
            record_count=f[6],
            first_timestamp=f[7],
            max_timestamp=f[8],
            body_crc=f[13],
            header_crc=f[14],
            producer_id=f[9],
            producer_epoch=f[10],
            base_sequence=f[12],
        )
        reserved, span = f[4] | f[11], _HEADER_V2_CRC_SPAN
    else:
        raise CorruptBatchError(f"unsupported batch format version {magic}")
    view = memoryview(buf)[pos : pos + span]
    if crc32c(view) != header.header_crc:
        raise CorruptBatchError("batch header CRC mismatch")
    if reserved != 0 or header.attributes & ~_KNOWN_ATTRIBUTES:
        raise CorruptBatchError(f"unknown batch attributes {header.attributes:#x}")
    if header.record_count < 1:
        raise CorruptBatchError("a batch holds at least one record")
    if header.batch_length % 8 or header.batch_length < header.header_size:
        raise CorruptBatchError(f"invalid batch length {header.batch_length}")
    attributes = header.attributes
    control = attributes & ATTR_CONTROL
    producer = (header.producer_id, header.producer_epoch, header.base_sequence)
    if (magic == MAGIC_V2 or producer != (NO_PRODUCER_ID, -1, -1)) and not (
        header.producer_id >= 0
        and header.producer_epoch >= 0
        and (header.base_sequence == NO_SEQUENCE if control else header.base_sequence >= 0)
    ):
        raise CorruptBatchError("a v2 batch names its producer id, epoch and sequence")
    if magic == MAGIC_KAFKA and attributes & (
        ATTR_HAS_HEADERS | ATTR_NULL_HEADER_VALUES | ATTR_CONTROL
    ):
        raise CorruptBatchError(f"invalid attributes {attributes:#x} for a format 3 batch")
    if (
        (attributes & ATTR_TRANSACTIONAL and header.producer_id < 0)
        or (control and not attributes & ATTR_TRANSACTIONAL)
        or (attributes & ATTR_COMMIT and not control)
    ):
        raise CorruptBatchError(f"invalid transaction attributes {attributes:#x}")
    if control and (header.record_count != 1 or attributes & ATTR_HAS_HEADERS):
        raise CorruptBatchError("a control batch holds one record, without headers")
    if header.base_offset < 0:
        raise CorruptBatchError(f"negative base offset {header.base_offset}")
    return header


def null_keys(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[int]:
    """The indexes of this batch's records that have no key (`header` its, read by
    `read_header`), from the key validity bitmap alone: O(1) to find, one numpy pass to
    read. Before `validate`, as a compacted topic's produce
    checks it first: a batch too short to hold the bitmap answers [] (validation refuses
    it)."""
    count = header.record_count
    start = header.header_size + 8 * count  # the timestamps (a multiple of 8 bytes)
    end = start + (count + 7) // 8
    if end > min(len(buf), header.batch_length):
        return []
    valid = np.unpackbits(np.frombuffer(buf, np.uint8, end - start, start), bitorder="little")
    return [int(i) for i in np.flatnonzero(valid[:count] == 0)]


def _cut(buf: bytes | bytearray | memoryview) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Each batch of a stream of concatenated batches with its header (headers checked)."""
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        header = read_header(view, pos)
        end = pos + header.batch_length
        if end > len(view):
            raise CorruptBatchError(
                f"truncated batch: {len(view) - pos} of {header.batch_length} bytes"
            )
        yield header, view[pos:end]
        pos = end


def record_count(buf: bytes | bytearray | memoryview) -> int:
    """The records in a stream of stored batches, from their headers alone."""
    return sum(header.record_count for header, _ in _cut(buf))


def split_batches(buf: bytes | bytearray | memoryview) -> Iterator[memoryview]:
    """Cut a stream of concatenated batches into one memoryview per batch (headers checked)."""
    for _, view in _cut(buf):
        yield view


def checked_batches(
    buf: bytes | bytearray | memoryview,
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Cut a stream of stored batches (a replica fetch answer) into (header, batch), both
    CRCs checked, the structure not: a follower's path. Every stored batch passed
    `validate` on the leader that accepted it, so bytes whose CRCs match are a valid batch;
    the CRCs catch what transit or a disk did to them (Kafka's followers check the same).
    """
    for header, view in _cut(buf):
        if header.magic == MAGIC_KAFKA:
            kafka_batch(view, header)
        elif crc32c(view[header.header_size :]) != header.body_crc:
            raise CorruptBatchError("batch body CRC mismatch")
        yield header, view


def kafka_batch(view: memoryview, header: BatchHeader) -> memoryview:
    """The Kafka batch a format 3 batch holds (rule 9), its CRC checked, its header's fields
    held against the batch's `header` (read by `read_header`); CorruptBatchError
    otherwise. Its records are left as they are (protocol/stored.py reads them)."""
    if len(view) != header.batch_length:
        raise CorruptBatchError(f"a batch of {header.batch_length} bytes in {len(view)}")
    inner = view[HEADER_V2_SIZE:]
    if len(inner) < KAFKA_HEADER_SIZE:
        raise CorruptBatchError("a format 3 batch holds no Kafka batch header")
    base, length, epoch, magic, crc, attributes, last_delta = _KAFKA_HEAD.unpack_from(inner)
    producer_id, producer_epoch, sequence, count = _KAFKA_PRODUCER.unpack_from(inner, 43)
    size = 12 + length
    if not KAFKA_HEADER_SIZE <= size <= len(inner) < size + 8 or len(inner) != size + -size % 8:
        raise CorruptBatchError(f"a Kafka batch of {size} bytes in a format 3 batch's body")
    if any(inner[size:]):
        raise CorruptBatchError("a format 3 batch's padding is not zero")
    if (base, epoch, magic, crc, count, last_delta) != (
        header.base_offset,
        header.leader_epoch,
        _KAFKA_MAGIC,
        header.body_crc,
        header.record_count,
        header.record_count - 1,
    ) or (producer_id, producer_epoch, sequence) != (
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
    ):
        raise CorruptBatchError("a format 3 batch's two headers disagree")
    transactional = bool(attributes & _KAFKA_TRANSACTIONAL)
    if attributes & _KAFKA_CONTROL or transactional != bool(header.attributes & ATTR_TRANSACTIONAL):
        raise CorruptBatchError("a format 3 batch's two headers disagree on its attributes")
    if crc32c(inner[_KAFKA_CRC_FROM:size]) != crc:
        raise CorruptBatchError("batch body CRC mismatch")
    return inner[:size]


class _Column(NamedTuple):
    validity: memoryview | None  # Arrow validity bitmap; None when no item can be null
    lengths: memoryview  # uint32 little-endian, one per item
    data: memoryview


class _Layout(NamedTuple):
    """Where each section of a batch body is; built only after its sizes were checked."""

    timestamps: memoryview  # int64 little-endian, one per record
    keys: _Column
    values: _Column
    header_counts: memoryview | None  # uint32, headers per record
    header_names: _Column | None
    header_values: _Column | None  # its validity: section 13, when a value is null


def _ints(section: memoryview, typecode: str) -> array[int]:
    arr = array(typecode)
    arr.frombytes(section)
    if not _LITTLE_ENDIAN:  # pragma: no cover - every supported platform is little-endian
        arr.byteswap()
    return arr


# Below this many items, plain Python beats numpy's fixed cost per call (measured: a numpy
# reduction costs ~2-3 us whatever the size; Python's sum ~13 ns per item).
_NUMPY_FROM: Final = 64


def _sum_u32(section: memoryview, count: int) -> int:
    if count > _NUMPY_FROM:
        return int(np.add.reduce(np.frombuffer(section, "<u4"), dtype=np.uint64))
    return sum(_ints(section, "I"))


def _layout(view: memoryview, header: BatchHeader) -> _Layout:
    """Find every section of the body, checking that they fill the batch exactly and that the
    timestamps agree with the header. Raises CorruptBatchError otherwise.
    """
    end = header.batch_length
    pos = header.header_size

    def take(size: int) -> memoryview:
        nonlocal pos
        start, pos = pos, pos + size
        if pos > end:
            raise CorruptBatchError("batch body is shorter than its sections")
        pos += -size % 8
        return view[start : start + size]

    def column(count: int, nullable: bool) -> _Column:
        validity = take((count + 7) // 8) if nullable else None
        lengths = take(4 * count)
        return _Column(validity, lengths, take(_sum_u32(lengths, count)))

    count = header.record_count
    timestamps = take(8 * count)
    keys = column(count, nullable=True)
    values = column(count, nullable=True)
    counts = names = header_values = None
    total = 0
    if header.attributes & ATTR_HAS_HEADERS:
        counts = take(4 * count)
        total = _sum_u32(counts, count)
        names = column(total, nullable=False)
        header_values = column(total, nullable=False)
        if header.attributes & ATTR_NULL_HEADER_VALUES:
            header_values = header_values._replace(validity=take((total + 7) // 8))
    elif header.attributes & ATTR_NULL_HEADER_VALUES:
        raise CorruptBatchError("a batch without headers has header value validity")
    if pos != end:
        raise CorruptBatchError("batch sections do not add up to its length")
    if header_values is not None and header_values.validity is not None:
        _check_null_header_values(header_values, total)
    if count > _NUMPY_FROM:
        largest = int(np.maximum.reduce(np.frombuffer(timestamps, "<i8")))
    else:
        largest = max(_ints(timestamps, "q"))
    first = int.from_bytes(timestamps[:8], "little", signed=True)
    if first != header.first_timestamp or largest != header.max_timestamp:
        raise CorruptBatchError("batch timestamps disagree with its header")
    return _Layout(timestamps, keys, values, counts, names, header_values)


def _check_null_header_values(column: _Column, total: int) -> None:
    """Section 13 as writers must write it: bits past the last header 0, some value null
    (else the batch would not have it), and every null value 0 bytes long."""
    assert column.validity is not None
    bits = int.from_bytes(column.validity, "little")
    if bits >> total:
        raise CorruptBatchError("header value validity has bits set past the last header")
    if bits == (1 << total) - 1:
        raise CorruptBatchError("header value validity marks no value null")
    if total > _NUMPY_FROM:
        valid = np.unpackbits(
            np.frombuffer(column.validity, np.uint8), count=total, bitorder="little"
        )
        null_bytes = bool(np.count_nonzero(np.frombuffer(column.lengths, "<u4")[valid == 0]))
    else:
        lengths = _ints(column.lengths, "I")
        null_bytes = any(lengths[i] for i in range(total) if not bits >> i & 1)
    if null_bytes:
        raise CorruptBatchError("a null header value has bytes")


def _check(view: memoryview) -> tuple[BatchHeader, _Layout]:
    header = read_header(view)
    if header.magic == MAGIC_KAFKA:  # rule 9
        raise CorruptBatchError("a format 3 batch holds a Kafka batch: read it as stored.py does")
    if header.batch_length != len(view):
        raise CorruptBatchError(
            f"batch length {header.batch_length} does not match the {len(view)} bytes received"
        )
    if crc32c(view[header.header_size :]) != header.body_crc:
        raise CorruptBatchError("batch body CRC mismatch")
    layout = _layout(view, header)
    if header.attributes & ATTR_CONTROL:
        _check_marker(header, layout)
    if layout.header_names is not None:
        try:  # each name on its own: names joined can be UTF-8 when one alone is not
            for name in _split(layout.header_names):
                name.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptBatchError("a header name is not UTF-8") from exc
    return header, layout


def _check_marker(header: BatchHeader, layout: _Layout) -> None:
    """A control batch's record is Kafka's control key and marker value, its kind the
    header's (rule 8). Kafka's readers take a marker value of a higher version by its
    prefix; the key's version and type are exact."""
    key, value = _item(layout.keys, 0), _item(layout.values, 0)
    kind = CONTROL_COMMIT if header.attributes & ATTR_COMMIT else CONTROL_ABORT
    if key is None or len(key) != CONTROL_KEY.size or CONTROL_KEY.unpack(key) != (0, kind):
        raise CorruptBatchError("a control batch's key is not its marker's control key")
    if value is None or len(value) < CONTROL_VALUE.size or CONTROL_VALUE.unpack_from(value)[0] < 0:
        raise CorruptBatchError("a control batch's value is not a marker value")


def validate(buf: bytes | bytearray | memoryview) -> BatchHeader:
    """Check one whole batch as a broker must before appending it; returns its header.

    Raises CorruptBatchError when either CRC fails, the buffer is not exactly one batch, or
    the sections are inconsistent. A batch that passes decodes without error.
    """
    return _check(memoryview(buf))[0]


def _split(column: _Column) -> list[bytes]:
    data = bytes(column.data)
    ends = list(accumulate(_ints(column.lengths, "I")))
    return [data[start:end] for start, end in zip([0, *ends], ends, strict=False)]


def _nullable(column: _Column, count: int) -> list[bytes | None]:
    items: list[bytes | None] = list(_split(column))
    assert column.validity is not None
    bits = int.from_bytes(column.validity, "little")
    if bits != (1 << count) - 1:
        flags = format(bits, f"0{count}b")[::-1]  # flags[i] == "0": item i is null
        position = flags.find("0")
        while position != -1 and position < count:
            items[position] = None
            position = flags.find("0", position + 1)
    return items


def decode(buf: bytes | bytearray | memoryview) -> DecodedBatch:
    """Decode one whole batch into columns, checking it as `validate` does."""
    header, layout = _check(memoryview(buf))
    count = header.record_count
    keys = _nullable(layout.keys, count)
    values = _nullable(layout.values, count)
    headers: list[Headers]
    if layout.header_counts is None:
        headers = [()] * count
    else:
        assert layout.header_names is not None and layout.header_values is not None
        try:
            names = [n.decode("utf-8") for n in _split(layout.header_names)]
        except UnicodeDecodeError as exc:
            raise CorruptBatchError("a header name is not UTF-8") from exc
        header_values: Sequence[bytes | None]
        if layout.header_values.validity is None:
            header_values = _split(layout.header_values)
        else:
            header_values = _nullable(layout.header_values, len(names))
        pairs = list(zip(names, header_values, strict=True))
        ends = list(accumulate(_ints(layout.header_counts, "I")))
        headers = [tuple(pairs[s:e]) for s, e in zip([0, *ends], ends, strict=False)]
    return DecodedBatch(header, _ints(layout.timestamps, "q"), keys, values, headers)


def keys_of(buf: bytes | bytearray | memoryview) -> tuple[BatchHeader, list[bytes | None]]:
    """One whole batch's header and keys, checked as `validate` checks it, its other
    columns left as they are (what the log cleaner's map of keys is built from)."""
    header, layout = _check(memoryview(buf))
    return header, _nullable(layout.keys, header.record_count)


def next_offset_after(buf: bytes | bytearray | memoryview) -> int:
    """The offset after the last of a stream of stored (stamped) batches; ValueError when
    it holds none."""
    last = None
    for last in split_batches(buf):  # noqa: B007 - the last one is wanted
        pass
    if last is None:
        raise ValueError("no batch")
    return read_header(last).next_offset


def record_in(buf: bytes | bytearray | memoryview, offset: int) -> ConsumedRecord | None:
    """The record at `offset` of one whole batch (None when it holds none there), checked
    as `validate` checks the batch, without decoding its other records: a key read wants
    one record of a batch of thousands (`decode(buf).record_at(offset)`, for less)."""
    header, layout = _check(memoryview(buf))
    i = offset - header.base_offset
    if not 0 <= i < header.record_count:
        return None
    timestamp = int.from_bytes(layout.timestamps[8 * i : 8 * i + 8], "little", signed=True)
    headers: Headers = ()
    if layout.header_counts is not None:
        assert layout.header_names is not None and layout.header_values is not None
        first, count = _start_and_length(layout.header_counts, i)
        headers = tuple(
            (_bytes_of(layout.header_names, j).decode("utf-8"), _item(layout.header_values, j))
            for j in range(first, first + count)
        )
    return ConsumedRecord(
        offset, timestamp, _item(layout.keys, i), _item(layout.values, i), headers
    )


def _start_and_length(lengths: memoryview, i: int) -> tuple[int, int]:
    """Where item `i` of a column of uint32 `lengths` starts (their sum before it), and
    its length."""
    if i > _NUMPY_FROM:
        before = int(np.add.reduce(np.frombuffer(lengths, "<u4", i), dtype=np.uint64))
    else:
        before = sum(_ints(lengths[: 4 * i], "I"))
    return before, int.from_bytes(lengths[4 * i : 4 * i + 4], "little")


def _item(column: _Column, i: int) -> bytes | None:
    """Item `i` of a checked column (None: null)."""
    if column.validity is not None and not column.validity[i // 8] >> (i % 8) & 1:
        return None
    return _bytes_of(column, i)


def _bytes_of(column: _Column, i: int) -> bytes:
    """The bytes of item `i` of a checked column (a null one has none)."""
    start, length = _start_and_length(column.lengths, i)
    return bytes(column.data[start : start + length])


def decode_stream(buf: bytes | bytearray | memoryview) -> Iterator[DecodedBatch]:
    """Decode every batch of a stream of concatenated batches (a binary fetch response)."""
    for view in split_batches(buf):
        yield decode(view)


class BatchColumns(NamedTuple):
    """One checked batch as its raw column buffers (zero-copy views), for readers that build
    columnar arrays (Arrow) without touching each record. Lengths are uint32, timestamps
    int64, validity bitmaps Arrow's (bit i of byte i // 8, least significant first);
    `header_values.validity` is None unless some header value is null.
    """

    header: BatchHeader
    timestamps: memoryview
    keys: _Column
    values: _Column
    header_counts: memoryview | None
    header_names: _Column | None
    header_values: _Column | None


def columns(buf: bytes | bytearray | memoryview) -> BatchColumns:
    """One whole batch's column buffers, checked as `validate` does."""
    header, layout = _check(memoryview(buf))
    return BatchColumns(header, *layout)
