"""Three `kraftlite controller` processes: forwarding, kill -9, restart, majority loss."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.processes import ControllerQuorum, http, http_retry, signed_http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[ControllerQuorum]:
    # a short broker session: the test waits for a silent broker to be fenced
    controllers = ControllerQuorum(tmp_path, config={"broker.session.timeout.ms": 3000})
    controllers.start()
    try:
        yield controllers
    finally:
        controllers.stop()


def topics(url: str) -> list[str]:
    status, body = http("GET", url + "/v1/topics")
    assert status == 200
    return [t["name"] for t in body["topics"]]


def wait_for(condition, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def register_live_broker(url: str, broker_id: int) -> None:
    status, reg = http_retry(
        "POST",
        url + "/v1/internal/brokers",
        {
            "v": 1,
            "broker_id": broker_id,
            "incarnation_id": uuid.uuid4().hex,
            "url": "http://127.0.0.1:1",
        },
        signed=True,
    )
    assert status == 200, reg
    status, beat = http_retry(
        "POST",
        url + f"/v1/internal/brokers/{broker_id}/heartbeat",
        {"v": 1, "broker_epoch": reg["broker_epoch"], "metadata_version": reg["broker_epoch"]},
        signed=True,
    )
    assert status == 200 and not beat["fenced"], beat


def test_quorum_admin_and_failover(quorum: ControllerQuorum) -> None:
    leader = quorum.leader()
    follower = next(n for n in quorum.urls if n != leader)

    status, body = http("GET", quorum.urls[follower] + "/v1/quorum")
    assert status == 200
    assert body["leader_id"] == leader
    assert sorted(v["id"] for v in body["voters"]) == [1, 2, 3]

    # brokers follow the metadata log by offset from any controller. Once every controller
    # has registered its URL nothing changes: no broker exists whose session could expire.
    def follower_log(after: int, wait_ms: int = 0) -> dict:
        status, answer = signed_http(
            "GET",
            quorum.urls[follower]
            + f"/v1/internal/metadata?v=1&after_version={after}&max_wait_ms={wait_ms}",
        )
        assert status == 200, answer
        return answer

    def controllers_known() -> bool:
        answer = follower_log(0)
        urls = {}
        for batch in answer["batches"]:
            for record in batch["records"]:
                if record["type"] == "RegisterControllerRecord":
                    urls[record["data"]["node_id"]] = record["data"]["url"]
        return answer["snapshot"] is None and len(urls) == 3

    wait_for(controllers_known)
    answer = follower_log(0)
    version = answer["version"]
    # the batches are the committed log: consecutive versions from the one asked after
    assert [b["expected_version"] for b in answer["batches"]] == list(range(version))
    assert follower_log(2)["batches"] == answer["batches"][2:]
    started = time.monotonic()
    same = follower_log(version, wait_ms=500)
    assert same["version"] == version and same["batches"] == []
    assert time.monotonic() - started >= 0.4
    for bad in (
        "after_version=x",
        "after_version=1",
        "v=1&after_version=-2",
        "v=2&after_version=0",
    ):
        status, refused = signed_http("GET", quorum.urls[follower] + "/v1/internal/metadata?" + bad)
        assert (status, refused["error_code"]) == (400, "INVALID_REQUEST"), bad

    # a broker registers through a follower (forwarded), then heartbeats until unfenced
    register_live_broker(quorum.urls[follower], 1)

    # topic admin through a follower is forwarded to the active controller
    status, created = http_retry(
        "POST",
        quorum.urls[follower] + "/v1/topics",
        {"name": "orders", "partitions": 2, "replication_factor": 1},
    )
    assert status == 201, created
    assert [p["leader"] for p in created["partitions"]] == [1, 1]
    leader = quorum.leader()
    follower = next(n for n in quorum.urls if n != leader)
    status, refused = http(
        "POST",
        quorum.urls[follower] + "/v1/topics",
        {"name": "orders2"},
        headers={"X-Kraftlite-No-Forward": "1"},
    )
    assert status == 503
    assert refused["error_code"] == "NOT_CONTROLLER"
    assert refused["leader_url"] == quorum.urls[leader]
    status, bad = http_retry("POST", quorum.urls[leader] + "/v1/topics", {"name": "bad name"})
    assert (status, bad["error_code"]) == (400, "INVALID_TOPIC_EXCEPTION")
    for method, path, body, code in [
        ("POST", "/v1/internal/alter-partition", {"new_isr": [True]}, 400),  # no version
        ("POST", "/v1/internal/alter-partition", {"v": 1, "broker_id": 1, "broker_epoch": 1}, 400),
        (
            "POST",
            "/v1/internal/alter-partition",
            {
                "v": 1,
                "broker_id": 1,
                "broker_epoch": 1,
                "partitions": [
                    {
                        "topic_id": "t",
                        "partition": 0,
                        "leader_epoch": 0,
                        "partition_epoch": 0,
                        "new_isr": [True],
                    }
                ],
            },
            400,
        ),
        ("POST", "/v1/internal/brokers/" + "9" * 5000 + "/heartbeat", {"broker_epoch": 1}, 400),
        ("GET", "/v1/no-such-route", None, 404),
        ("PATCH", "/v1/topics", None, 405),
    ]:
        send = signed_http if path.startswith("/v1/internal/") else http
        status, bad = send(method, quorum.urls[leader] + path, body)
        assert status == code and bad["status"] == code, (path, bad)
        assert bad["error_code"] == "INVALID_REQUEST"

    # kill -9 the active controller: the others elect a new one and keep the metadata
    quorum.processes[leader].kill()
    survivors = [n for n in quorum.urls if n != leader]
    new_leader = quorum.leader(among=survivors)
    assert new_leader != leader
    assert topics(quorum.urls[new_leader]) == ["orders"]
    status, body = http_retry(
        "POST",
        quorum.urls[new_leader] + "/v1/topics",
        {"name": "after-failover", "replication_factor": 1},
    )
    assert status == 201, body

    # the killed controller comes back and catches up
    quorum.processes[leader].start()
    wait_for(lambda: _safe_topics(quorum.urls[leader]) == ["after-failover", "orders"])

    # the broker stops heartbeating: fenced after its session, leadership gone
    wait_for(lambda: _fenced(quorum.urls[new_leader], 1), timeout_s=30)
    status, topic = http("GET", quorum.urls[new_leader] + "/v1/topics/orders")
    assert [p["leader"] for p in topic["partitions"]] == [-1, -1]

    # majority lost: a write fails with a clear error within its timeout, not a hang
    other = next(n for n in survivors if n != new_leader)
    quorum.processes[other].kill()
    quorum.processes[leader].kill()
    started = time.monotonic()
    status, body = signed_http(
        "POST",
        quorum.urls[new_leader] + "/v1/internal/brokers",
        {"v": 1, "broker_id": 2, "incarnation_id": "lost", "url": "http://127.0.0.1:2"},
        timeout=30,
    )
    assert status in {503, 504}, body
    assert body["error_code"] in {"NOT_CONTROLLER", "REQUEST_TIMED_OUT"}
    assert time.monotonic() - started < 20
    # and recovers when the majority is back
    quorum.processes[other].start()
    quorum.processes[leader].start()
    final = quorum.leader()
    assert topics(quorum.urls[final]) == ["after-failover", "orders"]


def _safe_topics(url: str) -> list[str] | None:
    try:
        return topics(url)
    except (OSError, AssertionError):
        return None


def _fenced(url: str, broker_id: int) -> bool:
    status, body = http("GET", url + "/v1/cluster")
    return status == 200 and any(b["id"] == broker_id and b["fenced"] for b in body["brokers"])


def test_all_three_killed_right_after_writes_come_back_with_everything(
    quorum: ControllerQuorum,
) -> None:
    acknowledged: list[str] = []
    for round_number in range(3):
        leader = quorum.leader()
        register_live_broker(quorum.urls[leader], 1)
        for i in range(20):
            name = f"t{round_number}-{i}"
            status, body = http_retry(
                "POST", quorum.urls[leader] + "/v1/topics", {"name": name, "replication_factor": 1}
            )
            assert status == 201, body
            acknowledged.append(name)
        for process in quorum.processes.values():  # right after the last acknowledgement
            process.kill()
        quorum.start()
        quorum.leader()
        for url in quorum.urls.values():
            wait_for(lambda url=url: _safe_topics(url) == sorted(acknowledged))
