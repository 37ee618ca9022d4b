"""Stored batches as Arrow record batches (kraftlite/spark/arrow.py), without Spark: the
headers column, with null header values (section 13's bitmap used as Arrow's) and without."""

from __future__ import annotations

import pyarrow as pa

from kraftlite.protocol import batch as batch_format
from kraftlite.spark.arrow import HEADER_TYPE, arrow_schema, default_columns, to_record_batch

COLUMNS = default_columns(include_headers=True)


def _rows(stored: bytes) -> list[dict[str, object]]:
    got = to_record_batch(
        memoryview(stored), topic="t", partition=0, start=0, end=2**62, columns=COLUMNS
    )
    assert got is not None
    assert got.schema == arrow_schema(COLUMNS)
    got.validate(full=True)
    return got.to_pylist()


def test_a_null_header_value_is_a_null_in_the_headers_column() -> None:
    headers = [[("a", b"x"), ("n", None), ("e", b"")], [], [("n", None)]]
    stored = bytes(
        batch_format.stamp(
            batch_format.encode_batch([b"1", b"2", b"3"], timestamps=[1, 2, 3], headers=headers),
            10,
            0,
        )
    )
    rows = _rows(stored)
    assert [row["offset"] for row in rows] == [10, 11, 12]
    assert [row["headers"] for row in rows] == [
        [{"key": "a", "value": b"x"}, {"key": "n", "value": None}, {"key": "e", "value": b""}],
        None,  # no headers: null, as Kafka's source gives
        [{"key": "n", "value": None}],
    ]
    assert HEADER_TYPE.field("value").nullable


def test_headers_without_a_null_value_have_no_nulls() -> None:
    headers = [[("a", b"x"), ("e", b"")], [("b", b"yy")]]
    stored = batch_format.encode_batch([b"1", b"2"], timestamps=[1, 2], headers=headers)
    rows = _rows(stored)
    assert [row["headers"] for row in rows] == [
        [{"key": "a", "value": b"x"}, {"key": "e", "value": b""}],
        [{"key": "b", "value": b"yy"}],
    ]
    got = to_record_batch(
        memoryview(stored), topic="t", partition=0, start=0, end=9, columns=COLUMNS
    )
    assert got is not None
    values = got.column("headers").flatten().field("value")
    assert isinstance(values, pa.BinaryArray) and values.null_count == 0


def test_many_headers_with_nulls_keep_their_place() -> None:
    count = 50
    headers = [
        [(f"h{i}", None if (i + j) % 5 == 0 else b"%d" % i) for i in range(j % 4 + 1)]
        for j in range(count)
    ]
    stored = batch_format.encode_batch([b"v"] * count, timestamps=[0] * count, headers=headers)
    rows = _rows(stored)
    assert [[(h["key"], h["value"]) for h in row["headers"]] for row in rows] == headers
