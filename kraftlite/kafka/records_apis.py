"""Kafka's DeleteRecords (`kafka-delete-records`, AdminClient.deleteRecords) on the broker
service's `delete_records`, the call the HTTP edge's
`POST /v1/topics/{t}/partitions/{p}/delete-records` makes too.

Rules:
1. As Kafka: DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED, whether it exists or
   not (checked first, so the answer tells nothing of it); a partition this broker does
   not lead is NOT_LEADER_OR_FOLLOWER (clients send each partition to its
   leader); an offset above the high watermark, or below -1, is OFFSET_OUT_OF_RANGE; -1
   means the high watermark. Internal topics are refused.
2. The partitions of one request are deleted and waited on together, within the request's
   `timeout_ms` (at most MAX_ADMIN_TIMEOUT_MS); each answers its low watermark once every
   replica that could lead has deleted below its offset (broker/replica_state.py rule 6),
   else REQUEST_TIMED_OUT (the log start has still moved on the leader, and the followers
   follow it).
3. At most MAX_PARTITIONS partitions per request, each once; the rest, and a partition
   named again, answer INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final, cast

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.kafka.codes import MAX_ADMIN_TIMEOUT_MS, NONE, kafka_code
from kraftlite.protocol.kafka import bodies
from kraftlite.protocol.kafka.messages import ApiKey, Request
from kraftlite.security.acls import Operation

if TYPE_CHECKING:
    from kraftlite.kafka.handlers import ModuleHandler, Session

MAX_PARTITIONS: Final = 1_000
_UNKNOWN: Final = -1  # the low watermark of a partition answered with an error


async def delete_records(session: Session, request: Request) -> bodies.DeleteRecordsResponse:
    body = cast(bodies.DeleteRecordsRequest, request.body)
    timeout_s = max(0, min(body["timeout_ms"], MAX_ADMIN_TIMEOUT_MS)) / 1000
    service = session.service
    pending: list[tuple[bodies.DeleteRecordsPartitionResult, asyncio.Task[int]]] = []
    topics: list[bodies.DeleteRecordsTopicResult] = []
    seen: set[tuple[str, int]] = set()
    for topic in body["topics"]:
        name = topic["name"]
        results: list[bodies.DeleteRecordsPartitionResult] = []
        allowed = session._may_topic(Operation.DELETE, name)
        for wanted in topic["partitions"]:
            key = (name, wanted["partition_index"])
            refused = key in seen or len(seen) >= MAX_PARTITIONS
            if not refused:
                seen.add(key)
            await session._went_through()
            result: bodies.DeleteRecordsPartitionResult = {
                "partition_index": wanted["partition_index"],
                "low_watermark": _UNKNOWN,
                "error_code": NONE,
            }
            results.append(result)
            if refused:
                result["error_code"] = int(ErrorCode.INVALID_REQUEST)
            elif not allowed:
                result["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            else:
                call = service.delete_records(
                    name, wanted["partition_index"], wanted["offset"], timeout_s
                )
                pending.append((result, asyncio.ensure_future(call)))
        topics.append({"name": name, "partitions": results})
    if pending:
        await asyncio.wait([task for _, task in pending])
    for result, task in pending:
        error = task.exception()
        if error is None:
            result["low_watermark"] = task.result()
        elif isinstance(error, KraftliteError):
            result["error_code"] = kafka_code(error)
        else:
            raise error
    return {"topics": topics}


APIS: Final[dict[ApiKey, ModuleHandler]] = {ApiKey.DELETE_RECORDS: delete_records}
