"""Replay: each record's effect, compare-and-set on the image version, invariant violations."""

from __future__ import annotations

import pickle

import orjson
import pytest

from kraftlite.metadata import records as r
from kraftlite.metadata.image import (
    BrokerRegistration,
    MetadataImage,
    MetadataInvariantError,
    PartitionRegistration,
    StaleBatchError,
    apply_batch,
    check_invariants,
)
from kraftlite.metadata.views import image_from_json, image_to_json
from tests.harness.metadata import live_brokers, play


def cluster() -> MetadataImage:
    image = live_brokers(1, 2, 3)
    return play(
        image,
        r.TopicRecord(name="t", topic_id="T"),
        r.PartitionRecord(topic_id="T", partition=0, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1),
    )


def test_replay_builds_the_image_and_counts_versions() -> None:
    image = cluster()
    assert image.version == 7
    assert image.live_broker_ids() == [1, 2, 3]
    assert image.brokers[2].broker_epoch == 3
    topic = image.topic("t")
    assert topic is not None and topic.topic_id == "T"
    assert topic.partitions[0] == PartitionRegistration((1, 2, 3), (1, 2, 3), 1, 0, 0)
    check_invariants(image)


def test_partition_change_bumps_epochs() -> None:
    image = play(cluster(), r.PartitionChangeRecord(topic_id="T", partition=0, isr=(1, 2)))
    assert image.topics["T"].partitions[0] == PartitionRegistration((1, 2, 3), (1, 2), 1, 0, 1)
    image = play(image, r.PartitionChangeRecord(topic_id="T", partition=0, leader=2))
    assert image.topics["T"].partitions[0] == PartitionRegistration((1, 2, 3), (1, 2), 2, 1, 2)


def test_configs_set_and_reset() -> None:
    image = play(cluster(), r.ConfigRecord(topic_id="T", name="retention.ms", value="5"))
    assert dict(image.topics["T"].configs) == {"retention.ms": "5"}
    image = play(image, r.ConfigRecord(topic_id="T", name="retention.ms", value=None))
    assert dict(image.topics["T"].configs) == {}


def test_remove_topic_frees_the_name() -> None:
    image = play(cluster(), r.RemoveTopicRecord(topic_id="T"))
    assert image.topic("t") is None and not image.topics
    image = play(image, r.TopicRecord(name="t", topic_id="T2"))
    assert image.topic("t") is not None


def test_a_stale_batch_is_rejected_whole() -> None:
    image = cluster()
    stale = r.RecordBatch(image.version - 1, (r.RemoveTopicRecord(topic_id="T"),))
    with pytest.raises(StaleBatchError):
        apply_batch(image, stale)
    assert image.topic("t") is not None


@pytest.mark.parametrize(
    "record",
    [
        r.TopicRecord(name="t", topic_id="X"),  # duplicate name
        r.PartitionRecord(topic_id="T", partition=0, replicas=(1,), isr=(1,), leader=1),
        r.PartitionRecord(topic_id="T", partition=1, replicas=(1, 1), isr=(1,), leader=1),
        r.PartitionRecord(topic_id="T", partition=1, replicas=(1, 2), isr=(3,), leader=3),
        r.PartitionRecord(topic_id="T", partition=1, replicas=(1, 2), isr=(1,), leader=2),
        r.PartitionChangeRecord(topic_id="T", partition=9, isr=(1,)),
        r.PartitionChangeRecord(topic_id="T", partition=0, isr=(2, 3)),  # leader 1 left out
        r.PartitionChangeRecord(topic_id="nope", partition=0, isr=(1,)),
        r.FenceBrokerRecord(broker_id=1, broker_epoch=99),
        r.RegisterBrokerRecord(broker_id=1, incarnation_id="z", broker_epoch=1, url="u"),
        r.RemoveTopicRecord(topic_id="nope"),
    ],
)
def test_records_that_break_invariants_are_fatal(record: r.MetadataRecord) -> None:
    image = cluster()
    with pytest.raises(MetadataInvariantError):
        play(image, record)


def test_images_pickle_round_trip() -> None:
    # pysyncobj snapshots pickle the consumer's state: the image must survive it.
    image = cluster()
    copy = pickle.loads(pickle.dumps(image))
    assert copy == image
    assert copy.topics["T"].partitions == image.topics["T"].partitions


def test_a_broker_registration_pickled_before_controlled_shutdown_still_loads() -> None:
    loaded = BrokerRegistration.__new__(BrokerRegistration)
    loaded.__setstate__([1, "inc", 5, "http://b1", None, False])  # the older six fields
    assert loaded == BrokerRegistration(1, "inc", 5, "http://b1", None, False)
    assert loaded.in_controlled_shutdown is False


def test_a_snapshot_from_before_flat_topics_still_loads() -> None:
    """Raft snapshots written by the previous kraftlite held TopicImages and fewer fields."""
    image = cluster()
    old_state = (image.version, image.brokers, image.topics, image.topic_ids, image.controllers)
    loaded = MetadataImage.__new__(MetadataImage)
    loaded.__setstate__(old_state)
    assert loaded.topics == image.topics and loaded.users == {} and loaded.acls == {}


def test_the_metadata_snapshot_that_brokers_follow_round_trips() -> None:
    image = play(
        cluster(),
        r.ConfigRecord(topic_id="T", name="retention.ms", value="5"),
        r.RegisterControllerRecord(node_id=1, url="http://c1"),
    )
    image = play(
        image,
        r.FenceBrokerRecord(broker_id=3, broker_epoch=image.brokers[3].broker_epoch),
        r.PartitionChangeRecord(topic_id="T", partition=0, isr=(1, 2)),
    )
    assert image_from_json(orjson.loads(orjson.dumps(image_to_json(image)))) == image


def test_a_batch_changes_partitions_in_its_own_copy_never_in_the_base_image() -> None:
    base = cluster()
    before = dict(base.topics["T"].partitions)
    image = play(
        base,
        r.PartitionRecord(topic_id="T", partition=1, replicas=(2, 3), isr=(2, 3), leader=2),
        r.PartitionChangeRecord(topic_id="T", partition=0, isr=(1, 2)),
        r.PartitionChangeRecord(topic_id="T", partition=1, leader=3),
        r.ConfigRecord(topic_id="T", name="retention.ms", value="5"),
    )
    assert dict(base.topics["T"].partitions) == before  # readers of the old image unaffected
    partitions = image.topics["T"].partitions
    assert partitions[0].isr == (1, 2) and partitions[1].leader == 3
    assert len(partitions) == 2 and dict(image.topics["T"].configs) == {"retention.ms": "5"}
    # the next batch starts from this image and must not change it either
    after = play(image, r.PartitionChangeRecord(topic_id="T", partition=1, leader=2))
    assert image.topics["T"].partitions[1].leader == 3
    assert after.topics["T"].partitions[1].leader == 2
