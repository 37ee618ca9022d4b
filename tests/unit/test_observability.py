"""The pure parts of kraftlite/observability.py and the controller's partition counts."""

from __future__ import annotations

import re

import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kraftlite.api.errors import problem_middleware
from kraftlite.controller.metrics import PartitionCounts, partition_counts
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from kraftlite.metadata.records import NO_LEADER
from kraftlite.observability import REGISTRY, kafka_errors, observe_middleware, request_id_of


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("checkout-42", True),
        ("a.b_c:d-E9", True),
        ("x" * 64, True),
        ("x" * 65, False),
        ("", False),
        ("with space", False),
        ('quote"injection', False),
        ("new\nline", False),
        ("ünïcode", False),
    ],
)
def test_a_request_id_is_kept_only_when_well_formed(given: str, kept: bool) -> None:
    answer = request_id_of({"X-Request-Id": given})
    if kept:
        assert answer == given
    else:
        assert re.fullmatch(r"[0-9a-f]{16}", answer)
    assert request_id_of({}) != request_id_of({})  # new ones differ


def test_kafka_errors_counts_every_failed_partition_by_name() -> None:
    produce_answer = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {"index": 0, "error_code": 0, "records": b"\x00" * 10},
                    {"index": 1, "error_code": 6},
                    {"index": 2, "error_code": 6},
                ],
            },
            {"name": "u", "partition_responses": [{"index": 0, "error_code": 3}]},
        ],
        "throttle_time_ms": 0,
    }
    assert sorted(kafka_errors(produce_answer, {})) == [
        "NOT_LEADER_OR_FOLLOWER",
        "NOT_LEADER_OR_FOLLOWER",
        "UNKNOWN_TOPIC_OR_PARTITION",
    ]
    assert kafka_errors({"error_code": 35}, {35: "UNSUPPORTED_VERSION"}) == ["UNSUPPORTED_VERSION"]
    assert kafka_errors({"error_code": 9999}, {}) == ["9999"]  # a code with no name: its number
    assert kafka_errors({"error_code": 0, "topics": []}, {}) == []


def test_partition_counts_find_offline_under_replicated_and_moving_partitions() -> None:
    def part(
        replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, **kw: tuple[int, ...]
    ) -> PartitionRegistration:
        return PartitionRegistration(replicas, isr, leader, 0, 0, **kw)

    topic = TopicImage(
        "tid",
        "t",
        {
            0: part((1, 2, 3), (1, 2, 3), 1),
            1: part((1, 2, 3), (1, 2), 1),
            2: part((1, 2, 3), (3,), NO_LEADER),
            3: part((1, 2, 3, 4), (1, 2, 3), 2, adding=(4,), removing=(3,)),
        },
        {},
    )
    image = MetadataImage(version=7, brokers={}, topics={"tid": topic}, topic_ids={"t": "tid"})
    assert partition_counts(image) == PartitionCounts(
        # partition 3's ISR is its replication factor: the replica being added does not count
        topics=1,
        partitions=4,
        offline=1,
        under_replicated=2,
        reassigning=1,
    )


async def _app_client() -> TestClient[web.Request, web.Application]:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def refused(request: web.Request) -> web.Response:
        raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such topic")

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("/things/1")

    app = web.Application(middlewares=[observe_middleware, problem_middleware])
    app.router.add_get("/things/{id}", ok)
    app.router.add_post("/things/{id}", refused)
    app.router.add_get("/broken", broken)
    app.router.add_get("/old", moved)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(
    ("method", "path", "request_label", "status", "error"),
    [
        ("GET", "/things/7", "GET /things/{id}", 200, None),
        ("HEAD", "/things/7", "HEAD /things/{id}", 200, None),
        ("POST", "/things/7", "POST /things/{id}", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        ("GET", "/broken", "GET /broken", 500, "UNKNOWN_SERVER_ERROR"),
        ("GET", "/old", "GET /old", 302, None),
        ("GET", "/nowhere/at/all", "unmatched", 404, "INVALID_REQUEST"),
        ("DELETE", "/things/7", "unmatched", 405, "INVALID_REQUEST"),
        ("PATCH", "/things/7", "unmatched", 405, "INVALID_REQUEST"),  # a method no route has
    ],
)
async def test_every_answer_is_counted_once_under_its_route_and_error(
    method: str, path: str, request_label: str, status: int, error: str | None
) -> None:
    client = await _app_client()
    try:
        labels = {"edge": "http", "request": request_label}
        before = _sample("kraftlite_requests_total", **labels)
        before_latency = _sample("kraftlite_request_duration_seconds_count", **labels)
        before_error = _sample("kraftlite_request_errors_total", **labels, error=error or "")
        answer = await client.request(method, path, allow_redirects=False)
        assert answer.status == status
        assert re.fullmatch(r"[0-9a-f]{16}", answer.headers["X-Request-Id"])
        assert _sample("kraftlite_requests_total", **labels) == before + 1
        assert _sample("kraftlite_request_duration_seconds_count", **labels) == before_latency + 1
        if error is not None:
            after_error = _sample("kraftlite_request_errors_total", **labels, error=error)
            assert after_error == before_error + 1
        # the method of a request no route takes never becomes a label value
        assert _sample("kraftlite_requests_total", edge="http", request="PATCH /things/{id}") == 0
    finally:
        await client.close()


async def test_a_request_id_is_bound_to_everything_its_request_logs() -> None:
    async def seen(request: web.Request) -> web.Response:
        return web.json_response(structlog.contextvars.get_contextvars())

    app = web.Application(middlewares=[observe_middleware, problem_middleware])
    app.router.add_get("/seen", seen)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        answer = await client.get("/seen", headers={"X-Request-Id": "trace-1"})
        assert answer.headers["X-Request-Id"] == "trace-1"
        assert (await answer.json())["request_id"] == "trace-1"
        other = await (await client.get("/seen")).json()
        assert re.fullmatch(r"[0-9a-f]{16}", other["request_id"])  # each request its own
        assert "request_id" not in structlog.contextvars.get_contextvars()  # and no leak
    finally:
        await client.close()
