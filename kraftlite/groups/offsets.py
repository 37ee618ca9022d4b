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
4. 0 <= offset <= the partition's high watermark: OFFSET_OUT_OF_RANGE. Kafka accepts any
   offset and leaves it to the consumer's `auto.offset.reset` at its next fetch; we refuse
   it at the door instead, because no consumer can have read past the high watermark, and
   an offset far beyond it (2^64-1) left a consumer waiting for records that never come.
5. High watermarks only grow (an unclean election aside), so a bound once learned stays
   valid: `HighWatermarks` keeps the largest seen per partition, by topic id (a topic
   deleted and created again starts over), and only an offset above it costs a question to
   the partition's leader. The largest seen also covers a new leader whose own high
   watermark lags its predecessor's for a moment. A partition whose leader cannot be asked
   refuses only offsets above the known bound, with a retriable REQUEST_TIMED_OUT.
6. A commit is all or nothing: one refused entry refuses the request, and nothing of it is
   written.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.assignor import TopicPartition

DEFAULT_OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes, Kafka's default
MAX_OFFSETS_PER_COMMIT = 10_000  # rule 1 (kraftlite's; no Kafka equivalent)
PartitionKey = tuple[str, int]  # (topic id, partition): survives a topic's re-creation


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


class HighWatermarks:
    """Rule 5: the largest high watermark seen per partition. Mutated only by `learn` and
    `retain`; a bound never goes down while its topic lives.
    """

    def __init__(self) -> None:
        self._known: dict[PartitionKey, int] = {}

    def bound(self, key: PartitionKey) -> int:
        return self._known.get(key, 0)

    def learn(self, key: PartitionKey, high_watermark: int) -> None:
        if high_watermark > self._known.get(key, 0):
            self._known[key] = high_watermark

    def retain(self, topic_ids: Collection[str]) -> None:
        """Forget deleted topics (so this holds one entry per live partition at most)."""
        for key in [k for k in self._known if k[0] not in topic_ids]:
            del self._known[key]


def check_in_range(
    offsets: Sequence[tuple[TopicPartition, CommittedOffset]],
    bounds: Mapping[TopicPartition, int],
    unanswered: Collection[TopicPartition] = (),
) -> None:
    """Rule 4, against `bounds` (the high watermark known for each partition); an offset
    above the bound of a partition in `unanswered` (its leader could not be asked) is
    refused as retriable rather than out of range.
    """
    for tp, committed in offsets:
        bound = bounds.get(tp, 0)
        if 0 <= committed.offset <= bound:
            continue
        if committed.offset > bound and tp in unanswered:
            raise KraftliteError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"could not learn the high watermark of {tp[0]}-{tp[1]} from its leader to "
                f"check offset {committed.offset} (known: {bound}); retry",
            )
        raise KraftliteError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {committed.offset} of {tp[0]}-{tp[1]} is not between 0 and its high "
            f"watermark {bound}",
            topic=tp[0],
            partition=tp[1],
            high_watermark=bound,
        )
