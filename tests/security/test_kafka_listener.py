"""The Kafka listener under hostile input (issue 16): requests it would refuse cost nothing,
oversized or bomb-like requests are refused without stalling the broker, internal topics
stay the brokers' own, and with `auth.required` (no SASL yet) no Kafka client is served.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlite.protocol.kafka import messages, records
from kraftlite.protocol.kafka.wire import Writer
from tests.harness.auth import ADMIN, as_admin, auth_cluster, basic
from tests.harness.kafka_wire import call, frame, read_exactly
from tests.harness.observe import wait_for_brokers_metadata
from tests.harness.processes import FAST_SESSIONS, Cluster, http

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("kafka-hostile"),
        brokers=1,
        controller_config=FAST_SESSIONS,
        kafka=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _closed_unanswered(address: str, frame: bytes) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(frame)
        return sock.recv(16) == b""


def _healthy(cluster: Cluster) -> None:
    status, _ = http("GET", cluster.urls[1] + "/readyz", timeout=5)
    assert status == 200
    answer = call(cluster.kafka_addresses[1], 18, 3, {})
    assert answer["error_code"] == 0


def _topic(cluster: Cluster, name: str) -> None:
    cluster.create_topic(name)


def test_a_request_with_more_items_than_allowed_closes_its_connection(cluster: Cluster) -> None:
    """A Metadata v9 request naming 400,000 topics (2 bytes each on the wire) is refused
    by the item budget while it is decoded, not built into 400,000 dicts."""
    writer = Writer()
    writer.unsigned_varint(400_001)
    for _ in range(400_000):
        writer.raw(b"\x01\x00")  # compact string "" and no tagged fields
    writer.raw(b"\x00\x00\x00")  # allow auto creation, authorized operations, tags
    header = struct.pack(">hhih", 3, 9, 1, 1) + b"x" + b"\x00"
    assert _closed_unanswered(cluster.kafka_addresses[1], frame(header + writer.getvalue()))
    _healthy(cluster)


def test_an_unserved_api_closes_before_its_body_is_read(cluster: Cluster) -> None:
    # SaslAuthenticate is decodable but not served: closed, whatever its (huge) body says
    body = struct.pack(">hhih", 36, 1, 1, 1) + b"x" + struct.pack(">i", 2**30)
    assert _closed_unanswered(cluster.kafka_addresses[1], frame(body))
    _healthy(cluster)


def test_a_compressed_bomb_is_refused_and_the_broker_stays_responsive(cluster: Cluster) -> None:
    _topic(cluster, "bomb")
    huge = records.KafkaRecord(0, int(time.time() * 1000), None, bytes(80 << 20), [])
    batch = records.encode_batch([huge], compression=records.Compression.ZSTD)
    assert len(batch) < 1 << 20  # well under max.message.bytes on the wire
    produce = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "bomb", "partition_data": [{"index": 0, "records": batch}]}],
    }
    answer = call(cluster.kafka_addresses[1], 0, 9, produce)
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 2  # CORRUPT
    _healthy(cluster)
    status, fetched = http("GET", cluster.urls[1] + "/v1/topics/bomb/partitions/0/records?offset=0")
    assert status == 200 and fetched["records"] == []


def test_a_partition_named_twice_in_a_produce_appends_nothing(cluster: Cluster) -> None:
    _topic(cluster, "twice")
    batch = records.encode_batch([records.KafkaRecord(0, int(time.time() * 1000), None, b"x", [])])
    part = {"index": 0, "records": batch}
    produce = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "twice", "partition_data": [part, part]}],
    }
    answer = call(cluster.kafka_addresses[1], 0, 9, produce)
    codes = [p["error_code"] for p in answer["responses"][0]["partition_responses"]]
    assert codes == [42, 42]
    status, fetched = http(
        "GET", cluster.urls[1] + "/v1/topics/twice/partitions/0/records?offset=0"
    )
    assert status == 200 and fetched["records"] == []


def test_a_fetch_that_cannot_reach_min_bytes_answers_once_max_bytes_are_there(
    cluster: Cluster,
) -> None:
    _topic(cluster, "budget")
    status, _ = http(
        "POST",
        cluster.urls[1] + "/v1/topics/budget/partitions/0/records",
        {"records": [{"value": "x" * 1000} for _ in range(5)]},
    )
    assert status == 200
    fetch = {
        "max_wait_ms": 30_000,
        "min_bytes": 2**31 - 1,
        "max_bytes": 100,  # less than the batch: the batch is still sent, and at once
        "topics": [
            {
                "topic": "budget",
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}],
            }
        ],
    }
    answer = call(cluster.kafka_addresses[1], 1, 12, fetch)
    partition = answer["responses"][0]["partitions"][0]
    assert partition["error_code"] == 0 and partition["high_watermark"] == 5
    got = records.decode_batches(partition["records"])
    assert sum(b.record_count for b in got) == 5


def test_internal_topics_are_not_kafka_clients_to_read_or_list(cluster: Cluster) -> None:
    _topic(cluster, "visible")
    # a group's commit makes __consumer_offsets exist
    status, answer = http(
        "POST",
        cluster.urls[1] + "/v1/groups/g/offsets",
        {"offsets": [{"topic": "visible", "partition": 0, "offset": 0}]},
    )
    assert status == 204, answer
    listed = call(cluster.kafka_addresses[1], 3, 12, {"topics": None})
    assert "__consumer_offsets" not in {t["name"] for t in listed["topics"]}
    asked = call(cluster.kafka_addresses[1], 3, 12, {"topics": [{"name": "__consumer_offsets"}]})
    assert asked["topics"][0]["error_code"] == 29  # TOPIC_AUTHORIZATION_FAILED
    fetch = {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": "__consumer_offsets",
                "partitions": [
                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    for p in range(10)
                ],
            }
        ],
    }
    answer = call(cluster.kafka_addresses[1], 1, 12, fetch)
    assert {p["error_code"] for p in answer["responses"][0]["partitions"]} == {29}
    commit = {
        "group_id": "g2",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": "__consumer_offsets",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
                ],
            }
        ],
    }
    answer = call(cluster.kafka_addresses[1], 8, 8, commit)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 17  # INVALID_TOPIC_EXCEPTION


def test_bad_group_names_are_refused(cluster: Cluster) -> None:
    for group in ["", "a\x1b[31m", "g" * 250]:
        answer = call(cluster.kafka_addresses[1], 10, 2, {"key": group, "key_type": 0})
        assert answer["error_code"] == 24, group  # INVALID_GROUP_ID


@pytest.fixture(scope="module")
def authenticated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = auth_cluster(
        tmp_path_factory.mktemp("kafka-auth"),
        brokers=1,
        controller_config=FAST_SESSIONS,
        kafka=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _scram(cluster: Cluster, user: str, password: str, mechanism: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _password_changes_end_logins(
    cluster: Cluster, producer: Any, user: str, mechanism: str, topic: str
) -> None:
    """A wrong password is refused; setting `user`'s password to "changed-pw-2" ends its
    open connections, so `producer`, logged in with the old one, writes nothing more."""
    from confluent_kafka import KafkaException  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    wrong = AdminClient(_scram(cluster, user, "not-the-password", mechanism))
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=5)
    status, answer = as_admin(
        "POST", cluster.urls[1] + "/v1/users", {"name": user, "password": "changed-pw-2"}
    )
    assert status == 201, answer
    wait_for_brokers_metadata(cluster, basic(*ADMIN))  # the new password everywhere
    late: list[Any] = []
    producer.produce(topic, b"late", partition=0, on_delivery=lambda e, m: late.append(e))
    producer.flush(15)  # refused logins: it fails at message.timeout.ms (5 s)
    assert late and late[0] is not None  # never written with the old password...
    status, answer = as_admin(
        "GET", cluster.urls[1] + f"/v1/topics/{topic}/partitions/0/records?offset=0"
    )
    assert status == 200, answer
    assert "late" not in [r["value"] for r in answer["records"]]  # ...not even slowly


def test_with_auth_required_a_kafka_client_must_authenticate_with_scram(
    authenticated: Cluster,
) -> None:
    """Anonymous: ApiVersions only, then the connection closes. SCRAM-SHA-256/512 (the
    password never on the wire): the user's principal, with its ACLs."""
    from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: PLC0415

    address = authenticated.kafka_addresses[1]
    assert call(address, 18, 3, {})["error_code"] == 0
    request = messages.encode_request(3, 12, 2, "anonymous", {"topics": None})
    assert _closed_unanswered(address, frame(request))
    # a frame over 512 KiB before authenticating is not even read
    assert _closed_unanswered(address, struct.pack(">i", 1 << 20) + b"\x00" * 64)
    status, answer = as_admin(
        "POST", authenticated.urls[1] + "/v1/users", {"name": "alice", "password": "alice-pw-1"}
    )
    assert status == 201, answer
    status, answer = as_admin(
        "POST",
        authenticated.urls[1] + "/v1/users",
        {"name": "bob", "password": "bob-pw-1", "mechanism": "SCRAM-SHA-512"},
    )
    assert status == 201, answer
    status, answer = as_admin(
        "POST", authenticated.urls[1] + "/v1/topics", {"name": "secured", "partitions": 1}
    )
    assert status == 201, answer
    grants = (
        ("User:alice", "WRITE", "TOPIC", "secured"),
        ("User:bob", "READ", "TOPIC", "secured"),
        ("User:bob", "READ", "GROUP", "g"),
    )
    for principal, operation, kind, name in grants:
        status, answer = as_admin(
            "POST",
            authenticated.urls[1] + "/v1/acls",
            {"principal": principal, "operation": operation, "resource_type": kind,
             "resource_name": name},
        )  # fmt: skip
        assert status == 201, answer
    wait_for_brokers_metadata(authenticated, basic(*ADMIN))  # the users and ACLs
    producer = Producer(
        {
            **_scram(authenticated, "alice", "alice-pw-1", "SCRAM-SHA-256"),
            "message.timeout.ms": 5_000,
        }
    )
    errors: list[Any] = []
    producer.produce("secured", b"hello", partition=0, on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0 and errors == [None]
    consumer = Consumer(
        {**_scram(authenticated, "bob", "bob-pw-1", "SCRAM-SHA-512"), "group.id": "g"}
    )
    consumer.assign([TopicPartition("secured", 0, 0)])
    message = consumer.poll(20)
    consumer.close()
    assert message is not None and message.error() is None and message.value() == b"hello"
    # bob may read, not write: the same ACLs as over HTTP
    denied: list[Any] = []
    bob = Producer({**_scram(authenticated, "bob", "bob-pw-1", "SCRAM-SHA-512"), "acks": "all"})
    bob.produce("secured", b"x", partition=0, on_delivery=lambda e, m: denied.append(e))
    bob.flush(30)
    assert denied and denied[0] is not None and "AUTHORIZATION" in denied[0].name()
    _password_changes_end_logins(authenticated, producer, "alice", "SCRAM-SHA-256", "secured")
    fresh = Producer(_scram(authenticated, "alice", "changed-pw-2", "SCRAM-SHA-256"))
    ok: list[Any] = []
    fresh.produce("secured", b"again", partition=0, on_delivery=lambda e, m: ok.append(e))
    assert fresh.flush(30) == 0 and ok == [None]


def test_consumer_group_heartbeats_with_bad_input_are_refused(cluster: Cluster) -> None:
    address = cluster.kafka_addresses[1]
    base = {"group_id": "g848", "member_id": "m1", "member_epoch": 0}
    cases = [
        ({**base, "subscribed_topic_names": None}, 42),  # a join names its topics
        ({**base, "subscribed_topic_names": ["t"], "subscribed_topic_regex": "t.*"}, 42),
        ({**base, "subscribed_topic_names": ["bad/name"]}, 17),
        ({**base, "subscribed_topic_names": ["__consumer_offsets"]}, 17),
        ({**base, "member_id": "x" * 65, "subscribed_topic_names": ["t"]}, 42),
        ({**base, "group_id": "", "subscribed_topic_names": ["t"]}, 24),
        ({**base, "member_epoch": 5}, 25),  # heartbeating as a member it never was
    ]
    for body, code in cases:
        answer = call(address, 68, 1, body)
        assert answer["error_code"] == code, (body, answer)
    _healthy(cluster)


def _sasl_plain(address: str, token: bytes) -> tuple[dict[str, Any], bool]:
    """A PLAIN handshake, then `token`: SaslAuthenticate's answer, and whether the
    connection was closed after it: waited for up to 5 s after a refusal (which closes it
    at once), 1 s after an accepted login (whose connection stays open)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answers = []
        for api_key, version, body in (
            (17, 1, {"mechanism": "PLAIN"}),
            (36, 2, {"auth_bytes": token}),
        ):
            sock.sendall(frame(messages.encode_request(api_key, version, 1, "t", body)))
            size = struct.unpack(">i", read_exactly(sock, 4))[0]
            answers.append(messages.decode_response(api_key, version, read_exactly(sock, size)))
        assert answers[0].body["error_code"] == 0
        assert "PLAIN" in answers[0].body["mechanisms"]
        accepted = answers[1].body["error_code"] == 0
        sock.settimeout(1 if accepted else 5)  # a refusal closes after its 0.1 s delay
        try:
            closed = sock.recv(1) == b""
        except TimeoutError:
            closed = False
        return answers[1].body, closed


# kafka-python 3.0.12 reads its schemas with a deprecated importlib call
@pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")
def test_sasl_plain_checks_the_password_against_the_users_credential(
    authenticated: Cluster,
) -> None:
    """SASL PLAIN (RFC 4616), as Confluent Cloud's and most managed Kafka's clients use
    it: the user's password, checked as HTTP Basic checks it, with the same ACLs."""
    from confluent_kafka import Producer  # noqa: PLC0415
    from kafka import KafkaConsumer  # noqa: PLC0415

    status, answer = as_admin(
        "POST", authenticated.urls[1] + "/v1/users", {"name": "carol", "password": "carol-pw-1"}
    )
    assert status == 201, answer
    status, answer = as_admin(
        "POST", authenticated.urls[1] + "/v1/topics", {"name": "plain-t", "partitions": 1}
    )
    assert status == 201, answer
    for operation, kind, name in (("ALL", "TOPIC", "plain-t"), ("READ", "GROUP", "pg")):
        status, answer = as_admin(
            "POST",
            authenticated.urls[1] + "/v1/acls",
            {"principal": "User:carol", "operation": operation, "resource_type": kind,
             "resource_name": name},
        )  # fmt: skip
        assert status == 201, answer
    wait_for_brokers_metadata(authenticated, basic(*ADMIN))  # the user and ACLs
    producer = Producer(
        {**_scram(authenticated, "carol", "carol-pw-1", "PLAIN"), "message.timeout.ms": 5_000}
    )
    delivered: list[Any] = []
    producer.produce(
        "plain-t", b"by-plain", partition=0, on_delivery=lambda e, m: delivered.append(e)
    )
    assert producer.flush(30) == 0 and delivered == [None]
    consumer = KafkaConsumer(
        "plain-t",
        bootstrap_servers=authenticated.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="carol",
        sasl_plain_password="carol-pw-1",
        group_id="pg",
        auto_offset_reset="earliest",
        consumer_timeout_ms=8_000,
    )
    values = []
    for record in consumer:  # ends at the first record (or after 8 s without one)
        values.append(record.value)
        break
    consumer.close()
    assert values == [b"by-plain"]
    _password_changes_end_logins(authenticated, producer, "carol", "PLAIN", "plain-t")
    address = authenticated.kafka_addresses[1]
    for token in (
        b"carol-pw-1",  # not RFC 4616
        b"\0carol\0wrong",
        b"\0nobody\0carol-pw-1",
        b"mallory\0carol\0carol-pw-1",  # acting for another: refused
        b"\0carol\0carol-pw-1\0extra",
        b"\0ca:rol\0carol-pw-1",  # no user can have that name
        b"\0\xff\xfe\0carol-pw-1",
    ):
        body, closed = _sasl_plain(address, token)
        assert body["error_code"] == 58 and closed, token  # SASL_AUTHENTICATION_FAILED
    body, closed = _sasl_plain(address, b"carol\0carol\0changed-pw-2")  # authzid = itself
    assert body["error_code"] == 0 and not closed
    body, closed = _sasl_plain(address, b"\0carol\0carol-pw-1")  # the old password
    assert body["error_code"] == 58 and closed
    body, closed = _sasl_plain(address, b"\0" * 4000)  # longer than any PLAIN message
    assert body["error_code"] == 58 and closed
    _healthy(authenticated)


def test_a_logged_in_reader_learns_where_the_http_side_is_and_no_more(
    authenticated: Cluster,
) -> None:
    """A broker's HTTP URL, id and rack (what Metadata and the HTTP broker list tell any
    authenticated client) need no DESCRIBE_CONFIGS on the cluster; its other configs do.
    kraftlite's own Kafka login (the Spark source's resolve.py) checks the server too."""
    from confluent_kafka.admin import AdminClient, ConfigResource  # noqa: PLC0415

    from kraftlite.client import Credentials  # noqa: PLC0415
    from kraftlite.spark.options import Security  # noqa: PLC0415
    from kraftlite.spark.resolve import ResolveError, kafka_http_url  # noqa: PLC0415

    status, answer = as_admin(
        "POST", authenticated.urls[1] + "/v1/users", {"name": "carol", "password": "carol-pw"}
    )
    assert status == 201, answer
    host, port = authenticated.kafka_addresses[1].rsplit(":", 1)
    carol = Security(Credentials("carol", "carol-pw"), tls=False, mechanism="SCRAM-SHA-256")
    deadline = time.monotonic() + 20
    while True:  # the user reaches the broker with its metadata
        try:
            found = kafka_http_url(host, int(port), 10, carol)
            break
        except ResolveError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert found.rstrip("/") == authenticated.urls[1].rstrip("/")
    for wrong in [
        Security(Credentials("carol", "guess"), tls=False, mechanism="SCRAM-SHA-256"),
        Security(Credentials("carol", "carol-pw"), tls=False, mechanism="SCRAM-SHA-512"),
        Security(Credentials("carol", "guess"), tls=False, mechanism="PLAIN"),
    ]:
        with pytest.raises(ResolveError, match="SASL_AUTHENTICATION_FAILED"):
            kafka_http_url(host, int(port), 10, wrong)
    plain = Security(Credentials("carol", "carol-pw"), tls=False, mechanism="PLAIN")
    assert kafka_http_url(host, int(port), 10, plain) == found
    admin = AdminClient(_scram(authenticated, "carol", "carol-pw", "SCRAM-SHA-256"))
    every_config = ConfigResource(ConfigResource.Type.BROKER, "1")
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED"):
        admin.describe_configs([every_config])[every_config].result(30)


def test_describe_configs_of_a_broker_named_oddly_answers_an_error(cluster: Cluster) -> None:
    """ "²" is a digit to str.isdigit and no number to int: answered, never a crash."""
    for name in ["²", "1" * 5000, "-1", ""]:
        request = {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": name,
                    "configuration_keys": ["kraftlite.http.url"],
                }
            ],
            "include_synonyms": False,
        }
        answer = call(cluster.kafka_addresses[1], 32, 1, request)
        assert answer["results"][0]["error_code"] == 42, name  # INVALID_REQUEST
    _healthy(cluster)
