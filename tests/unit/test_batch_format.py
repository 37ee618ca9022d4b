"""The v1 batch format: round trips, corruption detection, structural checks."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.protocol import batch as fmt

optional_bytes = st.one_of(st.none(), st.binary(max_size=64))
# header values may be null (attributes bit 1, section 13), as Kafka's
header_pairs = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3
)
timestamps = st.integers(min_value=-(2**62), max_value=2**62)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list, list, list, list | None]:
    count = draw(st.integers(min_value=1, max_value=40))
    values = draw(st.lists(optional_bytes, min_size=count, max_size=count))
    keys = draw(st.lists(optional_bytes, min_size=count, max_size=count))
    stamps = draw(st.lists(timestamps, min_size=count, max_size=count))
    headers = draw(st.one_of(st.none(), st.lists(header_pairs, min_size=count, max_size=count)))
    return values, keys, stamps, headers


@given(batches(), st.integers(min_value=0, max_value=2**62), st.integers(0, 2**31 - 1))
def test_round_trip_keeps_every_field(batch, base_offset, epoch) -> None:
    values, keys, stamps, headers = batch
    encoded = fmt.encode_batch(values, keys=keys, timestamps=stamps, headers=headers)
    stamped = bytes(fmt.stamp(encoded, base_offset, epoch))
    decoded = fmt.decode(stamped)
    assert decoded.header.base_offset == base_offset
    assert decoded.header.leader_epoch == epoch
    assert decoded.header.record_count == len(values)
    assert decoded.header.first_timestamp == stamps[0]
    assert decoded.header.max_timestamp == max(stamps)
    assert len(stamped) % 8 == 0
    assert decoded.values == values
    assert decoded.keys == keys
    assert list(decoded.timestamps) == stamps
    expected_headers = [tuple(h) for h in headers] if headers else [()] * len(values)
    assert decoded.headers == expected_headers
    records = list(decoded.records())
    assert [r.offset for r in records] == list(range(base_offset, base_offset + len(values)))


@settings(max_examples=300)
@given(batches(), st.data())
def test_any_corrupted_byte_is_detected(batch, data) -> None:
    values, keys, stamps, headers = batch
    encoded = bytearray(fmt.encode_batch(values, keys=keys, timestamps=stamps, headers=headers))
    position = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(fmt.CorruptBatchError):
        fmt.validate(encoded)
    with pytest.raises(fmt.CorruptBatchError):
        fmt.decode(encoded)
    with pytest.raises(fmt.CorruptBatchError):  # the follower's check: CRCs alone suffice
        list(fmt.checked_batches(encoded))


def test_stamp_changes_only_the_header() -> None:
    encoded = fmt.encode_batch([b"a", b"b"], timestamps=[1, 2])
    stamped = fmt.stamp(encoded, 42, 7)
    assert stamped[fmt.HEADER_SIZE :] == encoded[fmt.HEADER_SIZE :]
    assert fmt.validate(stamped).base_offset == 42


def test_checked_batches_cuts_a_stream_and_refuses_a_truncated_one() -> None:
    first = bytes(fmt.stamp(fmt.encode_batch([b"x"] * 3, timestamps=[5] * 3), 0, 1))
    second = bytes(fmt.stamp(fmt.encode_batch([b"y"], timestamps=[6]), 3, 1))
    cut = [(h.base_offset, bytes(v)) for h, v in fmt.checked_batches(first + second)]
    assert cut == [(0, first), (3, second)]
    with pytest.raises(fmt.CorruptBatchError):
        list(fmt.checked_batches(first + second[:-8]))


def test_split_batches_cuts_a_stream() -> None:
    first = bytes(fmt.stamp(fmt.encode_batch([b"x"] * 3, timestamps=[5] * 3), 0, 1))
    second = bytes(fmt.stamp(fmt.encode_batch([b"y"], timestamps=[6]), 3, 1))
    views = list(fmt.split_batches(first + second))
    assert [bytes(v) for v in views] == [first, second]
    offsets = [r.offset for b in fmt.decode_stream(first + second) for r in b.records()]
    assert offsets == [0, 1, 2, 3]
    with pytest.raises(fmt.CorruptBatchError, match="truncated"):
        list(fmt.split_batches(first + second[:-8]))


def test_encode_records_fills_missing_timestamps() -> None:
    encoded = fmt.encode_records(
        [fmt.Record(b"v", key=b"k", headers=(("h", b"1"),)), fmt.Record(None, timestamp=3)],
        now_ms=1000,
    )
    records = list(fmt.decode(encoded).records())
    assert [(r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (1000, b"k", b"v", (("h", b"1"),)),
        (3, None, None, ()),
    ]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"values": [], "timestamps": []}, ValueError),
        ({"values": [b"a"], "timestamps": [1, 2]}, ValueError),
        ({"values": ["text"], "timestamps": [1]}, TypeError),
        ({"values": [b"a"], "keys": [1], "timestamps": [1]}, TypeError),
        ({"values": [b"a"], "timestamps": [1], "headers": [[("h", "str")]]}, TypeError),
    ],
)
def test_bad_encoder_input_is_refused(kwargs, error) -> None:
    values = kwargs.pop("values")
    with pytest.raises(error):
        fmt.encode_batch(values, **kwargs)


def _reheader(buf: bytearray) -> bytearray:
    """Recompute the header CRC so a test can reach the checks behind it."""
    struct.pack_into("<I", buf, 44, fmt.crc32c(bytes(buf[:44])))
    return buf


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: struct.pack_into("<B", b, 12, 9), "version 9"),
        (lambda b: struct.pack_into("<B", b, 13, 0x80), "attributes"),
        (lambda b: struct.pack_into("<I", b, 20, 0), "at least one record"),
        (lambda b: struct.pack_into("<q", b, 0, -5), "negative base offset"),
        (lambda b: struct.pack_into("<I", b, 8, 12), "invalid batch length"),
        (lambda b: struct.pack_into("<q", b, 32, 99), "timestamps disagree"),
        (lambda b: struct.pack_into("<I", b, 20, 2), "shorter than its sections|add up"),
    ],
)
def test_structural_checks_behind_a_valid_header_crc(mutate, message) -> None:
    encoded = bytearray(fmt.encode_batch([b"abc"], timestamps=[5]))
    mutate(encoded)
    _reheader(encoded)
    with pytest.raises(fmt.CorruptBatchError, match=message):
        fmt.validate(encoded)


def test_lengths_that_do_not_add_up_are_refused() -> None:
    encoded = bytearray(fmt.encode_batch([b"abc", b"de"], timestamps=[5, 5]))
    # value lengths live after timestamps(16) + key validity(8) + key lengths(8) + key data(0)
    # + value validity(8): make them claim more data than the body holds, then fix the CRC.
    position = fmt.HEADER_SIZE + 16 + 8 + 8 + 8
    struct.pack_into("<I", encoded, position, 200)
    struct.pack_into("<I", encoded, 40, fmt.crc32c(bytes(encoded[fmt.HEADER_SIZE :])))
    _reheader(encoded)
    with pytest.raises(fmt.CorruptBatchError, match=r"shorter than its sections|add up"):
        fmt.validate(encoded)


def test_garbage_and_short_input_are_refused() -> None:
    for junk in (b"", b"\x00" * 10, b"\xff" * 100):
        with pytest.raises(fmt.CorruptBatchError):
            fmt.validate(junk)
    encoded = fmt.encode_batch([b"a"], timestamps=[1])
    with pytest.raises(fmt.CorruptBatchError, match="does not match"):
        fmt.validate(encoded + b"\x00" * 8)


def test_golden_vector_from_the_spec() -> None:
    # docs/batch-format.md's worked example, byte for byte: other implementations test
    # against the same bytes.
    golden = (
        "0000000000000000"
        "6800000001000000"
        "ffffffff01000000"
        "0500000000000000"
        "0500000000000000"
        "39c8690b88a3753a"
        "0500000000000000"
        "0100000000000000"
        "0100000000000000"
        "6b00000000000000"
        "0100000000000000"
        "0200000000000000"
        "6869000000000000"
    )
    assert fmt.encode_batch([b"hi"], keys=[b"k"], timestamps=[5]).hex() == golden
    assert fmt.crc32c(b"123456789") == 0xE3069283  # CRC-32C's standard check value


def test_a_multibyte_character_split_across_header_names_is_refused() -> None:
    # Regression (review): the names joined ("é") are UTF-8 while each alone is not, so a
    # broker checking the joined bytes stored a batch no consumer could decode.
    encoded = bytearray(
        fmt.encode_batch([b"v"], timestamps=[1], headers=[[("a", b""), ("b", b"")]])
    )
    data = bytes(encoded)
    position = data.index(b"ab")
    encoded[position : position + 2] = b"\xc3\xa9"
    struct.pack_into("<I", encoded, 40, fmt.crc32c(bytes(encoded[fmt.HEADER_SIZE :])))
    _reheader(encoded)
    with pytest.raises(fmt.CorruptBatchError, match="UTF-8"):
        fmt.validate(encoded)


producers = st.one_of(
    st.none(),
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1)),
)


@settings(max_examples=200)
@given(batches(), producers, st.data())
def test_format_v2_carries_the_producer_and_every_byte_is_checked(batch, producer, data) -> None:
    """Format v2 (an idempotent producer's batch): the header grows to 64 bytes with the
    producer id, epoch and base sequence, under the header CRC; everything else as v1."""
    values, keys, stamps, headers = batch
    pid, epoch, sequence = producer if producer is not None else (-1, -1, -1)
    encoded = fmt.encode_batch(
        values,
        keys=keys,
        timestamps=stamps,
        headers=headers,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    stamped = bytes(fmt.stamp(encoded, 9, 3))
    decoded = fmt.decode(stamped)
    header = decoded.header
    assert header.magic == (1 if producer is None else 2)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        pid,
        epoch,
        sequence,
    )
    assert (header.base_offset, header.leader_epoch) == (9, 3)
    assert decoded.values == values and decoded.keys == keys
    assert stamped[header.header_size :] == encoded[header.header_size :]
    assert fmt.body_start(stamped) == header.header_size
    corrupted = bytearray(stamped)
    position = data.draw(st.integers(min_value=0, max_value=len(corrupted) - 1))
    corrupted[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(fmt.CorruptBatchError):
        fmt.validate(corrupted)
    with pytest.raises(fmt.CorruptBatchError):
        list(fmt.checked_batches(corrupted))


def test_a_v2_batch_must_name_a_valid_producer() -> None:
    with pytest.raises(ValueError, match="producer epoch"):
        fmt.encode_batch([b"a"], timestamps=[1], producer_id=1, producer_epoch=-1, base_sequence=0)
    encoded = bytearray(
        fmt.encode_batch([b"a"], timestamps=[1], producer_id=1, producer_epoch=0, base_sequence=0)
    )
    struct.pack_into("<q", encoded, 40, -5)  # a negative producer id, CRC made to match
    struct.pack_into("<I", encoded, 60, fmt.crc32c(bytes(encoded[:60])))
    with pytest.raises(fmt.CorruptBatchError, match="producer"):
        fmt.validate(encoded)


# ------------------------------------------------------------- null header values (bit 1)

NULL_HEADERS = [[("a", b"x"), ("n", None), ("e", b"")]]
# docs/batch-format.md's worked example of section 13, byte for byte
NULL_HEADERS_GOLDEN = (
    "0000000000000000a000000001030000ffffffff010000000100000000000000"
    "0100000000000000a6e386c9a2f11fb001000000000000000000000000000000"
    "0000000000000000010000000000000001000000000000007600000000000000"
    "030000000000000001000000010000000100000000000000616e650000000000"
    "0100000000000000000000000000000078000000000000000500000000000000"
)
# the same record with "n" empty: what the encoder wrote before null header values existed
# (computed by that encoder), and still writes
EMPTY_HEADERS_GOLDEN = (
    "00000000000000009800000001010000ffffffff010000000100000000000000"
    "010000000000000053d0ccdfc10188e401000000000000000000000000000000"
    "0000000000000000010000000000000001000000000000007600000000000000"
    "030000000000000001000000010000000100000000000000616e650000000000"
    "010000000000000000000000000000007800000000000000"
)


def _refresh_crcs(buf: bytearray) -> bytearray:
    """Recompute both CRCs of a v1 batch so a test can reach the structural checks."""
    struct.pack_into("<I", buf, 40, fmt.crc32c(bytes(buf[fmt.HEADER_SIZE :])))
    return _reheader(buf)


def test_null_header_values_golden_vector_from_the_spec() -> None:
    encoded = fmt.encode_batch([b"v"], timestamps=[1], headers=NULL_HEADERS)
    assert encoded.hex() == NULL_HEADERS_GOLDEN
    assert encoded[13] == fmt.ATTR_HAS_HEADERS | fmt.ATTR_NULL_HEADER_VALUES
    assert fmt.decode(encoded).headers == [(("a", b"x"), ("n", None), ("e", b""))]


def test_batches_without_a_null_header_value_are_as_before() -> None:
    """Bit 1 and section 13 only when a header value is null: everything else is the
    bytes of before, and old batches read as they did (an empty value stays empty)."""
    no_null = [[("a", b"x"), ("n", b""), ("e", b"")]]
    encoded = fmt.encode_batch([b"v"], timestamps=[1], headers=no_null)
    assert encoded.hex() == EMPTY_HEADERS_GOLDEN
    old = bytes.fromhex(EMPTY_HEADERS_GOLDEN)
    assert fmt.validate(old).attributes == fmt.ATTR_HAS_HEADERS
    assert fmt.decode(old).headers == [(("a", b"x"), ("n", b""), ("e", b""))]
    assert fmt.columns(old).header_values.validity is None
    # sections 1-12 are the same bytes with or without a null value
    with_null = bytes.fromhex(NULL_HEADERS_GOLDEN)
    assert with_null[fmt.HEADER_SIZE : len(old)] == old[fmt.HEADER_SIZE :]


@pytest.mark.parametrize("producer", [None, (7, 1, 40)])
def test_null_header_values_in_both_formats(producer) -> None:
    """v1 and v2 share the attributes byte (offset 13) and the body."""
    pid, epoch, sequence = producer or (-1, -1, -1)
    headers = [[("n", None)], [], [("a", b""), ("b", None), ("c", b"z")]]
    encoded = fmt.encode_batch(
        [b"1", None, b"3"],
        timestamps=[1, 2, 3],
        headers=headers,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    stamped = bytes(fmt.stamp(encoded, 10, 2))
    header = fmt.validate(stamped)
    assert header.magic == (1 if producer is None else 2)
    assert header.attributes == fmt.ATTR_HAS_HEADERS | fmt.ATTR_NULL_HEADER_VALUES
    assert fmt.decode(stamped).headers == [tuple(h) for h in headers]
    assert [r.headers for r in fmt.decode(stamped).records()] == [tuple(h) for h in headers]
    [(_, view)] = fmt.checked_batches(stamped)
    assert bytes(view) == stamped
    validity = fmt.columns(stamped).header_values.validity
    assert validity is not None and bytes(validity) == bytes([0b1010])


def test_many_header_values_with_nulls_round_trip() -> None:
    """Over _NUMPY_FROM headers the section 13 checks take numpy's path."""
    headers = [
        [(f"h{i}", None if (i * j) % 7 == 3 else b"v" * (i % 4)) for i in range(5)]
        for j in range(40)
    ]
    encoded = fmt.encode_batch([b"x"] * 40, timestamps=[0] * 40, headers=headers)
    assert fmt.decode(encoded).headers == [tuple(h) for h in headers]


def _section_13(buf: bytes | bytearray) -> int:
    """Where header_value_validity starts: the last 8 bytes of a batch with h <= 64."""
    return len(buf) - 8


def _without_bit_1(buf: bytearray) -> None:
    buf[13] &= ~fmt.ATTR_NULL_HEADER_VALUES


def _only_bit_1(buf: bytearray) -> None:
    buf[13] = fmt.ATTR_NULL_HEADER_VALUES


def _cut_section_13(buf: bytearray) -> None:
    del buf[_section_13(buf) :]
    struct.pack_into("<I", buf, 8, len(buf))


def _bitmap(value: int) -> Callable[[bytearray], None]:
    def mutate(buf: bytearray) -> None:
        buf[_section_13(buf)] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_without_bit_1, "add up"),  # section 13 there, the bit that says so clear
        (_only_bit_1, "without headers"),  # bit 1 without bit 0 (no headers section)
        (_cut_section_13, "shorter than its sections"),  # the bit set, the section not there
        (_bitmap(0b1101), "past the last header"),  # h = 3: bits 3-7 must be 0
        (_bitmap(0b111), "no value null"),  # then the section must not be there
        (_bitmap(0b100), "null header value has bytes"),  # "a" (1 byte, "x") marked null
    ],
)
def test_header_value_validity_is_checked_strictly(mutate, message) -> None:
    encoded = bytearray(fmt.encode_batch([b"v"], timestamps=[1], headers=NULL_HEADERS))
    assert encoded[_section_13(encoded)] == 0b101
    mutate(encoded)
    _refresh_crcs(encoded)
    for check in (fmt.validate, fmt.decode, fmt.columns):
        with pytest.raises(fmt.CorruptBatchError, match=message):
            check(encoded)


def test_section_13_on_a_batch_without_null_values_is_refused() -> None:
    """Bit 1 and section 13 added to a batch whose values are all non-null."""
    encoded = bytearray(fmt.encode_batch([b"v"], timestamps=[1], headers=[[("a", b"x")]]))
    encoded += bytes([1]) + bytes(7)
    encoded[13] |= fmt.ATTR_NULL_HEADER_VALUES
    struct.pack_into("<I", encoded, 8, len(encoded))
    _refresh_crcs(encoded)
    with pytest.raises(fmt.CorruptBatchError, match="no value null"):
        fmt.validate(encoded)


def test_a_null_value_with_bytes_is_refused_over_many_headers() -> None:
    """The numpy path (over _NUMPY_FROM headers) of the checks of section 13."""
    headers = [[(f"h{i}", None if i == 0 else b"z" * (i == 99)) for i in range(100)]]
    encoded = bytearray(fmt.encode_batch([b"v"], timestamps=[1], headers=headers))
    assert fmt.decode(encoded).headers == [tuple(headers[0])]
    bitmap = len(encoded) - 16  # ceil(100 / 8) = 13 bytes, then 3 of padding
    assert encoded[bitmap : bitmap + 13] == b"\xfe" + b"\xff" * 11 + b"\x0f"
    encoded[bitmap + 12] = 0b0111  # header 99 ("z") marked null
    _refresh_crcs(encoded)
    with pytest.raises(fmt.CorruptBatchError, match="null header value has bytes"):
        fmt.validate(encoded)
    encoded[bitmap + 12] = 0b11111  # bit 100: past the last header
    _refresh_crcs(encoded)
    with pytest.raises(fmt.CorruptBatchError, match="past the last header"):
        fmt.validate(encoded)


@pytest.mark.parametrize(
    "headers",
    [[[("h", "text")]], [[("h", None), ("i", "text")]], [[("h", None), ("i", 5)]]],
)
def test_bad_header_values_are_refused_with_or_without_nulls(headers) -> None:
    with pytest.raises(TypeError, match="headers"):
        fmt.encode_batch([b"a"], timestamps=[1], headers=headers)


@pytest.mark.parametrize("producer", [None, (7, 1, 40)])
def test_every_byte_of_a_batch_with_null_header_values_is_covered(producer) -> None:
    """Section 13 and the attributes bit are under the CRCs like every other byte: each
    byte of the worked example (and of its v2 form), changed any way, is refused."""
    pid, epoch, sequence = producer or (-1, -1, -1)
    encoded = fmt.encode_batch(
        [b"v"],
        timestamps=[1],
        headers=NULL_HEADERS,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    for position in range(len(encoded)):
        for flip in (0x01, 0x02, 0x80, 0xFF):
            corrupted = bytearray(encoded)
            corrupted[position] ^= flip
            with pytest.raises(fmt.CorruptBatchError):
                fmt.validate(corrupted)
            with pytest.raises(fmt.CorruptBatchError):
                list(fmt.checked_batches(corrupted))


@settings(max_examples=200)
@given(batches(), st.data())
def test_round_trip_and_corruption_with_a_null_header_value_forced(batch, data) -> None:
    """The property tests above with at least one null header value in every batch."""
    values, keys, stamps, headers = batch
    headers = [list(h) for h in headers] if headers else [[] for _ in values]
    headers[data.draw(st.integers(0, len(values) - 1))].append(("null", None))
    encoded = fmt.encode_batch(values, keys=keys, timestamps=stamps, headers=headers)
    assert encoded[13] & fmt.ATTR_NULL_HEADER_VALUES
    decoded = fmt.decode(encoded)
    assert decoded.headers == [tuple(h) for h in headers]
    assert (decoded.values, decoded.keys) == (values, keys)
    corrupted = bytearray(encoded)
    position = data.draw(st.integers(min_value=0, max_value=len(corrupted) - 1))
    corrupted[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(fmt.CorruptBatchError):
        fmt.validate(corrupted)


@given(batches(), st.sampled_from([fmt.NO_PRODUCER_ID, 7]))
def test_null_keys_reads_the_key_validity_bitmap_alone(batch, producer) -> None:
    """What a compacted topic's produce checks before anything else (issue 26)."""
    values, keys, stamps, headers = batch
    extra = {} if producer < 0 else {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0}
    data = fmt.encode_batch(values, keys=keys, timestamps=stamps, headers=headers, **extra)
    header = fmt.read_header(data)
    assert fmt.null_keys(data, header) == [i for i, key in enumerate(keys) if key is None]
    # a batch too short to hold the bitmap is left to validation to refuse
    short = data[: header.header_size + 8 * len(keys)]
    assert fmt.null_keys(short, header) == []


def test_record_at_is_the_record_records_gives_at_that_offset() -> None:
    data = fmt.encode_batch(
        [b"a", None, b"c"], keys=[b"k0", b"k1", None], timestamps=[10, 11, 12],
        headers=[(), (("h", b"v"),), ()], base_offset=40,
    )  # fmt: skip
    [batch] = list(fmt.decode_stream(data))
    for record in batch.records():
        assert batch.record_at(record.offset) == record
    assert batch.record_at(39) is None and batch.record_at(43) is None


@given(batches(), st.integers(0, 2**40))
def test_record_in_reads_one_record_as_decode_does(batch, base_offset) -> None:
    values, keys, stamps, headers = batch
    data = fmt.stamp(
        fmt.encode_batch(values, keys=keys, timestamps=stamps, headers=headers), base_offset, 0
    )
    decoded = fmt.decode(data)
    for offset in range(base_offset - 1, base_offset + len(values) + 1):
        assert fmt.record_in(data, offset) == decoded.record_at(offset)


def test_record_in_past_numpys_threshold_and_on_a_corrupt_batch() -> None:
    count = 300  # sums of lengths before a record go through numpy past 64 items
    data = bytearray(
        fmt.encode_batch(
            [None if i % 7 == 0 else b"v" * (i % 13) for i in range(count)],
            keys=[b"k%d" % i for i in range(count)],
            timestamps=list(range(count)),
            headers=[(("h", b"x" * i), ("n", None))[: i % 3] for i in range(count)],
            base_offset=5,
        )
    )
    decoded = fmt.decode(data)
    assert [fmt.record_in(data, 5 + i) for i in range(count)] == list(decoded.records())
    data[-1] ^= 1
    with pytest.raises(fmt.CorruptBatchError):
        fmt.record_in(data, 5)


@given(st.lists(batches(), min_size=1, max_size=4), st.integers(0, 2**40))
def test_keys_of_and_next_offset_after_read_a_stream_as_decode_does(stream, base) -> None:
    data, offset = b"", base
    for values, keys, stamps, headers in stream:
        batch = fmt.encode_batch(values, keys=keys, timestamps=stamps, headers=headers)
        data += bytes(fmt.stamp(batch, offset, 0))
        offset += len(values)
    assert fmt.next_offset_after(data) == offset
    for view in fmt.split_batches(data):
        decoded = fmt.decode(view)
        assert fmt.keys_of(view) == (decoded.header, decoded.keys)
    with pytest.raises(ValueError, match="no batch"):
        fmt.next_offset_after(b"")
