"""The primitive types of Kafka's wire protocol: a bounds-checked `Reader` and a `Writer`.

Kafka's protocol guide and its message schemas (clients/src/main/resources/common/message)
define these types; every multi-byte integer is big-endian (network order). The rules this
module keeps:

1. Every read is bounds-checked. Truncated or malformed input raises `WireError` (a
   `ValueError`) and nothing else: no IndexError, struct.error or UnicodeDecodeError
   escapes, whatever the bytes. A server can treat `WireError` as "close the connection".
2. Hostile lengths never make us allocate: a length or an array count is checked against
   the bytes that are left before anything is built from it. An array of `n` items whose
   smallest possible encoding is `k` bytes needs at least `n * k` bytes, so a count of
   2**31 in a 100-byte frame fails at once instead of building a huge list. A count that
   fits the bytes can still be a million small items, so a `Reader` may also carry an item
   `budget` (shared with the readers of nested fields) that every array item AND every
   tagged field (KIP-482, known or unknown) is charged against before anything is read;
   over it, `ItemBudgetExceeded` (a `WireError`). A tagged field is as cheap on the wire as
   an array item (two bytes: tag and size) and costs as much to skip, so a 512 KiB frame
   of ~131k empty tagged fields is refused as soon as their count is read.
3. Lengths: classic strings carry an int16 length, classic bytes and arrays an int32; the
   "compact" forms of flexible versions (KIP-482) carry an unsigned varint of length + 1.
   Null is -1 (classic) or 0 (compact). A negative length other than -1, or null where the
   field is not nullable, is malformed.
4. Varints: unsigned varints are at most 5 bytes and fit 32 bits; `varint`/`varlong` are
   zigzag-encoded signed 32/64-bit integers of at most 5/10 bytes (record batches use them).
5. Strings are UTF-8; invalid UTF-8 is malformed (Java's clients would substitute U+FFFD;
   we refuse instead, so what we store is what was sent).

`Writer` is the mirror image. It does not range-check values: `struct` does, raising
`struct.error` (and `OverflowError` for varints out of range); `messages` turns those into
`EncodeError` with the field's name, since a bad value there is a bug in the caller, not
hostile input.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Mapping
from typing import Final, TypeVar
from uuid import UUID

T = TypeVar("T")

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_F64: Final = struct.Struct(">d")

MAX_STRING_BYTES: Final = 0x7FFF  # a classic string's int16 length
_BIG_ENDIAN: Final = sys.byteorder == "big"


class WireError(ValueError):
    """The bytes are not valid for the protocol: truncated, over-long, or inconsistent."""


class ItemBudgetExceeded(WireError):
    """The input holds more items (array items, tagged fields) than the reader's budget
    allows (rule 2): the caller may retry with a larger budget elsewhere (a worker thread)."""


class EncodeError(ValueError):
    """A value cannot be encoded as its field's type (a bug in the caller, not in the input)."""


def zigzag(value: int) -> int:
    """Zigzag-map a signed integer to an unsigned one (0, -1, 1, -2 -> 0, 1, 2, 3)."""
    return value << 1 if value >= 0 else (~value << 1) | 1


def encode_unsigned_varint(value: int) -> bytes:
    """The unsigned varint bytes of `value` (7 bits a byte, least significant group first)."""
    if value < 0:
        raise OverflowError(f"unsigned varint of negative {value}")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag varint of a signed 32-bit integer (record lengths, deltas, counts)."""
    if not -(2**31) <= value < 2**31:
        raise OverflowError(f"varint out of the int32 range: {value}")
    return encode_unsigned_varint(zigzag(value))


def encode_varlong(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit integer (record timestamp deltas)."""
    if not -(2**63) <= value < 2**63:
        raise OverflowError(f"varlong out of the int64 range: {value}")
    return encode_unsigned_varint(zigzag(value))


class Reader:
    """Reads Kafka's primitive types from a buffer, front to back.

    `pos` is the offset of the next unread byte. Every method either returns a value and
    advances `pos`, or raises `WireError` (the position is then unspecified: a malformed
    frame is abandoned whole, never resumed).
    """

    __slots__ = ("_end", "_view", "budget", "pos")

    def __init__(
        self, data: bytes | bytearray | memoryview, pos: int = 0, budget: list[int] | None = None
    ) -> None:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self._view = view
        self._end = len(view)
        self.pos = pos
        # Items (array items, tagged fields) this read may still build or skip, shared
        # with nested readers (rule 2): a count that fits the bytes left can still be
        # millions of small structs.
        self.budget = budget

    @property
    def remaining(self) -> int:
        """How many bytes are left to read."""
        return self._end - self.pos

    def at_end(self) -> bool:
        return self.pos >= self._end

    def expect_end(self, what: str = "message") -> None:
        """Raise `WireError` if bytes are left: a frame longer than its fields is malformed."""
        if self.pos != self._end:
            raise WireError(f"{self._end - self.pos} unexpected bytes after the {what}")

    def _advance(self, size: int) -> int:
        """Reserve `size` bytes and return where they start."""
        start = self.pos
        end = start + size
        if size < 0 or end > self._end:
            raise WireError(
                f"truncated: {size} bytes needed at offset {start}, {self._end - start} left"
            )
        self.pos = end
        return start

    def raw(self, size: int) -> memoryview:
        """The next `size` bytes as a view (no copy)."""
        start = self._advance(size)
        return self._view[start : start + size]

    def skip(self, size: int) -> None:
        self._advance(size)

    # --------------------------------------------------------------------- fixed width

    def int8(self) -> int:
        return int(_I8.unpack_from(self._view, self._advance(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack_from(self._view, self._advance(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self._view, self._advance(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self._view, self._advance(8))[0])

    def uint16(self) -> int:
        return int(_U16.unpack_from(self._view, self._advance(2))[0])

    def uint32(self) -> int:
        return int(_U32.unpack_from(self._view, self._advance(4))[0])

    def float64(self) -> float:
        return float(_F64.unpack_from(self._view, self._advance(8))[0])

    def boolean(self) -> bool:
        """One byte; Kafka reads any non-zero byte as true, and so do we."""
        return self._view[self._advance(1)] != 0

    def uuid(self) -> UUID:
        """16 bytes, big-endian (Kafka's Uuid: most then least significant 64 bits)."""
        start = self._advance(16)
        return UUID(bytes=bytes(self._view[start : start + 16]))

    # ------------------------------------------------------------------------ varints

    def _varint_bits(self, max_bytes: int) -> int:
        view = self._view
        pos = self.pos
        end = self._end
        result = 0
        shift = 0
        for _ in range(max_bytes):
            if pos >= end:
                raise WireError(f"truncated varint at offset {self.pos}")
            byte = view[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return result
            shift += 7
        raise WireError(f"varint longer than {max_bytes} bytes at offset {self.pos}")

    def unsigned_varint(self) -> int:
        """An unsigned 32-bit varint (compact lengths, tags, tagged field counts)."""
        value = self._varint_bits(5)
        if value > 0xFFFFFFFF:
            raise WireError(f"unsigned varint {value} does not fit 32 bits")
        return value

    def varint(self) -> int:
        """A zigzag varint holding a signed 32-bit integer."""
        value = self._varint_bits(5)
        if value > 0xFFFFFFFF:
            raise WireError(f"varint {value} does not fit 32 bits")
        return (value >> 1) ^ -(value & 1)

    def varlong(self) -> int:
        """A zigzag varint holding a signed 64-bit integer."""
        value = self._varint_bits(10)
        if value > 0xFFFFFFFFFFFFFFFF:
            raise WireError(f"varlong {value} does not fit 64 bits")
        return (value >> 1) ^ -(value & 1)

    # ------------------------------------------------------------------ strings, bytes

    def _text(self, size: int) -> str:
        start = self._advance(size)
        try:
            return str(self._view[start : start + size], "utf-8")
        except UnicodeDecodeError as exc:
            raise WireError(f"string at offset {start} is not UTF-8") from exc

    def _blob(self, size: int) -> bytes:
        start = self._advance(size)
        return bytes(self._view[start : start + size])

    def _classic_length(self, size: int, nullable: bool, what: str) -> int:
        if size < 0 and (size != -1 or not nullable):
            raise WireError(f"invalid {what} length {size}")
        return size

    def _compact_length(self, nullable: bool, what: str) -> int:
        size = self.unsigned_varint() - 1
        if size < 0 and not nullable:
            raise WireError(f"null {what} where the field is not nullable")
        return size

    def string(self) -> str:
        """int16 length, then UTF-8 bytes."""
        return self._text(self._classic_length(self.int16(), False, "string"))

    def nullable_string(self) -> str | None:
        size = self._classic_length(self.int16(), True, "string")
        return None if size == -1 else self._text(size)

    def compact_string(self) -> str:
        """Unsigned varint of length + 1, then UTF-8 bytes."""
        return self._text(self._compact_length(False, "string"))

    def compact_nullable_string(self) -> str | None:
        size = self._compact_length(True, "string")
        return None if size == -1 else self._text(size)

    def bytes_(self) -> bytes:
        """int32 length, then the bytes."""
        return self._blob(self._classic_length(self.int32(), False, "bytes"))

    def nullable_bytes(self) -> bytes | None:
        size = self._classic_length(self.int32(), True, "bytes")
        return None if size == -1 else self._blob(size)

    def compact_bytes(self) -> bytes:
        return self._blob(self._compact_length(False, "bytes"))

    def compact_nullable_bytes(self) -> bytes | None:
        size = self._compact_length(True, "bytes")
        return None if size == -1 else self._blob(size)

    # ------------------------------------------------------------------------- arrays

    def _checked_count(self, count: int, min_item_size: int, what: str = "array") -> int:
        if count > (self._end - self.pos) // max(min_item_size, 1):
            raise WireError(
                f"{what} of {count} items cannot fit in the {self._end - self.pos} bytes left"
            )
        if self.budget is not None:
            self.budget[0] -= count
            if self.budget[0] < 0:
                raise ItemBudgetExceeded(
                    "the request holds more items (array items, tagged fields) than allowed"
                )
        return count

    def array_length(self, min_item_size: int, nullable: bool = False) -> int:
        """A classic int32 array count, -1 for null; checked against the bytes left."""
        count = self._classic_length(self.int32(), nullable, "array")
        return count if count < 0 else self._checked_count(count, min_item_size)

    def compact_array_length(self, min_item_size: int, nullable: bool = False) -> int:
        """A compact array count (unsigned varint of count + 1), -1 for null; checked."""
        count = self._compact_length(nullable, "array")
        return count if count < 0 else self._checked_count(count, min_item_size)

    def items(self, count: int, read_item: Callable[[Reader], T]) -> list[T]:
        """`count` items read one after another (`count` already checked)."""
        return [read_item(self) for _ in range(count)]

    def array(self, read_item: Callable[[Reader], T], min_item_size: int = 1) -> list[T]:
        return self.items(self.array_length(min_item_size), read_item)

    def nullable_array(
        self, read_item: Callable[[Reader], T], min_item_size: int = 1
    ) -> list[T] | None:
        count = self.array_length(min_item_size, nullable=True)
        return None if count == -1 else self.items(count, read_item)

    def compact_array(self, read_item: Callable[[Reader], T], min_item_size: int = 1) -> list[T]:
        return self.items(self.compact_array_length(min_item_size), read_item)

    def compact_nullable_array(
        self, read_item: Callable[[Reader], T], min_item_size: int = 1
    ) -> list[T] | None:
        count = self.compact_array_length(min_item_size, nullable=True)
        return None if count == -1 else self.items(count, read_item)

    def int32_items(self, count: int) -> list[int]:
        """`count` int32s in one bulk conversion (replica lists, partition indexes)."""
        return self._fixed_items(count, "i", 4)

    def int64_items(self, count: int) -> list[int]:
        return self._fixed_items(count, "q", 8)

    def _fixed_items(self, count: int, typecode: str, size: int) -> list[int]:
        start = self._advance(count * size)
        values = array(typecode)
        values.frombytes(self._view[start : start + count * size])
        if not _BIG_ENDIAN:
            values.byteswap()
        return values.tolist()

    # ------------------------------------------------------------------- tagged fields

    def tagged_field_header(self) -> tuple[int, int]:
        """(tag, size) of the next tagged field; `size` checked against the bytes left."""
        tag = self.unsigned_varint()
        size = self.unsigned_varint()
        if size > self._end - self.pos:
            raise WireError(f"tagged field {tag} of {size} bytes is truncated")
        return tag, size

    def tagged_field_count(self) -> int:
        """The count that opens a tagged-field section (KIP-482): checked against the
        bytes left (a field is at least a tag and a size, two bytes) and charged to the
        item budget, every field one item (rule 2), before any field is read."""
        return self._checked_count(self.unsigned_varint(), 2, "tagged-field section")

    def tagged_fields(self) -> dict[int, bytes]:
        """A whole tagged-field section (KIP-482) as raw bytes per tag.

        `messages` decodes the tags it knows itself; this is for headers and tests.
        """
        count = self.tagged_field_count()
        fields: dict[int, bytes] = {}
        for _ in range(count):
            tag, size = self.tagged_field_header()
            fields[tag] = self._blob(size)
        return fields


class Writer:
    """Appends Kafka's primitive types to a growing buffer; `getvalue()` returns the bytes.

    Small values go into one `bytearray`. Large byte strings (record batches) are kept as
    separate parts and joined once at the end, so a fetch response's records are copied
    once, not twice.
    """

    __slots__ = ("_buf", "_parts")

    _SEPARATE_FROM: Final = 4096  # byte strings at least this long stay separate parts

    def __init__(self) -> None:
        self._buf = bytearray()
        self._parts: list[bytes | bytearray | memoryview] = []

    def __len__(self) -> int:
        return len(self._buf) + sum(len(part) for part in self._parts)

    def getvalue(self) -> bytes:
        if not self._parts:
            return bytes(self._buf)
        return b"".join([*self._parts, self._buf])

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes as they are."""
        if len(data) >= self._SEPARATE_FROM:
            self._parts.append(self._buf)
            self._parts.append(data)
            self._buf = bytearray()
        else:
            self._buf += data

    # --------------------------------------------------------------------- fixed width

    def int8(self, value: int) -> None:
        self._buf += _I8.pack(value)

    def int16(self, value: int) -> None:
        self._buf += _I16.pack(value)

    def int32(self, value: int) -> None:
        self._buf += _I32.pack(value)

    def int64(self, value: int) -> None:
        self._buf += _I64.pack(value)

    def uint16(self, value: int) -> None:
        self._buf += _U16.pack(value)

    def uint32(self, value: int) -> None:
        self._buf += _U32.pack(value)

    def float64(self, value: float) -> None:
        self._buf += _F64.pack(value)

    def boolean(self, value: bool) -> None:
        self._buf.append(1 if value else 0)

    def uuid(self, value: UUID) -> None:
        self._buf += value.bytes

    # ------------------------------------------------------------------------ varints

    def unsigned_varint(self, value: int) -> None:
        if not 0 <= value <= 0xFFFFFFFF:
            raise OverflowError(f"unsigned varint out of the uint32 range: {value}")
        self._buf += encode_unsigned_varint(value)

    def varint(self, value: int) -> None:
        self._buf += encode_varint(value)

    def varlong(self, value: int) -> None:
        self._buf += encode_varlong(value)

    # ------------------------------------------------------------------ strings, bytes

    def string(self, value: str) -> None:
        data = value.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise OverflowError(f"string of {len(data)} bytes is longer than {MAX_STRING_BYTES}")
        self._buf += _I16.pack(len(data))
        self._buf += data

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self._buf += _I16.pack(-1)
        else:
            self.string(value)

    def compact_string(self, value: str) -> None:
        data = value.encode("utf-8")
        self.unsigned_varint(len(data) + 1)
        self._buf += data

    def compact_nullable_string(self, value: str | None) -> None:
        if value is None:
            self._buf.append(0)
        else:
            self.compact_string(value)

    def bytes_(self, value: bytes | bytearray | memoryview) -> None:
        self._buf += _I32.pack(len(value))
        self.raw(value)

    def nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> None:
        if value is None:
            self._buf += _I32.pack(-1)
        else:
            self.bytes_(value)

    def compact_bytes(self, value: bytes | bytearray | memoryview) -> None:
        self.unsigned_varint(len(value) + 1)
        self.raw(value)

    def compact_nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> None:
        if value is None:
            self._buf.append(0)
        else:
            self.compact_bytes(value)

    # ------------------------------------------------------------------------- arrays

    def array_length(self, count: int | None) -> None:
        """A classic array count; None writes null (-1)."""
        self._buf += _I32.pack(-1 if count is None else count)

    def compact_array_length(self, count: int | None) -> None:
        self.unsigned_varint(0 if count is None else count + 1)

    def int32_items(self, values: list[int]) -> None:
        self._buf += struct.pack(f">{len(values)}i", *values)

    def int64_items(self, values: list[int]) -> None:
        self._buf += struct.pack(f">{len(values)}q", *values)

    # ------------------------------------------------------------------- tagged fields

    def tagged_fields(self, fields: Mapping[int, bytes]) -> None:
        """A tagged-field section from raw bytes per tag, in ascending tag order (KIP-482)."""
        self.unsigned_varint(len(fields))
        for tag in sorted(fields):
            data = fields[tag]
            self.unsigned_varint(tag)
            self.unsigned_varint(len(data))
            self.raw(data)
