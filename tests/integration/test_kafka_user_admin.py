"""Kafka's SCRAM and quota admin APIs with real clients on a real, secured cluster (issue
25): confluent-kafka's AdminClient (librdkafka) and kafka-python's KafkaAdminClient set,
describe and delete SCRAM credentials; a credential set so logs in at once on every broker
(librdkafka and kafka-python SCRAM logins) and ends the user's open connections; quotas are
altered and described with kafka-python's protocol messages (neither client has calls for
them) and are the HTTP API's quotas; a principal without the ACL gets Kafka's error code and
nothing changes. One module-scoped cluster: 3 controllers, 2 brokers, `auth.required`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kraftlite.protocol.kafka.messages import ApiKey
from tests.harness.auth import ADMIN, as_admin, auth_cluster
from tests.harness.kafka_wire import plain_login
from tests.harness.processes import FAST_SESSIONS, Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # kafka-python 3.0.12 reads its schemas with a deprecated importlib call
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]
CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST = 31, 42
DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 92, 93


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = auth_cluster(
        tmp_path_factory.mktemp("kafka-user-admin"),
        brokers=2,
        controller_config=FAST_SESSIONS,
        kafka=True,
    )
    running.start()
    try:
        status, answer = as_admin("GET", running.urls[1] + "/v1/users")  # admin is known
        assert status == 200, answer
        status, answer = as_admin(
            "POST", running.urls[1] + "/v1/topics", {"name": "scram-t", "partitions": 1}
        )
        assert status == 201, answer
        yield running
    finally:
        running.stop()


def sasl(
    address: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256"
) -> dict[str, Any]:
    """librdkafka's settings for a SCRAM login at `address` (one broker, or the bootstrap)."""
    return {
        "bootstrap.servers": address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def confluent_admin(cluster: Cluster, user: str = ADMIN[0], password: str = ADMIN[1]) -> Any:
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    return AdminClient(sasl(cluster.bootstrap, user, password))


def kafka_python_admin(
    cluster: Cluster,
    user: str = ADMIN[0],
    password: str = ADMIN[1],
    mechanism: str = "SCRAM-SHA-256",
) -> Any:
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415

    return KafkaAdminClient(
        bootstrap_servers=cluster.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=password,
    )


def logs_in(address: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bool:
    """Whether librdkafka logs in at `address` (that broker alone) with a SCRAM exchange:
    listing topics needs a session, and any authenticated principal may list. A refused
    login is told by the error callback, not waited out."""
    from confluent_kafka import KafkaError, KafkaException  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    refused: list[Any] = []

    def error(failure: Any) -> None:
        if failure.code() == KafkaError._AUTHENTICATION:
            refused.append(failure)

    client = AdminClient({**sasl(address, user, password, mechanism), "error_cb": error})
    deadline = time.monotonic() + 10
    while not refused and time.monotonic() < deadline:
        try:
            client.list_topics(timeout=0.5)
        except KafkaException:
            client.poll(0.1)  # the error callback
            continue
        return True
    return False


def logs_in_with_kafka_python(address: str, user: str, password: str) -> bool:
    """Whether kafka-python logs in at `address` with SCRAM-SHA-512 (a failed login raises)."""
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415
    from kafka.errors import KafkaError  # noqa: PLC0415

    try:
        client = KafkaAdminClient(
            bootstrap_servers=address,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username=user,
            sasl_plain_password=password,
        )
    except KafkaError:
        return False
    try:
        return bool(client.list_topics() == [])  # logged in; no ACLs: sees nothing
    finally:
        client.close()


def soon(condition: Callable[[], bool], timeout_s: float = 10) -> bool:
    """`condition` holds within `timeout_s`: the broker that answered an admin call has the
    change when it answers, the others when their metadata reaches it (milliseconds here,
    longer on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def shows_topic(address: str, user: str, password: str, topic: str) -> bool:
    """Whether the broker at `address` (that one alone) shows `topic` to `user` in Metadata
    (DESCRIBE, which WRITE implies): once its metadata holds the ACL granting it."""
    with plain_login(address, user, password) as connection:
        answer = connection.call(
            ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
        )
    return [(t["name"], t["error_code"]) for t in answer["topics"]] == [(topic, 0)]


def grant(cluster: Cluster, principal: str, operation: str, kind: str, name: str = "") -> None:
    body = {"principal": principal, "operation": operation, "resource_type": kind}
    if name:
        body["resource_name"] = name
    status, answer = as_admin("POST", cluster.urls[1] + "/v1/acls", body)
    assert status == 201, answer


def users(cluster: Cluster) -> dict[str, dict[str, int]]:
    """The controllers' users, over HTTP: name -> mechanism -> iterations (as the
    controller broker 2 asks has them: a follower of the quorum applies a change a moment
    after the active one answered it)."""
    status, answer = as_admin("GET", cluster.urls[2] + "/v1/users")
    assert status == 200, answer
    return {
        u["name"]: {c["mechanism"]: c["iterations"] for c in u["credentials"]}
        for u in answer["users"]
    }


def test_librdkafka_sets_a_credential_that_logs_in_at_once_on_every_broker(
    cluster: Cluster,
) -> None:
    """AlterUserScramCredentials from confluent-kafka (the salted password computed by
    librdkafka, never the password on the wire): the controllers keep the credential, both
    brokers take a SCRAM login with it at once, describe shows it, and a changed password
    ends a producer's session logged in with the old one. Deletion by mechanism, and
    Kafka's per-user errors."""
    from confluent_kafka import KafkaException, Producer  # noqa: PLC0415
    from confluent_kafka.admin import (  # noqa: PLC0415
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = confluent_admin(cluster)
    sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    alterations = [
        UserScramCredentialUpsertion("alice", sha256, b"alice-pw-1"),
        UserScramCredentialUpsertion("alice-512", sha512, b"alice-pw-512"),
    ]
    for future in admin.alter_user_scram_credentials(alterations).values():
        assert future.result(30) is None
    for address in cluster.kafka_addresses.values():  # at once where answered, soon elsewhere
        assert soon(lambda a=address: logs_in(a, "alice", "alice-pw-1"))
        assert soon(lambda a=address: logs_in(a, "alice-512", "alice-pw-512", "SCRAM-SHA-512"))
        assert not logs_in(address, "alice", "not-the-password")
    assert soon(lambda: users(cluster).get("alice") == {"SCRAM-SHA-256": 8192})
    described = admin.describe_user_scram_credentials(["alice", "alice-512"])
    alice = described["alice"].result(30)
    assert [(i.mechanism, i.iterations) for i in alice.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    every = admin.describe_user_scram_credentials().result(30)
    assert {"admin", "alice", "alice-512"} <= set(every)

    # a producer logged in with the password that is then changed writes nothing more
    grant(cluster, "User:alice", "WRITE", "TOPIC", "scram-t")
    for address in cluster.kafka_addresses.values():  # the ACL reaches every broker
        assert soon(lambda a=address: shows_topic(a, "alice", "alice-pw-1", "scram-t")), address
    producer = Producer(
        {**sasl(cluster.bootstrap, "alice", "alice-pw-1"), "message.timeout.ms": 10_000}
    )
    delivered: list[Any] = []
    producer.produce("scram-t", b"one", partition=0, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(30) == 0 and delivered == [None]
    changed = UserScramCredentialUpsertion("alice", sha256, b"alice-pw-2")
    admin.alter_user_scram_credentials([changed])["alice"].result(30)
    for address in cluster.kafka_addresses.values():  # each broker's metadata has it
        assert soon(lambda a=address: logs_in(a, "alice", "alice-pw-2"))
        assert soon(lambda a=address: not logs_in(a, "alice", "alice-pw-1"))
    late: list[Any] = []
    producer.produce("scram-t", b"late", partition=0, on_delivery=lambda e, m: late.append(e))
    producer.flush(15)
    assert late and late[0] is not None  # its session ended; the old password fails

    # deletion of one mechanism; then the user is gone: describe and delete are 91
    gone = UserScramCredentialDeletion("alice-512", ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([gone])["alice-512"].result(30)
    assert soon(lambda: "alice-512" not in users(cluster))
    for address in cluster.kafka_addresses.values():  # each broker's metadata has it gone
        assert soon(lambda a=address: not logs_in(a, "alice-512", "alice-pw-512", "SCRAM-SHA-512"))
    # (whichever broker librdkafka asks answers these from its own metadata)
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND"):
        admin.describe_user_scram_credentials(["alice-512"])["alice-512"].result(30)
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND"):
        admin.alter_user_scram_credentials([gone])["alice-512"].result(30)

    # Kafka's per-user errors, nothing changed for those users
    too_many = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 200_000)
    refused = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion("mallory", too_many, b"pw"),
            UserScramCredentialUpsertion("with:colon", sha256, b"pw"),
            UserScramCredentialUpsertion("twice", sha256, b"pw"),
            UserScramCredentialDeletion("twice", ScramMechanism.SCRAM_SHA_256),
        ]
    )
    for user, name in [
        ("mallory", "UNACCEPTABLE_CREDENTIAL"),
        ("with:colon", "UNACCEPTABLE_CREDENTIAL"),
        ("twice", "DUPLICATE_RESOURCE"),
    ]:
        with pytest.raises(KafkaException, match=name):
            refused[user].result(30)
    assert not {"mallory", "with:colon", "twice"} & set(users(cluster))


def test_kafka_python_sets_describes_and_deletes_credentials(cluster: Cluster) -> None:
    """kafka-python's KafkaAdminClient (AlterUserScramCredentials and
    DescribeUserScramCredentials v0): the credential it sets logs in with kafka-python's own
    SCRAM-SHA-512, and what the HTTP API sets (a credential computed elsewhere, salt and
    keys in POST /v1/users) logs in over Kafka too."""
    from kafka.admin import (  # noqa: PLC0415 - a test-only client
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = kafka_python_admin(cluster)
    try:
        upserted = UserScramCredentialUpsertion(
            "carol", "SCRAM-SHA-512", "carol-pw", iterations=5000
        )
        assert admin.alter_user_scram_credentials([upserted]) == {"carol": None}
        expected = {
            "error": None,
            "credential_infos": [{"mechanism": ScramMechanism.SCRAM_SHA_512, "iterations": 5000}],
        }
        described: dict[str, Any] = {}

        def carol_described() -> bool:  # by whichever broker it asks: once it has the change
            described.update(admin.describe_user_scram_credentials(["carol", "nobody"]))
            return bool(described["carol"] == expected)

        assert soon(carol_described), described
        assert described["nobody"]["error"]  # RESOURCE_NOT_FOUND
        for address in cluster.kafka_addresses.values():  # kafka-python's own SCRAM-SHA-512
            assert soon(lambda a=address: logs_in_with_kafka_python(a, "carol", "carol-pw"))
        answer = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("", "SCRAM-SHA-256", "x")]
        )
        assert answer[""]  # UNACCEPTABLE_CREDENTIAL: an empty name
    finally:
        admin.close()

    # the HTTP API's credential form: computed here, the password never sent
    salt = os.urandom(24)
    salted = hashlib.pbkdf2_hmac("sha256", b"dave-pw", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    body = {
        "name": "dave",
        "salt": base64.b64encode(salt).decode(),
        "stored_key": base64.b64encode(hashlib.sha256(client_key).digest()).decode(),
        "server_key": base64.b64encode(hmac.new(salted, b"Server Key", "sha256").digest()).decode(),
    }
    status, answer = as_admin("POST", cluster.urls[2] + "/v1/users", body)
    assert status == 201, answer
    assert answer == {
        "name": "dave",
        "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}],
    }
    for address in cluster.kafka_addresses.values():
        assert soon(lambda a=address: logs_in(a, "dave", "dave-pw"))
    status, answer = as_admin("POST", cluster.urls[2] + "/v1/users", {**body, "password": "x"})
    assert status == 400 and answer["error_code"] == "INVALID_REQUEST", answer
    status, answer = as_admin(
        "DELETE", cluster.urls[1] + "/v1/users/dave?mechanism=SCRAM-SHA-512"
    )  # dave has no such credential
    assert status == 404 and answer["error_code"] == "RESOURCE_NOT_FOUND", answer
    status, _ = as_admin("DELETE", cluster.urls[1] + "/v1/users/dave?mechanism=SCRAM-SHA-256")
    assert status == 204
    assert soon(lambda: "dave" not in users(cluster))


def send(admin: Any, request: Any) -> Any:
    """A request on one of kafka-python's admin connections (its KafkaAdminClient has no
    quota calls; its protocol has the messages): the decoded answer."""

    async def call() -> Any:
        return await admin._manager.send(request)

    return admin._manager.run(call)


def test_quotas_through_kafka_are_the_http_apis_quotas(cluster: Cluster) -> None:
    """AlterClientQuotas and DescribeClientQuotas (kafka-python's messages, v1): a user
    entity's quotas are POST /v1/quotas's, described back by both edges; keys and entities
    kraftlite does not enforce are INVALID_REQUEST and not stored; a principal without
    ALTER_CONFIGS (DESCRIBE_CONFIGS) on the cluster gets CLUSTER_AUTHORIZATION_FAILED and
    nothing changes."""
    from kafka.protocol.admin import (  # noqa: PLC0415 - a test-only client
        AlterClientQuotasRequest,
        DescribeClientQuotasRequest,
    )

    def alter(entries: list[Any], validate_only: bool = False) -> list[tuple[int, str | None]]:
        answer = send(admin, AlterClientQuotasRequest(entries=entries, validate_only=validate_only))
        return [(e.error_code, e.error_message) for e in answer.entries]

    admin = kafka_python_admin(cluster)
    try:
        quota = [
            (
                [("user", "erin")],
                [("producer_byte_rate", 1048576.0, False), ("request_percentage", 25.0, False)],
            )
        ]
        assert alter(quota) == [(0, None)]
        erin = {
            "principal": "User:erin",
            "producer_byte_rate": 1048576.0,
            "request_percentage": 25.0,
        }
        assert soon(lambda: erin in as_admin("GET", cluster.urls[2] + "/v1/quotas")[1]["quotas"])
        described: list[Any] = []

        def erin_described() -> bool:  # by whichever broker it asks: once it has the change
            answer = send(
                admin,
                DescribeClientQuotasRequest(components=[("user", 0, "erin")], strict=False),
            )
            described[:] = [answer]
            return answer.error_code == 0 and [
                sorted((v.key, v.value) for v in entry.values) for entry in answer.entries or []
            ] == [[("producer_byte_rate", 1048576.0), ("request_percentage", 25.0)]]

        assert soon(erin_described), described
        (answer,) = described
        assert answer.error_code == 0
        ((entry),) = answer.entries
        assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("user", "erin")]
        assert sorted((v.key, v.value) for v in entry.values) == [
            ("producer_byte_rate", 1048576.0),
            ("request_percentage", 25.0),
        ]
        # removal, and what kraftlite does not enforce
        assert alter([([("user", "erin")], [("request_percentage", 0.0, True)])]) == [(0, None)]
        refused = alter(
            [
                ([("client-id", "app")], [("producer_byte_rate", 1.0, False)]),
                ([("user", None)], [("producer_byte_rate", 1.0, False)]),
                ([("user", "erin")], [("controller_mutation_rate", 5.0, False)]),
            ]
        )
        assert [code for code, _ in refused] == [INVALID_REQUEST] * 3
        assert "client-id" in str(refused[0][1]) and "controller_mutation_rate" in str(
            refused[2][1]
        )
        status, listed = as_admin("GET", cluster.urls[1] + "/v1/quotas")
        assert [q for q in listed["quotas"] if q["principal"] == "User:erin"] == [
            {"principal": "User:erin", "producer_byte_rate": 1048576.0}
        ]
    finally:
        admin.close()

    # frank may log in, not alter the cluster's quotas or users: Kafka's codes, no change
    status, answer = as_admin(
        "POST", cluster.urls[1] + "/v1/users", {"name": "frank", "password": "frank-pw"}
    )
    assert status == 201, answer
    for address in cluster.kafka_addresses.values():  # the user reaches every broker
        assert soon(lambda a=address: logs_in(a, "frank", "frank-pw"))
    frank = kafka_python_admin(cluster, "frank", "frank-pw")
    try:
        admin = frank
        assert alter([([("user", "frank")], [("producer_byte_rate", 1e9, False)])]) == [
            (CLUSTER_AUTHORIZATION_FAILED, "ALTER_CONFIGS on the cluster is needed")
        ]
        answer = send(frank, DescribeClientQuotasRequest(components=[], strict=False))
        assert answer.error_code == CLUSTER_AUTHORIZATION_FAILED
        from kafka.admin import UserScramCredentialUpsertion  # noqa: PLC0415

        raised = frank.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("admin", "SCRAM-SHA-256", "taken-over")]
        )
        assert raised["admin"]  # CLUSTER_AUTHORIZATION_FAILED
    finally:
        frank.close()
    status, listed = as_admin("GET", cluster.urls[1] + "/v1/quotas")
    assert not [q for q in listed["quotas"] if q["principal"] == "User:frank"]
    for address in cluster.kafka_addresses.values():
        assert logs_in(address, *ADMIN)  # the admin's password is unchanged
