"""Partition reassignment decisions (controller/reassignments.py, KIP-455), pure: each step
replayed into an image whose invariants are checked."""

from __future__ import annotations

import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.controller import decisions as d
from kraftlite.controller import reassignments as ra
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata import records as r
from kraftlite.metadata.image import MetadataImage, PartitionRegistration
from kraftlite.metadata.views import image_from_json, image_to_json
from kraftlite.protocol import internal
from tests.unit.test_controller_decisions import brokers, commit, partition, with_topic


def move(image: MetadataImage, target: list[int] | None, index: int = 0) -> MetadataImage:
    wanted = ra.parse_reassignments(
        {"partitions": [{"topic": "t", "partition": index, "replicas": target}]}
    )
    return commit(image, ra.alter_reassignments(image, wanted))


def expand_isr(image: MetadataImage, new_isr: tuple[int, ...], index: int = 0) -> MetadataImage:
    """The partition's leader asks for `new_isr` (as after its followers caught up)."""
    p = partition(image, index=index)
    topic = image.topic("t")
    assert topic is not None
    request = internal.AlterPartitionRequest(
        p.leader,
        image.brokers[p.leader].broker_epoch,
        (internal.IsrChange(topic.topic_id, index, p.leader_epoch, p.partition_epoch, new_isr),),
    )
    result = d.alter_partitions(image, request)
    [outcome] = result.response.results
    assert outcome.error_code is None, outcome
    return commit(image, result)


def refused(code: ErrorCode, image: MetadataImage, body: object) -> KraftliteError:
    with pytest.raises(KraftliteError) as info:
        ra.alter_reassignments(image, ra.parse_reassignments(body))
    assert info.value.code is code, info.value
    return info.value


def one(topic: str = "t", partition: int = 0, replicas: object = [4, 2, 3]) -> dict[str, object]:
    return {"partitions": [{"topic": topic, "partition": partition, "replicas": replicas}]}


def test_a_move_adds_the_target_then_completes_once_it_is_in_the_isr() -> None:
    image = with_topic(brokers(1, 2, 3, 4))  # replicas (1, 2, 3), leader 1
    image = move(image, [4, 2, 3])
    p = partition(image)
    assert (p.replicas, p.adding, p.removing, p.isr, p.leader) == (
        (4, 2, 3, 1),
        (4,),
        (1,),
        (1, 2, 3),
        1,
    ), "the old replicas keep serving, the leaving leader included"
    assert ra.ongoing_reassignments(image) == [
        {
            "topic": "t",
            "partition": 0,
            "replicas": [4, 2, 3, 1],
            "adding": [4],
            "removing": [1],
            "isr": [1, 2, 3],
            "leader": 1,
        }
    ]
    image = expand_isr(image, (1, 2, 3, 4))  # broker 4 caught up: the move completes
    p = partition(image)
    assert (p.replicas, p.adding, p.removing, p.isr) == ((4, 2, 3), (), (), (2, 3, 4))
    assert p.leader == 4, "leadership moved to the first target replica in the ISR"
    assert ra.ongoing_reassignments(image) == []


def test_a_target_already_in_the_isr_completes_at_once() -> None:
    image = with_topic(brokers(1, 2, 3))
    image = move(image, [3, 2])  # RF 3 -> 2, the leader leaving
    p = partition(image)
    assert (p.replicas, p.isr, p.leader, p.reassigning) == ((3, 2), (2, 3), 3, False)


def test_reordering_moves_no_data_and_keeps_the_leader() -> None:
    image = with_topic(brokers(1, 2, 3))
    image = move(image, [2, 3, 1])
    p = partition(image)
    assert (p.replicas, p.isr, p.leader, p.reassigning) == ((2, 3, 1), (1, 2, 3), 1, False)


def test_the_same_request_twice_changes_nothing_the_second_time() -> None:
    image = with_topic(brokers(1, 2, 3, 4))
    image = move(image, [4, 2, 3])
    again = ra.alter_reassignments(image, ra.parse_reassignments(one()))
    assert again.records == ()
    [outcome] = again.response
    assert outcome.registration == partition(image)


def test_cancel_goes_back_to_the_original_replicas() -> None:
    image = with_topic(brokers(1, 2, 3, 4, 5))
    image = move(image, [4, 5, 3])
    image = expand_isr(image, (1, 2, 3, 4))  # 4 caught up, 5 not yet: still moving
    assert partition(image).reassigning
    image = move(image, None)
    p = partition(image)
    # the original replicas (in the order of the move, as Kafka: the target's first)
    assert (sorted(p.replicas), sorted(p.isr), p.leader, p.reassigning) == (
        [1, 2, 3],
        [1, 2, 3],
        1,
        False,
    )


def test_cancel_with_nothing_moving_is_reported_for_that_partition_only() -> None:
    image = with_topic(brokers(1, 2, 3, 4), partitions=2)  # partition 1: (2, 3, 4)
    image = move(image, [1, 2, 3], index=1)
    body = {
        "partitions": [
            {"topic": "t", "partition": 0, "replicas": None},
            {"topic": "t", "partition": 1, "replicas": None},
        ]
    }
    result = ra.alter_reassignments(image, ra.parse_reassignments(body))
    first, second = result.response
    assert first.error is not None
    assert first.error.code is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert second.error is None
    image = commit(image, result)
    assert not partition(image, index=1).reassigning


def test_a_new_target_replaces_the_old_one_relative_to_the_original() -> None:
    image = with_topic(brokers(1, 2, 3, 4, 5))
    image = move(image, [4, 2, 3])
    image = move(image, [5, 2, 3])
    p = partition(image)
    assert (p.replicas, p.adding, p.removing) == ((5, 2, 3, 1), (5,), (1,))
    assert 4 not in p.isr


def test_cancel_is_refused_when_only_the_adding_replicas_are_in_sync() -> None:
    image = with_topic(brokers(1, 2, 3), rf=1)  # replicas (1,)
    image = move(image, [2, 3])
    image = expand_isr(image, (1, 2))  # 2 caught up, 3 not yet
    image = commit(image, d.fence_expired_brokers(image, [1]))  # 1 leaves the ISR, 2 leads
    p = partition(image)
    assert (p.isr, p.leader, p.reassigning) == ((2,), 2, True)
    refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, image, one(replicas=None))
    assert partition(image) == p


def test_bad_requests_are_refused_whole_and_change_nothing() -> None:
    image = with_topic(brokers(1, 2, 3, 4))
    refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, image, one(replicas=[4, 4, 2]))
    refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, image, one(replicas=[]))
    refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, image, one(replicas=[9, 2, 3]))
    refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, image, one(topic="nope"))
    refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, image, one(partition=7))
    for body in (
        {},
        {"partitions": []},
        {"partitions": "x"},
        {"partitions": [{"topic": "t", "partition": 0}]},  # replicas missing
        {"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]},
        {"partitions": [{"topic": "t", "partition": True, "replicas": [1]}]},
        {"partitions": [{"topic": "t", "partition": 0, "replicas": ["1"]}]},
        {"partitions": [{"topic": "t", "partition": 0, "replicas": [True]}]},
        {"partitions": [{"partition": 0, "replicas": [1]}]},
    ):
        with pytest.raises(KraftliteError) as info:
            ra.parse_reassignments(body)
        assert info.value.code is ErrorCode.INVALID_REQUEST, body
    twice = {"partitions": [one()["partitions"][0], one()["partitions"][0]]}  # type: ignore[index]
    with pytest.raises(KraftliteError) as info:
        ra.parse_reassignments(twice)
    assert info.value.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    # one bad item refuses the good one beside it
    body = one()
    body["partitions"].append({"topic": "t", "partition": 0, "replicas": None})  # type: ignore[attr-defined]
    with pytest.raises(KraftliteError):
        ra.parse_reassignments(body)


def test_no_new_replica_on_a_fenced_broker_but_a_fenced_replica_may_stay() -> None:
    image = with_topic(brokers(1, 2, 3, 4))
    image = commit(image, d.fence_expired_brokers(image, [4]))
    refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, image, one(replicas=[4, 2, 3]))
    image = commit(image, d.fence_expired_brokers(image, [3]))  # 3 is a replica: it may stay
    image = move(image, [3, 2, 1])
    assert partition(image).replicas == (3, 2, 1)


def test_a_leader_that_is_an_adding_replica_dropped_by_a_new_target_hands_over() -> None:
    image = with_topic(brokers(1, 2, 3, 4, 5))
    image = move(image, [4, 5, 3])
    image = expand_isr(image, (1, 2, 3, 4))  # 4 caught up, 5 not yet
    image = commit(image, d.elect_preferred_leaders(image))  # 4 is first: it leads
    assert partition(image).leader == 4
    image = move(image, [1, 2, 3])  # the original again: 4 leaves
    p = partition(image)
    assert (p.replicas, p.isr, p.leader, p.reassigning) == ((1, 2, 3), (1, 2, 3), 1, False)


def test_moves_survive_snapshots_and_the_brokers_json_image() -> None:
    image = with_topic(brokers(1, 2, 3, 4))
    image = move(image, [4, 2, 3])
    assert pickle.loads(pickle.dumps(image)) == image
    assert image_from_json(image_to_json(image)) == image


def test_create_partitions_and_the_topic_summary_use_the_target_factor() -> None:
    image = with_topic(brokers(1, 2, 3, 4))
    image = move(image, [4, 2])  # RF 3 -> 2 onto 4, which is still catching up
    assert partition(image).reassigning
    image = commit(image, d.create_partitions(image, "t", 2, rng=random.Random(1)))
    assert len(partition(image, index=1).replicas) == 2


# ------------------------------------------------------------------------------ property


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["move", "cancel", "catch_up", "fence", "unfence"]),
            st.permutations([1, 2, 3, 4, 5]),
            st.integers(1, 4),
        ),
        max_size=12,
    )
)
def test_any_sequence_of_moves_keeps_every_invariant(steps: list) -> None:
    """Moves, cancels, followers catching up and brokers fenced in any order: every image
    is valid (commit checks), a completed move has exactly its target, and the ISR only
    ever holds replicas."""
    image = with_topic(brokers(1, 2, 3, 4, 5))
    fenced: set[int] = set()
    for action, order, size in steps:
        p: PartitionRegistration = partition(image)
        if action == "move":
            target = [b for b in order if b not in fenced or b in p.original][:size]
            try:
                image = move(image, target)
            except KraftliteError as exc:
                assert exc.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
                continue
            after = partition(image)
            assert after.target == tuple(target)
        elif action == "cancel":
            try:
                image = move(image, None)
            except KraftliteError as exc:
                assert exc.code in {
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                }
        elif action == "catch_up" and p.leader != r.NO_LEADER:
            joining = [b for b in p.replicas if b not in fenced]
            image = expand_isr(image, tuple(dict.fromkeys([*p.isr, *joining])))
            assert not partition(image).reassigning or any(
                b in fenced for b in partition(image).target
            )
        elif action == "fence":
            broker = order[0]
            image = commit(image, d.fence_expired_brokers(image, [broker]))
            fenced.add(broker)
        elif action == "unfence" and fenced:
            broker = sorted(fenced)[0]
            epoch = image.brokers[broker].broker_epoch
            image = commit(image, d.broker_heartbeat(image, broker, epoch, image.version))
            fenced.discard(broker)


def test_a_move_no_alter_partition_completed_is_completed_by_the_periodic_check() -> None:
    """Target all in the ISR, but its only replicas were not live when the last one joined
    (here: fenced since, now back): the periodic check completes it."""
    image = with_topic(brokers(1, 2, 3, 4), rf=2)  # (1, 2)
    image = move(image, [2, 4])  # adding 4, removing 1
    image = expand_isr(image, (1, 2))  # nothing new
    assert d.complete_reassignments(image).records == ()
    image = commit(
        image,
        d.ControllerResult(
            (r.PartitionChangeRecord(topic_id="id-t", partition=0, isr=(1, 2, 4)),), None
        ),
    )  # as an AlterPartition of a leader that could not complete it would leave it
    assert partition(image).reassigning
    image = commit(image, d.complete_reassignments(image))
    p = partition(image)
    assert (p.replicas, p.reassigning, p.leader in (2, 4)) == ((2, 4), False, True)
