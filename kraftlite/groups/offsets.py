"""What a group may commit, apart from who commits it (that is `group.Group` rule 7). Pure.

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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition

DEFAULT_OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes, Kafka's default
MAX_OFFSETS_PER_COMMIT = 10_000  # rule 1 (kraftlite's; no Kafka equivalent)
MAX_OFFSET = 2**63 - 1  # rule 4: Kafka's offsets are int64


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str


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
