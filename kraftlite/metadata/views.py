"""JSON views of the metadata image: what the HTTP API returns, and the full-image snapshot
that brokers fetch to follow metadata. Pure.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kraftlite.metadata.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from kraftlite.metadata.records import (
    NO_LEADER,
    AccessControlEntryRecord,
    UserScramCredentialRecord,
    record_from_json,
    record_to_json,
)


def partition_view(index: int, p: PartitionRegistration) -> dict[str, Any]:
    return {
        "partition": index,
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "adding_replicas": list(p.adding),
        "removing_replicas": list(p.removing),
    }


def topic_view(topic: TopicImage) -> dict[str, Any]:
    """`GET /v1/topics/{topic}` as a controller knows it (brokers add log offsets)."""
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "configs": dict(sorted(topic.configs.items())),
        "partitions": [partition_view(i, topic.partitions[i]) for i in sorted(topic.partitions)],
    }


def topic_summary(topic: TopicImage) -> dict[str, Any]:
    first = topic.partitions.get(0)
    return {
        "name": topic.name,
        "partitions": len(topic.partitions),
        "replication_factor": len(first.target) if first else 0,
    }


class PartitionCounts(NamedTuple):
    topics: int
    partitions: int
    offline: int  # no leader
    under_replicated: int  # ISR smaller than the replication factor
    reassigning: int


def partition_counts(image: MetadataImage) -> PartitionCounts:
    """One walk over every partition (controllers' metrics, the console's health)."""
    topics = partitions = offline = under = moving = 0
    for topic in image.topics.values():
        topics += 1
        for registration in topic.partitions.values():
            partitions += 1
            offline += registration.leader == NO_LEADER
            under += registration.under_replicated
            moving += registration.reassigning
    return PartitionCounts(topics, partitions, offline, under, moving)


def partition_health(image: MetadataImage) -> dict[str, int]:
    """Under-replicated (PartitionRegistration.under_replicated) and offline (no leader)
    partitions of the whole cluster, from metadata."""
    counts = partition_counts(image)
    return {
        "under_replicated_partitions": counts.under_replicated,
        "offline_partitions": counts.offline,
    }


def broker_view(broker: BrokerRegistration) -> dict[str, Any]:
    return {
        "id": broker.broker_id,
        "url": broker.url,
        "kafka": broker.kafka,
        "rack": broker.rack,
        "fenced": broker.fenced,
        "in_controlled_shutdown": broker.in_controlled_shutdown,
        "draining": broker.draining,
        "broker_epoch": broker.broker_epoch,
    }


def image_to_json(image: MetadataImage) -> dict[str, Any]:
    """The whole image, for brokers that follow metadata (read back by `image_from_json`)."""
    return {
        "version": image.version,
        "controllers": {str(k): v for k, v in sorted(image.controllers.items())},
        "brokers": [
            {**broker_view(b), "incarnation_id": b.incarnation_id}
            for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)
        ],
        "topics": [topic_view(t) for t in sorted(image.topics.values(), key=lambda t: t.name)],
        "users": {
            name: {
                "version": image.user_versions.get(name, 0),
                "credentials": [record_to_json(c) for _, c in sorted(mechanisms.items())],
            }
            for name, mechanisms in sorted(image.users.items())
        },
        "acls": [record_to_json(a) for _, a in sorted(image.acls.items())],
        "quotas": {p: dict(q) for p, q in sorted(image.quotas.items())},
        "broker_configs": {str(b): dict(c) for b, c in sorted(image.broker_configs.items())},
        "voters": {str(n): a for n, a in sorted(image.voters.items())},
    }


def image_from_json(data: dict[str, Any]) -> MetadataImage:
    brokers = {
        b["id"]: BrokerRegistration(
            b["id"],
            b["incarnation_id"],
            b["broker_epoch"],
            b["url"],
            b["rack"],
            b["fenced"],
            b.get("in_controlled_shutdown", False),
            b.get("draining", False),
            b.get("kafka"),
        )
        for b in data["brokers"]
    }
    topics = {
        t["topic_id"]: TopicImage(
            t["topic_id"],
            t["name"],
            {
                p["partition"]: PartitionRegistration(
                    tuple(p["replicas"]),
                    tuple(p["isr"]),
                    p["leader"],
                    p["leader_epoch"],
                    p["partition_epoch"],
                    tuple(p.get("adding_replicas", ())),
                    tuple(p.get("removing_replicas", ())),
                )
                for p in t["partitions"]
            },
            dict(t["configs"]),
        )
        for t in data["topics"]
    }
    return MetadataImage(
        data["version"],
        brokers,
        topics,
        {t.name: t.topic_id for t in topics.values()},
        {int(k): v for k, v in data["controllers"].items()},
        users={
            name: {c.mechanism: c for c in map(_credential, user["credentials"])}
            for name, user in data.get("users", {}).items()
        },
        user_versions={name: user["version"] for name, user in data.get("users", {}).items()},
        acls={a.id: a for a in map(_acl, data.get("acls", []))},
        quotas={p: dict(q) for p, q in data.get("quotas", {}).items()},
        broker_configs={int(b): dict(c) for b, c in data.get("broker_configs", {}).items()},
        voters={int(n): a for n, a in data.get("voters", {}).items()},
    )


def _credential(item: dict[str, Any]) -> UserScramCredentialRecord:
    record = record_from_json(item)
    assert isinstance(record, UserScramCredentialRecord), record
    return record


def _acl(item: dict[str, Any]) -> AccessControlEntryRecord:
    record = record_from_json(item)
    assert isinstance(record, AccessControlEntryRecord), record
    return record
