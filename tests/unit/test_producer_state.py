"""Idempotent producers' sequence checks (broker/producer_state.py), on hand-made headers."""

from __future__ import annotations

import pytest

from kraftlite.broker.producer_state import ProducerStates
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format

NOW = 1_000_000


def header(
    pid: int, epoch: int, sequence: int, count: int = 2, base_offset: int = 0
) -> batch_format.BatchHeader:
    encoded = batch_format.encode_batch(
        [b"v"] * count,
        timestamps=[1] * count,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    return batch_format.read_header(batch_format.stamp(encoded, base_offset, 0))


def append(states: ProducerStates, pid: int, epoch: int, sequence: int, offset: int) -> None:
    h = header(pid, epoch, sequence, base_offset=offset)
    assert states.check(h, NOW) is None
    states.record(h, offset, NOW)


def refused(states: ProducerStates, h: batch_format.BatchHeader) -> ErrorCode:
    with pytest.raises(KraftliteError) as caught:
        states.check(h, NOW)
    return caught.value.code


def test_the_next_batch_is_appended_and_a_retry_of_a_recent_one_is_its_first_append() -> None:
    states = ProducerStates()
    append(states, 7, 0, 0, 100)
    append(states, 7, 0, 2, 102)
    earlier = states.check(header(7, 0, 0), NOW)
    assert earlier is not None and (earlier.first_offset, earlier.last_offset) == (100, 101)
    assert states.check(header(7, 0, 4), NOW) is None


def test_gaps_old_sequences_old_epochs_and_unknown_producers_are_refused() -> None:
    states = ProducerStates()
    append(states, 7, 0, 0, 0)
    assert refused(states, header(7, 0, 5)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert refused(states, header(7, 0, 1, count=1)) is ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    append(states, 7, 1, 0, 10)  # a new epoch starts over
    assert refused(states, header(7, 0, 2)) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert refused(states, header(7, 2, 3)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert refused(states, header(8, 0, 3)) is ErrorCode.UNKNOWN_PRODUCER_ID


def test_only_the_last_five_batches_are_remembered_and_sequences_wrap() -> None:
    states = ProducerStates()
    for n in range(6):
        append(states, 1, 0, 2 * n, 2 * n)
    assert refused(states, header(1, 0, 0)) is ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    assert states.check(header(1, 0, 2), NOW) is not None
    wrapping = ProducerStates()
    append(wrapping, 2, 0, 0, 0)
    wrapping.entries[2].batches[-1] = (
        wrapping.entries[2].batches[-1]._replace(last_sequence=2**31 - 1)
    )
    assert wrapping.check(header(2, 0, 0), NOW) is None  # 2**31 - 1 is followed by 0


def test_rebuilt_from_the_log_the_state_is_the_same() -> None:
    headers = [
        header(7, 0, 0, base_offset=0),
        header(9, 3, 0, base_offset=2),
        header(7, 0, 2, base_offset=4),
    ]
    unrelated = batch_format.read_header(batch_format.encode_batch([b"x"], timestamps=[1]))
    states = ProducerStates.rebuild([*headers, unrelated], NOW)
    assert sorted(states.entries) == [7, 9]
    earlier = states.check(header(7, 0, 2), NOW)
    assert earlier is not None and earlier.first_offset == 4
    assert states.check(header(9, 3, 2), NOW) is None


def test_a_silent_producer_is_forgotten_after_the_expiration() -> None:
    states = ProducerStates(expiration_ms=1000)
    append(states, 7, 0, 0, 0)
    assert states.check(header(7, 0, 2), NOW + 500) is None  # still known
    with pytest.raises(KraftliteError) as caught:
        states.check(header(7, 0, 2), NOW + 2000)
    assert caught.value.code is ErrorCode.UNKNOWN_PRODUCER_ID
