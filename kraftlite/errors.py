"""Error codes shared by the server, the client and the HTTP edge.

Rule: pure code returns codes in its results and raises only on broken invariants; the edge
turns a `KraftliteError` into problem+json with the code's name and HTTP status, and clients
rebuild the exception with `error_for_code`. Numbers are Kafka's where the meaning matches,
so logs and dashboards read the same as Kafka's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    BROKER_NOT_AVAILABLE = 8
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48  # transactions (issue 27): the request does not fit the state
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51  # the transaction is being written or ended: retry
    PRODUCER_FENCED = 90  # a newer instance of this transactional id exists
    TRANSACTION_COORDINATOR_FENCED = 52  # a marker from a coordinator that was replaced
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    UNSTABLE_OFFSET_COMMIT = 88  # a transaction holds an offset commit not yet decided
    TRANSACTION_ABORTABLE = 120  # the transaction cannot commit: abort it and go on
    UNKNOWN_PRODUCER_ID = 59
    REBALANCE_IN_PROGRESS = 27
    RECORD_LIST_TOO_LARGE = 18
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    NO_REASSIGNMENT_IN_PROGRESS = 85
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83  # no live replica may lead (an unclean election)
    ELECTION_NOT_NEEDED = 84
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    INVALID_PARTITIONS = 37
    TOPIC_ALREADY_EXISTS = 36
    INVALID_CONFIG = 40
    POLICY_VIOLATION = 44
    SASL_AUTHENTICATION_FAILED = 58
    GROUP_NOT_EMPTY = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    GROUP_MAX_SIZE_REACHED = 81
    GROUP_SUBSCRIBED_TO_TOPIC = 86  # OffsetDelete: the group's members consume the topic
    INVALID_RECORD = 87  # a record the topic refuses (a compacted topic's without a key)
    FENCED_INSTANCE_ID = 82  # KIP-345: another member holds this group.instance.id now
    THROTTLING_QUOTA_EXCEEDED = 89
    RESOURCE_NOT_FOUND = 91
    KAFKA_STORAGE_ERROR = 56
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78  # a new leader (or index) has not caught up with the HW yet
    INVALID_UPDATE_VERSION = 95
    BROKER_ID_NOT_REGISTERED = 102
    TRANSACTIONAL_ID_NOT_FOUND = 105  # DescribeTransactions: no such id at its coordinator
    INELIGIBLE_REPLICA = 107
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111  # KIP-848: the instance id is held by an active member
    STALE_MEMBER_EPOCH = 113
    UNSUPPORTED_MEDIA_TYPE = 1001  # HTTP-only: no Kafka equivalent
    BROKER_IN_USE = 1002  # kraftlite's own: a broker still holding replicas cannot be removed
    DUPLICATE_VOTER = 1003  # Kafka's name (KIP-853): already a voter
    VOTER_NOT_FOUND = 1004  # Kafka's name (KIP-853)
    QUORUM_AT_RISK = 1005  # kraftlite's own: the change would leave no live majority


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    http_status: int
    retriable: bool
    message: str


ERROR_INFO: Mapping[ErrorCode, ErrorInfo] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: ErrorInfo(500, False, "unexpected server error"),
    ErrorCode.OFFSET_OUT_OF_RANGE: ErrorInfo(416, False, "offset out of range"),
    ErrorCode.CORRUPT_MESSAGE: ErrorInfo(400, False, "batch failed its checks"),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorInfo(404, True, "unknown topic or partition"),
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorInfo(421, True, "not the leader"),
    ErrorCode.BROKER_NOT_AVAILABLE: ErrorInfo(503, True, "the broker is not ready yet"),
    ErrorCode.REQUEST_TIMED_OUT: ErrorInfo(504, True, "request timed out"),
    ErrorCode.MESSAGE_TOO_LARGE: ErrorInfo(413, False, "record batch too large"),
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorInfo(
        503, True, "the coordinator is loading its groups"
    ),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorInfo(503, True, "coordinator not available"),
    ErrorCode.NOT_COORDINATOR: ErrorInfo(421, True, "not the group's coordinator"),
    ErrorCode.UNKNOWN_MEMBER_ID: ErrorInfo(404, False, "unknown member: join again"),
    ErrorCode.ILLEGAL_GENERATION: ErrorInfo(409, False, "the group's generation moved on"),
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: ErrorInfo(
        409, False, "the group uses another protocol or assignor"
    ),
    ErrorCode.REBALANCE_IN_PROGRESS: ErrorInfo(409, True, "the group is rebalancing: join again"),
    ErrorCode.INVALID_SESSION_TIMEOUT: ErrorInfo(400, False, "session timeout out of bounds"),
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorInfo(
        409, False, "a batch of this producer is missing before this one"
    ),
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: ErrorInfo(409, False, "this batch was written already"),
    ErrorCode.INVALID_PRODUCER_EPOCH: ErrorInfo(409, False, "a newer producer with this id exists"),
    ErrorCode.INVALID_TXN_STATE: ErrorInfo(409, False, "not allowed in the transaction's state"),
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: ErrorInfo(
        409, False, "the producer id is not this transactional id's"
    ),
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: ErrorInfo(
        400, False, "the transaction timeout is out of range"
    ),
    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorInfo(
        409, True, "the transaction is being changed: try again shortly"
    ),
    ErrorCode.PRODUCER_FENCED: ErrorInfo(
        409, False, "a newer producer with this transactional id exists"
    ),
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: ErrorInfo(
        409, False, "a newer transaction coordinator wrote this producer's markers"
    ),
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorInfo(
        403, False, "not authorized for this transactional id"
    ),
    ErrorCode.UNSTABLE_OFFSET_COMMIT: ErrorInfo(
        409, True, "an open transaction holds an offset commit for this partition: retry"
    ),
    ErrorCode.TRANSACTION_ABORTABLE: ErrorInfo(
        409, False, "the transaction cannot commit: abort it"
    ),
    ErrorCode.UNKNOWN_PRODUCER_ID: ErrorInfo(
        409, False, "no state for this producer here: start a new sequence"
    ),
    ErrorCode.FENCED_MEMBER_EPOCH: ErrorInfo(409, False, "member epoch is stale: join again"),
    ErrorCode.INVALID_TOPIC_EXCEPTION: ErrorInfo(400, False, "invalid topic name"),
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorInfo(413, False, "request too large"),
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorInfo(503, True, "not enough in-sync replicas"),
    ErrorCode.INVALID_REPLICATION_FACTOR: ErrorInfo(400, False, "invalid replication factor"),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: ErrorInfo(400, False, "invalid replica assignment"),
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: ErrorInfo(409, False, "no reassignment in progress"),
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: ErrorInfo(
        409, True, "the preferred leader is not live and in sync"
    ),
    ErrorCode.ELECTION_NOT_NEEDED: ErrorInfo(409, False, "the preferred replica already leads"),
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: ErrorInfo(
        409, True, "no live replica can lead the partition"
    ),
    ErrorCode.BROKER_IN_USE: ErrorInfo(409, False, "the broker still holds replicas"),
    ErrorCode.DUPLICATE_VOTER: ErrorInfo(409, False, "already a voter"),
    ErrorCode.VOTER_NOT_FOUND: ErrorInfo(404, False, "no such voter"),
    ErrorCode.QUORUM_AT_RISK: ErrorInfo(
        409, True, "the change would leave the quorum without a live majority"
    ),
    ErrorCode.NOT_CONTROLLER: ErrorInfo(503, True, "not the active controller"),
    ErrorCode.INVALID_REQUEST: ErrorInfo(400, False, "invalid request"),
    ErrorCode.INVALID_PARTITIONS: ErrorInfo(400, False, "invalid partition count"),
    ErrorCode.TOPIC_ALREADY_EXISTS: ErrorInfo(409, False, "topic already exists"),
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorInfo(507, True, "storage error"),
    ErrorCode.FENCED_LEADER_EPOCH: ErrorInfo(409, True, "leader epoch is stale"),
    ErrorCode.UNKNOWN_LEADER_EPOCH: ErrorInfo(409, True, "leader epoch is ahead of the leader's"),
    ErrorCode.INVALID_CONFIG: ErrorInfo(400, False, "invalid config"),
    ErrorCode.STALE_BROKER_EPOCH: ErrorInfo(409, False, "broker epoch is stale"),
    ErrorCode.OFFSET_NOT_AVAILABLE: ErrorInfo(503, True, "not caught up with the high watermark"),
    ErrorCode.INVALID_UPDATE_VERSION: ErrorInfo(409, True, "partition epoch is stale"),
    ErrorCode.BROKER_ID_NOT_REGISTERED: ErrorInfo(404, False, "broker is not registered"),
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: ErrorInfo(404, False, "no such transactional id"),
    ErrorCode.INELIGIBLE_REPLICA: ErrorInfo(400, True, "replica cannot join the ISR"),
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: ErrorInfo(415, False, "unsupported media type"),
    ErrorCode.OFFSET_METADATA_TOO_LARGE: ErrorInfo(413, False, "offset metadata too large"),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: ErrorInfo(403, False, "not authorized for the topic"),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: ErrorInfo(403, False, "not authorized for the group"),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: ErrorInfo(403, False, "not authorized for the cluster"),
    ErrorCode.INVALID_TIMESTAMP: ErrorInfo(400, False, "timestamp out of the accepted range"),
    ErrorCode.POLICY_VIOLATION: ErrorInfo(400, False, "refused by the cluster's policy"),
    ErrorCode.SASL_AUTHENTICATION_FAILED: ErrorInfo(401, False, "authentication failed"),
    ErrorCode.GROUP_ID_NOT_FOUND: ErrorInfo(404, False, "no such group"),
    ErrorCode.GROUP_NOT_EMPTY: ErrorInfo(409, False, "the group has members"),
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND: ErrorInfo(409, True, "no such fetch session"),
    ErrorCode.INVALID_FETCH_SESSION_EPOCH: ErrorInfo(409, True, "fetch session epoch is stale"),
    ErrorCode.GROUP_MAX_SIZE_REACHED: ErrorInfo(409, False, "the group is full"),
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: ErrorInfo(
        409, False, "the group's members consume the topic"
    ),
    ErrorCode.INVALID_RECORD: ErrorInfo(400, False, "a record the topic does not take"),
    ErrorCode.FENCED_INSTANCE_ID: ErrorInfo(
        409, False, "a newer member joined with this group.instance.id"
    ),
    ErrorCode.UNRELEASED_INSTANCE_ID: ErrorInfo(
        409, False, "an active member still holds this group.instance.id"
    ),
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: ErrorInfo(429, True, "quota exceeded"),
    ErrorCode.STALE_MEMBER_EPOCH: ErrorInfo(409, False, "member epoch is stale"),
    ErrorCode.RESOURCE_NOT_FOUND: ErrorInfo(404, False, "no such resource"),
}


class KraftliteError(Exception):
    """An error with an API error code; `details` travel in the problem+json body."""

    def __init__(self, code: ErrorCode, message: str | None = None, **details: Any) -> None:
        self.code = code
        self.message = message or ERROR_INFO[code].message
        self.details = details
        super().__init__(f"{code.name}: {self.message}")

    @property
    def retriable(self) -> bool:
        return ERROR_INFO[self.code].retriable

    @property
    def http_status(self) -> int:
        return ERROR_INFO[self.code].http_status


def error_for_code(name: str, message: str | None = None, **details: Any) -> KraftliteError:
    """Rebuild an exception from an error name received over the wire."""
    code = ErrorCode.__members__.get(name, ErrorCode.UNKNOWN_SERVER_ERROR)
    return KraftliteError(code, message, **details)


def error_from_problem(status: int, payload: Any) -> KraftliteError:
    """A problem+json answer (already parsed) back into a KraftliteError, details kept."""
    if isinstance(payload, dict) and isinstance(payload.get("error_code"), str):
        details = {
            k: v
            for k, v in payload.items()
            if k not in {"error_code", "message", "status", "retriable"}
        }
        return error_for_code(payload["error_code"], str(payload.get("message", "")), **details)
    return KraftliteError(ErrorCode.UNKNOWN_SERVER_ERROR, f"HTTP {status}: {payload!r}")
