"""The v1 batch format: round trips, corruption detection, structural checks."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.protocol import batch as fmt

optional_bytes = st.one_of(st.none(), st.binary(max_size=64))
header_pairs = st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=16)), max_size=3)
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
