"""A real cluster (3 controllers, 3 brokers, each a process): produce, fetch, offsets,
forwarding, and the contract's error codes for bad input.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from crc32c import crc32c

from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import stored
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.protocol.partitioner import partition_for_key
from tests.harness.processes import Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
BATCH = "application/vnd.kraftlite.batch"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # the bad requests below include a produce to a topic that does not exist: no auto creation
    running = Cluster(
        tmp_path_factory.mktemp("cluster"), broker_config={"auto.create.topics.enable": False}
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def create_topic(cluster: Cluster, name: str, **spec: Any) -> dict[str, Any]:
    status, body = http("POST", cluster.urls[1] + "/v1/topics", {"name": name, **spec})
    assert status == 201, body
    wait_for_leaders(cluster, name)
    return body


def wait_for_leaders(cluster: Cluster, name: str, timeout_s: float = 20) -> None:
    """Until every broker knows the topic and each leader answers for its partitions."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ok = True
        for url in cluster.urls.values():
            status, body = http("GET", url + f"/v1/topics/{name}")
            if status != 200 or any(p["high_watermark"] is None for p in body["partitions"]):
                ok = False
        if ok:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name}: leaders not ready")


def raw(method: str, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, Any]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        data = error.read()
        error.close()
        return error.code, data, error.headers


def fetch_all(url: str, topic: str, partition: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    offset = 0
    while True:
        status, body = http(
            "GET", url + f"/v1/topics/{topic}/partitions/{partition}/records?offset={offset}"
        )
        assert status == 200, body
        records += body["records"]
        if body["next_offset"] >= body["high_watermark"]:
            return records
        offset = body["next_offset"]


def test_acks_all_to_rf3_reads_back_exactly_from_every_broker(cluster: Cluster) -> None:
    create_topic(cluster, "exact", partitions=3, replication_factor=3)
    sent: dict[int, list[tuple[int, str | None, str]]] = {0: [], 1: [], 2: []}
    for round_ in range(10):
        url = cluster.urls[round_ % 3 + 1]  # any broker takes any produce
        records = [
            {"key": f"user-{i % 7}" if i % 3 else None, "value": f"event {round_}-{i}"}
            for i in range(30)
        ]
        status, body = http("POST", url + "/v1/topics/exact/records?acks=all", {"records": records})
        assert status == 200, body
        for record, answer in zip(records, body["offsets"], strict=True):
            assert "error_code" not in answer, answer
            if record["key"] is not None:  # Kafka's partitioner, bit for bit
                assert answer["partition"] == partition_for_key(record["key"].encode(), 3)
            sent[answer["partition"]].append((answer["offset"], record["key"], record["value"]))
    for partition, expected in sent.items():
        assert [offset for offset, _, _ in expected] == list(range(len(expected)))  # dense
        for url in cluster.urls.values():  # any broker serves any fetch
            got = [(r["offset"], r["key"], r["value"]) for r in fetch_all(url, "exact", partition)]
            assert got == expected


def test_binary_batches_round_trip_through_any_broker(cluster: Cluster) -> None:
    leader = create_topic(cluster, "binary", partitions=1, replication_factor=3)["partitions"][0][
        "leader"
    ]
    other = next(b for b in cluster.urls if b != leader)  # forwarded, headers and all
    records = [
        batch_format.Record(
            value=bytes([i % 256]) * (i + 1),
            key=None if i % 2 else b"\xff\x00" + bytes([i]),
            headers=(("trace", b"\x00\x01"),),
            timestamp=1_700_000_000_000 + i,
        )
        for i in range(100)
    ]
    body = batch_format.encode_records(records, now_ms=0)
    status, answer, _ = raw(
        "POST",
        cluster.urls[2] + "/v1/topics/binary/partitions/0/records?acks=all",
        body,
        {"Content-Type": BATCH},
    )
    assert status == 200, answer
    status, data, headers = raw(
        "GET",
        cluster.urls[other] + "/v1/topics/binary/partitions/0/records?offset=0",
        b"",
        {"Accept": BATCH},
    )
    assert status == 200 and headers["Content-Type"] == BATCH
    assert headers["X-Kraftlite-High-Watermark"] == "100"
    got = [r for b in batch_format.decode_stream(data) for r in b.records()]
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (i, r.key, r.value, r.headers, r.timestamp) for i, r in enumerate(records)
    ]
    # JSON with base64 gives the same bytes back
    status, as_json = http(
        "GET", cluster.urls[1] + "/v1/topics/binary/partitions/0/records?offset=0&encoding=base64"
    )
    assert status == 200 and len(as_json["records"]) == 100


def test_no_forward_answers_421_with_the_leader(cluster: Cluster) -> None:
    created = create_topic(cluster, "routing", partitions=1, replication_factor=2)
    leader = created["partitions"][0]["leader"]
    other = next(b for b in cluster.urls if b != leader)
    status, body = http(
        "POST",
        cluster.urls[other] + "/v1/topics/routing/partitions/0/records",
        {"records": [{"value": "x"}]},
        headers={"X-Kraftlite-No-Forward": "1"},
    )
    assert status == 421 and body["error_code"] == "NOT_LEADER_OR_FOLLOWER"
    assert body["leader_id"] == leader and body["leader_url"] == cluster.urls[leader]
    status, body = http(
        "GET", cluster.urls[other] + "/v1/topics/routing/partitions/0/records?offset=0"
    )
    assert status == 200 and body["records"] == []  # forwarded by default


def test_offsets_earliest_latest_and_by_time(cluster: Cluster) -> None:
    create_topic(cluster, "times", partitions=1, replication_factor=3)
    records = [{"value": str(i), "timestamp": 1_000 * (i + 1)} for i in range(10)]
    status, _ = http("POST", cluster.urls[1] + "/v1/topics/times/records", {"records": records})
    assert status == 200
    base = cluster.urls[2] + "/v1/topics/times/partitions/0/offsets?at="
    assert http("GET", base + "earliest") == (200, {"offset": 0})
    assert http("GET", base + "latest") == (200, {"offset": 10})
    assert http("GET", base + "3500") == (200, {"offset": 3, "timestamp": 4000})
    assert http("GET", base + "999999") == (200, {"offset": 10, "timestamp": None})
    status, body = http("GET", base + "soon")
    assert (status, body["error_code"]) == (400, "INVALID_REQUEST")


def test_long_poll_returns_when_records_arrive(cluster: Cluster) -> None:
    create_topic(cluster, "poll", partitions=1, replication_factor=3)

    def produce_later() -> None:
        time.sleep(0.5)
        http("POST", cluster.urls[3] + "/v1/topics/poll/records", {"records": [{"value": "late"}]})

    thread = threading.Thread(target=produce_later)
    started = time.monotonic()
    thread.start()
    status, body = http(
        "GET", cluster.urls[1] + "/v1/topics/poll/partitions/0/records?offset=0&max_wait_ms=10000"
    )
    thread.join()
    assert status == 200 and [r["value"] for r in body["records"]] == ["late"]
    assert 0.3 < time.monotonic() - started < 9  # woke on the record, not at the deadline
    started = time.monotonic()
    status, body = http(
        "GET", cluster.urls[1] + "/v1/topics/poll/partitions/0/records?offset=1&max_wait_ms=300"
    )
    assert status == 200 and body["records"] == [] and time.monotonic() - started >= 0.25


def test_not_enough_replicas_appends_nothing(cluster: Cluster) -> None:
    create_topic(
        cluster, "strict", partitions=1, replication_factor=2, configs={"min.insync.replicas": 3}
    )
    url = cluster.urls[1] + "/v1/topics/strict/partitions/0/records"
    status, body = http("POST", url + "?acks=all", {"records": [{"value": "x"}]})
    assert (status, body["error_code"], body["appended"]) == (503, "NOT_ENOUGH_REPLICAS", False)
    assert http("GET", cluster.urls[1] + "/v1/topics/strict/partitions/0/offsets?at=latest") == (
        200,
        {"offset": 0},
    )
    status, body = http("POST", url + "?acks=1", {"records": [{"value": "x"}]})
    assert status == 200 and body["offsets"] == [{"partition": 0, "offset": 0}]


JSON = "application/json"
ONE = b'{"records": [{"value": "x"}]}'
_SENT = kafka_records.encode_batch(
    [kafka_records.KafkaRecord(0, int(time.time() * 1000), None, b"x")]
)
KEPT_KAFKA_BATCH = bytes(
    stored.kafka_form(_SENT, kafka_records.decode_batches(_SENT)[0], None) or b""
)
KAFKA = "application/vnd.kraftlite.kafka-batches"
_CRC_BROKEN = bytearray(_SENT)
_CRC_BROKEN[-1] ^= 0x01  # a record byte: the batch's CRC no longer holds
_CONTROL = kafka_records.encode_batch(
    [kafka_records.KafkaRecord(0, int(time.time() * 1000), b"\x00\x00\x00\x00", b"")],
    producer_id=1,
    producer_epoch=0,
    base_sequence=0,
    is_transactional=True,
)
_CONTROL = bytearray(_CONTROL)
_CONTROL[22] |= 0x20  # the control bit; CRC recomputed below
_CONTROL[17:21] = crc32c(bytes(_CONTROL[21:])).to_bytes(4, "big")
_TRANSACTIONAL = kafka_records.encode_batch(
    [kafka_records.KafkaRecord(0, int(time.time() * 1000), None, b"x")],
    producer_id=1,
    producer_epoch=0,
    base_sequence=0,
    is_transactional=True,
)
_TOO_LARGE = kafka_records.encode_batch(
    [kafka_records.KafkaRecord(0, int(time.time() * 1000), None, b"x" * 3000)]
)
BAD = "/v1/topics/bad"
NOT_FOUND, INVALID = "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_REQUEST"
BAD_REQUESTS = [
    # (method, path, body, content type, status, error code)
    ("POST", "/v1/topics/nope/records", ONE, JSON, 404, NOT_FOUND),
    ("POST", f"{BAD}/partitions/7/records", ONE, JSON, 404, NOT_FOUND),
    ("POST", f"{BAD}/partitions/x/records", ONE, JSON, 400, INVALID),
    ("POST", f"{BAD}/records", b"{not json", JSON, 400, INVALID),
    ("POST", f"{BAD}/records", b"[1, 2]", JSON, 400, INVALID),
    ("POST", f"{BAD}/records", b'{"records": []}', JSON, 400, INVALID),
    ("POST", f"{BAD}/records", b'{"records": [{"value": 5}]}', JSON, 400, INVALID),
    (
        "POST",
        f"{BAD}/records",
        b'{"records": [{"value": "x", "partition": true}]}',
        JSON,
        400,
        INVALID,
    ),
    (
        "POST",
        f"{BAD}/records",
        b'{"records": [{"value": "x", "partition": 9}]}',
        JSON,
        404,
        NOT_FOUND,
    ),
    (
        "POST",
        f"{BAD}/records",
        b'{"records": [{"value": "!!"}], "value_encoding": "base64"}',
        JSON,
        400,
        INVALID,
    ),
    ("POST", f"{BAD}/records?acks=2", ONE, JSON, 400, INVALID),
    ("POST", f"{BAD}/records?timeout_ms=-1", ONE, JSON, 400, INVALID),
    ("POST", f"{BAD}/records", b"value=x", "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
    ("POST", f"{BAD}/partitions/0/records", b"\x00" * 64, BATCH, 400, "CORRUPT_MESSAGE"),
    ("POST", f"{BAD}/partitions/0/records", b"short", BATCH, 400, "CORRUPT_MESSAGE"),
    # a Kafka batch in format 3's envelope: the Kafka listener's alone (protocol/stored.py)
    ("POST", f"{BAD}/partitions/0/records", KEPT_KAFKA_BATCH, BATCH, 400, "CORRUPT_MESSAGE"),
    # a Kafka batch (issue 29): whole, its CRC holding, no marker, a transactional one only
    # with its id, within max.message.bytes; never to the topic route
    ("POST", f"{BAD}/partitions/0/records", b"\x00" * 64, KAFKA, 400, "CORRUPT_MESSAGE"),
    ("POST", f"{BAD}/partitions/0/records", _SENT[:-3], KAFKA, 400, "CORRUPT_MESSAGE"),
    ("POST", f"{BAD}/partitions/0/records", bytes(_CRC_BROKEN), KAFKA, 400, "CORRUPT_MESSAGE"),
    ("POST", f"{BAD}/partitions/0/records", bytes(_CONTROL), KAFKA, 400, "INVALID_RECORD"),
    (
        "POST",
        f"{BAD}/partitions/0/records",
        _TRANSACTIONAL,
        KAFKA,
        403,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    ),
    ("POST", f"{BAD}/partitions/0/records", _TOO_LARGE, KAFKA, 413, "MESSAGE_TOO_LARGE"),
    # one batch per partition, as Kafka's produce takes from v3 on
    ("POST", f"{BAD}/partitions/0/records", _SENT + _SENT, KAFKA, 400, "INVALID_RECORD"),
    ("POST", f"{BAD}/records", _SENT, KAFKA, 415, "UNSUPPORTED_MEDIA_TYPE"),
    (
        "POST",
        f"{BAD}/partitions/0/records",
        b'{"records": [{"value": "' + b"x" * 3000 + b'"}]}',
        JSON,
        413,
        "MESSAGE_TOO_LARGE",
    ),
    ("GET", f"{BAD}/partitions/0/records?offset=5", b"", "", 416, "OFFSET_OUT_OF_RANGE"),
    ("GET", f"{BAD}/partitions/0/records?offset=-3", b"", "", 416, "OFFSET_OUT_OF_RANGE"),
    ("GET", f"{BAD}/partitions/0/records", b"", "", 400, INVALID),
    ("GET", f"{BAD}/partitions/0/records?offset=0&max_bytes=0", b"", "", 400, INVALID),
    ("GET", f"{BAD}/partitions/0/records?offset=0&encoding=rot13", b"", "", 400, INVALID),
    ("GET", f"{BAD}/partitions/0/offsets?at=yesterday", b"", "", 400, INVALID),
    ("GET", "/v1/no-such-thing", b"", "", 404, INVALID),
]


def test_bad_input_gets_the_contracts_error_and_changes_nothing(cluster: Cluster) -> None:
    create_topic(
        cluster, "bad", partitions=1, replication_factor=3, configs={"max.message.bytes": 2048}
    )
    status, _ = http(
        "POST", cluster.urls[1] + "/v1/topics/bad/records", {"records": [{"value": "ok"}]}
    )
    assert status == 200
    for method, path, body, content_type, want_status, want_code in BAD_REQUESTS:
        for url in cluster.urls.values():
            headers = {"Content-Type": content_type} if content_type else {}
            status, data, reply = raw(method, url + path, body, headers)
            assert status == want_status, (path, body[:60], data[:300])
            assert reply["Content-Type"].startswith("application/problem+json"), path
            problem = json.loads(data)
            assert problem["error_code"] == want_code and problem["status"] == want_status, (
                path,
                problem,
            )
    for url in cluster.urls.values():
        assert [r["value"] for r in fetch_all(url, "bad", 0)] == ["ok"]
        status, _ = http("GET", url + "/healthz")
        assert status == 200


def test_kafka_batches_over_http_are_bounded_and_relayed(cluster: Cluster) -> None:
    """Issue 29: a zstd batch of a few KB that decompresses past what one produce may
    (64 MiB) is CORRUPT_MESSAGE on every broker, its leader's and the relaying ones, and
    appends nothing; an lz4 batch sent to any broker is appended by the leader and read
    back as it was sent."""
    create_topic(cluster, "bomb", partitions=1, replication_factor=3)
    now = int(time.time() * 1000)
    bomb = kafka_records.encode_batch(
        [kafka_records.KafkaRecord(0, now, None, bytes((64 << 20) + 1))],
        compression=kafka_records.Compression.ZSTD,
    )
    assert len(bomb) < 10_000
    path = "/v1/topics/bomb/partitions/0/records"
    for url in cluster.urls.values():
        status, data, _ = raw("POST", url + path, bomb, {"Content-Type": KAFKA})
        problem = json.loads(data)
        assert (status, problem["error_code"]) == (400, "CORRUPT_MESSAGE"), problem
        assert "decompresses to more than" in problem["message"], problem
    for i, url in enumerate(cluster.urls.values()):
        sent = kafka_records.encode_batch(
            [
                kafka_records.KafkaRecord(j, now + j, b"k", b"v%d-%d" % (i, j), [("h", b"x")])
                for j in range(3)
            ],
            compression=kafka_records.Compression.LZ4,
        )
        status, data, _ = raw("POST", url + path, sent, {"Content-Type": KAFKA})
        assert status == 200, data
        offsets = json.loads(data)["offsets"]
        assert [o["offset"] for o in offsets] == [3 * i, 3 * i + 1, 3 * i + 2]
    for url in cluster.urls.values():
        got = fetch_all(url, "bomb", 0)
        assert [r["value"] for r in got] == [f"v{i}-{j}" for i in range(3) for j in range(3)]
        assert {r["key"] for r in got} == {"k"}
        assert [r["timestamp"] for r in got][:3] == [now, now + 1, now + 2]


def test_operations_endpoints_on_every_broker(cluster: Cluster) -> None:
    create_topic(cluster, "ops", partitions=2, replication_factor=3)
    http("POST", cluster.urls[1] + "/v1/topics/ops/records", {"records": [{"value": "m"}]})
    for broker_id, url in cluster.urls.items():
        assert http("GET", url + "/healthz") == (200, {"status": "ok"})
        status, ready = http("GET", url + "/readyz")
        assert status == 200 and ready["ready"] and ready["broker_id"] == broker_id
        status, described = http("GET", url + "/v1/cluster")
        assert status == 200 and described["cluster_id"]
        assert sorted(b["id"] for b in described["brokers"]) == [1, 2, 3]
        assert not any(b["fenced"] for b in described["brokers"])
        status, spec = http("GET", url + "/v1/openapi.json")
        assert status == 200 and "/v1/topics/{topic}/records" in spec["paths"]
        status, text, _ = raw("GET", url + "/metrics", b"", {})
        metrics = text.decode()
        assert status == 200 and "kraftlite_under_replicated_partitions 0.0" in metrics
        assert 'kraftlite_high_watermark{partition="0",topic="ops"}' in metrics


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("small"),
        brokers=1,
        broker_config={"log.retention.check.interval.ms": 200},
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_retention_by_size_runs_in_the_background(small_cluster: Cluster) -> None:
    create_topic(
        small_cluster, "short", partitions=1, replication_factor=1,
        configs={"retention.bytes": 20_000},
    )  # fmt: skip
    url = small_cluster.urls[1]
    for i in range(20):  # 20 batches of ~2.6 KB
        records = [{"value": f"{i}-{j}-" + "x" * 80} for j in range(30)]
        status, _ = http("POST", url + "/v1/topics/short/records", {"records": records})
        assert status == 200
    # retention runs every 200 ms, so a round may have run while the batches came; the
    # start is where it stays once it held still for more than two rounds
    deadline = time.monotonic() + 20
    seen: list[int] = []
    while True:
        status, body = http("GET", url + "/v1/topics/short")
        start = body["partitions"][0]["log_start_offset"]
        seen.append(start)
        if (start > 0 and seen[-6:] == [start] * 6) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert start > 0 and start % 30 == 0  # whole batches from the head
    assert body["partitions"][0]["high_watermark"] == 600
    status, problem = http("GET", url + "/v1/topics/short/partitions/0/records?offset=0")
    assert (status, problem["error_code"]) == (416, "OFFSET_OUT_OF_RANGE")
    assert problem["log_start_offset"] == start
    status, body = http("GET", url + f"/v1/topics/short/partitions/0/records?offset={start}")
    assert status == 200 and body["records"][0]["offset"] == start


def test_a_broker_that_created_a_topic_serves_it_at_once(cluster: Cluster) -> None:
    """Read-your-writes: the admin answer waits until that broker's metadata has the change."""
    url = cluster.urls[2]
    for i in range(5):
        name = f"fresh-{i}"
        status, _ = http("POST", url + "/v1/topics", {"name": name, "replication_factor": 1})
        assert status == 201
        status, body = http(
            "POST", url + f"/v1/topics/{name}/records", {"records": [{"value": "x"}]}
        )
        assert status == 200, body
        assert http("DELETE", url + f"/v1/topics/{name}")[0] == 204
        assert http("GET", url + f"/v1/topics/{name}")[0] == 404


def test_many_topics_created_in_one_request_and_one_metadata_change(cluster: Cluster) -> None:
    """The batch form of POST /v1/topics (Kafka's CreateTopics), through a broker."""
    url = cluster.urls[3]
    status, before = http("GET", cluster.urls[1] + "/readyz")
    specs = [{"name": f"batch-{i}", "partitions": 4, "replication_factor": 2} for i in range(30)]
    specs.insert(7, {"name": "batch-3"})  # named twice: refused alone
    status, body = http("POST", url + "/v1/topics", {"topics": specs})
    assert status == 200, body
    answers = body["topics"]
    assert [a["name"] for a in answers] == [s["name"] for s in specs]
    assert answers[7]["error_code"] == "TOPIC_ALREADY_EXISTS"
    created = [a for a in answers if "error_code" not in a]
    assert len(created) == 30 and all(len(a["partitions"]) == 4 for a in created)
    # read your writes: the broker that answered serves every one of them now
    for answer in created[:5]:
        status, produced = http(
            "POST", url + f"/v1/topics/{answer['name']}/records", {"records": [{"value": "x"}]}
        )
        assert status == 200, produced
    # one metadata change for all 30 (and nothing half-applied by the refused one)
    status, after = http("GET", cluster.urls[1] + "/readyz")
    assert after["metadata_version"] - before["metadata_version"] <= 3
    for bad in ({"topics": []}, {"topics": "x"}, {"topics": [{"name": "y", "partitions": 20000}]}):
        status, refused = http("POST", url + "/v1/topics", bad)
        assert status == 400 and refused["error_code"] in {
            "INVALID_REQUEST",
            "INVALID_PARTITIONS",
        }, refused
