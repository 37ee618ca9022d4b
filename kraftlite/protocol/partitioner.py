"""Kafka's keyed partitioning: which partition a record with a given key goes to.

This is the keyed path of Kafka's Java producer (`DefaultPartitioner`, and since Kafka 3.3
`BuiltInPartitioner.partitionForKey`): `toPositive(murmur2(key)) % numPartitions`. Matching it
bit for bit means a key lands on the same partition number here as with any Kafka client.

Pure functions only: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["murmur2", "partition_for_key", "to_positive"]

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_R: Final = 24
_MASK32: Final = 0xFFFFFFFF
_BLOCK: Final = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: MurmurHash2, 32-bit, seed 0x9747b28c.

    Returns the hash as Java's `int` does: a signed 32-bit value in [-2**31, 2**31).
    Arithmetic is done on unsigned 32-bit values (Python ints masked to 32 bits), which gives
    the same bits as Java's wrapping `int` arithmetic and its unsigned shift `>>>`.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    body = length & ~3

    # Whole 4-byte blocks, each read as a little-endian unsigned int.
    for (block,) in _BLOCK.iter_unpack(memoryview(data)[:body]):
        k = (block * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k

    # The last 1-3 bytes (Java's fall-through switch on length % 4).
    tail = data[body:]
    if tail:
        if len(tail) >= 3:
            h ^= tail[2] << 16
        if len(tail) >= 2:
            h ^= tail[1] << 8
        h ^= tail[0]
        h = (h * _M) & _MASK32

    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15

    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (`n & 0x7fffffff`), not `abs`."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition Kafka's producer picks for a non-null key (`BuiltInPartitioner`).

    Raises ValueError if `partition_count` is below 1.
    """
    if partition_count < 1:
        raise ValueError(f"partition_count must be at least 1, got {partition_count}")
    return to_positive(murmur2(key)) % partition_count
