"""kraftlite batches as Arrow record batches, straight from the column buffers (no per-record
Python), in the row schema of Spark's Kafka source.

The Arrow schema is built here, not with pyspark's helpers (their signatures changed between
4.0 and 4.3): binary/string (not large_*), int32 for int, timestamp[us, UTC], and a list
child named "element", exactly what Spark's Python data source expects.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kraftlite.protocol import batch as batch_format

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
SPARK_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key:string,value:binary>>"


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


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
    include_headers: bool,
) -> pa.RecordBatch | None:
    """The records of one stored batch with offsets in [start, end), or None if none."""
    cols = batch_format.columns(data)
    header = cols.header
    count = header.record_count
    low = max(start, header.base_offset) - header.base_offset
    high = min(end, header.base_offset + count) - header.base_offset
    if high <= low:
        return None
    timestamps = pa.Array.from_buffers(
        pa.timestamp("us", tz="UTC"),
        count,
        [None, pa.py_buffer(np.frombuffer(cols.timestamps, "<i8") * 1000)],
    )
    arrays = [
        _binary(cols.keys, count, pa.binary()),
        _binary(cols.values, count, pa.binary()),
        pa.array([topic] * count, pa.string()),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(np.arange(header.base_offset, header.base_offset + count, dtype=np.int64)),
        timestamps,
        pa.array(np.zeros(count, dtype=np.int32)),  # 0 = CreateTime, as Kafka's source
    ]
    if include_headers:
        arrays.append(_headers(cols, count))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers)).slice(
        low, high - low
    )


def _headers(cols: batch_format.BatchColumns, count: int) -> pa.Array:
    if cols.header_counts is None or cols.header_names is None or cols.header_values is None:
        return pa.array([[] for _ in range(count)], HEADERS_TYPE)
    total = int(np.frombuffer(cols.header_counts, "<u4").sum())
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
    )
