"""What a group may commit, apart from who commits it (that is `group.Group` rule 7), and
what deleting its offsets does (Kafka's OffsetDelete). Pure.

Rules:
1. A commit carries at most `MAX_OFFSETS_PER_COMMIT` entries (INVALID_REQUEST), and its
   records must fit one batch of `__consumer_offsets` (`max.message.bytes`; checked where
   the batch is made). Kafka bounds a commit only by its request size and answers a batch
   too large with INVALID_COMMIT_OFFSET_SIZE; the count bound lets us refuse before any work.
2. Each entry's metadata is at most `offset.metadata.max.bytes` (4096) bytes, UTF-8
   encoded: OFFSET_METADATA_TOO_LARGE. (Kafka's OffsetMetadataManager counts UTF-16 chars;
   bytes are what we store and are never more lenient.)
3. Each partition exists in the metadata image: UNKNOWN_TOPIC_OR_PARTITION (Kafka's
   KafkaApis answers so for a topic it does not know).
4. 0 <= offset <= 2^63 - 1 (Kafka's int64): OFFSET_OUT_OF_RANGE. Within that, any offset is
   taken, as Kafka takes it (issue 25: librdkafka's tests 0099 and 0140 commit above the
   high watermark): a consumer that resumes from an offset past the log's end gets
   OFFSET_OUT_OF_RANGE at its fetch, on both edges, and resets by its `auto.offset.reset`.
5. A commit is all or nothing: one refused entry refuses the request, and nothing of it is
   written.
6. Deleting committed offsets (Kafka's OffsetDelete, the group coordinator's deleteOffsets)
   names at most `MAX_OFFSETS_PER_DELETE` partitions (INVALID_REQUEST, nothing deleted).
   Each partition asked is answered on its own: UNKNOWN_TOPIC_OR_PARTITION when its topic or
   index does not exist (Kafka's KafkaApis checks it before the coordinator);
   GROUP_SUBSCRIBED_TO_TOPIC when the group consumes its topic (its consumers would lose
   their place), every topic counting as consumed when the group's subscriptions cannot be
   read (Kafka's ClassicGroup.isSubscribedToTopic); else deleted: a tombstone when it has a
   committed offset, nothing when it has none, answered alike (as Kafka answers). A
   partition named twice is answered twice and tombstoned once.
7. The group's own checks come first and refuse the whole request (coordinator.py rule 6):
   a deletion is never half applied, and its tombstones are one batch.
8. Committed offsets expire (Kafka's `offsets.retention.minutes`, KIP-211; `expired`): an
   offset of a group with no members goes once the group has had none for the retention
   and the offset was committed at least that long ago, so a group left empty loses its
   offsets together, one retention after its last member went, and a group that never
   had members (commits outside any membership) loses each one retention after its commit.
   How long a group has had no members counts from the last moment its coordinator saw
   one, or from when the coordinator loaded the group (membership is soft state: a
   coordinator that took the group over knows no more), so a coordinator move delays
   expiry and never hastens it. A group with members keeps every offset (Kafka also
   expires those of topics a consumer group no longer subscribes to; kraftlite does not).
   Its offsets gone, the group is gone (coordinator.py rule 4).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition
from kraftlite.protocol.internal import GroupKind

DEFAULT_OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes, Kafka's default
MAX_OFFSETS_PER_COMMIT = 10_000  # rule 1 (kraftlite's; no Kafka equivalent)
MAX_OFFSETS_PER_DELETE = MAX_OFFSETS_PER_COMMIT  # rule 6 (Kafka: the request size only)
MAX_OFFSET = 2**63 - 1  # rule 4: Kafka's offsets are int64


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """What a commit keeps of one partition. `leader_epoch` is the epoch of the leader
    whose record the offset follows, as the consumer saw it (Kafka's committed leader
    epoch, KIP-320; OffsetCommit v6+), -1 when unknown; it is kept and answered, never
    checked (as Kafka's coordinator)."""

    offset: int
    metadata: str
    leader_epoch: int = -1
    # the group's protocol as the commit showed it (coordinator.py's Shard.kind): classic
    # for Kafka's classic members and commits outside any membership over Kafka's protocol
    kind: GroupKind = field(default="consumer", compare=False)
    # when it was committed (the commit record's time, wall clock ms; -1: unknown), rule 8
    commit_ms: int = field(default=-1, compare=False)


def check_count(count: int) -> None:
    """Rule 1."""
    if count > MAX_OFFSETS_PER_COMMIT:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"a commit carries at most {MAX_OFFSETS_PER_COMMIT} offsets; this one {count}",
        )


def check_metadata(
    offsets: Sequence[tuple[TopicPartition, CommittedOffset]], max_bytes: int
) -> None:
    """Rule 2."""
    for (topic, partition), committed in offsets:
        # A str of n chars is at most 4n UTF-8 bytes: only long ones need encoding.
        if len(committed.metadata) * 4 <= max_bytes:
            continue
        size = len(committed.metadata.encode("utf-8", "surrogatepass"))
        if size > max_bytes:
            raise KraftliteError(
                ErrorCode.OFFSET_METADATA_TOO_LARGE,
                f"the metadata of {topic}-{partition} is {size} bytes; "
                f"offset.metadata.max.bytes is {max_bytes}",
            )


def check_partitions(
    partitions: Iterable[TopicPartition], partition_counts: Mapping[str, int]
) -> None:
    """Rule 3. `partition_counts`: topic -> partitions, for the topics that exist."""
    for topic, partition in partitions:
        count = partition_counts.get(topic)
        if count is None:
            raise KraftliteError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}: nothing to commit"
            )
        if not 0 <= partition < count:
            raise KraftliteError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {topic!r} has no partition {partition} (it has {count})",
            )


def check_in_range(offsets: Sequence[tuple[TopicPartition, CommittedOffset]]) -> None:
    """Rule 4."""
    for (topic, partition), committed in offsets:
        if not 0 <= committed.offset <= MAX_OFFSET:
            raise KraftliteError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {committed.offset} of {topic}-{partition} is not between 0 and "
                f"{MAX_OFFSET}",
                topic=topic,
                partition=partition,
            )


def check_deletion_count(count: int) -> None:
    """Rule 6's bound."""
    if count > MAX_OFFSETS_PER_DELETE:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"a deletion names at most {MAX_OFFSETS_PER_DELETE} partitions; this one {count}",
        )


@dataclass(frozen=True, slots=True)
class OffsetDeletion:
    """Rule 6's answer for one group: `refused`, the partitions asked that are not deleted
    with why (UNKNOWN_TOPIC_OR_PARTITION or GROUP_SUBSCRIBED_TO_TOPIC; the others are);
    `tombstoned`, the partitions whose committed offsets go (each once, in the order
    asked)."""

    refused: Mapping[TopicPartition, ErrorCode]
    tombstoned: tuple[TopicPartition, ...]


def plan_deletion(
    asked: Sequence[TopicPartition],
    committed: Mapping[TopicPartition, CommittedOffset],
    partition_counts: Mapping[str, int],
    subscribed: Collection[str] | None,
) -> OffsetDeletion:
    """Rule 6. `committed`: the group's offsets now; `partition_counts`: topic ->
    partitions, for the topics that exist; `subscribed`: the topics the group consumes, None
    when they cannot be known (then every topic counts as consumed)."""
    check_deletion_count(len(asked))
    refused: dict[TopicPartition, ErrorCode] = {}
    tombstoned: dict[TopicPartition, None] = {}
    for topic, partition in asked:
        count = partition_counts.get(topic)
        if count is None or not 0 <= partition < count:
            refused[topic, partition] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif subscribed is None or topic in subscribed:
            refused[topic, partition] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        elif (topic, partition) in committed:
            tombstoned[topic, partition] = None
    return OffsetDeletion(refused, tuple(tombstoned))


def expired(
    committed: Mapping[TopicPartition, CommittedOffset],
    idle_ms: int,
    now_ms: int,
    retention_ms: int,
) -> tuple[TopicPartition, ...]:
    """Rule 8 for one group: the partitions whose offsets expire. `idle_ms`: how long the
    group has had no members as its coordinator knows it (0 while it has some); `now_ms`:
    the wall clock, which commit times are in."""
    if idle_ms < retention_ms:
        return ()
    return tuple(tp for tp, c in committed.items() if now_ms - c.commit_ms >= retention_ms)
