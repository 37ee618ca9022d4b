"""The packed Kafka parser and converter (kraftlite/protocol/kafka/records.py, rule 6) held to the
reference parser: for any input, the same decoded batches, the same kraftlite bytes, and
the same error (type and message) at the same stage.

Each test runs one input twice: with `_PACKED_FROM` at 1, so that every batch the packed
path can read goes through it, and at 2**62, so that none does (the reference alone, what
the module did before the packed path existed). Batches are built here byte by byte, so
that every varint can take any size the format allows (non-minimal encodings included).
"""

from __future__ import annotations

import contextlib
import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.protocol import batch as kraftlite_batch
from kraftlite.protocol.kafka import records
from kraftlite.protocol.kafka.records import Compression, CorruptRecordsError, KafkaRecord

PACKED = 1  # every batch the packed path can read takes it
REFERENCE = 2**62  # no batch does
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
BASE_TS = 1_700_000_000_000
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@contextlib.contextmanager
def packed_from(count: int) -> Iterator[None]:
    saved = records._PACKED_FROM
    records._PACKED_FROM = count  # type: ignore[misc]
    try:
        yield
    finally:
        records._PACKED_FROM = saved  # type: ignore[misc]


def fields(batch: records.KafkaBatch) -> tuple[Any, ...]:
    """Everything a caller can read from a decoded batch."""
    return (
        batch.base_offset,
        batch.partition_leader_epoch,
        batch.attributes,
        batch.last_offset_delta,
        batch.base_timestamp,
        batch.max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.record_count,
        batch.offset_deltas,
        batch.timestamps,
        batch.keys,
        batch.values,
        [list(h) for h in batch.headers],
        batch.has_headers,
        batch.is_transactional,
        batch.is_control,
        batch.has_dense_offsets,
        [tuple(r) for r in batch.records],
    )


Outcome = tuple[Any, ...]


def outcome(data: bytes, packed: int, **decode_options: Any) -> tuple[Outcome, list[str]]:
    """What decode_batches then kafka_to_kraftlite give, as the Kafka handler calls them:
    the stage that failed and its error, or the kraftlite bytes, with the decoded batches'
    fields; and which parser read each batch. Any exception but CorruptRecordsError
    escapes and fails the test."""
    with packed_from(packed):
        try:
            batches = records.decode_batches(data, **decode_options)
        except CorruptRecordsError as exc:
            return ("decode", type(exc), str(exc)), []
        paths = [type(b.columns).__name__ for b in batches]
        try:
            result: Outcome = ("converted", records.kafka_to_kraftlite(*batches))
        except CorruptRecordsError as exc:
            result = ("convert", type(exc), str(exc))
    return (*result, [fields(b) for b in batches]), paths


def same_outcome(data: bytes, **decode_options: Any) -> tuple[Outcome, list[str]]:
    """Both paths' outcome, asserted equal; returns it and the parser of each batch."""
    fast, paths = outcome(data, PACKED, **decode_options)
    reference, reference_paths = outcome(data, REFERENCE, **decode_options)
    assert set(reference_paths) <= {"_RecordLists"}
    assert fast == reference
    return fast, paths


# ------------------------------------------------------------------ building batches


def varint(value: int, size: int = 0) -> bytes:
    """`value` zigzag-encoded (64-bit) in `size` bytes, non-minimal when size is larger
    than needed (zero groups with the continuation bit), minimal when 0."""
    raw = (value << 1) ^ (value >> 63)
    groups = []
    while True:
        groups.append(raw & 0x7F)
        raw >>= 7
        if not raw:
            break
    groups += [0] * (size - len(groups))
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def minimal_size(value: int) -> int:
    return len(varint(value))


@dataclass
class Rec:
    """One record as bytes will spell it; `sizes` are varint sizes (0: minimal)."""

    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[bytes, bytes | None]] | None = None  # None: the one byte 0
    attributes: int = 0
    sizes: dict[str, int] = field(default_factory=dict)
    zero_headers: bytes = b"\x00"  # how "no headers" is spelled

    def body(self) -> bytes:
        size = self.sizes.get
        out = bytes([self.attributes])
        out += varint(self.timestamp_delta, size("timestamp", 0))
        out += varint(self.offset_delta, size("offset", 0))
        for item, name in ((self.key, "key"), (self.value, "value")):
            out += varint(-1 if item is None else len(item), size(name, 0))
            out += item or b""
        if not self.headers:
            return out + self.zero_headers
        out += varint(len(self.headers))
        for name, value in self.headers:
            out += varint(len(name)) + name
            out += varint(-1) if value is None else varint(len(value)) + value
        return out

    def encode(self) -> bytes:
        body = self.body()
        return varint(len(body), self.sizes.get("length", 0)) + body

    def plain(self) -> bool:
        """Whether the packed path must read this record (rule 6's conditions)."""
        limits = {"length": 5, "timestamp": 9, "offset": 5, "key": 5, "value": 5}
        sized = {
            "length": len(self.body()),
            "timestamp": self.timestamp_delta,
            "offset": self.offset_delta,
            "key": -1 if self.key is None else len(self.key),
            "value": -1 if self.value is None else len(self.value),
        }
        return (
            not self.headers
            and self.zero_headers == b"\x00"
            and all(
                max(self.sizes.get(name, 0), minimal_size(value)) <= limits[name]
                for name, value in sized.items()
            )
            and -(2**31) <= self.offset_delta < 2**31
        )


HEADER = struct.Struct(">qiibIhiqqqhii")


def kafka_batch(
    section: bytes,
    count: int,
    *,
    attributes: int = 0,
    base_timestamp: int = BASE_TS,
    max_timestamp: int = BASE_TS,
    last_offset_delta: int | None = None,
    producer: tuple[int, int, int] = (-1, -1, -1),
    base_offset: int = 0,
    leader_epoch: int = -1,
) -> bytes:
    """A batch around an uncompressed records section: compressed with the codec in
    `attributes`, its length and CRC right, so only what the section says is tested."""
    codec = attributes & records.ATTR_COMPRESSION
    payload = section if codec == 0 else records._compress(Compression(codec), section)
    header = bytearray(
        HEADER.pack(
            base_offset,
            records.HEADER_SIZE - 12 + len(payload),
            leader_epoch,
            2,
            0,
            attributes,
            count - 1 if last_offset_delta is None else last_offset_delta,
            base_timestamp,
            max_timestamp,
            *producer[:2],
            producer[2],
            count,
        )
    )
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + payload))
    return bytes(header) + payload


@dataclass
class Batch:
    recs: list[Rec]
    attributes: int = 0
    base_timestamp: int = BASE_TS
    producer: tuple[int, int, int] = (-1, -1, -1)
    count_change: int = 0

    def section(self) -> bytes:
        return b"".join(r.encode() for r in self.recs)

    def encode(self, section: bytes | None = None) -> bytes:
        count = len(self.recs)
        log_append = self.attributes & records.ATTR_LOG_APPEND_TIME
        timestamps = [self.base_timestamp + r.timestamp_delta for r in self.recs]
        max_timestamp = BASE_TS if log_append else max(timestamps)
        return kafka_batch(
            self.section() if section is None else section,
            count + self.count_change,
            attributes=self.attributes,
            base_timestamp=self.base_timestamp,
            max_timestamp=max(INT64_MIN, min(INT64_MAX, max_timestamp)),
            last_offset_delta=max(r.offset_delta for r in self.recs),
            producer=self.producer,
        )

    def plain(self) -> bool:
        if not all(r.plain() for r in self.recs) or self.count_change:
            return False
        if self.attributes & records.ATTR_LOG_APPEND_TIME:
            return True
        deltas = [r.timestamp_delta for r in self.recs]
        return (
            INT64_MIN
            <= self.base_timestamp + min(deltas)
            <= self.base_timestamp + max(deltas)
            <= INT64_MAX
        )


# ------------------------------------------------------------------------ strategies

WIDTHS = st.sampled_from([0, 1, 5, 10, 100])


@st.composite
def items(draw: st.DrawFn, count: int, kind: str) -> list[bytes | None]:
    """Keys or values: all null, all empty, all one width (packed rows), or mixed."""
    mode = draw(st.sampled_from(["null", "empty", "fixed", "fixed-with-nulls", "mixed"]))
    if mode == "null":
        return [None] * count
    if mode == "empty":
        return [b""] * count
    if mode.startswith("fixed"):
        width = draw(WIDTHS)
        out: list[bytes | None] = [
            draw(st.binary(min_size=width, max_size=width)) for _ in range(count)
        ]
        if mode == "fixed-with-nulls":
            out = [None if draw(st.booleans()) else item for item in out]
        return out
    large = 9000 if kind == "value" else 300  # 3-byte lengths: 2 bytes hold up to 8191
    return [
        draw(
            st.none()
            | st.binary(max_size=40)
            | st.builds(
                lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256), st.integers(0, large)
            )
        )
        for _ in range(count)
    ]


TIMESTAMP_DELTAS = {
    "increasing": lambda i, rng: i,
    "small": lambda i, rng: rng.randint(-64, 63),
    "two-byte": lambda i, rng: rng.randint(-8192, 8191),
    "multi-byte": lambda i, rng: rng.randint(-(2**40), 2**40),
    "huge": lambda i, rng: rng.choice([rng.randint(-(2**62), 2**62), INT64_MAX, INT64_MIN]),
}
DELTA_KINDS = ["increasing"] * 3 + ["small", "two-byte", "two-byte", "multi-byte", "huge"]


@st.composite
def batches(draw: st.DrawFn, headers: bool = True) -> Batch:
    count = draw(st.integers(1, 24))
    rng = random.Random(draw(st.integers(0, 2**32)))
    delta_of = TIMESTAMP_DELTAS[draw(st.sampled_from(DELTA_KINDS))]
    keys = draw(items(count, "key"))
    values = draw(items(count, "value"))
    # rates from a seeded Random: hypothesis draws 0 from st.integers far more often
    with_headers = headers and rng.random() < 0.15
    odd_sizes = rng.random() < 0.25  # non-minimal varints in some records
    long_zero = rng.random() < 0.05  # "no headers" spelled in two bytes in some records
    sparse = rng.random() < 0.1
    recs = []
    for i in range(count):
        sizes = {}
        if odd_sizes and rng.random() < 0.5:
            name = rng.choice(["length", "timestamp", "offset", "key", "value"])
            sizes[name] = rng.randint(1, 10 if name == "timestamp" else 5)
        rec_headers = None
        if with_headers and rng.random() < 0.7:
            rec_headers = [
                (rng.choice([b"", b"trace", b"h\xc3\xa9"]), rng.choice([None, b"", b"v" * 3]))
                for _ in range(rng.randint(1, 2))
            ]
        recs.append(
            Rec(
                delta_of(i, rng),
                i if not sparse else rng.choice([i, i + 1, 0]),
                keys[i],
                values[i],
                rec_headers,
                attributes=rng.choice([0, 0, 0, 255]),
                sizes=sizes,
                zero_headers=b"\x80\x00" if long_zero and rng.random() < 0.3 else b"\x00",
            )
        )
    attributes = draw(st.sampled_from(CODECS))
    if rng.random() < 0.15:
        attributes |= records.ATTR_LOG_APPEND_TIME
    if rng.random() < 0.15:
        attributes |= records.ATTR_TRANSACTIONAL
    if rng.random() < 0.05:
        attributes |= records.ATTR_CONTROL
    base = rng.choice([BASE_TS] * 7 + [0, -1, INT64_MAX - 5, INT64_MIN + 5])
    return Batch(recs, attributes, base)


@st.composite
def record_sets(draw: st.DrawFn) -> list[Batch]:
    """One partition's records: 1-3 batches, of one idempotent producer or of none."""
    sets = draw(st.lists(batches(), min_size=1, max_size=3))
    producer = draw(st.sampled_from(["none"] * 3 + ["consecutive"] * 3 + ["gap", "mixed"]))
    sequence = draw(st.integers(0, 2**31 - 1))
    for index, batch in enumerate(sets):
        if producer == "none":
            continue
        if producer == "mixed" and index % 2:
            continue
        batch.producer = (77, 3, sequence)
        sequence = (sequence + len(batch.recs) + (producer == "gap")) % 2**31
    return sets


# ------------------------------------------------------------------ valid batches


@settings(max_examples=400, deadline=None)
@given(record_sets())
def test_packed_path_agrees_with_the_reference(sets: list[Batch]) -> None:
    data = b"".join(b.encode() for b in sets)
    _, paths = same_outcome(data)
    expected = ["_PackedRecords" if b.plain() else "_RecordLists" for b in sets]
    assert paths == expected  # the packed path is taken exactly where it must be


# --------------------------------------------------------------------- corruptions

MUTATIONS = ["byte", "truncate", "insert", "delete", "count", "raw-truncate", "raw-byte"]


@settings(max_examples=500, deadline=None)
@given(record_sets(), st.sampled_from(MUTATIONS), st.data())
def test_corrupted_batches_fail_the_same_way(
    sets: list[Batch], mutation: str, data: st.DataObject
) -> None:
    """A corruption of one batch's records section, CRC made right again (so it reaches
    the parsers), or of the bytes as sent (CRC and lengths as they fall)."""
    target = data.draw(st.integers(0, len(sets) - 1))
    section = bytearray(sets[target].section())
    position = data.draw(st.integers(0, len(section)))
    value = data.draw(st.integers(0, 255))
    if mutation == "byte" and section:
        section[min(position, len(section) - 1)] = value
    elif mutation == "truncate":
        del section[position:]
    elif mutation == "insert":
        section[position:position] = data.draw(st.binary(min_size=1, max_size=6))
    elif mutation == "delete":
        del section[position : position + data.draw(st.integers(1, 6))]
    elif mutation == "count":
        sets[target].count_change = data.draw(st.sampled_from([-1, 1, 2**20]))
    encoded = [
        b.encode(bytes(section) if index == target else None) for index, b in enumerate(sets)
    ]
    joined = bytearray(b"".join(encoded))
    if mutation == "raw-truncate":
        del joined[data.draw(st.integers(0, len(joined))) :]
    elif mutation == "raw-byte":
        joined[data.draw(st.integers(0, len(joined) - 1))] = value
    same_outcome(bytes(joined))
    same_outcome(bytes(joined), allow_truncated_tail=True)


def rewritten(rec: Rec, name: str, value: int, size: int, payload: bool = True) -> bytes:
    """`rec`'s body with field `name` (timestamp, offset, key or value length) spelled as
    `value` in `size` bytes; a key or value keeps its bytes after it only when `payload`."""
    spelled = {
        "timestamp": rec.timestamp_delta,
        "offset": rec.offset_delta,
        "key": -1 if rec.key is None else len(rec.key),
        "value": -1 if rec.value is None else len(rec.value),
    }
    spelled[name] = value
    parts = [bytes([rec.attributes])]
    for field_name, item in (
        ("timestamp", b""),
        ("offset", b""),
        ("key", rec.key),
        ("value", rec.value),
    ):
        parts.append(varint(spelled[field_name], size if field_name == name else 0))
        if payload or field_name != name:
            parts.append(item or b"")
    return b"".join([*parts, b"\x00"])


@settings(max_examples=400, deadline=None)
@given(batches(headers=False), st.data())
def test_any_one_varint_rewritten_fails_the_same_way(batch: Batch, data: st.DataObject) -> None:
    """A record whose field is any varint (any size, any value, lengths negative or
    beyond the section), the record's own length made right or left wrong."""
    index = data.draw(st.integers(0, len(batch.recs) - 1))
    name = data.draw(st.sampled_from(["timestamp", "offset", "key", "value"]))
    value = data.draw(
        st.integers(-3, 3)
        | st.integers(-(2**31), 2**31 - 1)
        | st.sampled_from([INT64_MAX, INT64_MIN, 2**31, -(2**31) - 1, 2**32, 2**63 // 2])
    )
    size = data.draw(st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5, 6, 9, 10, 11]))
    body = rewritten(batch.recs[index], name, value, size, data.draw(st.booleans()))
    if data.draw(st.integers(0, 3)) == 0:
        body += data.draw(st.binary(max_size=3))  # the record's length right, its end wrong
    section = b"".join(
        (varint(len(body)) + body) if i == index else r.encode() for i, r in enumerate(batch.recs)
    )
    same_outcome(batch.encode(section))


# ------------------------------------------------------------------ explicit cases


def plain_records(count: int = 5, **changes: Any) -> list[Rec]:
    recs = [Rec(i, i, b"key-%02d" % i, b"value-%03d" % i) for i in range(count)]
    for name, value in changes.items():
        setattr(recs[-1], name, value)
    return recs


def decoded_path(data: bytes) -> list[str]:
    return same_outcome(data)[1]


def test_plain_batches_take_the_packed_path_at_the_production_threshold() -> None:
    """Without forcing: a batch of _PACKED_FROM records takes the packed path, a smaller
    one the reference, and both convert as before."""
    big = Batch(plain_records(records._PACKED_FROM)).encode()
    small = Batch(plain_records(records._PACKED_FROM - 1)).encode()
    assert type(records.decode_batches(big)[0].columns).__name__ == "_PackedRecords"
    assert type(records.decode_batches(small)[0].columns).__name__ == "_RecordLists"
    for data in (big, small):
        with packed_from(REFERENCE):
            expected = records.kafka_to_kraftlite(*records.decode_batches(data))
        assert records.kafka_to_kraftlite(*records.decode_batches(data)) == expected


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name.lower())
def test_compressed_batches_convert_identically(compression: Compression) -> None:
    recs = [Rec(i * 7, i, None if i % 3 else b"k%d" % i, b"v" * (i % 50)) for i in range(300)]
    data = Batch(recs, attributes=compression).encode()
    assert decoded_path(data) == ["_PackedRecords"]


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"sizes": {"timestamp": 10}}, "_RecordLists"),  # a 10-byte varlong: reference
        ({"sizes": {"timestamp": 9}}, "_PackedRecords"),
        ({"sizes": {"offset": 5, "key": 5, "value": 5, "length": 5}}, "_PackedRecords"),
        ({"timestamp_delta": INT64_MAX - BASE_TS + 1}, "_RecordLists"),  # leaves int64
        ({"timestamp_delta": -(2**62)}, "_PackedRecords"),
        ({"zero_headers": b"\x80\x00"}, "_RecordLists"),  # zero headers, spelled long
        ({"headers": [(b"h", None)]}, "_RecordLists"),
        ({"value": bytes(9000)}, "_PackedRecords"),  # a 3-byte record length
        ({"key": None, "value": None}, "_PackedRecords"),
        ({"attributes": 0xFF}, "_PackedRecords"),  # record attributes are not read
    ],
)
def test_unusual_records_take_the_right_path(changes: dict[str, Any], path: str) -> None:
    data = Batch(plain_records(**changes)).encode()
    assert decoded_path(data) == [path]


def test_timestamps_beyond_int64_fail_conversion_the_same_way() -> None:
    data = Batch(plain_records(), base_timestamp=INT64_MAX - 2).encode()
    result, paths = same_outcome(data)
    assert result[0] == "convert" and "cannot convert" in result[2]
    assert paths == ["_RecordLists"]
    log_append = Batch(
        plain_records(), attributes=records.ATTR_LOG_APPEND_TIME, base_timestamp=INT64_MAX - 2
    ).encode()  # every record gets max_timestamp: nothing overflows
    result, paths = same_outcome(log_append)
    assert result[0] == "converted" and paths == ["_PackedRecords"]


def corrupt_section(recs: list[Rec], tail: bytes) -> bytes:
    return b"".join(r.encode() for r in recs) + tail


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (corrupt_section(plain_records(4), b"\x00" * 7), "disagrees|truncated"),
        (corrupt_section(plain_records(), b"\x00"), "after the last"),
        (corrupt_section(plain_records(4), b"\x7f"), "overruns"),  # length -64
        (corrupt_section(plain_records(4), b"\x0c\x00\x00\x00\xff\xff\xff"), "truncated"),
        (corrupt_section(plain_records(4), varint(2**31 - 1)), "overruns"),
        (corrupt_section(plain_records(4), varint(-2) + b"\x00" * 8), "overruns"),
        (corrupt_section(plain_records(4), b"\x0c" + b"\xff" * 6), "longer than|truncated"),
    ],
)
def test_malformed_tails_fail_the_same_way(section: bytes, message: str) -> None:
    data = kafka_batch(section, 5, max_timestamp=BASE_TS + 4)
    result, _ = same_outcome(data)
    assert result[0] == "decode"
    assert any(m in result[2] for m in message.split("|"))


def test_every_cut_and_every_byte_of_a_section_fails_the_same_way() -> None:
    """Exhaustive on one small batch: the section cut at every length (the count kept),
    and every byte set to each of a few telling values (varint ends and continuations)."""
    recs = [Rec(i, i, None if i % 2 else b"k", b"v" * i) for i in range(6)]
    section = Batch(recs).section()
    for cut in range(len(section)):
        same_outcome(Batch(recs).encode(section[:cut]))
    for position in range(len(section)):
        for value in (0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFF):
            changed = bytearray(section)
            changed[position] = value
            same_outcome(Batch(recs).encode(bytes(changed)))


@pytest.mark.parametrize(
    ("name", "value", "size"),
    [
        ("key", -2, 0),  # refused, with or without bytes after it
        ("value", -7, 0),
        ("value", -2, 2),
        ("value", 2**31 - 1, 0),  # far past the section: never an IndexError
        ("key", 2**31 - 1, 5),
        ("offset", 2**31, 5),  # 5 bytes, over 32 bits: "out of range"
        ("timestamp", 1, 11),  # 11 bytes: "longer than 10"
    ],
)
def test_bad_fields_fail_the_same_way(name: str, value: int, size: int) -> None:
    recs = plain_records()
    for payload in (True, False):
        body = rewritten(recs[2], name, value, size, payload)
        section = b"".join(
            varint(len(body)) + body if i == 2 else r.encode() for i, r in enumerate(recs)
        )
        result, _ = same_outcome(Batch(recs).encode(section))
        assert result[0] == "decode"


def test_several_batches_convert_as_one() -> None:
    plain = Batch(plain_records(40), producer=(5, 1, 100))
    more = Batch(plain_records(30), producer=(5, 1, 140))
    with_headers = Batch(plain_records(30, headers=[(b"h", b"v")]), producer=(5, 1, 170))
    assert decoded_path(plain.encode() + more.encode()) == ["_PackedRecords"] * 2
    mixed = plain.encode() + more.encode() + with_headers.encode()
    assert decoded_path(mixed) == ["_PackedRecords", "_PackedRecords", "_RecordLists"]
    gap = Batch(plain_records(30), producer=(5, 1, 141))
    result, _ = same_outcome(plain.encode() + gap.encode())
    assert result[0] == "convert" and "consecutive" in result[2]
    other = Batch(plain_records(30), producer=(6, 1, 140))
    result, _ = same_outcome(plain.encode() + other.encode())
    assert result[0] == "convert" and "different producers" in result[2]


def test_transactional_control_and_sparse_batches_keep_their_meaning() -> None:
    transactional = Batch(plain_records(), attributes=records.ATTR_TRANSACTIONAL).encode()
    with packed_from(PACKED):
        [batch] = records.decode_batches(transactional)
    assert batch.is_transactional and isinstance(batch.columns, records._PackedRecords)
    control = Batch(plain_records(), attributes=records.ATTR_CONTROL).encode()
    result, _ = same_outcome(control)
    assert result[0] == "convert" and "control" in result[2]
    sparse = Batch([Rec(i, 2 * i, None, b"v") for i in range(5)]).encode()
    result, _ = same_outcome(sparse)
    assert result[0] == "convert" and "0..n-1" in result[2]


def test_packed_batches_read_like_reference_ones() -> None:
    data = Batch(plain_records(8, key=None, value=b"")).encode()
    with packed_from(PACKED):
        [packed] = records.decode_batches(data)
    with packed_from(REFERENCE):
        [reference] = records.decode_batches(data)
    assert isinstance(packed.columns, records._PackedRecords)
    assert packed == reference and reference == packed
    assert packed.records == reference.records
    assert packed.keys[-1] is None and packed.values[-1] == b""
    assert packed.keys is packed.keys  # built once
    assert "_PackedRecords" in repr(packed)


def test_the_kafka_python_shape_converts_identically() -> None:
    """Records as encode_batch (and so kafka-python, byte for byte) writes them."""
    recs = [
        KafkaRecord(
            i, BASE_TS + (i * 37) % 50 - 10, None if i % 3 == 0 else b"key-%d" % i, b"v" * i
        )
        for i in range(200)
    ]
    data = records.encode_batch(recs, producer_id=1, producer_epoch=0, base_sequence=0)
    assert decoded_path(data) == ["_PackedRecords"]


# ------------------------------------------------------ kraftlite's encode_columns


optional = st.none() | st.binary(max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(optional, optional, st.integers(INT64_MIN, INT64_MAX)), min_size=1, max_size=40
    ),
    st.sampled_from([(-1, -1, -1), (9, 2, 5), (9, -1, 5), (9, 2, 2**31), (0, 2**15, 0)]),
    st.booleans(),
)
def test_encode_columns_writes_what_encode_batch_writes(
    rows: list[tuple[bytes | None, bytes | None, int]],
    producer: tuple[int, int, int],
    as_array: bool,
) -> None:
    keys = [k for k, _, _ in rows]
    values = [v for _, v, _ in rows]
    timestamps = [t for _, _, t in rows]

    def column(items: list[bytes | None]) -> kraftlite_batch.BinaryColumn:
        present = np.array([i is not None for i in items])
        data = b"".join(i or b"" for i in items)
        return kraftlite_batch.BinaryColumn(
            None if present.all() and data else present,
            np.array([len(i or b"") for i in items], np.uint32),
            np.frombuffer(data, np.uint8).data if as_array else data,
        )

    producer_fields = dict(
        zip(["producer_id", "producer_epoch", "base_sequence"], producer, strict=True)
    )
    try:
        expected: Any = kraftlite_batch.encode_batch(
            values, keys=keys, timestamps=timestamps, **producer_fields
        )
    except ValueError as exc:
        expected = (type(exc), str(exc))
    try:
        got: Any = kraftlite_batch.encode_columns(
            np.array(timestamps, np.int64), column(keys), column(values), **producer_fields
        )
    except ValueError as exc:
        got = (type(exc), str(exc))
    assert got == expected


def test_encode_columns_refuses_inconsistent_columns() -> None:
    good = kraftlite_batch.BinaryColumn(None, np.array([1, 2], np.uint32), b"abc")
    timestamps = np.array([1, 2], np.int64)
    assert kraftlite_batch.encode_columns(timestamps, good, good) == kraftlite_batch.encode_batch(
        [b"a", b"bc"], keys=[b"a", b"bc"], timestamps=[1, 2]
    )
    short = kraftlite_batch.BinaryColumn(None, np.array([1, 1], np.uint32), b"abc")
    with pytest.raises(ValueError, match="add up"):
        kraftlite_batch.encode_columns(timestamps, good, short)
    with pytest.raises(ValueError, match="same length"):
        kraftlite_batch.encode_columns(timestamps[:1], good, good)
    strided = np.frombuffer(b"abcdef", np.uint8)[::2].data
    with pytest.raises(ValueError, match="contiguous"):
        kraftlite_batch.encode_columns(
            timestamps, good, kraftlite_batch.BinaryColumn(None, good.lengths, strided)
        )


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(90, 160))
def test_batches_around_the_production_threshold_convert_identically(seed: int, count: int) -> None:
    """Unforced: batches on both sides of _PACKED_FROM, some with headers in later records
    only (the first record's hint says none), convert as the reference alone does."""
    rng = random.Random(seed)
    recs = [
        Rec(
            rng.randint(-100, 10_000),
            i,
            None if rng.random() < 0.3 else b"k" * rng.randint(0, 12),
            b"v" * rng.randint(0, 200),
            headers=[(b"h", b"x")] if i and rng.random() < 0.02 else None,
        )
        for i in range(count)
    ]
    data = Batch(recs).encode()
    got = records.kafka_to_kraftlite(*records.decode_batches(data))
    with packed_from(REFERENCE):
        assert got == records.kafka_to_kraftlite(*records.decode_batches(data))


def test_a_null_header_value_in_a_later_record_declines_the_packed_path() -> None:
    """Rule 6: the packed path answers only for records without headers. A null header
    value (length -1) in a later record only, past the first record's hint, leaves the
    batch to the reference, which keeps it null (rule 3)."""
    recs = plain_records(records._PACKED_FROM + 20)
    recs[100].headers = [(b"n", None), (b"e", b"")]
    data = Batch(recs).encode()
    assert decoded_path(data) == ["_RecordLists"]  # unforced, and both paths agree
    [batch] = records.decode_batches(data)
    assert batch.headers[100] == [("n", None), ("e", b"")]
    stored = kraftlite_batch.decode(records.kafka_to_kraftlite(batch))
    assert stored.headers[100] == (("n", None), ("e", b""))
    assert stored.headers[99] == ()
