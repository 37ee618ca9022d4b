"""Kafka's group and producer admin APIs: OffsetDelete, ConsumerGroupDescribe (KIP-848)
and DescribeProducers, on the group coordinator and the partitions' producer state through
the broker service. The decisions are the coordinator's (groups/coordinator.py rules 6-7,
groups/offsets.py rule 6) and the service's (rule 7), shared with the HTTP edge; what is
here is Kafka's authorization, bounds and answer shapes, the pure parts first.

Rules:
1. OffsetDelete (Kafka's KafkaApis.handleOffsetDeleteRequest): DELETE on the group, else
   GROUP_AUTHORIZATION_FAILED for the whole request (INVALID_GROUP_ID for a name no group
   may have); at most MAX_OFFSETS_PER_DELETE partitions, else INVALID_REQUEST for the whole
   request; then READ on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions
   (internal topics are never the client's). The partitions left go to the coordinator
   (even none: it still says whether the group exists), whose refusals answer the whole
   request with no partitions (GROUP_ID_NOT_FOUND, NOT_COORDINATOR, GROUP_NOT_EMPTY, ...),
   as Kafka's error response has it; else each partition its own code (UNKNOWN_TOPIC_OR_
   PARTITION, GROUP_SUBSCRIBED_TO_TOPIC, or NONE: deleted, or there was nothing to delete).
2. ConsumerGroupDescribe: DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it;
   a group unknown, or a classic group with members, is GROUP_ID_NOT_FOUND (clients then
   ask DescribeGroups, as librdkafka does). Topics the client may not DESCRIBE are left out
   of the subscriptions and assignments shown (as the HTTP describe and OffsetFetch leave
   them out); a topic deleted meanwhile is left out too (Kafka shows topics it has ids
   for). With IncludeAuthorizedOperations, the group's operations the client may do, as
   Kafka's bit set (READ, DESCRIBE, DELETE: a group's operations), else Kafka's unknown
   value. At most MAX_DESCRIBED_GROUPS groups per request, and members, subscriptions and
   assignments of at most MAX_DESCRIBED_ITEMS in one answer (the first group always gets
   its answer): the rest are INVALID_REQUEST, known before the group's target assignment
   is computed (coordinator rule 7's bound), and other requests get the event loop after
   each group described. A group named again is described once and answered again, as
   Kafka answers every name (its items count again).
3. DescribeProducers (KafkaApis.handleDescribeProducersRequest): per topic, a name no topic
   may have is INVALID_TOPIC_EXCEPTION, then READ on it else TOPIC_AUTHORIZATION_FAILED,
   then UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist; per partition,
   NOT_LEADER_OR_FOLLOWER where this broker does not lead it (clients ask the leader),
   UNKNOWN_TOPIC_OR_PARTITION for an index it does not have, else its active producers
   (service.py rule 7) with coordinator epoch and transaction start offset -1 (no
   transactions). At most MAX_PRODUCER_PARTITIONS partitions per request, each once (a
   partition named again is INVALID_REQUEST), and at most MAX_LISTED_PRODUCERS producers
   in one answer (the first partition always gets its answer): the rest are
   INVALID_REQUEST, known from the producers a partition keeps before any is listed. Long
   lists are made on worker threads, not the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypeVar, cast

from kraftlite.broker.producer_state import MAX_PRODUCERS
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition
from kraftlite.groups.coordinator import ConsumerGroupDescription
from kraftlite.groups.offsets import MAX_OFFSETS_PER_DELETE
from kraftlite.kafka import acl_apis
from kraftlite.kafka.codes import INVALID_REQUEST, NONE, kafka_code, message
from kraftlite.metadata.topics import validate_topic_name
from kraftlite.protocol.kafka import bodies
from kraftlite.protocol.kafka.messages import ApiKey, Request
from kraftlite.security.acls import Operation, ResourceType
from kraftlite.service import ActiveProducer

# kraftlite's consumer-group states (groups/group.py, lowercase on the HTTP API) by Kafka's
# names (ConsumerGroup.ConsumerGroupState); a classic group's states are Kafka's already
_KAFKA_GROUP_STATES: Final = {"empty": "Empty", "stable": "Stable", "reconciling": "Reconciling"}


def kafka_group_state(state: str) -> str:
    """A group's state as Kafka names it (ListGroups, ConsumerGroupDescribe)."""
    return _KAFKA_GROUP_STATES.get(state, state)


if TYPE_CHECKING:
    from kraftlite.kafka.handlers import ModuleHandler, Session

T = TypeVar("T")
MAX_DESCRIBED_GROUPS: Final = 100  # rule 2 (Kafka: the request's size only)
MAX_DESCRIBED_ITEMS: Final = 200_000  # rule 2: as many as one request may hold
MAX_PRODUCER_PARTITIONS: Final = 1_000  # rule 3: each may rebuild its state from the log
MAX_LISTED_PRODUCERS: Final = MAX_PRODUCERS  # rule 3: what one partition may hold
TOPIC_AUTHORIZATION_FAILED: Final = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
# Kafka's operations on a group (AclEntry.supportedOperations(GROUP)), for rule 2
_NO_TOPIC_ID: Final = uuid.UUID(int=0)
_INLINE_PRODUCERS: Final = 1_000  # rule 3: more are answered from a worker thread
_TOO_LARGE: Final = "too large an answer: ask for fewer groups at once"

# -- pure ----------------------------------------------------------------------------------


def by_topic(answers: Iterable[tuple[TopicPartition, T]]) -> list[tuple[str, list[tuple[int, T]]]]:
    """Per-partition answers grouped by topic, topics in the order first named and their
    partitions in the order asked (Kafka's answers are per topic)."""
    grouped: dict[str, list[tuple[int, T]]] = {}
    for (topic, partition), answer in answers:
        grouped.setdefault(topic, []).append((partition, answer))
    return list(grouped.items())


def described_size(described: ConsumerGroupDescription) -> int:
    """Items rule 2 counts for a group: each member, its topics and its partitions."""
    return (
        sum(1 + len(m.topics) + len(m.assignment) + len(m.target) for m in described.members) or 1
    )


def group_error(
    group: str, code: int, text: str | None = None
) -> bodies.ConsumerGroupDescribeResponseDescribedGroup:
    """Rule 2's answer for a group not described."""
    return {"group_id": group, "error_code": code, "error_message": text}


def described_group(
    described: ConsumerGroupDescription,
    topic_ids: Mapping[str, uuid.UUID],
    visible: Callable[[str], bool],
) -> bodies.ConsumerGroupDescribeResponseDescribedGroup:
    """Rule 2's answer for a group: `topic_ids` holds every topic that exists, `visible`
    says which the client may see."""

    def assignment(
        partitions: frozenset[TopicPartition],
    ) -> bodies.ConsumerGroupDescribeResponseAssignment:
        grouped: dict[str, list[int]] = {}
        for topic, index in sorted(partitions):
            if topic in topic_ids and visible(topic):
                grouped.setdefault(topic, []).append(index)
        return {
            "topic_partitions": [
                {"topic_id": topic_ids[topic], "topic_name": topic, "partitions": indexes}
                for topic, indexes in grouped.items()
            ]
        }

    return {
        "error_code": NONE,
        "error_message": None,
        "group_id": described.group,
        "group_state": kafka_group_state(described.state),
        "group_epoch": described.group_epoch,
        "assignment_epoch": described.assignment_epoch,
        "assignor_name": described.assignor,
        "members": [
            {
                "member_id": member.member_id,
                "instance_id": member.instance_id,
                "rack_id": None,
                "member_epoch": member.member_epoch,
                "client_id": member.client_id,
                "client_host": "",  # kraftlite's groups do not keep it
                "subscribed_topic_names": [t for t in member.topics if visible(t)],
                "subscribed_topic_regex": None,
                "assignment": assignment(member.assignment),
                "target_assignment": assignment(member.target),
            }
            for member in described.members
        ],
    }


def producer_states(producers: Sequence[ActiveProducer]) -> list[bodies.ProducerState]:
    """Rule 3: a partition's active producers as DescribeProducers lists them."""
    return [
        {
            "producer_id": p.producer_id,
            "producer_epoch": p.producer_epoch,
            "last_sequence": p.last_sequence,
            "last_timestamp": p.last_seen_ms,
            "coordinator_epoch": p.coordinator_epoch,
            "current_txn_start_offset": p.txn_start_offset,
        }
        for p in producers
    ]


def _topic_name_ok(name: str) -> bool:
    try:
        validate_topic_name(name, internal=True)
    except KraftliteError:
        return False
    return True


# -- the APIs ------------------------------------------------------------------------------


async def offset_delete(session: Session, request: Request) -> bodies.OffsetDeleteResponse:
    """Rule 1."""
    body = cast(bodies.OffsetDeleteRequest, request.body)
    group = body["group_id"]
    refused = session._group_refusal(group, Operation.DELETE)
    if refused is not None:
        return {"error_code": refused, "topics": []}
    asked = [(t["name"], p["partition_index"]) for t in body["topics"] for p in t["partitions"]]
    if len(asked) > MAX_OFFSETS_PER_DELETE:
        return {"error_code": INVALID_REQUEST, "topics": []}
    await session._went_through(len(asked))
    readable = {
        name: session._may_topic(Operation.READ, name)
        for name in dict.fromkeys(t for t, _ in asked)
    }
    try:
        deletion = await session.service.coordinator.delete_offsets(
            group, [tp for tp in asked if readable[tp[0]]]
        )
    except KraftliteError as exc:
        return {"error_code": kafka_code(exc), "topics": []}
    answers = [
        (tp, int(deletion.refused.get(tp, NONE)) if readable[tp[0]] else TOPIC_AUTHORIZATION_FAILED)
        for tp in asked
    ]
    return {
        "error_code": NONE,
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": p, "error_code": code} for p, code in parts],
            }
            for topic, parts in by_topic(answers)
        ],
    }


async def consumer_group_describe(
    session: Session, request: Request
) -> bodies.ConsumerGroupDescribeResponse:
    """Rule 2."""
    body = cast(bodies.ConsumerGroupDescribeRequest, request.body)
    coordinator, gate = session.service.coordinator, session.handlers.gate
    image = session.image
    budget = MAX_DESCRIBED_ITEMS
    groups: list[bodies.ConsumerGroupDescribeResponseDescribedGroup] = []
    # a group named again gets its first answer again, as Kafka's; it counts again
    answered: dict[str, tuple[bodies.ConsumerGroupDescribeResponseDescribedGroup, int]] = {}

    def visible(topic: str) -> bool:
        return session._may_topic(Operation.DESCRIBE, topic, listing=True)

    for n, group in enumerate(body["group_ids"]):
        await session._went_through()
        if n >= MAX_DESCRIBED_GROUPS:
            limit = f"at most {MAX_DESCRIBED_GROUPS} groups per request"
            groups.append(group_error(group, INVALID_REQUEST, limit))
            continue
        if group in answered:
            earlier, size = answered[group]
            if size > budget:
                groups.append(group_error(group, INVALID_REQUEST, _TOO_LARGE))
            else:
                budget -= size
                groups.append(earlier.copy())
                await session._went_through(size)
            continue
        refused = session._group_refusal(group, Operation.DESCRIBE)
        if refused is not None:
            answered[group] = group_error(group, refused), 0
            groups.append(answered[group][0])
            continue
        try:  # the first group is always answered; the next ones only if they may fit,
            # known before the assignor runs over their partitions (coordinator rule 7)
            described = coordinator.describe_consumer(
                group, None if budget == MAX_DESCRIBED_ITEMS else budget
            )
        except KraftliteError as exc:  # (too large stays so: the budget only shrinks)
            answered[group] = group_error(group, kafka_code(exc), message(exc)), 0
            groups.append(answered[group][0])
            continue
        size = described_size(described)
        budget -= size
        await session._went_through(size)
        await asyncio.sleep(0)  # others get the event loop between groups described
        named = {t for m in described.members for t in m.topics} | {
            tp[0] for m in described.members for tp in m.assignment | m.target
        }
        topic_ids = {
            name: _topic_id(found.topic_id)
            for name in named
            if (found := image.topic(name)) is not None
        }
        answer = described_group(described, topic_ids, visible)
        if body["include_authorized_operations"]:
            answer["authorized_operations"] = acl_apis.authorized_operations(
                functools.partial(gate.allowed, session.who), ResourceType.GROUP, group
            )
        answered[group] = answer, size
        groups.append(answer)
    return {"groups": groups}


def _topic_id(image_topic_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(hex=image_topic_id)
    except ValueError:
        return _NO_TOPIC_ID


async def describe_producers(
    session: Session, request: Request
) -> bodies.DescribeProducersResponse:
    """Rule 3."""
    body = cast(bodies.DescribeProducersRequest, request.body)
    service, image = session.service, session.image
    seen = listed = 0
    asked: set[TopicPartition] = set()
    topics: list[bodies.TopicResponse] = []
    for topic in body["topics"]:
        name = topic["name"]
        problem: int | None = None
        if not _topic_name_ok(name):
            problem = int(ErrorCode.INVALID_TOPIC_EXCEPTION)
        elif not session._may_topic(Operation.READ, name):
            problem = TOPIC_AUTHORIZATION_FAILED
        elif image.topic(name) is None:
            problem = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        partitions: list[bodies.PartitionResponse] = []
        for index in topic["partition_indexes"]:
            seen += 1
            await session._went_through()
            entry: bodies.PartitionResponse = {"partition_index": index, "error_code": NONE}
            partitions.append(entry)
            if seen > MAX_PRODUCER_PARTITIONS:
                entry["error_code"] = INVALID_REQUEST
                entry["error_message"] = f"at most {MAX_PRODUCER_PARTITIONS} partitions"
                continue
            if (name, index) in asked:
                entry["error_code"] = INVALID_REQUEST
                entry["error_message"] = "a partition named twice"
                continue
            asked.add((name, index))
            if problem is not None:
                entry["error_code"] = problem
                continue
            try:  # the first partition always answered, the next ones while they fit
                producers = await service.active_producers(
                    name, index, MAX_LISTED_PRODUCERS - listed if listed else None
                )
            except KraftliteError as exc:
                entry.update({"error_code": kafka_code(exc), "error_message": message(exc)})
                continue
            listed += len(producers)
            await session._went_through(len(producers))
            entry["active_producers"] = (
                producer_states(producers)
                if len(producers) <= _INLINE_PRODUCERS
                else await asyncio.to_thread(producer_states, producers)
            )
        topics.append({"name": name, "partitions": partitions})
    return {"topics": topics}


APIS: Final[dict[ApiKey, ModuleHandler]] = {
    ApiKey.OFFSET_DELETE: offset_delete,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
    ApiKey.DESCRIBE_PRODUCERS: describe_producers,
}
