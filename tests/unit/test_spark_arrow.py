"""Stored batches as Arrow record batches (kraftlite/spark/arrow.py), without Spark: the
headers column, with null header values (section 13's bitmap used as Arrow's) and without."""

from __future__ import annotations

from typing import Any

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


def test_latest_of_each_key_keeps_the_last_record_of_each_key_in_offset_order() -> None:
    """source.py rule 5, folded every few rows as a long range would be."""
    from kraftlite.spark.source import latest_of_each_key  # noqa: PLC0415

    schema = arrow_schema(default_columns(False))
    written = [(b"a", b"1"), (b"b", b"1"), (None, b"keyless"), (b"a", b"2"), (b"c", b"1"),
               (b"b", None), (b"c", b"2"), (b"d", b"1"), (b"b", b"3"), (b"d", None)]  # fmt: skip

    def batch(first: int, records: list[tuple[bytes | None, bytes | None]]) -> Any:
        count = len(records)
        return pa.RecordBatch.from_pydict(
            {
                "key": [k for k, _ in records],
                "value": [v for _, v in records],
                "topic": ["t"] * count,
                "partition": [0] * count,
                "offset": list(range(first, first + count)),
                "timestamp": [0] * count,
                "timestampType": [0] * count,
            },
            schema=schema,
        )

    batches = [batch(i, written[i : i + 2]) for i in range(0, len(written), 2)]
    for fold_rows in (1, 3, 100):
        rows = [
            (r["key"], r["value"], r["offset"])
            for b in latest_of_each_key(batches, schema, fold_rows)
            for r in b.to_pylist()
        ]
        # a: its 2nd; b: deleted, then written again; c: its 2nd; d: deleted; no keyless row
        assert rows == [(b"a", b"2", 3), (b"c", b"2", 6), (b"b", b"3", 8)], fold_rows
    assert list(latest_of_each_key([], schema)) == []
