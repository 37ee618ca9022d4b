"""The typed, versioned messages of the internal plane (kraftlite/protocol/internal.py):
each round-trips through JSON, and a reader refuses wrong versions, types and bounds."""

from __future__ import annotations

import json
from typing import Any

import msgspec
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
            m.IsrChangeResult.committed("T", 0, m.PartitionState(1, 3, 8, (1, 2), (1, 2, 3))),
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
    m.OffsetsResponse("orders", (m.PartitionOffsets(0, 0, 12), m.PartitionOffsets(3, 5, 5))),
    m.OffsetsResponse("empty"),
    m.BrokerStatsResponse(
        2,
        4,
        12,
        81920,
        m.StatsRates(5230.1, 40.2, 0.0, 0.0),
        9_800,
        {
            "orders": m.TopicStats({1: 20480, 0: 100}, m.StatsRates(1.5, 1.0, 0.0, 0.25)),
            "quiet": m.TopicStats(),
        },
    ),
    m.BrokerStatsResponse(1, 0, 0, 0),  # no rate yet, no topic asked
    m.GroupListResponse(
        (
            {"group": "g1", "state": "stable", "members": 2, "type": "consumer"},
            {"group": "legacy", "state": "PreparingRebalance", "members": 1, "type": "classic"},
        )
    ),
    m.GroupListResponse(),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda x: type(x).__name__)
def test_messages_round_trip_through_json(message: Any) -> None:
    body = message.encode()
    assert body.startswith(b'{"v":%d,' % m.VERSION)  # rule 1: the version first
    assert type(message).decode(body) == message
    wire = orjson.loads(orjson.dumps(message.to_json()))  # as orjson and framing.py send it
    assert orjson.loads(body) == wire
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


@pytest.mark.parametrize("message", MESSAGES, ids=lambda x: type(x).__name__)
@pytest.mark.parametrize("version", [None, 0, 2, "1", 1.0, True])
def test_readers_refuse_another_version(message: Any, version: Any) -> None:
    """Rule 1, for every message: no `v`, another one, or 1 in another JSON type."""
    wire = orjson.loads(message.encode())
    if version is None:
        del wire["v"]
    else:
        wire["v"] = version
    with pytest.raises(m.MessageError):
        type(message).decode(orjson.dumps(wire))
    with pytest.raises(m.MessageError):
        type(message).from_json(wire)


def test_readers_refuse_what_is_not_json() -> None:
    for body in (b"", b"{", b"[1]", b"null", b'"v"', b'{"v":1,"broker_epoch":1,}'):
        with pytest.raises(m.MessageError):
            m.BrokerHeartbeatResponse.decode(body)


def test_bad_utf8_and_deep_nesting_are_message_errors_not_crashes() -> None:
    """Review of the msgspec port: msgspec raises UnicodeDecodeError for a kept string that
    is not UTF-8 and RecursionError for deep nesting; both were 500s with a traceback."""
    registration = b'{"v":1,"broker_id":1,"incarnation_id":"\xff","url":"http://a:1"}'
    deep = b'{"v":1,"x":' + b"[" * 5000 + b"]" * 5000 + b',"broker_epoch":1}'
    for kind, body in (
        (m.BrokerRegistrationRequest, registration),
        (m.BrokerHeartbeatResponse, deep),
    ):
        with pytest.raises(m.MessageError):
            kind.decode(body)


def test_a_divergence_without_its_end_offset_is_refused() -> None:
    """It would make a follower truncate its whole log (end offset -1)."""
    header = {"v": 1, "session_id": 1}
    answer = {"topic_id": "T", "partition": 0, "diverging_epoch": 3}
    with pytest.raises(m.MessageError):
        m.ReplicaFetchResponse.from_json({**header, "partitions": [answer]})
    ok = {**answer, "diverging_end_offset": 10}
    (decoded,) = m.ReplicaFetchResponse.from_json({**header, "partitions": [ok]}).partitions
    assert decoded.diverging_end_offset == 10


def test_an_alter_partition_result_is_a_state_or_an_error_not_both() -> None:
    body = {"v": 1, "partitions": [{**_RESULT, "error_code": "FENCED_LEADER_EPOCH"}]}
    with pytest.raises(m.MessageError):
        m.AlterPartitionResponse.from_json(body)


_POSITION = {
    "topic_id": "T",
    "partition": 0,
    "leader_epoch": 0,
    "fetch_offset": 0,
    "last_fetched_epoch": -1,
}
_FETCH = {"v": 1, "replica_id": 2, "broker_epoch": 1, "max_wait_ms": 0, "max_bytes": 1}
_CHANGE = {"topic_id": "T", "partition": 0, "leader_epoch": 0, "partition_epoch": 0, "new_isr": [1]}
_ALTER = {"v": 1, "broker_id": 1, "broker_epoch": 1, "partitions": [_CHANGE]}
_RESULT = {
    "topic_id": "T",
    "partition": 0,
    "leader": 1,
    "leader_epoch": 0,
    "partition_epoch": 1,
    "isr": [1],
    "replicas": [1],
}
_BEAT = {"v": 1, "broker_epoch": 1, "metadata_version": 0}
_REGISTERED = {
    "v": 1,
    "broker_epoch": 0,
    "cluster_id": "c",
    "heartbeat_interval_ms": 1,
    "session_timeout_ms": 1,
    "metadata_version": 0,
}


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        # integers: each field's range, 64 bits at most, never a bool or a float
        (m.BrokerHeartbeatRequest, _BEAT, {"metadata_version": -1}),
        (m.BrokerHeartbeatRequest, _BEAT, {"broker_epoch": 2**63}),
        (m.BrokerHeartbeatRequest, _BEAT, {"broker_epoch": -(2**63) - 1}),
        (m.BrokerHeartbeatRequest, _BEAT, {"broker_epoch": 1.0}),
        (m.BrokerHeartbeatRequest, _BEAT, {"broker_epoch": None}),
        (m.BrokerRegistrationResponse, _REGISTERED, {"heartbeat_interval_ms": 0}),
        (m.BrokerRegistrationResponse, _REGISTERED, {"session_timeout_ms": 0}),
        # the lease timeout (broker/lease.py rule 1): optional, positive when given
        (m.BrokerRegistrationResponse, _REGISTERED, {"lease_timeout_ms": 0}),
        (m.BrokerRegistrationResponse, _REGISTERED, {"lease_timeout_ms": "2500"}),
        (m.BrokerHeartbeatRequest, _BEAT, {"honours_lease_timeout": "yes"}),
        (m.BrokerHeartbeatRequest, _BEAT, {"honours_lease_timeout": 1}),
        (m.BrokerRegistrationResponse, _REGISTERED, {"broker_epoch": -1}),
        (m.BrokerRegistrationResponse, _REGISTERED, {"cluster_id": 7}),
        (
            m.BrokerRegistrationRequest,
            {"v": 1, "broker_id": 1, "incarnation_id": "x", "url": "u"},
            {"broker_id": 2**31},
        ),
        (
            m.BrokerRegistrationRequest,
            {"v": 1, "broker_id": 1, "incarnation_id": "x", "url": "u"},
            {"incarnation_id": "i" * 65},
        ),
        (
            m.BrokerRegistrationRequest,
            {"v": 1, "broker_id": 1, "incarnation_id": "x", "url": "u"},
            {"kafka": "k" * 301},
        ),
        (
            m.BrokerUnreachableReport,
            {"v": 1, "reporter_id": 1, "reporter_epoch": 1, "suspect_epoch": 1},
            {"reporter_id": -1},
        ),
        # AlterPartition: the partitions' fields and the ISR's length
        (m.AlterPartitionRequest, _ALTER, {"partitions": [{**_CHANGE, "topic_id": ""}]}),
        (m.AlterPartitionRequest, _ALTER, {"partitions": [{**_CHANGE, "topic_id": "t" * 257}]}),
        (m.AlterPartitionRequest, _ALTER, {"partitions": [{**_CHANGE, "leader_epoch": -1}]}),
        (m.AlterPartitionRequest, _ALTER, {"partitions": [{**_CHANGE, "new_isr": [1] * 1025}]}),
        (m.AlterPartitionRequest, _ALTER, {"partitions": [{**_CHANGE, "new_isr": [True]}]}),
        (m.AlterPartitionRequest, _ALTER, {"partitions": [_CHANGE] * (m.MAX_ITEMS + 1)}),
        (m.AlterPartitionResponse, {"v": 1, "partitions": [_RESULT]}, {"partitions": [{}]}),
        (
            m.AlterPartitionResponse,
            {"v": 1, "partitions": [_RESULT]},
            {"partitions": [{"topic_id": "T", "partition": 0, "leader": 1}]},  # half a state
        ),
        (
            m.AlterPartitionResponse,
            {"v": 1, "partitions": [_RESULT]},
            {"partitions": [{**_RESULT, "leader": -2}]},
        ),
        (
            m.AlterPartitionResponse,
            {"v": 1, "partitions": [_RESULT]},
            {"partitions": [{**_RESULT, "error_code": 3}]},
        ),
        # replica fetch: the wait, the size, the positions and the answers
        (m.ReplicaFetchRequest, _FETCH, {"max_wait_ms": m.MAX_WAIT_MS + 1}),
        (m.ReplicaFetchRequest, _FETCH, {"max_bytes": 0}),
        (m.ReplicaFetchRequest, _FETCH, {"max_bytes": (64 << 20) + 1}),
        (m.ReplicaFetchRequest, _FETCH, {"session_id": -1}),
        (m.ReplicaFetchRequest, _FETCH, {"record_format": 0}),  # the formats a follower reads
        (m.ReplicaFetchRequest, _FETCH, {"record_format": 256}),
        (m.ReplicaFetchRequest, _FETCH, {"record_format": "3"}),
        (m.ReplicaFetchRequest, _FETCH, {"partitions": [{**_POSITION, "leader_epoch": -2}]}),
        (m.ReplicaFetchRequest, _FETCH, {"partitions": [{**_POSITION, "fetch_offset": -1}]}),
        (m.ReplicaFetchRequest, _FETCH, {"partitions": [_POSITION] * (m.MAX_ITEMS + 1)}),
        (m.ReplicaFetchRequest, _FETCH, {"forgotten": [["T", 0, 1]]}),
        (m.ReplicaFetchRequest, _FETCH, {"forgotten": [[1, 0]]}),
        (
            m.ReplicaFetchResponse,
            {"v": 1, "session_id": 1, "partitions": [{"topic_id": "T", "partition": 0}]},
            {"partitions": [{"topic_id": "T", "partition": 0, "high_watermark": -1}]},
        ),
        (
            m.ReplicaFetchResponse,
            {"v": 1, "session_id": 1, "partitions": [{"topic_id": "T", "partition": 0}]},
            {"partitions": [{"topic_id": "T", "partition": 0, "diverging_epoch": -2}]},
        ),
    ],
)
def test_readers_refuse_values_out_of_bounds(kind: Any, good: Any, bad: Any) -> None:
    """Each bound, next to a body that is good without the change."""
    assert kind.decode(orjson.dumps(good)) == kind.from_json(good)
    with pytest.raises(m.MessageError):
        kind.decode(json.dumps({**good, **bad}))  # (json: orjson refuses 2**63)
    with pytest.raises(m.MessageError):
        kind.from_json({**good, **bad})


def test_metadata_fetch_parameters_and_answer() -> None:
    request = m.MetadataFetchRequest(41, 500, 1 << 20)
    assert m.MetadataFetchRequest.from_params(request.to_params()) == request
    for bad in (
        {"after_version": "1"},
        {"v": "2", "after_version": "1"},
        {"v": "1", "after_version": "x"},
        {"v": "1", "after_version": "-2"},
        {"v": "1", "after_version": " 1"},
        {"v": "1", "after_version": "1", "max_wait_ms": str(m.MAX_WAIT_MS + 1)},
        {"v": "1", "after_version": "1", "max_bytes": "0"},
        {"v": "1", "after_version": "1", "max_bytes": str((64 << 20) + 1)},
    ):
        with pytest.raises(m.MessageError):
            m.MetadataFetchRequest.from_params(bad)
    stored = b'{"expected_version":41,"request_id":"r","records":[]}'
    body = m.MetadataFetchResponse(42, (msgspec.Raw(stored),)).encode()
    assert stored in body  # rule 3: spliced as stored, not re-encoded
    answer = m.MetadataFetchResponse.decode(body)
    assert answer.version == 42 and answer.batches == (orjson.loads(stored),)
    assert answer.snapshot is None
    snapshot = m.MetadataFetchResponse(42, snapshot=msgspec.Raw(b'{"version":42}')).encode()
    assert m.MetadataFetchResponse.decode(snapshot).snapshot == {"version": 42}
    for bad in (
        {"v": 1, "version": 42, "batches": [1]},  # a batch is a JSON object
        {"v": 1, "version": 42, "snapshot": "x"},
        {"v": 1, "version": -1},
        {"v": 1, "version": 42, "batches": {}},
    ):
        with pytest.raises(m.MessageError):
            m.MetadataFetchResponse.decode(orjson.dumps(bad))


# ---------------------------------------------------------------------------- broker queries

_OFFSETS = {"v": 1, "topic": "orders", "partitions": []}
_PARTITION = {"partition": 0, "log_start_offset": 0, "high_watermark": 3}
_STATS = {"v": 1, "broker_id": 1, "leaders": 0, "replicas": 0, "disk_bytes": 0}
_RATES = dict.fromkeys(m.RATE_NAMES, 0.0)
_GROUP = {"group": "g", "state": "stable", "members": 0, "type": "consumer"}


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        # offsets: version, topic, each partition's fields, duplicates, the list's length
        (m.OffsetsResponse, {**_OFFSETS, "v": 2}),
        (m.OffsetsResponse, {key: v for key, v in _OFFSETS.items() if key != "v"}),
        (m.OffsetsResponse, {**_OFFSETS, "topic": "bad name"}),
        (m.OffsetsResponse, {**_OFFSETS, "topic": "t" * 250}),
        (m.OffsetsResponse, {**_OFFSETS, "topic": None}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": {"0": _PARTITION}}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": [[0, 0, 3]]}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": [{**_PARTITION, "partition": -1}]}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": [{**_PARTITION, "partition": 2**31}]}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": [{**_PARTITION, "partition": "0"}]}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": [{**_PARTITION, "high_watermark": -1}]}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": [{**_PARTITION, "high_watermark": 1.5}]}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": [{**_PARTITION, "log_start_offset": True}]}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": [_PARTITION, _PARTITION]}),
        (m.OffsetsResponse, {**_OFFSETS, "partitions": [_PARTITION] * (m.MAX_ITEMS + 1)}),
        # a broker's figures: version, counts, rates, the topics' map and their partitions
        (m.BrokerStatsResponse, {**_STATS, "v": "1"}),
        (m.BrokerStatsResponse, {**_STATS, "broker_id": -1}),
        (m.BrokerStatsResponse, {**_STATS, "leaders": None}),
        (m.BrokerStatsResponse, {**_STATS, "replicas": "12"}),
        (m.BrokerStatsResponse, {**_STATS, "disk_bytes": -5}),
        (m.BrokerStatsResponse, {**_STATS, "rate_window_ms": -1}),
        (m.BrokerStatsResponse, {**_STATS, "rates": [0, 0, 0, 0]}),
        (m.BrokerStatsResponse, {**_STATS, "rates": {**_RATES, "fetch_bytes": -1.0}}),
        (m.BrokerStatsResponse, {**_STATS, "rates": {**_RATES, "fetch_bytes": float("inf")}}),
        (m.BrokerStatsResponse, {**_STATS, "rates": {**_RATES, "fetch_bytes": True}}),
        (m.BrokerStatsResponse, {**_STATS, "rates": {**_RATES, "fetch_bytes": "1"}}),
        (m.BrokerStatsResponse, {**_STATS, "rates": {"produce_bytes": 1.0}}),  # three missing
        (m.BrokerStatsResponse, {**_STATS, "topics": [{"topic": "t"}]}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"bad name": {}}}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": []}}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": {"partitions": [[0, 1]]}}}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": {"partitions": {"x": 1}}}}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": {"partitions": {"01": 1}}}}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": {"partitions": {"-1": 1}}}}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": {"partitions": {"²": 1}}}}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": {"partitions": {"2147483648": 1}}}}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": {"partitions": {"0": -1}}}}),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": {"partitions": {"0": 1.0}}}}),
        (
            m.BrokerStatsResponse,
            {**_STATS, "topics": {"t": {"rates": {**_RATES, "fetch_records": None}}}},
        ),
        (m.BrokerStatsResponse, {**_STATS, "topics": {"t": {"rates": {}}}}),
        (
            m.BrokerStatsResponse,
            {**_STATS, "topics": {f"t{i}": {} for i in range(m.MAX_STATS_TOPICS + 1)}},
        ),
        (
            m.BrokerStatsResponse,
            {
                **_STATS,
                "topics": {"t": {"partitions": {str(i): 0 for i in range(m.MAX_ITEMS + 1)}}},
            },
        ),
        # groups: version, each group's fields, duplicates, the list's length
        (m.GroupListResponse, {"groups": [_GROUP]}),
        (m.GroupListResponse, {"v": 0, "groups": [_GROUP]}),
        (m.GroupListResponse, {"v": 1, "groups": {"g": _GROUP}}),
        (m.GroupListResponse, {"v": 1, "groups": ["g"]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "group": ""}]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "group": "g" * 250}]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "group": "a\x00b"}]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "group": 7}]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "state": None}]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "state": "s" * 33}]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "members": -1}]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "members": "2"}]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "type": "share"}]}),
        (m.GroupListResponse, {"v": 1, "groups": [{**_GROUP, "type": None}]}),
        (m.GroupListResponse, {"v": 1, "groups": [_GROUP, {**_GROUP, "members": 3}]}),
        (m.GroupListResponse, {"v": 1, "groups": [None] * (m.MAX_GROUPS + 1)}),
    ],
)
def test_broker_query_answers_refuse_bad_bodies(kind: Any, body: Any) -> None:
    with pytest.raises(m.MessageError):
        kind.from_json(body)


def test_the_partitions_of_all_topics_together_are_bounded() -> None:
    half = {str(i): 0 for i in range(m.MAX_ITEMS // 2 + 1)}
    body = {**_STATS, "topics": {"a": {"partitions": half}, "b": {"partitions": half}}}
    with pytest.raises(m.MessageError):
        m.BrokerStatsResponse.from_json(body)


def test_a_broker_answer_is_the_json_it_always_was() -> None:
    """The node bodies keep their keys (tools read `/v1/internal/stats` by them, and
    scripts/bench_metadata.py AlterPartition's), and the group listing is the dicts
    `GET /v1/groups` shows clients, key for key."""
    stats = m.BrokerStatsResponse(1, 1, 2, 30, None, None, {"t": m.TopicStats({0: 30})})
    assert stats.to_json() == {
        "v": 1,
        "broker_id": 1,
        "leaders": 1,
        "replicas": 2,
        "disk_bytes": 30,
        "rates": None,
        "rate_window_ms": None,
        "topics": {"t": {"partitions": {"0": 30}, "rates": None, "compaction": {}}},
    }
    # an older broker's answer (no compaction figures) reads the same; bad figures do not
    older = {**stats.to_json(), "topics": {"t": {"partitions": {"0": 30}, "rates": None}}}
    assert m.BrokerStatsResponse.from_json(older) == stats
    cleaning = {"0": {"dirty_ratio": 0.25, "lag_ms": 10, "since_pass_ms": None}}
    read = m.BrokerStatsResponse.from_json(
        {**older, "topics": {"t": {"partitions": {"0": 30}, "compaction": cleaning}}}
    )
    assert read.topics["t"].compaction == {0: m.CompactionStats(0.25, 10, None)}
    for bad in ({"dirty_ratio": 1.5, "lag_ms": 0}, {"dirty_ratio": 0.5, "lag_ms": -1}):
        with pytest.raises(m.MessageError):
            m.BrokerStatsResponse.from_json({**older, "topics": {"t": {"compaction": {"0": bad}}}})
    listed = m.GroupListResponse.from_json({"v": 1, "groups": [dict(reversed(_GROUP.items()))]})
    assert orjson.dumps(listed.groups[0]) == orjson.dumps(_GROUP)  # the clients' key order
    # an AlterPartition result carries the committed state or an error, never both
    altered = m.AlterPartitionResponse(
        (
            m.IsrChangeResult.committed("T", 0, m.PartitionState(1, 3, 8, (1,), (1, 2))),
            m.IsrChangeResult("T", 1, error_code="FENCED_LEADER_EPOCH", message="stale"),
        )
    )
    assert orjson.loads(altered.encode())["partitions"] == [
        {
            "topic_id": "T",
            "partition": 0,
            "leader": 1,
            "leader_epoch": 3,
            "partition_epoch": 8,
            "isr": [1],
            "replicas": [1, 2],
        },
        {"topic_id": "T", "partition": 1, "error_code": "FENCED_LEADER_EPOCH", "message": "stale"},
    ]


def test_broker_query_parameters() -> None:
    offsets = m.OffsetsRequest("orders")
    assert m.OffsetsRequest.from_params(offsets.to_params()) == offsets
    assert m.OffsetsRequest.from_params({"topic": "orders"}) == offsets  # v left out: 1
    stats = m.BrokerStatsRequest(("a", "b.c"))
    assert m.BrokerStatsRequest.from_params(stats.to_params()) == stats
    assert "topics" not in m.BrokerStatsRequest().to_params()
    assert m.BrokerStatsRequest.from_params({}) == m.BrokerStatsRequest()
    assert m.BrokerStatsRequest.from_params({"topics": "hidden"}).topics == ("hidden",)
    many = ",".join(f"t{i}" for i in range(m.MAX_STATS_TOPICS))
    assert len(m.BrokerStatsRequest.from_params({"topics": many}).topics) == m.MAX_STATS_TOPICS
    refused: list[tuple[Any, dict[str, str]]] = [
        (m.OffsetsRequest, {"v": "2", "topic": "orders"}),
        (m.OffsetsRequest, {"v": "01", "topic": "orders"}),
        (m.OffsetsRequest, {"v": "1"}),
        (m.OffsetsRequest, {"v": "1", "topic": ""}),
        (m.OffsetsRequest, {"v": "1", "topic": "a/b"}),
        (m.OffsetsRequest, {"v": "1", "topic": "t" * 250}),
        (m.BrokerStatsRequest, {"v": "2"}),
        (m.BrokerStatsRequest, {"v": "1", "topics": ""}),
        (m.BrokerStatsRequest, {"v": "1", "topics": "a,,b"}),
        (m.BrokerStatsRequest, {"v": "1", "topics": "a,a"}),
        (m.BrokerStatsRequest, {"v": "1", "topics": "bad name"}),
        (m.BrokerStatsRequest, {"v": "1", "topics": many + ",one-more"}),
    ]
    for kind, bad in refused:
        with pytest.raises(m.MessageError):
            kind.from_params(bad)
