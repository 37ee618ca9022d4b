"""Issue 12's attacks on the internal plane, replayed by a stranger with curl against a real
cluster (3 controllers, 3 brokers, each a process), then the cluster checked unharmed:
no broker registered or fenced, no ISR or high watermark moved, acks=all still needs the
real replicas, internal topics untouched.
"""

from __future__ import annotations

import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from kraftlite.api.internal_auth import ClusterAuth, acting_for
from kraftlite.clock import SystemClock
from kraftlite.security.cluster_auth import (
    CLIENT_HOST_HEADER,
    HEADER,
    PRINCIPAL_HEADER,
    Signer,
    derive_key,
)
from tests.harness.observe import create, describe, error_code, wait_for_full_isr
from tests.harness.processes import CLUSTER_SECRET, Cluster, http, signed_http

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("internal-plane"))
    running.start()
    try:
        create(running, "orders", **{"min.insync.replicas": 2})
        wait_for_full_isr(running, "orders")
        yield running
    finally:
        running.stop()


def _controller(cluster: Cluster) -> str:
    return cluster.quorum.urls[cluster.quorum.leader()]


def _state(cluster: Cluster) -> dict[str, Any]:
    """What an attack must not change."""
    status, view = http("GET", _controller(cluster) + "/v1/cluster")
    assert status == 200, view
    partition = describe(cluster, "orders")["partitions"][0]
    return {
        "brokers": sorted((b["id"], b["url"], b["fenced"]) for b in view["brokers"]),
        "isr": sorted(partition["isr"]),
        "leader": partition["leader"],
        "leader_epoch": partition["leader_epoch"],
        "high_watermark": partition["high_watermark"],
    }


def _refused(status: int, body: Any, code: str = "CLUSTER_AUTHORIZATION_FAILED") -> None:
    assert status == 403, body
    assert error_code(body) == code, body


def test_a_stranger_cannot_act_as_a_broker(cluster: Cluster) -> None:
    before = _state(cluster)
    controller = _controller(cluster)
    broker_epoch = {
        b["id"]: b for b in http("GET", controller + "/v1/cluster")[1]["brokers"]
    }  # public: it is all the old check relied on
    assert broker_epoch
    topic = describe(cluster, "orders")
    partition = topic["partitions"][0]
    attacks: list[tuple[str, str, Any]] = [
        # a fake broker that would get new replicas
        (
            "POST",
            "/v1/internal/brokers",
            {"v": 1, "broker_id": 7, "incarnation_id": "x", "url": "http://127.0.0.1:1"},
        ),
        # broker 1 re-registered under an address the stranger chose
        (
            "POST",
            "/v1/internal/brokers",
            {"v": 1, "broker_id": 1, "incarnation_id": "y", "url": "http://127.0.0.1:2"},
        ),
        # a forged shutdown heartbeat that would fence broker 2
        ("POST", "/v1/internal/brokers/2/heartbeat", {"broker_epoch": 0, "want_shutdown": True}),
        # forged AlterPartition shrinking the ISR to the leader alone
        (
            "POST",
            "/v1/internal/alter-partition",
            {
                "broker_id": partition["leader"],
                "broker_epoch": 0,
                "topic_id": topic.get("topic_id", ""),
                "partition": 0,
                "leader_epoch": partition["leader_epoch"],
                "partition_epoch": 0,
                "new_isr": [partition["leader"]],
            },
        ),
        ("GET", "/v1/internal/metadata?v=1&after_version=-1", None),
        # a forged report that broker 2 is dead (the controller would probe it; a forger
        # must not even make it look)
        (
            "POST",
            "/v1/internal/brokers/2/unreachable",
            {"v": 1, "reporter_id": 1, "reporter_epoch": 0, "suspect_epoch": 0},
        ),
    ]
    for method, path, body in attacks:
        for url in cluster.quorum.urls.values():
            status, answer = http(method, url + path, body)
            _refused(status, answer)
    # the brokers' internal endpoints: a forged follower fetch claiming to have caught up
    # (it moved the high watermark so acks=all was answered with one real copy)
    forged_fetch = {
        "broker_id": 2,
        "broker_epoch": 0,
        "partitions": [{"topic_id": "x", "partition": 0, "fetch_offset": 10**6}],
    }
    for url in cluster.urls.values():
        _refused(*http("POST", url + "/v1/internal/replica-fetch", forged_fetch))
        _refused(*http("GET", url + "/v1/internal/offsets?topic=orders"))
        _refused(*http("GET", url + "/v1/internal/groups"))  # every broker's groups
        _refused(*http("GET", url + "/v1/internal/stats"))
    assert _state(cluster) == before


def _signed_headers(
    method: str, path: str, body: bytes, secret: str = CLUSTER_SECRET, principal: str = ""
) -> dict[str, str]:
    signer = Signer(derive_key(secret, "internal http"), "mallory")
    headers = {
        "Content-Type": "application/json",
        HEADER: signer.header(
            method,
            path,
            body,
            now_ms=SystemClock().now_ms(),
            nonce=secrets.token_hex(8),
            principal=acting_for(principal, "127.0.0.1"),
        ),
    }
    if principal:
        headers |= {PRINCIPAL_HEADER: principal, CLIENT_HOST_HEADER: "127.0.0.1"}
    return headers


def _raw(method: str, url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(url + path, data=body or None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, orjson.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        raw = error.read()
        error.close()
        return error.code, orjson.loads(raw) if raw else None


def test_signatures_must_be_made_with_the_secret_fresh_and_unused(cluster: Cluster) -> None:
    url = cluster.urls[1]
    path = "/v1/internal/offsets?topic=orders"
    # the wrong secret
    _refused(
        *_raw("GET", url, path, b"", _signed_headers("GET", path, b"", "not-the-secret-at-all"))
    )
    # a garbage header
    _refused(*_raw("GET", url, path, b"", {HEADER: "v1 broker-1 1 2 " + "0" * 64}))
    # signed for another path
    _refused(*_raw("GET", url, path, b"", _signed_headers("GET", "/v1/internal/offsets", b"")))
    # a good signature is good once: the same request replayed is refused
    headers = _signed_headers("GET", path, b"")
    status, answer = _raw("GET", url, path, b"", headers)
    assert status == 200, answer
    _refused(*_raw("GET", url, path, b"", headers))
    # a node's call made for a client principal is that client's, never the cluster's
    client_headers = _signed_headers("GET", path, b"", principal="User:mallory")
    _refused(*_raw("GET", url, path, b"", client_headers))


def test_forwarding_headers_from_a_client_are_refused_at_once(cluster: Cluster) -> None:
    url = cluster.urls[1]
    for header, value in [
        ("X-Kraftlite-Forwarded", "1"),
        ("X-Kraftlite-Metadata-Version", str(10**9)),  # held every request 5 s
        (PRINCIPAL_HEADER, "User:admin"),
    ]:
        started = time.monotonic()
        status, answer = http("GET", url + "/v1/topics/orders", headers={header: value})
        _refused(status, answer)
        assert time.monotonic() - started < 4  # answered, not held until a metadata wait ends


def test_registration_urls_must_be_plain_node_urls(cluster: Cluster) -> None:
    """Even a node's call cannot register a URL that points requests somewhere odd."""
    before = _state(cluster)
    controller = _controller(cluster)
    for bad in [
        "http://127.0.0.1:9999/steal?x=",
        "http://user:pw@127.0.0.1:9999",
        "file:///etc/passwd",
        "127.0.0.1:9999",
    ]:
        body = orjson.dumps({"v": 1, "broker_id": 9, "incarnation_id": "z", "url": bad})
        status, answer = _raw(
            "POST",
            controller,
            "/v1/internal/brokers",
            body,
            _signed_headers("POST", "/v1/internal/brokers", body),
        )
        assert status == 400, answer
        assert error_code(answer) == "INVALID_REQUEST", answer
    assert _state(cluster) == before


def test_clients_cannot_touch_internal_topics(cluster: Cluster) -> None:
    controller = _controller(cluster)
    broker = cluster.urls[2]
    # created first by a client with one partition, it left most groups unavailable for good
    for url in (broker, controller):
        status, answer = http(
            "POST",
            url + "/v1/topics",
            {"name": "__consumer_offsets", "internal": True, "partitions": 1},
        )
        assert status == 400, answer
        assert error_code(answer) == "INVALID_TOPIC_EXCEPTION", answer
    # a group member makes the brokers create it, with their own settings
    status, joined = http("POST", broker + "/v1/groups/g1/members", {"topics": ["orders"]})
    assert status == 200, joined
    for url in (broker, controller):
        # retention.ms = 1 erased every group's offsets after a restart
        status, answer = http(
            "PUT", url + "/v1/topics/__consumer_offsets/configs", {"configs": {"retention.ms": 1}}
        )
        _refused(status, answer, "TOPIC_AUTHORIZATION_FAILED")
        status, answer = http(
            "POST", url + "/v1/topics/__consumer_offsets/partitions", {"count": 50}
        )
        _refused(status, answer, "TOPIC_AUTHORIZATION_FAILED")
        status, answer = http("DELETE", url + "/v1/topics/__consumer_offsets")
        _refused(status, answer, "TOPIC_AUTHORIZATION_FAILED")
    for path in (
        "/v1/topics/__consumer_offsets",
        "/v1/topics/__consumer_offsets/partitions/0/records?offset=0",
        "/v1/topics/__consumer_offsets/partitions/0/offsets?at=latest",
        "/v1/topics/__consumer_offsets/table",  # a compacted topic, but the brokers' own
        "/v1/topics/__consumer_offsets/partitions/0/table",
        "/v1/topics/__consumer_offsets/keys/k",
    ):
        _refused(*http("GET", broker + path), "TOPIC_AUTHORIZATION_FAILED")
    status, answer = http(
        "POST",
        broker + "/v1/topics/__consumer_offsets/partitions/0/records",
        {"records": [{"value": "x"}]},
    )
    assert status in {400, 403}, answer
    # clients do not even see it; the brokers' topic is as they made it
    _refused(
        *http("GET", controller + "/v1/topics/__consumer_offsets"), "TOPIC_AUTHORIZATION_FAILED"
    )
    assert "__consumer_offsets" not in str(http("GET", controller + "/v1/topics")[1])
    status, view = signed_http("GET", controller + "/v1/topics/__consumer_offsets")
    assert status == 200, view
    assert len(view["partitions"]) == 10
    assert view["configs"]["cleanup.policy"] == "compact"  # compacted, as Kafka's


async def test_the_replica_stream_answers_only_nodes_and_garbage_closes_only_it(
    cluster: Cluster,
) -> None:
    """The replication stream (a WebSocket per follower) is internal: a stranger's
    handshake is refused before it is upgraded; a node's stream that sends garbage or
    a text message is closed, a request refused whole is answered with its problem and
    the stream kept; the broker and its replicas are untouched."""
    before = _state(cluster)
    url = cluster.urls[1] + "/v1/internal/replica-stream"
    async with aiohttp.ClientSession() as stranger:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await stranger.ws_connect(url)
        assert caught.value.status == 403
    node = ClusterAuth(CLUSTER_SECRET, "mallory", SystemClock())
    async with aiohttp.ClientSession(middlewares=(node.client_middleware(),)) as signed:
        for garbage in (b"\x00\xff not json", b"[1, 2]", b'{"v": 1, "replica_id": "x"}'):
            stream = await signed.ws_connect(url)
            await stream.send_bytes(garbage)
            closed = await stream.receive(timeout=5)
            assert closed.type is aiohttp.WSMsgType.CLOSE, closed
            assert closed.data == aiohttp.WSCloseCode.UNSUPPORTED_DATA
        stream = await signed.ws_connect(url)
        await stream.send_str("hello")
        assert (await stream.receive(timeout=5)).type is aiohttp.WSMsgType.CLOSE
        # a forged follower fetch from a broker epoch that is not registered: refused, kept
        stream = await signed.ws_connect(url)
        forged = {"v": 1, "replica_id": 2, "broker_epoch": 0, "max_wait_ms": 0,
                  "max_bytes": 1024, "session_id": 0, "session_epoch": 0,
                  "partitions": [], "forgotten": []}  # fmt: skip
        for _ in range(2):
            await stream.send_bytes(orjson.dumps(forged))
            answer = await stream.receive(timeout=5)
            assert answer.type is aiohttp.WSMsgType.TEXT, answer
            assert orjson.loads(answer.data)["error_code"] == "STALE_BROKER_EPOCH"
        await stream.close()
    status, _ = http("GET", cluster.urls[1] + "/healthz")
    assert status == 200
    assert _state(cluster) == before


def test_the_cluster_still_works_after_the_attacks(cluster: Cluster) -> None:
    status, answer = http(
        "POST",
        cluster.urls[3] + "/v1/topics/orders/records?acks=all",
        {"records": [{"value": "ok"}]},
    )
    assert status == 200, answer
    assert "offset" in answer["offsets"][0], answer
    wait_for_full_isr(cluster, "orders")
    for url in cluster.urls.values():
        assert http("GET", url + "/readyz")[0] == 200
