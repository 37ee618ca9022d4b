"""Kafka's primitive types: golden bytes, round trips, and hostile input (only WireError)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.protocol.kafka.wire import (
    EncodeError,
    Reader,
    WireError,
    Writer,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    zigzag,
)

# (writer method, reader method, value, the bytes Kafka's spec gives for it)
GOLDEN = [
    ("int8", -2, "fe"),
    ("int16", -2, "fffe"),
    ("int32", 258, "00000102"),
    ("int64", -1, "ffffffffffffffff"),
    ("uint16", 65535, "ffff"),
    ("uint32", 2**32 - 1, "ffffffff"),
    ("float64", 1.5, "3ff8000000000000"),
    ("boolean", True, "01"),
    ("uuid", UUID("0102030405060708090a0b0c0d0e0f10"), "0102030405060708090a0b0c0d0e0f10"),
    ("unsigned_varint", 300, "ac02"),  # the protobuf documentation's example
    ("varint", -1, "01"),
    ("varint", 1, "02"),
    ("varint", -64, "7f"),
    ("varint", 64, "8001"),
    ("varlong", -(2**63), "ffffffffffffffffff01"),
    ("string", "hé", "0003" + "68c3a9"),
    ("nullable_string", None, "ffff"),
    ("compact_string", "", "01"),
    ("compact_nullable_string", None, "00"),
    ("bytes_", b"\x00\x01", "00000002" + "0001"),
    ("nullable_bytes", None, "ffffffff"),
    ("compact_bytes", b"ab", "03" + "6162"),
    ("compact_nullable_bytes", None, "00"),
]


@pytest.mark.parametrize(("method", "value", "golden"), GOLDEN)
def test_golden_bytes_both_ways(method: str, value: Any, golden: str) -> None:
    writer = Writer()
    getattr(writer, method)(value)
    assert writer.getvalue().hex() == golden
    reader = Reader(bytes.fromhex(golden))
    assert getattr(reader, method)() == value
    reader.expect_end()


def test_zigzag_matches_the_spec_table() -> None:
    assert [zigzag(v) for v in (0, -1, 1, -2, 2, 2**31 - 1, -(2**31))] == [
        0,
        1,
        2,
        3,
        4,
        2**32 - 2,
        2**32 - 1,
    ]
    assert encode_varint(2**31 - 1) == encode_unsigned_varint(2**32 - 2)
    with pytest.raises(OverflowError):
        encode_varint(2**31)
    with pytest.raises(OverflowError):
        encode_varlong(2**63)


def test_tagged_fields_and_arrays_golden() -> None:
    writer = Writer()
    writer.compact_array_length(2)
    writer.int32_items([1, -1])
    writer.tagged_fields({5: b"\xaa", 0: b""})
    data = writer.getvalue()
    assert data.hex() == "03" + "00000001ffffffff" + "02" + "0000" + "0501aa"
    reader = Reader(data)
    assert reader.int32_items(reader.compact_array_length(4)) == [1, -1]
    assert reader.tagged_fields() == {0: b"", 5: b"\xaa"}
    reader.expect_end()


def test_large_byte_strings_are_joined_once_and_correctly() -> None:
    big = bytes(range(256)) * 40
    writer = Writer()
    writer.int8(1)
    writer.bytes_(big)
    writer.int8(2)
    assert len(writer) == 1 + 4 + len(big) + 1
    assert writer.getvalue() == b"\x01" + struct.pack(">i", len(big)) + big + b"\x02"


# ------------------------------------------------------------------------ round trips

PRIMITIVES: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("int8", st.integers(-(2**7), 2**7 - 1)),
    ("int16", st.integers(-(2**15), 2**15 - 1)),
    ("int32", st.integers(-(2**31), 2**31 - 1)),
    ("int64", st.integers(-(2**63), 2**63 - 1)),
    ("uint16", st.integers(0, 2**16 - 1)),
    ("uint32", st.integers(0, 2**32 - 1)),
    ("float64", st.floats(allow_nan=False)),
    ("boolean", st.booleans()),
    ("uuid", st.uuids()),
    ("unsigned_varint", st.integers(0, 2**32 - 1)),
    ("varint", st.integers(-(2**31), 2**31 - 1)),
    ("varlong", st.integers(-(2**63), 2**63 - 1)),
    ("string", st.text(max_size=50)),
    ("nullable_string", st.none() | st.text(max_size=50)),
    ("compact_string", st.text(max_size=200)),
    ("compact_nullable_string", st.none() | st.text(max_size=50)),
    ("bytes_", st.binary(max_size=50)),
    ("nullable_bytes", st.none() | st.binary(max_size=50)),
    ("compact_bytes", st.binary(max_size=200)),
    ("compact_nullable_bytes", st.none() | st.binary(max_size=50)),
]
values = st.one_of(*[st.tuples(st.just(name), strategy) for name, strategy in PRIMITIVES])


@settings(max_examples=300)
@given(st.lists(values, max_size=20))
def test_any_sequence_of_primitives_round_trips(items: list[tuple[str, Any]]) -> None:
    writer = Writer()
    for method, value in items:
        getattr(writer, method)(value)
    data = writer.getvalue()
    reader = Reader(data)
    assert [(method, getattr(reader, method)()) for method, _ in items] == items
    reader.expect_end()
    # and any strict prefix of the bytes is truncated input: WireError, nothing else
    if data:
        cut = Reader(data[: len(data) - 1])
        with pytest.raises(WireError):
            for method, _ in items:
                getattr(cut, method)()
            cut.expect_end()


@given(st.lists(st.text(max_size=10), max_size=10), st.booleans())
def test_arrays_of_strings_round_trip(items: list[str], compact: bool) -> None:
    writer = Writer()
    if compact:
        writer.compact_array_length(len(items))
        for item in items:
            writer.compact_string(item)
    else:
        writer.array_length(len(items))
        for item in items:
            writer.string(item)
    reader = Reader(writer.getvalue())
    read = reader.compact_array if compact else reader.array
    item_reader = Reader.compact_string if compact else Reader.string
    assert read(item_reader, 1) == items
    reader.expect_end()


def test_null_arrays() -> None:
    writer = Writer()
    writer.array_length(None)
    writer.compact_array_length(None)
    reader = Reader(writer.getvalue())
    assert reader.nullable_array(Reader.int32, 4) is None
    assert reader.compact_nullable_array(Reader.int32, 4) is None
    with pytest.raises(WireError, match="invalid array length"):
        Reader(writer.getvalue()).array(Reader.int32, 4)


# ---------------------------------------------------------------------------- hostile

READS: list[Callable[[Reader], object]] = [
    getattr(Reader, name) for name, _ in PRIMITIVES if name not in {"boolean"}
] + [
    lambda r: r.array(Reader.int32, 4),
    lambda r: r.compact_nullable_array(Reader.string, 2),
    lambda r: r.tagged_fields(),
    lambda r: r.raw(3),
]


@settings(max_examples=500)
@given(st.binary(max_size=40), st.integers(0, len(READS) - 1))
def test_random_bytes_raise_only_wire_error(data: bytes, which: int) -> None:
    reader = Reader(data)
    try:
        while True:
            READS[which](reader)
            if reader.at_end():
                break
    except WireError:
        pass


@pytest.mark.parametrize(
    ("data", "read", "message"),
    [
        ("7fffffff", lambda r: r.array(Reader.int32, 4), "cannot fit"),
        ("8080808008", lambda r: r.compact_array(Reader.int8, 1), "cannot fit"),
        ("00000010" + "00" * 15, lambda r: r.int32_items(r.array_length(4)), "cannot fit"),
        ("fffffffe", Reader.nullable_bytes, "invalid bytes length -2"),
        ("ffff", Reader.string, "invalid string length -1"),
        ("00", Reader.compact_string, "null string"),
        ("0005" + "6162", Reader.string, "truncated"),
        ("8080808080", Reader.unsigned_varint, "longer than 5 bytes"),
        ("8080808010", Reader.unsigned_varint, "does not fit 32 bits"),
        ("80" * 10 + "01", Reader.varlong, "longer than 10 bytes"),
        ("ffffffffffffffffff7f", Reader.varlong, "does not fit 64 bits"),
        ("0002" + "c328", Reader.string, "not UTF-8"),
        ("03" + "ff" * 2, Reader.compact_string, "not UTF-8"),
        ("7f", Reader.tagged_fields, "cannot fit"),
        ("01" + "00" + "05" + "00", Reader.tagged_fields, "truncated"),
        ("", Reader.int64, "truncated"),
    ],
)
def test_malformed_input_is_named(data: str, read: Callable[[Reader], Any], message: str) -> None:
    with pytest.raises(WireError, match=message):
        read(Reader(bytes.fromhex(data)))


def test_a_huge_array_count_allocates_nothing() -> None:
    """2**31 - 1 int32s claimed in an 8-byte frame: refused before any list is built."""
    reader = Reader(struct.pack(">i", 2**31 - 1) + b"\x00" * 4)
    with pytest.raises(WireError):
        reader.array(Reader.int32, 4)


def test_trailing_bytes_are_refused() -> None:
    reader = Reader(b"\x00\x01\x02")
    reader.int16()
    with pytest.raises(WireError, match="1 unexpected bytes"):
        reader.expect_end()


def test_writer_range_errors_are_not_wire_errors() -> None:
    """Out-of-range values are the caller's bug: struct.error/OverflowError, which
    messages.py reports as EncodeError with the field's name."""
    with pytest.raises(struct.error):
        Writer().int8(128)
    with pytest.raises(OverflowError):
        Writer().string("x" * 40_000)
    with pytest.raises(OverflowError):
        Writer().unsigned_varint(-1)
    assert not issubclass(EncodeError, WireError)
