"""Kafka clients' fetch sessions (kraftlite/kafka/fetch_sessions.py): KIP-227's request
metadata, incremental updates, and which partitions an answer carries."""

from __future__ import annotations

import itertools

import pytest

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.kafka.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION,
    ConnectionFetchSession,
    PartitionKey,
    Plan,
    Position,
    SessionBudget,
)
from kraftlite.service import MAX_FETCH_PARTITIONS

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def ANY(key: PartitionKey) -> bool:
    return True


def named(*keys: PartitionKey, offset: int = 0) -> list[tuple[PartitionKey, Position]]:
    return [(key, Position(offset, 1000)) for key in keys]


def connection(budget: SessionBudget | None = None) -> ConnectionFetchSession:
    return ConnectionFetchSession(itertools.count(101), budget or SessionBudget())


def keys(plan: Plan) -> list[PartitionKey]:
    return [key for key, _ in plan.partitions]


def test_no_session_asked_none_given() -> None:
    conn = connection()
    plan = conn.plan(NO_SESSION, FINAL_EPOCH, named(A, B), [], ANY)
    assert plan.session is None and plan.session_id == NO_SESSION and not plan.incremental
    assert keys(plan) == [A, B]
    assert conn.session is None


def test_a_full_fetch_at_epoch_zero_opens_a_session_and_the_next_epochs_follow() -> None:
    conn = connection()
    first = conn.plan(NO_SESSION, INITIAL_EPOCH, named(A, B), [], ANY)
    assert first.session_id == 101 and not first.incremental
    second = conn.plan(101, 1, [], [], ANY)
    assert second.incremental and keys(second) == [A, B]
    third = conn.plan(101, 2, named(C), [], ANY)
    assert keys(third) == [A, B, C]


@pytest.mark.parametrize(
    ("session_id", "epoch", "code"),
    [
        (999, 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),  # another connection's, or made up
        (101, 2, ErrorCode.INVALID_FETCH_SESSION_EPOCH),  # a future epoch
        (101, 7, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
    ],
)
def test_an_incremental_fetch_must_name_this_connections_session_and_its_next_epoch(
    session_id: int, epoch: int, code: ErrorCode
) -> None:
    conn = connection()
    conn.plan(NO_SESSION, INITIAL_EPOCH, named(A), [], ANY)
    with pytest.raises(KraftliteError) as refused:
        conn.plan(session_id, epoch, named(B), [], ANY)
    assert refused.value.code == code
    # refused whole: nothing was added and the epoch did not move
    assert keys(conn.plan(101, 1, [], [], ANY)) == [A]


def test_a_replayed_epoch_is_refused() -> None:
    conn = connection()
    conn.plan(NO_SESSION, INITIAL_EPOCH, named(A), [], ANY)
    conn.plan(101, 1, [], [], ANY)
    with pytest.raises(KraftliteError) as refused:
        conn.plan(101, 1, [], [], ANY)
    assert refused.value.code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_without_a_session_every_incremental_fetch_is_not_found() -> None:
    with pytest.raises(KraftliteError) as refused:
        connection().plan(101, 1, named(A), [], ANY)
    assert refused.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_closing_and_reopening() -> None:
    conn = connection()
    conn.plan(NO_SESSION, INITIAL_EPOCH, named(A), [], ANY)
    reopened = conn.plan(101, INITIAL_EPOCH, named(B), [], ANY)  # (id, 0): close, open another
    assert reopened.session_id == 102 and keys(reopened) == [B]
    with pytest.raises(KraftliteError):
        conn.plan(101, 1, [], [], ANY)
    closed = conn.plan(102, FINAL_EPOCH, named(C), [], ANY)  # (id, -1): close, no session
    assert closed.session is None and keys(closed) == [C]
    assert conn.session is None


def test_named_partitions_update_and_forgotten_ones_leave() -> None:
    conn = connection()
    conn.plan(NO_SESSION, INITIAL_EPOCH, named(A, B), [], ANY)
    plan = conn.plan(101, 1, [(A, Position(50, 2000, leader_epoch=3))], [B], ANY)
    assert keys(plan) == [A]
    position = dict(plan.partitions)[A]
    assert (position.fetch_offset, position.max_bytes, position.leader_epoch) == (50, 2000, 3)
    # named and forgotten at once: forgotten wins, as in Kafka's FetchSession.update
    assert keys(conn.plan(101, 2, named(C), [C], ANY)) == [A]


def test_a_session_left_empty_is_closed() -> None:
    budget = SessionBudget()
    conn = connection(budget)
    conn.plan(NO_SESSION, INITIAL_EPOCH, named(A, B), [], ANY)
    plan = conn.plan(101, 1, [], [A, B], ANY)
    assert plan.session is None and plan.partitions == [] and conn.session is None
    assert budget.used == 0


def test_a_full_fetch_ends_the_connections_session_whatever_id_it_names() -> None:
    budget = SessionBudget()
    conn = connection(budget)
    conn.plan(NO_SESSION, INITIAL_EPOCH, named(A, B), [], ANY)
    assert budget.used == 2
    conn.plan(NO_SESSION, FINAL_EPOCH, named(A), [], ANY)  # (0, -1): no session any more
    assert conn.session is None and budget.used == 0
    conn.plan(NO_SESSION, INITIAL_EPOCH, named(A), [], ANY)
    conn.plan(777, INITIAL_EPOCH, named(B, C), [], ANY)  # another id: still one session
    assert conn.session is not None and budget.used == 2


def test_the_budget_is_shared_and_given_back() -> None:
    budget = SessionBudget(limit=3)
    first, second = connection(budget), connection(budget)
    assert first.plan(NO_SESSION, INITIAL_EPOCH, named(A, B), [], ANY).session is not None
    declined = second.plan(NO_SESSION, INITIAL_EPOCH, named(A, B), [], ANY)
    assert declined.session is None and keys(declined) == [A, B]  # answered, sessionless
    assert second.plan(NO_SESSION, INITIAL_EPOCH, named(C), [], ANY).session is not None
    assert budget.used == 3
    with pytest.raises(KraftliteError) as refused:  # growing past it closes the session
        first.plan(101, 1, named(C), [], ANY)
    assert refused.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert first.session is None and budget.used == 1
    second.close()  # the connection is gone
    assert budget.used == 0


def test_only_admitted_partitions_are_held() -> None:
    """A client cannot spend the broker's budget on partitions it may not read or that do
    not exist: such a full fetch gets no session, and such an incremental one ends it."""
    budget = SessionBudget()
    conn = connection(budget)

    def readable(key: PartitionKey) -> bool:
        return key != C

    refused = conn.plan(NO_SESSION, INITIAL_EPOCH, named(A, C), [], readable)
    assert refused.session is None and keys(refused) == [A, C] and budget.used == 0
    conn.plan(NO_SESSION, INITIAL_EPOCH, named(A), [], readable)
    with pytest.raises(KraftliteError) as ended:
        conn.plan(101, 1, named(C), [], readable)
    assert ended.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert conn.session is None and budget.used == 0


def test_partitions_that_returned_records_go_to_the_end() -> None:
    conn = connection()
    plan = conn.plan(NO_SESSION, INITIAL_EPOCH, named(A, B, C), [], ANY)
    ConnectionFetchSession.returned_records(plan, [A])
    assert keys(conn.plan(101, 1, [], [], ANY)) == [B, C, A]


def test_an_incremental_answer_carries_only_news() -> None:
    conn = connection()
    full = conn.plan(NO_SESSION, INITIAL_EPOCH, named(A), [], ANY)
    position = dict(full.partitions)[A]

    def answer(
        plan: Plan,
        *,
        error: bool = False,
        records: bool = False,
        high_watermark: int = 10,
        log_start: int = 0,
    ) -> bool:
        return ConnectionFetchSession.must_answer(
            plan,
            position,
            error=error,
            records=records,
            high_watermark=high_watermark,
            log_start=log_start,
        )

    assert answer(full)  # a full answer carries everything
    plan = conn.plan(101, 1, [], [], ANY)
    assert not answer(plan)  # nothing new
    assert answer(plan, records=True)
    assert answer(plan, high_watermark=11)
    assert not answer(plan, high_watermark=11)  # told already
    assert answer(plan, log_start=5)
    assert answer(plan, error=True, high_watermark=-1, log_start=-1)
    assert answer(plan, high_watermark=11, log_start=5)  # back from the error: told again


def test_a_session_is_bounded() -> None:
    conn = connection()
    many = named(*[("t", i) for i in range(MAX_FETCH_PARTITIONS + 1)])
    too_big = conn.plan(NO_SESSION, INITIAL_EPOCH, many, [], ANY)
    assert too_big.session is None and len(too_big.partitions) == len(many)
    conn.plan(NO_SESSION, INITIAL_EPOCH, many[:-1], [], ANY)
    with pytest.raises(KraftliteError) as refused:
        conn.plan(101, 1, many[-1:], [], ANY)
    assert refused.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert conn.session is None


def test_a_partition_named_twice_gets_no_session() -> None:
    conn = connection()
    plan = conn.plan(NO_SESSION, INITIAL_EPOCH, named(A, A), [], ANY)
    assert plan.session is None and keys(plan) == [A, A]  # fetch_many refuses it whole


def test_the_epoch_wraps_to_one() -> None:
    conn = connection()
    conn.plan(NO_SESSION, INITIAL_EPOCH, named(A), [], ANY)
    assert conn.session is not None
    conn.session.next_epoch = 2**31 - 1
    conn.plan(101, 2**31 - 1, [], [], ANY)
    assert conn.session.next_epoch == 1
