"""The pure parts of kraftlite/observability.py and the controller's partition counts."""

from __future__ import annotations

import re

import pytest

from kraftlite.controller.metrics import PartitionCounts, partition_counts
from kraftlite.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from kraftlite.metadata.records import NO_LEADER
from kraftlite.observability import kafka_errors, request_id_of


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("checkout-42", True),
        ("a.b_c:d-E9", True),
        ("x" * 64, True),
        ("x" * 65, False),
        ("", False),
        ("with space", False),
        ('quote"injection', False),
        ("new\nline", False),
        ("ünïcode", False),
    ],
)
def test_a_request_id_is_kept_only_when_well_formed(given: str, kept: bool) -> None:
    answer = request_id_of({"X-Request-Id": given})
    if kept:
        assert answer == given
    else:
        assert re.fullmatch(r"[0-9a-f]{16}", answer)
    assert request_id_of({}) != request_id_of({})  # new ones differ


def test_kafka_errors_counts_every_failed_partition_by_name() -> None:
    produce_answer = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {"index": 0, "error_code": 0, "records": b"\x00" * 10},
                    {"index": 1, "error_code": 6},
                    {"index": 2, "error_code": 6},
                ],
            },
            {"name": "u", "partition_responses": [{"index": 0, "error_code": 3}]},
        ],
        "throttle_time_ms": 0,
    }
    assert sorted(kafka_errors(produce_answer, {})) == [
        "NOT_LEADER_OR_FOLLOWER",
        "NOT_LEADER_OR_FOLLOWER",
        "UNKNOWN_TOPIC_OR_PARTITION",
    ]
    assert kafka_errors({"error_code": 35}, {35: "UNSUPPORTED_VERSION"}) == ["UNSUPPORTED_VERSION"]
    assert kafka_errors({"error_code": 9999}, {}) == ["9999"]  # a code with no name: its number
    assert kafka_errors({"error_code": 0, "topics": []}, {}) == []


def test_partition_counts_find_offline_under_replicated_and_moving_partitions() -> None:
    def part(
        replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, **kw: tuple[int, ...]
    ) -> PartitionRegistration:
        return PartitionRegistration(replicas, isr, leader, 0, 0, **kw)

    topic = TopicImage(
        "tid",
        "t",
        {
            0: part((1, 2, 3), (1, 2, 3), 1),
            1: part((1, 2, 3), (1, 2), 1),
            2: part((1, 2, 3), (3,), NO_LEADER),
            3: part((1, 2, 3, 4), (1, 2, 3), 2, adding=(4,), removing=(3,)),
        },
        {},
    )
    image = MetadataImage(version=7, brokers={}, topics={"tid": topic}, topic_ids={"t": "tid"})
    assert partition_counts(image) == PartitionCounts(
        topics=1, partitions=4, offline=1, under_replicated=3, reassigning=1
    )
