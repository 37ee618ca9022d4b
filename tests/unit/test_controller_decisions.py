"""Controller decisions, compared as whole results (records + response)."""

from __future__ import annotations

import random

import pytest

from kraftlite.controller import decisions as d
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata import records as r
from kraftlite.metadata.image import (
    MetadataImage,
    PartitionRegistration,
    apply_batch,
    check_invariants,
)
from kraftlite.protocol import admin, internal
from kraftlite.protocol.admin import CreateTopicRequest
from kraftlite.protocol.internal import MessageError


def commit(image: MetadataImage, result: d.ControllerResult) -> MetadataImage:
    image = apply_batch(image, r.RecordBatch(image.version, result.records))
    check_invariants(image)
    return image


def brokers(*ids: int, racks: dict[int, str] | None = None) -> MetadataImage:
    image = MetadataImage.EMPTY
    for b in ids:
        result = d.register_broker(image, b, f"inc-{b}", f"http://b{b}:9092", (racks or {}).get(b))
        image = commit(image, result)
        image = commit(image, d.broker_heartbeat(image, b, result.response, image.version))
    return image


def with_topic(
    image: MetadataImage, name: str = "t", partitions: int = 1, rf: int = 3, unclean: bool = False
) -> MetadataImage:
    """A topic whose partition i has replicas (1, 2, ..., rf) rotated by i: deterministic."""
    topic_id = f"id-{name}"
    records: list[r.MetadataRecord] = [r.TopicRecord(name=name, topic_id=topic_id)]
    if unclean:
        records.append(
            r.ConfigRecord(topic_id=topic_id, name="unclean.leader.election.enable", value="true")
        )
    live = image.live_broker_ids()
    for i in range(partitions):
        replicas = tuple(live[(i + j) % len(live)] for j in range(rf))
        records.append(
            r.PartitionRecord(
                topic_id=topic_id, partition=i, replicas=replicas, isr=replicas, leader=replicas[0]
            )
        )
    return commit(image, d.ControllerResult(tuple(records), None))


def partition(image: MetadataImage, name: str = "t", index: int = 0) -> PartitionRegistration:
    topic = image.topic(name)
    assert topic is not None
    return topic.partitions[index]


def error(code: ErrorCode, call, *args, **kwargs) -> KraftliteError:
    with pytest.raises(KraftliteError) as info:
        call(*args, **kwargs)
    assert info.value.code is code, info.value
    return info.value


# ------------------------------------------------------------------------------ brokers


def test_registration_starts_fenced_and_heartbeat_unfences_once_caught_up() -> None:
    image = MetadataImage.EMPTY
    result = d.register_broker(image, 1, "inc", "http://b1:9092", "r1")
    assert result == d.ControllerResult(
        (
            r.RegisterBrokerRecord(
                broker_id=1, incarnation_id="inc", broker_epoch=1, url="http://b1:9092", rack="r1"
            ),
        ),
        1,
    )
    image = commit(image, result)
    assert image.brokers[1].fenced
    # not caught up yet: the broker has not seen its own registration
    assert d.broker_heartbeat(image, 1, 1, metadata_version=0) == d.ControllerResult(
        (), d.BrokerHeartbeatResponse(1, fenced=True, shutting_down=False)
    )
    assert d.broker_heartbeat(image, 1, 1, metadata_version=1) == d.ControllerResult(
        (r.UnfenceBrokerRecord(broker_id=1, broker_epoch=1),),
        d.BrokerHeartbeatResponse(1, fenced=False, shutting_down=False),
        atomic=False,  # the unfence first, then its elections: any prefix is safe
    )


def test_registration_retry_is_idempotent_and_restart_gets_a_new_epoch() -> None:
    image = with_topic(brokers(1, 2, 3))
    epoch = image.brokers[1].broker_epoch
    assert d.register_broker(image, 1, "inc-1", "http://b1:9092", None) == d.ControllerResult(
        (), epoch
    )
    leader_before = partition(image)
    assert leader_before.leader == 1
    restarted = d.register_broker(image, 1, "inc-1-again", "http://b1:9092", None)
    assert restarted.response == image.version + 1
    image = commit(image, restarted)
    # the restarted incarnation is fenced until caught up, so leadership moved away
    assert partition(image).leader == 2
    assert partition(image).isr == (2, 3)
    assert partition(image).leader_epoch == leader_before.leader_epoch + 1
    error(ErrorCode.STALE_BROKER_EPOCH, d.broker_heartbeat, image, 1, epoch, image.version)


def test_unknown_broker_heartbeat() -> None:
    error(ErrorCode.BROKER_ID_NOT_REGISTERED, d.broker_heartbeat, MetadataImage.EMPTY, 5, 1, 0)


def test_fencing_elects_the_next_isr_member_and_keeps_the_last_one() -> None:
    image = with_topic(brokers(1, 2, 3))
    result = d.fence_expired_brokers(image, [1])
    assert result == d.ControllerResult(
        (
            r.PartitionChangeRecord(
                topic_id=image.topic_ids["t"], partition=0, leader=2, isr=(2, 3)
            ),
            r.FenceBrokerRecord(broker_id=1, broker_epoch=image.brokers[1].broker_epoch),
        ),
        [1],
        atomic=False,
    )
    image = commit(image, result)
    image = commit(image, d.fence_expired_brokers(image, [2, 3]))
    # nobody live: offline; the last leader stays in the ISR so it can come back clean
    assert partition(image) == PartitionRegistration((1, 2, 3), (2,), r.NO_LEADER, 2, 2)
    # brokers 1 and 3 return: not in the ISR, so the partition stays offline (clean election)
    for broker in (1, 3):
        result = d.broker_heartbeat(
            image, broker, image.brokers[broker].broker_epoch, image.version
        )
        assert result.records == (
            r.UnfenceBrokerRecord(
                broker_id=broker, broker_epoch=image.brokers[broker].broker_epoch
            ),
        )
        image = commit(image, result)
    # broker 2 returns: it is the ISR, so it leads again
    image = commit(
        image, d.broker_heartbeat(image, 2, image.brokers[2].broker_epoch, image.version)
    )
    assert partition(image).leader == 2
    assert d.fence_expired_brokers(image, [99]).records == ()


def test_unclean_election_brings_back_a_replica_outside_the_isr() -> None:
    image = with_topic(brokers(1, 2, 3), unclean=True)
    image = commit(image, d.fence_expired_brokers(image, [1, 2, 3]))
    assert partition(image).leader == r.NO_LEADER
    image = commit(
        image, d.broker_heartbeat(image, 1, image.brokers[1].broker_epoch, image.version)
    )
    assert partition(image).leader == 1
    assert partition(image).isr == (1,)


def test_controlled_shutdown_moves_leadership_first() -> None:
    image = with_topic(brokers(1, 2, 3))
    epoch = image.brokers[1].broker_epoch
    result = d.broker_heartbeat(image, 1, epoch, image.version, want_shutdown=True)
    assert result.response == d.BrokerHeartbeatResponse(epoch, fenced=True, shutting_down=True)
    image = commit(image, result)
    assert partition(image).leader == 2


def test_preferred_leader_comes_back() -> None:
    image = with_topic(brokers(1, 2, 3))
    image = commit(image, d.fence_expired_brokers(image, [1]))
    image = commit(
        image, d.broker_heartbeat(image, 1, image.brokers[1].broker_epoch, image.version)
    )
    assert partition(image).leader == 2
    assert d.elect_preferred_leaders(image).records == ()  # 1 is not back in the ISR yet
    p = partition(image)
    image = commit(
        image,
        d.alter_partition(
            image,
            d.AlterPartitionRequest(
                2,
                image.brokers[2].broker_epoch,
                image.topic_ids["t"],
                0,
                p.leader_epoch,
                p.partition_epoch,
                (2, 3, 1),
            ),
        ),
    )
    result = d.elect_preferred_leaders(image)
    assert result.response == 1
    image = commit(image, result)
    assert partition(image).leader == 1


# ------------------------------------------------------------------------------ topics


def test_create_topic_places_partitions_and_configs() -> None:
    image = brokers(1, 2, 3)
    result = d.create_topic(image, "orders", 3, None, {"retention.ms": 1000}, rng=random.Random(4))
    topic_id = result.response
    assert result.records[:2] == (
        r.TopicRecord(name="orders", topic_id=topic_id),
        r.ConfigRecord(topic_id=topic_id, name="retention.ms", value="1000"),
    )
    parts = result.records[2:]
    assert [p.partition for p in parts] == [0, 1, 2]
    assert sorted(p.leader for p in parts) == [1, 2, 3]  # leaders spread
    for p in parts:
        assert len(p.replicas) == 3 and p.isr == p.replicas and p.leader == p.replicas[0]
    image = commit(image, result)
    assert image.topic("orders").configs == {"retention.ms": "1000"}


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("bad name!", 1, None, None), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (("..", 1, None, None), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (("__internal", 1, None, None), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (("x" * 250, 1, None, None), ErrorCode.INVALID_TOPIC_EXCEPTION),
        ((7, 1, None, None), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (("t", 1, None, None), ErrorCode.TOPIC_ALREADY_EXISTS),
        (("u", 0, None, None), ErrorCode.INVALID_PARTITIONS),
        (("u", "2", None, None), ErrorCode.INVALID_PARTITIONS),
        (("u", True, None, None), ErrorCode.INVALID_PARTITIONS),
        (("u", 1, 4, None), ErrorCode.INVALID_REPLICATION_FACTOR),
        (("u", 1, 0, None), ErrorCode.INVALID_REPLICATION_FACTOR),
        (("u", 1, None, {"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"retention.ms": "1_000"}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"retention.ms": " 1000"}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"retention.ms": str(2**63)}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"no.such": "1"}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"cleanup.policy": "compact,compact"}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"cleanup.policy": "compact,"}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"cleanup.policy": "keep"}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"min.cleanable.dirty.ratio": "1.5"}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"min.cleanable.dirty.ratio": "NaN"}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"max.compaction.lag.ms": 0}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, {"min.compaction.lag.ms": -1}), ErrorCode.INVALID_CONFIG),
        (  # an empty lag range (Kafka's LogConfig.validate)
            ("u", 1, None, {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 9}),
            ErrorCode.INVALID_CONFIG,
        ),
        (("u", 1, None, {"min.insync.replicas": 0}), ErrorCode.INVALID_CONFIG),
        (("u", 1, None, []), ErrorCode.INVALID_CONFIG),
    ],
)
def test_bad_topic_creations(args, code) -> None:
    image = with_topic(brokers(1, 2, 3))
    error(code, d.create_topic, image, *args, rng=random.Random(0))


def test_default_replication_factor_is_min_3_live_brokers() -> None:
    image = brokers(1, 2)
    result = d.create_topic(image, "t", 1, rng=random.Random(0))
    assert len(result.records[1].replicas) == 2


def test_a_topic_created_with_a_replica_assignment() -> None:
    """Kafka's CreateTopics with assignments (issue 25): the brokers of each partition as
    given, the first live one leading; `partitions` and the factor are not read."""
    image = brokers(1, 2, 3, 4)
    result = d.create_topic(
        image, "placed", 99, 7, rng=random.Random(0), replica_assignment=((4, 1), (2, 3))
    )
    image = commit(image, result)
    assert [(p.replicas, p.isr, p.leader) for p in image.topic("placed").partitions.values()] == [
        ((4, 1), (4, 1), 4),
        ((2, 3), (2, 3), 2),
    ]
    for assignment, why in (
        (((1, 2), (3,)), "replicas, partition 0 2"),  # not the same factor everywhere
        (((1, 1),), "twice"),
        (((1, 9),), "not registered"),
        ((), "1-"),
    ):
        refused = error(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            d.create_topic,
            image,
            "nope",
            rng=random.Random(0),
            replica_assignment=assignment,
        )
        assert why in refused.message, refused


def test_an_assignment_on_fenced_brokers_leads_on_a_live_one_or_is_refused() -> None:
    image = brokers(1, 2, 3)
    image = commit(image, d.fence_expired_brokers(image, [1]))
    (only,) = (
        commit(
            image, d.create_topic(image, "t", rng=random.Random(0), replica_assignment=((1, 2),))
        )
        .topic("t")
        .partitions.values()
    )
    assert (only.replicas, only.isr, only.leader) == ((1, 2), (2,), 2)
    image = commit(image, d.fence_expired_brokers(image, [2]))
    error(
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        d.create_topic,
        image,
        "u",
        rng=random.Random(0),
        replica_assignment=((1, 2),),
    )


def test_validate_only_shows_the_topic_it_would_be() -> None:
    image = brokers(1, 2)
    result = d.create_topic(image, "t", 2, 2, {"retention.ms": 5}, rng=random.Random(1))
    view = d.would_be_topic("t", result)
    assert view["topic_id"] == "" and view["configs"] == {"retention.ms": "5"}
    assert [p["partition"] for p in view["partitions"]] == [0, 1]  # type: ignore[union-attr]
    assert image.topic("t") is None  # nothing committed


def test_delete_add_partitions_and_alter_configs() -> None:
    image = with_topic(brokers(1, 2, 3), partitions=2, rf=2)
    result = d.create_partitions(image, "t", 4, rng=random.Random(1))
    assert [p.partition for p in result.records] == [2, 3]
    image = commit(image, result)
    error(ErrorCode.INVALID_PARTITIONS, d.create_partitions, image, "t", 4, rng=random.Random(1))
    error(
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        d.create_partitions,
        image,
        "x",
        9,
        rng=random.Random(1),
    )
    result = d.alter_topic_configs(image, "t", {"retention.bytes": 10, "retention.ms": None})
    assert result.response == {"retention.bytes": "10"}
    image = commit(image, result)
    assert image.topic("t").configs == {"retention.bytes": "10"}
    result = d.alter_topic_configs(
        image, "t", {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0.25}
    )
    image = commit(image, result)
    assert image.topic("t").configs == {
        "retention.bytes": "10",
        "cleanup.policy": "compact,delete",
        "min.cleanable.dirty.ratio": "0.25",
    }
    image = commit(image, d.alter_topic_configs(image, "t", {"max.compaction.lag.ms": 100}))
    # the lag range is checked against the topic's configs as they would become
    error(
        ErrorCode.INVALID_CONFIG, d.alter_topic_configs, image, "t", {"min.compaction.lag.ms": 101}
    )
    image = commit(image, d.delete_topic(image, "t"))
    assert image.topic("t") is None
    error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, d.delete_topic, image, "t")


def test_partitions_added_where_an_assignment_says() -> None:
    """Kafka's CreatePartitions assignments: one per partition added, the topic's factor."""
    image = with_topic(brokers(1, 2, 3), partitions=2, rf=2)
    result = d.create_partitions(image, "t", 4, rng=random.Random(1), assignments=((3, 1), (2, 3)))
    assert [(p.partition, p.replicas, p.isr, p.leader) for p in result.records] == [  # type: ignore[attr-defined]
        (2, (3, 1), (3, 1), 3),
        (3, (2, 3), (2, 3), 2),
    ]
    for wrong in (
        ((3, 1),),  # two partitions added, one assigned
        ((3, 1), (2, 3), (1, 2)),
        (),
        ((3,), (2,)),  # the topic's factor is 2
        ((3, 1, 2), (2, 3, 1)),
        ((3, 3), (2, 3)),  # a broker twice
        ((3, 9), (2, 3)),  # not registered
    ):
        error(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            d.create_partitions,
            image,
            "t",
            4,
            rng=random.Random(1),
            assignments=wrong,
        )
    image = commit(image, d.fence_expired_brokers(image, [2, 3]))
    error(  # no live replica
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        d.create_partitions,
        image,
        "t",
        3,
        rng=random.Random(1),
        assignments=((3, 2),),
    )
    result = d.create_partitions(image, "t", 3, rng=random.Random(1), assignments=((3, 1),))
    ((partition, replicas, isr, leader),) = [
        (p.partition, p.replicas, p.isr, p.leader)  # type: ignore[attr-defined]
        for p in result.records
    ]
    assert (partition, replicas, isr, leader) == (2, (3, 1), (1,), 1)  # the fenced one joins later


# ------------------------------------------------------------------------------ AlterPartition


def request(
    image: MetadataImage, broker: int, isr: tuple[int, ...], **changes
) -> d.AlterPartitionRequest:
    p = partition(image)
    fields = {
        "broker_id": broker,
        "broker_epoch": image.brokers[broker].broker_epoch,
        "topic_id": image.topic_ids["t"],
        "partition": 0,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
        "new_isr": isr,
    }
    fields.update(changes)
    return d.AlterPartitionRequest(**fields)


def test_alter_partition_shrinks_and_expands() -> None:
    image = with_topic(brokers(1, 2, 3))
    result = d.alter_partition(image, request(image, 1, (1, 2)))
    assert result == d.ControllerResult(
        (r.PartitionChangeRecord(topic_id=image.topic_ids["t"], partition=0, isr=(1, 2)),),
        PartitionRegistration((1, 2, 3), (1, 2), 1, 0, 1),
    )
    image = commit(image, result)
    # a retry of the committed change answers the committed state and writes nothing
    retry = d.alter_partition(image, request(image, 1, (1, 2), partition_epoch=0))
    assert retry == d.ControllerResult((), partition(image))
    image = commit(image, d.alter_partition(image, request(image, 1, (1, 2, 3))))
    assert partition(image).isr == (1, 2, 3)


@pytest.mark.parametrize(
    ("broker", "isr", "changes", "code"),
    [
        (1, (1, 2), {"broker_epoch": 999}, ErrorCode.STALE_BROKER_EPOCH),
        (1, (1, 2), {"partition": 5}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (1, (1, 2), {"leader_epoch": 7}, ErrorCode.FENCED_LEADER_EPOCH),
        (2, (1, 2), {}, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (1, (1,), {"partition_epoch": 9}, ErrorCode.INVALID_UPDATE_VERSION),
        (1, (2, 3), {}, ErrorCode.INVALID_REQUEST),
        (1, (1, 4), {}, ErrorCode.INVALID_REQUEST),
        (1, (1, 1), {}, ErrorCode.INVALID_REQUEST),
    ],
)
def test_alter_partition_refusals(broker, isr, changes, code) -> None:
    image = with_topic(brokers(1, 2, 3, 4))
    image = commit(image, d.alter_partition(image, request(image, 1, (1, 2, 3))))
    error(code, d.alter_partition, image, request(image, broker, isr, **changes))


def test_a_fenced_broker_cannot_join_the_isr() -> None:
    image = with_topic(brokers(1, 2, 3))
    image = commit(image, d.fence_expired_brokers(image, [3]))
    assert partition(image).isr == (1, 2)
    error(ErrorCode.INELIGIBLE_REPLICA, d.alter_partition, image, request(image, 1, (1, 2, 3)))


def test_alter_partitions_commits_many_in_one_batch_and_refuses_some_in_part() -> None:
    image = with_topic(brokers(1, 2, 3), partitions=4)  # leaders 1, 2, 3, 1
    topic_id = image.topic_ids["t"]
    registrations = image.topics[topic_id].partitions

    def change(index: int, isr: tuple[int, ...], **fields: int) -> internal.IsrChange:
        p = registrations[index]
        values = {"leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch, **fields}
        return internal.IsrChange(topic_id, index, new_isr=isr, **values)

    request = internal.AlterPartitionRequest(
        1,
        image.brokers[1].broker_epoch,
        (
            change(0, (1, 2)),  # shrink: fine
            change(1, (2, 3)),  # led by 2, not the sender
            change(3, (1, 2), leader_epoch=5),  # a stale view of the leader epoch
            internal.IsrChange(topic_id, 9, 0, 0, (1,)),  # no such partition
        ),
    )
    result = d.alter_partitions(image, request)
    assert result.records == (r.PartitionChangeRecord(topic_id=topic_id, partition=0, isr=(1, 2)),)
    outcome = {x.partition: x.error_code for x in result.response.results}
    assert outcome == {
        0: None,
        1: "NOT_LEADER_OR_FOLLOWER",
        3: "FENCED_LEADER_EPOCH",
        9: "UNKNOWN_TOPIC_OR_PARTITION",
    }
    assert result.response.results[0].state == internal.PartitionState(1, 0, 1, (1, 2), (1, 2, 3))
    image = commit(image, result)
    assert partition(image).isr == (1, 2)
    # the answer travels as a typed message and reads back the same
    wire = internal.AlterPartitionResponse.from_json(result.response.to_json())
    assert wire == result.response
    # a sender that is not the registered broker is refused as a whole
    stale = internal.AlterPartitionRequest(1, 999, request.changes)
    error(ErrorCode.STALE_BROKER_EPOCH, d.alter_partitions, image, stale)


@pytest.mark.parametrize("shutdown", [False, True])
def test_a_large_fence_may_commit_in_parts_and_every_prefix_is_safe(shutdown: bool) -> None:
    """decisions.py rule 6: committed in bounded batches, a fence leaves after any prefix an
    image that keeps every invariant with the broker still live, so the next controller
    fences it again and finishes; the full run equals the one-batch result."""
    image = with_topic(brokers(1, 2, 3), partitions=30)
    if shutdown:
        result = d.broker_heartbeat(image, 1, image.brokers[1].broker_epoch, 0, True)
    else:
        result = d.fence_expired_brokers(image, [1])
    assert not result.atomic and isinstance(result.records[-1], r.FenceBrokerRecord)
    if shutdown:  # ineligible for leadership and ISRs from the first record on
        assert isinstance(result.records[0], r.ControlledShutdownRecord)
    whole = commit(image, result)
    for cut in (1, 7, len(result.records) - 1):
        part = apply_batch(image, r.RecordBatch(image.version, result.records[:cut]))
        check_invariants(part)
        assert not part.brokers[1].fenced
        assert part.is_live(1) is not shutdown
        # the next controller's decision: the broker asks again, or its session expires
        if shutdown:
            again = d.broker_heartbeat(part, 1, part.brokers[1].broker_epoch, 0, True)
        else:
            again = d.fence_expired_brokers(part, [1])
        rest = apply_batch(part, r.RecordBatch(part.version, again.records))
        assert rest.topics == whole.topics and rest.brokers[1].fenced
        # and a shutting-down broker that dies half-way is still fenced at its expiry
        expired = d.fence_expired_brokers(part, [1])
        assert expired.response == [1]


def topics(*specs: dict[str, object]) -> list[CreateTopicRequest]:
    """Topic specs as the controller decodes them (protocol/admin.py)."""
    return [admin.decode(CreateTopicRequest, spec) for spec in specs]


def test_create_topics_is_one_batch_with_an_outcome_per_topic() -> None:
    image = brokers(1, 2, 3)
    specs = topics(
        {"name": "a", "partitions": 3},
        {"name": "b", "partitions": 2, "replication_factor": 2},
        {"name": "a"},  # named twice
        {"name": "c", "replication_factor": 4},  # more than the live brokers
    )
    result = d.create_topics(image, specs, rng=random.Random(1))
    outcome = [(o.name, o.error.code.name if o.error else None) for o in result.response]
    assert outcome == [
        ("a", None),
        ("b", None),
        ("a", "TOPIC_ALREADY_EXISTS"),
        ("c", "INVALID_REPLICATION_FACTOR"),
    ]
    # what is wrong with the request itself refuses it whole: nothing is created
    for bad, code in [
        ({"name": "bad name"}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ({"name": "__x"}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ({"name": "x", "partitions": 0}, ErrorCode.INVALID_PARTITIONS),
        ({"name": "x", "replication_factor": 0}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ({"name": "x", "replication_factor": 2**15}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ({"name": "x", "configs": {"no.such": "1"}}, ErrorCode.INVALID_CONFIG),
        ({"name": "x", "configs": {"retention.ms": [1]}}, ErrorCode.INVALID_CONFIG),
    ]:
        error(code, d.create_topics, image, [specs[0], *topics(bad)], rng=random.Random(1))
    image = commit(image, result)  # one batch: every created topic lands at one version
    assert {t.name: len(t.partitions) for t in image.topics.values()} == {"a": 3, "b": 2}
    assert [o.topic_id for o in result.response if o.error is None] == [
        image.topic_ids["a"],
        image.topic_ids["b"],
    ]


@pytest.mark.parametrize(
    ("specs", "code"),
    [
        ([], ErrorCode.INVALID_REQUEST),
        ([{"name": f"t{i}"} for i in range(1001)], ErrorCode.INVALID_REQUEST),
        ([{"name": "a", "partitions": 6000}, {"name": "b", "partitions": 6000}], None),
        ([{"name": "a", "partitions": -9_990_000}, {"name": "b", "partitions": 10_000}], None),
    ],
)
def test_create_topics_bounds(specs: list[dict[str, object]], code: ErrorCode | None) -> None:
    image = brokers(1, 2, 3)
    wanted = topics(*specs)
    error(code or ErrorCode.INVALID_PARTITIONS, d.create_topics, image, wanted, rng=random.Random())


@pytest.mark.parametrize(
    "body",
    [
        {"topics": "a"},
        {"topics": [1]},
        {"topics": [{"partitions": 1}]},  # no name
        {"topics": [{"name": 7}]},
        {"topics": [{"name": "x", "partitions": "2"}]},
        {"topics": [{"name": "x", "replication_factor": True}]},
        {"topics": [{"name": "x", "configs": ["retention.ms"]}]},
        {"topics": [{"name": "x", "internal": "yes"}]},
    ],
)
def test_a_create_topics_body_of_the_wrong_shape_is_refused_before_any_decision(
    body: dict[str, object],
) -> None:
    """protocol/admin.py rule 1: the type checks the shape (the edge answers INVALID_REQUEST);
    the decisions check what the values mean, with their own codes (above)."""
    with pytest.raises(MessageError):
        admin.decode(admin.CreateTopicsRequest, body)


def test_offline_partitions_with_a_live_isr_member_are_elected_again() -> None:
    """What a batched fence that stopped half-way can leave (review finding): the sole ISR
    member offline yet live. Nothing else would ever elect it."""
    image = with_topic(brokers(1, 2, 3), partitions=3, rf=1)  # replicas (1,), (2,), (3,)
    topic_id = image.topic_ids["t"]
    prefix = d.fence_expired_brokers(image, [1]).records[:-1]  # stopped before the fence
    image = apply_batch(image, r.RecordBatch(image.version, prefix))
    assert image.is_live(1) and image.topics[topic_id].partitions[0].leader == r.NO_LEADER
    result = d.elect_offline_leaders(image)
    assert result.response == 1 and not result.atomic
    image = commit(image, result)
    assert image.topics[topic_id].partitions[0].leader == 1
    assert d.elect_offline_leaders(image).records == ()


def test_create_topics_counts_no_negative_partitions_against_its_bound() -> None:
    """Review finding: a negative count, refused on its own, must not pay for the others."""
    image = brokers(1, 2, 3)
    specs = topics(
        {"name": "bad", "partitions": -9_990_000},
        *({"name": f"t{i}", "partitions": 10_000} for i in range(2)),
    )
    error(ErrorCode.INVALID_PARTITIONS, d.create_topics, image, specs, rng=random.Random())


# ------------------------------------------------------------------------------ voters


def test_voters_are_recorded_whole_with_a_new_voters_url() -> None:
    image = brokers(1)
    result = d.record_voters(image, {"h:1": 1, "h:4": 4, "h:2": 2}, 4, "http://h:9404")
    assert result.records == (
        r.QuorumVotersRecord(node_ids=(1, 2, 4), raft_addresses=("h:1", "h:2", "h:4")),
        r.RegisterControllerRecord(node_id=4, url="http://h:9404"),
    )
    image = commit(image, result)
    assert image.voters == {1: "h:1", 2: "h:2", 4: "h:4"}
    assert d.record_voters(image, {"h:1": 1, "h:4": 4, "h:2": 2}, 4, "http://h:9404").records == ()
    removed = commit(image, d.record_voters(image, {"h:1": 1, "h:2": 2}))
    assert removed.voters == {1: "h:1", 2: "h:2"}


def test_a_batch_validates_only_the_topics_that_ask() -> None:
    image = brokers(1, 2)
    result = d.create_topics(
        image,
        [CreateTopicRequest("checked", 2, validate_only=True), CreateTopicRequest("made", 1)],
        rng=random.Random(3),
    )
    checked, made = result.response
    assert checked.would_be is not None and checked.would_be["topic_id"] == ""
    assert made.topic_id is not None and made.would_be is None
    image = commit(image, result)
    assert image.topic("checked") is None and image.topic("made") is not None
