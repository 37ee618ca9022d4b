"""Real Kafka clients against a real cluster's Kafka listeners (issue 16): librdkafka (through
confluent-kafka) and kafka-python produce and consume, their records are the same records on
the HTTP edge and the other way round, AdminClient calls work, and bad frames close only
their own connection.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from kraftlite.client.consumer import Consumer as KraftliteConsumer
from kraftlite.client.producer import Producer as KraftliteProducer
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.kafka import messages, records
from tests.harness.kafka_wire import call, frame, read_exactly
from tests.harness.observe import described_on, wait_until
from tests.harness.processes import FAST_SESSIONS, Cluster, http, http_retry

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # kafka-python 3.0.12 reads its schemas with a deprecated importlib call
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("kafka"), controller_config=FAST_SESSIONS, kafka=True)
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
    while time.monotonic() < deadline:  # every partition led, on every broker
        status, described = http("GET", cluster.urls[2] + f"/v1/topics/{name}")
        if status == 200 and all(p["high_watermark"] is not None for p in described["partitions"]):
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} has no leaders")


def partitions_seen(cluster: Cluster, topic: str, count: int) -> list[dict[str, Any]]:
    """`topic`'s partitions once broker 1 sees `count` of them: a Kafka admin call is answered
    once the controllers committed it, and a broker's metadata follows a moment later (as
    Kafka's brokers do)."""

    def seen() -> list[dict[str, Any]] | None:
        status, described = http("GET", cluster.urls[1] + f"/v1/topics/{topic}")
        if status != 200 or len(described["partitions"]) < count:
            return None
        partitions: list[dict[str, Any]] = described["partitions"]
        return partitions

    partitions: list[dict[str, Any]] = wait_until(seen, 10, f"{count} partitions of {topic}")
    return partitions


def http_records(cluster: Cluster, topic: str, partition: int) -> list[dict[str, Any]]:
    status, answer = http(
        "GET",
        cluster.urls[3] + f"/v1/topics/{topic}/partitions/{partition}/records?offset=0",
    )
    assert status == 200, answer
    return list(answer["records"])


def consume_all(consumer: Consumer, count: int, timeout_s: float = 30) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        got.append(message)
    return got


def test_librdkafka_produces_and_http_reads_the_same_records(cluster: Cluster) -> None:
    create_topic(cluster, "rdk-in")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    delivered: list[Any] = []
    for i in range(30):
        producer.produce(
            "rdk-in",
            key=f"k{i}".encode(),
            value=f"value {i}".encode(),
            headers=[("h", f"{i}".encode())],
            partition=i % 3,
            timestamp=1_700_000_000_000 + i,
            on_delivery=lambda err, msg: delivered.append((err, msg)),
        )
    assert producer.flush(30) == 0
    assert all(err is None for err, _ in delivered), delivered
    for partition in range(3):
        records = http_records(cluster, "rdk-in", partition)
        sent = sorted(
            (m for _, m in delivered if m.partition() == partition), key=lambda m: m.offset()
        )
        assert [r["offset"] for r in records] == [m.offset() for m in sent]
        assert [r["key"] for r in records] == [m.key().decode() for m in sent]
        assert [r["value"] for r in records] == [m.value().decode() for m in sent]
        assert [r["timestamp"] for r in records] == [m.timestamp()[1] for m in sent]
        # (delivery reports carry no headers: each record's says its number)
        assert [r["headers"] for r in records] == [
            {"h": r["value"].removeprefix("value ")} for r in records
        ]


def test_records_produced_over_http_are_consumed_by_librdkafka(cluster: Cluster) -> None:
    create_topic(cluster, "http-in", partitions=1)
    records = [
        {"key": f"k{i}", "value": f"v{i}", "headers": {"n": str(i)}, "timestamp": 1_000 + i}
        for i in range(20)
    ] + [{"key": None, "value": None}]  # a tombstone
    status, answer = http(
        "POST", cluster.urls[2] + "/v1/topics/http-in/partitions/0/records", {"records": records}
    )
    assert status == 200, answer
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition("http-in", 0, 0)])
        got = consume_all(consumer, len(records))
    finally:
        consumer.close()
    assert [m.offset() for m in got] == list(range(len(records)))
    assert [m.key() for m in got] == [r["key"] and r["key"].encode() for r in records]
    assert [m.value() for m in got] == [r["value"] and r["value"].encode() for r in records]
    assert [m.timestamp()[1] for m in got[:20]] == [1_000 + i for i in range(20)]
    assert [m.headers() for m in got[:20]] == [[("n", str(i).encode())] for i in range(20)]


def test_kafka_python_produces_and_consumes(cluster: Cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer  # noqa: PLC0415 - a test-only client
    from kafka import TopicPartition as KafkaTopicPartition  # noqa: PLC0415

    create_topic(cluster, "kp", partitions=2)
    producer = KafkaProducer(  # idempotent by default (InitProducerId)
        bootstrap_servers=cluster.bootstrap.split(","), acks="all"
    )
    futures = [
        producer.send("kp", key=b"key-%d" % i, value=b"v-%d" % i, headers=[("x", b"y")])
        for i in range(40)
    ]
    producer.flush(30)
    sent = [f.get(timeout=30) for f in futures]
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap.split(","), enable_auto_commit=False
    )
    try:
        partitions = [KafkaTopicPartition("kp", p) for p in range(2)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(batch)
    finally:
        consumer.close()
    assert sorted((r.partition, r.offset) for r in got) == sorted(
        (m.partition, m.offset) for m in sent
    )
    assert sorted(r.value for r in got) == sorted(b"v-%d" % i for i in range(40))
    assert all(r.headers == [("x", b"y")] for r in got)
    # the key decides the partition as on the HTTP edge (murmur2, Kafka's partitioner)
    for record in got:
        status, answer = http(
            "POST",
            cluster.urls[1] + "/v1/topics/kp/records",
            {"records": [{"key": record.key.decode(), "value": "again"}]},
        )
        assert status == 200 and answer["offsets"][0]["partition"] == record.partition


def test_admin_client_creates_describes_and_deletes_topics(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    name = f"adm-{uuid.uuid4().hex[:6]}"
    futures = admin.create_topics([NewTopic(name, num_partitions=4, replication_factor=3)])
    futures[name].result(30)
    described = admin.list_topics(name, timeout=10).topics[name]
    assert described.error is None
    assert sorted(described.partitions) == [0, 1, 2, 3]
    assert all(
        len(p.replicas) == 3 and p.leader in p.replicas for p in described.partitions.values()
    )
    assert len(partitions_seen(cluster, name, 4)) == 4
    cluster_meta = admin.list_topics(timeout=10)
    assert sorted(cluster_meta.brokers) == [1, 2, 3]
    assert {f"{b.host}:{b.port}" for b in cluster_meta.brokers.values()} == set(
        cluster.kafka_addresses.values()
    )
    with pytest.raises(KafkaException):  # already exists
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(
            30
        )
    admin.delete_topics([name])[name].result(30)
    # the broker that answered DeleteTopics holds the change when it answers; broker 1 may
    # be another one, whose metadata follows a moment later
    wait_until(
        lambda: http("GET", cluster.urls[1] + f"/v1/topics/{name}")[0] == 404,
        10,
        "the deletion to reach broker 1",
    )


def test_admin_client_creates_with_replica_assignments_and_validates_only(
    cluster: Cluster,
) -> None:
    """Issue 25 (librdkafka's test 0081 starts so): CreateTopics with a replica assignment
    places each partition's replicas as asked, the first leading; validate_only creates
    nothing; a bad assignment is INVALID_REPLICA_ASSIGNMENT."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    name = f"placed-{uuid.uuid4().hex[:6]}"
    assignment = [[3, 1], [1, 2], [2, 3]]
    check = admin.create_topics(
        [NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment)],
        validate_only=True,
    )
    check[name].result(30)
    assert http("GET", cluster.urls[1] + f"/v1/topics/{name}")[0] == 404  # nothing made
    admin.create_topics(
        [NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment)]
    )[name].result(30)
    wait_until(
        lambda: http("GET", cluster.urls[1] + f"/v1/topics/{name}")[0] == 200, 10, "the topic"
    )
    described = admin.list_topics(name, timeout=10).topics[name]
    assert {i: p.replicas for i, p in described.partitions.items()} == dict(enumerate(assignment))
    assert {i: p.leader for i, p in described.partitions.items()} == {0: 3, 1: 1, 2: 2}
    bad = f"bad-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException, match=r"INVALID_REPLICA_ASSIGNMENT|[Rr]eplica"):
        admin.create_topics([NewTopic(bad, num_partitions=1, replica_assignment=[[1, 9]])])[
            bad
        ].result(30)


def test_brokers_show_their_kafka_address(cluster: Cluster) -> None:
    status, answer = http("GET", cluster.urls[1] + "/v1/brokers")
    assert status == 200, answer
    assert {b["id"]: b["kafka"] for b in answer["brokers"]} == cluster.kafka_addresses
    status, answer = http("GET", cluster.urls[2] + "/v1/cluster")
    assert status == 200, answer
    assert {b["id"]: b["kafka"] for b in answer["brokers"]} == cluster.kafka_addresses


def test_offsets_committed_over_kafka_are_seen_over_http(cluster: Cluster) -> None:
    create_topic(cluster, "commits", partitions=1)
    http(
        "POST",
        cluster.urls[1] + "/v1/topics/commits/partitions/0/records",
        {"records": [{"value": str(i)} for i in range(5)]},
    )
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "g-assign",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition("commits", 0, 0)])
        got = consume_all(consumer, 5)
        consumer.commit(message=got[-1], asynchronous=False)
        committed = consumer.committed([TopicPartition("commits", 0)], timeout=10)
        assert committed[0].offset == 5
        # the leader epoch of the record the commit follows is kept (KIP-320)
        assert got[-1].leader_epoch() is not None and got[-1].leader_epoch() >= 0
        assert committed[0].leader_epoch == got[-1].leader_epoch()
    finally:
        consumer.close()
    status, answer = http("GET", cluster.urls[2] + "/v1/groups/g-assign/offsets")
    assert status == 200, answer
    assert [(o["topic"], o["partition"], o["offset"], o["lag"]) for o in answer["offsets"]] == [
        ("commits", 0, 5, 0)
    ]


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # a size of 1.2 GB
        struct.pack(">i", -5),
        struct.pack(">i", 200 << 20),  # over socket.request.max.bytes
        frame(b"\x00"),  # under a header
        frame(b"\x00\x00\x00\x09\x00\x00\x00\x01\xff\xff"),  # Produce v9 with nothing after
        frame(b"\x00\x12\x00\x03\x00\x00\x00\x07\x00\x05ab"),  # ApiVersions v3, cut
        frame(b"\x7f\x00\x00\x00\x00\x00\x00\x01\x00\x00"),  # api key 32512
        frame(b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\xff" * 64),  # Produce v0: not served
    ],
)
def test_a_bad_frame_closes_its_connection_and_nothing_else(
    cluster: Cluster, garbage: bytes
) -> None:
    host, port = cluster.kafka_addresses[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(garbage)
        sock.settimeout(10)
        assert sock.recv(4096) == b""  # closed, unanswered
    # the broker still serves others
    admin = AdminClient({"bootstrap.servers": cluster.kafka_addresses[1]})
    assert 1 in admin.list_topics(timeout=10).brokers
    status, _ = http("GET", cluster.urls[1] + "/readyz")
    assert status == 200


def test_api_versions_of_an_unknown_version_answers_v0_with_the_versions(cluster: Cluster) -> None:
    host, port = cluster.kafka_addresses[2].rsplit(":", 1)
    request = struct.pack(">hhi", 18, 99, 42) + struct.pack(">h", 4) + b"test" + b"\x00" * 8
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame(request))
        size = struct.unpack(">i", read_exactly(sock, 4))[0]
        answer = read_exactly(sock, size)
    correlation_id, error_code, count = struct.unpack(">ihi", answer[:10])
    assert (correlation_id, error_code) == (42, 35)
    served = {struct.unpack(">hhh", answer[10 + 6 * i : 16 + 6 * i])[0] for i in range(count)}
    assert {0, 1, 3, 18} <= served


def test_a_partition_this_broker_does_not_lead_answers_not_leader(cluster: Cluster) -> None:
    """No forwarding on the Kafka edge: the client is told, and refreshes its metadata."""
    create_topic(cluster, "lead", partitions=1)
    status, described = http("GET", cluster.urls[1] + "/v1/topics/lead")
    assert status == 200, described
    leader = described["partitions"][0]["leader"]
    other = next(b for b in cluster.kafka_addresses if b != leader)
    batch = records.encode_batch([records.KafkaRecord(0, int(time.time() * 1000), None, b"x", [])])
    produce = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "lead", "partition_data": [{"index": 0, "records": batch}]}],
    }
    answer = call(cluster.kafka_addresses[other], 0, 9, produce)
    partition = answer["responses"][0]["partition_responses"][0]
    assert partition["error_code"] == 6  # NOT_LEADER_OR_FOLLOWER
    fetch = {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "topics": [
            {
                "topic": "lead",
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    answer = call(cluster.kafka_addresses[other], 1, 12, fetch)
    assert answer["responses"][0]["partitions"][0]["error_code"] == 6
    # nothing was appended anywhere; the leader takes the same batch
    answer = call(cluster.kafka_addresses[leader], 0, 9, produce)
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert answer["responses"][0]["partition_responses"][0]["base_offset"] == 0


def test_a_corrupt_batch_is_refused_and_nothing_is_appended(cluster: Cluster) -> None:
    create_topic(cluster, "corrupt", partitions=1)
    _, described = http("GET", cluster.urls[1] + "/v1/topics/corrupt")
    leader = described["partitions"][0]["leader"]
    batch = bytearray(
        records.encode_batch([records.KafkaRecord(0, int(time.time() * 1000), None, b"x", [])])
    )
    batch[-1] ^= 0xFF  # the CRC no longer matches
    produce = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": "corrupt", "partition_data": [{"index": 0, "records": bytes(batch)}]}
        ],
    }
    answer = call(cluster.kafka_addresses[leader], 0, 9, produce)
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 2  # CORRUPT_MESSAGE
    produce["topic_data"][0]["name"] = "no-such-topic"
    answer = call(cluster.kafka_addresses[leader], 0, 9, produce)
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 3
    assert http_records(cluster, "corrupt", 0) == []


def _produce_http(cluster: Cluster, topic: str, values: list[str]) -> None:
    for start in range(0, len(values), 100):
        status, answer = http(
            "POST",
            cluster.urls[1] + f"/v1/topics/{topic}/records",
            {"records": [{"key": v, "value": v} for v in values[start : start + 100]]},
        )
        assert status == 200 and "errors" not in answer, answer


def _group_consumer(cluster: Cluster, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 300,
        }
    )


def test_librdkafka_consumers_in_a_group_share_partitions_and_resume(cluster: Cluster) -> None:
    create_topic(cluster, "grp", partitions=6)
    consumers = [_group_consumer(cluster, "g-rdk") for _ in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe(["grp"])
        deadline = time.monotonic() + 60
        while True:  # one generation with all three: every partition owned once
            for consumer in consumers:
                assert consumer.poll(0.1) is None
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            if all(owned) and sorted(p for o in owned for p in o) == list(range(6)):
                break
            assert time.monotonic() < deadline, owned
        _produce_http(cluster, "grp", [f"a{i}" for i in range(300)])
        seen: dict[int, list[str]] = {0: [], 1: [], 2: []}
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < 300:
            for n, consumer in enumerate(consumers):
                message = consumer.poll(0.05)
                if message is not None:
                    assert message.error() is None, message.error()
                    assert message.partition() in owned[n]
                    seen[n].append(message.value().decode())
            assert time.monotonic() < deadline, {n: len(v) for n, v in seen.items()}
        assert sorted(v for vs in seen.values() for v in vs) == sorted(f"a{i}" for i in range(300))
        assert all(seen.values())  # all three did work
        for consumer in consumers:
            consumer.commit(asynchronous=False)
    finally:
        for consumer in consumers:
            consumer.close()
    status, listed = http("GET", cluster.urls[2] + "/v1/groups/g-rdk/offsets")
    assert status == 200, listed
    assert sum(o["offset"] for o in listed["offsets"]) == 300
    assert all(o["lag"] == 0 for o in listed["offsets"])
    _produce_http(cluster, "grp", [f"b{i}" for i in range(120)])
    again = _group_consumer(cluster, "g-rdk")  # resumes from the committed offsets
    try:
        again.subscribe(["grp"])
        got = consume_all(again, 120, timeout_s=60)
        assert again.poll(1.0) is None  # nothing twice, nothing old
    finally:
        again.close()
    assert sorted(m.value().decode() for m in got) == sorted(f"b{i}" for i in range(120))


def test_kafka_python_consumer_group(cluster: Cluster) -> None:
    from kafka import KafkaConsumer  # noqa: PLC0415 - a test-only client

    create_topic(cluster, "kpg", partitions=2)
    _produce_http(cluster, "kpg", [f"v{i}" for i in range(50)])
    consumer = KafkaConsumer(
        "kpg",
        bootstrap_servers=cluster.bootstrap.split(","),
        group_id="g-kp",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got) < 50 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(batch)
        consumer.commit()
        assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(50))
    finally:
        consumer.close()
    status, listed = http("GET", cluster.urls[3] + "/v1/groups/g-kp/offsets")
    assert status == 200, listed
    assert sum(o["offset"] for o in listed["offsets"]) == 50
    # the group is listed, as a classic group, by the broker that coordinates it
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    listed_groups = admin.list_consumer_groups().result(30)
    assert "g-kp" in {g.group_id for g in listed_groups.valid}
    # its member left: an Empty classic group, which Kafka's filters (ListGroups v4, v5;
    # any case) find as such (librdkafka's 0081 ListConsumerGroups)
    empty_classic = admin.list_consumer_groups(
        states={ConsumerGroupState.EMPTY}, types={ConsumerGroupType.CLASSIC}
    ).result(30)
    (listed,) = [g for g in empty_classic.valid if g.group_id == "g-kp"]
    assert (listed.state, listed.type) == (ConsumerGroupState.EMPTY, ConsumerGroupType.CLASSIC)
    for states, types in [
        ({ConsumerGroupState.STABLE}, {ConsumerGroupType.CLASSIC}),
        ({ConsumerGroupState.EMPTY}, {ConsumerGroupType.CONSUMER}),
    ]:
        others = admin.list_consumer_groups(states=states, types=types).result(30)
        assert "g-kp" not in {g.group_id for g in others.valid}, (states, types)


def test_a_group_name_is_one_protocol_or_the_other(cluster: Cluster) -> None:
    create_topic(cluster, "mixed", partitions=1)
    consumer = _group_consumer(cluster, "g-mixed")
    try:
        consumer.subscribe(["mixed"])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            consumer.poll(0.1)
            assert time.monotonic() < deadline
        status, answer = http(
            "POST", cluster.urls[1] + "/v1/groups/g-mixed/members", {"topics": ["mixed"]}
        )
        assert status == 409 and answer["error_code"] == "INCONSISTENT_GROUP_PROTOCOL", answer
        # nor may an HTTP commit outside the classic group's membership land
        status, answer = http(
            "POST",
            cluster.urls[1] + "/v1/groups/g-mixed/offsets",
            {"offsets": [{"topic": "mixed", "partition": 0, "offset": 0}]},
        )
        assert status == 404 and answer["error_code"] == "UNKNOWN_MEMBER_ID", answer
    finally:
        consumer.close()


def test_admin_client_configs_partitions_cluster_and_groups(cluster: Cluster) -> None:
    from confluent_kafka import TopicCollection  # noqa: PLC0415
    from confluent_kafka.admin import (  # noqa: PLC0415
        AclOperation,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
    )

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create_topic(cluster, "cfg", partitions=1)
    topic = ConfigResource(ConfigResource.Type.TOPIC, "cfg")
    configs = admin.describe_configs([topic])[topic].result(30)
    assert configs["retention.ms"].value == "604800000"  # the default
    assert configs["retention.ms"].source == 5  # DEFAULT_CONFIG
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        "cfg",
        incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(30)
    wait_until(
        lambda: (
            (described_on(cluster, 2, "cfg") or {}).get("configs", {}).get("retention.ms")
            == "60000"
        ),
        10,
        "the change on broker 2",
    )
    configs = admin.describe_configs([topic])[topic].result(30)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == ("60000", 1)
    # a broker's configs tell where its HTTP API is
    broker = ConfigResource(ConfigResource.Type.BROKER, "2")
    configs = admin.describe_configs([broker])[broker].result(30)
    assert configs["kraftlite.http.url"].value == cluster.urls[2]
    # partitions
    admin.create_partitions([NewPartitions("cfg", 3)])["cfg"].result(30)
    assert len(partitions_seen(cluster, "cfg", 3)) == 3
    # placed by hand (the topic has 3 replicas), or only checked (validate_only)
    admin.create_partitions(
        [NewPartitions("cfg", 4, replica_assignment=[[2, 3, 1]])], validate_only=True
    )["cfg"].result(30)
    with pytest.raises(KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
        admin.create_partitions(
            [NewPartitions("cfg", 5, replica_assignment=[[2, 3, 1]])], validate_only=True
        )["cfg"].result(30)
    status, described = http("GET", cluster.urls[1] + "/v1/topics/cfg")
    assert status == 200 and len(described["partitions"]) == 3  # nothing added
    admin.create_partitions([NewPartitions("cfg", 4, replica_assignment=[[2, 3, 1]])])[
        "cfg"
    ].result(30)
    assert partitions_seen(cluster, "cfg", 4)[3]["replicas"] == [2, 3, 1]
    from kafka import KafkaAdminClient  # noqa: PLC0415
    from kafka.admin import NewPartitions as KafkaPythonNewPartitions  # noqa: PLC0415

    kafka_python = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        kafka_python.create_partitions({"cfg": KafkaPythonNewPartitions(5, [[3, 1, 2]])})
    finally:
        kafka_python.close()
    assert partitions_seen(cluster, "cfg", 5)[4]["replicas"] == [3, 1, 2]
    # the same over HTTP, and what is refused changes nothing
    for body, code in [
        ({"count": 6, "assignments": [[1, 2]]}, "INVALID_REPLICA_ASSIGNMENT"),
        ({"count": 7, "assignments": [[1, 2, 3]]}, "INVALID_REPLICA_ASSIGNMENT"),
        ({"count": 6, "assignments": [[1, 2, 9]]}, "INVALID_REPLICA_ASSIGNMENT"),
        ({"count": 6, "assignments": [[1, -2, 3]]}, "INVALID_REQUEST"),
        ({"count": 6, "assignments": "1,2,3"}, "INVALID_REQUEST"),
        ({"count": 6, "validate_only": "yes"}, "INVALID_REQUEST"),
    ]:
        status, answer = http("POST", cluster.urls[2] + "/v1/topics/cfg/partitions", body)
        assert (status, answer["error_code"]) == (400, code), (body, answer)
    status, answer = http(
        "POST",
        cluster.urls[3] + "/v1/topics/cfg/partitions",
        {"count": 6, "assignments": [[1, 2, 3]], "validate_only": True},
    )
    assert status == 200 and len(answer["partitions"]) == 5, answer
    status, answer = http(
        "POST",
        cluster.urls[3] + "/v1/topics/cfg/partitions",
        {"count": 6, "assignments": [[1, 2, 3]]},
    )
    assert status == 200 and answer["partitions"][5]["replicas"] == [1, 2, 3], answer
    # the cluster
    described_cluster = admin.describe_cluster().result(30)
    assert {n.id for n in described_cluster.nodes} == {1, 2, 3}
    assert described_cluster.cluster_id
    # what this client may do (no auth.required: everything), as librdkafka's 0081 asks
    described_cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert len(set(described_cluster.authorized_operations)) == 7
    (described_topic,) = admin.describe_topics(
        TopicCollection(["cfg"]), include_authorized_operations=True
    ).values()
    assert set(described_topic.result(30).authorized_operations) == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }
    # groups: a group with committed offsets and no members is described, then deleted
    http(
        "POST",
        cluster.urls[1] + "/v1/topics/cfg/partitions/0/records",
        {"records": [{"value": "x"}]},
    )
    consumer = _group_consumer(cluster, "g-del")
    try:
        consumer.subscribe(["cfg"])
        got = consume_all(consumer, 1, timeout_s=60)
        consumer.commit(message=got[0], asynchronous=False)
        described_groups = admin.describe_consumer_groups(["g-del"])["g-del"].result(30)
        assert described_groups.state == ConsumerGroupState.STABLE
        assert len(described_groups.members) == 1
        deleting = admin.delete_consumer_groups(["g-del"])["g-del"]
        with pytest.raises(KafkaException):  # GROUP_NOT_EMPTY
            deleting.result(30)
    finally:
        consumer.close()
    admin.delete_consumer_groups(["g-del"])["g-del"].result(30)
    status, listed = http("GET", cluster.urls[1] + "/v1/groups/g-del/offsets")
    assert status == 200 and listed["offsets"] == []


def test_admin_clients_create_describe_and_delete_acls(cluster: Cluster) -> None:
    """Issue 25: CreateAcls, DescribeAcls and DeleteAcls (librdkafka at v2, kafka-python at
    v3) are the HTTP API's ACL routes: what one edge creates the other lists and deletes.
    This cluster has no `auth.required`, and keeps ACLs as its HTTP API does."""
    from confluent_kafka.admin import (  # noqa: PLC0415
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    principal = f"User:acl-{uuid.uuid4().hex[:6]}"
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    read = AclBinding(
        ResourceType.TOPIC, "acl-orders", literal, principal, "*", AclOperation.READ, allow
    )
    write = AclBinding(
        ResourceType.TOPIC, "acl-", prefixed, principal, "10.1.2.3", AclOperation.WRITE, deny
    )
    on_cluster = AclBinding(  # librdkafka's BROKER is Kafka's CLUSTER (4)
        ResourceType.BROKER, "kafka-cluster", literal, principal, "*", AclOperation.ALTER, allow
    )
    for future in admin.create_acls([read, write, on_cluster]).values():
        assert future.result(30) is None

    def listed_acls(via: int) -> list[tuple[str, str]]:
        """The principal's ACLs over HTTP, as the controller broker `via` asks lists them
        (one that follows the quorum applies a change a moment after it was answered)."""
        status, listed = http("GET", cluster.urls[via] + f"/v1/acls?principal={principal}")
        assert status == 200, listed
        return sorted((a["resource_type"], a["resource_name"]) for a in listed["acls"])

    created = [("CLUSTER", "kraftlite-cluster"), ("TOPIC", "acl-"), ("TOPIC", "acl-orders")]
    wait_until(lambda: listed_acls(2) == created, 10, "the ACLs listed over HTTP")

    def every(kind: Any = ResourceType.ANY, name: str | None = None, pattern: Any = None) -> Any:
        return AclBindingFilter(
            kind,
            name,
            pattern or ResourcePatternType.ANY,
            principal,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )

    def described(acl_filter: Any) -> set[Any]:
        return set(admin.describe_acls(acl_filter).result(30))

    wait_until(lambda: described(every()) == {read, write, on_cluster}, 10, "the ACLs described")
    applying = every(ResourceType.TOPIC, "acl-orders", ResourcePatternType.MATCH)
    assert described(applying) == {read, write}
    other_cluster = AclBinding(
        ResourceType.BROKER, "my-cluster", literal, principal, "*", AclOperation.ALTER, allow
    )
    with pytest.raises(KafkaException, match=r"INVALID_REQUEST|kafka-cluster"):
        admin.create_acls([other_cluster])[other_cluster].result(30)
    deleted = admin.delete_acls([applying])[applying].result(30)
    assert set(deleted) == {read, write}
    wait_until(lambda: described(every()) == {on_cluster}, 10, "the ACLs left")

    # kafka-python (v3, flexible) sees and deletes what librdkafka created
    from kafka.admin import (  # noqa: PLC0415 - a test-only client
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KafkaResourceType  # noqa: PLC0415

    other = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        group = ACL(
            principal,
            "*",
            ACLOperation.DESCRIBE,
            ACLPermissionType.ALLOW,
            ResourcePattern(KafkaResourceType.GROUP, "billing", ACLResourcePatternType.LITERAL),
        )
        assert other.create_acls([group])["failed"] == []
        everything = ACLFilter(
            principal,
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(KafkaResourceType.ANY, None, ACLResourcePatternType.ANY),
        )

        def found() -> list[tuple[Any, str]]:
            acls, _ = other.describe_acls(everything)
            return sorted(
                (a.resource_pattern.resource_type, a.resource_pattern.resource_name) for a in acls
            )

        both = [(KafkaResourceType.GROUP, "billing"), (KafkaResourceType.CLUSTER, "kafka-cluster")]
        wait_until(lambda: found() == both, 10, "kafka-python's view of the ACLs")
        ((_, matching, error),) = other.delete_acls([everything])
        assert error.errno == 0 and len(matching) == 2
    finally:
        other.close()
    wait_until(lambda: described(every()) == set(), 10, "no ACL left")
    wait_until(lambda: listed_acls(1) == [], 10, "no ACL listed over HTTP")


def test_offset_for_leader_epoch_tells_where_an_epoch_ends(cluster: Cluster) -> None:
    create_topic(cluster, "epochs", partitions=1)
    http(
        "POST",
        cluster.urls[1] + "/v1/topics/epochs/partitions/0/records",
        {"records": [{"value": "x"}] * 3},
    )
    _, described = http("GET", cluster.urls[1] + "/v1/topics/epochs")
    leader = described["partitions"][0]["leader"]
    epoch = described["partitions"][0]["leader_epoch"]
    ask = {
        "topics": [
            {
                "topic": "epochs",
                "partitions": [
                    {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": epoch}
                ],
            }
        ]
    }
    answer = call(cluster.kafka_addresses[leader], 23, 4, ask)
    assert answer["topics"][0]["partitions"][0] == {
        "error_code": 0,
        "partition": 0,
        "leader_epoch": epoch,
        "end_offset": 3,
    }
    ask["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch + 1
    answer = call(cluster.kafka_addresses[leader], 23, 4, ask)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 75  # UNKNOWN_LEADER_EPOCH


KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (scripts/test installs it with apt)"
)


@needs_kcat
def test_kcat_produces_consumes_and_lists(cluster: Cluster) -> None:
    assert KCAT is not None
    create_topic(cluster, "kc", partitions=1)
    lines = "".join(f"k{i}:v{i}\n" for i in range(10))
    produced = subprocess.run(
        [KCAT, "-b", cluster.bootstrap, "-P", "-t", "kc", "-p", "0", "-K", ":", "-H", "h=1"],
        input=lines.encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    records = http_records(cluster, "kc", 0)
    assert [(r["key"], r["value"], r["headers"]) for r in records] == [
        (f"k{i}", f"v{i}", {"h": "1"}) for i in range(10)
    ]
    http(
        "POST",
        cluster.urls[2] + "/v1/topics/kc/partitions/0/records",
        {"records": [{"key": "from", "value": "http"}]},
    )
    consumed = subprocess.run(
        [
            KCAT,
            "-b",
            cluster.bootstrap,
            "-C",
            "-t",
            "kc",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o %k:%s\\n",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.decode().splitlines() == [f"{i} k{i}:v{i}" for i in range(10)] + [
        "10 from:http"
    ]
    listed = subprocess.run(
        [KCAT, "-b", cluster.bootstrap, "-L", "-J"], capture_output=True, timeout=60, check=False
    )
    assert listed.returncode == 0, listed.stderr
    metadata = json.loads(listed.stdout)
    assert {b["id"] for b in metadata["brokers"]} == {1, 2, 3}
    assert "kc" in {t["topic"] for t in metadata["topics"]}


def test_kip_848_consumers_share_partitions_by_server_side_assignment(cluster: Cluster) -> None:
    """librdkafka with group.protocol=consumer: ConsumerGroupHeartbeat on kraftlite's own
    server-side groups; the same group, its members and lag, over HTTP."""
    create_topic(cluster, "k848", partitions=4)
    settings = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "g-848",
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumers = [Consumer(settings) for _ in range(2)]
    try:
        for consumer in consumers:
            consumer.subscribe(["k848"])
        deadline = time.monotonic() + 60
        while True:
            for consumer in consumers:
                message = consumer.poll(0.1)
                assert message is None or message.error() is None, message.error()
                assert message is None, message.value()
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            if all(owned) and sorted(p for o in owned for p in o) == [0, 1, 2, 3]:
                break
            assert time.monotonic() < deadline, owned
        status, described = http("GET", cluster.urls[1] + "/v1/groups/g-848")
        assert status == 200 and len(described["members"]) == 2, described
        _produce_http(cluster, "k848", [f"e{i}" for i in range(100)])
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while len(seen) < 100:
            for consumer in consumers:
                message = consumer.poll(0.05)
                if message is not None:
                    assert message.error() is None, message.error()
                    seen.append(message.value().decode())
            assert time.monotonic() < deadline, len(seen)
        assert sorted(seen) == sorted(f"e{i}" for i in range(100))
        for consumer in consumers:
            consumer.commit(asynchronous=False)
    finally:
        for consumer in consumers:
            consumer.close()
    status, listed = http("GET", cluster.urls[2] + "/v1/groups/g-848/offsets")
    assert status == 200, listed
    assert sum(o["offset"] for o in listed["offsets"]) == 100
    assert all(o["lag"] == 0 for o in listed["offsets"])


async def test_aiokafka_produces_consumes_in_a_group_and_runs_admin_calls(
    cluster: Cluster,
) -> None:
    """aiokafka (asyncio, its own protocol code): admin, an idempotent producer, and a group
    of two consumers that share the partitions; the same records and offsets over HTTP."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: PLC0415 - test-only
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415
    from aiokafka.admin import NewTopic as AioNewTopic  # noqa: PLC0415
    from aiokafka.structs import TopicPartition as AioTopicPartition  # noqa: PLC0415

    bootstrap = cluster.bootstrap.split(",")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([AioNewTopic("aio", num_partitions=3, replication_factor=3)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status, described = http("GET", cluster.urls[2] + "/v1/topics/aio")
            if status == 200 and all(
                p["high_watermark"] is not None for p in described["partitions"]
            ):
                break
            await asyncio.sleep(0.05)
        consumers = [
            AIOKafkaConsumer(
                "aio",
                bootstrap_servers=bootstrap,
                group_id="g-aio",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            for _ in range(2)
        ]
        for consumer in consumers:
            await consumer.start()
        try:
            deadline = time.monotonic() + 60  # both members hold partitions, all three held
            while time.monotonic() < deadline:
                held = [c.assignment() for c in consumers]
                if all(held) and set().union(*held) == {
                    AioTopicPartition("aio", p) for p in range(3)
                }:
                    break
                await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))
            assert all(held) and not held[0] & held[1], held
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap, enable_idempotence=True, acks="all"
            )
            await producer.start()
            try:
                sending = [
                    await producer.send(
                        "aio", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"1")]
                    )
                    for i in range(60)
                ]
                sent = await asyncio.gather(*sending)
            finally:
                await producer.stop()
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < 60 and time.monotonic() < deadline:
                for batches in await asyncio.gather(
                    *(c.getmany(timeout_ms=200) for c in consumers)
                ):
                    for batch in batches.values():
                        got.extend(batch)
            for consumer in consumers:
                await consumer.commit()
        finally:
            for consumer in consumers:
                await consumer.stop()
        assert sorted((r.partition, r.offset, r.value) for r in got) == sorted(
            (m.partition, m.offset, b"v%d" % i) for i, m in enumerate(sent)
        )
        assert all(list(r.headers) == [("h", b"1")] for r in got)
        over_http = {
            (p, r["offset"]): r["value"] for p in range(3) for r in http_records(cluster, "aio", p)
        }
        assert {(r.partition, r.offset): r.value.decode() for r in got} == over_http
        status, listed = http("GET", cluster.urls[3] + "/v1/groups/g-aio/offsets")
        assert status == 200, listed
        assert sum(o["offset"] for o in listed["offsets"]) == 60
        await admin.delete_topics(["aio"])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if http("GET", cluster.urls[1] + "/v1/topics/aio")[0] == 404:
                break
            await asyncio.sleep(0.05)
        assert http("GET", cluster.urls[1] + "/v1/topics/aio")[0] == 404
    finally:
        await admin.close()


def test_a_topics_compression_type_is_what_librdkafka_consumes(cluster: Cluster) -> None:
    """Topic configs librdkafka's 0081 sets: `compression.type` (the codec fetched batches
    carry) and `delete.retention.ms` (taken; read by compaction only, as Kafka's)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"packed-{uuid.uuid4().hex[:6]}"
    configs = {"compression.type": "lz4", "delete.retention.ms": "900"}
    admin.create_topics([NewTopic(topic, 1, 3, config=configs)])[topic].result(30)
    described = wait_until(lambda: described_on(cluster, 2, topic), 10, f"{topic} on broker 2")
    assert described["configs"] == configs, described
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": "gzip"})
    for i in range(100):
        producer.produce(topic, value=b"value %d " % i * 10, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": topic, "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = consume_all(consumer, 100)
        assert [m.value() for m in got] == [b"value %d " % i * 10 for i in range(100)]
    finally:
        consumer.close()
    for wrong in ({"compression.type": "brotli"}, {"delete.retention.ms": "-1"}):
        bad = f"bad-{uuid.uuid4().hex[:6]}"
        with pytest.raises(KafkaException, match="INVALID_CONFIG"):
            admin.create_topics([NewTopic(bad, 1, 1, config=wrong)])[bad].result(30)


def _log_sizes(cluster: Cluster, topic: str) -> dict[int, float]:
    """Each broker's `kraftlite_log_size_bytes` of partition 0 of `topic` (its replicas)."""
    sizes = {}
    for broker_id, url in cluster.urls.items():
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            if family.name != "kraftlite_log_size_bytes":
                continue
            for sample in family.samples:
                if sample.labels.get("topic") == topic and sample.labels.get("partition") == "0":
                    sizes[broker_id] = sample.value
    return sizes


def _kept_compressed(
    cluster: Cluster, topic: str, codec: str, raw: int
) -> tuple[int, list[records.KafkaBatch]]:
    """Partition 0 of `topic` kept compressed: every replica's log the same size, under a
    quarter of the records' `raw` bytes; its leader, and the batches a Kafka fetch there
    answers, each in `codec`."""

    def replicated() -> dict[int, float] | None:
        sizes = _log_sizes(cluster, topic)
        return sizes if len(sizes) == 3 and len(set(sizes.values())) == 1 else None

    sizes = wait_until(replicated, 20, "every replica holds the same bytes")
    assert next(iter(sizes.values())) < raw / 4  # compressed on disk, on every replica
    _, described = http("GET", cluster.urls[1] + f"/v1/topics/{topic}")
    leader: int = described["partitions"][0]["leader"]
    fetch = {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 64 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 64 << 20}
                ],
            }
        ],
    }
    answer = call(cluster.kafka_addresses[leader], 1, 12, fetch)
    batches = records.decode_batches(answer["responses"][0]["partitions"][0]["records"])
    wanted = records.Compression.LZ4 if codec == "lz4" else records.Compression.ZSTD
    assert {b.compression for b in batches} == {wanted}
    return leader, batches


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_batches_are_stored_replicated_and_fetched_as_sent(
    cluster: Cluster, codec: str
) -> None:
    """Issue 29: a compressing producer's batches are kept as sent (protocol/stored.py):
    every replica stores the compressed bytes, a Kafka fetch returns them in the producer's
    codec, and HTTP (JSON and binary) reads the same records."""
    topic = f"sent-{codec}"
    create_topic(cluster, topic, partitions=1)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": codec,
        }
    )
    count = 3000
    values = [
        json.dumps({"id": i, "user": f"user-{i % 50}", "note": "lorem ipsum " * 20}).encode()
        for i in range(count)
    ]
    for i, value in enumerate(values):
        producer.produce(topic, key=b"k%d" % (i % 7), value=value, partition=0)
    assert producer.flush(30) == 0
    _, batches = _kept_compressed(cluster, topic, codec, sum(len(v) for v in values))
    assert [v for b in batches for v in b.values] == values
    # the same records through HTTP, as JSON and as kraftlite's binary batches
    status, page = http(
        "GET",
        cluster.urls[3] + f"/v1/topics/{topic}/partitions/0/records?offset=1000&max_records=50",
    )
    assert status == 200, page
    assert [r["offset"] for r in page["records"]] == list(range(1000, 1050))
    assert [r["value"].encode() for r in page["records"]] == values[1000:1050]
    assert [r["key"] for r in page["records"]] == [f"k{i % 7}" for i in range(1000, 1050)]

    async def through_the_client() -> list[bytes | None]:  # binary batches, converted
        async with KraftliteConsumer(cluster.urls[2], auto_offset_reset="earliest") as consumer:
            consumer.assign([(topic, 0)])
            got: list[bytes | None] = []
            while len(got) < count:
                polled = await consumer.poll(timeout_ms=5000)
                assert polled, "no progress"
                got += [r.value for r in polled]
            return got

    assert asyncio.run(through_the_client()) == values


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_the_python_clients_compressed_batches_are_kept_as_sent(
    cluster: Cluster, codec: str
) -> None:
    """Issue 29: kraftlite's own producer compresses (`compression`); its batches go over
    HTTP as Kafka batches (through a broker that relays them to the leader) and are kept
    as sent: compressed on every replica, a Kafka fetch returns them in that codec with
    the producer's id and sequences, and both edges read the same records."""
    topic = f"client-{codec}"
    create_topic(cluster, topic, partitions=1)
    count = 2000
    values = [
        json.dumps({"id": i, "user": f"user-{i % 50}", "note": "lorem ipsum " * 20}).encode()
        for i in range(count)
    ]
    headers = [((("n", b"%d" % i), ("empty", None)) if i % 3 else ()) for i in range(count)]

    async def produce() -> list[int]:
        async with KraftliteProducer(cluster.urls[1], compression=codec, linger_ms=20) as out:
            sent = [
                await out.send(topic, v, key=b"k%d" % (i % 7), partition=0, headers=h)
                for i, (v, h) in enumerate(zip(values, headers, strict=True))
            ]
            return [(await future).offset for future in sent]

    assert asyncio.run(produce()) == list(range(count))
    raw = sum(len(v) for v in values)
    leader, batches = _kept_compressed(cluster, topic, codec, raw)
    assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    sequences = [b.base_sequence for b in batches]
    assert sequences == [b.base_offset for b in batches]  # one producer, from sequence 0
    assert [v for b in batches for v in b.values] == values
    kafka_headers = [tuple(r.headers) for b in batches for r in b.records]
    assert kafka_headers == [tuple(h) for h in headers]

    # HTTP binary fetches: stored batches as they are for a client that reads them
    # (compressed, nothing converted on the leader), else converted to columnar batches
    url = cluster.urls[leader] + f"/v1/topics/{topic}/partitions/0/records?offset=0"
    for accept, magics in (
        ("application/vnd.kraftlite.batch; format=3", {3}),
        ("application/vnd.kraftlite.batch", {1, 2}),
    ):
        request = urllib.request.Request(url, headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        got = {batch_format.read_header(v).magic for v in batch_format.split_batches(body)}
        assert got and got <= magics, (accept, got)
        assert (len(body) < raw / 4) == (magics == {3}), (accept, len(body))

    async def consume() -> list[tuple[bytes | None, bytes | None, tuple[Any, ...]]]:
        async with KraftliteConsumer(cluster.urls[3], auto_offset_reset="earliest") as consumer:
            consumer.assign([(topic, 0)])
            got: list[tuple[bytes | None, bytes | None, tuple[Any, ...]]] = []
            while len(got) < count:
                polled = await consumer.poll(timeout_ms=5000)
                assert polled, "no progress"
                got += [(r.key, r.value, tuple(r.headers)) for r in polled]
            return got

    assert asyncio.run(consume()) == [
        (b"k%d" % (i % 7), v, tuple(h))
        for i, (v, h) in enumerate(zip(values, headers, strict=True))
    ]


def test_pipelined_requests_are_appended_and_answered_in_order(cluster: Cluster) -> None:
    """server.py rule 11: requests sent back to back on one connection (more than the
    five that may be in flight, a Metadata request among them) are answered in the order
    sent, and a producer's batches land in that order while their waits for acks=all
    overlap."""
    create_topic(cluster, "pipelined", partitions=1)
    _, described = http("GET", cluster.urls[1] + "/v1/topics/pipelined")
    leader = described["partitions"][0]["leader"]
    now = int(time.time() * 1000)
    sent: list[tuple[int, int, dict[str, Any]]] = []
    for i in range(20):
        batch = records.encode_batch(
            [records.KafkaRecord(j, now, None, b"r%d-%d" % (i, j), []) for j in range(i % 3 + 1)]
        )
        produce = {
            "acks": -1,
            "timeout_ms": 10_000,
            "topic_data": [
                {"name": "pipelined", "partition_data": [{"index": 0, "records": batch}]}
            ],
        }
        sent.append((0, 9, produce))
        if i == 7:
            sent.append((3, 12, {"topics": [{"name": "pipelined"}]}))  # Metadata
    host, port = cluster.kafka_addresses[leader].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"".join(
                frame(messages.encode_request(key, version, n, "test", body))
                for n, (key, version, body) in enumerate(sent)
            )
        )
        answers = []
        for key, version, _ in sent:
            size = struct.unpack(">i", read_exactly(sock, 4))[0]
            answers.append(messages.decode_response(key, version, read_exactly(sock, size)))
    assert [a.correlation_id for a in answers] == list(range(len(sent)))
    offsets = [
        a.body["responses"][0]["partition_responses"][0]["base_offset"]
        for (key, _, _), a in zip(sent, answers, strict=True)
        if key == 0
    ]
    expected = [sum(k % 3 + 1 for k in range(i)) for i in range(20)]
    assert offsets == expected
    values = [r["value"] for r in http_records(cluster, "pipelined", 0)]
    assert values == [f"r{i}-{j}" for i in range(20) for j in range(i % 3 + 1)]
