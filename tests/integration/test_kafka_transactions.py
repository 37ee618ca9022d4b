"""Kafka transactions with real clients against a real cluster (issue 27): confluent-kafka's
(librdkafka's) transactional producer commits and aborts across partitions, a
read_committed consumer sees committed transactions whole and never an aborted record, a
second producer with the same transactional id fences the first, and
send_offsets_to_transaction commits a group's offsets with the transaction.
docs/design/kafka-transactions.md §5 lists the behaviour these check."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.harness.processes import FAST_SESSIONS, Cluster, http, http_retry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("txn"),
        controller_config=FAST_SESSIONS,
        broker_config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 300},
        kafka=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def create_topic(cluster: Cluster, name: str, partitions: int = 3) -> None:
    status, answer = http_retry(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": name, "partitions": partitions, "replication_factor": 3},
    )
    assert status == 201, answer
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status, described = http("GET", cluster.urls[2] + f"/v1/topics/{name}")
        if status == 200 and all(p["high_watermark"] is not None for p in described["partitions"]):
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} has no leaders")


def producer(cluster: Cluster, transactional_id: str, **extra: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **extra,
        }
    )


def consumer(cluster: Cluster, isolation: str, group: str | None = None) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group or f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )


def read_values(reader: Consumer, topic: str, partitions: int, idle_s: float = 3.0) -> list[bytes]:
    """Every value a consumer reads from the start until nothing came for `idle_s`."""
    reader.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    last = time.monotonic()
    while time.monotonic() - last < idle_s:
        message = reader.poll(0.2)
        if message is None:
            continue
        assert message.error() is None, message.error()
        values.append(message.value())
        last = time.monotonic()
    return values


def test_committed_transactions_are_seen_whole_and_aborted_ones_never(cluster: Cluster) -> None:
    create_topic(cluster, "txn-out")
    writer = producer(cluster, "tx-commit-abort")
    writer.init_transactions(30)
    for round_ in range(3):
        writer.begin_transaction()
        for i in range(10):
            writer.produce("txn-out", value=f"c{round_}-{i}".encode(), partition=i % 3)
        writer.commit_transaction(30)
        writer.begin_transaction()
        for i in range(5):
            writer.produce("txn-out", value=f"a{round_}-{i}".encode(), partition=i % 3)
        writer.flush(30)  # written to the partitions, then aborted
        writer.abort_transaction(30)
    committed = read_values(consumer(cluster, "read_committed"), "txn-out", 3)
    assert sorted(committed) == sorted(f"c{r}-{i}".encode() for r in range(3) for i in range(10))
    everything = read_values(consumer(cluster, "read_uncommitted"), "txn-out", 3)
    assert len(everything) == 45  # the aborted records are in the log, markers are not records


def test_an_open_transaction_holds_read_committed_readers_back(cluster: Cluster) -> None:
    create_topic(cluster, "txn-open", partitions=1)
    writer = producer(cluster, "tx-open")
    writer.init_transactions(30)
    writer.begin_transaction()
    writer.produce("txn-open", value=b"pending", partition=0)
    writer.flush(30)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce("txn-open", value=b"plain", partition=0)
    assert plain.flush(30) == 0
    assert read_values(consumer(cluster, "read_committed"), "txn-open", 1, idle_s=2) == []
    assert sorted(read_values(consumer(cluster, "read_uncommitted"), "txn-open", 1)) == [
        b"pending",
        b"plain",
    ]
    writer.commit_transaction(30)
    assert read_values(consumer(cluster, "read_committed"), "txn-open", 1) == [
        b"pending",
        b"plain",
    ]


def test_a_second_producer_with_the_same_id_fences_the_first(cluster: Cluster) -> None:
    create_topic(cluster, "txn-zombie", partitions=1)
    zombie = producer(cluster, "tx-zombie")
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("txn-zombie", value=b"zombie", partition=0)
    zombie.flush(30)
    successor = producer(cluster, "tx-zombie")
    successor.init_transactions(30)  # fences and aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce("txn-zombie", value=b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as caught:
        zombie.produce("txn-zombie", value=b"late", partition=0)
        zombie.commit_transaction(30)
    error = caught.value.args[0]
    assert error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), error
    assert read_values(consumer(cluster, "read_committed"), "txn-zombie", 1) == [b"successor"]


def test_offsets_sent_to_a_transaction_are_committed_with_it(cluster: Cluster) -> None:
    """Consume-transform-produce: the group's offsets move only when the transaction
    commits, and not at all when it aborts."""
    create_topic(cluster, "ctp-in", partitions=1)
    create_topic(cluster, "ctp-out", partitions=1)
    source = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        source.produce("ctp-in", value=f"in-{i}".encode(), partition=0)
    assert source.flush(30) == 0
    group = "ctp-group"
    reader = consumer(cluster, "read_committed", group)
    reader.subscribe(["ctp-in"])
    writer = producer(cluster, "tx-ctp")
    writer.init_transactions(30)
    taken: list[Any] = []
    deadline = time.monotonic() + 30
    while len(taken) < 10 and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            taken.append(message)
    assert len(taken) == 10
    for attempt, end in (("abort", 5), ("commit", 10)):
        writer.begin_transaction()
        for message in taken[:end]:
            writer.produce("ctp-out", value=message.value().upper(), partition=0)
        offsets = [TopicPartition("ctp-in", 0, taken[end - 1].offset() + 1)]
        writer.send_offsets_to_transaction(offsets, reader.consumer_group_metadata(), 30)
        if attempt == "abort":
            writer.abort_transaction(30)
            committed = reader.committed([TopicPartition("ctp-in", 0)], 10)
            assert committed[0].offset < 0  # nothing committed
        else:
            writer.commit_transaction(30)
    committed = reader.committed([TopicPartition("ctp-in", 0)], 10)
    assert committed[0].offset == taken[-1].offset() + 1
    reader.close()
    out = read_values(consumer(cluster, "read_committed"), "ctp-out", 1)
    assert out == [f"IN-{i}".encode() for i in range(10)]


def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator(cluster: Cluster) -> None:
    """[C20]: the coordinator aborts it at the next epoch, so read_committed readers move
    past it and its producer is fenced."""
    create_topic(cluster, "txn-timeout", partitions=1)
    slow = producer(cluster, "tx-timeout", **{"transaction.timeout.ms": 2000})
    slow.init_transactions(30)
    slow.begin_transaction()
    slow.produce("txn-timeout", value=b"too late", partition=0)
    slow.flush(30)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce("txn-timeout", value=b"after", partition=0)
    assert plain.flush(30) == 0
    time.sleep(3)
    assert read_values(consumer(cluster, "read_committed"), "txn-timeout", 1) == [b"after"]
    with pytest.raises(KafkaException):
        slow.commit_transaction(30)
