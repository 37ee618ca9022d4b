"""A partition's transactions (broker/producer_state.py rules 7-10): which batches open and
end them, the last stable offset and the aborted-transaction list, against a model that
recomputes both from the whole history; and the state rebuilt from the log's headers
equals the state kept as the batches came."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.broker.producer_state import ProducerStates
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as fmt

NOW = 1_000_000


def data(pid: int, epoch: int, sequence: int, offset: int, count: int = 2, txn: bool = True):
    encoded = fmt.encode_batch(
        [b"v"] * count,
        timestamps=[1] * count,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        transactional=txn,
    )
    return fmt.read_header(fmt.stamp(encoded, offset, 0))


def marker(pid: int, epoch: int, offset: int, commit: bool, coordinator_epoch: int = 0):
    encoded = fmt.encode_marker(pid, epoch, commit, coordinator_epoch, 1)
    return fmt.read_header(fmt.stamp(encoded, offset, 0)), fmt.Marker(commit, coordinator_epoch)


def test_a_transaction_holds_the_last_stable_offset_until_its_marker_is_below_the_hw() -> None:
    states = ProducerStates()
    first = data(7, 0, 0, offset=10)
    assert states.check(first, NOW, states.begin_verification(7)) is None
    states.record(first, 10, NOW)
    other = data(8, 0, 0, offset=12, txn=False)  # another producer's plain records after it
    states.record(other, 12, NOW)
    assert states.last_stable_offset(high_watermark=14, log_start_offset=0) == 10
    header, commit = marker(7, 0, offset=14, commit=True)
    assert states.record_marker(header, commit, 14, NOW) is None
    assert states.last_stable_offset(high_watermark=14, log_start_offset=0) == 10
    assert states.last_stable_offset(high_watermark=15, log_start_offset=0) == 15
    assert states.aborted(0, 100) == []


def test_an_aborted_transaction_is_listed_with_the_stable_offset_it_ended_at() -> None:
    states = ProducerStates()
    for pid, offset in ((1, 0), (2, 2)):
        states.record(data(pid, 0, 0, offset), offset, NOW)
    header, abort = marker(1, 0, offset=4, commit=False)
    aborted = states.record_marker(header, abort, 4, NOW)
    assert aborted is not None
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset) == (1, 0, 4)
    assert aborted.last_stable_offset == 2  # producer 2's transaction is still open
    assert states.aborted(0, 5) == [aborted]
    assert states.aborted(5, 9) == []  # its marker is below the fetch
    assert states.aborted(0, 0) == []  # nothing read


def test_a_plain_batch_of_a_producer_inside_its_transaction_is_refused() -> None:
    states = ProducerStates()
    states.record(data(1, 0, 0, 0), 0, NOW)
    with pytest.raises(KraftliteError) as caught:
        states.check(data(1, 0, 2, 2, txn=False), NOW)
    assert caught.value.code is ErrorCode.INVALID_TXN_STATE


def test_a_fencing_marker_refuses_the_old_epoch_even_with_no_batches_left() -> None:
    """A coordinator's abort at epoch 1 fences epoch 0 [P11]: its next batch, even one at
    sequence 0, is INVALID_PRODUCER_EPOCH; the new epoch starts over at sequence 0."""
    states = ProducerStates()
    states.record(data(1, 0, 0, 0), 0, NOW)
    header, abort = marker(1, 1, offset=2, commit=False)
    states.check_marker(1, 1, 0)
    states.record_marker(header, abort, 2, NOW)
    for sequence in (0, 2):
        with pytest.raises(KraftliteError) as caught:
            states.check(data(1, 0, sequence, 3), NOW)
        assert caught.value.code is ErrorCode.INVALID_PRODUCER_EPOCH
    assert states.check(data(1, 2, 0, 3), NOW, states.begin_verification(1)) is None


def test_markers_from_an_older_epoch_or_coordinator_are_refused() -> None:
    states = ProducerStates()
    states.record(data(1, 3, 0, 0), 0, NOW)
    header, commit = marker(1, 3, offset=2, commit=True, coordinator_epoch=5)
    states.record_marker(header, commit, 2, NOW)
    with pytest.raises(KraftliteError) as caught:
        states.check_marker(1, 2, 5)
    assert caught.value.code is ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KraftliteError) as caught:
        states.check_marker(1, 3, 4)
    assert caught.value.code is ErrorCode.TRANSACTION_COORDINATOR_FENCED
    states.check_marker(1, 3, 5)
    states.check_marker(99, 0, 0)  # a producer never seen here: nothing to check


def test_sequences_go_on_across_transactions_of_one_epoch() -> None:
    """Kafka's first transaction protocol: a marker keeps the epoch and the sequence [P5]."""
    states = ProducerStates()
    states.record(data(1, 0, 0, 0), 0, NOW)
    header, commit = marker(1, 0, offset=2, commit=True)
    states.record_marker(header, commit, 2, NOW)
    duplicate = states.check(data(1, 0, 0, 3), NOW)  # the first transaction's, again
    assert duplicate is not None and duplicate.first_offset == 0
    assert states.check(data(1, 0, 2, 3), NOW, states.begin_verification(1)) is None


def test_an_open_transaction_keeps_its_producer_from_expiring() -> None:
    states = ProducerStates(expiration_ms=10)
    states.record(data(1, 0, 0, 0), 0, NOW)
    with pytest.raises(KraftliteError) as caught:  # still there: the batch is out of order
        states.check(data(1, 0, 5, 2), NOW + 1000)
    assert caught.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


# ------------------------------------------------------------------------- model check


@dataclass
class Model:
    """Every transaction as (producer, first offset, marker offset or None, committed)."""

    txns: list[list[object]] = field(default_factory=list)
    open: dict[int, list[object]] = field(default_factory=dict)

    def last_stable_offset(self, high_watermark: int) -> int:
        unstable = [
            t[1]
            for t in self.txns
            if t[2] is None or t[2] >= high_watermark  # type: ignore[operator]
        ]
        return min([high_watermark, *unstable])  # type: ignore[type-var]

    def aborted(self, fetch_offset: int, upper: int) -> set[tuple[int, int, int]]:
        return {
            (t[0], t[1], t[2])  # type: ignore[misc]
            for t in self.txns
            if t[2] is not None and t[3] is False and t[2] >= fetch_offset and t[1] < upper  # type: ignore[operator]
        }


steps = st.lists(
    st.tuples(
        st.sampled_from(["txn", "plain", "commit", "abort", "hw"]),
        st.integers(0, 3),  # producer
        st.integers(1, 3),  # records
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_last_stable_offset_and_aborted_list_match_the_model(
    script: list[tuple[str, int, int]],
) -> None:
    states, model = ProducerStates(), Model()
    headers: list[fmt.BatchHeader] = []
    markers: dict[int, fmt.Marker] = {}
    sequences = dict.fromkeys(range(4), 0)
    end = high_watermark = 0
    for kind, pid, count in script:
        if kind == "hw":
            high_watermark = end
        elif kind in ("commit", "abort"):
            header, found = marker(pid, 0, end, kind == "commit")
            states.check_marker(pid, 0, 0)
            states.record_marker(header, found, end, NOW)
            headers.append(header)
            markers[end] = found
            txn = model.open.pop(pid, None)
            if txn is not None:
                txn[2], txn[3] = end, kind == "commit"
            end += 1
        else:
            transactional = kind == "txn"
            header = data(pid, 0, sequences[pid], end, count, txn=transactional)
            try:
                states.check(header, NOW, states.begin_verification(pid))
            except KraftliteError as exc:  # a plain batch inside its own transaction
                assert exc.code is ErrorCode.INVALID_TXN_STATE
                assert not transactional and pid in model.open
                continue
            assert transactional or pid not in model.open
            states.record(header, end, NOW)
            headers.append(header)
            if transactional and pid not in model.open:
                model.open[pid] = [pid, end, None, None]
                model.txns.append(model.open[pid])
            sequences[pid] += count
            end += count
        assert states.last_stable_offset(high_watermark, 0) == model.last_stable_offset(
            high_watermark
        )
    rebuilt = ProducerStates.rebuild(
        headers, NOW, marker_at=markers.__getitem__, high_watermark=high_watermark
    )
    for fetch_offset in range(0, end + 1, 2):
        for upper in range(fetch_offset, end + 2, 3):
            want = model.aborted(fetch_offset, upper)
            for found in (states, rebuilt):
                got = found.aborted(fetch_offset, upper)
                assert {(t.producer_id, t.first_offset, t.last_offset) for t in got} == want
    for found in (states, rebuilt):
        assert found.last_stable_offset(high_watermark, 0) == model.last_stable_offset(
            high_watermark
        )
        assert found.last_stable_offset(end, 0) == model.last_stable_offset(end)


def test_a_first_transactional_batch_needs_the_producers_latest_verification() -> None:
    """Rule 11 [P9]: without a token, with another's, or with one a marker dropped (the
    coordinator ended the transaction after the leader asked), the batch is refused, and
    retriably (the leader asks the coordinator again); concurrent first batches share the
    token; with a transaction open here, none is needed."""
    states = ProducerStates()
    batch = data(1, 0, 0, 0)
    for token in (None, object()):
        with pytest.raises(KraftliteError) as caught:
            states.check(batch, NOW, token)
        assert caught.value.code is ErrorCode.NOT_ENOUGH_REPLICAS
    first = states.begin_verification(1)
    assert states.begin_verification(1) is first  # shared, as Kafka's guard
    header, abort = marker(1, 0, offset=0, commit=False)
    states.record_marker(header, abort, 0, NOW)  # the marker lands between ask and append
    with pytest.raises(KraftliteError) as caught:
        states.check(data(1, 0, 0, 1), NOW, first)
    assert caught.value.code is ErrorCode.NOT_ENOUGH_REPLICAS
    token = states.begin_verification(1)
    assert token is not first
    assert states.check(data(1, 0, 0, 1), NOW, token) is None
    states.record(data(1, 0, 0, 1), 1, NOW)
    assert states.check(data(1, 0, 2, 3), NOW) is None  # open here: no token needed
    with pytest.raises(KraftliteError) as caught:  # a newer epoch inside the transaction
        states.check(data(1, 1, 0, 5), NOW)
    assert caught.value.code is ErrorCode.INVALID_TXN_STATE


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(1, 2000))
def test_the_key_index_bounds_agree_with_the_whole_logs_transactions(
    script: list[tuple[str, int, int]], window: int
) -> None:
    """txn_headers.index_bounds, which reads only as far as a window's transactions need:
    up to its limit, the same decided and aborted batches as the whole log's headers say."""
    from kraftlite.storage.txn_headers import index_bounds, transactions  # noqa: PLC0415

    headers: list[fmt.BatchHeader] = []
    sequences = dict.fromkeys(range(4), 0)
    open_pids: set[int] = set()
    end = 0
    for kind, pid, count in script:
        if kind in ("commit", "abort"):
            headers.append(marker(pid, 0, end, kind == "commit")[0])
            open_pids.discard(pid)
            end += 1
        elif kind == "txn" or pid not in open_pids:
            headers.append(data(pid, 0, sequences[pid], end, count, txn=kind == "txn"))
            if kind == "txn":
                open_pids.add(pid)
            sequences[pid] += count
            end += count
    whole = transactions(headers)
    whole_limit = end if whole.first_unstable is None else whole.first_unstable
    limit, aborted = index_bounds(iter(headers), end, window)
    assert limit <= whole_limit
    below = {h.base_offset for h in headers if h.next_offset <= limit}
    assert aborted & below == whole.aborted & below
    assert not whole.undecided & below  # nothing undecided is ever indexed
    if window >= sum(h.batch_length for h in headers):
        assert limit == whole_limit
