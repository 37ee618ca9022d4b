"""Keyed partitioning matches Kafka's Java producer bit for bit.

Checked two ways: against the vectors of Apache Kafka's own `UtilsTest.testMurmur2`, and against
an independent implementation, kafka-python's `kafka.partitioner.default.murmur2` (which returns
the hash as an unsigned 32-bit value where Java returns a signed `int`).
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.protocol.partitioner import murmur2, partition_for_key, to_positive

# Importing the `kafka` package loads its protocol schemas through importlib.resources'
# legacy read_text/open_text, deprecated on Python 3.11-3.12; pytest turns warnings into errors.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from kafka.partitioner.default import murmur2 as reference_murmur2

# org.apache.kafka.common.utils.UtilsTest.testMurmur2: input bytes -> Java's signed int.
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

PARTITION_COUNTS = [1, 2, 3, 7, 12, 50, 256, 1000, 2**31 - 1]

# Every tail length (0-3 bytes past a whole block) with and without a full block before it,
# bytes with the high bit set (Java's bytes are signed; Kafka masks them with 0xff), then
# the kind of keys applications use.
FIXED_KEYS = [
    b"",
    *(b"abcdefg"[:n] for n in range(1, 8)),
    *(b"\xff" * n for n in range(1, 9)),
    *(bytes(range(0x80, 0x80 + n)) for n in range(1, 9)),
    *(f"key-{i}".encode() for i in range(3000)),
]


def assert_matches_reference(key: bytes) -> None:
    ours = murmur2(key)
    theirs = reference_murmur2(key)
    assert -(2**31) <= ours < 2**31, "murmur2 must return Java's signed int"
    assert ours & 0xFFFFFFFF == theirs, key
    assert to_positive(ours) == to_positive(theirs), key
    for count in PARTITION_COUNTS:
        assert partition_for_key(key, count) == (theirs & 0x7FFFFFFF) % count, (key, count)


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_utils_test_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert reference_murmur2(key) == expected & 0xFFFFFFFF  # the vectors agree with kafka-python


def test_murmur2_matches_kafka_python_on_fixed_keys() -> None:
    for key in FIXED_KEYS:
        assert_matches_reference(key)


@given(st.binary(max_size=200))
def test_murmur2_matches_kafka_python_on_any_bytes(key: bytes) -> None:
    assert_matches_reference(key)


def test_to_positive_clears_the_sign_bit_only() -> None:
    assert to_positive(0) == 0
    assert to_positive(5) == 5
    assert to_positive(2**31 - 1) == 2**31 - 1
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(-(2**31)) == 0  # not abs(): Integer.MIN_VALUE maps to 0


def test_partition_for_key_is_in_range() -> None:
    for key in FIXED_KEYS[:50]:
        assert partition_for_key(key, 1) == 0
        assert 0 <= partition_for_key(key, 12) < 12


@pytest.mark.parametrize("count", [0, -1])
def test_partition_for_key_rejects_fewer_than_one_partition(count: int) -> None:
    with pytest.raises(ValueError, match="partition_count"):
        partition_for_key(b"key", count)
