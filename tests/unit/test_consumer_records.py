"""The consumer's records from a fetch answer (kraftlite/client/consumer.py `_records`):
every field of every record from the position on, across batches, nulls and headers kept;
Kafka batches kept as sent decoded too, no more of them than `max_bytes` takes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kraftlite.client.consumer import ConsumerRecord, _records
from kraftlite.protocol import batch as fmt
from kraftlite.protocol import stored
from kraftlite.protocol.kafka import records as kafka_records

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
    assert _records(("t", 3), stream, position, 1 << 20) == (expected[position:], None)


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
    [record], _ = _records(("t", 0), stored, 8, 1 << 20)
    assert record.headers == (("a", b"x"), ("n", None), ("e", b""))


def _kept_zstd(base: int, values: list[bytes]) -> bytes:
    sent = kafka_records.encode_batch(
        [kafka_records.KafkaRecord(i, 5, b"k", v, []) for i, v in enumerate(values)],
        compression=kafka_records.Compression.ZSTD,
    )
    kept = stored.kafka_form(sent, kafka_records.decode_batches(sent)[0], None)
    assert kept is not None
    return bytes(fmt.stamp(kept, base, 1))


def test_kept_kafka_batches_are_decoded_no_further_than_max_bytes() -> None:
    """A review finding: a 1 MiB fetch of zstd batches of zeros held gigabytes of records,
    all decoded at once. Decoding stops past max_bytes (one batch at least), and says the
    offset the next fetch goes on from."""
    big = [bytes(300_000)] * 4  # 1.2 MB of records in a batch of a few hundred bytes
    stream = _kept_zstd(0, big) + _kept_zstd(4, big) + _kept_zstd(8, [b"small"])
    assert len(stream) < 4_000
    got, cut = _records(("t", 0), stream, 1, 1 << 20)
    assert [r.offset for r in got] == [1, 2, 3] and cut == 4
    assert all(r.value == bytes(300_000) and r.key == b"k" for r in got)
    got, cut = _records(("t", 0), stream, 4, 10 << 20)  # room for all: nothing cut
    assert [r.offset for r in got] == [4, 5, 6, 7, 8] and cut is None
    assert got[-1].value == b"small" and got[-1].timestamp == 5
