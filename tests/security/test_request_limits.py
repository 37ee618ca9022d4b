"""Issue 12's "one request takes a node down", replayed against a real cluster: large JSON
produces are bounded and parsed off the event loop (no lease lapses, no fencing, a small
answer), fetches are capped, far-future timestamps refused.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path

import orjson
import pytest

from kraftlite.clock import SystemClock
from tests.harness.observe import create, error_code, wait_for_full_isr
from tests.harness.processes import Cluster, http

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("limits"))
    running.start()
    try:
        create(running, "events")
        wait_for_full_isr(running, "events")
        yield running
    finally:
        running.stop()


def _post(url: str, body: bytes, timeout: float = 120) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        raw = error.read()
        error.close()
        return error.code, raw


def _log_lines(root: Path, event: str) -> list[str]:
    return [
        line
        for path in root.glob("broker-*.log")
        for line in path.read_text(errors="replace").splitlines()
        if event in line
    ]


def test_a_large_json_produce_neither_stalls_the_broker_nor_floods_the_answer(
    cluster: Cluster,
) -> None:
    """The review's 4 MiB of tiny records: 12.8 s of blocked loop, the broker fenced, a
    137 MB answer. Now parsed on a worker thread; heartbeats and other requests go on.
    """
    body = orjson.dumps({"records": [{"value": "x"}] * 300_000})  # ~4 MiB, 300k records
    url = cluster.urls[1]
    probes: list[float] = []
    done = threading.Event()

    def probe() -> None:  # another client's requests while the large body is parsed
        while not done.is_set():
            started = time.monotonic()
            status, _ = http("GET", url + "/readyz", timeout=30)
            assert status == 200
            probes.append(time.monotonic() - started)
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        status, raw = _post(url + "/v1/topics/events/records?acks=all", body)
    finally:
        done.set()
        prober.join()
    answer = json.loads(raw)
    # one batch of 300k records is over max.message.bytes: every record failed, so the
    # answer is that error, once, with its status
    assert status == 413, answer
    assert error_code(answer) == "MESSAGE_TOO_LARGE"
    assert len(raw) < 2_000, len(raw)
    assert answer["partitions"] == [
        {
            "partition": answer["partitions"][0]["partition"],
            "error_code": "MESSAGE_TOO_LARGE",
            "message": answer["message"],
        }
    ]
    assert probes, "the prober never got an answer"
    assert not _log_lines(cluster.root, "leadership_lease_lapsed")
    assert not _log_lines(cluster.root, '"broker_fenced"')
    # and the broker still takes writes at once
    status, answer = http("POST", url + "/v1/topics/events/records", {"records": [{"value": "ok"}]})
    assert status == 200, answer


def test_json_bodies_over_the_limit_are_refused_before_parsing(cluster: Cluster) -> None:
    """8 MiB and the review's 64 MiB: refused unparsed, while the broker keeps its lease."""
    for records in (700_000, 4_500_000):  # > 8 MiB, then ~64 MiB
        body = b'{"records": [' + b'{"value": "x"},' * records + b'{"value": "x"}]}'
        status, raw = _post(cluster.urls[2] + "/v1/topics/events/records", body)
        assert status == 413, raw[:200]
        assert error_code(json.loads(raw)) == "RECORD_LIST_TOO_LARGE"
    assert not _log_lines(cluster.root, "leadership_lease_lapsed")
    assert not _log_lines(cluster.root, '"broker_fenced"')


def test_a_partition_that_fails_is_named_once(cluster: Cluster) -> None:
    status, answer = http("POST", cluster.urls[1] + "/v1/topics", {"name": "two", "partitions": 2})
    assert status == 201, answer
    big = "y" * 1_100_000  # over the default max.message.bytes
    status, answer = http(
        "POST",
        cluster.urls[1] + "/v1/topics/two/records",
        {"records": [{"value": "a", "partition": 0}] * 3 + [{"value": big, "partition": 1}] * 3},
    )
    assert status == 200, answer
    assert [o.get("offset") is not None for o in answer["offsets"]] == [True] * 3 + [False] * 3
    assert answer["offsets"][3:] == [{"partition": 1, "error_code": "MESSAGE_TOO_LARGE"}] * 3
    assert [e["partition"] for e in answer["errors"]] == [1]
    assert answer["errors"][0]["error_code"] == "MESSAGE_TOO_LARGE"


def test_fetch_sizes_are_capped_not_trusted(cluster: Cluster) -> None:
    status, answer = http(
        "GET",
        cluster.urls[3] + "/v1/topics/events/partitions/0/records"
        "?offset=0&max_bytes=1000000000000&max_records=1000000000",
    )
    assert status == 200, answer
    assert len(answer["records"]) <= 10_000


def test_far_future_timestamps_are_refused(cluster: Cluster) -> None:
    """A timestamp far ahead would pin time-based retention for the whole partition."""
    now = SystemClock().now_ms()
    future = now + 10 * 365 * 24 * 3600 * 1000
    for path in ("/v1/topics/events/records", "/v1/topics/events/partitions/0/records"):
        status, answer = http(
            "POST",
            cluster.urls[1] + path,
            {"records": [{"value": "late", "timestamp": future, "partition": 0}]},
        )
        assert status == 400, answer
        assert error_code(answer) == "INVALID_TIMESTAMP", answer
    status, answer = http(
        "POST",
        cluster.urls[1] + "/v1/topics/events/partitions/0/records",
        {"records": [{"value": "soon", "timestamp": now + 60_000}]},
    )
    assert status == 200, answer


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"],
)
def test_a_body_a_web_page_could_send_cross_origin_is_refused(
    cluster: Cluster, content_type: str | None
) -> None:
    """A page the user visits can make their browser POST to a cluster it reaches with no
    CORS preflight only as text/plain, a form, or untyped: all refused before the body is
    read, so the page can neither create a topic nor produce (listener.py rule 4)."""
    url = cluster.urls[1]
    if http("GET", url + "/v1/topics/csrf-target")[0] == 404:
        create(cluster, "csrf-target")
    attempts = [
        ("/v1/topics", {"name": "made-by-a-web-page"}),
        ("/v1/topics/csrf-target/records", {"records": [{"value": "forged"}]}),
        ("/v1/topics/csrf-target/partitions/0/records", {"records": [{"value": "forged"}]}),
        ("/v1/groups/g/offsets", {"offsets": []}),
    ]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    for path, body in attempts:
        connection = HTTPConnection(host, int(port), timeout=10)
        headers = {} if content_type is None else {"Content-Type": content_type}
        connection.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        answer = connection.getresponse()
        assert answer.status == 415, (path, answer.status, answer.read())
        assert orjson.loads(answer.read())["error_code"] == "UNSUPPORTED_MEDIA_TYPE"
        connection.close()
    assert http("GET", url + "/v1/topics/made-by-a-web-page")[0] == 404
    status, fetched = http("GET", url + "/v1/topics/csrf-target/partitions/0/records?offset=0")
    assert status == 200 and fetched["records"] == []


def test_a_web_page_can_neither_drain_nor_rebalance_nor_reach_a_node_by_a_rebound_name(
    cluster: Cluster,
) -> None:
    """api/browsers.py: the empty form posts a page can send (no body, so no media type to
    refuse) are refused by where they come from; a name pointed at the node (DNS
    rebinding) is not answered without authentication, whatever the method."""
    url = cluster.urls[1]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    forged = [
        {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
        {"Origin": "https://evil.example"},  # a browser that sends no Sec-Fetch-Site
        {"Sec-Fetch-Site": "same-site", "Origin": f"http://{host}:1"},  # another port
    ]
    for headers in forged:
        for path in ("/v1/brokers/1/drain", "/v1/cluster/rebalance", "/v1/elections"):
            connection = HTTPConnection(host, int(port), timeout=10)
            connection.request(
                "POST",
                path,
                headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
            )
            answer = connection.getresponse()
            body = orjson.loads(answer.read())
            connection.close()
            assert answer.status == 403, (path, headers, body)
            assert body["error_code"] == "CLUSTER_AUTHORIZATION_FAILED"
    status, brokers = http("GET", url + "/v1/brokers")
    assert status == 200 and not any(b["draining"] for b in brokers["brokers"])
    # the same node, named by a rebound name: nothing is answered, reads included
    for method, path in (("GET", "/v1/topics"), ("GET", "/ui/")):
        connection = HTTPConnection(host, int(port), timeout=10)
        connection.request(method, path, headers={"Host": f"attacker.example:{port}"})
        answer = connection.getresponse()
        answer.read()
        connection.close()
        assert answer.status == 403, path
    assert http("GET", url + "/v1/topics")[0] == 200  # by its address, as ever
