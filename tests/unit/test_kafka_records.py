"""Kafka record batches (magic 2): kafka-python as an independent encoder and reader,
every compression codec, the kraftlite conversions, and hostile batches."""

from __future__ import annotations

import contextlib
import gzip
import struct
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.protocol import batch as kraftlite_batch
from kraftlite.protocol.kafka import records
from kraftlite.protocol.kafka.messages import ApiKey, decode_request
from kraftlite.protocol.kafka.records import (
    Compression,
    CorruptRecordsError,
    KafkaRecord,
    decode_batches,
    encode_batch,
    kafka_to_kraftlite,
    kraftlite_to_kafka,
)
from kraftlite.protocol.kafka.wire import WireError, encode_varint, encode_varlong

with warnings.catch_warnings():  # kafka-python's legacy importlib.resources use (see
    warnings.filterwarnings(  # test_partitioner.py); pytest turns warnings into errors
        "ignore", r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    import kafka.codec
    import kafka.record.default_records as kafka_default_records
    from kafka.protocol.producer.produce import ProduceRequest
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

BASE_TS = 1_700_000_000_000


def _lz4_frame(data: bytes) -> bytes:
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


@pytest.fixture
def kafka_python_codecs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Give kafka-python the codecs it would import (python-snappy, lz4, zstandard), backed
    by cramjam. Its own xerial snappy framing, batch attributes and record parsing stay
    its own: only the block codecs are borrowed."""
    monkeypatch.setattr(
        kafka.codec,
        "snappy",
        SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
        ),
    )
    monkeypatch.setattr(kafka.codec, "lz4", SimpleNamespace())
    monkeypatch.setattr(kafka.codec, "zstd", SimpleNamespace())
    monkeypatch.setattr(kafka_default_records, "lz4_encode", _lz4_frame)
    monkeypatch.setattr(
        kafka_default_records, "lz4_decode", lambda data: bytes(cramjam.lz4.decompress(data))
    )
    monkeypatch.setattr(
        kafka_default_records, "zstd_encode", lambda data: bytes(cramjam.zstd.compress(data))
    )
    monkeypatch.setattr(
        kafka_default_records, "zstd_decode", lambda data: bytes(cramjam.zstd.decompress(data))
    )
    yield


def _sample_records(count: int = 6) -> list[KafkaRecord]:
    return [
        KafkaRecord(
            offset_delta=i,
            timestamp=BASE_TS + (i * 37) % 50 - 10,  # not monotonic: negative deltas too
            key=None if i % 3 == 0 else b"key-%d" % i,
            value=None if i == 4 else b"value " * (i * 40),
            headers=[("trace", b"t%d" % i), ("empty", b""), ("null", None)] if i % 2 else (),
        )
        for i in range(count)
    ]


def _kafka_python_batch(recs: list[KafkaRecord], compression: int, **producer: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 20,
    )
    for record in recs:
        builder.append(
            record.offset_delta,
            timestamp=record.timestamp,
            key=record.key,
            value=record.value,
            headers=list(record.headers),
        )
    return bytes(builder.build())


def _read_with_kafka_python(data: bytes) -> list[tuple[Any, ...]]:
    memory = MemoryRecords(data)
    out = []
    while (batch := memory.next_batch()) is not None:
        assert batch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return out


def _plain(recs: list[KafkaRecord]) -> list[tuple[Any, ...]]:
    """Records as comparable tuples (headers as lists: decoding shares one empty tuple)."""
    return [(r.offset_delta, r.timestamp, r.key, r.value, list(r.headers)) for r in recs]


def _expected(recs: list[KafkaRecord], base_offset: int = 0) -> list[tuple[Any, ...]]:
    return [
        (base_offset + r.offset_delta, r.timestamp, r.key, r.value, list(r.headers)) for r in recs
    ]


# ------------------------------------------------------------- kafka-python, both ways


def test_uncompressed_batch_is_byte_identical_to_kafka_pythons() -> None:
    recs = _sample_records()
    theirs = _kafka_python_batch(recs, 0)
    # kafka-python writes partition leader epoch 0 where producers conventionally write -1
    assert encode_batch(recs, partition_leader_epoch=0) == theirs


CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@pytest.mark.usefixtures("kafka_python_codecs")
@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name.lower())
def test_kafka_python_batches_decode(compression: Compression) -> None:
    recs = _sample_records(20)
    data = _kafka_python_batch(recs, compression, producer_id=9, producer_epoch=2, base_sequence=5)
    [batch] = decode_batches(data)
    assert batch.compression == compression
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 5)
    assert batch.record_count == 20 and batch.last_offset_delta == 19
    assert batch.base_timestamp == recs[0].timestamp
    assert batch.max_timestamp == max(r.timestamp for r in recs)
    assert _plain(batch.records) == _plain(recs)


@pytest.mark.usefixtures("kafka_python_codecs")
@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name.lower())
def test_our_batches_read_in_kafka_python(compression: Compression) -> None:
    recs = _sample_records(20)
    data = encode_batch(recs, base_offset=1000, partition_leader_epoch=7, compression=compression)
    assert data[21:23] == struct.pack(">h", compression)
    assert _read_with_kafka_python(data) == _expected(recs, 1000)


def test_compressed_sections_have_the_framing_java_reads() -> None:
    section_at = records.HEADER_SIZE
    recs = _sample_records(20)
    gz = encode_batch(recs, compression=Compression.GZIP)[section_at:]
    assert gz[:2] == b"\x1f\x8b" and gzip.decompress(gz)  # a standard gzip member
    snappy = encode_batch(recs, compression=Compression.SNAPPY)[section_at:]
    assert snappy[:16] == b"\x82SNAPPY\x00" + bytes.fromhex("0000000100000001")  # xerial
    lz4 = encode_batch(recs, compression=Compression.LZ4)[section_at:]
    flags, block_descriptor = lz4[4], lz4[5]
    assert lz4[:4] == bytes.fromhex("04224d18")  # LZ4 frame magic
    assert flags >> 6 == 1 and flags & 0x20  # version 01, independent blocks (Java's rule)
    assert (block_descriptor >> 4) & 0x7 in {4, 5, 6, 7}  # a block size Java accepts
    zstd = encode_batch(recs, compression=Compression.ZSTD)[section_at:]
    assert zstd[:4] == bytes.fromhex("28b52ffd")


def test_raw_snappy_as_librdkafka_writes_it_decodes() -> None:
    """librdkafka's producer writes raw snappy blocks, not xerial's framing."""
    recs = _sample_records()
    plain = encode_batch(recs)
    section = bytes(cramjam.snappy.compress_raw(plain[records.HEADER_SIZE :]))
    data = _with_section(plain, section, attributes=Compression.SNAPPY)
    assert _plain(decode_batches(data)[0].records) == _plain(recs)


def test_produce_requests_built_by_kafka_python_decode() -> None:
    recs = _sample_records()
    batch = _kafka_python_batch(recs, 0)
    for version in (3, 9):
        topic = ProduceRequest.TopicProduceData
        request = ProduceRequest(
            version=version,
            transactional_id=None,
            acks=-1,
            timeout_ms=30000,
            topic_data=[
                topic(
                    name="orders",
                    partition_data=[topic.PartitionProduceData(index=2, records=batch)],
                )
            ],
        )
        request.with_header(correlation_id=11, client_id="kafka-python")
        decoded = decode_request(bytes(request.encode(header=True)))
        assert (decoded.api_key, decoded.api_version) == (ApiKey.PRODUCE, version)
        assert decoded.body["acks"] == -1 and decoded.body["timeout_ms"] == 30000
        [partition] = decoded.body["topic_data"][0]["partition_data"]
        assert partition["index"] == 2
        [ours] = decode_batches(partition["records"])
        assert _plain(ours.records) == _plain(recs)


NULL_AND_EMPTY = [("a", b"x"), ("n", None), ("e", b"")]


def test_null_header_values_stay_null_from_kafka_to_kraftlite() -> None:
    """Rule 3: a header value of length -1 is None, one of length 0 is b"", through the
    Kafka batch, the stored kraftlite batch and its records."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 16)
    builder.append(0, timestamp=5, key=None, value=b"v", headers=NULL_AND_EMPTY)
    builder.append(1, timestamp=6, key=None, value=b"w", headers=[])
    [batch] = decode_batches(bytes(builder.build()))
    assert batch.records[0].headers == NULL_AND_EMPTY
    assert type(batch.columns).__name__ == "_RecordLists"  # headers: the reference parser
    stored = kafka_to_kraftlite(batch)
    header = kraftlite_batch.validate(stored)
    assert header.attributes == (
        kraftlite_batch.ATTR_HAS_HEADERS | kraftlite_batch.ATTR_NULL_HEADER_VALUES
    )
    assert kraftlite_batch.decode(stored).headers == [tuple(NULL_AND_EMPTY), ()]


def test_null_header_values_stay_null_from_kraftlite_to_kafka() -> None:
    """A stored null header value is fetched as length -1 (what Kafka's consumers read as
    null), an empty one as length 0: kafka-python reads them back as None and b""."""
    stored = bytes(
        kraftlite_batch.stamp(
            kraftlite_batch.encode_batch(
                [b"v", b"w"], timestamps=[5, 6], headers=[NULL_AND_EMPTY, [("n", None)]]
            ),
            40,
            2,
        )
    )
    fetched = kraftlite_to_kafka(stored)
    assert _read_with_kafka_python(fetched) == [
        (40, 5, None, b"v", NULL_AND_EMPTY),
        (41, 6, None, b"w", [("n", None)]),
    ]
    [batch] = decode_batches(fetched)
    assert [list(h) for h in batch.headers] == [NULL_AND_EMPTY, [("n", None)]]
    # the header's bytes: name "n" (length 1), then the value's length -1 (zigzag 0x01)
    assert encode_varint(1) + b"n" + encode_varint(-1) in fetched


def test_null_header_values_encode_as_kafka_pythons() -> None:
    recs = [KafkaRecord(0, 5, None, b"v", NULL_AND_EMPTY), KafkaRecord(1, 5, b"k", None, [])]
    assert encode_batch(recs, partition_leader_epoch=0) == _kafka_python_batch(recs, 0)


def test_kraftlite_batches_stored_before_null_header_values_fetch_the_same() -> None:
    """An old batch (no attributes bit 1) whose value was empty stays empty on fetch."""
    stored = kraftlite_batch.encode_batch([b"v"], timestamps=[5], headers=[[("n", b"")]])
    assert stored[13] == kraftlite_batch.ATTR_HAS_HEADERS
    assert _read_with_kafka_python(kraftlite_to_kafka(stored)) == [(0, 5, None, b"v", [("n", b"")])]


def test_log_append_time_batches_give_every_record_the_max_timestamp() -> None:
    plain = encode_batch(_sample_records())
    data = _with_section(
        plain, plain[records.HEADER_SIZE :], attributes=records.ATTR_LOG_APPEND_TIME
    )
    [batch] = decode_batches(data)
    assert batch.log_append_time
    assert set(batch.timestamps) == {batch.max_timestamp}


# --------------------------------------------------------------------- round trips

optional_bytes = st.none() | st.binary(max_size=300)
headers_strategy = st.lists(
    st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=10)), max_size=3
)


@st.composite
def record_lists(draw: st.DrawFn) -> list[KafkaRecord]:
    count = draw(st.integers(1, 30))
    base = draw(st.integers(-(2**40), 2**40))
    return [
        KafkaRecord(
            i,
            base + draw(st.integers(-(2**31), 2**31)),
            draw(optional_bytes),
            draw(optional_bytes),
            draw(headers_strategy),
        )
        for i in range(count)
    ]


@settings(max_examples=200, deadline=None)
@given(record_lists(), st.sampled_from(CODECS), st.integers(0, 2**62), st.integers(-1, 2**31 - 1))
def test_batches_round_trip(
    recs: list[KafkaRecord], compression: Compression, base_offset: int, epoch: int
) -> None:
    data = encode_batch(
        recs, base_offset=base_offset, partition_leader_epoch=epoch, compression=compression
    )
    [batch] = decode_batches(data + data[:10], allow_truncated_tail=True)
    assert (batch.base_offset, batch.partition_leader_epoch) == (base_offset, epoch)
    assert _plain(batch.records) == _plain(recs)


@settings(max_examples=200, deadline=None)
@given(record_lists(), st.integers(0, 2**62), st.integers(-1, 2**31 - 1))
def test_conversions_round_trip(recs: list[KafkaRecord], base_offset: int, epoch: int) -> None:
    [batch] = decode_batches(encode_batch(recs))
    stored = bytes(kraftlite_batch.stamp(kafka_to_kraftlite(batch), base_offset, epoch))
    decoded = kraftlite_batch.decode(stored)
    assert decoded.values == [r.value for r in recs]
    assert decoded.keys == [r.key for r in recs]
    assert list(decoded.timestamps) == [r.timestamp for r in recs]
    assert decoded.headers == [tuple(r.headers) for r in recs]
    back = kraftlite_to_kafka(stored)
    [again] = decode_batches(back)
    assert (again.base_offset, again.partition_leader_epoch) == (base_offset, epoch)
    assert (again.producer_id, again.attributes) == (-1, 0)
    assert _plain(again.records) == _plain(recs)
    assert _read_with_kafka_python(back) == _expected(recs, base_offset)


@settings(max_examples=200, deadline=None)
@given(record_lists(), st.integers(0, 40), st.integers(0, 60))
def test_a_bounded_decode_reads_the_same_or_declines_over_its_bound(
    recs: list[KafkaRecord], most_records: int, most_headers: int
) -> None:
    """`reference_bound`: what the reference parser reads under it is what an unbounded
    decode reads; over it (more records, or more headers in all) it declines, never
    half-read. The packed parser's batches (96 records or more, no headers) are not its."""
    data = encode_batch(recs)
    bound = records.ReferenceBound(most_records, most_headers)
    headers = sum(len(r.headers) for r in recs)
    over = len(recs) > most_records or headers > most_headers
    try:
        [batch] = decode_batches(data, reference_bound=bound)
    except records.ReferenceParseDeclined:
        assert over
    else:
        assert not over
        assert _plain(batch.records) == _plain(recs)


def test_the_packed_parser_is_not_bounded_by_the_reference_bound() -> None:
    plain = [KafkaRecord(i, 1, None, b"v", ()) for i in range(500)]
    [batch] = decode_batches(encode_batch(plain), reference_bound=records.ReferenceBound(0, 0))
    assert batch.record_count == 500
    one_header = [*plain[:-1], KafkaRecord(499, 1, None, b"v", (("h", b""),))]
    with pytest.raises(records.ReferenceParseDeclined):  # the packed parser declines it too
        decode_batches(encode_batch(one_header), reference_bound=records.ReferenceBound(500, 0))


def test_conversion_of_a_stream_of_stored_batches() -> None:
    """What a fetch answer is: each stored kraftlite batch becomes one Kafka batch."""
    stored = b"".join(
        bytes(
            kraftlite_batch.stamp(
                kraftlite_batch.encode_batch([b"a", b"b"], timestamps=[1, 2]), offset, 3
            )
        )
        for offset in (0, 2, 4)
    )
    kafka_bytes = b"".join(
        kraftlite_to_kafka(view) for view in kraftlite_batch.split_batches(stored)
    )
    offsets = [r[0] for r in _read_with_kafka_python(kafka_bytes)]
    assert offsets == list(range(6))


@pytest.mark.parametrize(
    ("recs", "message"),
    [
        ([KafkaRecord(0, 1, None, b"a"), KafkaRecord(2, 1, None, b"b")], "not 0..n-1"),
        ([KafkaRecord(1, 1, None, b"a")], "not 0..n-1"),
    ],
)
def test_sparse_offset_deltas_are_refused(recs: list[KafkaRecord], message: str) -> None:
    [batch] = decode_batches(encode_batch(recs))
    with pytest.raises(CorruptRecordsError, match=message):
        kafka_to_kraftlite(batch)


def test_control_and_empty_batches_are_refused() -> None:
    plain = encode_batch([KafkaRecord(0, 1, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")])
    control = _with_section(plain, plain[records.HEADER_SIZE :], attributes=records.ATTR_CONTROL)
    with pytest.raises(CorruptRecordsError, match="control"):
        kafka_to_kraftlite(decode_batches(control)[0])
    empty = _with_section(plain, b"", count=0)
    [batch] = decode_batches(empty)  # Kafka's compaction can leave these: readable
    with pytest.raises(CorruptRecordsError, match="empty"):
        kafka_to_kraftlite(batch)


# ------------------------------------------------------------------------------ hostile


def _with_section(
    template: bytes, section: bytes, *, attributes: int | None = None, count: int | None = None
) -> bytes:
    """A batch with the template's header around another records section, its length,
    attributes and count adjusted and its CRC recomputed, so only the section is wrong."""
    header = bytearray(template[: records.HEADER_SIZE])
    struct.pack_into(">i", header, 8, records.HEADER_SIZE - 12 + len(section))
    if attributes is not None:
        struct.pack_into(">h", header, 21, attributes)
    if count is not None:
        struct.pack_into(">i", header, 57, count)
    body = bytes(header[21:]) + section
    struct.pack_into(">I", header, 17, crc32c(body))
    return bytes(header[:21]) + body


def _record(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return encode_varint(len(body)) + body


ONE = encode_varint(1)
ZERO = encode_varint(0)
NULL = encode_varint(-1)
GOOD = _record(b"\x00", ZERO, ZERO, NULL, ONE, b"v", ZERO)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (GOOD + b"\x00", "after the last"),
        (_record(b"\x00", b"\x80" * 10 + b"\x01", ZERO, NULL, NULL, ZERO), "longer than 10"),
        (_record(b"\x00", ZERO, b"\xff" * 5 + b"\x01", NULL, NULL, ZERO), "longer than 5"),
        (_record(b"\x00", ZERO, ZERO, encode_varint(-2), NULL, ZERO), "invalid key length"),
        (_record(b"\x00", ZERO, ZERO, NULL, encode_varint(-7), ZERO), "invalid value length"),
        (_record(b"\x00", ZERO, ZERO, NULL, encode_varint(50), b"v"), "truncated|disagrees"),
        (_record(b"\x00", ZERO, ZERO, NULL, NULL, encode_varint(2**30)), "header count"),
        (_record(b"\x00", ZERO, ZERO, NULL, NULL, ONE, ONE, b"\xff", NULL), "not UTF-8"),
        (_record(b"\x00", ZERO, ZERO, NULL, NULL, ONE, encode_varint(-3), b"xx"), "key length"),
        (_record(b"\x00", ZERO, ZERO, NULL, NULL, ZERO, b"extra"), "disagrees"),
        (encode_varint(-5) + GOOD, "overruns"),
        (encode_varint(500) + GOOD[1:], "overruns"),
        (b"\x80", "truncated|cannot fit"),
        (_record(b"\x00", encode_varlong(2**62)), "truncated"),
    ],
)
def test_malformed_records_are_named(section: bytes, message: str) -> None:
    data = _with_section(encode_batch([KafkaRecord(0, 0, None, b"v")]), section, count=1)
    with pytest.raises(CorruptRecordsError, match=message):
        decode_batches(data)


def test_record_count_must_match_the_records() -> None:
    template = encode_batch([KafkaRecord(0, 0, None, b"v")])
    with pytest.raises(CorruptRecordsError):
        decode_batches(_with_section(template, GOOD + GOOD, count=1))
    with pytest.raises(CorruptRecordsError, match="cannot fit"):
        decode_batches(_with_section(template, GOOD, count=2**31 - 1))
    with pytest.raises(CorruptRecordsError, match="negative record count"):
        decode_batches(_with_section(template, GOOD, count=-1))


def test_truncated_at_every_length_and_bit_flips_are_detected() -> None:
    data = encode_batch(_sample_records(), compression=Compression.NONE)
    for size in range(1, len(data)):
        with pytest.raises(CorruptRecordsError):
            decode_batches(data[:size])
        assert decode_batches(data[:size], allow_truncated_tail=True) == []
    for position in range(8, len(data)):  # all but base_offset (which no CRC covers)
        flipped = bytearray(data)
        flipped[position] ^= 0x10
        if 12 <= position < 16:  # partition_leader_epoch: rewritten by brokers, no CRC
            assert decode_batches(bytes(flipped))[0].partition_leader_epoch != -1
            continue
        with pytest.raises(CorruptRecordsError):
            decode_batches(bytes(flipped))


def test_bad_magic_and_lengths() -> None:
    data = bytearray(encode_batch(_sample_records()))
    data[16] = 1
    with pytest.raises(CorruptRecordsError, match="magic 1"):
        decode_batches(bytes(data))
    short = bytearray(encode_batch(_sample_records()))
    struct.pack_into(">i", short, 8, 3)
    with pytest.raises(CorruptRecordsError, match="invalid batch length"):
        decode_batches(bytes(short))


@pytest.mark.parametrize(
    "compression", [Compression.GZIP, Compression.LZ4, Compression.ZSTD, Compression.SNAPPY]
)
def test_decompression_bombs_are_bounded(compression: Compression) -> None:
    """20 MB of records in a few kB: refused at max_bytes, without allocating 20 MB."""
    record = _record(b"\x00", ZERO, ZERO, NULL, encode_varint(1 << 20), bytes(1 << 20), ZERO)
    section = record * 20
    template = encode_batch([KafkaRecord(0, 0, None, b"v")])
    plain = _with_section(template, section, count=20)
    bomb = encode_batch_section(plain, compression)
    assert len(bomb) < len(section) // 10
    [batch] = decode_batches(bomb, max_bytes=32 << 20)  # within the bound: fine
    assert batch.record_count == 20
    with pytest.raises(CorruptRecordsError, match=r"allowed|exceed"):
        decode_batches(bomb, max_bytes=4 << 20)
    with pytest.raises(CorruptRecordsError):  # the budget is for the whole call
        decode_batches(bomb + bomb, max_bytes=30 << 20)


@pytest.mark.parametrize("compression", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_corrupt_input_costs_one_small_attempt(
    compression: Compression, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Garbage (even a gzip trailer claiming 4 GiB) is refused on the first attempt, with a
    buffer proportional to its size; only valid data that overflows a buffer earns a retry."""
    module = {Compression.GZIP: cramjam.gzip, Compression.LZ4: cramjam.lz4}.get(
        compression, cramjam.zstd
    )
    sizes: list[int] = []
    real = module.decompress_into

    def counting(data: Any, out: bytearray) -> int:
        sizes.append(len(out))
        return real(data, out)

    monkeypatch.setattr(module, "decompress_into", counting)
    template = encode_batch([KafkaRecord(0, 0, None, b"v")])
    garbage = b"\x1f\x8b\x08" + b"\x00" * 40 + b"\xff\xff\xff\xff"
    with pytest.raises(CorruptRecordsError):
        decode_batches(_with_section(template, garbage, attributes=compression))
    assert sizes == [64 * 1024]
    sizes.clear()
    big = _with_section(template, GOOD * 100_000, count=100_000)  # 800 kB of records
    decode_batches(encode_batch_section(big, compression))
    assert len(sizes) <= 3 and sizes[-1] <= 8 * 800_000


def encode_batch_section(plain: bytes, compression: Compression) -> bytes:
    section = records._compress(compression, plain[records.HEADER_SIZE :])
    return _with_section(plain, section, attributes=compression)


def test_snappy_sizes_are_checked_before_decompressing() -> None:
    template = encode_batch([KafkaRecord(0, 0, None, b"v")])
    huge_claim = bytes.fromhex("ffffffff0f") + b"\x00" * 10  # a raw block claiming 4 GiB
    with pytest.raises(CorruptRecordsError, match="exceeds"):
        decode_batches(_with_section(template, huge_claim, attributes=Compression.SNAPPY))
    xerial = records._XERIAL_HEADER + struct.pack(">i", 10**9)  # a chunk past the end
    with pytest.raises(CorruptRecordsError, match="chunk length"):
        decode_batches(_with_section(template, xerial, attributes=Compression.SNAPPY))


@pytest.mark.parametrize("compression", [1, 2, 3, 4, 5, 7])
def test_garbage_compressed_sections_are_refused(compression: int) -> None:
    template = encode_batch([KafkaRecord(0, 0, None, b"v")])
    with pytest.raises(CorruptRecordsError):
        decode_batches(_with_section(template, b"not compressed at all", attributes=compression))


@settings(max_examples=400)
@given(st.binary(max_size=80), st.integers(0, 7), st.integers(0, 5))
def test_random_sections_raise_only_corrupt_records(section: bytes, codec: int, count: int) -> None:
    """CRC-valid batches around random bytes, any codec: CorruptRecordsError or a batch."""
    template = encode_batch([KafkaRecord(0, 0, None, b"v")])
    with contextlib.suppress(CorruptRecordsError):
        decode_batches(_with_section(template, section, attributes=codec, count=count))


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_corrupt_records(data: bytes) -> None:
    with contextlib.suppress(CorruptRecordsError):
        decode_batches(data)


def test_corrupt_records_error_is_a_wire_error() -> None:
    assert issubclass(CorruptRecordsError, WireError)


def test_an_idempotent_producers_batches_keep_their_producer_when_converted() -> None:
    from kraftlite.protocol import batch as kraftlite_batch  # noqa: PLC0415

    first = records.encode_batch(
        [records.KafkaRecord(i, 1000 + i, None, b"v%d" % i, []) for i in range(3)],
        producer_id=77,
        producer_epoch=2,
        base_sequence=10,
    )
    second = records.encode_batch(
        [records.KafkaRecord(0, 2000, b"k", b"w", [])],
        producer_id=77,
        producer_epoch=2,
        base_sequence=13,
    )
    converted = records.kafka_to_kraftlite(*records.decode_batches(first + second))
    header = kraftlite_batch.validate(converted)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 10)
    assert header.record_count == 4
    gap = records.encode_batch(
        [records.KafkaRecord(0, 2000, None, b"w", [])],
        producer_id=77,
        producer_epoch=2,
        base_sequence=20,
    )
    with pytest.raises(records.CorruptRecordsError, match="consecutive"):
        records.kafka_to_kraftlite(*records.decode_batches(first + gap))
