"""Metadata records travel as versioned JSON, never pickles: every type round-trips."""

from __future__ import annotations

import pytest

from kraftlite.metadata import records as r

EXAMPLES: list[r.MetadataRecord] = [
    r.RegisterControllerRecord(node_id=1, url="http://127.0.0.1:9401"),
    r.RegisterBrokerRecord(broker_id=1, incarnation_id="abc", broker_epoch=7, url="http://h:1"),
    r.RegisterBrokerRecord(broker_id=2, incarnation_id="x", broker_epoch=8, url="u", rack="r1"),
    r.FenceBrokerRecord(broker_id=1, broker_epoch=7),
    r.UnfenceBrokerRecord(broker_id=1, broker_epoch=7),
    r.ControlledShutdownRecord(broker_id=1, broker_epoch=7),
    r.TopicRecord(name="orders", topic_id="00ff"),
    r.BrokerDrainRecord(broker_id=1, draining=True),
    r.BrokerConfigRecord(broker_id=1, name="replication.throttled.rate", value="1024"),
    r.QuorumVotersRecord(node_ids=(1, 2), raft_addresses=("h:1", "h:2")),
    r.UnregisterBrokerRecord(broker_id=1, broker_epoch=7),
    r.ConfigRecord(topic_id="00ff", name="retention.ms", value="1000"),
    r.ConfigRecord(topic_id="00ff", name="retention.ms", value=None),
    r.PartitionRecord(topic_id="00ff", partition=0, replicas=(1, 2), isr=(1, 2), leader=1),
    r.PartitionChangeRecord(topic_id="00ff", partition=0, isr=(1,)),
    r.PartitionChangeRecord(topic_id="00ff", partition=0, leader=r.NO_LEADER),
    r.RemoveTopicRecord(topic_id="00ff"),
    r.UserScramCredentialRecord(
        name="alice",
        mechanism="SCRAM-SHA-256",
        salt="c2FsdA==",
        stored_key="c3RvcmVk",
        server_key="c2VydmVy",
        iterations=4096,
    ),
    r.RemoveUserScramCredentialRecord(name="alice", mechanism="SCRAM-SHA-256"),
    r.AccessControlEntryRecord(
        id="acl-1",
        resource_type="TOPIC",
        resource_name="orders",
        pattern_type="PREFIXED",
        principal="User:alice",
        host="*",
        operation="WRITE",
        permission_type="ALLOW",
    ),
    r.RemoveAccessControlEntryRecord(id="acl-1"),
    r.ClientQuotaRecord(principal="User:alice", key="producer_byte_rate", value=1024.0),
    r.ClientQuotaRecord(principal="User:alice", key="producer_byte_rate", value=None),
]


def test_every_record_type_has_an_example() -> None:
    assert {type(e).__name__ for e in EXAMPLES} == set(r.RECORD_TYPES)


def test_batches_round_trip() -> None:
    batch = r.RecordBatch(41, tuple(EXAMPLES), request_id="req-1")
    payload = r.encode_batch(batch)
    assert isinstance(payload, bytes)
    assert r.decode_batch(payload) == batch


def test_json_shape_is_versioned() -> None:
    assert r.record_to_json(EXAMPLES[3]) == {
        "type": "FenceBrokerRecord",
        "v": 0,
        "data": {"broker_id": 1, "broker_epoch": 7},
    }


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[]",
        b'{"expected_version": 1}',
        b'{"expected_version": 1, "records": [{"type": "Nope", "v": 0, "data": {}}]}',
        b'{"expected_version": 1, "records": [{"type": "TopicRecord", "v": 9, "data": {}}]}',
        b'{"expected_version": 1, "records": [{"type": "TopicRecord", "v": 0, "data": {"x": 1}}]}',
    ],
)
def test_unreadable_batches_are_refused(payload: bytes) -> None:
    with pytest.raises(r.RecordCodecError):
        r.decode_batch(payload)
