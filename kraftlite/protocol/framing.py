"""A JSON header followed by raw byte segments, in one HTTP body (replica fetch answers).

Layout: u32 little-endian header length, the header as JSON, then the segments back to
back; the header says how long each one is (`sizes`). Batches travel as stored, never
re-encoded, and the header stays readable with any JSON library.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import orjson

_LENGTH = struct.Struct("<I")
CONTENT_TYPE = "application/vnd.kraftlite.framed"


class FramingError(ValueError):
    pass


def encode(header: dict[str, Any], segments: Sequence[bytes]) -> bytes:
    encoded = orjson.dumps({**header, "sizes": [len(s) for s in segments]})
    return b"".join([_LENGTH.pack(len(encoded)), encoded, *segments])


def decode(body: bytes) -> tuple[dict[str, Any], list[memoryview]]:
    view = memoryview(body)
    if len(view) < _LENGTH.size:
        raise FramingError("body too short for a framed message")
    (length,) = _LENGTH.unpack_from(view)
    end = _LENGTH.size + length
    try:
        header = orjson.loads(view[_LENGTH.size : end])
        sizes = header["sizes"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise FramingError(f"bad framed header: {exc}") from None
    segments = []
    for size in sizes:
        if not isinstance(size, int) or size < 0 or end + size > len(view):
            raise FramingError("segment sizes do not match the body")
        segments.append(view[end : end + size])
        end += size
    if end != len(view):
        raise FramingError("trailing bytes after the last segment")
    return header, segments
