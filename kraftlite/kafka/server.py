"""The Kafka listener on a broker (issue 16): Kafka's request/response framing over asyncio
streams, in front of the same broker service as the HTTP edge (handlers.py translates).

Rules:
1. A frame is a 4-byte big-endian size and that many bytes. A size below 8 or over
   `socket.request.max.bytes`, a frame that does not arrive within `request.read.timeout.ms`
   once its size came, or one that does not decode, closes that connection and nothing
   else: nothing of it was acted on. A connection silent for `connections.max.idle.ms`
   between requests is closed (Kafka's `connections.max.idle.ms`).
2. Requests on one connection are handled one at a time, in order, and answered in order
   (Kafka mutes a connection while a request is in flight): a producer's batches to a
   partition are appended in the order it sent them.
3. An ApiVersions request of a version this broker does not serve is answered in
   ApiVersions v0 with UNSUPPORTED_VERSION and the versions served (KIP-511), so a newer
   client can pick one; any other unserved API or version closes the connection, as Kafka
   does, since its answer's layout would be unknown to the client.
4. Connections are counted like the HTTP listener's (`max.connections`,
   `max.connections.per.ip`): one over either is closed as it is accepted.
5. No handler's failure takes the listener down: an unexpected exception is logged and
   closes its connection.
6. A request costs nothing before it is known to be served: its header is read first, and
   an API this listener does not answer (or anything but authenticating, on a connection
   that must authenticate and has not; its frames are then at most 512 KiB) closes the
   connection undecoded. A body holds at most
   `messages.MAX_REQUEST_ITEMS` array items, and one over 256 KiB is decoded on a worker
   thread, one at a time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import struct

import structlog

from kraftlite.api.auth import certificate_principal
from kraftlite.config import ListenerLimits
from kraftlite.kafka import messages
from kraftlite.kafka.handlers import CloseConnection, Handlers, Session
from kraftlite.kafka.wire import WireError

log = structlog.get_logger(__name__)
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hh")  # api key, api version
_MIN_FRAME = 8  # api key, version, correlation id: the least a request header holds
_INLINE_DECODE_BYTES = 256 << 10  # larger requests are decoded on a worker thread
# what a connection that must authenticate may send before it has (Kafka's
# sasl.server.max.receive.size): a stranger's frame is never buffered whole at 100 MiB
_UNAUTHENTICATED_MAX_BYTES = 512 << 10


class KafkaServer:
    def __init__(self, handlers: Handlers, limits: ListenerLimits, max_frame_bytes: int) -> None:
        self.handlers = handlers
        self.limits = limits
        self.max_frame_bytes = max_frame_bytes
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
        if (
            len(self._connections) >= self.limits.max_connections
            or self._per_ip[host] >= self.limits.max_connections_per_ip
        ):
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
        """Rule 6: the header first; a request this listener would refuse is refused before
        its body is decoded, and a large body is decoded off the event loop, one at a
        time (heartbeats and leases ride on the loop)."""
        api_key, api_version, _ = messages.peek_header(frame)
        refusal = session.refusal(api_key, api_version)
        if refusal is not None and api_key != messages.ApiKey.API_VERSIONS:
            raise CloseConnection(refusal)
        if len(frame) <= _INLINE_DECODE_BYTES:
            return messages.decode_request(frame)
        async with self._decoding:
            return await asyncio.to_thread(messages.decode_request, frame)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str
    ) -> None:
        session = self.handlers.session(
            host, certificate_principal(writer.get_extra_info("ssl_object"))
        )
        try:
            await self._serve_session(reader, writer, host, session)
        finally:
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
        while True:
            try:
                head = await asyncio.wait_for(reader.readexactly(4), idle_s)
                (size,) = _SIZE.unpack(head)
                limit = self.max_frame_bytes
                if session.must_authenticate and not session.authenticated:
                    limit = min(limit, _UNAUTHENTICATED_MAX_BYTES)
                if not _MIN_FRAME <= size <= limit:
                    log.info("kafka_frame_refused", client=host, size=size)
                    return
                frame = await asyncio.wait_for(reader.readexactly(size), read_s)
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                return
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
                    return
                answer = self.handlers.unsupported_api_versions(exc.correlation_id)
            except CloseConnection as exc:
                log.info("kafka_connection_closed", client=host, why=str(exc))
                return
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
                return
            else:
                try:
                    answer = await session.handle(request)
                except CloseConnection as exc:
                    log.info("kafka_connection_closed", client=host, why=str(exc))
                    return
                except Exception:
                    log.exception("kafka_request_failed", client=host, api_key=request.api_key)
                    return
            if answer is None:  # acks=0: no response
                continue
            writer.write(_SIZE.pack(len(answer)) + answer)
            try:
                await asyncio.wait_for(writer.drain(), read_s)
            except (ConnectionError, TimeoutError):
                return
            if session.close_after_answer:
                return
