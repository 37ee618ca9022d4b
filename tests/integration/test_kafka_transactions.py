"""Kafka transactions with real clients against a real cluster (issue 27): confluent-kafka's
(librdkafka's) transactional producer commits and aborts across partitions, a
read_committed consumer sees committed transactions whole and never an aborted record, a
second producer with the same transactional id fences the first, and
send_offsets_to_transaction commits a group's offsets with the transaction.
docs/design/kafka-transactions.md §5 lists the behaviour these check."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kraftlite.errors import ErrorCode, KraftliteError
from tests.harness.processes import FAST_SESSIONS, Cluster, http

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # kafka-python 3.0.12 reads its schemas with a deprecated importlib call
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


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
    cluster.create_topic(name, partitions, 3)


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


def read_values(
    reader: Consumer, topic: str, partitions: int, idle_s: float = 3.0, expected: int = 0
) -> list[bytes]:
    """Every value a consumer reads from the start until nothing came for `idle_s` (and
    `expected` values came, or 30 s passed: a transaction's markers are written after its
    commit is answered)."""
    reader.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    started = last = time.monotonic()
    while time.monotonic() - last < idle_s or (
        len(values) < expected and time.monotonic() - started < 30
    ):
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
    committed = read_values(consumer(cluster, "read_committed"), "txn-out", 3, expected=30)
    assert sorted(committed) == sorted(f"c{r}-{i}".encode() for r in range(3) for i in range(10)), (
        partition_states(cluster, "txn-out", 3)
    )
    everything = read_values(consumer(cluster, "read_uncommitted"), "txn-out", 3)
    assert len(everything) == 45  # the aborted records are in the log, markers are not records
    # the HTTP edge, JSON and binary (kraftlite's own consumer), both isolation levels
    for isolation, expected in (("read_committed", committed), ("read_uncommitted", everything)):
        assert sorted(http_values(cluster, "txn-out", 3, isolation)) == sorted(expected)
        assert sorted(asyncio.run(client_values(cluster, "txn-out", isolation))) == sorted(expected)


def partition_states(cluster: Cluster, topic: str, partitions: int) -> list[Any]:
    """What a failure needs to be understood: each partition's offsets and its leader's
    producers (DescribeProducers: open transactions, last markers' coordinator epochs)."""
    from kraftlite.protocol.kafka.messages import ApiKey  # noqa: PLC0415
    from tests.harness.kafka_wire import call  # noqa: PLC0415

    found: list[Any] = []
    for partition in range(partitions):
        _, fetched = http(
            "GET",
            cluster.urls[1] + f"/v1/topics/{topic}/partitions/{partition}/records"
            "?offset=0&isolation=read_committed",
        )
        found.append(
            {k: fetched.get(k) for k in ("high_watermark", "last_stable_offset", "next_offset")}
        )
        for address in cluster.kafka_addresses.values():
            answer = call(
                address,
                ApiKey.DESCRIBE_PRODUCERS,
                0,
                {"topics": [{"name": topic, "partition_indexes": [partition]}]},
            )
            state = answer["topics"][0]["partitions"][0]
            if state["error_code"] == 0:
                found.append(state["active_producers"])
    return found


def http_values(cluster: Cluster, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value the JSON fetch returns, page by page (two records a page)."""
    values: list[bytes] = []
    for partition in range(partitions):
        offset = 0
        while True:
            status, answer = http(
                "GET",
                cluster.urls[2] + f"/v1/topics/{topic}/partitions/{partition}/records"
                f"?offset={offset}&max_records=2&isolation={isolation}",
            )
            assert status == 200, answer
            values += [r["value"].encode() for r in answer["records"]]
            if answer["next_offset"] >= answer["high_watermark"]:
                break
            assert answer["next_offset"] > offset  # never stuck on markers or aborted ones
            offset = answer["next_offset"]
    return values


async def client_values(cluster: Cluster, topic: str, isolation: str) -> list[bytes]:
    """Every value kraftlite's Python consumer polls from the start."""
    from kraftlite.client.consumer import Consumer as KraftliteConsumer  # noqa: PLC0415

    values: list[bytes] = []
    async with KraftliteConsumer(
        cluster.urls[1], auto_offset_reset="earliest", isolation_level=isolation
    ) as reader:
        await reader.assign_topic(topic)
        for _ in range(20):
            polled = await reader.poll(200)
            values += [r.value for r in polled if r.value is not None]
    return values


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
    writer.commit_transaction(30)  # answered before its markers are written
    assert read_values(consumer(cluster, "read_committed"), "txn-open", 1, expected=2) == [
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
    assert read_values(consumer(cluster, "read_committed"), "txn-zombie", 1, expected=1) == [
        b"successor"
    ]


async def python_client_transactions(cluster: Cluster, compression: str) -> None:
    """kraftlite's own producer over HTTP (docs/transactions.md): a commit across topics
    and partitions is seen whole, an abort never, and a Kafka client taking the same
    transactional id fences it (both edges share one coordinator). Compressed, its
    batches go as Kafka batches (client/producer.py rule 7)."""
    from kraftlite.client.producer import Producer as KraftliteProducer  # noqa: PLC0415

    async with KraftliteProducer(
        list(cluster.urls.values()),
        transactional_id="tx-python",
        linger_ms=1,
        compression=compression,
    ) as writer:
        await writer.init_transactions()
        writer.begin_transaction()
        sent = [await writer.send(t, f"{t}-{i}".encode(), partition=i % 3)
                for t in ("txn-py-a", "txn-py-b") for i in range(6)]  # fmt: skip
        await writer.send_offsets_to_transaction({("txn-py-a", 0): 3}, "py-group")
        await writer.commit_transaction(tag="first")
        assert all(f.result().offset >= 0 for f in sent)
        writer.begin_transaction()
        await writer.send("txn-py-a", b"aborted", partition=0)
        await writer.send_offsets_to_transaction({("txn-py-a", 0): 7}, "py-group")
        await writer.abort_transaction()
        # a Kafka client takes the id: the HTTP producer is fenced
        successor = producer(cluster, "tx-python")
        successor.init_transactions(30)
        writer.begin_transaction()
        late = await writer.send("txn-py-a", b"zombie", partition=1)
        with pytest.raises(KraftliteError) as fenced:
            await writer.commit_transaction()
        error = late.exception()
        assert isinstance(error, KraftliteError), error
        assert error.code in {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH}, error
        assert fenced.value.code is ErrorCode.TRANSACTION_ABORTABLE
        successor.begin_transaction()
        successor.produce("txn-py-b", value=b"successor", partition=2)
        successor.commit_transaction(30)


def test_the_python_clients_transactions_and_a_kafka_client_fencing_it(cluster: Cluster) -> None:
    """Compressed (zstd): the transactional batches go as Kafka batches, kept as sent (the
    uncompressed binary batch's transactional path is the Spark sink's, tests/spark)."""
    create_topic(cluster, "txn-py-a")
    create_topic(cluster, "txn-py-b")
    asyncio.run(python_client_transactions(cluster, "zstd"))
    status, offsets = http("GET", cluster.urls[1] + "/v1/groups/py-group/offsets")
    assert status == 200, offsets
    assert [(o["topic"], o["partition"], o["offset"]) for o in offsets["offsets"]] == [
        ("txn-py-a", 0, 3)
    ]  # the committed transaction's, not the aborted one's
    assert sorted(read_values(consumer(cluster, "read_committed"), "txn-py-a", 3, expected=6)) == (
        sorted(f"txn-py-a-{i}".encode() for i in range(6))
    )
    assert sorted(read_values(consumer(cluster, "read_committed"), "txn-py-b", 3, expected=7)) == (
        sorted([*(f"txn-py-b-{i}".encode() for i in range(6)), b"successor"])
    )
    assert sorted(read_values(consumer(cluster, "read_uncommitted"), "txn-py-a", 3)) == sorted(
        [*(f"txn-py-a-{i}".encode() for i in range(6)), b"aborted"]
    )  # the zombie's batch never reached the log


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
    out = read_values(consumer(cluster, "read_committed"), "ctp-out", 1, expected=10)
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
    # "after" is readable once the coordinator aborted the open transaction (the last
    # stable offset stops at its first record until then)
    assert read_values(consumer(cluster, "read_committed"), "txn-timeout", 1, expected=1) == [
        b"after"
    ]
    with pytest.raises(KafkaException):
        slow.commit_transaction(30)


def test_kafka_python_commits_aborts_and_reads_committed(cluster: Cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer  # noqa: PLC0415 - a test-only client
    from kafka import TopicPartition as KafkaTopicPartition  # noqa: PLC0415

    create_topic(cluster, "kp-txn", partitions=2)
    writer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="tx-kp")
    writer.init_transactions()
    writer.begin_transaction()
    for i in range(6):
        writer.send("kp-txn", value=f"keep-{i}".encode(), partition=i % 2)
    writer.commit_transaction()
    writer.begin_transaction()
    for i in range(4):
        writer.send("kp-txn", value=f"drop-{i}".encode(), partition=i % 2)
    writer.flush()
    writer.abort_transaction()
    writer.close()
    reader = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    reader.assign([KafkaTopicPartition("kp-txn", 0), KafkaTopicPartition("kp-txn", 1)])
    values = sorted(message.value for message in reader)
    reader.close()
    assert values == sorted(f"keep-{i}".encode() for i in range(6))


async def test_aiokafka_transactions_and_send_offsets(cluster: Cluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: PLC0415

    create_topic(cluster, "aio-in", partitions=1)
    create_topic(cluster, "aio-out", partitions=1)
    source = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(5):
        source.produce("aio-in", value=f"m{i}".encode(), partition=0)
    assert source.flush(30) == 0
    writer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="tx-aio")
    await writer.start()
    try:
        async with writer.transaction():
            for i in range(5):
                await writer.send_and_wait("aio-out", f"m{i}".upper().encode(), partition=0)
            await writer.send_offsets_to_transaction(
                {AioTopicPartition("aio-in", 0): 5}, "aio-group"
            )
        await writer.begin_transaction()
        await writer.send_and_wait("aio-out", b"never", partition=0)
        await writer.abort_transaction()
    finally:
        await writer.stop()
    reader = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        group_id="aio-group",
        enable_auto_commit=False,
    )
    await reader.start()
    try:
        committed = await reader.committed(AioTopicPartition("aio-in", 0))
        assert committed == 5  # aiokafka's OffsetFetch asks for nothing stable: wait for it
        reader.assign([AioTopicPartition("aio-out", 0)])
        await reader.seek_to_beginning(AioTopicPartition("aio-out", 0))
        got = await reader.getmany(timeout_ms=3000)
        values = [m.value for batch in got.values() for m in batch]
    finally:
        await reader.stop()
    assert values == [f"M{i}".encode() for i in range(5)]


def transaction_coordinator(cluster: Cluster, transactional_id: str) -> int:
    from kraftlite.protocol.kafka.messages import ApiKey  # noqa: PLC0415
    from tests.harness.kafka_wire import call  # noqa: PLC0415

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = call(
            cluster.kafka_addresses[1],
            ApiKey.FIND_COORDINATOR,
            1,
            {"key": transactional_id, "key_type": 1},
        )
        if answer["error_code"] == 0:
            return int(answer["node_id"])
        time.sleep(0.1)
    raise AssertionError("no transaction coordinator")


def test_a_commit_survives_its_coordinator_killed_before_the_markers(cluster: Cluster) -> None:
    """[C23]: kill -9 the coordinator the moment EndTxn is answered; the broker that takes
    its state partition over finds PrepareCommit and writes the markers: every record
    becomes visible to read_committed readers, none is lost or seen twice."""
    create_topic(cluster, "txn-failover")
    writer = producer(cluster, "tx-failover")
    writer.init_transactions(30)
    coordinator = transaction_coordinator(cluster, "tx-failover")
    writer.begin_transaction()
    for i in range(30):
        writer.produce("txn-failover", value=f"f{i}".encode(), partition=i % 3)
    writer.flush(30)
    writer.commit_transaction(30)
    cluster.processes[coordinator].kill()
    try:
        deadline = time.monotonic() + 60
        values: list[bytes] = []
        while time.monotonic() < deadline:
            values = read_values(consumer(cluster, "read_committed"), "txn-failover", 3, 2)
            if len(values) >= 30:
                break
        assert sorted(values) == sorted(f"f{i}".encode() for i in range(30))
        # and the id goes on at its new coordinator
        writer.begin_transaction()
        writer.produce("txn-failover", value=b"after", partition=0)
        writer.commit_transaction(60)
    finally:
        cluster.start_broker(coordinator)
        cluster.wait_ready([coordinator])
