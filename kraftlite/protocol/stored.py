"""A stored batch, in either of its forms, for everything that reads a log (issue 29).

A partition's log holds kraftlite's columnar batches (formats 1 and 2, protocol/batch.py)
and, since issue 29, Kafka record batches kept as their producers sent them, compressed or
not, inside format 3's envelope (batch.py rule 9; docs/adr/0005). Storage, replication and
every header reader see one kind of batch; this module is where the two bodies part:

1. `kafka_form` makes a format 3 batch from a Kafka batch the Kafka edge decoded whole, or
   answers None when the batch cannot be kept as sent and must be converted as before
   (records.kafka_to_kraftlite): offsets that are not dense, the broker's append time, a
   header's max timestamp that is not its records' largest, a producer triple kraftlite's
   header cannot hold, or a codec other than the one the topic asks for. What it returns
   is a `KeptKafkaBatch`, the only format 3 bytes a leader appends for a producer: the
   service refuses format 3 bytes of any other origin (an HTTP client's), since the log
   checks only the envelope and CRC of a format 3 batch, not its records (rule 2).
2. `validate` is the log's check before an append: the columnar checks for formats 1 and 2,
   the envelope and CRC for format 3 (whose records were decoded by whoever made it).
3. Readers that need records (JSON and HTTP binary fetch, the table view, the cleaner, the
   key index, lookups by time) take format 3 batches as the columnar batches they convert
   to (`columnar`: the Kafka decoder, then its conversion, stamped with the stored batch's
   offset and epoch), so offsets, timestamps, keys, values and headers are the same
   whichever edge reads them. The decompression is bounded by what a produce request may
   decompress to (the Kafka edge checked that before the batch was kept).
4. `as_kafka` is a Kafka fetch's: a format 3 batch is its Kafka batch, sent as stored
   (zstd excepted to a client too old to read it); a columnar one is converted, as
   before, in the codec the topic asks for.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Final

import numpy as np
import numpy.typing as npt

from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.batch import BatchHeader, CorruptBatchError, DecodedBatch
from kraftlite.protocol.kafka import records
from kraftlite.protocol.kafka.records import Compression, KafkaBatch

# What a stored format 3 batch's records may decompress to: what an edge lets one
# produce request decompress to (service.py REQUEST_DECOMPRESSED_MAX_BYTES is this), so a
# batch kept once is always read again. Never lowered.
READ_DECOMPRESSED_MAX_BYTES: Final = 64 << 20
_DELETE_HORIZON = 0x40  # Kafka's attribute bit 6: a cleaner's batch, never a producer's
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NO_PRODUCER = (batch_format.NO_PRODUCER_ID, -1, -1)


# a topic's compression.type: the codec of the batches it keeps as sent and Kafka fetches
# carry ("producer": any codec a producer chose; "uncompressed": none)
CODECS: Final = {
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


def topic_codec(compression_type: str) -> Compression | None:
    """The codec a topic's `compression.type` names; None for `producer`."""
    if compression_type == "producer":
        return None
    return CODECS.get(compression_type, Compression.NONE)


# A kept batch keeps the first this many indexes of its records that have no key: what an
# INVALID_RECORD answer names at most (service.MAX_RECORD_ERRORS)
KEYLESS_KEPT: Final = 1_000


class KeptKafkaBatch(bytes):
    """A format 3 batch `kafka_form` made from a Kafka batch decoded whole (rule 1), with
    the first KEYLESS_KEPT indexes of its records that have no key (what a compacted
    topic's produce checks, found while the records were decoded anyway; as numbers only
    when asked, which every other topic's produce never does)."""

    _keyless: tuple[int, ...] | npt.NDArray[np.int64]

    def __new__(
        cls, data: bytes, keyless: tuple[int, ...] | npt.NDArray[np.int64]
    ) -> KeptKafkaBatch:
        kept = super().__new__(cls, data)
        kept._keyless = keyless
        return kept

    @property
    def keyless(self) -> tuple[int, ...]:
        found = self._keyless
        return found if isinstance(found, tuple) else tuple(found.tolist())


def kafka_form(
    data: bytes | bytearray | memoryview, batch: KafkaBatch, topic_codec: Compression | None
) -> KeptKafkaBatch | None:
    """Rule 1: `data`, one Kafka batch that `batch` is the decoding of, as a format 3 batch,
    or None when it is to be converted. `topic_codec`: the codec the topic's
    `compression.type` names, None for `producer` (any codec is kept)."""
    if topic_codec is not None and batch.compression != topic_codec:
        return None
    if (
        batch.is_control
        or batch.record_count == 0
        or batch.log_append_time
        or batch.attributes & _DELETE_HORIZON
        or not batch.has_dense_offsets
    ):
        return None
    first, smallest, largest = batch.timestamp_range
    producer = (batch.producer_id, batch.producer_epoch, batch.base_sequence)
    if not _INT64_MIN <= smallest <= largest <= _INT64_MAX:
        return None  # which the conversion refuses: no reader could read it back
    if largest != batch.max_timestamp or not (
        producer == _NO_PRODUCER or (producer[0] >= 0 and producer[1] >= 0 and producer[2] >= 0)
    ):
        return None
    if batch.is_transactional and producer[0] < 0:
        return None
    try:
        envelope = batch_format.kafka_envelope(
            data,
            first_timestamp=first,
            max_timestamp=largest,
            producer=producer,
            transactional=batch.is_transactional,
        )
    except (CorruptBatchError, struct.error, OverflowError):  # the conversion decides
        return None
    return KeptKafkaBatch(envelope, batch.keyless_found(KEYLESS_KEPT))


def validate(buf: bytes | bytearray | memoryview) -> BatchHeader:
    """Rule 2: one whole stored batch checked before an append; CorruptBatchError."""
    view = memoryview(buf)
    header = batch_format.read_header(view)
    if header.magic != batch_format.MAGIC_KAFKA:
        return batch_format.validate(view)
    batch_format.kafka_batch(view, header)
    return header


def is_kafka(view: bytes | bytearray | memoryview) -> bool:
    """A format 3 batch (its header not checked: for a stored, checked batch)."""
    return len(view) > 12 and view[12] == batch_format.MAGIC_KAFKA


def _decoded_kafka(view: memoryview) -> tuple[BatchHeader, KafkaBatch]:
    header = batch_format.read_header(view)
    inner = batch_format.kafka_batch(view, header)
    try:
        [decoded] = records.decode_batches(inner, max_bytes=READ_DECOMPRESSED_MAX_BYTES)
    except records.CorruptRecordsError as exc:  # stored bytes: a disk's fault, or a bug's
        raise CorruptBatchError(f"a format 3 batch's records: {exc}") from exc
    return header, decoded


def columnar(buf: bytes | bytearray | memoryview) -> bytes | memoryview:
    """Rule 3: one whole stored batch as a columnar one (itself when it is one), with the
    stored batch's offsets, leader epoch, producer and records."""
    view = memoryview(buf)
    if not is_kafka(view):
        return view
    header, decoded = _decoded_kafka(view)
    try:
        converted = records.kafka_to_kraftlite(decoded)
    except records.CorruptRecordsError as exc:
        raise CorruptBatchError(f"a format 3 batch's records: {exc}") from exc
    return bytes(batch_format.stamp(converted, header.base_offset, header.leader_epoch))


def as_columnar(data: bytes | memoryview, max_bytes: int) -> tuple[bytes | memoryview, int | None]:
    """A stream of stored batches (a fetch's) with each format 3 batch converted (the HTTP
    binary fetch's answer, rule 3): `data` itself when it holds none. A converted batch
    may be far larger than its stored bytes, so the batches after the one that takes the
    answer to `max_bytes` are left out (never the first: a reader always progresses);
    then the offset after the last one taken comes too, else None."""
    views = list(batch_format.split_batches(data))
    if not any(is_kafka(view) for view in views):
        return data, None
    out: list[bytes | memoryview] = []
    size = 0
    for i, view in enumerate(views):
        if out and size >= max_bytes:
            return b"".join(out), batch_format.read_header(views[i - 1]).next_offset
        converted = columnar(view)
        out.append(converted)
        size += len(converted)
    return b"".join(out), None


def kafka_bytes(data: bytes | bytearray | memoryview) -> int:
    """The bytes of a stream's format 3 batches: those a Kafka fetch sends as they are."""
    return sum(len(v) for v in batch_format.split_batches(data) if is_kafka(v))


def as_kafka(
    data: bytes | bytearray | memoryview,
    codec: Compression,
    *,
    zstd_readable: bool,
    max_bytes: int = batch_format.MAX_BATCH_BYTES,
) -> bytes:
    """Rule 4: a stream of stored batches as Kafka batches. `codec`: what a converted
    batch is compressed with (the topic's `compression.type`); `zstd_readable`: the
    client reads zstd (Fetch v10+), else a zstd batch is sent converted, uncompressed.
    Batches after the one that takes the answer to `max_bytes` are left out (never the
    first), as a conversion may be far larger than the stored bytes: a Kafka consumer
    fetches again from where the answer ends."""
    out: list[bytes | memoryview] = []
    size = 0
    for view in batch_format.split_batches(data):
        if out and size >= max_bytes:
            break
        piece: bytes | memoryview
        if not is_kafka(view):
            piece = records.kraftlite_to_kafka(view, codec)
        else:
            header = batch_format.read_header(view)
            piece = batch_format.kafka_batch(view, header)
            codec_bits = piece[22] & records.ATTR_COMPRESSION  # (attributes' low byte)
            if not zstd_readable and codec_bits == Compression.ZSTD:
                piece = records.kraftlite_to_kafka(columnar(view), Compression.NONE)
        out.append(piece)
        size += len(piece)
    return b"".join(out)


def decode(buf: bytes | bytearray | memoryview) -> DecodedBatch:
    """One whole stored batch's records (batch.decode for either form), with the stored
    batch's header (a format 3 batch's, whose CRC names it to the log)."""
    view = memoryview(buf)
    if not is_kafka(view):
        return batch_format.decode(view)
    return replace(batch_format.decode(columnar(view)), header=batch_format.read_header(view))


def kept_runs(
    buf: bytes | bytearray | memoryview, decoded: DecodedBatch, keep: Sequence[bool]
) -> list[bytes]:
    """batch.kept_runs for either form (log compaction, rule 5): `decoded` is the stored
    batch `buf` decoded (`decode`). A format 3 batch's runs are format 3 batches too, each
    a Kafka batch compressed in the stored one's codec, so a cleaned log keeps what
    compression saved (as Kafka's cleaner does)."""
    view = memoryview(buf)
    if not is_kafka(view):
        return batch_format.kept_runs(decoded, keep)
    header = decoded.header
    codec = Compression(batch_format.kafka_batch(view, header)[22] & records.ATTR_COMPRESSION)
    producer = header.producer_id >= 0
    runs: list[bytes] = []
    for start, end in batch_format.kept_spans(keep, header.record_count):
        stamps = decoded.timestamps[start:end]
        triple = (
            (header.producer_id, header.producer_epoch, (header.base_sequence + start) % 2**31)
            if producer
            else _NO_PRODUCER
        )
        transactional = batch_format.is_transactional(header)
        sent = records.encode_batch(
            [
                records.KafkaRecord(
                    i - start,
                    decoded.timestamps[i],
                    decoded.keys[i],
                    decoded.values[i],
                    decoded.headers[i],
                )
                for i in range(start, end)
            ],
            producer_id=triple[0],
            producer_epoch=triple[1],
            base_sequence=triple[2],
            compression=codec,
            is_transactional=transactional,
        )
        envelope = batch_format.kafka_envelope(
            sent,
            first_timestamp=stamps[0],
            max_timestamp=max(stamps),
            producer=triple,
            transactional=transactional,
        )
        runs.append(
            bytes(batch_format.stamp(envelope, header.base_offset + start, header.leader_epoch))
        )
    return runs


def decode_stream(data: bytes | bytearray | memoryview) -> Iterator[DecodedBatch]:
    """Every batch of a stream of stored batches, decoded."""
    for view in batch_format.split_batches(data):
        yield decode(view)


def keys_of(buf: bytes | bytearray | memoryview) -> tuple[BatchHeader, list[bytes | None]]:
    """batch.keys_of for either form; the header is the stored batch's."""
    view = memoryview(buf)
    if not is_kafka(view):
        return batch_format.keys_of(view)
    header, decoded = _decoded_kafka(view)
    return header, decoded.keys


def record_in(
    buf: bytes | bytearray | memoryview, offset: int
) -> batch_format.ConsumedRecord | None:
    """batch.record_in for either form."""
    return batch_format.record_in(columnar(buf), offset)


def null_keys(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[int]:
    """batch.null_keys for either form: a kept Kafka batch's were found as it was made, any
    other format 3 batch's are read by decoding it."""
    if isinstance(buf, KeptKafkaBatch):
        return list(buf.keyless)
    view = memoryview(buf)
    if header.magic != batch_format.MAGIC_KAFKA:
        return batch_format.null_keys(view, header)
    return [i for i, key in enumerate(_decoded_kafka(view)[1].keys) if key is None]


def timestamps(buf: bytes | bytearray | memoryview) -> npt.NDArray[np.int64]:
    """A stored (checked) batch's record timestamps, in offset order."""
    view = memoryview(buf)
    if not is_kafka(view):
        count = int.from_bytes(view[20:24], "little")
        return np.frombuffer(view, "<i8", count, batch_format.body_start(view))
    stamps = _decoded_kafka(view)[1].columns.timestamps
    return np.asarray(stamps, dtype=np.int64)
