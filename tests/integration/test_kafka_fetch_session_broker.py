"""Fetch sessions (KIP-227) on a real broker's Kafka listener: a session opens on request,
incremental fetches name only what moved and are answered only with news, a session is its
connection's alone, and kafka-python (which asks for sessions) reads every record once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlite.protocol.kafka import records
from tests.harness.kafka_wire import Connection
from tests.harness.processes import FAST_SESSIONS, Cluster, http

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # kafka-python 3.0.12 reads its schemas with a deprecated importlib call
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]
FETCH, FETCH_V = 1, 12
FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 70, 71


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("kafka-sessions"),
        brokers=1,
        controller_config=FAST_SESSIONS,
        kafka=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _topic(cluster: Cluster, name: str, partitions: int) -> None:
    cluster.create_topic(name, partitions)


def _produce(cluster: Cluster, topic: str, partition: int, values: list[str]) -> None:
    status, answer = http(
        "POST",
        cluster.urls[1] + f"/v1/topics/{topic}/partitions/{partition}/records",
        {"records": [{"value": v} for v in values]},
    )
    assert status == 200, answer


def _fetch(
    session_id: int,
    epoch: int,
    partitions: dict[str, dict[int, int]],
    forgotten: dict[str, list[int]] | None = None,
) -> dict[str, Any]:
    return {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    for p, offset in offsets.items()
                ],
            }
            for topic, offsets in partitions.items()
        ],
        "forgotten_topics_data": [
            {"topic": topic, "partitions": indexes} for topic, indexes in (forgotten or {}).items()
        ],
        "rack_id": "",
    }


def _answered(answer: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {
        (topic["topic"], part["partition_index"]): part
        for topic in answer["responses"]
        for part in topic["partitions"]
    }


def _values(part: dict[str, Any]) -> list[bytes | None]:
    return [r.value for b in records.decode_batches(part["records"] or b"") for r in b.records]


def test_a_session_answers_only_news_and_reads_where_the_client_left_off(
    cluster: Cluster,
) -> None:
    _topic(cluster, "sess", partitions=3)
    for p in range(3):
        _produce(cluster, "sess", p, [f"p{p}-a"])
    with Connection(cluster.kafka_addresses[1]) as kafka:
        # a full fetch at epoch 0 opens a session and answers every partition
        opened = kafka.call(FETCH, FETCH_V, _fetch(0, 0, {"sess": {0: 0, 1: 0, 2: 0}}))
        session = opened["session_id"]
        assert opened["error_code"] == 0 and session != 0
        first = _answered(opened)
        assert {k: _values(v) for k, v in first.items()} == {
            ("sess", p): [f"p{p}-a".encode()] for p in range(3)
        }
        # the client moves its positions; nothing new: an empty answer
        idle = kafka.call(FETCH, FETCH_V, _fetch(session, 1, {"sess": {0: 1, 1: 1, 2: 1}}))
        assert idle["error_code"] == 0 and idle["session_id"] == session
        assert _answered(idle) == {}
        # a record on partition 1: only it is answered, though the fetch named nothing
        _produce(cluster, "sess", 1, ["p1-b"])
        news = _answered(kafka.call(FETCH, FETCH_V, _fetch(session, 2, {})))
        assert list(news) == [("sess", 1)] and _values(news[("sess", 1)]) == [b"p1-b"]
        assert news[("sess", 1)]["high_watermark"] == 2
        # a forgotten partition is no longer read
        _produce(cluster, "sess", 2, ["p2-b"])
        forgot = kafka.call(FETCH, FETCH_V, _fetch(session, 3, {"sess": {1: 2}}, {"sess": [2]}))
        assert _answered(forgot) == {}
        # a stale epoch is refused whole; the client starts over with a full fetch
        stale = kafka.call(FETCH, FETCH_V, _fetch(session, 3, {}))
        assert stale["error_code"] == INVALID_FETCH_SESSION_EPOCH and stale["responses"] == []
        # (id, -1) closes the session: a full fetch without one
        closed = kafka.call(FETCH, FETCH_V, _fetch(session, -1, {"sess": {2: 1}}))
        assert closed["session_id"] == 0
        assert _values(_answered(closed)[("sess", 2)]) == [b"p2-b"]
        gone = kafka.call(FETCH, FETCH_V, _fetch(session, 4, {}))
        assert gone["error_code"] == FETCH_SESSION_ID_NOT_FOUND


def test_a_session_belongs_to_its_connection(cluster: Cluster) -> None:
    _topic(cluster, "mine", partitions=1)
    _produce(cluster, "mine", 0, ["secret-ish"])
    with Connection(cluster.kafka_addresses[1]) as owner:
        session = owner.call(FETCH, FETCH_V, _fetch(0, 0, {"mine": {0: 1}}))["session_id"]
        assert session != 0
        with Connection(cluster.kafka_addresses[1]) as other:
            for epoch in (1, 2):
                stolen = other.call(FETCH, FETCH_V, _fetch(session, epoch, {}))
                assert stolen["error_code"] == FETCH_SESSION_ID_NOT_FOUND
                assert stolen["responses"] == []
        # the owner's session is untouched by the attempts
        still = owner.call(FETCH, FETCH_V, _fetch(session, 1, {}))
        assert still["error_code"] == 0 and still["session_id"] == session


def test_a_sessionless_fetch_answers_every_partition_every_time(cluster: Cluster) -> None:
    _topic(cluster, "legacy", partitions=2)
    with Connection(cluster.kafka_addresses[1]) as kafka:
        for _ in range(2):
            answer = kafka.call(FETCH, FETCH_V, _fetch(0, -1, {"legacy": {0: 0, 1: 0}}))
            assert answer["session_id"] == 0
            assert set(_answered(answer)) == {("legacy", 0), ("legacy", 1)}
        # Fetch v6 has no session fields at all
        v6 = _fetch(0, -1, {"legacy": {0: 0, 1: 0}})
        answer = kafka.call(FETCH, 6, v6)
        assert len(_answered(answer)) == 2


def test_kafka_python_reads_every_record_once_through_a_session(cluster: Cluster) -> None:
    from kafka import KafkaConsumer  # noqa: PLC0415 - a test-only client
    from kafka import TopicPartition as KafkaTopicPartition  # noqa: PLC0415

    _topic(cluster, "kps", partitions=6)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.kafka_addresses[1],
        enable_auto_commit=False,
        enable_incremental_fetch_sessions=True,  # its default, said for the reader
        fetch_max_wait_ms=100,
    )
    partitions = [KafkaTopicPartition("kps", p) for p in range(6)]
    expected: list[tuple[int, bytes]] = []
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        for round_ in range(5):  # records arrive while the consumer reads
            for p in range(6):
                if (p + round_) % 2 == 0:
                    values = [f"r{round_}-p{p}-{i}" for i in range(3)]
                    _produce(cluster, "kps", p, values)
                    expected += [(p, v.encode()) for v in values]
            deadline = time.monotonic() + 30
            while len(got) < len(expected) and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=200).values():
                    got += [(r.partition, r.value) for r in batch]
        # the client was granted a session by the broker (its handler holds the id)
        handlers = consumer._fetcher._session_handlers
        assert any(h.next_metadata.session_id != 0 for h in handlers.values())
    finally:
        consumer.close()
    assert sorted(got) == sorted(expected)  # every record, none twice
    for p in range(6):  # and in order within a partition
        assert [v for q, v in got if q == p] == [v for q, v in expected if q == p]


def _fetch_small(
    session_id: int, epoch: int, partitions: dict[str, dict[int, int]]
) -> dict[str, Any]:
    request = _fetch(session_id, epoch, partitions)
    request["max_bytes"] = 1  # one batch per answer: the first partition with data gets it
    return request


def test_partitions_that_returned_records_go_to_the_back_of_the_session(
    cluster: Cluster,
) -> None:
    _topic(cluster, "rot", partitions=2)
    for p in range(2):
        for i in range(3):  # three batches each
            _produce(cluster, "rot", p, [f"p{p}-{i}"])
    with Connection(cluster.kafka_addresses[1]) as kafka:
        answer = kafka.call(FETCH, FETCH_V, _fetch_small(0, 0, {"rot": {0: 0, 1: 0}}))
        session, offsets = answer["session_id"], {0: 0, 1: 0}
        served: list[int] = []
        for epoch in range(1, 6):
            with_records = [k[1] for k, v in _answered(answer).items() if _values(v)]
            assert len(with_records) == 1, _answered(answer)
            served += with_records
            offsets[with_records[0]] += 1
            moved = {with_records[0]: offsets[with_records[0]]}
            answer = kafka.call(FETCH, FETCH_V, _fetch_small(session, epoch, {"rot": moved}))
        assert served == [0, 1, 0, 1, 0]  # in turn, not partition 0 until it is drained


def test_only_partitions_that_exist_are_held_and_errors_are_answered_until_they_clear(
    cluster: Cluster,
) -> None:
    _topic(cluster, "present", partitions=1)
    with Connection(cluster.kafka_addresses[1]) as kafka:
        # a partition of no topic is answered, but no session holds it
        wanted = {"present": {0: 0}, "later": {0: 0}}
        answer = kafka.call(FETCH, FETCH_V, _fetch(0, 0, wanted))
        assert answer["session_id"] == 0
        assert _answered(answer)[("later", 0)]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        session = kafka.call(FETCH, FETCH_V, _fetch(0, 0, {"present": {0: 0}}))["session_id"]
        assert session != 0
        added = kafka.call(FETCH, FETCH_V, _fetch(session, 1, {"later": {0: 0}}))
        assert added["error_code"] == FETCH_SESSION_ID_NOT_FOUND  # the client starts over
        _topic(cluster, "later", partitions=1)
        _produce(cluster, "later", 0, ["finally"])
        again = kafka.call(FETCH, FETCH_V, _fetch(0, 0, wanted))
        session = again["session_id"]
        assert session != 0 and _values(_answered(again)[("later", 0)]) == [b"finally"]
        # a future leader epoch is refused on every fetch, then answered once corrected
        future = _fetch(session, 1, {"present": {0: 0}, "later": {0: 1}})
        future["topics"][0]["partitions"][0]["current_leader_epoch"] = 1_000
        fenced = _answered(kafka.call(FETCH, FETCH_V, future))
        assert fenced[("present", 0)]["error_code"] == 75  # UNKNOWN_LEADER_EPOCH
        still = _answered(kafka.call(FETCH, FETCH_V, _fetch(session, 2, {})))
        assert list(still) == [("present", 0)] and still[("present", 0)]["error_code"] == 75
        fixed = _answered(kafka.call(FETCH, FETCH_V, _fetch(session, 3, {"present": {0: 0}})))
        assert fixed[("present", 0)]["error_code"] == 0
        assert fixed[("present", 0)]["high_watermark"] == 0


def test_sessions_at_fetch_v7(cluster: Cluster) -> None:
    """v7 is the first version with sessions, and not yet flexible (compact) encoding."""
    _topic(cluster, "v7", partitions=2)
    with Connection(cluster.kafka_addresses[1]) as kafka:
        opened = kafka.call(FETCH, 7, _fetch(0, 0, {"v7": {0: 0, 1: 0}}))
        session = opened["session_id"]
        assert session != 0 and len(_answered(opened)) == 2
        assert _answered(kafka.call(FETCH, 7, _fetch(session, 1, {}))) == {}
        _produce(cluster, "v7", 0, ["seven"])
        news = _answered(kafka.call(FETCH, 7, _fetch(session, 2, {})))
        assert list(news) == [("v7", 0)] and _values(news[("v7", 0)]) == [b"seven"]
