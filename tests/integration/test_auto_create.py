"""Topics created by the requests that name them (issue 25, Kafka's
`auto.create.topics.enable`, on by default): a librdkafka producer's first record to a
topic that does not exist is delivered, to a topic of `num.partitions` partitions; an HTTP
produce does the same, but not for a body it refuses; a consumer that does not allow it
creates nothing; and with the setting off nothing is created.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer

from tests.harness.processes import FAST_SESSIONS, Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("auto-create"),
        brokers=2,
        controller_config=FAST_SESSIONS,
        broker_config={"num.partitions": 3},
        kafka=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _partitions(cluster: Cluster, topic: str, via: int = 1) -> int | None:
    status, described = http("GET", cluster.urls[via] + f"/v1/topics/{topic}")
    return len(described["partitions"]) if status == 200 else None


def test_a_kafka_producer_creates_the_topic_it_writes_to(cluster: Cluster) -> None:
    topic = f"made-by-kafka-{uuid.uuid4().hex[:6]}"
    delivered: list[object] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, b"first", on_delivery=lambda err, msg: delivered.append(err or msg))
    assert producer.flush(30) == 0
    (outcome,) = delivered
    assert not isinstance(outcome, Exception) and outcome.error() is None  # type: ignore[attr-defined]
    assert _partitions(cluster, topic) == 3  # num.partitions


def test_a_consumer_that_does_not_allow_it_creates_nothing(cluster: Cluster) -> None:
    topic = f"not-made-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "no-auto",
            "allow.auto.create.topics": False,  # librdkafka's default for consumers
        }
    )
    try:
        consumer.subscribe([topic])
        for _ in range(5):
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert _partitions(cluster, topic) is None


def test_an_http_produce_creates_the_topic_but_not_for_a_refused_body(cluster: Cluster) -> None:
    topic = f"made-by-http-{uuid.uuid4().hex[:6]}"
    url = cluster.urls[2] + f"/v1/topics/{topic}/records"
    status, answer = http("POST", url, "not an object")  # a JSON string, not a produce body
    assert status == 400, answer
    assert _partitions(cluster, topic, via=2) is None  # refused: nothing created
    status, answer = http("POST", url, {"records": [{"value": "hello"}]})
    assert status == 200, answer
    assert _partitions(cluster, topic, via=2) == 3
    # a partition the new topic would not have is no reason to create one
    other = f"made-by-http-{uuid.uuid4().hex[:6]}"
    status, answer = http(
        "POST", cluster.urls[1] + f"/v1/topics/{other}/partitions/7/records", {"records": []}
    )
    assert _partitions(cluster, other) is None
