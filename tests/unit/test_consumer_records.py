"""The consumer's records from a fetch answer (kraftlite/client/consumer.py `_records`):
every field of every record from the position on, across batches, nulls and headers kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kraftlite.client.consumer import ConsumerRecord, _records
from kraftlite.protocol import batch as fmt

values = st.one_of(st.none(), st.binary(max_size=20))
records = st.builds(
    fmt.Record,
    value=values,
    key=values,
    headers=st.lists(st.tuples(st.text(max_size=5), values), max_size=2).map(tuple),  # null too
    timestamp=st.integers(min_value=0, max_value=2**40),
)


@given(st.lists(st.lists(records, min_size=1, max_size=5), min_size=1, max_size=4), st.data())
def test_records_from_a_position_are_exactly_the_stored_ones(batches, data) -> None:
    stream, expected, base = b"", [], 0
    for batch in batches:
        stream += bytes(fmt.stamp(fmt.encode_records(batch, now_ms=0), base, 1))
        expected += [
            ConsumerRecord("t", 3, base + i, r.timestamp, r.key, r.value, r.headers)
            for i, r in enumerate(batch)
        ]
        base += len(batch)
    position = data.draw(st.integers(min_value=0, max_value=base))
    assert _records("t", 3, stream, position) == expected[position:]


def test_a_null_header_value_reaches_the_consumer_as_none() -> None:
    stored = bytes(
        fmt.stamp(
            fmt.encode_records(
                [fmt.Record(b"v", headers=(("a", b"x"), ("n", None), ("e", b"")), timestamp=4)],
                now_ms=0,
            ),
            8,
            1,
        )
    )
    [record] = _records("t", 0, stored, 8)
    assert record.headers == (("a", b"x"), ("n", None), ("e", b""))
