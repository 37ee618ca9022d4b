"""When a cleaner pass is due (storage/compaction.py rule 6) and where the cleanable range
ends (rule 1), from batch headers alone."""

from __future__ import annotations

from kraftlite.protocol import batch as fmt
from kraftlite.protocol import stored
from kraftlite.protocol.kafka import records
from kraftlite.storage.compaction import CleanPolicy, cleanable_end, dirty_ratio, due, rewrite


def header(base: int, count: int, ts: int, size: int = 10) -> fmt.BatchHeader:
    """A stored batch's header: `count` records from `base`, stamped `ts`, of about
    `size` bytes of values each."""
    encoded = fmt.encode_batch(
        [b"v" * size] * count,
        keys=[b"k%d" % i for i in range(count)],
        timestamps=[ts] * count,
        base_offset=base,
        leader_epoch=0,
    )
    return fmt.read_header(encoded)


LOG = [header(0, 10, 1000), header(10, 10, 2000), header(20, 10, 3000), header(30, 1, 4000)]


def test_the_cleanable_range_ends_before_the_high_watermarks_batch_and_the_newest() -> None:
    policy = CleanPolicy()
    assert cleanable_end(LOG, 0, 31, 31, 10_000, policy) == 30  # not the newest
    assert cleanable_end(LOG, 0, 30, 31, 10_000, policy) == 20  # nor the one ending at the HW
    assert cleanable_end(LOG, 0, 25, 31, 10_000, policy) == 20  # nor one past it
    assert cleanable_end(LOG, 0, 10, 31, 10_000, policy) == 0  # nothing
    assert cleanable_end([], 7, 7, 7, 10_000, policy) == 7
    young = CleanPolicy(min_compaction_lag_ms=8_500)  # 10,000 - 2,000 = 8,000 < 8,500
    assert cleanable_end(LOG, 0, 31, 31, 10_000, young) == 10


def test_a_pass_is_due_by_the_dirty_ratio_or_the_oldest_dirty_records_age() -> None:
    size = sum(h.batch_length for h in LOG[:3])
    assert dirty_ratio(LOG, 0, 30) == 1.0
    assert dirty_ratio(LOG, 20, 30) == LOG[2].batch_length / size
    assert dirty_ratio(LOG, 30, 30) == 0.0
    assert dirty_ratio([], 0, 0) == 0.0
    policy = CleanPolicy()  # ratio 0.5, no maximum lag
    assert due(LOG, 0, 30, 10_000, policy)
    assert due(LOG, 10, 30, 10_000, policy)  # two thirds dirty
    assert not due(LOG, 20, 30, 10_000, policy)  # one third
    assert not due(LOG, 30, 30, 10_000, policy)  # nothing dirty: never
    lagging = CleanPolicy(max_compaction_lag_ms=6_000)
    assert due(LOG, 20, 30, 10_000, lagging)  # its oldest dirty record is 7,000 ms old
    assert not due(LOG, 20, 30, 8_999, lagging)
    assert not due(LOG, 30, 30, 10_000, lagging)


def test_kept_runs_keep_offsets_and_an_idempotent_producers_sequences() -> None:
    """batch.kept_runs: each run of kept records keeps their offsets, and a producer's
    batch's runs carry the sequence of their first record (wrapping at 2^31, as Kafka's)."""
    encoded = fmt.encode_batch(
        [b"a", b"b", None, b"d", b"e"],
        keys=[b"1", b"2", b"3", b"4", b"5"],
        timestamps=[1, 2, 3, 4, 5],
        base_offset=100,
        leader_epoch=3,
        producer_id=9,
        producer_epoch=2,
        base_sequence=2**31 - 2,
    )
    runs = fmt.kept_runs(fmt.decode(encoded), [True, False, True, True, False])
    headers = [fmt.validate(run) for run in runs]
    assert [(h.base_offset, h.record_count, h.base_sequence) for h in headers] == [
        (100, 1, 2**31 - 2),
        (102, 2, 0),  # 2^31 - 2 + 2, wrapped
    ]
    assert {(h.leader_epoch, h.producer_id, h.producer_epoch) for h in headers} == {(3, 9, 2)}
    assert [(r.offset, r.key, r.value) for run in runs for r in fmt.decode(run).records()] == [
        (100, b"1", b"a"),
        (102, b"3", None),
        (103, b"4", b"d"),
    ]
    assert fmt.kept_runs(fmt.decode(encoded), [False] * 5) == []
    assert fmt.kept_runs(fmt.decode(encoded), [True] * 5) == [encoded]  # byte for byte


def test_a_kept_kafka_batchs_runs_stay_compressed_each_on_its_own() -> None:
    """compaction.rewrite: a compressed (format 3) batch is rewritten as format 3 runs, each
    compressed alone: one run of half its records is smaller than it was; with every other
    key superseded (one run per record) each run holds its record compressed and its
    headers, never the batch's decompressed bytes (the review's bomb: 1 KB stored became 33
    MB of columnar runs)."""
    policy = CleanPolicy(
        min_cleanable_dirty_ratio=0.5, max_compaction_lag_ms=0, delete_retention_ms=0
    )
    sent = records.encode_batch(
        [records.KafkaRecord(i, 1_000, b"k%d" % i, b"value %d " % i * 20) for i in range(200)],
        compression=records.Compression.ZSTD,
    )
    kept = stored.kafka_form(sent, records.decode_batches(sent)[0], None)
    assert kept is not None
    view = memoryview(bytes(fmt.stamp(kept, 0, 0)))
    batch = stored.decode(view)
    every_other = {b"k%d" % i: i + (1_000 if i % 2 else 0) for i in range(200)}
    split = rewrite(batch, every_other, 2_000, policy, view)
    assert split is not None and len(split.runs) == 100
    assert {fmt.read_header(run).magic for run in split.runs} == {fmt.MAGIC_KAFKA}
    assert max(map(len, split.runs)) < 64 + 61 + 200  # headers and one small record
    first_half = {b"k%d" % i: i + (1_000 if i >= 100 else 0) for i in range(200)}
    change = rewrite(batch, first_half, 2_000, policy, view)
    assert change is not None and sum(map(len, change.runs)) < len(view)
    assert [fmt.read_header(run).magic for run in change.runs] == [fmt.MAGIC_KAFKA]
