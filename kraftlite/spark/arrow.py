"""kraftlite batches as Arrow record batches, straight from the column buffers (no per-record
Python), in the row schema of Spark's Kafka source.

The Arrow schema is built here, not with pyspark's helpers (their signatures changed between
4.0 and 4.3): binary/string (not large_*), int32 for int, timestamp[us, UTC], and a list
child named "element", exactly what Spark's Python data source expects.

A user schema may name a subset of the columns, in any order (Spark's Python sources have no
column pruning, so this is how a job skips building columns it does not use).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import stored

# a header's value may be null (Kafka's null header value), as its row's key and value
HEADER_TYPE = pa.struct(
    [pa.field("key", pa.string()), pa.field("value", pa.binary(), nullable=True)]
)
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
# Spark's simpleString of each column's type, in the order of Kafka's source.
COLUMN_TYPES: dict[str, str] = {
    "key": "binary",
    "value": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp",
    "timestampType": "int",
    "headers": "array<struct<key:string,value:binary>>",
}
ARROW_TYPES: dict[str, pa.DataType] = {
    "key": pa.binary(),
    "value": pa.binary(),
    "topic": pa.string(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestampType": pa.int32(),
    "headers": HEADERS_TYPE,
}
NULLABLE = {"key", "value", "headers"}  # the others always have a value
KAFKA_COLUMNS = tuple(name for name in COLUMN_TYPES if name != "headers")

# (name, nullable) of each column a reader yields, in order
Columns = tuple[tuple[str, bool], ...]


def default_columns(include_headers: bool) -> Columns:
    names = (*KAFKA_COLUMNS, "headers") if include_headers else KAFKA_COLUMNS
    return tuple((name, True) for name in names)


def columns_of(fields: Sequence[tuple[str, str, bool]]) -> Columns:
    """Check a user schema, given as (name, simpleString type, nullable) triples."""
    result = []
    for name, kind, nullable in fields:
        expected = COLUMN_TYPES.get(name)
        if expected is None:
            raise ValueError(
                f"the schema names column {name!r}; kraftlite rows have {', '.join(COLUMN_TYPES)}"
            )
        if kind != expected:
            raise ValueError(f"column {name} must be {expected}, not {kind}")
        if not nullable and name in NULLABLE:
            raise ValueError(f"column {name} can be null: it cannot be declared NOT NULL")
        result.append((name, nullable))
    if not result:
        raise ValueError("the schema names no column")
    return tuple(result)


def arrow_schema(columns: Columns) -> pa.Schema:
    return pa.schema([pa.field(name, ARROW_TYPES[name], nullable) for name, nullable in columns])


def _offsets(lengths: memoryview, count: int) -> pa.Buffer:
    offsets = np.zeros(count + 1, dtype=np.int32)  # a batch is < 2 GiB: int32 offsets fit
    offsets[1:] = np.cumsum(np.frombuffer(lengths, "<u4"), dtype=np.int64)
    return pa.py_buffer(offsets)


def _binary(column: batch_format._Column, count: int, kind: pa.DataType) -> pa.Array:
    validity = None if column.validity is None else pa.py_buffer(column.validity)
    return pa.Array.from_buffers(
        kind, count, [validity, _offsets(column.lengths, count), pa.py_buffer(column.data)]
    )


def to_record_batch(
    data: memoryview,
    *,
    topic: str,
    partition: int,
    start: int,
    end: int,
    columns: Columns,
) -> pa.RecordBatch | None:
    """The records of one stored batch with offsets in [start, end), or None if none (a
    Kafka batch kept as sent is decoded, once its header says it holds some: protocol/
    stored.py)."""
    header = batch_format.read_header(data)
    if batch_format.is_control(header):
        return None  # a transaction's marker holds no record to read (Kafka's readers skip it)
    count = header.record_count
    low = max(start, header.base_offset) - header.base_offset
    high = min(end, header.base_offset + count) - header.base_offset
    if high <= low:
        return None
    cols = batch_format.columns(stored.columnar(data))
    builders: dict[str, Callable[[], Any]] = {
        "key": lambda: _binary(cols.keys, count, pa.binary()),
        "value": lambda: _binary(cols.values, count, pa.binary()),
        "topic": lambda: pa.array([topic] * count, pa.string()),
        "partition": lambda: pa.array(np.full(count, partition, dtype=np.int32)),
        "offset": lambda: pa.array(
            np.arange(header.base_offset, header.base_offset + count, dtype=np.int64)
        ),
        "timestamp": lambda: pa.Array.from_buffers(
            ARROW_TYPES["timestamp"],
            count,
            [None, pa.py_buffer(np.frombuffer(cols.timestamps, "<i8") * 1000)],
        ),
        "timestampType": lambda: pa.array(np.zeros(count, dtype=np.int32)),  # 0 = CreateTime
        "headers": lambda: _headers(cols, count),
    }
    arrays = [builders[name]() for name, _ in columns]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(columns)).slice(low, high - low)


def _headers(cols: batch_format.BatchColumns, count: int) -> pa.Array:
    """Null for a record without headers, as Kafka's source gives. A null header value is
    null: the values' validity bitmap (when the batch has one) is Arrow's as it is."""
    if cols.header_counts is None or cols.header_names is None or cols.header_values is None:
        return pa.nulls(count, HEADERS_TYPE)
    counts = np.frombuffer(cols.header_counts, "<u4")
    total = int(counts.sum())
    pairs = pa.StructArray.from_arrays(
        [
            _binary(cols.header_names, total, pa.string()),
            _binary(cols.header_values, total, pa.binary()),
        ],
        fields=list(HEADER_TYPE),
    )
    return pa.ListArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), count + 1, [None, _offsets(cols.header_counts, count)]),
        pairs,
        type=HEADERS_TYPE,
        mask=pa.array(counts == 0),
    )
