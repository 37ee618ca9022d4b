"""Null header values on every path of a real cluster (librdkafka's 0073_headers: "Expected
NULL value for null"): a Kafka header value of length -1 is stored null (the batch format's
attributes bit 1, docs/batch-format.md), replicated, and comes back null to a Kafka
consumer, in HTTP JSON, to the Python client; an empty value stays empty throughout.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kraftlite.client import SyncConsumer, SyncProducer
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.headers import BATCH_TYPE
from tests.harness.processes import FAST_SESSIONS, Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

HEADERS = [("a", b"x"), ("n", None), ("e", b"")]
AS_JSON = {"a": "x", "n": None, "e": ""}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("null-headers"), controller_config=FAST_SESSIONS, kafka=True
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _topic(cluster: Cluster, name: str) -> None:
    """One partition on all three brokers: an acks=all write is on the followers too."""
    cluster.create_topic(name, partitions=1, replication_factor=3)


def _produce(cluster: Cluster, topic: str, **config: Any) -> int:
    """One record with HEADERS through librdkafka (acks=all); its offset."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **config})
    delivered: list[Any] = []
    producer.produce(
        topic,
        key=b"k",
        value=b"v",
        headers=HEADERS,
        partition=0,
        on_delivery=lambda err, msg: delivered.append((err, msg)),
    )
    assert producer.flush(30) == 0
    [(error, message)] = delivered
    assert error is None, error
    return int(message.offset())


def _consume(cluster: Cluster, topic: str, count: int) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    got: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message)
    finally:
        consumer.close()
    assert len(got) == count
    return got


def _http_records(cluster: Cluster, topic: str) -> list[dict[str, Any]]:
    status, answer = http(
        "GET", cluster.urls[2] + f"/v1/topics/{topic}/partitions/0/records?offset=0"
    )
    assert status == 200, answer
    return list(answer["records"])


def _stored_batch(cluster: Cluster, topic: str) -> batch_format.BatchHeader:
    """The header of the partition's one stored batch, fetched in the binary format."""
    request = urllib.request.Request(
        cluster.urls[1] + f"/v1/topics/{topic}/partitions/0/records?offset=0",
        headers={"Accept": BATCH_TYPE},
    )
    with urllib.request.urlopen(request, timeout=15) as response:
        [batch] = batch_format.split_batches(response.read())
    return batch_format.validate(batch)


@pytest.mark.parametrize("idempotent", [False, True], ids=["v1", "idempotent-v2"])
def test_a_null_header_value_round_trips_through_librdkafka(
    cluster: Cluster, idempotent: bool
) -> None:
    """Produced by librdkafka (a plain producer writes batch format v1, an idempotent one
    v2), consumed by librdkafka: "n" null, "e" empty; the HTTP JSON fetch says null."""
    topic = f"null-headers-{'v2' if idempotent else 'v1'}"
    _topic(cluster, topic)
    offset = _produce(cluster, topic, **{"enable.idempotence": idempotent})
    stored = _stored_batch(cluster, topic)
    assert stored.magic == (batch_format.MAGIC_V2 if idempotent else batch_format.MAGIC_V1)
    assert stored.attributes == (
        batch_format.ATTR_HAS_HEADERS | batch_format.ATTR_NULL_HEADER_VALUES
    )
    [message] = _consume(cluster, topic, 1)
    assert (message.offset(), message.key(), message.value()) == (offset, b"k", b"v")
    assert message.headers() == HEADERS
    [record] = _http_records(cluster, topic)
    assert record["headers"] == AS_JSON
    status, base64 = http(
        "GET", cluster.urls[3] + f"/v1/topics/{topic}/partitions/0/records?offset=0&encoding=base64"
    )
    assert status == 200 and base64["records"][0]["headers"] == {"a": "eA==", "n": None, "e": ""}
    # the Python client (binary fetch) reads the same stored batch
    with SyncConsumer(",".join(cluster.urls.values()), auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        records: list[Any] = []
        deadline = time.monotonic() + 20
        while not records and time.monotonic() < deadline:
            records = consumer.poll(1000)
    assert [r.headers for r in records] == [tuple(HEADERS)]


def test_null_header_values_produced_over_http_and_the_client_reach_librdkafka(
    cluster: Cluster,
) -> None:
    """JSON null and the Python client's None are stored null too; librdkafka reads them
    as null, and a header without a null value is unchanged next to them."""
    topic = "null-headers-edges"
    _topic(cluster, topic)
    status, answer = http(
        "POST",
        cluster.urls[1] + f"/v1/topics/{topic}/partitions/0/records?acks=all",
        {"records": [{"value": "json", "headers": [["a", "x"], ["n", None], ["e", ""]]}]},
    )
    assert status == 200, answer
    with SyncProducer(",".join(cluster.urls.values()), acks="all") as producer:
        producer.send(topic, b"client", headers=tuple(HEADERS), partition=0).result(timeout=20)
        producer.send(topic, b"plain", headers=(("e", b""),), partition=0).result(timeout=20)
    got = _consume(cluster, topic, 3)
    assert [(m.value(), m.headers()) for m in got] == [
        (b"json", HEADERS),
        (b"client", HEADERS),
        (b"plain", [("e", b"")]),
    ]
    assert [r["headers"] for r in _http_records(cluster, topic)] == [AS_JSON, AS_JSON, {"e": ""}]
