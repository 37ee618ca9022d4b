"""Kafka's cluster admin APIs: the legacy AlterConfigs, DescribeLogDirs, ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments and DescribeQuorum, mapped onto the
controllers' HTTP-side machinery (configs, elections, reassignments, the quorum) so both
edges share one implementation. What is here is Kafka's authorization, bounds and answer
shapes, the pure parts first; the decisions are the controllers' (decisions.py,
elastic.py, reassignments.py), reached through typed admin calls (protocol/admin.py).

Rules:
1. Authorization is Kafka's, checked here before any controller call (the controllers
   check it again, as the client): AlterConfigs needs ALTER_CONFIGS on the topic
   (TOPIC_AUTHORIZATION_FAILED) or, for a broker, on the cluster
   (CLUSTER_AUTHORIZATION_FAILED); ElectLeaders and AlterPartitionReassignments ALTER on
   the cluster; DescribeLogDirs, ListPartitionReassignments and DescribeQuorum DESCRIBE on
   the cluster. A refusal has the shape of Kafka's error answer for that request (its
   `getErrorResponse`): the top-level code, and the same code for every partition named
   where the answer lists them (DescribeLogDirs v1-2 has no top-level code: no results).
2. AlterConfigs (legacy) REPLACES a resource's configs: those named are set, every other
   goes back to its default, in one controller commit (the change names every config the
   resource may have: the ones not named as null). Kafka's preprocessing comes first: a
   resource named twice (each time), a config named twice, a null value or a resource type
   other than TOPIC and BROKER is INVALID_REQUEST, then authorization, then the name.
   `validate_only` takes the controllers' own decision against this broker's metadata and
   changes nothing. At most MAX_CONFIG_RESOURCES resources per request (the rest
   INVALID_REQUEST).
3. DescribeLogDirs answers for this broker alone (Kafka's clients ask each broker): one log
   dir, its data directory, with each hosted partition's stored bytes and offset lag
   (high watermark minus log end offset, 0 or more, as Kafka's), and (v4) the disk's total
   and usable bytes (-1 where unknown). Topics null: every partition hosted here.
4. Internal topics (`__consumer_offsets`) stay the brokers' own: never listed to a Kafka
   client; named in an election or a reassignment they are UNKNOWN_TOPIC_OR_PARTITION.
5. ElectLeaders: PREFERRED (0) and UNCLEAN (1) are `POST /v1/elections`'s preferred and
   unclean elections (elastic.py rules 6-7); other types are INVALID_REQUEST. A partition
   unknown to this broker's metadata is UNKNOWN_TOPIC_OR_PARTITION here, the others go to
   the controllers in one call (at most admin.MAX_PARTITIONS distinct ones: the rest
   INVALID_REQUEST); each gets its outcome: NONE, ELECTION_NOT_NEEDED,
   PREFERRED_LEADER_NOT_AVAILABLE or ELIGIBLE_LEADERS_NOT_AVAILABLE. TopicPartitions null
   elects every partition that needs it as this broker's metadata shows (not led by its
   preferred replica; without a leader), internal ones never, at most admin.MAX_PARTITIONS
   at once (the rest are the next request's), and, as Kafka, answers only those elected or
   failed.
6. AlterPartitionReassignments: each partition is answered for itself, as Kafka's
   controller does, while `POST /v1/reassignments` refuses a whole request for one bad
   item. So each item is first checked alone with the controllers' own decision against
   this broker's metadata (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
   NO_REASSIGNMENT_IN_PROGRESS; a partition named twice is INVALID_REQUEST), and the rest
   sent in calls of at most MAX_REASSIGNMENTS_PER_REQUEST items, each one commit (none
   half-applied). Should the controllers still refuse one (their metadata is ahead of
   this broker's), the item they name gets their error and the others are sent again,
   at most MAX_RESENDS times; then every item left gets the error. Replicas null cancels.
7. ListPartitionReassignments lists the partitions being moved (all, or those named that
   are), with their full replica set, adding and removing replicas.
8. DescribeQuorum describes `__cluster_metadata` partition 0 (anything else asked is
   UNKNOWN_TOPIC_OR_PARTITION per partition, as Kafka's) from the active controller's
   `GET /v1/quorum?leader=true`: leader, term as leader epoch, Raft commit index as high
   watermark, each voter's log end offset (commit index minus its lag; -1 where unknown),
   and the brokers as observers, their log end offset the high watermark minus the
   metadata batches they have yet to apply (brokers follow the metadata by version, not
   the Raft log). v1's timestamps: the leader's are now; the others' -1, unknown (Raft
   keeps none).
9. Bounds: a request holds at most what the listener decodes (200,000 items); going
   through many items lets the event loop run others (`Session._went_through`), and a
   plan over more than PLANNED_INLINE partitions (each checked against the image) runs
   on a worker thread.
"""

from __future__ import annotations

import asyncio
import collections
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, TypeVar, cast
from urllib.parse import urlsplit

from kraftlite.controller import decisions, elastic, reassignments
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.kafka.codes import (
    INVALID_REQUEST,
    MAX_ADMIN_TIMEOUT_MS,
    MAX_MESSAGE,
    NONE,
    kafka_code,
    message,
)
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.records import NO_LEADER
from kraftlite.metadata.topics import TOPIC_CONFIGS, is_internal_topic, validate_topic_name
from kraftlite.protocol import admin, names
from kraftlite.protocol.admin_bodies import (
    MAX_REASSIGNMENTS_PER_REQUEST,
    ElectionsRequest,
    PartitionReassignment,
    PartitionRef,
    ReassignmentsRequest,
)
from kraftlite.protocol.kafka import bodies
from kraftlite.protocol.kafka.messages import ApiKey, Request
from kraftlite.security.acls import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from kraftlite.kafka.handlers import ModuleHandler, Session

T = TypeVar("T")
RESOURCE_TOPIC: Final = 2  # Kafka's ConfigResource types
RESOURCE_BROKER: Final = 4
MAX_CONFIG_RESOURCES: Final = 100  # rule 2 (handlers.py's MAX_ADMIN_TOPICS)
MAX_RESENDS: Final = 3  # rule 6
PLANNED_INLINE: Final = 1_000  # rule 9: items a plan goes through on the event loop
METADATA_TOPIC: Final = "__cluster_metadata"  # rule 8
UNKNOWN_VOLUME_BYTES: Final = -1  # DescribeLogDirs' total and usable bytes, unknown
ELECTION_TYPES: Final[Mapping[int, Literal["preferred", "unclean"]]] = {
    0: "preferred",
    1: "unclean",
}
CLUSTER_AUTHORIZATION_FAILED: Final = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
UNKNOWN_TOPIC_OR_PARTITION: Final = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
ELECTION_NOT_NEEDED: Final = int(ErrorCode.ELECTION_NOT_NEEDED)
# rule 6: refusals about no item in particular (every item left gets them)
_NOT_ABOUT_AN_ITEM: Final = frozenset(
    {ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.INVALID_REQUEST}
)

TopicPartition = tuple[str, int]
Outcome = tuple[int, str | None]  # a Kafka error code and its message
OK: Final[Outcome] = (NONE, None)


def _invalid(text: str) -> KraftliteError:
    return KraftliteError(ErrorCode.INVALID_REQUEST, text)


def outcome_of(exc: KraftliteError) -> Outcome:
    return kafka_code(exc), message(exc)


def said(code: int, text: str) -> Outcome:
    return code, text[:MAX_MESSAGE]


def code_named(name: str | None) -> int:
    """A controller's error code name (an answer's `error_code`) as Kafka's code."""
    if name is None:
        return NONE
    code = ErrorCode.__members__.get(name, ErrorCode.UNKNOWN_SERVER_ERROR)
    return INVALID_REQUEST if code >= 1000 else int(code)


# -- AlterConfigs (rule 2) -------------------------------------------------------------------


def config_problems(
    resources: Sequence[bodies.AlterConfigsRequestAlterConfigsResource],
) -> dict[int, KraftliteError]:
    """Kafka's preprocessing of a legacy AlterConfigs (ConfigAdminManager.preprocess), by
    the resource's position: the errors found before any authorization."""
    seen = collections.Counter((r["resource_type"], r["resource_name"]) for r in resources)
    problems: dict[int, KraftliteError] = {}
    for n, resource in enumerate(resources):
        names_given = [c["name"] for c in resource["configs"]]
        nulls = [c["name"] for c in resource["configs"] if c["value"] is None]
        if n >= MAX_CONFIG_RESOURCES:
            problems[n] = _invalid(f"at most {MAX_CONFIG_RESOURCES} resources at once")
        elif seen[(resource["resource_type"], resource["resource_name"])] > 1:
            problems[n] = _invalid("Each resource must appear at most once.")
        elif len(set(names_given)) != len(names_given):
            problems[n] = _invalid("Error due to duplicate config keys")
        elif nulls:
            problems[n] = _invalid("Null value not supported for : " + ", ".join(nulls))
        elif resource["resource_type"] not in (RESOURCE_TOPIC, RESOURCE_BROKER):
            problems[n] = _invalid(f"Unknown resource type {resource['resource_type']}")
    return problems


def replacement(named: Mapping[str, str], known: Iterable[str]) -> dict[str, str | None]:
    """Rule 2: the change that leaves a resource with exactly the configs `named`: every
    config it may have (`known`) not named goes back to its default (None)."""
    change: dict[str, str | None] = dict.fromkeys(sorted(set(known) - set(named)))
    change.update(named)
    return change


def configs_change(
    image: MetadataImage, kind: int, name: str, named: Mapping[str, str]
) -> admin.AlterConfigsRequest | admin.AlterBrokerConfigsRequest:
    """Rule 2's controller call for an authorized resource (INVALID_TOPIC_EXCEPTION for a
    name no topic may have, INVALID_REQUEST for a broker that is no broker id)."""
    if kind == RESOURCE_TOPIC:
        validate_topic_name(name)
        topic = image.topic(name)
        known = {*TOPIC_CONFIGS, *(() if topic is None else topic.configs)}
        return admin.AlterConfigsRequest(name, dict(replacement(named, known)))
    broker_id = names.decimal(name, 10)
    if broker_id is None:
        raise _invalid(f"broker {name!r}: a broker's resource name is its id")
    known = {*elastic.BROKER_CONFIGS, *image.broker_configs.get(broker_id, {})}
    return admin.AlterBrokerConfigsRequest(broker_id, dict(replacement(named, known)))


def validate_configs_change(
    image: MetadataImage, change: admin.AlterConfigsRequest | admin.AlterBrokerConfigsRequest
) -> None:
    """`validate_only`: the controllers' own decision on this broker's metadata (raises
    what they would answer: UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, ...); no change."""
    if isinstance(change, admin.AlterConfigsRequest):
        decisions.alter_topic_configs(image, change.topic, change.configs)
    else:
        elastic.alter_broker_configs(image, change.broker_id, change.configs)


# -- DescribeLogDirs (rule 3) ----------------------------------------------------------------


class HostedLog(NamedTuple):
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int


def log_dir_topics(logs: Iterable[HostedLog]) -> list[bodies.DescribeLogDirsTopic]:
    """The hosted logs by topic, topics by name and partitions by index."""
    grouped: dict[str, list[bodies.DescribeLogDirsPartition]] = {}
    for log in sorted(logs):
        grouped.setdefault(log.topic, []).append(
            {
                "partition_index": log.partition,
                "partition_size": log.size_bytes,
                "offset_lag": log.offset_lag,
                "is_future_key": False,
            }
        )
    return [{"name": topic, "partitions": parts} for topic, parts in grouped.items()]


def log_dir_name(path: Path | str) -> str:
    """The data directory as Kafka names a log dir: absolute (the memory store's is kept)."""
    text = str(path)
    return text if text.startswith(":") else str(Path(text).absolute())


# -- ElectLeaders (rule 5) -------------------------------------------------------------------


def named_partitions(topics: Iterable[tuple[str, Iterable[int]]]) -> list[TopicPartition]:
    return [(topic, partition) for topic, partitions in topics for partition in partitions]


def election_plan(
    image: MetadataImage, named: Sequence[TopicPartition]
) -> tuple[list[TopicPartition], dict[TopicPartition, Outcome]]:
    """Which named partitions go to the controllers (each once, in order), and the
    outcome of those answered here (rules 4-5)."""
    sending: list[TopicPartition] = []
    answered: dict[TopicPartition, Outcome] = {}
    for topic, partition in dict.fromkeys(named):
        found = None if is_internal_topic(topic) else image.topic(topic)
        if found is None or partition not in found.partitions:
            answered[(topic, partition)] = (UNKNOWN_TOPIC_OR_PARTITION, "no such partition")
        elif len(sending) >= admin.MAX_PARTITIONS:
            answered[(topic, partition)] = (INVALID_REQUEST, "too many partitions at once")
        else:
            sending.append((topic, partition))
    return sending, answered


def needing_election(
    image: MetadataImage, kind: Literal["preferred", "unclean"]
) -> list[TopicPartition]:
    """Rule 5 for TopicPartitions null: the partitions an election of `kind` would change
    (not led by their preferred replica; without a leader), internal topics never, by name
    and index, at most admin.MAX_PARTITIONS (the rest are the next request's)."""
    found = sorted(
        (topic.name, index)
        for topic, index, p in image.partitions()
        if not is_internal_topic(topic.name)
        and (p.leader != p.replicas[0] if kind == "preferred" else p.leader == NO_LEADER)
    )
    return found[: admin.MAX_PARTITIONS]


def election_outcomes(
    elections: Iterable[admin.ElectionAnswer],
) -> dict[TopicPartition, Outcome]:
    return {
        (e.topic, e.partition): (code_named(e.error_code), e.message if e.error_code else None)
        for e in elections
    }


def election_results(
    partitions: Iterable[TopicPartition], outcomes: Mapping[TopicPartition, Outcome]
) -> list[bodies.ReplicaElectionResult]:
    """Each partition's outcome, grouped by topic in the order given."""
    grouped: dict[str, list[bodies.PartitionResult]] = {}
    for topic, partition in partitions:
        code, text = outcomes[(topic, partition)]
        grouped.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": code, "error_message": text}
        )
    return [{"topic": topic, "partition_result": parts} for topic, parts in grouped.items()]


def refused_elections(
    named: Sequence[TopicPartition] | None, outcome: Outcome
) -> bodies.ElectLeadersResponse:
    """Kafka's ElectLeadersRequest.getErrorResponse: the code at the top and for every
    partition named."""
    partitions = named or []
    return {
        "error_code": outcome[0],
        "replica_election_results": election_results(
            partitions, dict.fromkeys(partitions, outcome)
        ),
    }


# -- reassignments (rules 6-7) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReassignmentPlan:
    """Rule 6: what goes to the controllers (by position in the request), and the outcome
    of each item answered here."""

    sending: list[tuple[int, PartitionReassignment]]
    answered: dict[int, Outcome]


def reassignment_plan(
    image: MetadataImage, items: Sequence[tuple[str, int, list[int] | None]]
) -> ReassignmentPlan:
    """Rule 6: each item checked alone, as the controllers would check it."""
    counts = collections.Counter((topic, partition) for topic, partition, _ in items)
    sending: list[tuple[int, PartitionReassignment]] = []
    answered: dict[int, Outcome] = {}
    for n, (topic, partition, replicas) in enumerate(items):
        if counts[(topic, partition)] > 1:
            answered[n] = said(INVALID_REQUEST, f"{topic}-{partition} is named twice")
            continue
        if is_internal_topic(topic):
            answered[n] = said(UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}")
            continue
        item = PartitionReassignment(
            topic, partition, None if replicas is None else tuple(replicas)
        )
        try:
            (decided,) = reassignments.alter_reassignments(image, [item]).response
        except KraftliteError as exc:
            answered[n] = outcome_of(exc)
            continue
        if decided.error is not None:  # NO_REASSIGNMENT_IN_PROGRESS
            answered[n] = outcome_of(decided.error)
            continue
        sending.append((n, item))
    return ReassignmentPlan(sending, answered)


def refused_item(
    exc: KraftliteError, sent: Sequence[tuple[int, PartitionReassignment]]
) -> int | None:
    """Rule 6: the position of the item a controller's refusal of a whole request names,
    if it names one of `sent`."""
    if exc.code in _NOT_ABOUT_AN_ITEM:
        return None
    named = (exc.details.get("topic"), exc.details.get("partition"))
    return next((n for n, item in sent if (item.topic, item.partition) == named), None)


def reassignment_responses(
    topics: Sequence[bodies.ReassignableTopic], outcomes: Mapping[int, Outcome]
) -> list[bodies.ReassignableTopicResponse]:
    """Each item's outcome (by position), in the request's own shape."""
    responses: list[bodies.ReassignableTopicResponse] = []
    n = 0
    for topic in topics:
        parts: list[bodies.ReassignablePartitionResponse] = []
        for part in topic["partitions"]:
            code, text = outcomes[n]
            parts.append(
                {
                    "partition_index": part["partition_index"],
                    "error_code": code,
                    "error_message": text,
                }
            )
            n += 1
        responses.append({"name": topic["name"], "partitions": parts})
    return responses


def ongoing_reassignments(
    moving: Iterable[admin.ReassignmentAnswer], named: Sequence[TopicPartition] | None
) -> list[bodies.OngoingTopicReassignment]:
    """Rule 7: the partitions being moved, all or those named, by topic (internal topics
    never)."""
    wanted = None if named is None else set(named)
    grouped: dict[str, list[bodies.OngoingPartitionReassignment]] = {}
    for move in sorted(moving, key=lambda m: (m.topic, m.partition)):
        if is_internal_topic(move.topic):
            continue
        if wanted is not None and (move.topic, move.partition) not in wanted:
            continue
        grouped.setdefault(move.topic, []).append(
            {
                "partition_index": move.partition,
                "replicas": list(move.replicas),
                "adding_replicas": list(move.adding),
                "removing_replicas": list(move.removing),
            }
        )
    return [{"name": topic, "partitions": parts} for topic, parts in grouped.items()]


def refused_listing(
    topics: Sequence[bodies.ListPartitionReassignmentsTopics] | None, outcome: Outcome
) -> bodies.ListPartitionReassignmentsResponse:
    """Kafka's ListPartitionReassignmentsRequest.getErrorResponse: the code, and the
    partitions named with nothing listed."""
    return {
        "error_code": outcome[0],
        "error_message": outcome[1],
        "topics": [
            {
                "name": topic["name"],
                "partitions": [
                    {
                        "partition_index": index,
                        "replicas": [],
                        "adding_replicas": [],
                        "removing_replicas": [],
                    }
                    for index in topic["partition_indexes"]
                ],
            }
            for topic in topics or []
        ],
    }


# -- DescribeQuorum (rule 8) -----------------------------------------------------------------


def asks_for_the_metadata_log(body: bodies.DescribeQuorumRequest) -> bool:
    """Kafka's check: exactly one topic, `__cluster_metadata`, with exactly partition 0."""
    topics = body["topics"]
    return (
        len(topics) == 1
        and topics[0]["topic_name"] == METADATA_TOPIC
        and [p["partition_index"] for p in topics[0]["partitions"]] == [0]
    )


def unknown_quorum_partitions(body: bodies.DescribeQuorumRequest) -> bodies.DescribeQuorumResponse:
    """Kafka's DescribeQuorumRequest.getPartitionLevelErrorResponse."""
    return {
        "error_code": NONE,
        "topics": [
            {
                "topic_name": topic["topic_name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": UNKNOWN_TOPIC_OR_PARTITION,
                    }
                    for p in topic["partitions"]
                ],
            }
            for topic in body["topics"]
        ],
    }


_NO_DIRECTORY: Final = uuid.UUID(int=0)  # KIP-853's directory ids: kraftlite's replicas have none


def quorum_partition(
    quorum: admin.QuorumAnswer, now_ms: int
) -> bodies.DescribeQuorumResponsePartitionData:
    """Rule 8: the quorum as `__cluster_metadata` partition 0."""
    leader = NO_LEADER if quorum.leader_id is None else quorum.leader_id
    high_watermark = quorum.commit_index

    def voter(v: admin.VoterAnswer) -> bodies.ReplicaState:
        end = -1 if v.lag is None else max(high_watermark - v.lag, 0)
        seen = now_ms if v.id == leader else -1
        return {
            "replica_id": v.id,
            "replica_directory_id": _NO_DIRECTORY,
            "log_end_offset": end,
            "last_fetch_timestamp": seen,
            "last_caught_up_timestamp": seen,
        }

    return {
        "partition_index": 0,
        "error_code": NONE,
        "error_message": None,
        "leader_id": leader,
        "leader_epoch": quorum.term,
        "high_watermark": high_watermark,
        "current_voters": [voter(v) for v in sorted(quorum.voters, key=lambda v: v.id)],
        "observers": [
            {
                "replica_id": o.id,
                "replica_directory_id": _NO_DIRECTORY,
                "log_end_offset": max(high_watermark - o.lag, 0),
                "last_fetch_timestamp": -1,
                "last_caught_up_timestamp": -1,
            }
            for o in sorted(quorum.observers, key=lambda o: o.id)
        ],
    }


# -- the APIs --------------------------------------------------------------------------------


def _may_cluster(session: Session, operation: Operation) -> bool:
    return session._may(operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def _planned(items: int, plan: Callable[[], T]) -> T:
    """Rule 9: a pure plan over `items` items, on a worker thread when there are many (it
    reads an image, which is never changed: a new one replaces it)."""
    if items <= PLANNED_INLINE:
        return plan()
    return await asyncio.to_thread(plan)


async def alter_configs(session: Session, request: Request) -> bodies.AlterConfigsResponse:
    """Rule 2."""
    body = cast(bodies.AlterConfigsRequest, request.body)
    resources = body["resources"]
    await session._went_through(len(resources) + sum(len(r["configs"]) for r in resources))
    problems = config_problems(resources)
    deadline = session._admin_deadline(MAX_ADMIN_TIMEOUT_MS)
    responses: list[bodies.AlterConfigsResourceResponse] = []
    for n, resource in enumerate(resources):
        try:
            await _alter_resource(
                session, resource, problems.get(n), deadline, validate_only=body["validate_only"]
            )
        except KraftliteError as exc:
            code, text = outcome_of(exc)
        else:
            code, text = OK
        responses.append(
            {
                "error_code": code,
                "error_message": text,
                "resource_type": resource["resource_type"],
                "resource_name": resource["resource_name"],
            }
        )
    return {"responses": responses}


async def _alter_resource(
    session: Session,
    resource: bodies.AlterConfigsRequestAlterConfigsResource,
    problem: KraftliteError | None,
    deadline: float,
    *,
    validate_only: bool,
) -> None:
    """Rule 2 for one resource: preprocessed, authorized, then changed (or validated)."""
    if problem is not None:
        raise problem
    kind, name = resource["resource_type"], resource["resource_name"]
    if kind == RESOURCE_TOPIC and not session._may_topic(Operation.ALTER_CONFIGS, name):
        raise KraftliteError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized")
    if kind == RESOURCE_BROKER and not _may_cluster(session, Operation.ALTER_CONFIGS):
        raise KraftliteError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized")
    named = {c["name"]: cast(str, c["value"]) for c in resource["configs"]}  # none null
    change = configs_change(session.image, kind, name, named)
    if validate_only:
        validate_configs_change(session.image, change)
    else:
        await session._admin(deadline, change)


async def describe_log_dirs(session: Session, request: Request) -> bodies.DescribeLogDirsResponse:
    """Rule 3."""
    if not _may_cluster(session, Operation.DESCRIBE):
        return {"error_code": CLUSTER_AUTHORIZATION_FAILED, "results": []}
    asked = cast(bodies.DescribeLogDirsRequest, request.body)["topics"]
    replicas = session.service.broker.replicas
    image = session.image
    if asked is None:
        hosted = list(replicas.partitions.values())
    else:
        hosted = []
        for topic, index in dict.fromkeys(
            named_partitions((t["topic"], t["partitions"]) for t in asked)
        ):
            await session._went_through()
            found = image.topic(topic)
            held = None if found is None else replicas.partitions.get((found.topic_id, index))
            if held is not None:
                hosted.append(held)
    logs: list[HostedLog] = []
    for partition in hosted:
        await session._went_through()
        if is_internal_topic(partition.topic) or image.topic(partition.topic) is None:
            continue
        log = partition.log
        lag = max(log.high_watermark - log.log_end_offset, 0)
        logs.append(HostedLog(partition.topic, partition.index, log.size_bytes, lag))
    path = replicas.storage.config.path
    total, usable = await _disk_usage(path)
    return {
        "error_code": NONE,
        "results": [
            {
                "error_code": NONE,
                "log_dir": log_dir_name(path),
                "topics": log_dir_topics(logs),
                "total_bytes": total,
                "usable_bytes": usable,
            }
        ],
    }


async def _disk_usage(path: Path | str) -> tuple[int, int]:
    """(total, usable) bytes of the disk holding `path`, off the event loop; unknown: -1."""
    if str(path).startswith(":"):  # the memory store's ":memory:"
        return UNKNOWN_VOLUME_BYTES, UNKNOWN_VOLUME_BYTES
    try:
        usage = await asyncio.to_thread(shutil.disk_usage, path)
    except OSError:
        return UNKNOWN_VOLUME_BYTES, UNKNOWN_VOLUME_BYTES
    return usage.total, usage.free


async def elect_leaders(session: Session, request: Request) -> bodies.ElectLeadersResponse:
    """Rule 5."""
    body = cast(bodies.ElectLeadersRequest, request.body)
    asked = body["topic_partitions"]
    named = (
        None if asked is None else named_partitions((t["topic"], t["partitions"]) for t in asked)
    )
    await session._went_through(len(named or ()))
    if not _may_cluster(session, Operation.ALTER):
        return refused_elections(named, (CLUSTER_AUTHORIZATION_FAILED, "ALTER on the cluster"))
    kind = ELECTION_TYPES.get(body["election_type"])
    if kind is None:
        unknown = f"Unknown election type {body['election_type']}"
        return refused_elections(named, (INVALID_REQUEST, unknown))
    deadline = session._admin_deadline(body["timeout_ms"])
    image = session.image
    outcomes: dict[TopicPartition, Outcome]
    if named is None:
        count = sum(len(t.partitions) for t in image.topics.values())
        sending = await _planned(count, lambda: needing_election(image, kind))
        outcomes = {}
    else:
        sending, outcomes = await _planned(len(named), lambda: election_plan(image, named))
    top = NONE
    if sending:
        wanted = tuple(PartitionRef(topic, partition) for topic, partition in sending)
        try:
            elections = await session._admin(
                deadline, admin.ElectLeadersRequest(ElectionsRequest(kind, wanted))
            )
        except KraftliteError as exc:  # nothing elected: each partition sent says why
            if named is None:  # (Kafka's error answer names none then)
                return refused_elections(None, outcome_of(exc))
            top = kafka_code(exc)
            outcomes.update(dict.fromkeys(sending, outcome_of(exc)))
        else:
            decided = election_outcomes(elections)
            for tp in sending:  # (one the answer lacks: none, but never a KeyError)
                outcomes[tp] = decided.get(tp, (int(ErrorCode.UNKNOWN_SERVER_ERROR), None))
    if named is None:  # only the partitions elected or failed, as Kafka answers
        shown = [tp for tp in sending if outcomes[tp][0] != ELECTION_NOT_NEEDED]
        return {"error_code": NONE, "replica_election_results": election_results(shown, outcomes)}
    return {"error_code": top, "replica_election_results": election_results(named, outcomes)}


async def alter_partition_reassignments(
    session: Session, request: Request
) -> bodies.AlterPartitionReassignmentsResponse:
    """Rule 6."""
    body = cast(bodies.AlterPartitionReassignmentsRequest, request.body)
    topics = body["topics"]
    items = [
        (topic["name"], part["partition_index"], part["replicas"])
        for topic in topics
        for part in topic["partitions"]
    ]
    await session._went_through(len(items))
    if not _may_cluster(session, Operation.ALTER):
        refused = (CLUSTER_AUTHORIZATION_FAILED, "ALTER on the cluster is needed")
        return {
            "error_code": refused[0],
            "error_message": refused[1],
            "responses": reassignment_responses(topics, dict.fromkeys(range(len(items)), refused)),
        }
    deadline = session._admin_deadline(body["timeout_ms"])
    image = session.image
    plan = await _planned(len(items), lambda: reassignment_plan(image, items))
    outcomes = dict(plan.answered)
    for start in range(0, len(plan.sending), MAX_REASSIGNMENTS_PER_REQUEST):
        chunk = plan.sending[start : start + MAX_REASSIGNMENTS_PER_REQUEST]
        outcomes.update(await _reassign(session, deadline, chunk))
    return {
        "error_code": NONE,
        "error_message": None,
        "responses": reassignment_responses(topics, outcomes),
    }


async def _reassign(
    session: Session, deadline: float, sent: list[tuple[int, PartitionReassignment]]
) -> dict[int, Outcome]:
    """Rule 6: one call's items, each one's outcome by position."""
    outcomes: dict[int, Outcome] = {}
    for attempt in range(MAX_RESENDS + 1):
        if not sent:
            return outcomes
        wanted = ReassignmentsRequest(tuple(item for _, item in sent))
        try:
            answers = await session._admin(deadline, admin.AlterReassignmentsRequest(wanted))
        except KraftliteError as exc:
            named = refused_item(exc, sent)
            if named is None or attempt == MAX_RESENDS:
                outcomes.update(dict.fromkeys((n for n, _ in sent), outcome_of(exc)))
                return outcomes
            outcomes[named] = outcome_of(exc)
            sent = [(n, item) for n, item in sent if n != named]
            continue
        decided = {(a.topic, a.partition): (code_named(a.error_code), a.message) for a in answers}
        for n, item in sent:
            code, text = decided.get((item.topic, item.partition), (NONE, None))
            outcomes[n] = (code, text if code != NONE else None)
        return outcomes
    return outcomes


async def list_partition_reassignments(
    session: Session, request: Request
) -> bodies.ListPartitionReassignmentsResponse:
    """Rule 7."""
    body = cast(bodies.ListPartitionReassignmentsRequest, request.body)
    topics = body["topics"]
    named = (
        None
        if topics is None
        else named_partitions((t["name"], t["partition_indexes"]) for t in topics)
    )
    await session._went_through(len(named or ()))
    if not _may_cluster(session, Operation.DESCRIBE):
        return refused_listing(topics, (CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE on the cluster"))
    deadline = session._admin_deadline(body["timeout_ms"])
    try:
        moving = await session._admin(deadline, admin.ListReassignmentsRequest())
    except KraftliteError as exc:
        return refused_listing(topics, outcome_of(exc))
    await session._went_through(len(moving))
    return {
        "error_code": NONE,
        "error_message": None,
        "topics": ongoing_reassignments(moving, named),
    }


async def describe_quorum(session: Session, request: Request) -> bodies.DescribeQuorumResponse:
    """Rule 8."""
    if not _may_cluster(session, Operation.DESCRIBE):
        return {"error_code": CLUSTER_AUTHORIZATION_FAILED, "topics": []}
    body = cast(bodies.DescribeQuorumRequest, request.body)
    await session._went_through(sum(len(t["partitions"]) for t in body["topics"]))
    if not asks_for_the_metadata_log(body):
        return unknown_quorum_partitions(body)
    deadline = session._admin_deadline(MAX_ADMIN_TIMEOUT_MS)
    try:
        quorum = await session._admin(deadline, admin.DescribeQuorumRequest())
    except KraftliteError as exc:
        return {"error_code": kafka_code(exc), "topics": []}
    now_ms = session.service.broker.clock.now_ms()
    return {
        "error_code": NONE,
        "error_message": None,
        "topics": [
            {"topic_name": METADATA_TOPIC, "partitions": [quorum_partition(quorum, now_ms)]}
        ],
        "nodes": quorum_nodes(quorum, session.image.controllers),
    }


def quorum_nodes(quorum: admin.QuorumAnswer, urls: Mapping[int, str]) -> list[bodies.Node]:
    """Rule 8, v2's Nodes: each voter and the listener it serves on, its HTTP API as the
    metadata names it (RegisterControllerRecord), named by its scheme; none for a voter
    that has not announced one yet."""
    nodes: list[bodies.Node] = []
    for voter in sorted(quorum.voters, key=lambda v: v.id):
        url = urls.get(voter.id)
        address = None if url is None else urlsplit(url)
        try:
            port = None if address is None else address.port
        except ValueError:  # a port out of range: not an address a client can use
            port = None
        if address is None or not address.hostname or port is None:
            continue
        listener: bodies.Listener = {
            "name": address.scheme.upper(),
            "host": address.hostname,
            "port": port,
        }
        nodes.append({"node_id": voter.id, "listeners": [listener]})
    return nodes


APIS: Final[dict[ApiKey, ModuleHandler]] = {
    ApiKey.ALTER_CONFIGS: alter_configs,
    ApiKey.DESCRIBE_LOG_DIRS: describe_log_dirs,
    ApiKey.ELECT_LEADERS: elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: list_partition_reassignments,
    ApiKey.DESCRIBE_QUORUM: describe_quorum,
}
