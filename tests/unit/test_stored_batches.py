"""Format 3 (protocol/batch.py rule 9) and protocol/stored.py: a Kafka batch kept as its
producer sent it, read by every reader as the columnar batch it converts to."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.protocol import batch as fmt
from kraftlite.protocol import stored
from kraftlite.protocol.kafka import records
from kraftlite.protocol.kafka.records import Compression, KafkaRecord

CODECS = list(Compression)


def kafka(
    values: list[bytes | None],
    *,
    keys: list[bytes | None] | None = None,
    headers: list[tuple[tuple[str, bytes | None], ...]] | None = None,
    timestamps: list[int] | None = None,
    compression: Compression = Compression.NONE,
    **producer: Any,
) -> bytes:
    stamps = timestamps or [1_000 + i for i in range(len(values))]
    return records.encode_batch(
        [
            KafkaRecord(
                i,
                stamps[i],
                None if keys is None else keys[i],
                value,
                () if headers is None else headers[i],
            )
            for i, value in enumerate(values)
        ],
        compression=compression,
        **producer,
    )


def keep(data: bytes, topic_codec: Compression | None = None) -> stored.KeptKafkaBatch | None:
    [decoded] = records.decode_batches(data)
    return stored.kafka_form(data, decoded, topic_codec)


def kept(data: bytes) -> stored.KeptKafkaBatch:
    found = keep(data)
    assert found is not None
    return found


@pytest.mark.parametrize("codec", CODECS)
def test_a_kept_batch_is_sent_back_byte_for_byte_but_its_offset_and_epoch(
    codec: Compression,
) -> None:
    sent = kafka([b"v%d" % i * 30 for i in range(200)], compression=codec)
    batch = kept(sent)
    header = fmt.read_header(batch)
    assert (header.magic, header.record_count, header.first_timestamp, header.max_timestamp) == (
        fmt.MAGIC_KAFKA,
        200,
        1_000,
        1_199,
    )
    assert len(batch) - len(sent) < fmt.HEADER_V2_SIZE + 8  # the envelope is all it adds
    stamped = fmt.stamp(batch, 5_000, 7)
    [(checked, _)] = list(fmt.checked_batches(stamped))  # the follower's check
    assert (checked.base_offset, checked.leader_epoch) == (5_000, 7)
    out = stored.as_kafka(stamped, Compression.NONE, zstd_readable=True)
    assert out[16:] == sent[16:]  # magic, CRC, attributes and records: as sent
    assert struct.unpack_from(">qii", out) == (5_000, len(sent) - 12, 7)
    [again] = records.decode_batches(out)
    assert again.compression == codec and again.base_offset == 5_000


def test_zstd_goes_to_a_client_before_fetch_v10_converted_and_uncompressed() -> None:
    sent = kafka([b"z" * 50] * 100, compression=Compression.ZSTD)
    stamped = fmt.stamp(kept(sent), 10, 1)
    [old] = records.decode_batches(stored.as_kafka(stamped, Compression.NONE, zstd_readable=False))
    assert old.compression == Compression.NONE and old.values == [b"z" * 50] * 100
    assert old.base_offset == 10
    # decompressed, a batch may be far larger than stored: an answer stops at max_bytes
    # (the first batch whatever its size), and the consumer fetches the rest
    two = bytes(stamped) + bytes(fmt.stamp(kept(sent), 110, 1))
    both = records.decode_batches(stored.as_kafka(two, Compression.NONE, zstd_readable=False))
    assert [b.base_offset for b in both] == [10, 110]
    first = stored.as_kafka(two, Compression.NONE, zstd_readable=False, max_bytes=len(two))
    assert [b.base_offset for b in records.decode_batches(first)] == [10]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=12)),
            st.one_of(st.none(), st.binary(max_size=40)),
            st.lists(
                st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))),
                max_size=2,
            ),
            st.integers(min_value=0, max_value=2**40),
        ),
        min_size=1,
        max_size=120,
    ),
    st.sampled_from(CODECS),
    st.booleans(),
)
def test_every_reader_reads_a_kept_batch_as_its_conversion(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    codec: Compression,
    idempotent: bool,
) -> None:
    """Offsets, timestamps, keys, values and headers are the same on both edges: every
    reader of a kept batch gets what the converted one (the path before issue 29) gives."""
    keys = [k for k, _, _, _ in items]
    values = [v for _, v, _, _ in items]
    headers = [tuple(h) for _, _, h, _ in items]
    stamps = [t for _, _, _, t in items]
    producer = {"producer_id": 9, "producer_epoch": 2, "base_sequence": 40} if idempotent else {}
    sent = kafka(
        values, keys=keys, headers=headers, timestamps=stamps, compression=codec, **producer
    )
    [decoded] = records.decode_batches(sent)
    converted = fmt.stamp(records.kafka_to_kraftlite(decoded), 300, 4)
    stamped = bytes(fmt.stamp(kept(sent), 300, 4))
    expected = fmt.decode(converted)
    got = stored.decode(stamped)
    assert got.header == fmt.read_header(stamped)  # the stored batch's own header
    assert (got.header.producer_id, got.header.base_sequence) == (
        (9, 40) if idempotent else (-1, -1)
    )
    assert list(got.records()) == list(expected.records())
    assert stored.columnar(stamped) == bytes(converted)
    after = bytes(fmt.stamp(kept(sent), 300 + len(items), 4))
    assert stored.as_columnar(stamped + after, 1 << 30) == (
        bytes(converted) + bytes(fmt.stamp(converted, 300 + len(items), 4)),
        None,
    )
    # a bounded answer: the first batch whatever its size, then the offset after it
    assert stored.as_columnar(stamped + after, 1) == (bytes(converted), 300 + len(items))
    assert stored.keys_of(stamped)[1] == keys
    assert stored.null_keys(stamped, got.header) == [i for i, k in enumerate(keys) if k is None]
    assert list(stored.timestamps(stamped)) == stamps
    middle = 300 + len(items) // 2
    assert stored.record_in(stamped, middle) == expected.record_at(middle)
    # and a Kafka fetch gives the records as sent
    [back] = records.decode_batches(stored.as_kafka(stamped, Compression.NONE, zstd_readable=True))
    assert back.values == values and back.keys == keys and back.timestamps == stamps


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_corrupted_byte_of_a_kept_batch_is_detected(data: st.DataObject) -> None:
    """The follower's check (CRCs and the two headers held against each other) catches a
    change of any one byte: none of a format 3 batch is outside a CRC or a comparison."""
    codec = data.draw(st.sampled_from(CODECS))
    count = data.draw(st.integers(min_value=1, max_value=20))
    sent = kafka([b"v%d" % i for i in range(count)], compression=codec)
    stamped = bytearray(fmt.stamp(kept(sent), 77, 3))
    position = data.draw(st.integers(min_value=0, max_value=len(stamped) - 1))
    stamped[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(fmt.CorruptBatchError):
        list(fmt.checked_batches(stamped))
    with pytest.raises(fmt.CorruptBatchError):
        stored.validate(stamped)


def test_columnar_readers_refuse_a_kept_batch_rather_than_misread_it() -> None:
    stamped = fmt.stamp(kept(kafka([b"a", b"b"])), 0, 0)
    for read in (fmt.validate, fmt.decode, fmt.columns, fmt.keys_of):
        with pytest.raises(fmt.CorruptBatchError, match="format 3"):
            read(stamped)


def _with_header(data: bytes, **fields: int) -> bytes:
    """`data` (one Kafka batch) with header fields replaced and its CRC made right."""
    layout = {
        "attributes": (21, ">h"),
        "last_offset_delta": (23, ">i"),
        "max_timestamp": (35, ">q"),
        "producer_id": (43, ">q"),
        "producer_epoch": (51, ">h"),
        "base_sequence": (53, ">i"),
    }
    out = bytearray(data)
    for name, value in fields.items():
        at, code = layout[name]
        struct.pack_into(code, out, at, value)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def test_what_cannot_be_kept_as_sent_is_left_to_the_conversion() -> None:
    """kafka_form answers None (the edge converts, as before) for what format 3 cannot
    say as Kafka and kraftlite would both read it."""
    plain = kafka([b"a", b"b", b"c"])
    assert keep(plain) is not None
    assert keep(plain, Compression.NONE) is not None  # compression.type uncompressed
    assert keep(plain, Compression.LZ4) is None  # the topic wants lz4: converted, compressed
    assert keep(kafka([b"a"], compression=Compression.LZ4), Compression.LZ4) is not None
    assert keep(_with_header(plain, attributes=0x08)) is None  # LogAppendTime
    assert keep(_with_header(plain, attributes=0x40)) is None  # a cleaner's delete horizon
    assert keep(_with_header(plain, max_timestamp=5)) is None  # not its records' largest
    assert keep(_with_header(plain, producer_id=-1, producer_epoch=0)) is None  # half a producer
    assert keep(_with_header(plain, attributes=0x10)) is None  # transactional, no producer
    # a record's timestamp (base + delta) outside int64: no kraftlite batch can hold it
    for stamps in ([-1, -(2**63) - 1], [-(2**63) - 1, 0], [0, 2**63]):
        try:
            sent = kafka([b"a", b"b"], timestamps=stamps)
        except (OverflowError, struct.error):
            continue  # not even encodable: nothing to keep
        assert keep(sent) is None, stamps
        [decoded] = records.decode_batches(sent)
        with pytest.raises(records.CorruptRecordsError):
            records.kafka_to_kraftlite(decoded)  # and the conversion refuses it: CORRUPT
    gappy = records.encode_batch([KafkaRecord(0, 1, None, b"a"), KafkaRecord(2, 1, None, b"b")])
    assert keep(gappy) is None  # offsets with a gap
    transactional = kafka(
        [b"t"], producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    header = fmt.read_header(kept(transactional))
    assert fmt.is_transactional(header) and header.producer_id == 3


def test_a_kept_batch_knows_its_keyless_records_and_its_producer() -> None:
    batch = kept(kafka([b"a", b"b", b"c"], keys=[b"k", None, None]))
    assert batch.keyless == (1, 2)
    assert stored.null_keys(batch, fmt.read_header(batch)) == [1, 2]
    assert fmt.names_producer(batch) is False
    idempotent = kept(kafka([b"a"], producer_id=1, producer_epoch=0, base_sequence=0))
    assert fmt.names_producer(idempotent) is True


@pytest.mark.parametrize("codec", CODECS)
def test_the_cleaners_runs_of_a_kept_batch_stay_kept_and_compressed(codec: Compression) -> None:
    """Compaction rewrites a format 3 batch as format 3 runs in its codec (as Kafka's
    cleaner keeps a batch's compression), each the records kept, at their offsets, with
    the producer's sequence of its first record."""
    values = [b"row %d " % i * 40 for i in range(100)]
    sent = kafka(
        values,
        keys=[b"k%d" % (i % 10) for i in range(100)],
        compression=codec,
        producer_id=4,
        producer_epoch=1,
        base_sequence=50,
    )
    stamped = bytes(fmt.stamp(kept(sent), 1_000, 2))
    decoded = stored.decode(stamped)
    keep = [i >= 90 or i in (3, 4) for i in range(100)]  # runs 3-4 and 90-99
    runs = stored.kept_runs(stamped, decoded, keep)
    headers = [fmt.read_header(run) for run in runs]
    assert [(h.magic, h.base_offset, h.record_count, h.base_sequence) for h in headers] == [
        (fmt.MAGIC_KAFKA, 1_003, 2, 53),
        (fmt.MAGIC_KAFKA, 1_090, 10, 140),
    ]
    for run in runs:
        stored.validate(run)
        [inner] = records.decode_batches(stored.as_kafka(run, Compression.NONE, zstd_readable=True))
        assert inner.compression == codec and inner.producer_id == 4
    again = [r for run in runs for r in stored.decode(run).records()]
    assert again == [r for r in decoded.records() if keep[r.offset - 1_000]]
    if codec is not Compression.NONE:  # smaller than the same records uncompressed
        assert sum(map(len, runs)) < sum(map(len, fmt.kept_runs(decoded, keep)))


@pytest.mark.parametrize("headers", [(), (("h", b""),)], ids=["packed parser", "reference"])
def test_a_kept_batch_keeps_only_the_keyless_indexes_an_answer_names(
    headers: tuple[tuple[str, bytes], ...],
) -> None:
    """A kept batch holds the first KEYLESS_KEPT indexes of its keyless records (what an
    INVALID_RECORD answer names at most), not one per record: it lives through the acks
    wait, and a highly compressed batch may hold millions of records."""
    count = stored.KEYLESS_KEPT * 3
    keys = [None if i % 2 else b"k" for i in range(count)]
    data = records.encode_batch(
        [KafkaRecord(i, 1, keys[i], b"v", headers) for i in range(count)],
        compression=Compression.ZSTD,
    )
    (decoded,) = records.decode_batches(data)
    kept = stored.kafka_form(data, decoded, None)
    assert isinstance(kept, stored.KeptKafkaBatch)
    assert kept.keyless == tuple(range(1, 2 * stored.KEYLESS_KEPT, 2))
    assert stored.null_keys(kept, fmt.read_header(kept)) == list(kept.keyless)
    assert decoded.keyless == tuple(i for i in range(count) if i % 2)  # unbounded: all
