"""What the active controller decides: pure functions from (image, request) to records.

Rules:
1. A decision reads the image it is given and returns `ControllerResult(records, response)`.
   It never changes anything; the records change state only once committed and replayed,
   as one batch decided against `image.version` (stale batches are rejected at replay).
2. A request that must be refused raises KraftliteError with the contract's error code and
   produces no record at all: nothing is ever half-applied.
3. Leadership (KRaft's PartitionChangeBuilder): the leader is the first replica, in replica
   order, that is in the ISR and live (registered and unfenced). With none, the partition is
   offline (leader -1), unless `unclean.leader.election.enable` lets a live replica outside
   the ISR lead (with an ISR of itself: records it never received are lost).
4. Fencing a broker removes it from every ISR, except where it is the last member, so such a
   partition can come back with its data when the broker returns.
5. Time and randomness are arguments (`now_ms`, `rng`), so every decision is reproducible.
6. Fencing a broker, a controlled shutdown, an unfence and leader elections may commit in
   bounded batches (`atomic=False`): the first batch's worth of records commits, and the
   decision is taken again against the image that made, until the rest fits one batch.
   Every prefix is a safe change: partition changes (leaders only from the ISR) come first
   and a FenceBrokerRecord last, so until the end the broker is still live; an unfence
   comes first and its elections after. If it stops half-way (deposed, timed out, the
   broker heartbeating again), the broker is fenced again once its session expires, and
   `elect_offline_leaders` (run after every takeover and periodically) elects partitions
   left offline with a live ISR member.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from kraftlite.metadata.placement import assign_replicas
from kraftlite.metadata.records import (
    LEADER_UNCHANGED,
    NO_LEADER,
    ConfigRecord,
    ControlledShutdownRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    QuorumVotersRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from kraftlite.metadata.topics import (
    INTERNAL_TOPICS,
    check_config_combination,
    effective_config,
    validate_topic_configs,
    validate_topic_name,
)
from kraftlite.protocol import internal
from kraftlite.protocol.admin import (
    MAX_PARTITIONS,
    MAX_REPLICATION_FACTOR,
    MAX_TOPICS_PER_REQUEST,
    CreateTopicRequest,
)
from kraftlite.protocol.urls import node_url_problem, port_address_problem

T = TypeVar("T")
MAX_RACK_LENGTH = 255


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    """Records to commit as one batch, and the answer to give once they are committed.

    `atomic=False`: every prefix of the records is itself a safe change, so a large result
    may commit in several bounded batches (rule 6).
    """

    records: tuple[MetadataRecord, ...]
    response: T
    atomic: bool = True


# ------------------------------------------------------------------------------ leadership


def elect_leader(
    partition: PartitionRegistration,
    is_live: Callable[[int], bool],
    unclean: bool,
    can_lead: Callable[[int], bool] | None = None,
) -> tuple[int, tuple[int, ...]]:
    """(leader, isr) for `partition` given who is live (rule 3). `can_lead`: brokers that
    may lead when no live ISR member can (a draining one: it holds the data). An unclean
    election never picks a replica a reassignment is adding: it may hold nothing at all.
    """
    for broker_id in partition.replicas:
        if broker_id in partition.isr and is_live(broker_id):
            return broker_id, partition.isr
    if can_lead is not None:
        for broker_id in partition.replicas:
            if broker_id in partition.isr and can_lead(broker_id):
                return broker_id, partition.isr
    if unclean:
        for broker_id in partition.replicas:
            if broker_id not in partition.adding and is_live(broker_id):
                return broker_id, (broker_id,)
    return NO_LEADER, partition.isr


def partition_change(
    topic_id: str,
    index: int,
    current: PartitionRegistration,
    *,
    leader: int,
    isr: tuple[int, ...],
    replicas: tuple[int, ...] | None = None,
    adding: tuple[int, ...] | None = None,
    removing: tuple[int, ...] | None = None,
) -> PartitionChangeRecord | None:
    """The record that moves `current` to the given state (None: that field stays), or None
    if nothing changes."""
    replicas = None if replicas == current.replicas else replicas
    adding = None if adding == current.adding else adding
    removing = None if removing == current.removing else removing
    if (
        leader == current.leader
        and isr == current.isr
        and replicas is None
        and adding is None
        and removing is None
    ):
        return None
    return PartitionChangeRecord(
        topic_id=topic_id,
        partition=index,
        leader=LEADER_UNCHANGED if leader == current.leader else leader,
        isr=None if isr == current.isr else isr,
        replicas=replicas,
        adding_replicas=adding,
        removing_replicas=removing,
    )


def completed_reassignment(
    current: PartitionRegistration,
    isr: tuple[int, ...],
    is_live: Callable[[int], bool],
    can_lead: Callable[[int], bool] | None = None,
) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """KIP-455: once every target replica is in `isr`, the final (replicas, isr, leader):
    the target, the ISR within it, and a target replica as leader if the leader is leaving
    (rule 3 among the target). None while a target replica is still catching up, or while
    no target replica could lead.
    """
    if not current.reassigning:
        return None
    target = current.target
    if not set(target) <= set(isr):
        return None
    final_isr = tuple(b for b in isr if b in target)
    leader = current.leader
    if leader not in target:
        leader, _ = elect_leader(
            PartitionRegistration(target, final_isr, NO_LEADER, 0, 0),
            is_live,
            unclean=False,
            can_lead=can_lead,
        )
        if leader == NO_LEADER:
            return None
    return target, final_isr, leader


def _completion(
    topic_id: str,
    index: int,
    current: PartitionRegistration,
    done: tuple[tuple[int, ...], tuple[int, ...], int],
) -> PartitionChangeRecord | None:
    """The change that commits a completed reassignment (`completed_reassignment`'s answer)."""
    replicas, isr, leader = done
    return partition_change(
        topic_id, index, current, leader=leader, isr=isr, replicas=replicas, adding=(), removing=()
    )


def _unclean_allowed(topic: TopicImage) -> bool:
    return effective_config(topic.configs, "unclean.leader.election.enable") == "true"


def _fence_changes(image: MetadataImage, fenced: set[int]) -> list[PartitionChangeRecord]:
    """Partition changes once the brokers in `fenced` are fenced (rule 4, then rule 3)."""

    def is_live(broker_id: int) -> bool:
        return broker_id not in fenced and image.is_live(broker_id)

    def can_lead(broker_id: int) -> bool:
        return broker_id not in fenced and image.can_lead(broker_id)

    changes = []
    for topic, index, current in image.partitions():
        if not fenced & set(current.isr) and current.leader not in fenced:
            continue
        isr = tuple(b for b in current.isr if b not in fenced) or _last_member(current)
        leader = current.leader
        if leader in fenced or leader not in isr:
            leader, isr = elect_leader(
                PartitionRegistration(
                    current.replicas, isr, NO_LEADER, 0, 0, current.adding, current.removing
                ),
                is_live,
                _unclean_allowed(topic),
                can_lead,
            )
        change = partition_change(topic.topic_id, index, current, leader=leader, isr=isr)
        if change is not None:
            changes.append(change)
    return changes


def _last_member(current: PartitionRegistration) -> tuple[int, ...]:
    """Who stays in an ISR whose members are all being fenced: the leader if there is one
    (it holds everything committed), else the first member.
    """
    return (current.leader,) if current.leader in current.isr else current.isr[:1]


def _unfence_changes(image: MetadataImage, broker_id: int) -> list[PartitionChangeRecord]:
    """Offline partitions that `broker_id` coming back can bring online."""

    def is_live(candidate: int) -> bool:
        return candidate == broker_id or image.is_live(candidate)

    changes = []
    for topic, index, current in image.partitions():
        if current.leader != NO_LEADER or broker_id not in current.replicas:
            continue
        leader, isr = elect_leader(current, is_live, _unclean_allowed(topic), image.can_lead)
        change = partition_change(topic.topic_id, index, current, leader=leader, isr=isr)
        if change is not None:
            changes.append(change)
    return changes


def elect_preferred_leaders(image: MetadataImage) -> ControllerResult[int]:
    """Move leadership back to each partition's preferred (first) replica where it is live
    and in the ISR (Kafka's auto leader rebalance). Responds with the number of moves.
    """
    changes = []
    for topic, index, current in image.partitions():
        preferred = current.replicas[0]
        if current.leader != preferred and preferred in current.isr and image.is_live(preferred):
            change = partition_change(
                topic.topic_id, index, current, leader=preferred, isr=current.isr
            )
            if change is not None:
                changes.append(change)
    return ControllerResult(tuple(changes), len(changes), atomic=False)


def complete_reassignments(image: MetadataImage) -> ControllerResult[int]:
    """Complete every move whose target is all in the ISR but that no AlterPartition
    completed (its target had no replica that could lead then: a draining one since
    live, a fenced one back). Run with the periodic elections. Responds with the count."""
    changes = []
    for topic, index, current in image.partitions():
        if not current.reassigning:
            continue
        done = completed_reassignment(current, current.isr, image.is_live, image.can_lead)
        if done is None:
            continue
        change = _completion(topic.topic_id, index, current, done)
        if change is not None:
            changes.append(change)
    return ControllerResult(tuple(changes), len(changes), atomic=False)


def elect_offline_leaders(image: MetadataImage) -> ControllerResult[int]:
    """Elect a leader (rule 3) for every offline partition that has a live ISR member, or
    any live replica where unclean election is on. Nothing normally leaves one behind:
    fencing elects at once and an unfence elects what the broker brings back; this repairs
    what a batched decision stopped half-way left (rule 6). Responds with the count.
    """
    changes = []
    for topic, index, current in image.partitions():
        if current.leader != NO_LEADER:
            continue
        leader, isr = elect_leader(current, image.is_live, _unclean_allowed(topic), image.can_lead)
        change = partition_change(topic.topic_id, index, current, leader=leader, isr=isr)
        if change is not None:
            changes.append(change)
    return ControllerResult(tuple(changes), len(changes), atomic=False)


# ------------------------------------------------------------------------------ controllers


def register_controller(image: MetadataImage, node_id: int, url: str) -> ControllerResult[None]:
    """Record the HTTP URL a quorum voter serves on (nothing if already known)."""
    if image.controllers.get(node_id) == url:
        return ControllerResult((), None)
    return ControllerResult((RegisterControllerRecord(node_id=node_id, url=url),), None)


def record_voters(
    image: MetadataImage,
    voters: Mapping[str, int],
    node_id: int | None = None,
    url: str | None = None,
) -> ControllerResult[None]:
    """The quorum's voters after a membership change (Raft address -> node id), and a new
    voter's HTTP URL so every node can forward to it once it leads."""
    ordered = sorted(((a, n) for a, n in voters.items() if n >= 0), key=lambda v: v[1])
    records: list[MetadataRecord] = [
        QuorumVotersRecord(
            node_ids=tuple(n for _, n in ordered), raft_addresses=tuple(a for a, _ in ordered)
        )
    ]
    if node_id is not None and url is not None and image.controllers.get(node_id) != url:
        records.append(RegisterControllerRecord(node_id=node_id, url=url))
    if image.voters == {n: a for a, n in ordered if n >= 0} and len(records) == 1:
        return ControllerResult((), None)
    return ControllerResult(tuple(records), None)


# ------------------------------------------------------------------------------ brokers


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    broker_epoch: int
    fenced: bool
    shutting_down: bool


def register_broker(
    image: MetadataImage,
    broker_id: int,
    incarnation_id: str,
    url: str,
    rack: str | None,
    *,
    kafka: str | None = None,
) -> ControllerResult[int]:
    """Register a broker; the response is its broker epoch.

    The same incarnation registering again (a retry) gets its epoch back and changes nothing.
    A new incarnation (the process restarted) gets a new epoch and starts fenced, so every
    partition it led elects another leader in the same batch.
    """
    if broker_id < 0:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"broker id {broker_id} is negative")
    problem = node_url_problem(url)
    if problem is not None:  # other brokers send partition traffic and client requests there
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"broker url {url!r} {problem}")
    if rack is not None and not (0 < len(rack) <= MAX_RACK_LENGTH and rack.isprintable()):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, f"rack must be 1-{MAX_RACK_LENGTH} printable characters"
        )
    if kafka is not None and (problem := port_address_problem(kafka)) is not None:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"kafka address {kafka!r} {problem}")
    existing = image.brokers.get(broker_id)
    if existing is not None and existing.incarnation_id == incarnation_id:
        return ControllerResult((), existing.broker_epoch)
    epoch = image.version + 1
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=epoch,
            url=url,
            rack=rack,
            kafka=kafka,
        )
    ]
    if existing is not None:
        records += _fence_changes(image, {broker_id})
    return ControllerResult(tuple(records), epoch)


def _registered(image: MetadataImage, broker_id: int, broker_epoch: int) -> None:
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise KraftliteError(
            ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered"
        )
    if broker.broker_epoch != broker_epoch:
        raise KraftliteError(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker {broker_id} epoch {broker_epoch} is not the registered {broker.broker_epoch}",
        )


def broker_heartbeat(
    image: MetadataImage,
    broker_id: int,
    broker_epoch: int,
    metadata_version: int,
    want_shutdown: bool = False,
    *,
    may_unfence: bool = True,
) -> ControllerResult[BrokerHeartbeatResponse]:
    """A broker's periodic heartbeat (its session is tracked outside the image).

    A fenced broker is unfenced once it has replayed metadata up to its own registration
    (`metadata_version >= broker_epoch`), unless `may_unfence` is False (the heartbeat was
    sent before the broker asked to shut down). A broker that asks to shut down is fenced,
    which moves its leaderships away first (Kafka's controlled shutdown).
    """
    _registered(image, broker_id, broker_epoch)
    broker = image.brokers[broker_id]
    records: list[MetadataRecord] = []
    fenced = broker.fenced
    atomic = True
    if want_shutdown and not broker.fenced:
        # Ineligible first, so leaders stop proposing it for ISRs while its partitions move
        # (rule 6: a shutdown may commit in several batches); then moves; then the fence.
        if not broker.in_controlled_shutdown:
            records.append(ControlledShutdownRecord(broker_id=broker_id, broker_epoch=broker_epoch))
        records += _fence_changes(image, {broker_id})
        records.append(FenceBrokerRecord(broker_id=broker_id, broker_epoch=broker_epoch))
        fenced, atomic = True, False
    elif not want_shutdown and may_unfence and broker.fenced and metadata_version >= broker_epoch:
        records = [UnfenceBrokerRecord(broker_id=broker_id, broker_epoch=broker_epoch)]
        records += _unfence_changes(image, broker_id)
        fenced, atomic = False, False  # any prefix: the broker is live, some elected
    return ControllerResult(
        tuple(records), BrokerHeartbeatResponse(broker_epoch, fenced, want_shutdown), atomic
    )


def fence_expired_brokers(
    image: MetadataImage, expired: Iterable[int]
) -> ControllerResult[list[int]]:
    """Fence the unfenced brokers among `expired` (no heartbeat within the session timeout;
    a broker that died in a controlled shutdown included)."""
    unfenced = set(image.unfenced_broker_ids())
    to_fence = sorted(b for b in set(expired) if b in unfenced)
    if not to_fence:
        return ControllerResult((), [])
    records: list[MetadataRecord] = [*_fence_changes(image, set(to_fence))]
    records += [
        FenceBrokerRecord(broker_id=b, broker_epoch=image.brokers[b].broker_epoch) for b in to_fence
    ]
    return ControllerResult(tuple(records), to_fence, atomic=False)


# ------------------------------------------------------------------------------ topics


def _topic_id(rng: random.Random) -> str:
    return f"{rng.getrandbits(128):032x}"


def _placement_brokers(image: MetadataImage) -> dict[int, str | None]:
    return {b: image.brokers[b].rack for b in image.live_broker_ids()}


def create_topic(
    image: MetadataImage,
    name: object,
    partitions: object = 1,
    replication_factor: object = None,
    configs: object = None,
    *,
    rng: random.Random,
    internal: bool = False,
    replica_assignment: Sequence[Sequence[int]] | None = None,
) -> ControllerResult[str]:
    """Create a topic; the response is its topic id. Replicas are placed on live brokers,
    or where `replica_assignment` says (`_manual_assignment`: then it gives the partition
    count and the replication factor, and `partitions` and `replication_factor` are not
    read)."""
    validate_topic_name(name, internal=internal)
    assert isinstance(name, str)
    if name in image.topic_ids:
        raise KraftliteError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name} already exists")
    if replica_assignment is not None:
        placed = _manual_assignment(image, replica_assignment)
        return _topic_records(name, placed, configs, rng)
    if (
        isinstance(partitions, bool)
        or not isinstance(partitions, int)
        or not (0 < partitions <= MAX_PARTITIONS)
    ):
        raise KraftliteError(
            ErrorCode.INVALID_PARTITIONS, f"partitions must be 1-{MAX_PARTITIONS}: {partitions!r}"
        )
    brokers = _placement_brokers(image)
    if not brokers:
        raise KraftliteError(
            ErrorCode.INVALID_REPLICATION_FACTOR, "no live brokers to place replicas on"
        )
    factor = min(3, len(brokers)) if replication_factor is None else replication_factor
    if isinstance(factor, bool) or not isinstance(factor, int) or not 0 < factor <= len(brokers):
        raise KraftliteError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {factor!r} needs 1-{len(brokers)} (live brokers: {len(brokers)})",
        )
    placed = [(r, r) for r in assign_replicas(brokers, partitions, factor, rng)]
    return _topic_records(name, placed, configs, rng)


def _topic_records(
    name: str,
    placed: Sequence[tuple[tuple[int, ...], tuple[int, ...]]],
    configs: object,
    rng: random.Random,
) -> ControllerResult[str]:
    """A new topic's records: each partition's (replicas, ISR), the first of the ISR its
    leader."""
    checked = validate_topic_configs({} if configs is None else configs)
    check_config_combination({k: v for k, v in checked.items() if v is not None})
    topic_id = _topic_id(rng)
    records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
    records += [
        ConfigRecord(topic_id=topic_id, name=key, value=value)
        for key, value in sorted(checked.items())
        if value is not None
    ]
    for index, (replicas, isr) in enumerate(placed):
        records.append(
            PartitionRecord(
                topic_id=topic_id, partition=index, replicas=replicas, isr=isr, leader=isr[0]
            )
        )
    return ControllerResult(tuple(records), topic_id)


def _manual_assignment(
    image: MetadataImage, assignment: Sequence[Sequence[int]]
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Kafka's CreateTopics with replica assignments (KRaft's rules): 1 to MAX_PARTITIONS
    partitions, each with the same number of distinct registered brokers; its ISR the
    live ones among them (a fenced broker joins when it fetches again), led by the first
    of them; a partition with no live replica is refused. INVALID_REPLICA_ASSIGNMENT."""

    def refuse(why: str) -> KraftliteError:
        return KraftliteError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, why)

    if not 0 < len(assignment) <= MAX_PARTITIONS:
        raise refuse(f"an assignment names 1-{MAX_PARTITIONS} partitions")
    factor = len(assignment[0])
    placed = []
    for index, replicas in enumerate(assignment):
        if len(replicas) != factor or factor == 0:
            raise refuse(f"partition {index} has {len(replicas)} replicas, partition 0 {factor}")
        if len(set(replicas)) != len(replicas):
            raise refuse(f"partition {index} names a broker twice: {list(replicas)}")
        unknown = [b for b in replicas if b not in image.brokers]
        if unknown:
            raise refuse(f"partition {index} names brokers that are not registered: {unknown}")
        isr = tuple(b for b in replicas if image.is_live(b))
        if not isr:
            raise refuse(f"every broker of partition {index} is fenced or shutting down")
        placed.append((tuple(replicas), isr))
    return placed


@dataclass(frozen=True, slots=True)
class TopicCreated:
    """One topic's outcome in a CreateTopics: its id, or the error that refused it, or
    (validate_only) the topic it would be."""

    name: str
    topic_id: str | None = None
    error: KraftliteError | None = None
    would_be: dict[str, object] | None = None


def create_topics(
    image: MetadataImage, specs: Sequence[CreateTopicRequest], *, rng: random.Random
) -> ControllerResult[list[TopicCreated]]:
    """Create many topics in one decision and one batch (Kafka's CreateTopics). A request
    that is itself wrong (a bad name, count or config in any topic) is refused whole; a
    topic refused by the cluster's state (it exists, named twice, more replicas than live
    brokers) gets its own error and the others are still created. At most
    MAX_TOPICS_PER_REQUEST topics and MAX_PARTITIONS partitions in all, so the batch stays a
    bounded Raft entry.
    """
    if not 0 < len(specs) <= MAX_TOPICS_PER_REQUEST:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"topics must be a list of 1-{MAX_TOPICS_PER_REQUEST} topic objects",
        )
    for spec in specs:  # what the request itself gets wrong refuses it whole
        _check_topic_spec(spec)
    total = sum(spec.partition_count for spec in specs)
    if total > MAX_PARTITIONS:
        raise KraftliteError(
            ErrorCode.INVALID_PARTITIONS,
            f"{total} partitions in one request; at most {MAX_PARTITIONS}",
        )
    records: list[MetadataRecord] = []
    outcomes = []
    seen: set[str] = set()
    for spec in specs:
        name = spec.name
        if name in seen:
            twice = KraftliteError(ErrorCode.TOPIC_ALREADY_EXISTS, f"{name} is named twice")
            outcomes.append(TopicCreated(name, error=twice))
            continue
        try:
            result = create_topic(
                image,
                name,
                spec.partitions,
                spec.replication_factor,
                spec.configs,
                rng=rng,
                replica_assignment=spec.replica_assignment,
            )
        except KraftliteError as exc:
            outcomes.append(TopicCreated(name, error=exc))
            continue
        if spec.validate_only:  # checked against the image as it is; nothing of it kept
            outcomes.append(TopicCreated(name, would_be=would_be_topic(name, result)))
            continue
        seen.add(name)
        records += result.records
        outcomes.append(TopicCreated(name, result.response))
    return ControllerResult(tuple(records), outcomes)


def _check_topic_spec(spec: CreateTopicRequest) -> None:
    """The checks of `create_topic` that need no image: a name, counts and configs."""
    validate_topic_name(spec.name)
    if not 0 < spec.partitions <= MAX_PARTITIONS:
        raise KraftliteError(
            ErrorCode.INVALID_PARTITIONS,
            f"partitions must be 1-{MAX_PARTITIONS}: {spec.partitions!r}",
        )
    factor = spec.replication_factor
    if factor is not None and not 0 < factor <= MAX_REPLICATION_FACTOR:
        raise KraftliteError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {factor!r} is not 1-{MAX_REPLICATION_FACTOR}",
        )
    checked = validate_topic_configs({} if spec.configs is None else spec.configs)
    check_config_combination({k: v for k, v in checked.items() if v is not None})


def _existing_topic(image: MetadataImage, name: str) -> TopicImage:
    topic = image.topic(name)
    if topic is None:
        raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    return topic


def delete_topic(image: MetadataImage, name: str) -> ControllerResult[str]:
    if name in INTERNAL_TOPICS:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"{name} is internal: it cannot be deleted")
    topic = _existing_topic(image, name)
    return ControllerResult((RemoveTopicRecord(topic_id=topic.topic_id),), topic.topic_id)


def create_partitions(
    image: MetadataImage,
    name: str,
    count: object,
    *,
    rng: random.Random,
    assignments: Sequence[Sequence[int]] | None = None,
) -> ControllerResult[int]:
    """Grow topic `name` to `count` partitions (never shrink, as Kafka). The new ones are
    placed as a new topic's, or where `assignments` says: one entry per new partition, each
    with the topic's replication factor, under `_manual_assignment`'s rules (Kafka's
    CreatePartitions assignments; INVALID_REPLICA_ASSIGNMENT)."""
    topic = _existing_topic(image, name)
    current = len(topic.partitions)
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or not (current < count <= MAX_PARTITIONS)
    ):
        raise KraftliteError(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {name} has {current} partitions; count must be {current + 1}-{MAX_PARTITIONS}",
        )
    factor = len(topic.partitions[0].target)
    placed: Sequence[tuple[tuple[int, ...], tuple[int, ...]]]
    if assignments is not None:
        if len(assignments) != count - current:
            raise KraftliteError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{count - current} partitions are added but {len(assignments)} assigned",
            )
        placed = _manual_assignment(image, assignments)
        if len(placed[0][0]) != factor:
            raise KraftliteError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"topic {name} has replication factor {factor}; the assignment {len(placed[0][0])}",
            )
    else:
        brokers = _placement_brokers(image)
        if factor > len(brokers):
            raise KraftliteError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"topic {name} has replication factor {factor} but {len(brokers)} live brokers",
            )
        placed = [
            (replicas, replicas)
            for replicas in assign_replicas(
                brokers, count - current, factor, rng, first_partition=current
            )
        ]
    records = tuple(
        PartitionRecord(
            topic_id=topic.topic_id,
            partition=current + i,
            replicas=replicas,
            isr=isr,
            leader=isr[0],
        )
        for i, (replicas, isr) in enumerate(placed)
    )
    return ControllerResult(records, count)


def alter_topic_configs(
    image: MetadataImage, name: str, configs: object
) -> ControllerResult[dict[str, str]]:
    """Set (value) or reset (None) topic configs; the response is the resulting configs."""
    topic = _existing_topic(image, name)
    checked = validate_topic_configs(configs)
    records = tuple(
        ConfigRecord(topic_id=topic.topic_id, name=key, value=value)
        for key, value in sorted(checked.items())
    )
    result = {**topic.configs, **{k: v for k, v in checked.items() if v is not None}}
    for key, value in checked.items():
        if value is None:
            result.pop(key, None)
    check_config_combination(result)
    return ControllerResult(records, result)


# ------------------------------------------------------------------------------ ISR changes


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """A partition leader asks to change its ISR (KIP-497)."""

    broker_id: int
    broker_epoch: int
    topic_id: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


def alter_partition(
    image: MetadataImage, request: AlterPartitionRequest
) -> ControllerResult[PartitionRegistration]:
    """Check and apply an ISR change; the response is the committed partition state.

    Checks in Kafka's order: broker epoch, partition exists, sender leads it in the current
    leader epoch, partition epoch (compare-and-set), then the new ISR itself: it contains the
    leader, lies within the replicas, and adds only live brokers.
    """
    _registered(image, request.broker_id, request.broker_epoch)
    topic = image.topics.get(request.topic_id)
    current = None if topic is None else topic.partitions.get(request.partition)
    if topic is None or current is None:
        raise KraftliteError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"unknown partition {request.topic_id}/{request.partition}",
        )
    if request.leader_epoch != current.leader_epoch:
        raise KraftliteError(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"leader epoch {request.leader_epoch} is not the current {current.leader_epoch}",
        )
    if request.broker_id != current.leader:
        raise KraftliteError(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {request.broker_id} does not lead this partition (leader {current.leader})",
            leader_id=current.leader,
        )
    new_isr = tuple(request.new_isr)
    if request.partition_epoch != current.partition_epoch:
        if new_isr == current.isr:  # a retry of a change that was already committed
            return ControllerResult((), current)
        raise KraftliteError(
            ErrorCode.INVALID_UPDATE_VERSION,
            f"partition epoch {request.partition_epoch} is not the current "
            f"{current.partition_epoch}",
        )
    if (
        current.leader not in new_isr
        or not set(new_isr) <= set(current.replicas)
        or len(set(new_isr)) != len(new_isr)
    ):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"ISR {list(new_isr)} must hold the leader and distinct replicas of "
            f"{list(current.replicas)}",
        )
    ineligible = [b for b in new_isr if b not in current.isr and not image.is_live(b)]
    if ineligible:
        raise KraftliteError(
            ErrorCode.INELIGIBLE_REPLICA, f"fenced brokers {ineligible} cannot join the ISR"
        )
    done = completed_reassignment(current, new_isr, image.is_live, image.can_lead)
    if done is not None:  # the last target replica joined: the reassignment completes
        change = _completion(topic.topic_id, request.partition, current, done)
    else:
        change = partition_change(
            topic.topic_id, request.partition, current, leader=current.leader, isr=new_isr
        )
    if change is None:
        return ControllerResult((), current)
    return ControllerResult((change,), current.merge(change))


def alter_partitions(
    image: MetadataImage, request: internal.AlterPartitionRequest
) -> ControllerResult[internal.AlterPartitionResponse]:
    """Many partitions' ISR changes from one leader, decided together (Kafka's AlterPartition
    carries many): the acceptable ones commit in one batch, each refused one gets its own
    error and changes nothing. A sender that is not the registered broker is refused whole.
    """
    _registered(image, request.broker_id, request.broker_epoch)
    records: list[MetadataRecord] = []
    results = []
    for change in request.changes:
        try:
            decided = alter_partition(
                image,
                AlterPartitionRequest(
                    request.broker_id,
                    request.broker_epoch,
                    change.topic_id,
                    change.partition,
                    change.leader_epoch,
                    change.partition_epoch,
                    change.new_isr,
                ),
            )
        except KraftliteError as exc:
            results.append(
                internal.IsrChangeResult(
                    change.topic_id, change.partition, error_code=exc.code.name, message=exc.message
                )
            )
            continue
        records.extend(decided.records)
        state = decided.response
        results.append(
            internal.IsrChangeResult.committed(
                change.topic_id,
                change.partition,
                internal.PartitionState(
                    state.leader,
                    state.leader_epoch,
                    state.partition_epoch,
                    state.isr,
                    state.replicas,
                ),
            )
        )
    return ControllerResult(tuple(records), internal.AlterPartitionResponse(tuple(results)))


def topic_partition_counts(image: MetadataImage) -> Mapping[str, int]:
    return {topic.name: len(topic.partitions) for topic in image.topics.values()}


def would_be_topic(name: str, result: ControllerResult[str]) -> dict[str, object]:
    """What `create_topic`'s records would make of topic `name`, as the API shows a topic
    (its `topic_id` empty: nothing was created; Kafka's validate_only)."""
    configs = {r.name: r.value for r in result.records if isinstance(r, ConfigRecord)}
    partitions = [
        {
            "partition": r.partition,
            "leader": r.leader,
            "replicas": list(r.replicas),
            "isr": list(r.isr),
        }
        for r in result.records
        if isinstance(r, PartitionRecord)
    ]
    return {"name": name, "topic_id": "", "configs": configs, "partitions": partitions}
