"""The fault checker catches each violation on hand-made histories (and passes clean ones):
a checker that cannot fail proves nothing.
"""

from __future__ import annotations

from tests.harness.checker import (
    StoredRecord,
    TxnOutput,
    Violation,
    committed_offsets_monotone,
    consumed_as_compacted,
    consumed_as_logged,
    dense_offsets,
    group_offsets_monotone,
    isr_logs_agree,
    isr_tables_agree,
    latest_kept,
    lost_acknowledged,
    one_writer_per_epoch,
    ordered_offsets,
    outputs_exactly_once,
    reads_not_stale,
    refused_not_appended,
    transactions_seen_whole,
    written_once,
)


def log(*entries: tuple[int, int, bytes]) -> list[StoredRecord]:
    return [StoredRecord(offset, epoch, value) for offset, epoch, value in entries]


GOOD = log((0, 1, b"a"), (1, 1, b"b"), (2, 2, b"c"))


def test_lost_acknowledged_finds_missing_and_changed_records() -> None:
    readable = [(0, b"a"), (1, b"b"), (2, b"c")]
    assert lost_acknowledged({0: b"a", 2: b"c"}, readable) == []
    assert lost_acknowledged({0: b"a", 3: b"d"}, readable) == [
        Violation("lost", "offset 3 acknowledged, not readable")
    ]
    assert lost_acknowledged({1: b"x"}, readable) == [
        Violation("lost", "offset 1 acknowledged b'x', reads b'b'")
    ]


def test_refused_not_appended_finds_a_refused_record_in_the_log() -> None:
    readable = [(0, b"a"), (1, b"b")]
    assert refused_not_appended([b"x"], readable) == []
    assert refused_not_appended([b"b", b"x"], readable) == [
        Violation("refused-appended", "b'b' was refused, yet is at offset 1")
    ]


def test_dense_offsets_finds_gaps_reordering_and_a_wrong_start() -> None:
    assert dense_offsets([0, 1, 2]) == []
    assert dense_offsets([5, 6], log_start_offset=5) == []
    assert dense_offsets([0, 2, 3]) == [Violation("dense", "position 1: offset 2, expected 1")]
    assert dense_offsets([0, 2, 1]) != []
    assert dense_offsets([1, 2]) != []
    assert dense_offsets([0, 1, 1]) != []


def test_isr_logs_agree_below_the_high_watermark_only() -> None:
    diverged_above_hw = log((0, 1, b"a"), (1, 1, b"b"), (2, 1, b"zzz"))
    assert isr_logs_agree({1: GOOD, 2: diverged_above_hw}, [1, 2], high_watermark=2) == []
    # A follower outside the ISR may lag or diverge.
    assert isr_logs_agree({1: GOOD, 3: log((0, 1, b"a"))}, [1], high_watermark=3) == []


def test_isr_logs_agree_finds_a_different_record_a_missing_one_and_a_missing_log() -> None:
    changed = log((0, 1, b"a"), (1, 1, b"B"), (2, 2, b"c"))
    assert isr_logs_agree({1: GOOD, 2: changed}, [1, 2], high_watermark=3) == [
        Violation(
            "isr-agree",
            "offset 1: broker 1 has StoredRecord(offset=1, leader_epoch=1, value=b'b'), "
            "broker 2 has StoredRecord(offset=1, leader_epoch=1, value=b'B')",
        )
    ]
    short = log((0, 1, b"a"), (1, 1, b"b"))
    assert isr_logs_agree({1: GOOD, 2: short}, [1, 2], high_watermark=3) == [
        Violation("isr-agree", "broker 2 lacks offset 2")
    ]
    assert isr_logs_agree({1: GOOD}, [1, 2], high_watermark=3) == [
        Violation("isr-agree", "no log for ISR members [2]")
    ]


def test_isr_logs_agree_compares_from_the_highest_log_start() -> None:
    retained = log((2, 2, b"c"))  # offsets 0-1 deleted by retention on this replica
    starts = {1: 0, 2: 2}
    assert isr_logs_agree({1: GOOD, 2: retained}, [1, 2], 3, log_starts=starts) == []


def test_without_retention_a_member_missing_a_prefix_or_everything_is_found() -> None:
    no_prefix = log((2, 2, b"c"))
    assert isr_logs_agree({1: GOOD, 2: no_prefix}, [1, 2], high_watermark=3) == [
        Violation("isr-agree", "broker 2 lacks offset 0")
    ]
    assert isr_logs_agree({1: GOOD, 2: []}, [1, 2], high_watermark=3) == [
        Violation("isr-agree", "broker 2 lacks offset 0")
    ]


def test_one_writer_per_epoch_finds_two_writers_in_one_epoch() -> None:
    # Brokers 1 and 2 both wrote offset 1 in epoch 1: a split brain.
    split = log((0, 1, b"a"), (1, 1, b"other"))
    assert one_writer_per_epoch({1: GOOD, 2: split}) == [
        Violation("one-writer", "epoch 1 offset 1: broker 1 has b'b', broker 2 has b'other'")
    ]
    # A diverged suffix from an older epoch, overwritten in a newer one, is not a violation.
    old_suffix = log((0, 1, b"a"), (1, 1, b"b"), (2, 1, b"unreplicated"))
    assert one_writer_per_epoch({1: GOOD, 2: old_suffix}) == []


def test_one_writer_per_epoch_finds_a_broken_lineage() -> None:
    assert one_writer_per_epoch({1: log((0, 2, b"a"), (1, 1, b"b"))}) == [
        Violation("lineage", "broker 1: epoch 1 at offset 1 after epoch 2")
    ]
    assert one_writer_per_epoch({1: log((0, 1, b"a"), (0, 1, b"a"))}) == [
        Violation("lineage", "broker 1: offset 0 repeats")
    ]


def test_group_offsets_monotone_finds_a_step_back() -> None:
    key = ("g", "t", 0)
    assert group_offsets_monotone([(key, 1), (key, 5), (key, 5), (("g", "t", 1), 0)]) == []
    assert group_offsets_monotone([(key, 5), (key, 3)]) == [
        Violation("group-offsets", "('g', 't', 0): 5 then 3")
    ]


KEY = ("g", "t", 0)


def test_committed_offsets_monotone_in_real_time_across_observers() -> None:
    # overlapping reads may see either value; a read begun after another ended may not go back
    assert committed_offsets_monotone([(0.0, 2.0, KEY, 50), (1.0, 3.0, KEY, 40)]) == []
    assert committed_offsets_monotone([(0.0, 1.0, KEY, 50), (1.5, 2.0, KEY, 40)]) == [
        Violation("group-offsets", "('g', 't', 0): 50 read by t=1.000, then 40 read from t=1.500")
    ]
    other = ("g", "t", 1)
    assert committed_offsets_monotone([(0.0, 1.0, KEY, 50), (1.5, 2.0, other, 40)]) == []
    assert committed_offsets_monotone([(0.0, 1.0, KEY, 50), (1.5, 2.0, KEY, 50)]) == []


def test_consumed_as_logged_finds_a_record_the_log_does_not_hold() -> None:
    readable = [(0, b"a"), (1, b"b")]
    assert consumed_as_logged([(0, b"a"), (1, b"b"), (0, b"a")], readable) == []
    assert consumed_as_logged([(1, b"x"), (2, b"c")], readable) == [
        Violation("consumed", "offset 1: consumed b'x', log has b'b'"),
        Violation("consumed", "offset 2: consumed b'c', log has None"),
    ]


def test_reads_not_stale_finds_a_read_behind_an_earlier_acknowledgement() -> None:
    acks = [(1.0, 9), (2.0, 19)]
    assert reads_not_stale([(0.5, 3.0, 5), (1.5, 1.6, 10), (2.5, 2.6, 20)], acks) == []
    assert reads_not_stale([(2.5, 2.6, 15)], acks) == [
        Violation("stale-read", "HW 15 read at t=2.500-2.600, after offset 19 was acknowledged")
    ]


def test_written_once_finds_a_duplicate_a_loss_and_a_reordering() -> None:
    sent = [b"a", b"b", b"c"]
    assert written_once(sent, [(0, b"a"), (1, b"b"), (2, b"c")]) == []
    assert written_once(sent, [(0, b"a"), (1, b"x"), (2, b"b"), (3, b"c")]) == []
    duplicated = written_once(sent, [(0, b"a"), (1, b"b"), (2, b"b"), (3, b"c")])
    assert [v.invariant for v in duplicated] == ["written-once"]
    lost = written_once(sent, [(0, b"a"), (1, b"c")])
    assert [v.invariant for v in lost] == ["written-once"]
    reordered = written_once(sent, [(0, b"b"), (1, b"a"), (2, b"c")])
    assert [v.detail for v in reordered] == ["the log does not keep the order they were sent in"]


# -- compacted topics (issue 26): a value's key is its first letter ------------------------------


def first_letter(value: bytes) -> bytes:
    return value[:1]


def test_latest_kept_lets_only_a_later_record_of_a_key_replace_an_acknowledged_one() -> None:
    acked = {0: b"a1", 1: b"b1", 2: b"a2"}
    # a1 cleaned (a2 is later); an unacknowledged b2 at 3 took b1's place: all fine
    assert latest_kept(acked, [(2, b"a2"), (3, b"b2")], first_letter) == []
    assert latest_kept(acked, [(0, b"a1"), (1, b"b1"), (2, b"a2")], first_letter) == []
    assert latest_kept(acked, [(1, b"b1"), (2, b"a1")], first_letter) == [
        Violation("lost", "offset 2 acknowledged b'a2', reads b'a1'")
    ]
    assert latest_kept(acked, [(0, b"a1"), (1, b"b1")], first_letter) == [
        Violation("lost", "key b'a': acknowledged at 2, the newest readable is 0")
    ]
    assert latest_kept(acked, [(2, b"a2")], first_letter) == [
        Violation("lost", "key b'b': acknowledged at 1, the newest readable is None")
    ]


def test_ordered_offsets_takes_gaps_and_finds_disorder() -> None:
    assert ordered_offsets([3, 4, 9, 12], 3) == []
    assert ordered_offsets([], 5) == []
    assert ordered_offsets([3, 9, 9], 3) == [Violation("ordered", "position 2: offset 9 after 9")]
    assert ordered_offsets([2, 9], 3) == [Violation("ordered", "position 0: offset 2 after 2")]


def test_isr_tables_agree_takes_replicas_cleaned_apart_and_finds_a_divergence() -> None:
    full = log((0, 1, b"a1"), (1, 1, b"b1"), (2, 1, b"a2"), (3, 2, b"b2"))
    cleaned = log((2, 1, b"a2"), (3, 2, b"b2"))
    assert isr_tables_agree({1: full, 2: cleaned}, [1, 2], 4, first_letter) == []
    assert isr_tables_agree({1: full, 2: cleaned[:1]}, [1, 2], 4, first_letter) == [
        Violation("isr-agree", "brokers 1 and 2 differ on the latest record of keys [b'b']")
    ]
    other = log((2, 1, b"a2"), (3, 3, b"b2"))  # another epoch at an offset both hold
    assert isr_tables_agree({1: full, 2: other}, [1, 2], 4, first_letter)[0].invariant == (
        "isr-agree"
    )
    # above the high watermark they may differ (b1 is b's latest below it: kept)
    behind = log((1, 1, b"b1"), (2, 1, b"a2"))
    assert isr_tables_agree({1: full, 2: behind}, [1, 2], 3, first_letter) == []
    assert isr_tables_agree({1: full}, [1, 2], 4, first_letter) == [
        Violation("isr-agree", "no log for ISR members [2]")
    ]


def test_consumed_as_compacted_takes_cleaned_records_and_finds_the_rest() -> None:
    final = [(2, b"a2"), (3, b"b2")]
    assert consumed_as_compacted([(0, b"a1"), (2, b"a2"), (3, b"b2")], final, first_letter) == []
    assert consumed_as_compacted([(2, b"a2")], final, first_letter) == [
        Violation("consumed", "no one consumed the latest record at [3]")
    ]
    assert consumed_as_compacted(
        [(2, b"a2"), (3, b"b2"), (4, b"a9"), (3, b"bX")], final, first_letter
    ) == [
        Violation("consumed", "offset 3: consumed b'bX', log has b'b2'"),
        Violation("consumed", "offset 4: consumed b'a9', log has None"),
    ]


def test_transactions_seen_whole_finds_aborted_partial_and_missing_transactions() -> None:
    def out(source: str, transaction: str, size: int) -> TxnOutput:
        return TxnOutput(source, transaction, size)

    whole = [out("1", "t1", 2), out("2", "t1", 2), out("3", "t3", 1)]
    assert transactions_seen_whole(whole, committed={"t1"}, aborted={"t2"}) == []
    found = transactions_seen_whole(
        [*whole, out("4", "t2", 1), out("5", "t4", 3)], committed={"t1", "t5"}, aborted={"t2"}
    )
    assert [v.invariant for v in found] == ["aborted", "whole", "committed"]
    assert "t4 (1 of [3])" in found[1].detail and "t5" in found[2].detail


def test_outputs_exactly_once_finds_duplicates_gaps_and_strangers() -> None:
    seen = [TxnOutput("1", "t1", 2), TxnOutput("2", "t1", 2)]
    assert outputs_exactly_once(["1", "2"], seen) == []
    found = outputs_exactly_once(["1", "2", "3"], [*seen, seen[0], TxnOutput("9", "t9", 1)])
    assert [v.invariant for v in found] == ["once"] * 3
    assert "['1']" in found[0].detail and "['3']" in found[1].detail and "9" in found[2].detail
