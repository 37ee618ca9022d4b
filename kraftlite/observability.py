"""What every node exports and logs about the requests it serves (issue 17), whatever its kind.

- Prometheus metrics common to brokers and controllers, on one process-wide registry:
  requests, errors by code and latency per edge (HTTP, Kafka) and request; the process's
  CPU, memory and open files (prometheus_client's process collector); event-loop lag.
  Each app adds its own families (broker/metrics.py, controller/metrics.py) on a registry
  of its own, and `render` writes both.
- Request ids: every HTTP request gets one (the caller's `X-Request-Id` if well formed, else
  a new one), bound to every log line written while it is served, sent back in the answer
  and passed on to the node a request is forwarded to, so one id follows a request across
  brokers and controllers.

docs/metrics.md lists every family and its Kafka counterpart.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kraftlite import __version__
from kraftlite.errors import ErrorCode

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, _resident_memory_bytes, ...
disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: they double the output and say little

NODE_INFO = Gauge(
    "kraftlite_node_info",
    "1, labelled with what this node is",
    ["role", "node_id", "version"],
    registry=REGISTRY,
)
REQUESTS = Counter(
    "kraftlite_requests",
    "Requests answered, by edge (http, kafka) and request",
    ["edge", "request"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "kraftlite_request_errors",
    "Errors answered, by edge, request and error code (one per partition a request failed)",
    ["edge", "request", "error"],
    registry=REGISTRY,
)
# From half a millisecond (an answer from memory) to a minute (a long-poll, a slow commit).
_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
LATENCY = Histogram(
    "kraftlite_request_duration_seconds",
    "Time from a request's arrival to its answer, by edge and request (long-polls included)",
    ["edge", "request"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
LOOP_LAG = Histogram(
    "kraftlite_event_loop_lag_seconds",
    "How late the event loop ran a timer: time it spent on something that did not yield",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)

REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)
# The error code an answer carries (api/errors.py's problem() sets it), for ERRORS.
ERROR_CODE: web.ResponseKey[str] = web.ResponseKey("error_code", str)
_WELL_FORMED_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_LOOP_TICK_S = 0.25


def node_info(role: str, node_id: int | None) -> None:
    NODE_INFO.labels(role, "" if node_id is None else str(node_id), __version__).set(1)


def request_id_of(headers: Mapping[str, str]) -> str:
    """The caller's request id if it is well formed (it goes into logs), else a new one."""
    given = headers.get(REQUEST_ID_HEADER, "")
    return given if _WELL_FORMED_ID.fullmatch(given) else secrets.token_hex(8)


def passed_on(request: web.Request) -> dict[str, str]:
    """Headers that carry this request's id to a node it is passed on to."""
    request_id = request.get(REQUEST_ID)
    return {} if request_id is None else {REQUEST_ID_HEADER: request_id}


# (edge, request) -> its request counter and latency histogram: looked up once, not on
# every request (`labels()` takes a lock and builds a key). Bounded by routes and APIs.
_CHILDREN: dict[tuple[str, str], tuple[Counter, Histogram]] = {}


def record(edge: str, request: str, seconds: float, errors: Iterable[str] = ()) -> None:
    children = _CHILDREN.get((edge, request))
    if children is None:
        children = _CHILDREN[edge, request] = (
            REQUESTS.labels(edge, request),
            LATENCY.labels(edge, request),
        )
    children[0].inc()
    children[1].observe(seconds)
    for error, count in collections.Counter(errors).items():  # one update per code
        ERRORS.labels(edge, request, error).inc(count)


def http_request_name(request: web.Request) -> str:
    """The route a request matched ("POST /v1/topics/{topic}/records"), never its path: the
    label's values are the app's routes, whatever clients send."""
    resource = request.match_info.route.resource
    if resource is None:  # 404, 405: no route, and a method that no route takes
        return "unmatched"
    return f"{request.method} {resource.canonical}"


def label_relayed_error(response: web.StreamResponse, body: object) -> None:
    """An answer relayed from another node is counted under the error code it carries,
    as the node that made it counts it (one of kraftlite's codes, else its status)."""
    code = body.get("error_code") if isinstance(body, dict) else None
    if response.status >= 400 and isinstance(code, str) and code in ErrorCode.__members__:
        response[ERROR_CODE] = code


def _error_of(status: int, response: web.StreamResponse | None) -> list[str]:
    if status < 400:
        return []
    code = None if response is None else response.get(ERROR_CODE)
    return [code if code is not None else str(status)]


@web.middleware
async def observe_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The outermost middleware: the request's id bound to the logs of everything that
    serves it, and its outcome counted once the answer is known."""
    request_id = request_id_of(request.headers)
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    status = 500
    response: web.StreamResponse | None = None
    with structlog.contextvars.bound_contextvars(request_id=request_id):
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # a redirect: problem_middleware answers the rest
            status = exc.status
            exc.headers[REQUEST_ID_HEADER] = request_id
            raise
        else:
            status = response.status
            if not response.prepared:  # a stream (replica-stream) has sent its headers
                response.headers[REQUEST_ID_HEADER] = request_id
            return response
        finally:
            seconds = time.perf_counter() - started
            name = http_request_name(request)
            if response is not None and response.prepared:  # a stream: its life, not latency
                REQUESTS.labels("http", name).inc()  # rare: long-lived
            else:
                record("http", name, seconds, _error_of(status, response))


def kafka_errors(body: Any, names: Mapping[int, str]) -> list[str]:
    """Every non-zero `error_code` in a Kafka response body (top level, per topic, per
    partition), by name: Kafka counts a request's errors the same way (errorCounts)."""
    found: list[str] = []
    pending = [body]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            code = item.get("error_code")
            if isinstance(code, int) and code:
                found.append(names.get(code) or _error_name(code))
            pending.extend(v for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            pending.extend(v for v in item if isinstance(v, dict | list))
    return found


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


async def watch_event_loop(_: web.Application) -> AsyncIterator[None]:
    """An app's cleanup context: how late a repeating timer fires is how long the loop was
    busy with something that did not yield (a blocking call, a long computation)."""

    async def watch() -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(_LOOP_TICK_S)
            LOOP_LAG.observe(max(loop.time() - started - _LOOP_TICK_S, 0.0))

    task = asyncio.get_running_loop().create_task(watch(), name="event-loop-lag")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def render(*registries: CollectorRegistry) -> tuple[bytes, str]:
    """The Prometheus text of the process-wide families and then each app's own."""
    return b"".join(generate_latest(r) for r in (REGISTRY, *registries)), CONTENT_TYPE_LATEST
