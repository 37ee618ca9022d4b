"""The pure parts of the group admin APIs: what deleting a group's offsets does
(groups/offsets.py rule 6), a KIP-848 group as ConsumerGroupDescribe shows it
(groups/coordinator.py rule 7), and the Kafka edge's answer shapes (kafka/group_apis.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import (
    ASSIGNOR_NAME,
    ConsumerGroupDescription,
    MemberDescription,
    describe_consumer_group,
    description_bound,
)
from kraftlite.groups.group import Group
from kraftlite.groups.offsets import MAX_OFFSETS_PER_DELETE, CommittedOffset, plan_deletion
from kraftlite.kafka.acl_apis import authorized_operations
from kraftlite.kafka.group_apis import (
    by_topic,
    described_group,
    described_size,
    producer_states,
)
from kraftlite.security.acls import Action, Operation, ResourceType
from kraftlite.service import ActiveProducer

SUBSCRIBED = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
COUNTS = {"orders": 2, "other": 1}


def offsets(*partitions: tuple[str, int]) -> dict[tuple[str, int], CommittedOffset]:
    return {tp: CommittedOffset(1, "") for tp in partitions}


# -- offsets.py rule 6 ---------------------------------------------------------------------


def test_only_existing_partitions_of_topics_not_consumed_are_deleted() -> None:
    deletion = plan_deletion(
        [("orders", 0), ("orders", 1), ("other", 0), ("nope", 0), ("other", 1), ("other", -1)],
        offsets(("orders", 0), ("other", 0), ("nope", 0)),
        COUNTS,
        {"other"},
    )
    assert deletion.refused == {
        ("other", 0): SUBSCRIBED,
        ("nope", 0): UNKNOWN,  # even with an offset committed: Kafka answers so for a topic
        ("other", 1): UNKNOWN,  # it does not know (DeleteGroups removes those)
        ("other", -1): UNKNOWN,
    }
    # orders-1 has nothing committed: not refused, nothing to tombstone
    assert deletion.tombstoned == (("orders", 0),)


def test_unknown_subscriptions_keep_every_offset() -> None:
    """Kafka's ClassicGroup.isSubscribedToTopic: a group whose subscriptions cannot be read
    counts as consuming every topic."""
    deletion = plan_deletion(
        [("orders", 0), ("nope", 0)], offsets(("orders", 0)), COUNTS, subscribed=None
    )
    assert deletion.refused == {("orders", 0): SUBSCRIBED, ("nope", 0): UNKNOWN}
    assert deletion.tombstoned == ()


def test_a_partition_named_twice_is_tombstoned_once_in_the_order_asked() -> None:
    deletion = plan_deletion(
        [("other", 0), ("orders", 1), ("other", 0), ("orders", 0)],
        offsets(("orders", 0), ("orders", 1), ("other", 0)),
        COUNTS,
        frozenset(),
    )
    assert deletion.refused == {}
    assert deletion.tombstoned == (("other", 0), ("orders", 1), ("orders", 0))


def test_a_deletion_names_a_bounded_number_of_partitions() -> None:
    many = [("orders", 0)] * (MAX_OFFSETS_PER_DELETE + 1)
    with pytest.raises(KraftliteError) as info:
        plan_deletion(many, {}, COUNTS, frozenset())
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert plan_deletion(many[1:], {}, COUNTS, frozenset()).tombstoned == ()


_partitions = st.tuples(st.sampled_from(["orders", "other", "nope"]), st.integers(-1, 2))


@given(
    asked=st.lists(_partitions, max_size=20),
    committed=st.sets(_partitions, max_size=10),
    subscribed=st.none() | st.frozensets(st.sampled_from(["orders", "other", "nope"])),
)
def test_tombstones_are_committed_partitions_asked_and_not_refused(
    asked: list[tuple[str, int]],
    committed: set[tuple[str, int]],
    subscribed: frozenset[str] | None,
) -> None:
    deletion = plan_deletion(asked, offsets(*committed), COUNTS, subscribed)
    tombstoned = set(deletion.tombstoned)
    assert len(tombstoned) == len(deletion.tombstoned)  # each once
    assert tombstoned == {tp for tp in asked if tp in committed} - set(deletion.refused)
    assert set(deletion.refused) <= set(asked)
    for topic, _ in tombstoned:  # never a topic the group may consume
        assert subscribed is not None and topic not in subscribed


# -- coordinator.py rule 7 -------------------------------------------------------------------


def test_a_group_is_described_with_each_members_assignment_and_target() -> None:
    group = Group("g")
    group.join("b", "client-b", ["orders"], 10_000, 0, COUNTS)  # b gets both partitions
    group.join("a", "client-a", ["orders", "other"], 10_000, 0, COUNTS)  # b still owns them
    described = describe_consumer_group(group, COUNTS)
    assert (described.group, described.state, described.assignor) == ("g", "reconciling", "uniform")
    assert described.group_epoch == described.assignment_epoch == 1
    a, b = described.members  # by member id
    assert (a.member_id, a.client_id, a.topics, a.instance_id) == (
        "a",
        "client-a",
        ("orders", "other"),
        None,
    )
    assert a.assignment == {("other", 0)}  # only what nobody owns yet
    assert b.assignment == {("orders", 0), ("orders", 1)}
    # the target: what the uniform sticky assignor gives each now
    assert a.target | b.target == {("orders", 0), ("orders", 1), ("other", 0)}
    assert not a.target & b.target
    assert abs(len(a.target) - len(b.target)) <= 1


def test_an_empty_group_is_described_empty() -> None:
    described = describe_consumer_group(Group("g"), {})
    assert described == ConsumerGroupDescription("g", "empty", 0, 0, ASSIGNOR_NAME, ())


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "d"]),
            st.sets(st.sampled_from(["orders", "other", "gone", "wide"]), min_size=1),
            st.booleans(),  # heartbeats (confirming) after joining
        ),
        max_size=12,
    ),
    st.integers(0, 6),
)
def test_a_descriptions_bound_is_never_below_its_size(
    joins: list[tuple[str, set[str], bool]], wide: int
) -> None:
    """Rule 7's bound, found without the assignor, for whatever members hold: at least the
    items described (so a group refused by it would not have fit), a topic deleted or not."""
    counts = {**COUNTS, "wide": wide}
    group = Group("g")
    for now, (member, topics, beat) in enumerate(joins):
        if member in group.members:
            answer = group.heartbeat(
                member, group.members[member].epoch, now, counts, topics=topics
            )
        else:
            answer = group.join(member, "c", topics, 10_000, now, counts)
        if beat:
            group.heartbeat(member, answer.member_epoch, now, counts)
    for shown in (counts, {**counts, "wide": 0}):  # "wide" deleted since
        bound = description_bound(group, shown)
        assert bound >= described_size(describe_consumer_group(group, shown))


# -- the Kafka edge's answers (group_apis.py) ------------------------------------------------


def test_answers_are_grouped_by_topic_in_the_order_asked() -> None:
    answers = [(("b", 1), 0), (("a", 0), 3), (("b", 0), 86), (("b", 1), 0)]
    assert by_topic(answers) == [("b", [(1, 0), (0, 86), (1, 0)]), ("a", [(0, 3)])]


def test_authorized_operations_are_kafkas_bit_set() -> None:
    def granting(*operations: Operation) -> Callable[[Action], bool]:
        return lambda action: action.operation in operations and action.resource_name == "g"

    group = ResourceType.GROUP
    assert authorized_operations(granting(), group, "g") == 0
    assert authorized_operations(granting(Operation.DESCRIBE), group, "g") == 1 << 8
    every = granting(*Operation)
    assert authorized_operations(every, group, "g") == (1 << 3) | (1 << 8) | (1 << 6)
    assert authorized_operations(every, group, "other") == 0
    # only what the resource type has: a topic's eight, the cluster's seven (Kafka's)
    assert authorized_operations(every, ResourceType.TOPIC, "g") == sum(
        1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11)
    )
    assert authorized_operations(every, ResourceType.CLUSTER, "g") == sum(
        1 << code for code in (5, 7, 8, 9, 10, 11, 12)
    )


def test_a_described_group_shows_only_topics_that_exist_and_may_be_seen() -> None:
    orders, other = uuid.uuid4(), uuid.uuid4()
    member = MemberDescription(
        "m",
        "static-1",
        "client",
        4,
        ("hidden", "orders", "other"),
        frozenset({("orders", 1), ("orders", 0), ("hidden", 0), ("gone", 0)}),
        frozenset({("other", 0)}),
    )
    described = ConsumerGroupDescription("g", "stable", 4, 4, "uniform", (member,))
    answer = described_group(
        described, {"orders": orders, "other": other, "hidden": uuid.uuid4()}, "hidden".__ne__
    )
    (shown,) = answer["members"]
    assert (answer["group_state"], answer["group_epoch"], answer["assignor_name"]) == (
        "Stable",  # Kafka's name for it (group.py's is "stable")
        4,
        "uniform",
    )
    assert (shown["member_id"], shown["instance_id"], shown["member_epoch"]) == ("m", "static-1", 4)
    assert shown["subscribed_topic_names"] == ["orders", "other"]
    assert shown["assignment"] == {
        "topic_partitions": [{"topic_id": orders, "topic_name": "orders", "partitions": [0, 1]}]
    }
    assert shown["target_assignment"] == {
        "topic_partitions": [{"topic_id": other, "topic_name": "other", "partitions": [0]}]
    }
    assert described_size(described) == 1 + 3 + 4 + 1
    assert described_size(ConsumerGroupDescription("g", "empty", 0, 0, "uniform", ())) == 1


def test_producers_are_listed_as_describe_producers_lists_them() -> None:
    assert producer_states([ActiveProducer(7, 2, 41, 1_700_000_000_000)]) == [
        {
            "producer_id": 7,
            "producer_epoch": 2,
            "last_sequence": 41,
            "last_timestamp": 1_700_000_000_000,
            "coordinator_epoch": -1,  # no transactions
            "current_txn_start_offset": -1,
        }
    ]
