"""Kafka's transaction APIs (issue 27) on the broker service's transaction coordinator
(transactions/coordinator.py) and group coordinator: AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn and TxnOffsetCommit; InitProducerId with a transactional id and Produce of
transactional batches are handlers.py's, on the same calls. The rules are Kafka's, with
their ids in docs/design/kafka-transactions.md.

Rules:
1. Authorization as Kafka's [A1, O1, E1, T2]: WRITE on the transactional id, else
   TRANSACTIONAL_ID_AUTHORIZATION_FAILED for everything the request names; WRITE on each
   topic added (TOPIC_AUTHORIZATION_FAILED, internal topics always), READ on the group
   (GROUP_AUTHORIZATION_FAILED), READ on each topic whose offsets are committed.
2. AddPartitionsToTxn adds nothing when any partition is refused or does not exist: those
   carry their errors and the others OPERATION_NOT_ATTEMPTED [A3]; otherwise one answer for
   all [A4]. At most MAX_PARTITIONS partitions per request (INVALID_REQUEST past it).
3. Older versions get older codes [D1]: PRODUCER_FENCED goes out as INVALID_PRODUCER_EPOCH
   below AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2; TxnOffsetCommit below v2 gets
   COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS [D2]. TRANSACTION_ABORTABLE
   is not served at these versions: INVALID_TXN_STATE in its place [D3].
4. TxnOffsetCommit goes to the group's coordinator, which verifies with the transaction
   coordinator that the offsets partition is in the transaction before it writes [T4].
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, cast

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.groups.offsets import CommittedOffset
from kraftlite.kafka.codes import NONE, kafka_code
from kraftlite.metadata.topics import is_internal_topic
from kraftlite.protocol import names
from kraftlite.protocol.kafka import bodies
from kraftlite.protocol.kafka.messages import ApiKey, Request
from kraftlite.security.acls import Operation, ResourceType
from kraftlite.transactions.metadata import TopicPartition

if TYPE_CHECKING:
    from kraftlite.kafka.handlers import ModuleHandler, Session

MAX_PARTITIONS: Final = 10_000  # partitions one AddPartitionsToTxn or TxnOffsetCommit names
OPERATION_NOT_ATTEMPTED: Final = 55
INVALID_GROUP_ID: Final = 24


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


APIS: Final[dict[ApiKey, ModuleHandler]] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    ApiKey.END_TXN: end_txn,
    ApiKey.TXN_OFFSET_COMMIT: txn_offset_commit,
}
