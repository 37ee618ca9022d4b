"""The elastic cluster: what the active controller decides to add, drain, remove or replace
brokers, rebalance replicas and leaders, and change a topic's replication factor. Pure,
like decisions.py; every data move is a reassignment (reassignments.py, KIP-455), so the
new replicas catch up before an old one leaves and nothing acknowledged is lost.

Rules:
1. Brokers' states: `draining` (replicas leaving, BrokerDrainRecord) or `drained` (all
   left), else `fenced` or `active`. A draining broker is not live (image.is_live): it
   joins no ISR and receives no replica, and it leads only where no live in-sync replica
   can (image.can_lead: it may hold a partition's only live copy); it stays draining
   across restarts until the drain is undone.
2. Plans come from metadata/rebalance.py over the live brokers; brokers that are draining
   are evacuated by every plan; fenced ones keep their replicas (a restart is no reason to
   move data) unless they are being replaced (rule 5). A partition already moving counts
   with its target, which a rebalance may replace by a better one.
3. Drain: the broker is marked draining, its leaderships move to other in-sync replicas in
   the same batch (leaders first), and its replicas are reassigned. Refused when its
   replicas have nowhere to go (fewer live brokers than a partition's replication factor).
4. Remove (unregister): only a stopped (fenced) broker that holds no replica (409
   BROKER_IN_USE otherwise: a running one would register again at once, as a new broker).
   `force` removes a dead (fenced) broker that still holds replicas: each of its replicas
   is replaced at once by a new one on a live broker (an adding replica that catches up
   from the leader), in the batch that unregisters it; refused if the broker is the last
   in-sync replica of a partition (its data exists nowhere else).
5. Self-healing: a broker fenced for longer than `broker.replacement.delay.ms` has its
   replicas reassigned onto live brokers (evacuated as by a drain), which restores every
   partition's replication factor; only partitions with a live in-sync replica to copy
   from, and never by an unclean election.
6. A preferred leader election moves leadership to each partition's first replica where
   that one is live and in the ISR; otherwise that partition's answer says why.
7. An unclean election (Kafka's UNCLEAN, KIP-460) gives a partition without a leader one,
   as decisions.py rule 3 with unclean election on, whatever the topic's config says (an
   operator asked for it: records only the lost in-sync replicas held are lost); a
   partition with a leader answers ELECTION_NOT_NEEDED, one with no live replica (other
   than one being added) ELIGIBLE_LEADERS_NOT_AVAILABLE. Never an internal topic's: the
   brokers' own state (committed offsets) would be lost with them, so they are left out of
   "every partition without a leader" and a named one answers INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kraftlite.controller.decisions import ControllerResult, elect_leader, partition_change
from kraftlite.controller.reassignments import reassign
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata import rebalance
from kraftlite.metadata.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from kraftlite.metadata.records import (
    NO_LEADER,
    BrokerConfigRecord,
    BrokerDrainRecord,
    MetadataRecord,
    UnregisterBrokerRecord,
)
from kraftlite.metadata.topics import effective_config, is_internal_topic
from kraftlite.protocol.admin_bodies import PartitionRef

# ------------------------------------------------------------------------------ views


def broker_state(broker: BrokerRegistration, replicas: int) -> str:
    """Rule 1."""
    if broker.draining:
        return "drained" if replicas == 0 else "draining"
    return "fenced" if broker.fenced else "active"


def broker_views(image: MetadataImage) -> list[dict[str, Any]]:
    """`GET /v1/brokers`: every registered broker with its state, replicas and leaders."""
    replicas = dict.fromkeys(image.brokers, 0)
    leaders = dict.fromkeys(image.brokers, 0)
    for _, _, p in image.partitions():
        for b in p.replicas:
            replicas[b] = replicas.get(b, 0) + 1
        if p.leader in leaders:
            leaders[p.leader] += 1
    return [
        {
            "id": b.broker_id,
            "url": b.url,
            "kafka": b.kafka,
            "rack": b.rack,
            "state": broker_state(b, replicas[b.broker_id]),
            "replicas": replicas[b.broker_id],
            "leaders": leaders[b.broker_id],
            "fenced": b.fenced,
            "draining": b.draining,
            "in_controlled_shutdown": b.in_controlled_shutdown,
            "broker_epoch": b.broker_epoch,
        }
        for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)
    ]


def broker_view(image: MetadataImage, broker_id: int) -> dict[str, Any]:
    _registered(image, broker_id)
    return next(v for v in broker_views(image) if v["id"] == broker_id)


def broker_configs_view(image: MetadataImage, broker_id: int) -> dict[str, Any]:
    """A broker's dynamic configs (`GET`/`PUT /v1/brokers/{id}/configs`)."""
    _registered(image, broker_id)
    return {
        "id": broker_id,
        "configs": dict(sorted(image.broker_configs.get(broker_id, {}).items())),
    }


def move_view(move: rebalance.Move) -> dict[str, Any]:
    return {
        "topic": move.topic,
        "partition": move.partition,
        "from": list(move.old),
        "to": list(move.new),
    }


def _registered(image: MetadataImage, broker_id: int) -> BrokerRegistration:
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise KraftliteError(
            ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered"
        )
    return broker


# ------------------------------------------------------------------------------ plans


def _placement(image: MetadataImage) -> dict[int, str | None]:
    return {b: image.brokers[b].rack for b in image.live_broker_ids()}


def _assignments(image: MetadataImage, *, moving: bool) -> list[rebalance.PartitionAssignment]:
    """Every partition as the planner sees it (its target if it is moving); partitions
    already moving only if `moving`."""
    return [
        rebalance.PartitionAssignment(topic.name, index, p.target, p.isr)
        for topic, index, p in image.partitions()
        if moving or not p.reassigning
    ]


def _plan(
    image: MetadataImage,
    evacuate: Collection[int],
    *,
    moving: bool,
    leaders: bool,
) -> list[rebalance.Move]:
    draining = [b for b, r in image.brokers.items() if r.draining]
    try:
        return rebalance.plan_rebalance(
            _assignments(image, moving=moving),
            _placement(image),
            evacuate={*evacuate, *draining},
            leaders=leaders,
        )
    except ValueError as exc:
        raise KraftliteError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None


def _execute(image: MetadataImage, moves: Iterable[rebalance.Move]) -> list[MetadataRecord]:
    """Each move as a reassignment of its partition (reassignments.py)."""
    records: list[MetadataRecord] = []
    for move in moves:
        topic = image.topic(move.topic)
        assert topic is not None, move
        current = topic.partitions[move.partition]
        change = reassign(image, topic, move.partition, current, move.new)
        if change is not None:
            records.append(change)
    return records


def rebalance_cluster(
    image: MetadataImage, *, dry_run: bool
) -> ControllerResult[list[rebalance.Move]]:
    """Even out replicas and preferred leaders over the live brokers (rule 2)."""
    if len(image.live_broker_ids()) < 2:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "a rebalance needs at least 2 live brokers")
    # moving partitions count with their targets (a plan decided again after part of it
    # committed sees its own moves), and may be given a better target
    moves = _plan(image, (), moving=True, leaders=True)
    records = () if dry_run else tuple(_execute(image, moves))
    return ControllerResult(records, moves, atomic=False)


def drain_broker(image: MetadataImage, broker_id: int) -> ControllerResult[list[rebalance.Move]]:
    """Rule 3. Draining again re-plans what is left (a move onto a broker that died since)."""
    broker = _registered(image, broker_id)
    records: list[MetadataRecord] = []
    if not broker.draining:
        records.append(BrokerDrainRecord(broker_id=broker_id, draining=True))
    moves = _evacuating(_plan(image, {broker_id}, moving=True, leaders=False), {broker_id})
    drained = _without(image, broker_id)
    records += _lead_elsewhere(image, drained, broker_id)
    records += _execute(drained, moves)
    return ControllerResult(tuple(records), moves, atomic=False)


def stop_draining(image: MetadataImage, broker_id: int) -> ControllerResult[None]:
    """Undo a drain: the broker is live again (moves already started go on; cancel them
    with the reassignments API, or rebalance to bring replicas back)."""
    broker = _registered(image, broker_id)
    if not broker.draining:
        return ControllerResult((), None)
    return ControllerResult((BrokerDrainRecord(broker_id=broker_id, draining=False),), None)


def _without(image: MetadataImage, broker_id: int) -> MetadataImage:
    """`image` as deciding sees it once `broker_id` is draining (no longer live)."""
    brokers = dict(image.brokers)
    brokers[broker_id] = replace(brokers[broker_id], draining=True)
    return replace(image, brokers=brokers)


def _lead_elsewhere(
    image: MetadataImage, drained: MetadataImage, broker_id: int
) -> list[MetadataRecord]:
    """Leaderships of `broker_id` moved to another live in-sync replica where one exists."""
    changes: list[MetadataRecord] = []
    for topic, index, p in image.partitions():
        if p.leader != broker_id:
            continue
        others = PartitionRegistration(p.replicas, p.isr, NO_LEADER, 0, 0)
        leader, _ = elect_leader(others, drained.is_live, unclean=False)
        if leader == NO_LEADER:
            continue  # nobody else in sync yet: the reassignment moves it on completion
        change = partition_change(topic.topic_id, index, p, leader=leader, isr=p.isr)
        if change is not None:
            changes.append(change)
    return changes


def replace_dead_brokers(
    image: MetadataImage, dead: Collection[int]
) -> ControllerResult[list[rebalance.Move]]:
    """Rule 5: the replicas of brokers fenced too long move to live brokers. Only where a
    live replica in the ISR can serve the copy (a partition whose every in-sync replica is
    dead waits for one to return: a new replica would have nothing to copy); a partition
    that cannot be placed is skipped, not the others."""
    gone = {b for b in dead if b in image.brokers and image.brokers[b].fenced}
    holding = [
        (t, i, p)
        for t, i, p in image.partitions()
        if gone & set(p.target) and any(image.can_lead(b) for b in p.isr)
    ]
    if not holding:
        return ControllerResult((), [])
    try:
        moves = _evacuating(_plan(image, gone, moving=True, leaders=False), gone)
    except KraftliteError:  # one partition has nowhere to go: place the rest one by one
        moves = []
        for t, i, p in holding:
            one = [rebalance.PartitionAssignment(t.name, i, p.target, p.isr)]
            try:
                moves += rebalance.plan_rebalance(
                    one, _placement(image), evacuate=gone, leaders=False
                )
            except ValueError:
                continue
    eligible = {(t.name, i) for t, i, _ in holding}
    moves = [m for m in moves if (m.topic, m.partition) in eligible]
    return ControllerResult(tuple(_execute(image, moves)), moves, atomic=False)


def _evacuating(moves: list[rebalance.Move], brokers: Collection[int]) -> list[rebalance.Move]:
    """Only the moves that take replicas off `brokers` (not the plan's balancing besides)."""
    return [m for m in moves if any(b in m.old for b in brokers)]


def remove_broker(
    image: MetadataImage, broker_id: int, *, force: bool
) -> ControllerResult[list[rebalance.Move]]:
    """Rule 4."""
    broker = _registered(image, broker_id)
    holding = [
        (topic, index, p) for topic, index, p in image.partitions() if broker_id in p.replicas
    ]
    unregister = UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker.broker_epoch)
    if not broker.fenced:
        raise KraftliteError(
            ErrorCode.BROKER_IN_USE,
            f"broker {broker_id} is running: "
            + ("stop it, then remove it" if not holding else "drain it, stop it, then remove it"),
            replicas=len(holding),
        )
    if not holding:
        return ControllerResult((unregister,), [])
    if not force:
        raise KraftliteError(
            ErrorCode.BROKER_IN_USE,
            f"broker {broker_id} still holds {len(holding)} replicas: drain it first, or "
            "force=true to re-create them elsewhere now",
            replicas=len(holding),
        )
    last = [f"{t.name}-{i}" for t, i, p in holding if set(p.isr) <= {broker_id}]
    if last:
        raise KraftliteError(
            ErrorCode.BROKER_IN_USE,
            f"broker {broker_id} is the only in-sync replica of {last[:10]}: removing it "
            "would lose their data; bring it back, or reassign them first",
        )
    assignments = [  # a replica already leaving (`removing`) needs no replacement
        rebalance.PartitionAssignment(t.name, i, p.target, p.isr)
        for t, i, p in holding
        if broker_id in p.target
    ]
    try:
        moves = rebalance.plan_rebalance(
            assignments, _placement(image), evacuate={broker_id}, leaders=False
        )
    except ValueError as exc:
        raise KraftliteError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None
    planned = {(m.topic, m.partition): m.new for m in moves}
    records: list[MetadataRecord] = [
        change
        for t, i, p in holding
        if (
            change := _replace_at_once(
                image, t, i, p, new=planned.get((t.name, i)), broker_id=broker_id
            )
        )
        is not None
    ]
    records.append(unregister)  # last: every prefix leaves a registered broker (rule 4)
    return ControllerResult(tuple(records), moves, atomic=False)


def _replace_at_once(
    image: MetadataImage,
    topic: TopicImage,
    index: int,
    current: PartitionRegistration,
    *,
    new: tuple[int, ...] | None,
    broker_id: int,
) -> MetadataRecord | None:
    """The forced removal's change: `broker_id` leaves the partition now (it is fenced, so
    in no ISR with others), and a replacement joins as an adding replica that catches up
    from the leader like any reassignment's (none if it was leaving anyway)."""
    kept = tuple(b for b in current.replicas if b != broker_id)
    replaced = broker_id in current.target and new is not None
    added = tuple(b for b in (new or ()) if b not in current.replicas)[:1] if replaced else ()
    replicas = (*kept, *added)
    adding = (*(b for b in current.adding if b in kept), *added)
    isr = tuple(b for b in current.isr if b != broker_id)
    assert isr, "refused above: the broker is not the last in-sync replica"
    leader = current.leader
    if leader not in isr:
        leader, _ = elect_leader(
            PartitionRegistration(replicas, isr, NO_LEADER, 0, 0, adding),
            image.is_live,
            unclean=False,
            can_lead=image.can_lead,
        )
    return partition_change(
        topic.topic_id,
        index,
        current,
        leader=leader,
        isr=isr,
        replicas=replicas,
        adding=adding,
        removing=tuple(b for b in current.removing if b in kept),
    )


def alter_replication_factor(
    image: MetadataImage, name: str, factor: int
) -> ControllerResult[list[rebalance.Move]]:
    """A topic's replication factor changed by reassigning its partitions."""
    topic = image.topic(name)
    if topic is None:
        raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    placement = _placement(image)
    if not 0 < factor <= len(placement):
        raise KraftliteError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {factor} needs 1-{len(placement)} (live brokers)",
        )
    min_isr = int(effective_config(topic.configs, "min.insync.replicas"))
    if factor < min_isr:  # acks=all could never be answered again
        raise KraftliteError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {factor} is below min.insync.replicas={min_isr}: lower it first",
        )
    load: dict[int, int] = dict.fromkeys(placement, 0)
    for _, _, p in image.partitions():
        for b in p.target:
            if b in load:
                load[b] += 1
    assignments = [
        rebalance.PartitionAssignment(topic.name, i, p.target, p.isr)
        for i, p in sorted(topic.partitions.items())
    ]
    try:
        moves = rebalance.plan_replication_factor(assignments, factor, placement, load=load)
    except ValueError as exc:
        raise KraftliteError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None
    return ControllerResult(tuple(_execute(image, moves)), moves, atomic=False)


# ------------------------------------------------------------------------------ broker configs

# Dynamic broker configs (Kafka's IncrementalAlterConfigs on a BROKER): name -> minimum.
# `replication.throttled.rate`: bytes/s a leader sends to replicas catching up in a
# reassignment (broker/replica_manager.py), so a large move does not starve producers and
# in-sync followers.
BROKER_CONFIGS: dict[str, int] = {"replication.throttled.rate": 1}
MAX_CONFIG_VALUE = 2**63 - 1


def alter_broker_configs(
    image: MetadataImage, broker_id: int, configs: Mapping[str, object]
) -> ControllerResult[dict[str, str]]:
    """Set (value) or reset (None) a broker's dynamic configs; the response is the
    broker's dynamic configs after. Checked whole: one bad name or value changes nothing."""
    _registered(image, broker_id)
    if not configs:
        raise KraftliteError(ErrorCode.INVALID_CONFIG, "configs must name a config")
    records: list[MetadataRecord] = []
    after = dict(image.broker_configs.get(broker_id, {}))
    for name, value in sorted(configs.items()):
        minimum = BROKER_CONFIGS.get(name)
        if minimum is None:
            raise KraftliteError(
                ErrorCode.INVALID_CONFIG,
                f"{name!r} is not a dynamic broker config ({', '.join(BROKER_CONFIGS)})",
            )
        if value is None:
            records.append(BrokerConfigRecord(broker_id=broker_id, name=name, value=None))
            after.pop(name, None)
            continue
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
            number = int(value)
        if number is None or not minimum <= number <= MAX_CONFIG_VALUE:
            raise KraftliteError(
                ErrorCode.INVALID_CONFIG, f"{name} must be an integer of at least {minimum}"
            )
        records.append(BrokerConfigRecord(broker_id=broker_id, name=name, value=str(number)))
        after[name] = str(number)
    return ControllerResult(tuple(records), after)


# ------------------------------------------------------------------------------ elections


@dataclass(frozen=True, slots=True)
class Election:
    topic: str
    partition: int
    leader: int
    error: KraftliteError | None = None


def _electing(
    image: MetadataImage,
    partitions: Iterable[PartitionRef] | None,
    needed: Callable[[PartitionRegistration], bool],
) -> list[tuple[TopicImage, int, PartitionRegistration]]:
    """The partitions an election names (each once; UNKNOWN_TOPIC_OR_PARTITION for one
    that does not exist), or, for None, every partition that `needed` says needs one."""
    if partitions is None:
        return [(t, i, p) for t, i, p in image.partitions() if needed(p)]
    wanted = []
    for name, index in dict.fromkeys((p.topic, p.partition) for p in partitions):
        topic = image.topic(name)
        p = None if topic is None else topic.partitions.get(index)
        if topic is None or p is None:
            raise KraftliteError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {name}-{index}"
            )
        wanted.append((topic, index, p))
    return wanted


def elect_preferred(
    image: MetadataImage, partitions: Iterable[PartitionRef] | None
) -> ControllerResult[list[Election]]:
    """Rule 6, for `partitions` (each once; every partition not led by its preferred
    replica if None)."""
    wanted = _electing(image, partitions, lambda p: p.leader != p.replicas[0])
    records: list[MetadataRecord] = []
    outcomes = []
    for topic, index, p in wanted:
        preferred = p.replicas[0]
        if p.leader == preferred:
            outcomes.append(
                Election(topic.name, index, p.leader, KraftliteError(ErrorCode.ELECTION_NOT_NEEDED))
            )
            continue
        if preferred not in p.isr or not image.is_live(preferred):
            outcomes.append(
                Election(
                    topic.name,
                    index,
                    p.leader,
                    KraftliteError(
                        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                        f"broker {preferred} is not live and in the ISR {list(p.isr)}",
                    ),
                )
            )
            continue
        change = partition_change(topic.topic_id, index, p, leader=preferred, isr=p.isr)
        if change is not None:
            records.append(change)
        outcomes.append(Election(topic.name, index, preferred))
    return ControllerResult(tuple(records), outcomes, atomic=False)


def elect_unclean(
    image: MetadataImage, partitions: Iterable[PartitionRef] | None
) -> ControllerResult[list[Election]]:
    """Rule 7, for `partitions` (each once; every partition without a leader if None)."""
    wanted = _electing(image, partitions, lambda p: p.leader == NO_LEADER)
    records: list[MetadataRecord] = []
    outcomes = []
    for topic, index, p in wanted:
        if is_internal_topic(topic.name):
            if partitions is not None:
                refusal = KraftliteError(
                    ErrorCode.INVALID_REQUEST,
                    f"{topic.name} is internal: it gets no unclean election",
                )
                outcomes.append(Election(topic.name, index, p.leader, refusal))
            continue
        if p.leader != NO_LEADER:
            outcomes.append(
                Election(
                    topic.name,
                    index,
                    p.leader,
                    KraftliteError(ErrorCode.ELECTION_NOT_NEEDED, "the partition has a leader"),
                )
            )
            continue
        leader, isr = elect_leader(p, image.is_live, True, image.can_lead)
        if leader == NO_LEADER:
            outcomes.append(
                Election(
                    topic.name,
                    index,
                    NO_LEADER,
                    KraftliteError(
                        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                        f"none of the replicas {list(p.replicas)} is live",
                    ),
                )
            )
            continue
        change = partition_change(topic.topic_id, index, p, leader=leader, isr=isr)
        if change is not None:
            records.append(change)
        outcomes.append(Election(topic.name, index, leader))
    return ControllerResult(tuple(records), outcomes, atomic=False)
