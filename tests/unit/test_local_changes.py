"""What a broker must do after a metadata change: lead, follow, delete."""

from __future__ import annotations

from kraftlite.metadata import records as r
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.local_changes import Touched, local_changes
from tests.harness.metadata import live_brokers, play


def base() -> MetadataImage:
    return live_brokers(1, 2, 3)


def test_new_partitions_split_into_leaders_and_followers() -> None:
    old = base()
    new = play(
        old,
        r.TopicRecord(name="t", topic_id="T"),
        r.PartitionRecord(topic_id="T", partition=0, replicas=(1, 2), isr=(1, 2), leader=1),
        r.PartitionRecord(topic_id="T", partition=1, replicas=(2, 3), isr=(2, 3), leader=2),
    )
    one = local_changes(old, new, 1)
    assert [(p.topic, p.partition) for p in one.leaders] == [("t", 0)]
    assert one.followers == () and one.deletes == ()
    two = local_changes(old, new, 2)
    assert [p.partition for p in two.leaders] == [1]
    assert [p.partition for p in two.followers] == [0]
    assert not local_changes(new, new, 1)


def test_leader_change_and_topic_removal() -> None:
    old = play(
        base(),
        r.TopicRecord(name="t", topic_id="T"),
        r.PartitionRecord(topic_id="T", partition=0, replicas=(1, 2), isr=(1, 2), leader=1),
    )
    moved = play(old, r.PartitionChangeRecord(topic_id="T", partition=0, leader=2, isr=(2,)))
    assert [p.registration.leader_epoch for p in local_changes(old, moved, 1).followers] == [1]
    assert [p.partition for p in local_changes(old, moved, 2).leaders] == [0]
    gone = play(moved, r.RemoveTopicRecord(topic_id="T"))
    assert local_changes(moved, gone, 1).deletes == (("T", "t", 0),)
    assert local_changes(moved, gone, 3).deletes == ()


def test_changes_from_what_records_touched_match_the_whole_image_comparison() -> None:
    """The delta path (metadata followed as a log) against the image path."""
    old = play(
        base(),
        r.TopicRecord(name="t", topic_id="T"),
        r.PartitionRecord(topic_id="T", partition=0, replicas=(1, 2), isr=(1, 2), leader=1),
        r.PartitionRecord(topic_id="T", partition=1, replicas=(2, 3), isr=(2, 3), leader=2),
        r.TopicRecord(name="u", topic_id="U"),
        r.PartitionRecord(topic_id="U", partition=0, replicas=(1, 3), isr=(1, 3), leader=3),
    )
    steps = [
        (r.RemoveTopicRecord(topic_id="U"),),
        (
            r.PartitionChangeRecord(
                topic_id="T", partition=0, replicas=(2, 3), isr=(2, 3), leader=2
            ),
        ),
        (
            r.PartitionChangeRecord(topic_id="T", partition=1, leader=3),
            r.ConfigRecord(topic_id="T", name="retention.ms", value="1"),
        ),
        (r.TopicRecord(name="u", topic_id="U2"),),
    ]
    for records in steps:
        new = play(old, *records)
        touched = Touched()
        touched.add(records)
        for broker in (1, 2, 3):
            delta = local_changes(old, new, broker, touched)
            whole = local_changes(old, new, broker)
            assert sorted(map(repr, delta.leaders)) == sorted(map(repr, whole.leaders))
            assert sorted(map(repr, delta.followers)) == sorted(map(repr, whole.followers))
            assert sorted(delta.deletes) == sorted(whole.deletes)
        old = new
    removal = Touched()
    removal.add([r.RemoveTopicRecord(topic_id="X")])
    assert removal.removed_topics == {"X"} and not removal.partitions


def test_a_removed_topic_deletes_its_replicas_through_the_delta_path() -> None:
    old = play(
        base(),
        r.TopicRecord(name="t", topic_id="T"),
        r.PartitionRecord(topic_id="T", partition=0, replicas=(1, 2), isr=(1, 2), leader=1),
    )
    records = (r.RemoveTopicRecord(topic_id="T"),)
    touched = Touched()
    touched.add(records)
    new = play(old, *records)
    assert local_changes(old, new, 2, touched).deletes == (("T", "t", 0),)
    assert local_changes(old, new, 3, touched).deletes == ()
