"""The typed, versioned messages of the internal plane (kraftlite/protocol/internal.py):
each round-trips through JSON, and a reader refuses wrong versions, types and bounds."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from kraftlite.protocol import internal as m

MESSAGES: list[Any] = [
    m.BrokerRegistrationRequest(3, "a" * 32, "http://127.0.0.1:9092", "rack-a"),
    m.BrokerRegistrationRequest(3, "a" * 32, "http://127.0.0.1:9092"),
    m.BrokerRegistrationResponse(12, "cluster", 2000, 9000, 14),
    m.BrokerHeartbeatRequest(12, 14, want_shutdown=True),
    m.BrokerHeartbeatResponse(12, False, False, 15, 9000),
    m.AlterPartitionRequest(1, 12, (m.IsrChange("T", 0, 3, 7, (1, 2)),)),
    m.AlterPartitionResponse(
        (
            m.IsrChangeResult("T", 0, m.PartitionState(1, 3, 8, (1, 2), (1, 2, 3))),
            m.IsrChangeResult("T", 1, error_code="FENCED_LEADER_EPOCH", message="stale"),
        )
    ),
    m.ReplicaFetchRequest(
        2, 12, 500, 1 << 20, 77, 4, (m.FetchPosition("T", 0, 3, 100, 2),), (("T", 5),)
    ),
    m.ReplicaFetchResponse(
        77,
        (
            m.PartitionFetchAnswer("T", 0, 120, 0),
            m.PartitionFetchAnswer("T", 1, 9, 0, diverging_epoch=2, diverging_end_offset=8),
        ),
    ),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda x: type(x).__name__)
def test_messages_round_trip_through_json(message: Any) -> None:
    wire = orjson.loads(orjson.dumps(message.to_json()))
    assert wire["v"] == m.VERSION or "v" not in wire
    assert type(message).from_json(wire) == message


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (m.BrokerRegistrationRequest, {"broker_id": 1, "incarnation_id": "x", "url": "u"}),
        (m.BrokerRegistrationRequest, {"v": 2, "broker_id": 1, "incarnation_id": "x", "url": "u"}),
        (
            m.BrokerRegistrationRequest,
            {"v": 1, "broker_id": True, "incarnation_id": "x", "url": "u"},
        ),
        (m.BrokerRegistrationRequest, {"v": 1, "broker_id": 1, "incarnation_id": "", "url": "u"}),
        (
            m.BrokerRegistrationRequest,
            {"v": 1, "broker_id": 1, "incarnation_id": "x", "url": "u" * 3000},
        ),
        (
            m.BrokerRegistrationRequest,
            {"v": 1, "broker_id": 1, "incarnation_id": "x", "url": "u", "rack": 5},
        ),
        (m.BrokerHeartbeatRequest, {"v": 1, "broker_epoch": 1, "want_shutdown": "yes"}),
        (m.BrokerHeartbeatRequest, [1, 2]),
        (m.AlterPartitionRequest, {"v": 1, "broker_id": 1, "broker_epoch": 1, "partitions": []}),
        (
            m.AlterPartitionRequest,
            {
                "v": 1,
                "broker_id": 1,
                "broker_epoch": 1,
                "partitions": [
                    {
                        "topic_id": "T",
                        "partition": 0,
                        "leader_epoch": 0,
                        "partition_epoch": 0,
                        "new_isr": [1],
                    }
                ]
                * 2,  # the same partition twice
            },
        ),
        (
            m.ReplicaFetchRequest,
            {"v": 1, "replica_id": 1, "broker_epoch": 1, "max_wait_ms": 10**9, "max_bytes": 1},
        ),
        (
            m.ReplicaFetchRequest,
            {
                "v": 1,
                "replica_id": 1,
                "broker_epoch": 1,
                "max_wait_ms": 0,
                "max_bytes": 1,
                "forgotten": [["T"]],
            },
        ),
    ],
)
def test_readers_refuse_bad_messages(kind: Any, body: Any) -> None:
    with pytest.raises(m.MessageError):
        kind.from_json(body)


def test_metadata_fetch_parameters_and_answer() -> None:
    request = m.MetadataFetchRequest(41, 500, 1 << 20)
    assert m.MetadataFetchRequest.from_params(request.to_params()) == request
    for bad in (
        {"after_version": "1"},
        {"v": "1", "after_version": "x"},
        {"v": "1", "after_version": "-2"},
    ):
        with pytest.raises(m.MessageError):
            m.MetadataFetchRequest.from_params(bad)
    stored = [b'{"expected_version":41,"request_id":"r","records":[]}']
    answer = m.MetadataFetchResponse.decode(m.MetadataFetchResponse(42, stored).encode())
    assert answer.version == 42 and answer.batches == (orjson.loads(stored[0]),)
    assert answer.snapshot is None
