"""What a metadata change means for one broker (Kafka's TopicDelta.localChanges).

Brokers react to these, never to raw records: become leader, become follower, delete a
replica. Pure: two images in, the broker's changes out.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftlite.metadata.image import MetadataImage, PartitionRegistration


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


def local_changes(old: MetadataImage, new: MetadataImage, broker_id: int) -> LocalChanges:
    leaders: list[LocalPartition] = []
    followers: list[LocalPartition] = []
    deletes: list[tuple[str, str, int]] = []
    for topic, index, registration in new.partitions():
        if broker_id not in registration.replicas:
            continue
        old_topic = old.topics.get(topic.topic_id)
        before = None if old_topic is None else old_topic.partitions.get(index)
        if before == registration:
            continue
        local = LocalPartition(topic.topic_id, topic.name, index, registration)
        (leaders if registration.leader == broker_id else followers).append(local)
    for topic, index, registration in old.partitions():
        if broker_id not in registration.replicas:
            continue
        new_topic = new.topics.get(topic.topic_id)
        after = None if new_topic is None else new_topic.partitions.get(index)
        if after is None or broker_id not in after.replicas:
            deletes.append((topic.topic_id, topic.name, index))
    return LocalChanges(tuple(leaders), tuple(followers), tuple(deletes))
