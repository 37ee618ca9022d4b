"""Partition reassignment (Kafka's KIP-455): what the active controller decides when a
partition is given a new replica list, or its move is cancelled. Pure, like decisions.py.

Rules:
1. Starting a move to target T from original replicas O commits, in one change,
   replicas = T then the leaving O - T, adding = T - O, removing = O - T, the ISR within
   them. The old replicas keep serving; the new ones fetch from the leader as followers and
   join the ISR only once caught up (the leader's AlterPartition, as for any follower).
2. When every target replica is in the ISR (at the start already, or at the AlterPartition
   that adds the last one) the final list T commits in one change, with a target replica
   as leader if the leader is leaving (decisions.completed_reassignment). Brokers that are
   no longer replicas delete their logs (metadata/local_changes.py).
3. A new target for a partition that is already moving replaces the old target, relative
   to the original replicas (adding replicas it drops leave at once). The same target
   again changes nothing, so a retried request is idempotent.
4. Cancel (target None) goes back to the original replicas: adding replicas leave, the
   removing ones stay. Refused for a partition whose ISR would then be empty (only the
   adding replicas hold its latest data). No reassignment ever elects uncleanly.
5. A request is checked whole before anything is decided: its shape, that every partition
   exists, and that each target lists distinct registered brokers, the new ones live
   (unfenced, not shutting down), at least `min.insync.replicas` of them (fewer could never
   answer acks=all again). One bad item refuses the whole request, naming it;
   cancelling a partition that is not moving is reported for that partition alone.
6. Every change keeps the partition's invariants (leader in the ISR, ISR within the
   replicas) and `min.insync.replicas` keeps its meaning: the ISR only ever loses a member
   that is leaving or was never the original, and acks=all waits on the ISR as always.
   A request holds at most one Raft batch's worth of partitions and commits as one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kraftlite.controller.decisions import (
    ControllerResult,
    completed_reassignment,
    elect_leader,
    partition_change,
)
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from kraftlite.metadata.records import NO_LEADER, MetadataRecord, PartitionChangeRecord
from kraftlite.metadata.topics import effective_config
from kraftlite.protocol import admin
from kraftlite.protocol.admin_bodies import (
    MAX_REPLICAS,
    PartitionReassignment,
    ReassignmentsRequest,
)
from kraftlite.protocol.internal import MessageError

# One item of a request: move `topic`-`partition` to `replicas`, or cancel (None). A request
# holds at most one Raft batch's worth (admin_bodies.MAX_REASSIGNMENTS_PER_REQUEST): it commits
# whole, so it is never decided again half-way (rule 5 holds for every request).
Reassignment = PartitionReassignment


@dataclass(frozen=True, slots=True)
class ReassignmentOutcome:
    """The partition as the change leaves it, or why this partition was not changed."""

    topic: str
    partition: int
    registration: PartitionRegistration | None = None
    error: KraftliteError | None = None


def parse_reassignments(body: Mapping[str, Any]) -> tuple[Reassignment, ...]:
    """`POST /v1/reassignments`'s body, `{"partitions": [{"topic", "partition", "replicas":
    [ids] | null}]}`: its shape by its type (protocol/admin_bodies.py; INVALID_REQUEST),
    then each partition at most once (rule 5), before any lookup."""
    try:
        items = admin.decode(ReassignmentsRequest, body).partitions
    except MessageError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"bad body: {exc}") from None
    seen: set[tuple[str, int]] = set()
    for position, item in enumerate(items):
        if (item.topic, item.partition) in seen:
            raise KraftliteError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partitions[{position}] names {item.topic}-{item.partition} twice",
                position=position,
            )
        seen.add((item.topic, item.partition))
    return items


def alter_reassignments(
    image: MetadataImage, wanted: Sequence[Reassignment]
) -> ControllerResult[list[ReassignmentOutcome]]:
    """Start, replace or cancel the reassignments in `wanted` (rules 1-6)."""
    located = [(item, *_locate(image, item)) for item in wanted]
    for item, topic, current in located:  # rule 5: the whole request is checked first
        if item.replicas is not None:
            _check_target(image, item, topic, current)
    records: list[MetadataRecord] = []
    outcomes = []
    for item, topic, current in located:
        try:
            change = reassign(image, topic, item.partition, current, item.replicas)
        except KraftliteError as exc:
            if exc.code is not ErrorCode.NO_REASSIGNMENT_IN_PROGRESS:
                raise
            outcomes.append(ReassignmentOutcome(item.topic, item.partition, error=exc))
            continue
        after = current if change is None else current.merge(change)
        if change is not None:
            records.append(change)
        outcomes.append(ReassignmentOutcome(item.topic, item.partition, after))
    return ControllerResult(tuple(records), outcomes)


def _locate(image: MetadataImage, item: Reassignment) -> tuple[TopicImage, PartitionRegistration]:
    topic = image.topic(item.topic)
    current = None if topic is None else topic.partitions.get(item.partition)
    if topic is None or current is None:
        raise KraftliteError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"unknown partition {item.topic}-{item.partition}",
            topic=item.topic,
            partition=item.partition,
        )
    return topic, current


def _check_target(
    image: MetadataImage, item: Reassignment, topic: TopicImage, current: PartitionRegistration
) -> None:
    target = item.replicas
    assert target is not None
    where = f"{item.topic}-{item.partition}"

    def refuse(problem: str) -> KraftliteError:
        return KraftliteError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{where}: {problem}",
            topic=item.topic,
            partition=item.partition,
        )

    if not 0 < len(target) <= MAX_REPLICAS:
        raise refuse(f"the replica list must name 1-{MAX_REPLICAS} brokers")
    min_isr = int(effective_config(topic.configs, "min.insync.replicas"))
    if len(target) < min_isr:  # acks=all could never be answered again
        raise refuse(
            f"{len(target)} replicas are fewer than min.insync.replicas={min_isr}: lower it first"
        )
    if len(set(target)) != len(target):
        raise refuse(f"broker ids repeat in {list(target)}")
    unknown = [b for b in target if b not in image.brokers]
    if unknown:
        raise refuse(f"brokers {unknown} are not registered")
    new = [b for b in target if b not in current.original and not image.is_live(b)]
    if new:
        raise refuse(f"brokers {new} are not live (fenced or shutting down): no new replica there")


def reassign(
    image: MetadataImage,
    topic: TopicImage,
    index: int,
    current: PartitionRegistration,
    target: tuple[int, ...] | None,
) -> PartitionChangeRecord | None:
    """The change that starts, replaces (rules 1-3) or cancels (rule 4) `current`'s move;
    None if it changes nothing."""
    original = current.original
    if target is None:
        if not current.reassigning:
            raise KraftliteError(
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"{topic.name}-{index} is not being reassigned",
            )
        target = original
    replicas = (*target, *(b for b in original if b not in target))
    adding = tuple(b for b in target if b not in original)
    removing = tuple(b for b in original if b not in target)
    isr = tuple(b for b in current.isr if b in replicas)
    if not isr:  # only replicas the change drops hold the latest data
        raise KraftliteError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{topic.name}-{index}: every in-sync replica {list(current.isr)} would leave",
            topic=topic.name,
            partition=index,
        )
    leader = current.leader
    if leader not in isr:  # never unclean here: leave that to the fence and offline paths
        moving = PartitionRegistration(replicas, isr, NO_LEADER, 0, 0, adding, removing)
        leader, isr = elect_leader(moving, image.is_live, False, image.can_lead)
    moving = PartitionRegistration(replicas, isr, leader, 0, 0, adding, removing)
    done = completed_reassignment(moving, isr, image.is_live, image.can_lead)
    if done is not None or not moving.reassigning:
        replicas, isr, leader = done if done is not None else (replicas, isr, leader)
        adding = removing = ()
    return partition_change(
        topic.topic_id,
        index,
        current,
        leader=leader,
        isr=isr,
        replicas=replicas,
        adding=adding,
        removing=removing,
    )


def reassignment_view(topic: str, index: int, p: PartitionRegistration) -> dict[str, Any]:
    """One partition's move, as `GET /v1/reassignments` lists it."""
    return {
        "topic": topic,
        "partition": index,
        "replicas": list(p.replicas),
        "adding": list(p.adding),
        "removing": list(p.removing),
        "isr": list(p.isr),
        "leader": p.leader,
    }


def ongoing_reassignments(image: MetadataImage) -> list[dict[str, Any]]:
    """Every partition being reassigned, by topic name and index."""
    moving = [(topic.name, index, p) for topic, index, p in image.partitions() if p.reassigning]
    return [reassignment_view(*m) for m in sorted(moving, key=lambda m: (m[0], m[1]))]
