"""What a metadata change means for one broker (Kafka's TopicDelta.localChanges).

Brokers react to these, never to raw records: become leader, become follower, delete a
replica. Pure: two images in, and what the records between them touched (`Touched`), the
broker's changes out. Only touched partitions are compared, so a change costs what it
touches, not the size of the cluster; without `Touched` (a snapshot), every partition is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kraftlite.metadata.image import MetadataImage, PartitionRegistration
from kraftlite.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
)


@dataclass
class Touched:
    """What a run of records touched: partitions whose registration was created or
    changed, topics removed, and topics whose configs changed.
    """

    partitions: set[tuple[str, int]] = field(default_factory=set)
    removed_topics: set[str] = field(default_factory=set)
    config_topics: set[str] = field(default_factory=set)

    def add(self, records: Iterable[MetadataRecord]) -> None:
        for record in records:
            if isinstance(record, PartitionRecord | PartitionChangeRecord):
                self.partitions.add((record.topic_id, record.partition))
            elif isinstance(record, RemoveTopicRecord):
                self.removed_topics.add(record.topic_id)
            elif isinstance(record, ConfigRecord):
                self.config_topics.add(record.topic_id)

    def merge(self, other: Touched) -> None:
        self.partitions |= other.partitions
        self.removed_topics |= other.removed_topics
        self.config_topics |= other.config_topics


@dataclass(frozen=True, slots=True)
class LocalPartition:
    topic_id: str
    topic: str
    partition: int
    registration: PartitionRegistration


@dataclass(frozen=True, slots=True)
class LocalChanges:
    """Partitions this broker now leads or follows whose registration is new or changed, and
    replicas it must delete (topic removed, or the broker left the replica set).
    """

    leaders: tuple[LocalPartition, ...]
    followers: tuple[LocalPartition, ...]
    deletes: tuple[tuple[str, str, int], ...]  # (topic_id, topic name, partition)

    def __bool__(self) -> bool:
        return bool(self.leaders or self.followers or self.deletes)


def local_changes(
    old: MetadataImage, new: MetadataImage, broker_id: int, touched: Touched | None = None
) -> LocalChanges:
    """The broker's changes from `old` to `new`; `touched` (what the records between them
    touched) limits the comparison to those partitions.
    """
    leaders: list[LocalPartition] = []
    followers: list[LocalPartition] = []
    deletes: list[tuple[str, str, int]] = []
    if touched is None:
        candidates: Iterable[tuple[str, int]] = [
            (topic.topic_id, index)
            for image in (old, new)
            for topic, index, _ in image.partitions()
        ]
    else:
        removed = [
            (topic_id, index)
            for topic_id in touched.removed_topics
            if (topic := old.topics.get(topic_id)) is not None
            for index in topic.partitions
        ]
        candidates = [*touched.partitions, *removed]
    for topic_id, index in dict.fromkeys(candidates):
        old_topic, new_topic = old.topics.get(topic_id), new.topics.get(topic_id)
        before = None if old_topic is None else old_topic.partitions.get(index)
        after = None if new_topic is None else new_topic.partitions.get(index)
        if after is not None and new_topic is not None and broker_id in after.replicas:
            if before != after:
                local = LocalPartition(topic_id, new_topic.name, index, after)
                (leaders if after.leader == broker_id else followers).append(local)
        elif before is not None and old_topic is not None and broker_id in before.replicas:
            deletes.append((topic_id, old_topic.name, index))
    return LocalChanges(tuple(leaders), tuple(followers), tuple(deletes))
