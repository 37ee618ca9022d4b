"""What scripts/make_data_fixture.py writes with an older kraftlite, and
tests/network/test_data_from_an_older_release.py reads back with today's."""

from __future__ import annotations

from typing import Any

NODES = [*(f"controller-{i}" for i in (1, 2, 3)), *(f"broker-{i}" for i in (1, 2, 3))]
TOPIC, KAFKA_TOPIC, GROUP = "before", "before-kafka", "before-readers"
GROUP_OFFSETS = ((0, 7), (1, 3), (2, 10))


def records(partition: int) -> list[dict[str, Any]]:
    """Ten records per partition over HTTP: keys, values, headers, a null value."""
    return [
        {
            "key": f"k{partition}-{n % 4}",
            "value": None if n == 9 else f"p{partition}-r{n}",
            "headers": {"n": str(n), "from": "fixture"},
        }
        for n in range(10)
    ]


def kafka_values(partition: int) -> list[bytes]:
    """Five values per partition from an idempotent Kafka producer."""
    return [f"kafka-p{partition}-{n}".encode() for n in range(5)]
