"""One front door (issue 24): both edges of a broker pass the same gate (security/gate.py),
so a principal has one quota across HTTP and Kafka, a refusal of many names is audited
once, and a request naming very many topics does not hold the event loop.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlite.protocol.kafka import messages, records
from tests.harness.auth import ADMIN, as_admin, auth_cluster, basic
from tests.harness.kafka_wire import frame, read_exactly
from tests.harness.observe import wait_for_brokers_metadata
from tests.harness.processes import Cluster, http

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = auth_cluster(tmp_path_factory.mktemp("front-door"), brokers=1, kafka=True)
    running.start()
    try:
        yield running
    finally:
        running.stop()


class KafkaLogin:
    """A Kafka connection logged in with SASL PLAIN; several requests on it."""

    def __init__(self, address: str, user: str, password: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self._correlation = 0
        assert self.call(17, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        token = f"\0{user}\0{password}".encode()
        assert self.call(36, 2, {"auth_bytes": token})["error_code"] == 0

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self._correlation += 1
        request = messages.encode_request(api_key, version, self._correlation, "t", body)
        self.sock.sendall(frame(request))
        size = struct.unpack(">i", read_exactly(self.sock, 4))[0]
        return messages.decode_response(api_key, version, read_exactly(self.sock, size)).body

    def close(self) -> None:
        self.sock.close()


def _topic(cluster: Cluster, name: str) -> None:
    url = cluster.urls[1]
    status, answer = as_admin("POST", url + "/v1/topics", {"name": name, "partitions": 1})
    assert status == 201, answer
    deadline = time.monotonic() + 20
    while True:
        status, described = http("GET", f"{url}/v1/topics/{name}", headers=basic(*ADMIN))
        parts = described.get("partitions", []) if status == 200 else []
        if parts and all(p["high_watermark"] is not None for p in parts):
            return
        assert time.monotonic() < deadline, f"{name} has no leader"
        time.sleep(0.05)


def _user(cluster: Cluster, name: str, password: str, **acl: str) -> None:
    url = cluster.urls[1]
    status, answer = as_admin("POST", url + "/v1/users", {"name": name, "password": password})
    assert status == 201, answer
    if acl:
        status, answer = as_admin("POST", url + "/v1/acls", {"principal": f"User:{name}", **acl})
        assert status == 201, answer
    deadline = time.monotonic() + 10
    while http("GET", url + "/v1/topics", headers=basic(name, password))[0] != 200:
        assert time.monotonic() < deadline, "the user did not reach the broker"
        time.sleep(0.1)


def _kafka_produce(login: KafkaLogin, topic: str, value: bytes) -> dict[str, Any]:
    batch = records.encode_batch([records.KafkaRecord(0, int(time.time() * 1000), None, value, [])])
    answer = login.call(
        0,
        9,
        {
            "acks": 1,
            "timeout_ms": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0, answer
    return answer


def _http_produce(url: str, topic: str, value: str, user: str, password: str) -> int:
    request = urllib.request.Request(
        f"{url}/v1/topics/{topic}/partitions/0/records?acks=1",
        data=json.dumps({"records": [{"value": value}]}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **basic(user, password)},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        return int(response.headers.get("X-Kraftlite-Throttle-Time-Ms", "0"))


def test_one_produce_quota_across_both_edges(cluster: Cluster) -> None:
    """Bytes produced over HTTP count against the same bucket as bytes produced over
    Kafka, and the other way round: each edge throttles what the other one spent."""
    url = cluster.urls[1]
    _topic(cluster, "metered-both")
    _user(cluster, "quinn", "pw-q", operation="WRITE", resource_type="TOPIC", resource_name="*")
    status, _ = as_admin(
        "POST", url + "/v1/quotas", {"principal": "User:quinn", "producer_byte_rate": 40_000}
    )
    assert status == 200
    wait_for_brokers_metadata(cluster, basic(*ADMIN))  # the quota
    login = KafkaLogin(cluster.kafka_addresses[1], "quinn", "pw-q")
    try:
        # HTTP spends 60 KB of a 40 KB burst and is held until the bucket is back at zero;
        # 30 KB over Kafka then waits too (on its own bucket it would have had 40 KB)
        assert _http_produce(url, "metered-both", "h" * 60_000, "quinn", "pw-q") > 0
        assert _kafka_produce(login, "metered-both", b"k" * 30_000)["throttle_time_ms"] > 0
        time.sleep(3)  # the bucket refills
        # and the other way round
        assert _kafka_produce(login, "metered-both", b"k" * 60_000)["throttle_time_ms"] > 0
        assert _http_produce(url, "metered-both", "h" * 30_000, "quinn", "pw-q") > 0
    finally:
        login.close()


def test_a_compressed_produce_is_charged_what_it_stores(cluster: Cluster) -> None:
    """A zstd batch of 1 MB of zeros is a few hundred bytes on the wire; the quota is
    charged the megabyte it stores, not the wire bytes (issue 24: zstd batches stored 60x
    the writer's quota)."""
    url = cluster.urls[1]
    _topic(cluster, "metered-zstd")
    _user(cluster, "zed", "pw-z", operation="WRITE", resource_type="TOPIC", resource_name="*")
    status, _ = as_admin(
        "POST", url + "/v1/quotas", {"principal": "User:zed", "producer_byte_rate": 100_000}
    )
    assert status == 200
    wait_for_brokers_metadata(cluster, basic(*ADMIN))  # the quota
    login = KafkaLogin(cluster.kafka_addresses[1], "zed", "pw-z")
    try:
        batch = records.encode_batch(
            [records.KafkaRecord(0, int(time.time() * 1000), None, bytes(1_000_000), [])],
            compression=records.Compression.ZSTD,
        )
        assert len(batch) < 10_000
        answer = login.call(
            0,
            9,
            {
                "acks": 1,
                "timeout_ms": 10_000,
                "topic_data": [
                    {"name": "metered-zstd", "partition_data": [{"index": 0, "records": batch}]}
                ],
            },
        )
        part = answer["responses"][0]["partition_responses"][0]
        assert part["error_code"] == 0, answer
        # ~900 KB over a 100 KB/s quota: held back the better part of ten seconds
        assert answer["throttle_time_ms"] > 5_000, answer
    finally:
        login.close()


def _broker_log(cluster: Cluster) -> str:
    return "".join(p.read_text(errors="replace") for p in cluster.root.glob("broker-*.log"))


def test_metadata_naming_150k_topics_is_one_audit_line_and_shares_the_loop(
    cluster: Cluster,
) -> None:
    """A user with no ACLs asks Metadata for 150,000 topics (issue 24: 200,000 took 4.3 s
    on the loop, stalled producers 3.9 s and wrote 253 MB of audit log). Every topic is
    refused; the refusal is one audit line with the count; a producer meanwhile keeps
    being answered and the broker keeps its registration."""
    url = cluster.urls[1]
    _topic(cluster, "steady")
    _user(cluster, "mallory", "pw-m")
    epoch_before = _broker_epoch(cluster)
    gaps: list[float] = []
    stop = threading.Event()

    def produce() -> None:
        last = time.monotonic()
        while not stop.is_set():
            _http_produce(url, "steady", "tick", *ADMIN)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        time.sleep(0.5)
        login = KafkaLogin(cluster.kafka_addresses[1], "mallory", "pw-m")
        try:
            names = [{"name": f"t{i:06d}", "topic_id": None} for i in range(150_000)]
            started = time.monotonic()
            answer = login.call(
                3,
                9,
                {
                    "topics": names,
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
            took = time.monotonic() - started
        finally:
            login.close()
        time.sleep(0.5)
    finally:
        stop.set()
        producer.join(30)
    codes = {t["error_code"] for t in answer["topics"]}
    assert codes == {29}, codes  # TOPIC_AUTHORIZATION_FAILED, every one
    audit = [
        line
        for line in _broker_log(cluster).splitlines()
        if '"authorization_denied"' in line and '"principal":"User:mallory"' in line
    ]
    assert len(audit) == 1, audit[:3]
    assert '"count":150000' in audit[0]
    assert _broker_epoch(cluster) == epoch_before
    print(f"metadata of 150,000 topics: {took:.2f} s; producer's worst gap {max(gaps):.3f} s")
    # 0.1 s here (1.7 s with the answer encoded on the loop; 3.9 s for 200,000 topics
    # before the gate); the bound leaves room for a slower machine
    assert len(gaps) > 5 and max(gaps) < 1.0, max(gaps)


def _broker_epoch(cluster: Cluster) -> int:
    status, brokers = as_admin("GET", cluster.urls[1] + "/v1/brokers")
    assert status == 200, brokers
    return int(next(b for b in brokers["brokers"] if b["id"] == 1)["broker_epoch"])


def _init_producer_id(login: KafkaLogin) -> dict[str, Any]:
    return login.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60_000})


def test_producer_ids_only_for_who_may_write_somewhere(cluster: Cluster) -> None:
    """Issue 24: a user with no ACLs got 130,057 producer ids at 6,500/s. Now neither
    edge gives one without IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka's
    KIP-679 rule), and the refusal is audited."""
    url = cluster.urls[1]
    _user(cluster, "nobody", "pw-n")
    status, answer = http("POST", url + "/v1/producer-ids", headers=basic("nobody", "pw-n"))
    assert status == 403 and answer["error_code"] == "CLUSTER_AUTHORIZATION_FAILED", answer
    login = KafkaLogin(cluster.kafka_addresses[1], "nobody", "pw-n")
    try:
        assert _init_producer_id(login)["error_code"] == 31  # CLUSTER_AUTHORIZATION_FAILED
    finally:
        login.close()
    # WRITE on one topic (prefixed) is enough; so is IDEMPOTENT_WRITE on the cluster
    _user(
        cluster,
        "writer",
        "pw-w",
        operation="WRITE",
        resource_type="TOPIC",
        resource_name="logs-",
        pattern_type="PREFIXED",
    )
    status, answer = http("POST", url + "/v1/producer-ids", headers=basic("writer", "pw-w"))
    assert status == 201, answer
    _user(cluster, "idem", "pw-i", operation="IDEMPOTENT_WRITE", resource_type="CLUSTER")
    login = KafkaLogin(cluster.kafka_addresses[1], "idem", "pw-i")
    try:
        assert _init_producer_id(login)["error_code"] == 0
    finally:
        login.close()
    # a DENY of the very name its ALLOW grants takes it back
    _user(cluster, "denied", "pw-d", operation="WRITE", resource_type="TOPIC", resource_name="only")
    status, _ = as_admin(
        "POST",
        url + "/v1/acls",
        {
            "principal": "User:denied",
            "operation": "WRITE",
            "resource_type": "TOPIC",
            "resource_name": "only",
            "permission": "DENY",
        },
    )
    assert status == 201
    deadline = time.monotonic() + 10
    while http("POST", url + "/v1/producer-ids", headers=basic("denied", "pw-d"))[0] != 403:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    audit = [
        line
        for line in _broker_log(cluster).splitlines()
        if '"authorization_denied"' in line and "IDEMPOTENT_WRITE" in line
    ]
    assert any('"principal":"User:nobody"' in line for line in audit)


def _idempotent_produce(
    login: KafkaLogin, topic: str, producer_id: int, sequence: int, value: bytes
) -> dict[str, Any]:
    batch = records.encode_batch(
        [records.KafkaRecord(0, int(time.time() * 1000), None, value, [])],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
    )
    answer = login.call(
        0,
        9,
        {
            "acks": -1,
            "timeout_ms": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    part: dict[str, Any] = answer["responses"][0]["partition_responses"][0]
    return part


def test_a_producer_id_is_its_principals_alone(cluster: Cluster) -> None:
    """Issue 24: a second user with WRITE on a shared topic guessed the first one's producer
    id, wrote under it, and 151 of the victim's "delivered" records were never written. Now
    ids are random and bound to their principal: the second user's batches under the
    first's id are refused (UNKNOWN_PRODUCER_ID), and every batch of the first is written."""
    _topic(cluster, "shared")
    for user in ("victim", "thief"):
        _user(
            cluster,
            user,
            f"pw-{user}",
            operation="WRITE",
            resource_type="TOPIC",
            resource_name="shared",
        )
    victim = KafkaLogin(cluster.kafka_addresses[1], "victim", "pw-victim")
    thief = KafkaLogin(cluster.kafka_addresses[1], "thief", "pw-thief")
    try:
        ids = [_init_producer_id(victim)["producer_id"] for _ in range(3)]
        stolen = ids[-1]
        theirs = _init_producer_id(thief)["producer_id"]
        # not a counter: neighbours are no better a guess than any other number
        assert all(abs(a - b) > 2**20 for a in ids for b in ids if a != b), ids
        assert theirs not in ids
        # the thief writes ahead of the victim under the victim's id: refused, unwritten
        for sequence in range(5):
            answer = _idempotent_produce(thief, "shared", stolen, sequence, b"forged")
            assert answer["error_code"] == 59, answer  # UNKNOWN_PRODUCER_ID
            assert str(stolen) not in (answer.get("error_message") or "")
        for sequence in range(5):
            answer = _idempotent_produce(victim, "shared", stolen, sequence, b"mine")
            assert answer["error_code"] == 0, answer
        # a gap: refused, and the text tells no one the producer's next sequence
        answer = _idempotent_produce(victim, "shared", stolen, 9, b"gap")
        assert answer["error_code"] == 45, answer  # OUT_OF_ORDER_SEQUENCE_NUMBER
        message = answer.get("error_message") or ""
        assert "5" not in message and "9" not in message, message
    finally:
        victim.close()
        thief.close()
    status, fetched = http(
        "GET",
        cluster.urls[1] + "/v1/topics/shared/partitions/0/records?offset=0",
        headers=basic(*ADMIN),
    )
    assert status == 200, fetched
    assert [r["value"] for r in fetched["records"]] == ["mine"] * 5


def test_topics_asked_by_id_name_nothing_the_caller_may_not_see(cluster: Cluster) -> None:
    """Issue 24: Metadata and DeleteTopics by topic id answered the name of a topic the
    caller may not describe. Now Metadata answers TOPIC_AUTHORIZATION_FAILED with the id
    and no name, DeleteTopics UNKNOWN_TOPIC_ID (as if there were none), and the topic
    stays."""
    _topic(cluster, "secret-plans")
    _user(cluster, "peeker", "pw-p")
    admin = KafkaLogin(cluster.kafka_addresses[1], *ADMIN)
    try:
        named = {"name": "secret-plans", "topic_id": uuid.UUID(int=0)}
        found = admin.call(3, 12, {"topics": [named]})
        topic_id = found["topics"][0]["topic_id"]
    finally:
        admin.close()
    peeker = KafkaLogin(cluster.kafka_addresses[1], "peeker", "pw-p")
    try:
        answer = peeker.call(3, 12, {"topics": [{"name": None, "topic_id": topic_id}]})
        (topic,) = answer["topics"]
        assert topic["error_code"] == 29 and topic["name"] is None, topic
        assert topic["topic_id"] == topic_id
        deleted = peeker.call(
            20, 6, {"topics": [{"name": None, "topic_id": topic_id}], "timeout_ms": 5000}
        )
        (result,) = deleted["responses"]
        assert result["error_code"] == 100 and result["name"] is None, result  # UNKNOWN_TOPIC_ID
    finally:
        peeker.close()
    status, _ = http("GET", cluster.urls[1] + "/v1/topics/secret-plans", headers=basic(*ADMIN))
    assert status == 200


def test_alter_configs_of_a_broker_named_oddly_answers_an_error(cluster: Cluster) -> None:
    """Issue 24: IncrementalAlterConfigs on broker "²" (a digit to str.isdigit, no number
    to int) closed the connection; it is answered INVALID_REQUEST, and the connection
    serves the next request."""
    admin = KafkaLogin(cluster.kafka_addresses[1], *ADMIN)
    try:
        for name in ["²", "1" * 5000, "-1", ""]:
            answer = admin.call(
                44,
                1,
                {
                    "resources": [
                        {
                            "resource_type": 4,
                            "resource_name": name,
                            "configs": [
                                {"name": "log.retention.ms", "config_operation": 0, "value": "1"}
                            ],
                        }
                    ],
                    "validate_only": False,
                },
            )
            assert answer["responses"][0]["error_code"] == 42, (name, answer)
    finally:
        admin.close()
