"""The console's calls on a real cluster with `auth.required` (3 controllers, 2 brokers):
its pages are public and carry no data; the brokers' figures (`GET /v1/cluster/stats`)
need DESCRIBE CLUSTER and name only topics the caller may DESCRIBE; the node call behind
them (`/v1/internal/stats`) answers nodes only; the topic list's paging is filtered by
DESCRIBE too; every new parameter's bad values are 400 INVALID_REQUEST.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlite.console import CONTENT_SECURITY_POLICY
from tests.harness.auth import ADMIN, as_admin, auth_cluster, basic
from tests.harness.observe import error_code
from tests.harness.processes import Cluster, http, signed_http

pytestmark = [pytest.mark.security, pytest.mark.timeout(180)]
ADMIN_AUTH = basic(*ADMIN)
VIEWER = basic("viewer", "viewer-password")  # DESCRIBE CLUSTER, DESCRIBE topic seen-*
READER = basic("reader", "reader-password")  # DESCRIBE topic seen-* only


def allow(cluster: Cluster, principal: str, resource_type: str, name: str, **more: str) -> None:
    acl = {
        "principal": principal,
        "operation": "DESCRIBE",
        "resource_type": resource_type,
        "resource_name": name,
        **more,
    }
    status, answer = as_admin("POST", cluster.urls[1] + "/v1/acls", acl)
    assert status == 201, answer


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = auth_cluster(tmp_path_factory.mktemp("console-api"), brokers=2)
    running.start()
    try:
        url = running.urls[1]
        for name in ("viewer", "reader"):
            body = {"name": name, "password": f"{name}-password"}
            assert as_admin("POST", url + "/v1/users", body)[0] == 201
        for principal in ("User:viewer", "User:reader"):
            allow(running, principal, "TOPIC", "seen-", pattern_type="PREFIXED")
        allow(running, "User:viewer", "CLUSTER", "kafka-cluster")
        for name in ("seen-1", "seen-2", "hidden"):
            body = {"name": name, "partitions": 2, "replication_factor": 2}
            assert as_admin("POST", url + "/v1/topics", body)[0] == 201
        record = {"records": [{"value": "x" * 100, "partition": 0}]}
        status, answer = http("POST", url + "/v1/topics/seen-1/records", record, headers=ADMIN_AUTH)
        assert status == 200, answer
        yield running
    finally:
        running.stop()


def wait_for(check: Any, what: str) -> Any:
    deadline = time.monotonic() + 15
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            assert found, what
            return found
        time.sleep(0.2)


def test_the_pages_are_public_and_carry_security_headers(cluster: Cluster) -> None:
    for url in [*cluster.urls.values(), *cluster.quorum.urls.values()]:
        for path in ("/ui/", "/ui/static/app.js", "/ui/node.json"):
            with urllib.request.urlopen(url + path, timeout=10) as response:
                status = response.status
                assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
                assert response.headers["X-Frame-Options"] == "DENY"
                assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert status == 200, (url, path)
    assert http("GET", cluster.urls[1] + "/ui/static/missing.js")[0] == 404
    assert http("GET", cluster.urls[1] + "/v1/cluster/stats")[0] == 401  # the data is not
    for sneaky in ("/ui/../v1/topics", "/ui/static/..%2F..%2Fv1%2Ftopics", "/ui/x/../../v1/acls"):
        assert raw_status(cluster.urls[1] + sneaky) in {400, 401, 404}, sneaky  # no data


def raw_status(url: str) -> int:
    """The status of a GET of `url` exactly as written (urllib would not normalise it, but
    say so: the request line carries the path unchanged)."""
    host, _, path = url.removeprefix("http://").partition("/")
    with socket.create_connection(tuple(host.rsplit(":", 1)), timeout=10) as sock:
        sock.sendall(f"GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        return int(sock.recv(64).split(b" ")[1])


def test_stats_need_describe_cluster(cluster: Cluster) -> None:
    for url in (cluster.urls[1], next(iter(cluster.quorum.urls.values()))):
        status, answer = http("GET", url + "/v1/cluster/stats", headers=READER)
        assert (status, error_code(answer)) == (403, "CLUSTER_AUTHORIZATION_FAILED"), answer
        status, answer = http("GET", url + "/v1/cluster/stats", headers=VIEWER)
        assert status == 200, answer
        assert answer["under_replicated_partitions"] >= 0 and answer["offline_partitions"] == 0


def test_stats_sum_every_broker_and_name_only_described_topics(cluster: Cluster) -> None:
    url = cluster.urls[2] + "/v1/cluster/stats?topics=seen-1,hidden,seen-2,nope"

    def summed() -> Any:
        status, answer = http("GET", url, headers=VIEWER)
        assert status == 200, answer
        return answer if answer["topics"]["seen-1"]["size_bytes"] > 0 else None

    answer = wait_for(summed, "seen-1's size")
    assert set(answer["topics"]) == {"seen-1", "seen-2"}  # hidden: not DESCRIBEd; nope: none
    assert [b["id"] for b in answer["brokers"]] == [1, 2]
    assert all(b["answered"] for b in answer["brokers"])
    assert sum(b["leaders"] for b in answer["brokers"]) >= 6  # 3 topics x 2 partitions
    assert set(answer["topics"]["seen-1"]["partitions"]) == {"0", "1"}
    assert answer["topics"]["seen-1"]["partitions"]["0"] > 100  # one record of 100 bytes
    answer = wait_for(
        lambda: (a := http("GET", url, headers=VIEWER)[1])["rates"] is not None and a,
        "rates after two samples a second apart",
    )
    assert answer["rates"]["produce_records"] >= 0


def test_the_node_call_behind_stats_answers_nodes_only(cluster: Cluster) -> None:
    url = cluster.urls[1] + "/v1/internal/stats?topics=hidden"
    status, answer = http("GET", url, headers=ADMIN_AUTH)  # even a super user is no node
    assert (status, error_code(answer)) == (403, "CLUSTER_AUTHORIZATION_FAILED"), answer
    status, answer = signed_http("GET", url)
    assert status == 200 and answer["broker_id"] == 1 and "hidden" in answer["topics"], answer


def test_topic_pages_are_filtered_by_describe(cluster: Cluster) -> None:
    for url in (cluster.urls[1], next(iter(cluster.quorum.urls.values()))):
        status, answer = http("GET", url + "/v1/topics?limit=1", headers=READER)
        assert status == 200, answer
        assert answer["total"] == 2 and answer["next"] == "seen-1", answer
        assert [t["name"] for t in answer["topics"]] == ["seen-1"]
        status, answer = http("GET", url + "/v1/topics?limit=1&after=seen-1", headers=READER)
        assert [t["name"] for t in answer["topics"]] == ["seen-2"] and answer["next"] is None
        status, answer = http("GET", url + "/v1/topics?contains=HID", headers=ADMIN_AUTH)
        assert [t["name"] for t in answer["topics"]] == ["hidden"] and answer["total"] == 1
        status, answer = http("GET", url + "/v1/topics", headers=READER)  # the contract's
        assert answer == {
            "topics": [
                {"name": n, "partitions": 2, "replication_factor": 2} for n in ("seen-1", "seen-2")
            ]
        }


def test_partition_pages_need_describe_on_the_topic(cluster: Cluster) -> None:
    for url in (cluster.urls[2], next(iter(cluster.quorum.urls.values()))):
        status, answer = http("GET", url + "/v1/topics/hidden/partitions", headers=READER)
        assert (status, error_code(answer)) == (403, "TOPIC_AUTHORIZATION_FAILED"), answer
        status, answer = http("GET", url + "/v1/topics/seen-1/partitions?limit=1", headers=READER)
        assert status == 200, answer
        assert (answer["total"], answer["next"]) == (2, 0)
        assert [p["partition"] for p in answer["partitions"]] == [0]
        status, answer = http(
            "GET", url + "/v1/topics/__consumer_offsets/partitions", headers=ADMIN_AUTH
        )
        assert (status, error_code(answer)) == (403, "TOPIC_AUTHORIZATION_FAILED"), answer
        status, answer = http("GET", url + "/v1/topics/nope/partitions", headers=ADMIN_AUTH)
        assert (status, error_code(answer)) == (404, "UNKNOWN_TOPIC_OR_PARTITION"), answer
    status, answer = http("GET", cluster.urls[2] + "/v1/topics/seen-1/partitions", headers=READER)
    assert [p["high_watermark"] for p in answer["partitions"]] == [1, 0]  # from the leaders


@pytest.mark.parametrize(
    "path",
    [
        "/v1/topics?limit=0",
        "/v1/topics?limit=501",
        "/v1/topics?limit=ten",
        "/v1/topics?after=",
        "/v1/topics?contains=%01",
        "/v1/topics/seen-1/partitions?limit=0",
        "/v1/topics/seen-1/partitions?after=-1",
        "/v1/topics/seen-1/partitions?under_replicated=1",
        "/v1/cluster/stats?topics=",
        "/v1/cluster/stats?topics=a,,b",
        "/v1/cluster/stats?topics=bad%20name",
        "/v1/cluster/stats?topics=" + ",".join(f"t{i}" for i in range(101)),
    ],
)
def test_bad_parameters_are_invalid_requests(cluster: Cluster, path: str) -> None:
    for url in (cluster.urls[1], next(iter(cluster.quorum.urls.values()))):
        status, answer = http("GET", url + path, headers=VIEWER)
        assert (status, error_code(answer)) == (400, "INVALID_REQUEST"), (url, answer)
