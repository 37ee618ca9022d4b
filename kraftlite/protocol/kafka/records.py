"""Kafka's record batch, magic v2, and its conversion to and from kraftlite's batch format.

A Kafka client produces and fetches records as "record batches" (KIP-98's format, magic 2;
Kafka's DefaultRecordBatch). A produce request's `records` field is one or more batches
back to back, and so is a fetch response's. kraftlite stores its own columnar batches
(docs/batch-format.md), so a Kafka edge converts each batch as it passes: `decode_batches`
then `kafka_to_kraftlite` on produce, `kraftlite_to_kafka` on fetch. The layout, all
big-endian:

    offset  size  field
    0       8     base_offset
    8       4     batch_length: bytes after this field (the whole batch is 12 + this)
    12      4     partition_leader_epoch
    16      1     magic (2)
    17      4     crc: CRC-32C of bytes [21, end), i.e. attributes to the last record
    21      2     attributes: bits 0-2 compression, 3 timestamp type (1 = LogAppendTime),
                  4 transactional, 5 control, 6 delete horizon set
    23      4     last_offset_delta
    27      8     base_timestamp
    35      8     max_timestamp
    43      8     producer_id
    51      2     producer_epoch
    53      4     base_sequence
    57      4     record count
    61            records, compressed as one block when bits 0-2 say so

Each record is: length (varint), attributes (int8, unused), timestamp delta (varlong),
offset delta (varint), key length (varint, -1 = null) and key, value length (varint, -1 =
null) and value, header count (varint), then per header a key length and UTF-8 key and a
value length (-1 = null) and value. Varints are zigzag (see wire.py).

The rules this module keeps:

1. Decoding is strict and total: a bad CRC, magic other than 2, a length that disagrees
   with the bytes, a record count that disagrees with the records, an over-long varint,
   invalid UTF-8 in a header key, or trailing bytes all raise `CorruptRecordsError` (a
   `WireError`); nothing else escapes, whatever the input.
2. Decompression is bounded: `max_bytes` caps the decompressed bytes of a whole
   `decode_batches` call. Snappy states its size up front and is checked before
   decompressing; gzip, lz4 and zstd decompress into a fixed buffer (cramjam's
   `decompress_into` stops with an error at the buffer's end rather than growing it) that
   grows 8x per attempt up to the bytes left in the budget. A zip bomb costs at most about
   `max_bytes` of memory and work; corrupt data fails on the first, small attempt.
3. A null header value (length -1) is read as None and written back as length -1, as
   Kafka keeps it: kraftlite's batches hold null header values (docs/batch-format.md,
   attributes bit 1), so a consumer gets null where the producer sent null and b"" where
   it sent empty bytes.
4. Conversion keeps what kraftlite can hold: each record's timestamp (CreateTime), key,
   value and headers. Offsets inside a kraftlite batch are dense, so a Kafka batch whose
   offset deltas are not exactly 0..n-1 is refused, as are control batches and empty ones.
   Producer id, epoch and sequence stay on `KafkaBatch` for the caller to act on.
5. Encoding writes what every client reads: snappy in the xerial framing the Java
   producer writes (librdkafka, kafka-python and Java all read it), lz4 as an LZ4 frame
   with independent blocks (Java refuses linked blocks), gzip and zstd as plain streams.

6. Two parsers, one answer. `_parse_records` is the reference: a per-record loop that
   defines what a records section means and which errors it raises. The packed path
   (`_packed_records`) reads the common shape faster: a Python loop walks only the record
   lengths, numpy decodes the other fields of every record at once, and
   `kafka_to_kraftlite` builds kraftlite's columns from those arrays. It answers only for
   sections it can prove the reference reads without error (no headers, varints it can
   decode, every position within its record, records that tile the section exactly) and
   then gives exactly the reference's records; for anything else it declines and the
   reference decides, error or records. tests/unit/test_kafka_records_fast.py holds the
   two to the same bytes and errors on random and corrupted batches.

The per-record loops are the hot path of a Kafka edge, so they inline one-byte varints,
keep locals in locals and build records into one bytearray.
"""

from __future__ import annotations

import itertools
import struct
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, NamedTuple

import cramjam
import numpy as np
import numpy.typing as npt
from crc32c import crc32c

from kraftlite.protocol import batch as kraftlite_batch
from kraftlite.protocol.batch import Header
from kraftlite.protocol.kafka.wire import WireError, encode_varint, encode_varlong

MAGIC: Final = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE: Final = HEADER.size  # 61
_LENGTH_OFFSET: Final = 12  # batch_length counts the bytes after base_offset and itself
_CRC_OFFSET: Final = 17
_CRC_FROM: Final = 21  # the CRC covers attributes .. end
_MIN_RECORD: Final = 7  # length, attributes, 2 deltas, key, value, header count: 1 byte each
_U32: Final = struct.Struct(">I")
_I32: Final = struct.Struct(">i")

ATTR_COMPRESSION: Final = 0x07
ATTR_LOG_APPEND_TIME: Final = 0x08
ATTR_TRANSACTIONAL: Final = 0x10
ATTR_CONTROL: Final = 0x20

NO_PRODUCER_ID: Final = -1
DEFAULT_MAX_BYTES: Final = 64 << 20  # decompressed bytes per decode_batches call
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"  # version 1, compat 1
_XERIAL_BLOCK: Final = 32 * 1024  # the uncompressed bytes per chunk that xerial's Java writes
_FIRST_GUESS: Final = 64 * 1024
_DEFLATE_MAX_RATIO: Final = 1032
_OUT_OF_ROOM: Final = "whole buffer"  # cramjam's message when an output buffer is too small


class Compression(IntEnum):
    """Attribute bits 0-2 of a batch."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CorruptRecordsError(WireError):
    """The bytes are not valid Kafka record batches (Kafka's CORRUPT_MESSAGE, code 2)."""


class ReferenceParseDeclined(Exception):
    """`decode_batches(reference_bound=...)`: a records section the packed parser cannot
    take holds more records or headers than the caller lets the reference parser walk
    here (about 1.5 us a record and 0.9 us a header)."""


class ReferenceBound(NamedTuple):
    """The most records, and headers in all, the reference parser may walk in a section."""

    records: int
    headers: int


class KafkaRecord(NamedTuple):
    """One record. `timestamp` is absolute (base timestamp + delta); a null header value
    is None (rule 3)."""

    offset_delta: int
    timestamp: int
    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[Header] = ()


class _RecordLists(NamedTuple):
    """A batch's records as one list per field: what the reference parser builds."""

    offset_deltas: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Sequence[Header]]
    has_headers: bool


class _PackedRecords:
    """A batch's records as arrays over its records section (rule 6): what the packed
    parser builds, only for records without headers. Key i is
    `data[key_starts[i] : key_starts[i] + key_lengths[i]]`, or null when its length is -1;
    values likewise. `lists()` gives the reference's lists, built once when first asked."""

    __slots__ = (
        "_lists",
        "data",
        "key_lengths",
        "key_starts",
        "offset_deltas",
        "timestamps",
        "value_lengths",
        "value_starts",
    )

    def __init__(  # noqa: PLR0917 - one array per field, in a record's order
        self,
        data: bytes,
        timestamps: npt.NDArray[np.int64],
        offset_deltas: npt.NDArray[np.int64],
        key_starts: npt.NDArray[np.int64],
        key_lengths: npt.NDArray[np.int64],
        value_starts: npt.NDArray[np.int64],
        value_lengths: npt.NDArray[np.int64],
    ) -> None:
        self.data = data  # the records section
        self.timestamps = timestamps
        self.offset_deltas = offset_deltas
        self.key_starts = key_starts
        self.key_lengths = key_lengths
        self.value_starts = value_starts
        self.value_lengths = value_lengths
        self._lists: _RecordLists | None = None

    def lists(self) -> _RecordLists:
        if self._lists is None:
            count = len(self.timestamps)
            self._lists = _RecordLists(
                self.offset_deltas.tolist(),
                self.timestamps.tolist(),
                self._items(self.key_starts, self.key_lengths),
                self._items(self.value_starts, self.value_lengths),
                [()] * count,
                False,
            )
        return self._lists

    def _items(
        self, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
    ) -> list[bytes | None]:
        data = self.data
        return [
            None if size < 0 else data[start : start + size]
            for start, size in zip(starts.tolist(), lengths.tolist(), strict=True)
        ]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _PackedRecords):
            return self.lists() == other.lists()
        if isinstance(other, _RecordLists):
            return self.lists() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal by content, as the lists are

    def __repr__(self) -> str:
        return f"_PackedRecords({self.lists()!r})"


@dataclass(frozen=True, slots=True)
class KafkaBatch:
    """A decoded batch: its header fields, and its records as columns.

    Columns (one list per record field) rather than record objects, because converting to
    kraftlite's columnar batch then needs no per-record object; `records` builds them.
    `columns` holds them either as the reference parser's lists or as the packed parser's
    arrays (rule 6); the field properties read both the same way.
    """

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    columns: _RecordLists | _PackedRecords

    def _lists(self) -> _RecordLists:
        columns = self.columns
        return columns if isinstance(columns, _RecordLists) else columns.lists()

    @property
    def offset_deltas(self) -> list[int]:
        return self._lists().offset_deltas

    @property
    def timestamps(self) -> list[int]:
        return self._lists().timestamps

    @property
    def keys(self) -> list[bytes | None]:
        return self._lists().keys

    @property
    def values(self) -> list[bytes | None]:
        return self._lists().values

    @property
    def headers(self) -> list[Sequence[Header]]:
        return self._lists().headers

    @property
    def has_headers(self) -> bool:
        return isinstance(self.columns, _RecordLists) and self.columns.has_headers

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & ATTR_COMPRESSION)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def log_append_time(self) -> bool:
        """Timestamp type 1: the broker's append time, max_timestamp, for every record."""
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def has_dense_offsets(self) -> bool:
        """Offset deltas exactly 0..n-1 (what a kraftlite batch's dense offsets can hold)."""
        count = self.record_count
        if self.last_offset_delta != count - 1:
            return False
        columns = self.columns
        if isinstance(columns, _RecordLists):
            return columns.offset_deltas == list(range(count))
        return bool(np.array_equal(columns.offset_deltas, np.arange(count)))

    @property
    def timestamp_range(self) -> tuple[int, int, int]:
        """The first record's timestamp, the smallest and the largest (a batch of one
        record or more). The reference parser's may lie outside int64 (a base timestamp
        plus a delta), which no kraftlite batch holds."""
        stamps = self.columns.timestamps
        if isinstance(stamps, list):
            return stamps[0], min(stamps), max(stamps)
        return int(stamps[0]), int(np.minimum.reduce(stamps)), int(np.maximum.reduce(stamps))

    @property
    def keyless(self) -> tuple[int, ...]:
        """The indexes of the records that have no key."""
        found = self.keyless_found()
        return found if isinstance(found, tuple) else tuple(found.tolist())

    def keyless_found(self, limit: int | None = None) -> tuple[int, ...] | npt.NDArray[np.int64]:
        """The first `limit` of `keyless` (None: all), as an int64 array of its own for the
        packed parser's columns (no int object a record, nothing else of the batch held)."""
        columns = self.columns
        if isinstance(columns, _RecordLists):
            found = (i for i, key in enumerate(columns.keys) if key is None)
            return tuple(itertools.islice(found, limit))
        return np.flatnonzero(columns.key_lengths < 0)[:limit].copy()

    @property
    def records(self) -> list[KafkaRecord]:
        return [
            KafkaRecord(*fields)
            for fields in zip(
                self.offset_deltas,
                self.timestamps,
                self.keys,
                self.values,
                self.headers,
                strict=True,
            )
        ]


# ------------------------------------------------------------------------------ decoding

# zigzag value of every one-byte varint: the common case, a table lookup
_ONE_BYTE: Final = tuple((byte >> 1) ^ -(byte & 1) for byte in range(128))


def _varint(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """A zigzag varint of up to `max_bytes` bytes at `pos`: (value, next position)."""
    result = 0
    shift = 0
    for index in range(max_bytes):
        byte = data[pos + index]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> (32 if max_bytes == 5 else 64):
                raise CorruptRecordsError(f"varint {result} out of range in a record")
            return (result >> 1) ^ -(result & 1), pos + index + 1
        shift += 7
    raise CorruptRecordsError(f"varint longer than {max_bytes} bytes in a record")


def batch_sizes(buf: bytes | bytearray | memoryview) -> list[int]:
    """The size of each batch in a concatenation of batches, read from their length fields
    alone (nothing decoded): what a broker checks against `max.message.bytes` first.
    Raises `CorruptRecordsError` when the lengths do not cut the bytes into whole batches."""
    sizes = []
    pos = 0
    while pos < len(buf):
        size = batch_size_at(buf, pos)
        sizes.append(size)
        pos += size
    if not sizes:
        raise CorruptRecordsError("no record batch")
    return sizes


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The size of the batch at `pos`, from its length field alone. Raises
    `CorruptRecordsError` when the bytes there are not a whole batch."""
    if len(buf) - pos < _LENGTH_OFFSET:
        raise CorruptRecordsError(f"truncated batch header: {len(buf) - pos} bytes")
    size: int = _LENGTH_OFFSET + _I32.unpack_from(buf, pos + 8)[0]
    if size < HEADER_SIZE or pos + size > len(buf):
        raise CorruptRecordsError(f"a batch of {size} bytes at {pos} does not fit")
    return size


def claimed_count(buf: bytes | bytearray | memoryview) -> int:
    """The record count the header of the batch at the start of `buf` claims (a whole
    header: `batch_size_at` said so); its decode holds it to what the bytes can fit."""
    count: int = HEADER.unpack_from(buf)[12]
    return count


def decode_batches(
    buf: bytes | bytearray | memoryview,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    allow_truncated_tail: bool = False,
    shared_budget: list[int] | None = None,
    reference_bound: ReferenceBound | None = None,
) -> list[KafkaBatch]:
    """Decode every batch of a concatenation of batches (a produce request's records).

    `max_bytes` bounds the decompressed bytes of the whole call (rule 2); `shared_budget`,
    when given, is a budget several calls draw on (one request's partitions), decreased by
    what this call decompressed. A fetch response may end in a partial batch (Kafka cuts
    at max_bytes); `allow_truncated_tail` drops it instead of raising, as Kafka's consumers
    do. Raises `CorruptRecordsError`; `ReferenceParseDeclined` when a records section only
    the reference parser reads holds more than `reference_bound` (None: no bound), found
    before walking more than the bound.
    """
    view = memoryview(buf).cast("B")
    batches: list[KafkaBatch] = []
    if shared_budget is not None:
        max_bytes = min(max_bytes, shared_budget[0])
    budget = max_bytes
    pos = 0
    while pos < len(view):
        if len(view) - pos < HEADER_SIZE:
            if allow_truncated_tail:
                break
            raise CorruptRecordsError(f"truncated batch header: {len(view) - pos} bytes")
        batch_length = _I32.unpack_from(view, pos + 8)[0]
        end = pos + _LENGTH_OFFSET + batch_length
        if batch_length < HEADER_SIZE - _LENGTH_OFFSET:
            raise CorruptRecordsError(f"invalid batch length {batch_length}")
        if end > len(view):
            if allow_truncated_tail:
                break
            raise CorruptRecordsError(f"truncated batch: {len(view) - pos} of {end - pos} bytes")
        batch, used = _decode_one(view[pos:end], budget, reference_bound)
        budget -= used
        batches.append(batch)
        pos = end
    if shared_budget is not None:
        shared_budget[0] -= max_bytes - budget
    return batches


def _decode_one(
    view: memoryview, budget: int, reference_bound: ReferenceBound | None = None
) -> tuple[KafkaBatch, int]:
    """One whole batch; returns it and the decompressed bytes it used of the budget."""
    (
        base_offset,
        _,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = HEADER.unpack_from(view)
    if magic != MAGIC:
        raise CorruptRecordsError(f"unsupported record batch magic {magic}")
    if crc32c(view[_CRC_FROM:]) != crc:
        raise CorruptRecordsError("record batch CRC mismatch")
    if count < 0:
        raise CorruptRecordsError(f"negative record count {count}")
    compression = attributes & ATTR_COMPRESSION
    section = view[HEADER_SIZE:]
    used = 0
    if compression == Compression.NONE:
        data = bytes(section)
    else:
        if count > budget // _MIN_RECORD:
            raise CorruptRecordsError(f"{count} records exceed the decompression budget")
        data = _decompress(compression, section, budget)
        used = len(data)
    if count > len(data) // _MIN_RECORD:
        raise CorruptRecordsError(f"{count} records cannot fit in {len(data)} bytes")
    fixed_timestamp = max_timestamp if attributes & ATTR_LOG_APPEND_TIME else None
    columns: _RecordLists | _PackedRecords | None = None
    if count >= _PACKED_FROM and not _first_record_has_headers(data):
        columns = _packed_records(data, count, base_timestamp, fixed_timestamp)
    if columns is None:
        if reference_bound is not None and count > reference_bound.records:
            raise ReferenceParseDeclined(f"{count} records for the reference parser")
        columns = _parse_records(
            data,
            count,
            base_timestamp,
            fixed_timestamp,
            max_headers=None if reference_bound is None else reference_bound.headers,
        )
    batch = KafkaBatch(
        base_offset,
        leader_epoch,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
        columns,
    )
    return batch, used


def _parse_records(
    data: bytes,
    count: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
    *,
    max_headers: int | None = None,
) -> _RecordLists:
    """Every record of an (uncompressed) records section, into columns: the reference
    parser (rule 6). `ReferenceParseDeclined` once the records' header counts pass
    `max_headers` in all, before their headers are read."""
    headers_left = -1 if max_headers is None else max_headers
    offset_deltas: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[Sequence[Header]] = []
    no_headers: tuple[Header, ...] = ()
    has_headers = False
    one_byte = _ONE_BYTE
    end = len(data)
    pos = 0
    try:
        for _ in range(count):
            # Each varint: one byte (a table), two bytes (inline), or longer (a call).
            byte = data[pos]
            if byte < 0x80:
                length = one_byte[byte]
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = _varint(data, pos, 5)
            record_end = pos + length
            if length < 0 or record_end > end:
                raise CorruptRecordsError(f"record length {length} overruns the batch")
            pos += 1  # record attributes: unused

            byte = data[pos]
            if byte < 0x80:
                delta = one_byte[byte]
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                delta, pos = _varint(data, pos, 10)
            timestamps.append(
                base_timestamp + delta if fixed_timestamp is None else fixed_timestamp
            )

            byte = data[pos]
            if byte < 0x80:
                offset_deltas.append(one_byte[byte])
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                offset_deltas.append((raw >> 1) ^ -(raw & 1))
                pos += 2
            else:
                delta, pos = _varint(data, pos, 5)
                offset_deltas.append(delta)

            byte = data[pos]
            if byte < 0x80:
                size = one_byte[byte]
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                size = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                size, pos = _varint(data, pos, 5)
            if size >= 0:
                keys.append(data[pos : pos + size])
                pos += size
            elif size == -1:
                keys.append(None)
            else:
                raise CorruptRecordsError(f"invalid key length {size}")

            byte = data[pos]
            if byte < 0x80:
                size = one_byte[byte]
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                size = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                size, pos = _varint(data, pos, 5)
            if size >= 0:
                values.append(data[pos : pos + size])
                pos += size
            elif size == -1:
                values.append(None)
            else:
                raise CorruptRecordsError(f"invalid value length {size}")

            if data[pos] == 0:
                headers.append(no_headers)
                pos += 1
            else:
                if headers_left >= 0:
                    headers_left -= max(_varint(data, pos, 5)[0], 0)
                    if headers_left < 0:
                        raise ReferenceParseDeclined(f"over {max_headers} headers")
                record_headers, pos = _parse_headers(data, pos, record_end)
                headers.append(record_headers)
                has_headers = True
            if pos != record_end:
                raise CorruptRecordsError("record length disagrees with its fields")
    except IndexError as exc:
        raise CorruptRecordsError("truncated record") from exc
    if pos != end:
        raise CorruptRecordsError(f"{end - pos} bytes after the last of {count} records")
    return _RecordLists(offset_deltas, timestamps, keys, values, headers, has_headers)


def _parse_headers(data: bytes, pos: int, record_end: int) -> tuple[list[Header], int]:
    count, pos = _varint(data, pos, 5)
    if count < 0 or count > (record_end - pos) // 2:
        raise CorruptRecordsError(f"invalid header count {count}")
    out: list[Header] = []
    for _ in range(count):
        size, pos = _varint(data, pos, 5)
        if size < 0 or pos + size > record_end:
            raise CorruptRecordsError(f"invalid header key length {size}")
        try:
            name = str(data[pos : pos + size], "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordsError("a header key is not UTF-8") from exc
        pos += size
        size, pos = _varint(data, pos, 5)
        value: bytes | None
        if size == -1:
            value = None  # rule 3: a null header value stays null
        elif 0 <= size <= record_end - pos:
            value = data[pos : pos + size]
            pos += size
        else:
            raise CorruptRecordsError(f"invalid header value length {size}")
        out.append((name, value))
    return out, pos


# ---------------------------------------------------------------- decoding, the packed path

# Below this many records the reference parser is as fast: numpy's cost per call is fixed
# (~1 us) and the packed path makes about 60 per batch. The two cost the same at about 64-96
# records of 100 B (measured twice); 96 is the cautious end (ADR 0002 has the figures).
_PACKED_FROM: Final = 96
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def _pair_tables() -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """For the two bytes b0, b1 a varint starts with, at index b0 | b1 << 8: its zigzag
    value and its size, when it has one byte or two; size 0 when it is longer."""
    index = np.arange(1 << 16, dtype=np.int64)
    first, second = index & 0xFF, index >> 8
    one_byte = first < 0x80
    raw = np.where(one_byte, first, (first & 0x7F) | (second << 7))
    sizes = np.where(one_byte, 1, np.where(second < 0x80, 2, 0)).astype(np.uint8)
    return (raw >> 1) ^ -(raw & 1), sizes


_PAIR_VALUES, _PAIR_SIZES = _pair_tables()


def _record_steps() -> tuple[int, ...]:
    """`_pair_tables` for a record's length, as Python ints for the loop that walks them:
    the bytes to the next record (length varint and length), 0 when the varint is longer
    than two bytes or negative (the loop then looks further, or declines)."""
    steps = np.where(_PAIR_VALUES >= 0, _PAIR_SIZES + _PAIR_VALUES, 0)
    steps[_PAIR_SIZES == 0] = 0
    shared = list(range(int(steps.max()) + 1))  # one int object per distinct step
    return tuple(map(shared.__getitem__, steps.tolist()))


_RECORD_STEPS: Final = _record_steps()


def _long_record_step(data: bytes, pos: int) -> int:
    """`_RECORD_STEPS` for a record length of 3 to 5 bytes; 0 for anything the reference
    would refuse (over 5 bytes, over 32 bits, negative)."""
    raw = 0
    for index in range(5):
        byte = data[pos + index]
        raw |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            length = (raw >> 1) ^ -(raw & 1)
            # (over 32 bits the length also overruns any section: declined either way)
            return index + 1 + length if raw >> 32 == 0 and length >= 0 else 0
    return 0


def _record_bounds(data: bytes, count: int) -> array[int] | None:
    """Where each of `count` records starts in `data`, read from their lengths alone, and
    then the end of `data`; None unless the records tile `data` exactly. An int64 array,
    8 bytes a record, not a list of int objects (a budget's worth of tiny records is
    millions)."""
    bounds = array("q", bytes(8 * (count + 1)))
    steps = _RECORD_STEPS
    pos = 0
    try:
        for index in range(count):
            bounds[index] = pos
            step = steps[data[pos] | data[pos + 1] << 8]
            if not step:
                step = _long_record_step(data, pos)
                if not step:
                    return None
            pos += step
    except IndexError:  # lengths that overrun the section
        return None
    bounds[count] = pos
    return bounds if pos == len(data) else None


_Positions = npt.NDArray[np.int64]


def _bytes_at(buf: npt.NDArray[np.uint8], at: _Positions) -> npt.NDArray[np.uint8]:
    """buf[at], where a position past the end reads the last byte instead. Such a read
    never makes a record acceptable: see `_packed_records`."""
    return buf.take(at, mode="clip")


def _varints(
    buf: npt.NDArray[np.uint8], at: _Positions, max_bytes: int
) -> tuple[npt.NDArray[np.int64], _Positions] | None:
    """The zigzag varints at positions `at`, and the positions after them. None when one
    is longer than `max_bytes` (at most 9: 63 bits fit an int64) or, for 5-byte fields,
    over 32 bits: the reference decides those."""
    first = _bytes_at(buf, at)
    if not np.count_nonzero(first >= 0x80):  # all one byte: the common case
        return _PAIR_VALUES.take(first), at + 1
    pair = first | _bytes_at(buf, at + 1).astype(np.uint16) << 8
    sizes = _PAIR_SIZES.take(pair)
    if np.count_nonzero(sizes) == len(sizes):  # all one or two bytes
        return _PAIR_VALUES.take(pair), at + sizes
    byte = first
    more = byte >= 0x80
    raw = (byte & 0x7F).astype(np.int64)
    after = at + 1
    for index in range(1, max_bytes):
        byte = _bytes_at(buf, at + index)
        raw |= np.where(more, (byte & 0x7F).astype(np.int64) << (7 * index), 0)
        after += more
        more &= byte >= 0x80
        if not np.count_nonzero(more):
            break
    else:
        return None
    if max_bytes == 5 and np.count_nonzero(raw >> 32):
        return None
    return (raw >> 1) ^ -(raw & 1), after


def _first_record_has_headers(data: bytes) -> bool:
    """Whether the first record has headers: a hint, so that batches with headers (whose
    records usually all have them) go straight to the reference parser. Any surprise
    answers False and leaves the verdict to the packed parser's own checks."""
    try:
        _, pos = _varint(data, 0, 5)
        _, pos = _varint(data, pos + 1, 10)
        _, pos = _varint(data, pos, 5)
        for _ in range(2):  # key, value
            size, pos = _varint(data, pos, 5)
            pos += max(size, 0)
        return data[pos] != 0
    except (CorruptRecordsError, IndexError):
        return False


def _packed_records(
    data: bytes, count: int, base_timestamp: int, fixed_timestamp: int | None
) -> _PackedRecords | None:
    """The packed parser (rule 6): every record of a records section as arrays over it, or
    None for a section it cannot prove the reference reads the same way.

    It accepts only when every record is: a length of 1-5 bytes that is not negative, the
    records tiling the section exactly; an attributes byte; a timestamp delta of at most 9
    bytes; an offset delta, key length and value length of at most 5 bytes and 32 bits;
    key and value lengths of -1 or more; then a header count that is the one byte 0 and
    the record's last. Those are the reference's own conditions for reading a record
    without error, and under them it reads the same varints from the same bytes.

    Positions only grow within a record (sizes >= 1, lengths >= 0), so when the last one
    is the record's last byte every varint read lies inside the record; a record whose
    fields stray past its end is declined whatever was read there. Reads past the
    section (`_bytes_at`) are clipped, so no length, however large, reaches other memory.
    """
    bounds = _record_bounds(data, count) if count else None
    if bounds is None:
        return None
    buf = np.frombuffer(data, np.uint8)
    edges = np.frombuffer(bounds, np.int64)
    record_ends = edges[1:]
    decoded = _varints(buf, edges[:-1], 5)  # the lengths _record_bounds checked
    if decoded is None:
        return None
    decoded = _varints(buf, decoded[1] + 1, 9)  # after the attributes byte (unused)
    if decoded is None:
        return None
    deltas, at = decoded
    decoded = _varints(buf, at, 5)
    if decoded is None:
        return None
    offset_deltas, at = decoded
    decoded = _varints(buf, at, 5)
    if decoded is None:
        return None
    key_lengths, key_starts = decoded
    decoded = _varints(buf, key_starts + np.maximum(key_lengths, 0), 5)
    if decoded is None:
        return None
    value_lengths, value_starts = decoded
    at = value_starts + np.maximum(value_lengths, 0)  # the header count's position
    if (
        np.count_nonzero(np.minimum(key_lengths, value_lengths) < -1)
        or np.count_nonzero(at + 1 != record_ends)
        or np.count_nonzero(buf[at])  # `at` is inside the section: checked just before
    ):
        return None
    if fixed_timestamp is not None:
        timestamps = np.full(count, fixed_timestamp, np.int64)
    else:
        # the reference's Python ints may leave int64 (conversion then refuses them)
        if not (
            base_timestamp + int(deltas.min()) >= _INT64_MIN
            and base_timestamp + int(deltas.max()) <= _INT64_MAX
        ):
            return None
        timestamps = deltas + np.int64(base_timestamp)
    return _PackedRecords(
        data, timestamps, offset_deltas, key_starts, key_lengths, value_starts, value_lengths
    )


# --------------------------------------------------------------------------- compression


def _decompress(compression: int, data: memoryview, limit: int) -> bytes:
    """The decompressed records section, or `CorruptRecordsError` if it is corrupt or
    would exceed `limit` bytes (rule 2)."""
    try:
        if compression == Compression.SNAPPY:
            if bytes(data[: len(_XERIAL_MAGIC)]) == _XERIAL_MAGIC:
                return _xerial_decompress(data, limit)
            return _snappy_block(data, limit)
        if compression == Compression.GZIP:
            # The trailer holds the size (mod 2**32); deflate expands at most ~1032x, so a
            # larger claim is a lie and garbage must not buy a big buffer with one.
            size_hint = int.from_bytes(data[-4:], "little") if len(data) >= 4 else 0
            if size_hint > _DEFLATE_MAX_RATIO * len(data):
                size_hint = 0
            return _bounded(cramjam.gzip.decompress_into, data, limit, size_hint)
        if compression == Compression.LZ4:
            return _bounded(cramjam.lz4.decompress_into, data, limit)
        if compression == Compression.ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, limit)
    except CorruptRecordsError:
        raise
    except (cramjam.DecompressionError, ValueError, OverflowError) as exc:
        raise CorruptRecordsError(f"cannot decompress a {_name(compression)} batch: {exc}") from exc
    raise CorruptRecordsError(f"unknown compression type {compression}")


def _name(compression: int) -> str:
    try:
        return Compression(compression).name.lower()
    except ValueError:
        return str(compression)


def _bounded(
    decompress_into: Callable[[Any, Any], int], data: memoryview, limit: int, hint: int = 0
) -> bytes:
    """Decompress into a buffer that grows 8x at a time, never past `limit`.

    cramjam's `decompress_into` fails, rather than grows, when its output buffer is too
    small ("failed to write whole buffer"), so each attempt costs at most its buffer and
    the attempts add up to under 8/7 of the final size. Any other failure is corruption
    and ends at once: garbage costs one small attempt, not a climb to `limit`.
    (test_decompression_bombs_are_bounded pins both behaviours of cramjam.)
    """
    size = min(limit, max(_FIRST_GUESS, 4 * len(data), hint))
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _OUT_OF_ROOM not in str(exc):
                raise
            if size >= limit:
                raise CorruptRecordsError(
                    f"decompresses to more than the {limit} bytes allowed"
                ) from None
            size = min(limit, size * 8)
            continue
        return bytes(memoryview(out)[:written])


def _snappy_block(data: memoryview, limit: int) -> bytes:
    size = cramjam.snappy.decompress_raw_len(data)
    if size > limit:
        raise CorruptRecordsError(f"snappy block of {size} bytes exceeds the {limit} allowed")
    out = bytearray(size)
    if cramjam.snappy.decompress_raw_into(data, out) != size:
        raise CorruptRecordsError("snappy block shorter than it says")
    return bytes(out)


def _xerial_decompress(data: memoryview, limit: int) -> bytes:
    """xerial's snappy framing (the Java producer's): a 16-byte header (magic, version,
    compat), then chunks of [int32 big-endian size][raw snappy block]."""
    pos = len(_XERIAL_HEADER)
    if len(data) < pos:
        raise CorruptRecordsError("truncated xerial snappy header")
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        if len(data) - pos < 4:
            raise CorruptRecordsError("truncated xerial snappy chunk length")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or size > len(data) - pos:
            raise CorruptRecordsError(f"invalid xerial snappy chunk length {size}")
        part = _snappy_block(data[pos : pos + size], limit - total)
        total += len(part)
        parts.append(part)
        pos += size
    return b"".join(parts)


def _compress(compression: Compression, data: bytes | bytearray) -> bytes:
    if compression == Compression.GZIP:
        # level 1: a topic's compression.type compresses on every fetch (nothing stored
        # compressed yet, ADR 0002), and gzip's default level costs about 3x the CPU
        return bytes(cramjam.gzip.compress(data, level=1))
    if compression == Compression.SNAPPY:
        chunks = [_XERIAL_HEADER]
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
            chunks += [_I32.pack(len(block)), block]
        return b"".join(chunks)
    if compression == Compression.LZ4:
        # lz4's fast mode, as librdkafka's default: cramjam's default level is lz4's HC
        # mode, which costs 6x the CPU for 20 % fewer bytes (measured, 1 MiB of JSON)
        compressor = cramjam.lz4.Compressor(level=1, content_checksum=False, block_linked=False)
        compressor.compress(bytes(data))  # its stream API takes bytes only
        return bytes(compressor.finish())
    if compression == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3))
    raise ValueError(f"unknown compression {compression}")


# ------------------------------------------------------------------------------ encoding

# the zigzag varint bytes of every small non-negative int: lengths, offset deltas and
# timestamp deltas are nearly always small, and a lookup beats encoding them
_TABLE_SIZE: Final = 1 << 13
_SMALL: Final = tuple(encode_varint(value) for value in range(_TABLE_SIZE))
_NULL: Final = encode_varint(-1)


def _records_section(
    out: bytearray,
    count: int,
    *,
    offset_deltas: Sequence[int] | None,
    timestamps: Sequence[int],
    base_timestamp: int,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Header]] | None,
) -> None:
    """Append `count` records to `out`; offset deltas 0..count-1 when None."""
    small = _SMALL
    table = _TABLE_SIZE
    null = _NULL
    for index in range(count):
        key = keys[index]
        value = values[index]
        delta = timestamps[index] - base_timestamp
        delta_bytes = small[delta] if 0 <= delta < table else encode_varlong(delta)
        offset_delta = index if offset_deltas is None else offset_deltas[index]
        offset_bytes = (
            small[offset_delta] if 0 <= offset_delta < table else encode_varint(offset_delta)
        )
        if key is None:
            key_size = 0
            key_prefix = null
        else:
            key_size = len(key)
            key_prefix = small[key_size] if key_size < table else encode_varint(key_size)
        if value is None:
            value_size = 0
            value_prefix = null
        else:
            value_size = len(value)
            value_prefix = small[value_size] if value_size < table else encode_varint(value_size)
        record_headers = headers[index] if headers is not None else None
        header_bytes = _encode_headers(record_headers) if record_headers else b"\x00"
        length = (
            1
            + len(delta_bytes)
            + len(offset_bytes)
            + len(key_prefix)
            + key_size
            + len(value_prefix)
            + value_size
            + len(header_bytes)
        )
        out += small[length] if length < table else encode_varint(length)
        out += b"\x00"
        out += delta_bytes
        out += offset_bytes
        out += key_prefix
        if key is not None:
            out += key
        out += value_prefix
        if value is not None:
            out += value
        out += header_bytes


def _encode_headers(headers: Sequence[Header]) -> bytes:
    parts = [encode_varint(len(headers))]
    for name, value in headers:
        name_bytes = name.encode("utf-8")
        parts += [encode_varint(len(name_bytes)), name_bytes]
        if value is None:
            parts.append(_NULL)  # rule 3: length -1
        else:
            parts += [encode_varint(len(value)), value]
    return b"".join(parts)


def _finish(
    out: bytearray,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
) -> bytes:
    """Fill the header reserved at the front of `out` (the records follow it) and its CRC."""
    HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - _LENGTH_OFFSET,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    _U32.pack_into(out, _CRC_OFFSET, crc32c(memoryview(out)[_CRC_FROM:]))
    return bytes(out)


def encode_batch(
    records: Sequence[KafkaRecord],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: Compression = Compression.NONE,
    is_transactional: bool = False,
) -> bytes:
    """Encode records as one Kafka batch (CreateTime). The base timestamp is the first
    record's and the max timestamp the largest, as Kafka's producers write them."""
    if not records:
        raise ValueError("a batch holds at least one record")
    timestamps = [record.timestamp for record in records]
    out = bytearray(HEADER_SIZE)
    section = out if compression == Compression.NONE else bytearray()
    _records_section(
        section,
        len(records),
        offset_deltas=[record.offset_delta for record in records],
        timestamps=timestamps,
        base_timestamp=timestamps[0],
        keys=[record.key for record in records],
        values=[record.value for record in records],
        headers=[record.headers for record in records],
    )
    if compression != Compression.NONE:
        out += _compress(compression, section)
    return _finish(
        out,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=int(compression) | (ATTR_TRANSACTIONAL if is_transactional else 0),
        last_offset_delta=records[-1].offset_delta,
        base_timestamp=timestamps[0],
        max_timestamp=max(timestamps),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        count=len(records),
    )


# ---------------------------------------------------------------------------- conversion


def kafka_to_kraftlite(*batches: KafkaBatch) -> bytes:
    """One kraftlite batch (producer form: base offset 0, leader epoch -1) holding the same
    records as `batches`, in order: timestamps, keys, values and headers (rule 4). Several
    batches become one, so they are appended together or not at all, as Kafka appends a
    partition's records of one produce request. Raises `CorruptRecordsError` for no batch,
    a control batch, an empty batch, or offset deltas other than 0..n-1."""
    if not batches:
        raise CorruptRecordsError("no record batch")
    for batch in batches:
        count = batch.record_count
        if batch.is_control:
            raise CorruptRecordsError("control batches cannot be stored as kraftlite records")
        if count == 0:
            raise CorruptRecordsError("an empty batch holds no records to store")
        if not batch.has_dense_offsets:
            raise CorruptRecordsError("offset deltas are not 0..n-1 (kraftlite offsets are dense)")
    first = batches[0]
    producer = _producer_of(batches)
    transactional = first.is_transactional
    packed = [b.columns for b in batches if isinstance(b.columns, _PackedRecords)]
    if len(packed) == len(batches):
        return _packed_to_kraftlite(packed, producer, transactional)
    if len(batches) == 1:
        values, keys, timestamps = first.values, first.keys, first.timestamps
        headers = first.headers if first.has_headers else None
    else:
        values = [v for b in batches for v in b.values]
        keys = [k for b in batches for k in b.keys]
        timestamps = [t for b in batches for t in b.timestamps]
        has_headers = any(b.has_headers for b in batches)
        headers = [h for b in batches for h in b.headers] if has_headers else None
    try:
        return kraftlite_batch.encode_batch(
            values,
            keys=keys,
            timestamps=timestamps,
            headers=headers,
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=producer[2],
            transactional=transactional,
        )
    except (ValueError, OverflowError) as exc:  # e.g. timestamps out of int64 range
        raise CorruptRecordsError(f"cannot convert the batch: {exc}") from exc


def _packed_to_kraftlite(
    batches: Sequence[_PackedRecords], producer: tuple[int, int, int], transactional: bool
) -> bytes:
    """`kafka_to_kraftlite`'s encoding for batches the packed parser read (no headers):
    the kraftlite columns built from its arrays, the same bytes and errors."""
    if len(batches) == 1:
        timestamps = batches[0].timestamps
    else:
        timestamps = np.concatenate([b.timestamps for b in batches])
    keys = _binary_column([(b, b.key_starts, b.key_lengths) for b in batches])
    values = _binary_column([(b, b.value_starts, b.value_lengths) for b in batches])
    try:
        return kraftlite_batch.encode_columns(
            timestamps,
            keys,
            values,
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=producer[2],
            transactional=transactional,
        )
    except (ValueError, OverflowError) as exc:  # e.g. a batch over 2 GiB
        raise CorruptRecordsError(f"cannot convert the batch: {exc}") from exc


def _binary_column(
    fields: Sequence[tuple[_PackedRecords, npt.NDArray[np.int64], npt.NDArray[np.int64]]],
) -> kraftlite_batch.BinaryColumn:
    """One kraftlite column (keys or values) from each batch's starts and lengths (-1:
    null); a null item, like an empty one, has length 0 and no bytes."""
    all_sizes: list[npt.NDArray[np.int64]] = []
    pieces: list[bytes | memoryview] = []
    nulls = 0
    for batch, starts, lengths in fields:
        sizes = np.maximum(lengths, 0)
        nulls += len(lengths) - int(np.count_nonzero(sizes == lengths))
        if np.count_nonzero(sizes):  # else every item is null or empty: no bytes
            pieces.append(_gathered(batch.data, starts, sizes))
        all_sizes.append(sizes)
    present = None
    if nulls:
        present = np.concatenate([lengths >= 0 for _, _, lengths in fields])
    return kraftlite_batch.BinaryColumn(
        present,
        np.concatenate(all_sizes).astype(np.uint32),
        pieces[0] if len(pieces) == 1 else b"".join(pieces),  # no copy of one batch's
    )


def _gathered(
    data: bytes, starts: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64]
) -> bytes | memoryview:
    """`data[starts[i] : starts[i] + sizes[i]]` for every i, joined. Items all of one size
    (fixed-size records are common) are one numpy copy: the rows, at `starts`, of a
    window of that width sliding over `data` (read-only, as bytes are; every row lies
    inside `data`, and numpy checks each start against the rows there are). Others are a
    slice per item."""
    width = int(sizes[0])
    if width and not np.count_nonzero(sizes != width):
        rows = np.ndarray((len(data) - width + 1, width), np.uint8, data, 0, (1, 1))
        return rows[starts].reshape(-1).data  # a new flat array, as a view: no second copy
    ends = (starts + sizes).tolist()
    return b"".join([data[start:end] for start, end in zip(starts.tolist(), ends, strict=True)])


def _producer_of(batches: Sequence[KafkaBatch]) -> tuple[int, int, int]:
    """(producer id, epoch, base sequence) of an idempotent producer's batches, which must
    be one producer's, in sequence; (-1, -1, -1) for batches of no producer."""
    first = batches[0]
    if any(b.is_transactional != first.is_transactional for b in batches):
        raise CorruptRecordsError("transactional and other batches for one partition")
    if all(b.producer_id < 0 for b in batches):
        if first.is_transactional:
            raise CorruptRecordsError("a transactional batch needs a producer id")
        return (NO_PRODUCER_ID, -1, -1)
    expected = first.base_sequence
    for batch in batches:
        if (batch.producer_id, batch.producer_epoch) != (first.producer_id, first.producer_epoch):
            raise CorruptRecordsError("the batches of one partition name different producers")
        if batch.base_sequence != expected or batch.base_sequence < 0:
            raise CorruptRecordsError("the batches' sequences are not consecutive")
        expected = (batch.base_sequence + batch.record_count) % 2**31
    if first.producer_epoch < 0:
        raise CorruptRecordsError("an idempotent batch needs a producer epoch")
    return (first.producer_id, first.producer_epoch, first.base_sequence)


def kraftlite_to_kafka(
    kraftlite_batch_bytes: bytes | bytearray | memoryview,
    compression: Compression = Compression.NONE,
) -> bytes:
    """One Kafka batch holding a stored kraftlite batch's records, its records compressed
    with `compression` (rule 5; a topic's `compression.type`).

    base_offset and partition_leader_epoch are the kraftlite batch's own (the leader
    stamped them), offset deltas are 0..n-1. A transactional batch keeps its producer and
    the transactional bit, and a marker is Kafka's control batch (never compressed), as a
    read_committed consumer needs them; any other batch's producer id is -1. Raises
    `kraftlite.protocol.batch.CorruptBatchError` if the kraftlite batch fails its checks.
    """
    decoded = kraftlite_batch.decode(kraftlite_batch_bytes)
    header = decoded.header
    count = header.record_count
    if kraftlite_batch.is_control(header):
        compression = Compression.NONE
    out = bytearray(HEADER_SIZE)
    section = out if compression == Compression.NONE else bytearray()
    has_headers = header.attributes & kraftlite_batch.ATTR_HAS_HEADERS
    _records_section(
        section,
        count,
        offset_deltas=None,
        timestamps=decoded.timestamps,
        base_timestamp=header.first_timestamp,
        keys=decoded.keys,
        values=decoded.values,
        headers=decoded.headers if has_headers else None,
    )
    if compression != Compression.NONE:
        out += _compress(compression, section)
    attributes = int(compression)
    producer = (NO_PRODUCER_ID, -1, -1)
    if kraftlite_batch.is_transactional(header):  # its producer, for read_committed readers
        attributes |= ATTR_TRANSACTIONAL
        producer = (header.producer_id, header.producer_epoch, header.base_sequence)
        if kraftlite_batch.is_control(header):
            attributes |= ATTR_CONTROL
    return _finish(
        out,
        base_offset=header.base_offset,
        partition_leader_epoch=header.leader_epoch,
        attributes=attributes,
        last_offset_delta=count - 1,
        base_timestamp=header.first_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        count=count,
    )
