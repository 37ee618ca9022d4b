"""The transaction coordinator's decisions (kraftlite/transactions/metadata.py) against
Kafka's rules as docs/design/kafka-transactions.md gives them: each request in each state,
zombie fencing, KIP-360 recovery, epoch exhaustion, timeouts and expiry, and a property
test that no sequence of requests breaks the state machine's invariants."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.errors import ErrorCode
from kraftlite.transactions import metadata as txn
from kraftlite.transactions.metadata import (
    Answered,
    Refused,
    TopicPartition,
    TxnMetadata,
    TxnState,
    Write,
)

S = TxnState
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
OFFSETS = TopicPartition("__consumer_offsets", 3)


def ids(start: int = 1000) -> itertools.count[int]:
    return itertools.count(start)


def written(decision: txn.Decision) -> TxnMetadata:
    assert isinstance(decision, Write), decision
    return decision.metadata


def begin(now: int = 0) -> TxnMetadata:
    """A new id's first InitProducerId: producer 1000, epoch 0, Empty."""
    return written(txn.init_producer_id(None, "app", 60_000, None, now, ids().__next__))


def test_a_commit_and_an_abort_go_through_every_state() -> None:
    meta = begin()
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (1000, 0, S.EMPTY)
    meta = written(txn.add_partitions(meta, 1000, 0, [T0], now_ms=5))
    assert (meta.state, meta.partitions, meta.start_ms) == (S.ONGOING, {T0}, 5)
    meta = written(txn.add_partitions(meta, 1000, 0, [T1, OFFSETS], now_ms=9))
    assert meta.partitions == {T0, T1, OFFSETS} and meta.start_ms == 5  # still the same one
    assert txn.add_partitions(meta, 1000, 0, [T0], now_ms=10) == Answered(1000, 0)
    decision = txn.end_txn(meta, 1000, 0, commit=True, now_ms=11)
    assert isinstance(decision, Write) and decision.markers and decision.answer is None
    meta = decision.metadata
    assert meta.state is S.PREPARE_COMMIT and meta.partitions == {T0, T1, OFFSETS}
    meta = txn.completed(meta, now_ms=12)
    assert (meta.state, meta.partitions, meta.producer_epoch) == (S.COMPLETE_COMMIT, set(), 0)
    meta = written(txn.add_partitions(meta, 1000, 0, [T1], now_ms=20))  # the next one
    assert (meta.state, meta.start_ms) == (S.ONGOING, 20)
    meta = txn.completed(written(txn.end_txn(meta, 1000, 0, commit=False, now_ms=21)), 22)
    assert meta.state is S.COMPLETE_ABORT and meta.producer_epoch == 0  # one epoch a session


def test_a_new_instance_fences_the_zombie_by_aborting_its_transaction() -> None:
    zombie = written(txn.add_partitions(begin(), 1000, 0, [T0], now_ms=1))
    decision = txn.init_producer_id(zombie, "app", 60_000, None, 2, ids(2000).__next__)
    assert isinstance(decision, Write) and decision.markers
    assert decision.answer is ErrorCode.CONCURRENT_TRANSACTIONS  # the new instance retries
    aborting = decision.metadata
    assert (aborting.state, aborting.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert aborting.partitions == {T0}  # the markers go where the zombie wrote
    # the zombie is refused from now on, by the coordinator as by the partitions' markers
    assert txn.end_txn(aborting, 1000, 0, True, 3) == Refused(ErrorCode.PRODUCER_FENCED)
    assert txn.add_partitions(aborting, 1000, 0, [T1], 3) == Refused(ErrorCode.PRODUCER_FENCED)
    retried = txn.init_producer_id(aborting, "app", 60_000, None, 3, ids(2000).__next__)
    assert retried == Refused(ErrorCode.CONCURRENT_TRANSACTIONS)  # until the abort completes
    done = txn.completed(aborting, 4)
    new = written(txn.init_producer_id(done, "app", 60_000, None, 5, ids(2000).__next__))
    assert (new.producer_id, new.producer_epoch, new.state) == (1000, 2, S.EMPTY)


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_nothing_starts_while_a_transaction_is_being_ended(state: TxnState) -> None:
    meta = TxnMetadata("app", 1000, 3, 60_000, state, frozenset({T0}), 0, 0)
    busy = Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
    assert txn.init_producer_id(meta, "app", 60_000, None, 1, ids().__next__) == busy
    assert txn.add_partitions(meta, 1000, 3, [T1], 1) == busy


def test_kip_360_a_producer_recovers_its_id_and_a_retried_bump_is_not_repeated() -> None:
    meta = txn.completed(
        written(txn.end_txn(written(txn.add_partitions(begin(), 1000, 0, [T0], 1)),
                            1000, 0, False, 2)), 3)  # fmt: skip
    bumped = written(txn.init_producer_id(meta, "app", 60_000, (1000, 0), 4, ids().__next__))
    assert (bumped.producer_id, bumped.producer_epoch, bumped.last_producer_epoch) == (1000, 1, 0)
    again = written(txn.init_producer_id(bumped, "app", 30_000, (1000, 0), 5, ids().__next__))
    assert (again.producer_id, again.producer_epoch) == (1000, 1)  # its answer was lost: the
    assert (again.timeout_ms, again.last_update_ms) == (30_000, 5)  # same one, written again
    stale = txn.init_producer_id(bumped, "app", 60_000, (1000, 7), 5, ids().__next__)
    assert stale == Refused(ErrorCode.PRODUCER_FENCED)
    other = txn.init_producer_id(bumped, "app", 60_000, (999, 1), 5, ids().__next__)
    assert other == Refused(ErrorCode.PRODUCER_FENCED)


def test_a_bump_retried_after_a_transaction_ended_goes_back_to_empty() -> None:
    """Found by the state-machine property test: bumped (KIP-360), then a transaction at
    the new epoch aborted; the first bump's retry arrives late. It is answered with the
    same epoch, written again in state Empty (Kafka's prepareIncrementProducerEpoch), not
    left in CompleteAbort, which cannot follow itself."""
    meta = txn.completed(
        written(txn.end_txn(written(txn.add_partitions(begin(), 1000, 0, [T0], 1)),
                            1000, 0, False, 2)), 3)  # fmt: skip
    bumped = written(txn.init_producer_id(meta, "app", 60_000, (1000, 0), 4, ids().__next__))
    aborted = txn.completed(
        written(txn.end_txn(written(txn.add_partitions(bumped, 1000, 1, [T1], 5)),
                            1000, 1, False, 6)), 7)  # fmt: skip
    assert aborted.state is S.COMPLETE_ABORT and aborted.last_producer_epoch == 0
    retried = written(txn.init_producer_id(aborted, "app", 60_000, (1000, 0), 8, ids().__next__))
    assert (retried.producer_epoch, retried.state, retried.partitions) == (1, S.EMPTY, frozenset())


def test_an_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    meta = TxnMetadata("app", 1000, txn.MAX_EPOCH - 1, 60_000, S.COMPLETE_COMMIT)
    old = (1000, txn.MAX_EPOCH - 1)
    rotated = written(txn.init_producer_id(meta, "app", 60_000, None, 1, ids(5000).__next__))
    assert (rotated.producer_id, rotated.producer_epoch) == (5000, 0)
    assert rotated.previous_producer_id == 1000
    # a new instance took it over: the old producer's recovery is fenced
    late = txn.init_producer_id(rotated, "app", 60_000, old, 2, ids(6000).__next__)
    assert late == Refused(ErrorCode.PRODUCER_FENCED)
    # the old producer's own recovery (KIP-360) rotates it, and its retry gets that answer
    recovered = written(txn.init_producer_id(meta, "app", 60_000, old, 1, ids(5000).__next__))
    assert (recovered.producer_id, recovered.producer_epoch) == (5000, 0)
    retry = written(txn.init_producer_id(recovered, "app", 60_000, old, 2, ids(6000).__next__))
    assert (retry.producer_id, retry.producer_epoch) == (5000, 0)
    # once a new instance bumps the new id, the old id's recovery is over: it cannot fence
    # the new instance's transaction
    taken = written(txn.init_producer_id(recovered, "app", 60_000, None, 3, ids(7000).__next__))
    ongoing = written(txn.add_partitions(taken, 5000, 1, [T0], 4))
    late = txn.init_producer_id(ongoing, "app", 60_000, old, 5, ids(8000).__next__)
    assert late == Refused(ErrorCode.PRODUCER_FENCED)


def test_end_txn_outside_an_ongoing_transaction_answers_as_kafka() -> None:
    expected = {
        (S.PREPARE_COMMIT, True): ErrorCode.CONCURRENT_TRANSACTIONS,
        (S.PREPARE_COMMIT, False): ErrorCode.INVALID_TXN_STATE,
        (S.PREPARE_ABORT, True): ErrorCode.INVALID_TXN_STATE,
        (S.PREPARE_ABORT, False): ErrorCode.CONCURRENT_TRANSACTIONS,
        (S.COMPLETE_COMMIT, True): None,
        (S.COMPLETE_COMMIT, False): ErrorCode.INVALID_TXN_STATE,
        (S.COMPLETE_ABORT, True): ErrorCode.INVALID_TXN_STATE,
        (S.COMPLETE_ABORT, False): None,
        (S.EMPTY, True): ErrorCode.INVALID_TXN_STATE,
        (S.EMPTY, False): ErrorCode.INVALID_TXN_STATE,
    }
    for (state, commit), error in expected.items():
        meta = TxnMetadata("app", 1000, 3, 60_000, state)
        decision = txn.end_txn(meta, 1000, 3, commit, 1)
        assert decision == (Answered(1000, 3) if error is None else Refused(error)), state


def test_requests_from_another_producer_or_an_unknown_id_are_refused() -> None:
    meta = begin()
    mapping = Refused(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    assert txn.add_partitions(None, 1000, 0, [T0], 1) == mapping
    assert txn.end_txn(None, 1000, 0, True, 1) == mapping
    assert txn.add_partitions(meta, 999, 0, [T0], 1) == mapping
    assert txn.add_partitions(meta, 1000, 1, [T0], 1) == Refused(ErrorCode.PRODUCER_FENCED)
    bad = txn.init_producer_id(None, "", 60_000, None, 1, ids().__next__)
    assert bad == Refused(ErrorCode.INVALID_REQUEST)
    for timeout in (0, -1, txn.DEFAULT_MAX_TIMEOUT_MS + 1):
        decision = txn.init_producer_id(meta, "app", timeout, None, 1, ids().__next__)
        assert decision == Refused(ErrorCode.INVALID_TRANSACTION_TIMEOUT)


def test_timeouts_and_expiry() -> None:
    ongoing = written(txn.add_partitions(begin(), 1000, 0, [T0], now_ms=100))
    assert not txn.timed_out(ongoing, 100 + 60_000)
    assert txn.timed_out(ongoing, 100 + 60_001)
    aborted = txn.fence(ongoing, 60_200).metadata
    assert (aborted.state, aborted.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert not txn.expired(ongoing, 10**12, 1000)  # an open transaction never expires
    done = txn.completed(aborted, 70_000)
    assert not txn.expired(done, 70_999, 1000) and txn.expired(done, 71_000, 1000)


REQUESTS = st.lists(
    st.one_of(
        st.tuples(
            st.just("init"), st.none() | st.tuples(st.integers(999, 1001), st.integers(-1, 4))
        ),
        st.tuples(st.just("add"), st.sampled_from([T0, T1, OFFSETS])),
        st.tuples(st.just("end"), st.booleans()),
        st.tuples(st.just("complete"), st.none()),
        st.tuples(st.just("timeout"), st.none()),
        st.tuples(st.just("stale"), st.integers(0, 3)),  # a request at an older epoch
    ),
    max_size=40,
)


@given(REQUESTS)
def test_no_sequence_of_requests_breaks_the_state_machine(requests: list) -> None:
    """Every decision is a valid transition (transit asserts it); the epoch never goes
    down; only the current producer at its current epoch changes a transaction; a Prepare
    state only ever completes to its own outcome."""
    meta: TxnMetadata | None = None
    new_ids = ids()
    for now, (kind, arg) in enumerate(requests):
        before = meta
        if kind == "init":
            decision = txn.init_producer_id(meta, "app", 60_000, arg, now, new_ids.__next__)
        elif meta is None:
            continue
        elif kind == "add":
            decision = txn.add_partitions(meta, meta.producer_id, meta.producer_epoch, [arg], now)
        elif kind == "end":
            decision = txn.end_txn(meta, meta.producer_id, meta.producer_epoch, arg, now)
        elif kind == "stale":
            if meta.producer_epoch - 1 - arg < 0:
                continue
            stale = meta.producer_epoch - 1 - arg
            for decision in (
                txn.add_partitions(meta, meta.producer_id, stale, [T0], now),
                txn.end_txn(meta, meta.producer_id, stale, True, now),
            ):
                assert decision == Refused(ErrorCode.PRODUCER_FENCED)
            continue
        elif kind == "complete":
            if meta.state in txn.PREPARED:
                outcome = meta.state
                meta = txn.completed(meta, now)
                assert meta.state is (
                    S.COMPLETE_COMMIT if outcome is S.PREPARE_COMMIT else S.COMPLETE_ABORT
                )
            continue
        else:  # a timeout sweep at a time far past any transaction's start
            if txn.timed_out(meta, now + 10**9):
                meta = txn.fence(meta, now).metadata
            continue
        if isinstance(decision, Write):
            meta = decision.metadata
            if before is not None and meta.producer_id == before.producer_id:
                assert meta.producer_epoch >= before.producer_epoch
            if decision.markers:
                assert meta.state in txn.PREPARED


def test_checks_come_in_kafkas_order() -> None:
    """A fenced or unknown producer learns so even while a write is in flight; a bad
    request is refused before anything about the id is looked at; the expected producer is
    checked before the state."""
    meta = written(txn.add_partitions(begin(), 1000, 0, [T0], 1))
    busy = Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
    for decide in (
        lambda pid, epoch: txn.add_partitions(meta, pid, epoch, [T1], 2, pending=True),
        lambda pid, epoch: txn.end_txn(meta, pid, epoch, True, 2, pending=True),
    ):
        assert decide(999, 0) == Refused(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        assert decide(1000, 7) == Refused(ErrorCode.PRODUCER_FENCED)
        assert decide(1000, 0) == busy
    new_id = ids().__next__
    bad_timeout = txn.init_producer_id(meta, "app", 0, None, 2, new_id, pending=True)
    assert bad_timeout == Refused(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
    assert txn.init_producer_id(meta, "app", 60_000, None, 2, new_id, pending=True) == busy
    preparing = written(txn.end_txn(meta, 1000, 0, True, 3))
    stranger = txn.init_producer_id(preparing, "app", 60_000, (999, 0), 4, new_id)
    assert stranger == Refused(ErrorCode.PRODUCER_FENCED)  # before CONCURRENT_TRANSACTIONS


def test_a_fenced_zombie_cannot_recover_its_epoch() -> None:
    zombie = written(txn.add_partitions(begin(), 1000, 0, [T0], now_ms=1))
    aborted = txn.completed(txn.fence(zombie, 2).metadata, 3)
    assert aborted.producer_epoch == 1 and aborted.last_producer_epoch == txn.NO_EPOCH
    recovery = txn.init_producer_id(aborted, "app", 60_000, (1000, 0), 4, ids().__next__)
    assert recovery == Refused(ErrorCode.PRODUCER_FENCED)


def test_a_new_id_takes_any_expected_producer_and_a_bump_takes_the_new_timeout() -> None:
    first = written(txn.init_producer_id(None, "app", 60_000, (42, 3), 1, ids().__next__))
    assert (first.producer_id, first.producer_epoch) == (1000, 0)  # the -1 epoch case
    again = written(txn.init_producer_id(first, "app", 5_000, None, 2, ids().__next__))
    assert (again.producer_epoch, again.timeout_ms) == (1, 5_000)
