"""Kafka's transaction APIs (issue 27) on the broker service's transaction coordinator
(transactions/coordinator.py) and group coordinator: AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn and TxnOffsetCommit, and the admin tools' DescribeTransactions and ListTransactions;
InitProducerId with a transactional id and Produce of transactional batches are
handlers.py's, on the same calls. The rules are Kafka's, with their ids in
docs/design/kafka-transactions.md.

Rules:
1. Authorization as Kafka's [A1, O1, E1, T2]: WRITE on the transactional id (DESCRIBE to
   describe or list it: rules 5 and 6), else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
   everything the request names; WRITE on each topic added (TOPIC_AUTHORIZATION_FAILED,
   internal topics always), READ on the group (GROUP_AUTHORIZATION_FAILED), READ on each
   topic whose offsets are committed.
2. AddPartitionsToTxn adds nothing when any partition is refused or does not exist: those
   carry their errors and the others OPERATION_NOT_ATTEMPTED [A3]; otherwise one answer for
   all [A4]. At most MAX_PARTITIONS partitions per request (INVALID_REQUEST past it).
3. Older versions get older codes [D1]: PRODUCER_FENCED goes out as INVALID_PRODUCER_EPOCH
   below AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2; TxnOffsetCommit below v2 gets
   COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS [D2]. TRANSACTION_ABORTABLE
   is not served at these versions: INVALID_TXN_STATE in its place [D3].
4. TxnOffsetCommit goes to the group's coordinator, which verifies with the transaction
   coordinator that the offsets partition is in the transaction before it writes [T4].
5. DescribeTransactions [X1] answers each id named, in order (an id named twice, twice):
   DESCRIBE on the id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; TRANSACTIONAL_ID_NOT_FOUND
   for an id its coordinator does not have (or has Dead), NOT_COORDINATOR,
   COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE as the coordinator answers, and
   INVALID_REQUEST for a name no id may have ("", too long, control characters: checked
   first, so nothing of it is audited). The state goes out by Kafka's name ("Ongoing"), the
   partitions by topic, leaving out topics the caller may not DESCRIBE (internal ones
   always, as everywhere on this edge). Bounds (Kafka has none): the first
   MAX_DESCRIBED_IDS ids are answered, and MAX_DESCRIBED_PARTITIONS partitions in all (an
   id that would take the answer past it is answered only if it is the first with any);
   the others are INVALID_REQUEST. One transaction of every partition, named 10,000 times,
   would otherwise be an answer of billions.
6. ListTransactions [X2] lists the ids of the `__transaction_state` partitions this broker
   leads (COORDINATOR_LOAD_IN_PROGRESS for the whole answer while one loads), never Dead
   ones, filtered as Kafka's: by state names (unknown names echoed in
   UnknownStateFilters, and then matching nothing), by producer id, and from v1 by
   duration (`now - start > DurationFilter` ms, with the coordinator's clock; an id whose
   transaction never began has start -1, so it passes, as in Kafka). Ids the caller may not
   DESCRIBE are left out silently. v2's TransactionalIdPattern (Kafka 4.1) is not served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, cast

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.groups.offsets import CommittedOffset
from kraftlite.kafka.codes import INVALID_REQUEST, NONE, kafka_code
from kraftlite.metadata.topics import is_internal_topic
from kraftlite.protocol import names
from kraftlite.protocol.kafka import bodies
from kraftlite.protocol.kafka.messages import ApiKey, Request
from kraftlite.security.acls import Operation, ResourceType
from kraftlite.transactions.metadata import STATE_NAMES, TopicPartition, TxnState

if TYPE_CHECKING:
    from kraftlite.kafka.handlers import ModuleHandler, Session

MAX_PARTITIONS: Final = 10_000  # partitions one AddPartitionsToTxn or TxnOffsetCommit names
OPERATION_NOT_ATTEMPTED: Final = 55
INVALID_GROUP_ID: Final = 24
MAX_DESCRIBED_IDS: Final = 10_000  # rule 5: ids one DescribeTransactions answers
MAX_DESCRIBED_PARTITIONS: Final = 100_000  # rule 5: partitions in one answer (bar its first)
_STATES_BY_NAME: Final = {name: state for state, name in STATE_NAMES.items()}


def txn_code(exc: KraftliteError | ErrorCode, version: int, fenced_from: int = 2) -> int:
    """Rule 3: the code an older client understands."""
    code = exc.code if isinstance(exc, KraftliteError) else exc
    if code is ErrorCode.PRODUCER_FENCED and version < fenced_from:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    if code is ErrorCode.TRANSACTION_ABORTABLE:
        return int(ErrorCode.INVALID_TXN_STATE)
    if isinstance(exc, KraftliteError):
        return kafka_code(exc)
    return int(code)


def may_transactional_id(session: Session, transactional_id: str | None) -> bool:
    """Rule 1's first check (WRITE implies DESCRIBE, so FindCoordinator passes too)."""
    if not transactional_id or len(transactional_id) > names.MAX_TRANSACTIONAL_ID:
        return False
    return session._may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


async def add_partitions_to_txn(
    session: Session, request: Request
) -> bodies.AddPartitionsToTxnResponse:
    body = cast(bodies.AddPartitionsToTxnRequest, request.body)
    transactional_id = body["v3_and_below_transactional_id"]
    wanted = [
        (topic["name"], index)
        for topic in body["v3_and_below_topics"]
        for index in topic["partitions"]
    ]
    codes: dict[tuple[str, int], int] = {}
    if len(wanted) > MAX_PARTITIONS or len(set(wanted)) != len(wanted):
        codes = dict.fromkeys(wanted, int(ErrorCode.INVALID_REQUEST))
    elif not may_transactional_id(session, transactional_id):
        codes = dict.fromkeys(wanted, int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    else:
        image = session.image
        for name, index in wanted:
            await session._went_through()
            topic = image.topic(name)
            if is_internal_topic(name) or not session._may_topic(Operation.WRITE, name):
                codes[(name, index)] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif topic is None or index not in topic.partitions:
                codes[(name, index)] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if codes:  # [A3]: nothing added
            codes = {key: codes.get(key, OPERATION_NOT_ATTEMPTED) for key in wanted}
        else:
            code = NONE
            try:
                await session.service.transactions.add_partitions(
                    transactional_id,
                    body["v3_and_below_producer_id"],
                    body["v3_and_below_producer_epoch"],
                    [TopicPartition(name, index) for name, index in wanted],
                )
            except KraftliteError as exc:
                code = txn_code(exc, request.api_version)
            codes = dict.fromkeys(wanted, code)
    by_topic: dict[str, list[bodies.AddPartitionsToTxnPartitionResult]] = {}
    for (name, index), code in codes.items():
        by_topic.setdefault(name, []).append(
            {"partition_index": index, "partition_error_code": code}
        )
    return {
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": parts} for name, parts in by_topic.items()
        ]
    }


async def add_offsets_to_txn(session: Session, request: Request) -> bodies.AddOffsetsToTxnResponse:
    """[O1-O2]: the group's offsets partition joins the transaction."""
    body = cast(bodies.AddOffsetsToTxnRequest, request.body)
    if not may_transactional_id(session, body["transactional_id"]):
        return {"error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}
    group = body["group_id"]
    if not names.is_name(group, names.MAX_GROUP_NAME):
        return {"error_code": INVALID_GROUP_ID}
    if not session._may(Operation.READ, ResourceType.GROUP, group):
        return {"error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)}
    service = session.service
    try:
        await service.coordinator.ensure_offsets_topic()
        await service.transactions.add_partitions(
            body["transactional_id"],
            body["producer_id"],
            body["producer_epoch"],
            [TopicPartition(OFFSETS_TOPIC, service.coordinator.offsets_partition(group))],
        )
    except KraftliteError as exc:
        return {"error_code": txn_code(exc, request.api_version)}
    return {"error_code": NONE}


async def end_txn(session: Session, request: Request) -> bodies.EndTxnResponse:
    body = cast(bodies.EndTxnRequest, request.body)
    if not may_transactional_id(session, body["transactional_id"]):
        return {"error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}
    try:
        await session.service.transactions.end_txn(
            body["transactional_id"], body["producer_id"], body["producer_epoch"], body["committed"]
        )
    except KraftliteError as exc:
        return {"error_code": txn_code(exc, request.api_version)}
    return {"error_code": NONE}


async def txn_offset_commit(session: Session, request: Request) -> bodies.TxnOffsetCommitResponse:
    """Rule 4 [T1-T7]."""
    body = cast(bodies.TxnOffsetCommitRequest, request.body)
    group = body["group_id"]
    version = request.api_version
    wanted: list[tuple[tuple[str, int], CommittedOffset]] = []
    codes: dict[tuple[str, int], int] = {}
    entries = [(topic["name"], part) for topic in body["topics"] for part in topic["partitions"]]
    refused: int | None = None
    if len(entries) > MAX_PARTITIONS:
        refused = int(ErrorCode.INVALID_REQUEST)
    elif not may_transactional_id(session, body["transactional_id"]):
        refused = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not names.is_name(group, names.MAX_GROUP_NAME):
        refused = INVALID_GROUP_ID
    elif not session._may(Operation.READ, ResourceType.GROUP, group):
        refused = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    image = session.image
    for name, part in entries:
        key = (name, part["partition_index"])
        topic = image.topic(name)
        if refused is not None:
            codes[key] = refused
        elif is_internal_topic(name) or not session._may_topic(Operation.READ, name):
            codes[key] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif topic is None or key[1] not in topic.partitions:
            codes[key] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        elif part["committed_offset"] < 0:
            codes[key] = int(ErrorCode.INVALID_REQUEST)
        else:
            codes[key] = NONE
            wanted.append(
                (
                    key,
                    CommittedOffset(
                        part["committed_offset"],
                        part.get("committed_metadata") or "",
                        max(-1, part.get("committed_leader_epoch", -1)),
                    ),
                )
            )
    if wanted:
        try:
            await session.service.txn_offset_commit(
                body["transactional_id"],
                group,
                body["producer_id"],
                body["producer_epoch"],
                wanted,
                member_id=body.get("member_id") or None,
                generation=body.get("generation_id", -1),
                instance_id=body.get("group_instance_id") or None,
            )
        except KraftliteError as exc:
            code = txn_code(exc, version, fenced_from=0)
            if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and version < 2:
                code = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)  # [D2]
            for key, _ in wanted:
                codes[key] = code
    by_topic: dict[str, list[bodies.TxnOffsetCommitResponsePartition]] = {}
    for (name, index), code in codes.items():
        by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
    return {"topics": [{"name": n, "partitions": p} for n, p in by_topic.items()]}


def _described(
    session: Session, transactional_id: str
) -> bodies.DescribeTransactionsResponseTransactionState:
    """Rule 5 for one id, bounds aside."""
    if not names.is_name(transactional_id, names.MAX_TRANSACTIONAL_ID):
        return {"transactional_id": transactional_id, "error_code": INVALID_REQUEST}
    if not session._may(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return {
            "transactional_id": transactional_id,
            "error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        }
    try:
        found = session.service.transactions.describe(transactional_id)
    except KraftliteError as exc:
        return {"transactional_id": transactional_id, "error_code": kafka_code(exc)}
    if found.state is TxnState.DEAD:  # being expired [X1]
        return {
            "transactional_id": transactional_id,
            "error_code": int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
        }
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(found.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return {
        "transactional_id": transactional_id,
        "error_code": NONE,
        "transaction_state": STATE_NAMES[found.state],
        "transaction_timeout_ms": found.timeout_ms,
        "transaction_start_time_ms": found.start_ms,
        "producer_id": found.producer_id,
        "producer_epoch": found.producer_epoch,
        "topics": [
            {"topic": topic, "partitions": partitions}
            for topic, partitions in by_topic.items()
            if session._may_topic(Operation.DESCRIBE, topic, listing=True)
        ],
    }


async def describe_transactions(
    session: Session, request: Request
) -> bodies.DescribeTransactionsResponse:
    """Rule 5 [X1]."""
    body = cast(bodies.DescribeTransactionsRequest, request.body)
    answered = 0  # partitions in the answer so far
    states: list[bodies.DescribeTransactionsResponseTransactionState] = []
    for index, transactional_id in enumerate(body["transactional_ids"]):
        await session._went_through()
        if index >= MAX_DESCRIBED_IDS:
            states.append({"transactional_id": transactional_id, "error_code": INVALID_REQUEST})
            continue
        entry = _described(session, transactional_id)
        count = sum(len(topic["partitions"]) for topic in entry.get("topics", ()))
        if answered and answered + count > MAX_DESCRIBED_PARTITIONS:
            entry = {"transactional_id": transactional_id, "error_code": INVALID_REQUEST}
            count = 0
        answered += count
        await session._went_through(count)
        states.append(entry)
    return {"transaction_states": states}


async def list_transactions(session: Session, request: Request) -> bodies.ListTransactionsResponse:
    """Rule 6 [X2]."""
    body = cast(bodies.ListTransactionsRequest, request.body)
    states: set[TxnState] = set()
    unknown: dict[str, None] = {}  # in the order named, each once (Kafka's is a set)
    for name in body["state_filters"]:
        state = _STATES_BY_NAME.get(name)
        if state is None:
            unknown[name] = None
        else:
            states.add(state)
    by_state = bool(body["state_filters"])
    producer_ids = frozenset(body["producer_id_filters"])
    duration_ms = body["duration_filter"]  # -1 before v1
    transactions = session.service.transactions
    try:
        listed = transactions.listing()
    except KraftliteError as exc:
        return {"error_code": kafka_code(exc)}
    now_ms = session.service.broker.clock.now_ms()
    answer: list[bodies.ListTransactionsResponseTransactionState] = []
    for listing in listed:
        await session._went_through()
        transactional_id, producer_id, state = (
            listing.transactional_id,
            listing.producer_id,
            listing.state,
        )
        if duration_ms >= 0 and now_ms - listing.start_ms <= duration_ms:
            continue
        if (
            state is TxnState.DEAD
            or (producer_ids and producer_id not in producer_ids)
            or (by_state and state not in states)
            or not session._may(
                Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id, listing=True
            )
        ):
            continue
        answer.append(
            {
                "transactional_id": transactional_id,
                "producer_id": producer_id,
                "transaction_state": STATE_NAMES[state],
            }
        )
    return {
        "error_code": NONE,
        "unknown_state_filters": list(unknown),
        "transaction_states": answer,
    }


APIS: Final[dict[ApiKey, ModuleHandler]] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    ApiKey.END_TXN: end_txn,
    ApiKey.TXN_OFFSET_COMMIT: txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: describe_transactions,
    ApiKey.LIST_TRANSACTIONS: list_transactions,
}
