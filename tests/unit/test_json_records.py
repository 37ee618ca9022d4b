"""Records as JSON (kraftlite/protocol/json_records.py): header values, null ones too, both
ways, and through the binary batch between them."""

from __future__ import annotations

import pytest

from kraftlite.errors import KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.json_records import parse_produce_body, record_to_json


@pytest.mark.parametrize(
    "headers",
    [
        {"a": "x", "n": None, "e": ""},
        [["a", "x"], ["n", None], ["e", ""]],
    ],
    ids=["object", "pairs"],
)
def test_a_null_header_value_is_produced_as_null_not_empty(headers: object) -> None:
    [(partition, record)] = parse_produce_body({"records": [{"value": "v", "headers": headers}]})
    assert partition is None
    assert record.headers == (("a", b"x"), ("n", None), ("e", b""))


def test_a_null_header_value_is_produced_as_null_in_base64_too() -> None:
    body = {
        "value_encoding": "base64",
        "records": [{"value": "dg==", "headers": [["n", None], ["b", "AP8="]]}],
    }
    [(_, record)] = parse_produce_body(body)
    assert record.headers == (("n", None), ("b", b"\x00\xff"))


@pytest.mark.parametrize("bad", [5, [], {"x": 1}])
def test_a_header_value_is_a_string_or_null(bad: object) -> None:
    with pytest.raises(KraftliteError, match="headers"):
        parse_produce_body({"records": [{"value": "v", "headers": [["h", bad]]}]})


@pytest.mark.parametrize("encoding", ["utf8", "base64"])
def test_a_null_header_value_is_fetched_as_json_null(encoding: str) -> None:
    """Produce body -> stored batch -> fetch answer: null stays null, "" stays ""."""
    [(_, record)] = parse_produce_body(
        {"records": [{"value": "v", "headers": {"a": "x", "n": None, "e": ""}}]}
    )
    stored = batch_format.encode_records([record], now_ms=7)
    [consumed] = batch_format.decode(stored).records()
    rendered = record_to_json(consumed, encoding)
    expected_x = "x" if encoding == "utf8" else "eA=="
    assert rendered["headers"] == {"a": expected_x, "n": None, "e": ""}


def test_a_null_header_value_stays_null_when_the_value_falls_back_to_base64() -> None:
    consumed = batch_format.ConsumedRecord(3, 1, None, b"\xff", (("n", None), ("a", b"x")))
    rendered = record_to_json(consumed, "utf8")
    assert rendered["value_encoding"] == "base64"
    assert rendered["headers"] == {"n": None, "a": "eA=="}
