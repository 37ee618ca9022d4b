"""Records as JSON, the edge format for people and curl (api-v1.md, Produce and Fetch).

Keys and values are UTF-8 text by default, base64 with `key_encoding`/`value_encoding`
(produce) or `encoding=base64` (fetch), so any bytes round-trip. Header values follow the
value encoding; a null header value is JSON null both ways (as Kafka's, distinct from "").
On fetch, a key or value that is not valid UTF-8 is sent as base64 and the
record says so (`"key_encoding": "base64"`), rather than being mangled. Pure.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any, Final

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol.batch import ConsumedRecord, Headers, Record

ENCODINGS = ("utf8", "base64")


def _bad(message: str) -> KraftliteError:
    return KraftliteError(ErrorCode.INVALID_REQUEST, message)


def encoding_of(value: object, what: str) -> str:
    """`value` as an encoding (callers pass "utf8" for one left out: null is none)."""
    if value not in ENCODINGS and value != "utf-8":
        raise _bad(f"{what} must be one of {', '.join(ENCODINGS)}")
    return "base64" if value == "base64" else "utf8"


def _to_bytes(value: object, encoding: str, where: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(f"{where} must be a string or null")
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise _bad(f"{where} is not valid base64") from None
    return value.encode("utf-8", "surrogatepass")


_URL_SAFE: Final = str.maketrans("-_", "+/")


def key_from_text(text: str, encoding: str) -> bytes:
    """A record key given as text (a URL's path segment): UTF-8, or base64 (any bytes) in
    the URL-safe alphabet (RFC 4648 section 5: a path segment holds no "/") or the
    standard one."""
    if encoding == "base64":  # padding may be left out, as base64url usually is
        text = text.translate(_URL_SAFE) + "=" * (-len(text) % 4)
    key = _to_bytes(text, encoding, "the key")
    assert key is not None
    return key


def _headers(value: object, encoding: str, where: str) -> Headers:
    pairs: Iterable[Any]
    if isinstance(value, dict):
        pairs = value.items()
    elif isinstance(value, list | tuple):
        pairs = value
    else:
        raise _bad(f"{where} must be an object or a list of [name, value] pairs")
    result = []
    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2 or not isinstance(pair[0], str):
            raise _bad(f"{where}: each header is a name and a value")
        result.append((pair[0], _to_bytes(pair[1], encoding, f"{where}[{pair[0]!r}]")))
    return tuple(result)


def _optional_int(record: dict[str, Any], name: str, where: str) -> int | None:
    """An integer field that may be left out (None); null is no integer (the document)."""
    if name not in record:
        return None
    value = record[name]
    if isinstance(value, float) and value.is_integer():  # JSON Schema: 1.0 is an integer
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise _bad(f"{where}.{name} must be a 64-bit integer")
    return value


def parse_produce_body(body: dict[str, Any]) -> list[tuple[int | None, Record]]:
    """(requested partition or None, Record) for each record of a JSON produce body."""
    records = body.get("records")
    if not isinstance(records, list) or not records:
        raise _bad("records must be a non-empty list")
    # absent means utf8; an explicit null is no encoding (the OpenAPI document says so)
    key_encoding = encoding_of(body.get("key_encoding", "utf8"), "key_encoding")
    value_encoding = encoding_of(body.get("value_encoding", "utf8"), "value_encoding")
    parsed = []
    for i, record in enumerate(records):
        where = f"records[{i}]"
        if not isinstance(record, dict):
            raise _bad(f"{where} must be an object")
        partition = _optional_int(record, "partition", where)
        if partition is not None and partition < 0:
            raise _bad(f"{where}.partition must be >= 0")
        timestamp = _optional_int(record, "timestamp", where)
        if timestamp is not None and timestamp < 0:
            raise _bad(f"{where}.timestamp must be >= 0 (milliseconds since the epoch)")
        parsed.append(
            (
                partition,
                Record(
                    value=_to_bytes(record.get("value"), value_encoding, f"{where}.value"),
                    key=_to_bytes(record.get("key"), key_encoding, f"{where}.key"),
                    headers=_headers(record.get("headers", ()), value_encoding, f"{where}.headers"),
                    timestamp=timestamp,
                ),
            )
        )
    return parsed


def _render(data: bytes | None, encoding: str) -> tuple[str | None, bool]:
    """(text, fell back to base64)."""
    if data is None:
        return None, False
    if encoding == "utf8":
        try:
            return data.decode("utf-8"), False
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode("ascii"), encoding == "utf8"


def record_to_json(record: ConsumedRecord, encoding: str) -> dict[str, Any]:
    key, key_fallback = _render(record.key, encoding)
    value, value_fallback = _render(record.value, encoding)
    headers: dict[str, str | None] = {}
    for name, raw in record.headers:
        headers[name] = _render(raw, "base64" if value_fallback else encoding)[0]  # None: null
    out: dict[str, Any] = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": key,
        "value": value,
        "headers": headers,
    }
    if key_fallback:
        out["key_encoding"] = "base64"
    if value_fallback:
        out["value_encoding"] = "base64"
    return out


_CURSOR_MAX = 2 + 400  # an index key (storage/keys.py): a tag byte and up to 400 key bytes


def cursor_to_text(index_key: bytes) -> str:
    """A table page's cursor (an index key) as a query parameter: base64url, unpadded."""
    return base64.urlsafe_b64encode(index_key).decode("ascii").rstrip("=")


def cursor_from_text(text: str) -> bytes:
    """`cursor_to_text`'s inverse; INVALID_REQUEST for text no page gave."""
    if len(text) > 4 * _CURSOR_MAX // 3 + 4:
        raise _bad("after is not a cursor a table page gave")
    try:
        cursor = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise _bad("after is not a cursor a table page gave") from None
    if not cursor or cursor[0] not in {0, 1} or len(cursor) > _CURSOR_MAX:
        raise _bad("after is not a cursor a table page gave")
    return cursor


def record_from_json(row: Any) -> ConsumedRecord:
    """A record `record_to_json(record, "base64")` made, back (a relayed table page's);
    ValueError, KeyError or TypeError for anything else."""

    def raw(value: Any) -> bytes | None:
        return None if value is None else base64.b64decode(str(value), validate=True)

    headers = tuple((str(name), raw(value)) for name, value in dict(row["headers"]).items())
    return ConsumedRecord(
        int(row["offset"]), int(row["timestamp"]), raw(row["key"]), raw(row["value"]), headers
    )
