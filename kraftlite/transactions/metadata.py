"""The transaction coordinator's decisions for one transactional id (issue 27): Kafka's
TransactionMetadata and the checks of its TransactionCoordinator, as
docs/design/kafka-transactions.md gives them (rule ids there in brackets). Pure: the
coordinator (not yet built) looks the id up, says whether a write for it is in flight
(`pending`, [C12]: each decision answers CONCURRENT_TRANSACTIONS for it at the point of
its checks where Kafka does), appends the metadata a decision names to
`__transaction_state` with acks=all, and only then answers and installs it; a failed write
installs nothing and is answered with its own error [C13] (a failed fence too: Kafka then
also keeps the fenced epoch in memory, which is safe to leave out).

Kafka's first transaction protocol (transaction.version 0: one epoch per producer session,
a bump only at InitProducerId or a fence); brokers advertise no higher version, so Java 4
clients use it too ([V6]).

Rules:
1. A transactional id's metadata moves between Kafka's states only along `VALID_PREVIOUS`
   [C16-C17] (`transit` raises on anything else: a bug, never a client's error). An epoch
   only stays, goes up by one, or restarts at 0 with a new producer id.
2. InitProducerId [I2-I8]: an id in Empty or a Complete state is bumped (a new producer id
   once its epoch is exhausted [C18, I7a]); an Ongoing one is fenced: the coordinator aborts
   it at the next epoch [I8] and the caller is told CONCURRENT_TRANSACTIONS, to retry until
   that abort completes; a Prepare state answers CONCURRENT_TRANSACTIONS. KIP-360: a caller
   naming the producer id and epoch it had recovers them if they are still current, or had
   just been bumped for it [I6b, I7c-e]; else PRODUCER_FENCED. Every write to Empty notes
   the producer id it had (`previous_producer_id`), so only the caller a rotation was for
   recovers across it. Where Kafka throws (an exhausted epoch and an expected one that is
   not it) this answers as for any other epoch.
3. AddPartitionsToTxn and AddOffsetsToTxn [A4, O2] begin or extend a transaction: from
   Empty or a Complete state, or Ongoing; nothing is written when every partition is in.
4. EndTxn [E3]: Ongoing goes to PrepareCommit or PrepareAbort (answered once that is
   written: the outcome is decided then); a retry of a finished one answers NONE; the
   other state and result pairs are CONCURRENT_TRANSACTIONS or INVALID_TXN_STATE as in the
   table of [E3].
5. Once every partition took its marker, a Prepare state completes with no partitions
   (`completed`, [C16, C29]). An Ongoing transaction older than its timeout is aborted by
   the coordinator as a fence is [C20]; an id idle in Empty or a Complete state for
   transactional.id.expiration.ms is deleted (a tombstone, [C21]).
6. A kraftlite departure: a commit may carry a `tag` (an EndTxn over HTTP; Kafka's EndTxn
   has none), written with the PrepareCommit that decides it and kept, through later
   transactions that carry none, until a commit carries another. It says which work the
   id last committed, decided atomically with it: the Spark sink tags each micro-batch's
   transactions with the batch, so a replayed batch commits nothing twice (docs/spark.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any, Final, NamedTuple

from kraftlite.errors import ErrorCode

NO_PRODUCER_ID: Final = -1
NO_EPOCH: Final = -1
NO_TIMESTAMP: Final = -1
MAX_EPOCH: Final = 32767  # Short.MAX_VALUE
DEFAULT_MAX_TIMEOUT_MS: Final = 900_000  # transaction.max.timeout.ms
DEFAULT_ID_EXPIRATION_MS: Final = 604_800_000  # transactional.id.expiration.ms


class TxnState(IntEnum):
    """Kafka's TransactionStatus ids, as `__transaction_state` stores them [C8]."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


S = TxnState
VALID_PREVIOUS: Final[dict[TxnState, frozenset[TxnState]]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# Kafka's names of the states (TransactionState.name), as DescribeTransactions,
# ListTransactions and the HTTP description carry them
STATE_NAMES: Final[dict[TxnState, str]] = {
    S.EMPTY: "Empty",
    S.ONGOING: "Ongoing",
    S.PREPARE_COMMIT: "PrepareCommit",
    S.PREPARE_ABORT: "PrepareAbort",
    S.COMPLETE_COMMIT: "CompleteCommit",
    S.COMPLETE_ABORT: "CompleteAbort",
    S.DEAD: "Dead",
    S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
FINISHED: Final = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PREPARED: Final = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id as its coordinator knows it [1.3]. `last_producer_epoch` is
    the epoch before the last KIP-360 bump, so a retried bump is answered, not repeated; as
    in Kafka it is not stored, so it does not survive a coordinator move [C11]."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = NO_TIMESTAMP  # when the current transaction began
    last_update_ms: int = NO_TIMESTAMP
    last_producer_epoch: int = NO_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    commit_tag: str | None = None  # rule 6: what the last committed transaction was tagged


def exhausted(epoch: int) -> bool:
    """[C18]: MAX_EPOCH stays free, so a fence can always bump once more."""
    return epoch >= MAX_EPOCH - 1


def transit(current: TxnMetadata, **changes: Any) -> TxnMetadata:
    """Rule 1: `current` with `changes`, checked (AssertionError: a bug)."""
    target = replace(current, **changes)
    assert current.state in VALID_PREVIOUS[target.state], (current.state, target.state)
    assert target.producer_epoch <= MAX_EPOCH, "an epoch past Short.MAX_VALUE"
    if target.producer_id == current.producer_id:
        assert target.producer_epoch in (current.producer_epoch, current.producer_epoch + 1)
    else:
        assert target.producer_epoch == 0, "a new producer id starts at epoch 0"
    if target.state is S.ONGOING:
        assert target.partitions >= current.partitions
    if target.state in PREPARED:
        assert target.partitions == current.partitions
    return target


# -- decisions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refused:
    """Answer `error` and write nothing."""

    error: ErrorCode


@dataclass(frozen=True, slots=True)
class Answered:
    """Answer at once, writing nothing (a retry of what is already done)."""

    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class Write:
    """Append `metadata` to `__transaction_state` (acks=all), install it, then answer
    `answer` (None: success, with the producer id and epoch written, for InitProducerId).
    `markers`: the metadata is a Prepare state whose markers the coordinator then sends
    [C25]."""

    metadata: TxnMetadata
    answer: ErrorCode | None = None
    markers: bool = False


Decision = Refused | Answered | Write


def init_producer_id(  # noqa: PLR0917 - the request's fields and the coordinator's inputs
    current: TxnMetadata | None,
    transactional_id: str,
    timeout_ms: int,
    expected: tuple[int, int] | None,
    now_ms: int,
    new_producer_id: Callable[[], int],
    *,
    pending: bool = False,
    max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
) -> Decision:
    """Rule 2, for a transactional id (an idempotent producer's InitProducerId stores
    nothing and is not decided here [I2]). `expected`: the (producer id, epoch) the caller
    had (InitProducerId v3+), None when it names none [I4]."""
    if not transactional_id:
        return Refused(ErrorCode.INVALID_REQUEST)  # [I3]
    if not 0 < timeout_ms <= max_timeout_ms:
        return Refused(ErrorCode.INVALID_TRANSACTION_TIMEOUT)  # [C19]
    if current is None:  # [I5]: a new id, bumped below from epoch -1 to 0
        current = TxnMetadata(
            transactional_id, new_producer_id(), NO_EPOCH, timeout_ms, S.EMPTY,
            last_update_ms=now_ms,
        )  # fmt: skip
    if pending:
        return Refused(ErrorCode.CONCURRENT_TRANSACTIONS)  # [I6a]
    if expected is not None and not (  # [I6b]
        current.producer_epoch == NO_EPOCH
        or expected[0] == current.producer_id
        or (expected[0] == current.previous_producer_id and exhausted(expected[1]))
    ):
        return Refused(ErrorCode.PRODUCER_FENCED)
    if current.state in PREPARED:
        return Refused(ErrorCode.CONCURRENT_TRANSACTIONS)  # [I6c]
    if current.state is S.ONGOING:
        return fence(current, now_ms)  # [I8]
    assert current.state in FINISHED, current.state  # [I9]
    return _bump(current, timeout_ms, expected, now_ms, new_producer_id)


def _bump(
    current: TxnMetadata,
    timeout_ms: int,
    expected: tuple[int, int] | None,
    now_ms: int,
    new_producer_id: Callable[[], int],
) -> Decision:
    """[I7]: the next epoch (or a new producer id) in state Empty."""
    epoch = current.producer_epoch
    expected_epoch = None if expected is None else expected[1]
    common = {"timeout_ms": timeout_ms, "state": S.EMPTY, "partitions": frozenset(),
              "start_ms": NO_TIMESTAMP, "last_update_ms": now_ms}  # fmt: skip
    if exhausted(epoch) and expected_epoch in (None, epoch):  # [I7a]
        target = transit(
            current,
            producer_id=new_producer_id(),
            producer_epoch=0,
            previous_producer_id=current.producer_id,
            last_producer_epoch=NO_EPOCH if expected_epoch is None else epoch,
            **common,
        )
    elif expected_epoch is None:  # [I7b]
        target = transit(
            current,
            producer_epoch=epoch + 1,
            last_producer_epoch=NO_EPOCH,
            previous_producer_id=current.producer_id,
            **common,
        )
    elif epoch in (expected_epoch, NO_EPOCH):  # [I7c]: KIP-360 recovery
        target = transit(
            current,
            producer_epoch=epoch + 1,
            last_producer_epoch=epoch,
            previous_producer_id=current.producer_id,
            **common,
        )
    elif expected_epoch == current.last_producer_epoch:  # [I7d]: that bump, retried: the
        # same epoch written again in state Empty (as Kafka's prepareIncrementProducerEpoch:
        # a transaction may have ended since, leaving CompleteAbort), answered once durable
        target = transit(current, **common)
    else:
        return Refused(ErrorCode.PRODUCER_FENCED)  # [I7e]
    return Write(target)


def fence(current: TxnMetadata, now_ms: int) -> Write:
    """[I8, C20]: abort an Ongoing transaction as the coordinator, at the next epoch, so
    its producer's later requests and writes are refused. The caller who caused it (a new
    instance's InitProducerId) is answered CONCURRENT_TRANSACTIONS; it retries until the
    abort completes, and is then bumped once more."""
    assert current.state is S.ONGOING, current.state
    fenced = transit(
        current, state=S.PREPARE_EPOCH_FENCE, producer_epoch=current.producer_epoch + 1
    )  # never written: only the abort that follows is
    target = transit(
        fenced, state=S.PREPARE_ABORT, last_producer_epoch=NO_EPOCH, last_update_ms=now_ms
    )
    return Write(target, ErrorCode.CONCURRENT_TRANSACTIONS, markers=True)


def _check_producer(
    current: TxnMetadata | None, producer_id: int, epoch: int, pending: bool
) -> Refused | None:
    """[A4, E3]: the caller is the id's producer at its current epoch, and no write for
    the id is in flight (checked in that order, as Kafka's: a fenced producer learns so
    rather than being told to retry)."""
    if current is None or producer_id != current.producer_id:
        return Refused(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    if epoch != current.producer_epoch:
        return Refused(ErrorCode.PRODUCER_FENCED)
    if pending:
        return Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
    return None


def add_partitions(
    current: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    partitions: Iterable[TopicPartition],
    now_ms: int,
    *,
    pending: bool = False,
) -> Decision:
    """Rule 3 [A4, O2], once the caller's authorization and the partitions' existence were
    checked [A1, A3]."""
    refused = _check_producer(current, producer_id, epoch, pending)
    if refused is not None:
        return refused
    assert current is not None
    if current.state in PREPARED:
        return Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
    wanted = current.partitions | frozenset(partitions)
    if current.state is S.ONGOING and wanted == current.partitions:
        return Answered(producer_id, epoch)
    start = current.start_ms if current.state is S.ONGOING else now_ms
    return Write(
        transit(current, state=S.ONGOING, partitions=wanted, start_ms=start, last_update_ms=now_ms)
    )


# EndTxn in a state other than Ongoing [E3]: (state, commit) -> the answer
_END_ELSEWHERE: Final[dict[tuple[TxnState, bool], ErrorCode | None]] = {
    (S.PREPARE_COMMIT, True): ErrorCode.CONCURRENT_TRANSACTIONS,
    (S.PREPARE_COMMIT, False): ErrorCode.INVALID_TXN_STATE,
    (S.PREPARE_ABORT, True): ErrorCode.INVALID_TXN_STATE,
    (S.PREPARE_ABORT, False): ErrorCode.CONCURRENT_TRANSACTIONS,
    (S.COMPLETE_COMMIT, True): None,  # a retry of the commit
    (S.COMPLETE_COMMIT, False): ErrorCode.INVALID_TXN_STATE,
    (S.COMPLETE_ABORT, True): ErrorCode.INVALID_TXN_STATE,
    (S.COMPLETE_ABORT, False): None,  # a retry of the abort
    (S.EMPTY, True): ErrorCode.INVALID_TXN_STATE,
    (S.EMPTY, False): ErrorCode.INVALID_TXN_STATE,
}


def end_txn(
    current: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    commit: bool,
    now_ms: int,
    *,
    pending: bool = False,
    tag: str | None = None,
) -> Decision:
    """Rule 4 [E2-E3], and rule 6 for a commit's `tag`."""
    refused = _check_producer(current, producer_id, epoch, pending)
    if refused is not None:
        return refused
    assert current is not None
    if current.state is S.ONGOING:
        if commit:
            target = transit(
                current,
                state=S.PREPARE_COMMIT,
                last_update_ms=now_ms,
                commit_tag=current.commit_tag if tag is None else tag,
            )
        else:
            target = transit(current, state=S.PREPARE_ABORT, last_update_ms=now_ms)
        return Write(target, markers=True)
    answer = _END_ELSEWHERE[current.state, commit]
    return Answered(producer_id, epoch) if answer is None else Refused(answer)


def completed(current: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Rule 5 [C16, C29]: a Prepare state once every partition has its marker."""
    assert current.state in PREPARED, current.state
    state = S.COMPLETE_COMMIT if current.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    return transit(current, state=state, partitions=frozenset(), last_update_ms=now_ms)


def timed_out(current: TxnMetadata, now_ms: int) -> bool:
    """Rule 5 [C20]: an Ongoing transaction past its timeout (the coordinator `fence`s it)."""
    return current.state is S.ONGOING and current.start_ms + current.timeout_ms < now_ms


def expired(current: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    """Rule 5 [C21]: an id idle long enough to delete (its tombstone written, the next
    InitProducerId for it starts afresh); the coordinator skips ids with a write pending."""
    return current.state in FINISHED and current.last_update_ms <= now_ms - expiration_ms
