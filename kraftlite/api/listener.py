"""Every node's HTTP listener, bounded: how many connections, for how long idle, and how
long a request's body may take to arrive (Kafka's `max.connections`,
`max.connections.per.ip`, `connections.max.idle.ms`; kraftlite's `request.read.timeout.ms`).

Rules:
1. A connection over `max.connections` in all, or over `max.connections.per.ip` from one
   address, is closed as it is accepted, before aiohttp sees a byte of it; unless one of
   the `connections.reserved.for.nodes` slots is free. Those are the cluster's own: a
   connection in one must send a request signed by a node (internal_auth.py) as its first,
   within RESERVE_DEADLINE_S, and so must every later one, or it is closed
   (`settle_reserved`): a node's call for itself, not one it passes on for a client (those
   are the clients' traffic); and when every reserved slot is taken, a new connection
   closes the oldest one not yet shown to be a node's. So
   a flood of clients, from any number of addresses, cannot keep a restarted broker from
   registering or from fetching: it would have to open more connections in the time a
   node takes to send its first request than there are reserved slots. A node's
   connection keeps its slot once shown; the per-address cap does not apply to the
   reserve (in a local cluster the nodes and the clients share 127.0.0.1).
2. aiohttp closes a connection that has sent no complete request for
   `connections.max.idle.ms` since it opened or since its last answer; bytes of an
   incomplete request do not restart that clock, so headers sent a byte at a time
   (slowloris) are cut off too. Measured on aiohttp 3.14 (tests/security).
3. A request's body must arrive within `request.read.timeout.ms`, or REQUEST_TIMED_OUT;
   it is read (and its size checked) once the request is authenticated, before any handler
   runs: a stranger's body is never buffered.
4. A body must say it is one of the API's types (JSON, a binary batch, Kafka batches), or
   UNSUPPORTED_MEDIA_TYPE before it is read. A web page can make a browser send a body
   cross-origin without asking (no CORS preflight) only as text/plain, a form or with no
   type: so no page a user visits can create or delete topics, or produce, through the
   user's browser on a cluster it can reach (the console is served from the node's own
   origin and sends JSON).
5. On a broker, a body's bytes are taken from the broker's request budget
   (`queued.max.request.bytes`, security/request_budget.py, shared with the Kafka
   listener) BEFORE it is read: its Content-Length, or the app's body limit when it is
   chunked. A request without a body takes nothing (a node's signed GETs, long-polls and
   streams hold no budget while they last). Waiting for room counts against the same
   `request.read.timeout.ms` (then REQUEST_TIMED_OUT); a body that could never fit is
   RECORD_LIST_TOO_LARGE at once. The bytes are given back when the request's task ends:
   its answer has been sent, or it failed; or earlier, when a client over its quota is
   made to wait for its answer (throttle.py: it holds no budget while it waits).
6. A body is taken as it was sent: a `Content-Encoding` other than identity is
   UNSUPPORTED_MEDIA_TYPE, and nothing is inflated (aiohttp's `auto_decompress` is off), so
   the bytes the budget counted are the bytes held. Compressed records come as Kafka
   batches, whose decompression the service bounds per request (service.py
   `from_kafka_batch`).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import hdrs, web

from kraftlite.config import ListenerLimits
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import framing
from kraftlite.protocol.headers import BATCH_TYPE, KAFKA_BATCHES_TYPE
from kraftlite.security.request_budget import Lease, RequestBudget

log = structlog.get_logger(__name__)


# Rule 1: a connection in a reserved slot shows it is a node's within this
RESERVE_DEADLINE_S = 5.0


class Admission(enum.Enum):
    REFUSED = "refused"
    ADMITTED = "admitted"
    RESERVED = "reserved"  # in a slot reserved for the nodes: a node must show itself


class ConnectionCounts:
    """Rule 1's counts for one listener (shared by its app, which settles reserved slots)."""

    def __init__(self, limits: ListenerLimits) -> None:
        self.limits = limits
        self.total = 0
        self.per_ip: collections.Counter[str] = collections.Counter()
        self.refused = 0
        # the reserved slots: transport -> shown to be a node's; insertion order is age
        self.reserved: dict[asyncio.BaseTransport, bool] = {}

    def admit(self, ip: str, transport: asyncio.BaseTransport) -> Admission:
        allowed = self.limits.connections_allowed(ip)  # max.connections.per.ip, or its override
        if self.total < self.limits.max_connections and self.per_ip[ip] < allowed:
            self.total += 1
            self.per_ip[ip] += 1
            return Admission.ADMITTED
        if allowed > 0 and self._room_in_reserve():  # an address overridden to 0: refused
            self.reserved[transport] = False
            return Admission.RESERVED
        self.refused += 1
        return Admission.REFUSED

    def _room_in_reserve(self) -> bool:
        if len(self.reserved) < self.limits.reserved_for_nodes:
            return True
        oldest = next((t for t, shown in self.reserved.items() if not shown), None)
        if oldest is None:  # every reserved slot holds a node's connection
            return False
        del self.reserved[oldest]
        oldest.abort()  # type: ignore[attr-defined]  # connection_lost finds it gone
        return True

    def release(self, ip: str, transport: asyncio.BaseTransport, admission: Admission) -> None:
        if admission is Admission.RESERVED:
            self.reserved.pop(transport, None)  # gone already if closed from here
            return
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]

    def expire(self, transport: asyncio.BaseTransport) -> None:
        """A reserved slot's deadline: closed unless a node has shown itself on it."""
        if self.reserved.get(transport) is False:
            del self.reserved[transport]
            transport.abort()  # type: ignore[attr-defined]

    def settle(self, transport: asyncio.BaseTransport | None, from_node: bool) -> bool:
        """A request arrived on `transport`: False if it must be closed. A connection in a
        reserved slot keeps it only while every request on it is a node's call for itself
        (so a slot shown once cannot be held with a client's requests after)."""
        if transport is None or transport not in self.reserved:
            return True
        if from_node:
            self.reserved[transport] = True
            return True
        del self.reserved[transport]
        self.refused += 1
        return False


CONNECTIONS = web.AppKey("connections", ConnectionCounts)


def settle_reserved(request: web.Request, from_node: bool) -> None:
    """Rule 1, at a request's authentication (internal_auth.py): a request in a reserved
    slot must be a node's call for itself, or the connection is closed and the request goes
    no further."""
    counts = request.app.get(CONNECTIONS)
    if counts is None or counts.settle(request.transport, from_node):
        return
    if counts.refused % 1000 == 1:  # a flood logs a line per thousand
        log.warning("reserved_connection_refused", ip=request.remote, refused=counts.refused)
    if request.transport is not None:
        request.transport.abort()
    raise KraftliteError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "this slot is for the nodes")


class _Admitted(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind rule 1's count."""

    def __init__(self, inner: asyncio.Protocol, counts: ConnectionCounts) -> None:
        self._inner = inner
        self._counts = counts
        self._ip: str | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._admission = Admission.REFUSED
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        admission = self._counts.admit(ip, transport)
        if admission is Admission.REFUSED:
            if self._counts.refused % 1000 == 1:  # a flood logs a line per thousand
                log.warning("connection_refused_over_limit", ip=ip, refused=self._counts.refused)
            transport.abort()  # type: ignore[attr-defined]
            return
        if admission is Admission.RESERVED:
            self._deadline = asyncio.get_running_loop().call_later(
                RESERVE_DEADLINE_S, self._counts.expire, transport
            )
        self._ip = ip
        self._transport = transport
        self._admission = admission
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._ip is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._ip is not None else None

    def pause_writing(self) -> None:
        if self._ip is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._ip is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ip is None or self._transport is None:
            return
        if self._deadline is not None:  # a closed connection is not kept 5 s for it
            self._deadline.cancel()
            self._deadline = None
        self._counts.release(self._ip, self._transport, self._admission)
        self._ip = None
        self._inner.connection_lost(exc)


class BoundedSite(web.TCPSite):
    """aiohttp's TCPSite with rule 1 in front of every connection."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        limits: ListenerLimits,
        ssl_context: ssl.SSLContext | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context, **kwargs)
        app = runner.app if isinstance(runner, web.AppRunner) else None
        found = app.get(CONNECTIONS) if app is not None else None
        self.counts = found if found is not None else ConnectionCounts(limits)

    async def start(self) -> None:
        self._runner._reg_site(self)  # BaseSite.start, without TCPSite's own create_server
        server = self._runner.server
        assert server is not None
        counts = self.counts
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Admitted(server(), counts),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self._bound_port = self._server.sockets[0].getsockname()[1]


def runner_for(app: web.Application, limits: ListenerLimits, shutdown_s: float) -> web.AppRunner:
    """An AppRunner with rule 2's idle bound (aiohttp's keepalive_timeout), and rule 1's
    counts where the app's requests can settle reserved slots."""
    app[CONNECTIONS] = ConnectionCounts(limits)
    return web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=shutdown_s,
        keepalive_timeout=limits.idle_ms / 1000,
        # rule 6: a body is what it says it is: aiohttp would otherwise inflate a gzip body
        # (100 MiB from 90 KB) on the loop, past the budget that counted 90 KB
        auto_decompress=False,
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Rule 4: the media types of the API's request bodies (protocol/headers.py, framing.py).
BODY_TYPES = frozenset({"application/json", BATCH_TYPE, KAFKA_BATCHES_TYPE, framing.CONTENT_TYPE})


READ_TIMEOUT_MS = web.AppKey("read_timeout_ms", int)
# Rule 5: the broker's budget of request bytes (node/broker.py sets it; unset, bodies are bounded
# one by one only, as on controllers, whose bodies are at most 1 MiB)
REQUEST_BUDGET = web.AppKey("request_budget", RequestBudget)
_LEASE = web.RequestKey("kraftlite.request_budget_lease", Lease)


async def read_body(request: web.Request) -> bytes:
    """Rules 3 and 5: the whole body, within the app's timeout and size limit, its bytes
    taken from the request budget first (aiohttp keeps the body: handlers that read it
    again get it at once)."""
    timeout_ms = request.app.get(READ_TIMEOUT_MS, ListenerLimits().read_timeout_ms)
    budget = request.app.get(REQUEST_BUDGET)
    encoding = request.headers.get(hdrs.CONTENT_ENCODING, "identity").strip().lower()
    if request.body_exists and encoding not in {"", "identity"}:  # rule 6
        raise KraftliteError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE, "request bodies are not taken compressed"
        )
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            if budget is not None and request.body_exists and _LEASE not in request:
                await _take_budget(request, budget)
            return await request.read()
    except TimeoutError:
        waited = "the request body" if _LEASE in request or budget is None else "room for it"
        raise KraftliteError(
            ErrorCode.REQUEST_TIMED_OUT, f"{waited} did not arrive within {timeout_ms} ms"
        ) from None


def give_back_budget(request: web.Request) -> None:
    """Rule 5: the request's bytes back to the budget now (a throttled client's wait)."""
    lease = request.get(_LEASE)
    if lease is not None:
        lease.release()


async def _take_budget(request: web.Request, budget: RequestBudget) -> None:
    """Rule 5: the body's bytes from the budget, given back when the request's task (one
    per request, aiohttp's `_handle_request`) ends, however it ends."""
    limit = request.client_max_size
    declared = request.content_length
    size = limit if declared is None else min(declared, limit)  # aiohttp stops at the limit
    lease = await budget.acquire(size)
    if lease is None:
        raise KraftliteError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"a body of {size} bytes cannot fit this broker's queued.max.request.bytes",
        )
    request[_LEASE] = lease
    task = asyncio.current_task()
    if task is None:  # not on a task: cannot happen under aiohttp; never hold it forever
        lease.release()
        return
    task.add_done_callback(lambda _: lease.release())


@web.middleware
async def read_body_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Rules 3 and 4, for every request that got past authentication."""
    if request.body_exists:
        if request.content_type not in BODY_TYPES:
            raise KraftliteError(
                ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                f"a request body's Content-Type must be one of {', '.join(sorted(BODY_TYPES))}",
            )
        await read_body(request)
    return await handler(request)
