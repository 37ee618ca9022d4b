"""The Kafka listener on a broker (issue 16): Kafka's request/response framing over asyncio
streams, in front of the same broker service as the HTTP edge (handlers.py translates).

Rules:
1. A frame is a 4-byte big-endian size and that many bytes. A size below 8 or over
   `socket.request.max.bytes`, a frame that does not arrive within `request.read.timeout.ms`
   once its size came, or one that does not decode, closes that connection and nothing
   else: nothing of it was acted on. A connection silent for `connections.max.idle.ms`
   between requests is closed (Kafka's `connections.max.idle.ms`).
2. Requests on one connection are handled in order and answered in order: a producer's
   batches to a partition are appended in the order it sent them. The next request starts
   at the one in hand's `ordered` point (rule 11), never earlier.
3. An ApiVersions request of a version this broker does not serve is answered in
   ApiVersions v0 with UNSUPPORTED_VERSION and the versions served (KIP-511), so a newer
   client can pick one; any other unserved API or version closes the connection, as Kafka
   does, since its answer's layout would be unknown to the client.
4. Connections are counted like the HTTP listener's (`max.connections`,
   `max.connections.per.ip`, `max.connections.per.ip.overrides`): one over either is
   closed as it is accepted.
5. No handler's failure takes the listener down: an unexpected exception is logged and
   closes its connection.
6. A request costs nothing before it is known to be served: its header is read first, and
   an API this listener does not answer (or anything but authenticating, on a connection
   that must authenticate and has not; its frames are then at most 512 KiB) closes the
   connection undecoded. A request holds at most `messages.MAX_REQUEST_ITEMS` items
   (array items and tagged fields, wire.py rule 2); a stranger's (a connection that must
   authenticate and has not) at most _UNAUTHENTICATED_MAX_ITEMS, which its requests
   (ApiVersions, SaslHandshake, SaslAuthenticate: no arrays) never need.
7. Decoding leaves the event loop by size AND by item count: a frame over 256 KiB, or one
   holding over _INLINE_DECODE_ITEMS items, is decoded on a worker thread, one at a time.
   Measured on two shared cores: a struct item (a topic, a partition) costs 3-4 µs to
   decode, a skipped tagged field about 1 µs, so 1,000 items hold the loop at most ~4 ms,
   while a 228 KiB Metadata request of 10,000 topics held it 40 ms inline. The count is
   known only while decoding, so a frame under 256 KiB is decoded inline with a budget of
   _INLINE_DECODE_ITEMS; one over it is dropped (at most that many items of work lost,
   usually none: an array's count is charged before its items are read) and decoded again
   on the thread with the full budget.
8. A frame's bytes are taken from the broker's request budget (`queued.max.request.bytes`,
   security/request_budget.py, shared with the HTTP listener; a stranger's from the
   strangers' share) once its 4-byte size has come and BEFORE any of it is read, waiting
   within the frame's `request.read.timeout.ms`; they are given back once its answer is
   written or the connection closes. A frame that gets no room in time, or could never
   fit, closes the connection unread.
9. With `auth.required`, a connection that has not completed SASL within
   `kafka.authentication.timeout.ms` of being accepted is closed, whatever it is doing
   (sending requests within the idle time, trickling a frame, waiting for the budget); and
   every answer before authentication counts against the cap on them
   (handlers.MAX_REQUESTS_BEFORE_AUTHENTICATION), rule 3's KIP-511 answer too.
10. (reserved)
11. Pipelining (issue 29): a request's `ordered` point is the end of its handler, but a
    Produce's is once each of its partitions' batches is appended (or failed), before the
    wait for acks=all; the next request starts there, so one connection's produce
    requests wait for their replicas together instead of one after another (Kafka's
    broker mutes the connection for the whole request; Redpanda pipelines as here). At
    most _MAX_PIPELINED requests of a connection are in flight, each holding its bytes
    (rule 8), answers written in request order. A connection with a quota, one that must
    authenticate and has not, or one to be closed after its answer is handled one request
    at a time, as Kafka's: a throttled client's connection stays muted. A SASL request
    waits for every request before it and is answered before the next is read. A request
    that closes the connection stops it: nothing after it is read or answered; a client
    that stops sending (end of stream, `connections.max.idle.ms`) still gets the answers
    to what it sent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import ssl
import struct

import structlog

from kraftlite.config import DEFAULT_QUEUED_MAX_REQUEST_BYTES, ListenerLimits
from kraftlite.kafka.handlers import CloseConnection, Handlers, Session
from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka.wire import ItemBudgetExceeded, WireError
from kraftlite.security.principal import certificate_principal
from kraftlite.security.request_budget import Lease, RequestBudget

log = structlog.get_logger(__name__)
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hh")  # api key, api version
_MIN_FRAME = 8  # api key, version, correlation id: the least a request header holds
_INLINE_DECODE_BYTES = 256 << 10  # larger requests are decoded on a worker thread
_INLINE_DECODE_ITEMS = 1_000  # rule 7: so are requests with more items (~4 ms measured)
# rule 6: ApiVersions, SaslHandshake and SaslAuthenticate hold no arrays and at most a few
# tagged fields; a 512 KiB frame of 131k empty tagged fields is refused at its count
_UNAUTHENTICATED_MAX_ITEMS = 100
# what a connection that must authenticate may send before it has (Kafka's
# sasl.server.max.receive.size): a stranger's frame is never buffered whole at 100 MiB
_UNAUTHENTICATED_MAX_BYTES = 512 << 10
_AUTHENTICATION_APIS = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate: never pipelined
_MAX_PIPELINED = 5  # rule 11: requests of one connection in flight (Kafka's clients' most
# with idempotence: max.in.flight.requests.per.connection 5)


def _set_event(event: asyncio.Event, _task: asyncio.Task[bool]) -> None:
    event.set()


def _closed_it(task: asyncio.Task[bool]) -> bool:
    """A request's task that is done and closed the connection (rule 11)."""
    if not task.done():
        return False
    return task.cancelled() or task.exception() is not None or not task.result()


def _stranger(session: Session) -> bool:
    """A connection that must authenticate and has not yet (rules 6, 8, 9)."""
    return session.must_authenticate and not session.authenticated


class KafkaServer:
    def __init__(
        self,
        handlers: Handlers,
        limits: ListenerLimits,
        max_frame_bytes: int,
        budget: RequestBudget | None = None,
    ) -> None:
        self.handlers = handlers
        self.limits = limits
        self.max_frame_bytes = max_frame_bytes
        # rule 8: the broker's, shared with its HTTP listener (node/broker.py); a listener
        # started alone (tests) gets one of its own
        self.budget = budget or RequestBudget(DEFAULT_QUEUED_MAX_REQUEST_BYTES)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._per_ip: collections.Counter[str] = collections.Counter()
        self._decoding = asyncio.Semaphore(1)

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Listen; with `tls`, the broker's TLS settings (the HTTP listener's: the same
        certificate and client-certificate policy), so clients use SSL or SASL_SSL."""
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            ssl=tls,
            ssl_handshake_timeout=None
            if tls is None
            else min(self.limits.read_timeout_ms, 10_000) / 1000,
        )
        log.info("kafka_listener_started", listen=f"{host}:{port}", tls=tls is not None)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) else "unknown"
        if len(self._connections) >= self.limits.max_connections or self._per_ip[
            host
        ] >= self.limits.connections_allowed(host):
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._per_ip[host] += 1
        try:
            await self._serve(reader, writer, host)
        except asyncio.CancelledError:
            pass
        finally:
            self._connections.discard(task)
            self._per_ip[host] -= 1
            if not self._per_ip[host]:
                del self._per_ip[host]
            writer.transport.abort()

    async def _decode(self, frame: bytes, session: Session) -> messages.Request:
        """Rules 6 and 7: the header first; a request this listener would refuse is refused
        before its body is decoded, and a large body, or one of many items, is decoded off
        the event loop, one at a time (heartbeats and leases ride on the loop)."""
        api_key, api_version, _ = messages.peek_header(frame)
        refusal = session.refusal(api_key, api_version)
        if refusal is not None and api_key != messages.ApiKey.API_VERSIONS:
            raise CloseConnection(refusal)
        max_items = _UNAUTHENTICATED_MAX_ITEMS if _stranger(session) else messages.MAX_REQUEST_ITEMS
        inline_items = min(max_items, _INLINE_DECODE_ITEMS)
        if len(frame) <= _INLINE_DECODE_BYTES:
            try:
                return messages.decode_request(frame, inline_items)
            except ItemBudgetExceeded:
                if inline_items == max_items:
                    raise
        async with self._decoding:
            return await asyncio.to_thread(messages.decode_request, frame, max_items)

    @staticmethod
    def _authentication_overdue(task: asyncio.Task[None], session: Session, host: str) -> None:
        """Rule 9: the deadline passed; close the connection unless it authenticated."""
        if _stranger(session):
            log.info("kafka_authentication_timed_out", client=host)
            task.cancel()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str
    ) -> None:
        session = self.handlers.session(
            host, certificate_principal(writer.get_extra_info("ssl_object"))
        )
        deadline: asyncio.TimerHandle | None = None
        task = asyncio.current_task()
        if _stranger(session) and task is not None:  # rule 9
            deadline = asyncio.get_running_loop().call_later(
                self.limits.authentication_timeout_ms / 1000,
                self._authentication_overdue,
                task,
                session,
                host,
            )
        try:
            await self._serve_session(reader, writer, host, session)
        finally:
            if deadline is not None:
                deadline.cancel()
            session.close()

    async def _serve_session(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        host: str,
        session: Session,
    ) -> None:
        idle_s = self.limits.idle_ms / 1000
        read_s = self.limits.read_timeout_ms / 1000
        in_flight: collections.deque[asyncio.Task[bool]] = collections.deque()

        async def answered() -> bool:
            """Rule 11: every request in flight answered, in order; False when one closed
            the connection (those after it are then not answered)."""
            while in_flight:
                if not await in_flight.popleft():
                    return False
            return True

        try:
            while True:
                if any(_closed_it(t) for t in in_flight):
                    return
                while in_flight and in_flight[0].done():
                    in_flight.popleft()
                if session.close_after_answer:  # nothing more is read once it is answered
                    await answered()
                    return
                if len(in_flight) >= _MAX_PIPELINED:
                    await asyncio.wait({in_flight[0]})
                    continue
                try:
                    async with asyncio.timeout(idle_s):  # no task per read, as wait_for makes
                        head = await reader.readexactly(4)
                except (asyncio.IncompleteReadError, OSError, TimeoutError):
                    # (ssl.SSLError is an OSError) the client is done, or silent: what it
                    # asked before is still answered
                    await answered()
                    return
                (size,) = _SIZE.unpack(head)
                stranger = _stranger(session)
                limit = self.max_frame_bytes
                if stranger:
                    limit = min(limit, _UNAUTHENTICATED_MAX_BYTES)
                if not _MIN_FRAME <= size <= limit:
                    log.info("kafka_frame_refused", client=host, size=size)
                    return
                lease: Lease | None = None
                try:
                    async with asyncio.timeout(read_s):  # rule 8: room, then the bytes
                        lease = await self.budget.acquire(size, authenticated=not stranger)
                        if lease is None:
                            log.info(
                                "kafka_frame_over_request_budget",
                                client=host,
                                size=size,
                                budget=self.budget.capacity,
                            )
                            return
                        frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, OSError):
                    if lease is None:
                        log.info(
                            "kafka_request_budget_exhausted",
                            client=host,
                            size=size,
                            in_use=self.budget.in_use,
                        )
                    else:
                        lease.release()
                    return
                # authentication changes the connection: such a request waits for those
                # before it, and the next for it (rule 11)
                barrier = _HEAD.unpack_from(frame)[0] in _AUTHENTICATION_APIS
                if barrier and not await answered():
                    lease.release()
                    return
                # a client over its quota waits for its answer without holding the budget:
                # the request is handled by then (Kafka mutes the channel, not the buffer)
                session.before_throttle = lease.release
                ordered = session.ordered = asyncio.Event()
                pipelines = session.pipelines() and not barrier
                task = asyncio.create_task(
                    self._answered(
                        frame,
                        writer,
                        host,
                        session,
                        read_s,
                        lease,
                        in_flight[-1] if in_flight else None,
                    )
                )
                task.add_done_callback(functools.partial(_set_event, ordered))  # or ended
                in_flight.append(task)
                if not pipelines:  # this one answered (and any still before it) first
                    if not await answered():
                        return
                    continue
                await ordered.wait()  # its ordered point, or its end
        finally:
            for task in in_flight:
                task.cancel()
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)

    async def _answered(  # noqa: PLR0917 - _respond's, and what the request holds
        self,
        frame: bytes,
        writer: asyncio.StreamWriter,
        host: str,
        session: Session,
        read_s: float,
        lease: Lease,
        after: asyncio.Task[bool] | None,
    ) -> bool:
        """Rule 11: one request handled and answered once the one before it (`after`) is;
        its bytes given back then. A connection to close is closed here, so that reading
        its next request stops too."""
        ok = False
        try:
            ok = await self._respond(frame, writer, host, session, read_s, after=after)
            if not ok and after is not None:
                await asyncio.wait({after})  # the answers before it still go out
            return ok
        finally:
            lease.release()
            if not ok:
                writer.close()

    async def _respond(
        self,
        frame: bytes,
        writer: asyncio.StreamWriter,
        host: str,
        session: Session,
        read_s: float,
        *,
        after: asyncio.Task[bool] | None = None,
    ) -> bool:
        """Decode, handle and answer one frame, its answer written once the request before
        it (`after`) has answered; False when the connection is to close."""
        answer: bytes | None
        try:
            request = await self._decode(frame, session)
        except messages.UnsupportedVersion as exc:
            if exc.api_key != messages.ApiKey.API_VERSIONS:
                log.info(
                    "kafka_unsupported_version",
                    client=host,
                    api_key=exc.api_key,
                    api_version=exc.api_version,
                )
                return False
            try:
                session.count_unauthenticated()  # rule 9: a stranger's answers are all counted
            except CloseConnection as closing:
                log.info("kafka_connection_closed", client=host, why=str(closing))
                return False
            answer = self.handlers.unsupported_api_versions(exc.correlation_id)
        except CloseConnection as exc:
            log.info("kafka_connection_closed", client=host, why=str(exc))
            return False
        except WireError as exc:
            api_key, api_version = _HEAD.unpack_from(frame) if len(frame) >= 4 else (-1, -1)
            log.info(
                "kafka_malformed_request",
                client=host,
                api_key=api_key,
                api_version=api_version,
                error=str(exc),
                head=bytes(frame[:64]).hex(),  # bounded: enough to tell which request
            )
            return False
        else:
            try:
                answer = await session.handle(request)
            except CloseConnection as exc:
                log.info("kafka_connection_closed", client=host, why=str(exc))
                return False
            except Exception:
                log.exception("kafka_request_failed", client=host, api_key=request.api_key)
                return False
        if after is not None:  # rule 11: answers in request order
            if not after.done():
                await asyncio.wait({after})  # (its failure is not raised here: it closes)
            if after.cancelled() or after.exception() is not None or not after.result():
                return False
        if answer is None:  # acks=0: no response
            return True
        writer.write(_SIZE.pack(len(answer)) + answer)
        transport = writer.transport
        if transport.get_write_buffer_size() > 0 or transport.is_closing():  # (else: no wait)
            try:
                async with asyncio.timeout(read_s):
                    await writer.drain()
            except OSError:
                return False
        return not session.close_after_answer
