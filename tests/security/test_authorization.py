"""Authentication and ACLs on a real cluster with `auth.required` (3 controllers, 3
brokers): users, Basic and Bearer, what each principal may do, deny wins, forwarding cannot
escalate, the audit log records it all.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlite.client import Credentials, SyncAdmin, SyncConsumer, SyncProducer
from kraftlite.protocol.kafka import records as kafka_records
from tests.harness.auth import ADMIN, as_admin, auth_cluster, basic, bearer
from tests.harness.observe import error_code, wait_for_brokers_metadata
from tests.harness.processes import Cluster, http, signed_http

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = auth_cluster(
        tmp_path_factory.mktemp("authz"),
        broker_config={"access.log.enabled": True},
        controller_config={"access.log.enabled": True},
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def add_acl(cluster: Cluster, **fields: str) -> dict[str, Any]:
    status, created = as_admin("POST", cluster.urls[1] + "/v1/acls", fields)
    assert status == 201, created
    return created


def wait_for_metadata(cluster: Cluster, check: Any) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "metadata did not reach the brokers"
        time.sleep(0.1)


def refused(answer: tuple[int, Any], status: int, code: str) -> None:
    assert answer[0] == status, answer
    assert error_code(answer[1]) == code, answer


def test_every_request_must_authenticate(cluster: Cluster) -> None:
    url = cluster.urls[1]
    request = urllib.request.Request(url + "/v1/cluster")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 401
    assert "Basic" in raised.value.headers["WWW-Authenticate"]
    raised.value.close()
    refused(http("GET", url + "/v1/topics"), 401, "SASL_AUTHENTICATION_FAILED")
    refused(
        http("GET", url + "/v1/topics", headers=basic("admin", "wrong")),
        401,
        "SASL_AUTHENTICATION_FAILED",
    )
    refused(
        http("GET", url + "/v1/topics", headers=bearer("kl1.e30.AAAA")),
        401,
        "SASL_AUTHENTICATION_FAILED",
    )
    refused(
        http("GET", url + "/v1/topics", headers={"Authorization": "Digest x"}),
        401,
        "SASL_AUTHENTICATION_FAILED",
    )
    assert http("GET", url + "/readyz")[0] == 200  # operations endpoints stay open
    for controller in cluster.quorum.urls.values():
        refused(http("GET", controller + "/v1/cluster"), 401, "SASL_AUTHENTICATION_FAILED")


def test_users_acls_and_deny_wins(cluster: Cluster) -> None:
    url, other = cluster.urls[1], cluster.urls[2]
    status, created = as_admin("POST", url + "/v1/users", {"name": "alice", "password": "pw-a"})
    assert status == 201, created
    assert created["credentials"][0]["mechanism"] == "SCRAM-SHA-256"

    def user_names() -> list[str]:  # by the controller broker 2 asks, once it applied alice
        status, users = as_admin("GET", other + "/v1/users")
        assert status == 200 and "pw-a" not in str(users), users
        return [u["name"] for u in users["users"]]

    wait_for_metadata(cluster, lambda: user_names() == ["admin", "alice"])
    status, answer = as_admin("POST", url + "/v1/topics", {"name": "orders-eu", "partitions": 1})
    assert status == 201, answer
    alice = basic("alice", "pw-a")
    wait_for_metadata(cluster, lambda: http("GET", other + "/v1/topics", headers=alice)[0] == 200)

    # nothing allowed yet: she sees no topics and may not write or create
    assert http("GET", other + "/v1/topics", headers=alice)[1]["topics"] == []
    record = {"records": [{"value": "v"}]}
    refused(
        http("POST", other + "/v1/topics/orders-eu/records", record, headers=alice),
        403,
        "TOPIC_AUTHORIZATION_FAILED",
    )
    refused(
        http("POST", other + "/v1/topics", {"name": "mine"}, headers=alice),
        403,
        "TOPIC_AUTHORIZATION_FAILED",
    )
    for method, path in [("GET", "/v1/acls"), ("GET", "/v1/users"), ("POST", "/v1/acls")]:
        refused(http(method, url + path, {}, headers=alice), 403, "CLUSTER_AUTHORIZATION_FAILED")

    # a prefixed ALLOW: she may write every orders- topic (and so describe it)
    add_acl(
        cluster,
        principal="User:alice",
        operation="WRITE",
        resource_type="TOPIC",
        resource_name="orders-",
        pattern_type="PREFIXED",
    )
    wait_for_metadata(
        cluster,
        lambda: (
            http("POST", other + "/v1/topics/orders-eu/records", record, headers=alice)[0] == 200
        ),
    )
    assert [t["name"] for t in http("GET", other + "/v1/topics", headers=alice)[1]["topics"]] == [
        "orders-eu"
    ]
    # writing is not reading: nor reading a key or a page of a compacted topic's table view,
    # which is refused before the broker looks at the topic at all
    refused(
        http("GET", other + "/v1/topics/orders-eu/partitions/0/records?offset=0", headers=alice),
        403,
        "TOPIC_AUTHORIZATION_FAILED",
    )
    for table_read in ("keys/k", "table", "partitions/0/table"):
        refused(
            http("GET", other + f"/v1/topics/orders-eu/{table_read}", headers=alice),
            403,
            "TOPIC_AUTHORIZATION_FAILED",
        )
    # a DENY on one topic wins over the prefixed ALLOW
    status, answer = as_admin("POST", url + "/v1/topics", {"name": "orders-secret"})
    assert status == 201, answer
    add_acl(
        cluster,
        principal="User:alice",
        operation="ALL",
        permission="DENY",
        resource_type="TOPIC",
        resource_name="orders-secret",
    )
    wait_for_metadata(
        cluster,
        lambda: (
            http("POST", other + "/v1/topics/orders-secret/records", record, headers=alice)[0]
            == 403
        ),
    )
    # the admin (a super user) is unaffected by any of it
    status, answer = as_admin("POST", other + "/v1/topics/orders-secret/records", record)
    assert status == 200, answer
    status, listed = as_admin("GET", url + "/v1/acls?principal=User:alice")
    assert sorted(a["permission"] for a in listed["acls"]) == ["ALLOW", "DENY"]


def test_tokens_work_everywhere_until_the_password_changes(cluster: Cluster) -> None:
    url = cluster.urls[3]
    status, _ = as_admin("POST", url + "/v1/users", {"name": "bob", "password": "pw-b"})
    assert status == 201
    refused(http("POST", url + "/v1/tokens", headers={}), 401, "SASL_AUTHENTICATION_FAILED")

    def issue() -> tuple[int, Any]:
        return http("POST", url + "/v1/tokens", headers=basic("bob", "pw-b"))

    wait_for_metadata(cluster, lambda: issue()[0] == 201)
    status, token = issue()
    assert status == 201, token
    assert token["principal"] == "User:bob" and token["expires_at"] > time.time() * 1000
    for node in [*cluster.urls.values(), *cluster.quorum.urls.values()]:
        # authenticated everywhere once the node has bob's credentials (metadata reaches
        # each node in its own time: a loaded CI machine showed a controller a moment
        # behind the broker that issued the token); bob may describe nothing, so lists
        # are empty
        def listed(node: str = node) -> tuple[int, Any]:
            return http("GET", node + "/v1/topics", headers=bearer(token["token"]))

        wait_for_metadata(cluster, lambda: listed()[0] == 200)
        status, answer = listed()
        assert status == 200 and answer["topics"] == [], (node, answer)
    status, _ = as_admin("POST", url + "/v1/users", {"name": "bob", "password": "pw-b2"})
    assert status == 201
    wait_for_metadata(
        cluster,
        lambda: http("GET", url + "/v1/topics", headers=bearer(token["token"]))[0] == 401,
    )
    refused(
        http("GET", url + "/v1/topics", headers=basic("bob", "pw-b")),
        401,
        "SASL_AUTHENTICATION_FAILED",
    )
    assert http("GET", url + "/v1/topics", headers=basic("bob", "pw-b2"))[0] == 200
    status, _ = as_admin("DELETE", url + "/v1/users/bob")
    assert status == 204
    wait_for_metadata(
        cluster, lambda: http("GET", url + "/v1/topics", headers=basic("bob", "pw-b2"))[0] == 401
    )


def test_groups_need_their_own_acl(cluster: Cluster) -> None:
    url = cluster.urls[2]
    status, _ = as_admin("POST", url + "/v1/users", {"name": "carol", "password": "pw-c"})
    assert status == 201
    as_admin("POST", url + "/v1/topics", {"name": "events"})
    add_acl(
        cluster,
        principal="User:carol",
        operation="READ",
        resource_type="TOPIC",
        resource_name="events",
    )
    carol = basic("carol", "pw-c")
    join = {"topics": ["events"]}
    wait_for_metadata(
        cluster,
        lambda: http("POST", url + "/v1/groups/g1/members", join, headers=carol)[0] == 403,
    )
    refused(
        http("POST", url + "/v1/groups/g1/members", join, headers=carol),
        403,
        "GROUP_AUTHORIZATION_FAILED",
    )
    add_acl(
        cluster,
        principal="User:carol",
        operation="READ",
        resource_type="GROUP",
        resource_name="g",
        pattern_type="PREFIXED",
    )
    wait_for_metadata(
        cluster,
        lambda: http("POST", url + "/v1/groups/g1/members", join, headers=carol)[0] == 200,
    )
    refused(
        http("POST", url + "/v1/groups/other/members", join, headers=carol),
        403,
        "GROUP_AUTHORIZATION_FAILED",
    )


def test_forwarding_cannot_escalate(cluster: Cluster) -> None:
    """A client's request passed on by a node is authorized as that client where it lands:
    a broker that received it signed, acting for User:mallory, refuses it."""
    for url in [cluster.urls[1], cluster.quorum.urls[1]]:
        refused(
            signed_http(
                "POST", url + "/v1/topics", {"name": "escalated"}, principal="User:mallory"
            ),
            403,
            "TOPIC_AUTHORIZATION_FAILED",
        )
        refused(
            signed_http("DELETE", url + "/v1/topics/orders-eu", principal="User:mallory"),
            403,
            "TOPIC_AUTHORIZATION_FAILED",
        )
    # the same node call acting for itself is the cluster (it may)
    status, _ = signed_http("GET", cluster.urls[1] + "/v1/topics/orders-eu")
    assert status == 200


def test_the_audit_log_names_who_did_what(cluster: Cluster) -> None:
    logs = "".join(path.read_text(errors="replace") for path in cluster.root.glob("*.log"))
    for event in (
        "acl_created",
        "user_credential_set",
        "authorization_denied",
        "authentication_failed",
        "token_issued",
        "user_deleted",
    ):
        assert f'"event":"{event}"' in logs, event
    assert '"principal":"User:admin"' in logs
    assert "pw-a" not in logs and "admin-password-1" not in logs


def test_the_python_client_and_the_cli_authenticate(cluster: Cluster) -> None:
    bootstrap = list(cluster.urls.values())
    admin = Credentials(*ADMIN)
    with SyncAdmin(bootstrap, credentials=admin) as client:
        client.create_topic("client-topic", partitions=1)
        token = client.create_token()["token"]
    with SyncProducer(bootstrap, credentials=Credentials(token=token)) as producer:
        sent = producer.send("client-topic", b"hello", key=b"k").result()
    with SyncConsumer(
        bootstrap, credentials=admin, group_id="cli-group", auto_offset_reset="earliest"
    ) as consumer:
        consumer.subscribe(["client-topic"])
        deadline = time.monotonic() + 20
        values: list[bytes] = []
        while not values and time.monotonic() < deadline:
            values = [r.value for r in consumer.poll(1000)]
    assert sent.offset == 0 and values == [b"hello"]

    env = {
        **os.environ,
        "KRAFTLITE_BOOTSTRAP": bootstrap[0],
        "KRAFTLITE_USER": ADMIN[0],
        "KRAFTLITE_PASSWORD": ADMIN[1],
    }

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kraftlite", *args],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    made = cli("users", "create", "dan", KRAFTLITE_NEW_USER_PASSWORD="pw-d")
    assert made.returncode == 0, made.stderr
    added = cli(
        "acls",
        "add",
        "--principal",
        "User:dan",
        "--operation",
        "READ",
        "--resource-type",
        "TOPIC",
        "--resource-name",
        "client-",
        "--pattern-type",
        "PREFIXED",
        "--output",
        "json",
    )
    assert added.returncode == 0, added.stderr
    listed = cli("acls", "list", "--principal", "User:dan", "--output", "json")
    assert json.loads(listed.stdout)[0]["resource_name"] == "client-"
    quota = cli("quotas", "set", "User:dan", "--producer-byte-rate", "1048576")
    assert quota.returncode == 0 and json.loads(quota.stdout)["producer_byte_rate"] == 1048576
    dan = {"KRAFTLITE_USER": "dan", "KRAFTLITE_PASSWORD": "pw-d"}
    deadline = time.monotonic() + 10
    while (shown := cli("topics", "list", "--output", "json", **dan)).returncode != 0:
        assert time.monotonic() < deadline, shown.stderr
        time.sleep(0.2)
    assert [t["name"] for t in json.loads(shown.stdout)] == ["client-topic"]
    issued = cli("token", **dan)
    assert issued.returncode == 0 and issued.stdout.startswith("kl1.")
    by_token = cli(
        "topics",
        "list",
        "--output",
        "json",
        KRAFTLITE_USER="",
        KRAFTLITE_PASSWORD="",
        KRAFTLITE_TOKEN=issued.stdout.strip(),
    )
    assert by_token.returncode == 0, by_token.stderr
    denied = cli("topics", "delete", "client-topic", **dan)
    assert denied.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in denied.stderr
    wrong = cli("topics", "list", KRAFTLITE_PASSWORD="nope")
    assert wrong.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in wrong.stderr
    removed = cli("acls", "remove", "--principal", "User:dan", "--output", "json")
    assert removed.returncode == 0 and len(json.loads(removed.stdout)) == 1


def metered_writer(cluster: Cluster, topic: str, user: str, password: str, rate: int) -> None:
    """A topic of one partition, and a user who may WRITE it with a producer byte rate."""
    url = cluster.urls[1]
    as_admin("POST", url + "/v1/topics", {"name": topic, "partitions": 1})
    as_admin("POST", url + "/v1/users", {"name": user, "password": password})
    add_acl(
        cluster, principal=f"User:{user}", operation="WRITE", resource_type="TOPIC",
        resource_name=topic,
    )  # fmt: skip
    status, quota = as_admin(
        "POST", url + "/v1/quotas", {"principal": f"User:{user}", "producer_byte_rate": rate}
    )
    assert status == 200 and quota["producer_byte_rate"] == rate


def test_quotas_throttle_and_recover(cluster: Cluster) -> None:
    url = cluster.urls[1]
    metered_writer(cluster, "metered", "erin", "pw-e", 50_000)
    body = json.dumps({"records": [{"value": "x" * 20_000}]}).encode()

    def produce() -> int:
        request = urllib.request.Request(
            url + "/v1/topics/metered/records?acks=1",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", **basic("erin", "pw-e")},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
            return int(response.headers.get("X-Kraftlite-Throttle-Time-Ms", "0"))

    wait_for_brokers_metadata(cluster, basic(*ADMIN))  # erin and her quota on each broker
    # 20 KB a request at 50 KB/s with a 50 KB burst: held back within a few requests (more
    # on a machine slow enough to refill the bucket between two)
    throttles = [produce()]
    while max(throttles) == 0 and len(throttles) < 40:
        throttles.append(produce())
    assert throttles[0] == 0 and max(throttles) > 0, throttles
    # each throttled answer was held back, so the client stayed near its rate; later the
    # bucket refills and nothing is held back
    time.sleep(1.5)
    assert produce() == 0
    status, _ = as_admin(
        "POST", url + "/v1/quotas", {"principal": "User:erin", "producer_byte_rate": None}
    )
    assert status == 200
    wait_for_metadata(cluster, lambda: all(produce() == 0 for _ in range(4)))


def test_compressed_kafka_batches_are_authorized_first_and_charged_what_they_store(
    cluster: Cluster,
) -> None:
    """Kafka batches over HTTP (issue 29): a writer without WRITE is refused before its
    batch is decompressed; 300 KB of zeros in a zstd batch of a few hundred bytes is
    charged its 300 KB (issue 24's rule), by the leader it was sent to and by a broker that
    relayed it there (which reads what the leader says it came to)."""
    url = cluster.urls[1]
    metered_writer(cluster, "metered-zstd", "zoe", "pw-z", 100_000)
    as_admin("POST", url + "/v1/users", {"name": "zack", "password": "pw-z"})
    batch = kafka_records.encode_batch(
        [kafka_records.KafkaRecord(0, int(time.time() * 1000), None, bytes(300_000), [])],
        compression=kafka_records.Compression.ZSTD,
    )
    assert len(batch) < 1_000

    def produce(broker_id: int, user: str) -> tuple[int, str]:
        request = urllib.request.Request(
            f"{cluster.urls[broker_id]}/v1/topics/metered-zstd/partitions/0/records?acks=1",
            data=batch,
            method="POST",
            headers={
                "Content-Type": "application/vnd.kraftlite.kafka-batches",
                **basic(user, "pw-z"),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.headers.get("X-Kraftlite-Throttle-Time-Ms", "0")
        except urllib.error.HTTPError as refused:
            return refused.code, ""

    wait_for_brokers_metadata(cluster, basic(*ADMIN))  # zoe, zack and the quota on each
    _, described = http("GET", f"{url}/v1/topics/metered-zstd", headers=basic(*ADMIN))
    leader = described["partitions"][0]["leader"]
    other = next(b for b in cluster.urls if b != leader)
    assert produce(leader, "zack")[0] == 403
    for broker_id in (leader, other):
        status, throttle_ms = produce(broker_id, "zoe")
        # ~200 KB over a 100 KB/s quota: held back about two seconds
        assert status == 200 and int(throttle_ms) > 1_000, (broker_id, throttle_ms)


def _raw_exchange(url: str, head: bytes, *, wait_s: float = 10) -> bytes:
    """Send a request head (and no more) on a raw socket; what came back before the server
    closed or `wait_s` passed."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(head)
        answer = b""
        deadline = time.monotonic() + wait_s
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def test_no_body_is_buffered_before_the_caller_is_known(cluster: Cluster) -> None:
    """The review's 95 MB body sent without credentials: refused from the headers, at once,
    with the body never read (it is never even sent here)."""
    url = cluster.urls[1]
    started = time.monotonic()
    answer = _raw_exchange(
        url,
        b"POST /v1/topics/orders-eu/records HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    forged = "v2 broker-1 {} n {} {}".format(int(time.time() * 1000), "a" * 64, "b" * 64)
    answer = _raw_exchange(
        url,
        f"POST /v1/internal/replica-fetch HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n"
        f"X-Kraftlite-Cluster-Auth: {forged}\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    assert time.monotonic() - started < 8  # not waiting out the read timeout for a body


def test_malformed_credentials_are_401_not_500(cluster: Cluster) -> None:
    url = cluster.urls[1]
    head = b"GET /v1/topics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic \xc3\xa9\xc3\xa9==\r\n\r\n"
    assert _raw_exchange(url, head).startswith(b"HTTP/1.1 401")
    mac = "é" * 64
    head = (
        f"GET /v1/internal/offsets HTTP/1.1\r\nHost: x\r\n"
        f"X-Kraftlite-Cluster-Auth: v2 n {int(time.time() * 1000)} n {mac} {mac}\r\n\r\n"
    ).encode()
    assert _raw_exchange(url, head).startswith(b"HTTP/1.1 403")


def test_names_are_checked_before_they_are_authorized(cluster: Cluster) -> None:
    """`mine%2F..%2Fvictim` was authorized as a `mine` topic and reached `victim`."""
    for path in (
        "/v1/topics/orders-eu%2F..%2Forders-secret/configs",
        "/v1/topics/orders-eu%2F..%2F..%2Fusers%2Fbob",
    ):
        status, answer = http("PUT", cluster.urls[1] + path, {"configs": {}}, headers=basic(*ADMIN))
        assert status in {400, 404, 405}, answer
        assert error_code(answer) in {"INVALID_TOPIC_EXCEPTION", "INVALID_REQUEST"}, answer


def test_a_token_cannot_renew_itself(cluster: Cluster) -> None:
    status, token = as_admin("POST", cluster.urls[1] + "/v1/tokens")
    assert status == 201, token
    refused(
        http("POST", cluster.urls[1] + "/v1/tokens", headers=bearer(token["token"])),
        401,
        "SASL_AUTHENTICATION_FAILED",
    )


def test_a_misspelt_acl_filter_deletes_nothing(cluster: Cluster) -> None:
    before = as_admin("GET", cluster.urls[1] + "/v1/acls")[1]["acls"]
    assert before
    for bad in ({"permision": "DENY"}, {"operation": "write"}, {"principal": "alice"}, {}):
        status, answer = as_admin("DELETE", cluster.urls[1] + "/v1/acls", bad)
        assert status == 400, (bad, answer)
    assert as_admin("GET", cluster.urls[1] + "/v1/acls")[1]["acls"] == before


def test_metrics_need_describe_cluster_and_head_works(cluster: Cluster) -> None:
    url = cluster.urls[1]
    for node in (url, cluster.quorum.urls[1]):  # brokers and controllers alike
        refused(http("GET", node + "/metrics"), 401, "SASL_AUTHENTICATION_FAILED")
        request = urllib.request.Request(node + "/metrics", headers=basic(*ADMIN))
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200 and b"kraftlite_" in response.read()
    as_admin("POST", url + "/v1/users", {"name": "no-describe", "password": "pw-nd"})
    for node in (url, cluster.quorum.urls[1]):  # authenticated, but no DESCRIBE CLUSTER
        deadline = time.monotonic() + 20
        while True:  # the new user reaches every node's metadata
            answer = http("GET", node + "/metrics", headers=basic("no-describe", "pw-nd"))
            if answer[0] != 401 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        refused(answer, 403, "CLUSTER_AUTHORIZATION_FAILED")
    head = urllib.request.Request(url + "/healthz", method="HEAD")
    with urllib.request.urlopen(head, timeout=10) as response:
        assert response.status == 200


def test_group_offsets_show_only_topics_the_caller_may_describe(cluster: Cluster) -> None:
    url = cluster.urls[1]
    as_admin("POST", url + "/v1/topics", {"name": "hidden"})
    as_admin("POST", url + "/v1/topics/hidden/records", {"records": [{"value": "x"}] * 3})
    status, _ = as_admin(
        "POST",
        url + "/v1/groups/shared-g/offsets",
        {"offsets": [{"topic": "hidden", "partition": 0, "offset": 1, "metadata": "private"}]},
    )
    assert status == 204
    as_admin("POST", url + "/v1/users", {"name": "frank", "password": "pw-f"})
    add_acl(
        cluster,
        principal="User:frank",
        operation="ALL",
        resource_type="GROUP",
        resource_name="shared-g",
    )
    frank = basic("frank", "pw-f")

    def offsets() -> tuple[int, Any]:
        return http("GET", url + "/v1/groups/shared-g/offsets", headers=frank)

    wait_for_metadata(cluster, lambda: offsets()[0] == 200)
    assert offsets()[1]["offsets"] == []  # the commit exists; frank may not see its topic
    assert as_admin("GET", url + "/v1/groups/shared-g/offsets")[1]["offsets"][0]["metadata"] == (
        "private"
    )


def test_the_elastic_cluster_needs_alter_on_the_cluster(cluster: Cluster) -> None:
    """Moving replicas, draining or removing brokers, electing leaders, changing the
    quorum, throttling: ALTER (or ALTER_CONFIGS) on the cluster, checked before the body is
    looked at; listing moves needs DESCRIBE; nothing changes for a refused caller."""
    url = cluster.urls[2]
    status, created = as_admin("POST", url + "/v1/users", {"name": "mover", "password": "pw-m"})
    assert status == 201, created
    mover = basic("mover", "pw-m")
    wait_for_metadata(cluster, lambda: http("GET", url + "/v1/topics", headers=mover)[0] == 200)
    # controller 1 authenticates mover itself: once it applied the user (403, not 401)
    quorum = cluster.quorum.urls[1] + "/v1/quorum"
    wait_for_metadata(cluster, lambda: http("GET", quorum, headers=mover)[0] == 403)
    status, answer = as_admin("POST", url + "/v1/topics", {"name": "elastic", "partitions": 1})
    assert status == 201, answer
    before = as_admin("GET", url + "/v1/topics/elastic")[1]["partitions"]
    booted = [http("GET", u + "/readyz")[1]["boot_id"] for u in (url, cluster.quorum.urls[1])]
    move = {"partitions": [{"topic": "elastic", "partition": 0, "replicas": [3, 2, 1]}]}
    for method, path, body in [
        ("POST", "/v1/reassignments", move),
        ("GET", "/v1/reassignments", None),
        ("POST", "/v1/cluster/rebalance", {"dry_run": True}),
        ("POST", "/v1/brokers/1/drain", None),
        ("DELETE", "/v1/brokers/1", None),
        ("PUT", "/v1/brokers/1/configs", {"configs": {"replication.throttled.rate": 1}}),
        ("PATCH", "/v1/topics/elastic", {"replication_factor": 1}),
        ("POST", "/v1/elections", {"type": "preferred"}),
        ("POST", "/v1/quorum/voters", {"id": 9, "raft": "127.0.0.1:1", "url": "http://h:1"}),
        ("DELETE", "/v1/quorum/voters/1", None),
        ("GET", "/v1/quorum", None),
        ("POST", "/v1/node/restart", None),  # each node its own (api/restart.py)
    ]:
        for target in (url, cluster.quorum.urls[1]):  # a broker passes it on; a controller
            answer = http(method, target + path, body, headers=mover)
            refused(answer, 403, "CLUSTER_AUTHORIZATION_FAILED")
    # the broker list is for any authenticated client, as Kafka's Metadata
    status, listed = http("GET", url + "/v1/brokers", headers=mover)
    assert status == 200 and {b["id"] for b in listed["brokers"]} == {1, 2, 3}, listed
    assert as_admin("GET", url + "/v1/topics/elastic")[1]["partitions"] == before
    time.sleep(3)  # a restart taken would have shown by now (the node stops, then starts)
    assert [http("GET", u + "/readyz")[1]["boot_id"] for u in (url, cluster.quorum.urls[1])] == (
        booted
    )  # neither restarted
    assert all(b["state"] == "active" for b in listed["brokers"])
    # allowed: the same move goes through
    add_acl(
        cluster,
        principal="User:mover",
        operation="ALTER",
        resource_type="CLUSTER",
        resource_name="kafka-cluster",
        pattern_type="LITERAL",
    )
    wait_for_metadata(
        cluster,
        lambda: http("POST", url + "/v1/reassignments", move, headers=mover)[0] == 202,
    )


def _authenticates(url: str, headers: dict[str, str]) -> bool:
    return http("GET", url + "/v1/topics", headers=headers)[0] != 401


def test_producer_ids_are_for_writers_and_each_is_new(cluster: Cluster) -> None:
    """POST /v1/producer-ids (an idempotent producer's InitProducerId): no id for a
    stranger, nor for a user that may write nowhere (issue 24, as Kafka's KIP-679); a
    writer gets a new one each time, on any broker."""
    refused(http("POST", cluster.urls[1] + "/v1/producer-ids"), 401, "SASL_AUTHENTICATION_FAILED")
    status, _ = as_admin(
        "POST", cluster.urls[1] + "/v1/users", {"name": "dave", "password": "pw-d"}
    )
    assert status == 201
    for url in cluster.urls.values():  # the new user has reached every broker
        wait_for_metadata(cluster, lambda url=url: _authenticates(url, basic("dave", "pw-d")))
    refused(
        http("POST", cluster.urls[1] + "/v1/producer-ids", headers=basic("dave", "pw-d")),
        403,
        "CLUSTER_AUTHORIZATION_FAILED",
    )
    add_acl(
        cluster,
        principal="User:dave",
        operation="WRITE",
        resource_type="TOPIC",
        resource_name="dave-",
        pattern_type="PREFIXED",
    )
    for url in cluster.urls.values():
        wait_for_metadata(
            cluster,
            lambda url=url: (
                http("POST", url + "/v1/producer-ids", headers=basic("dave", "pw-d"))[0] == 201
            ),
        )
    given = set()
    for url in cluster.urls.values():
        for _ in range(2):
            status, answer = http("POST", url + "/v1/producer-ids", headers=basic("dave", "pw-d"))
            assert status == 201, answer
            assert answer["producer_epoch"] == 0
            given.add(answer["producer_id"])
    assert len(given) == 2 * len(cluster.urls)
