"""pysyncobj's TCP transport with an exact bind and a bounded reader (issue 12).

What pysyncobj 0.3.17 does with a peer's bytes, and why kraftlite replaces it:
- it listens on 0.0.0.0 when given only its own address (`bindAddress` unset);
- it trusts the 4-byte length a connection declares (up to 2 GiB) before the peer has
  proved anything, appends every recv with `bytes +=` (a full copy each time: quadratic),
  and reads until the socket runs dry, all on the tick thread. One stranger streaming 64 MiB
  starved the tick thread for 40 s: no heartbeats, a broker's lease lapsed.

So, by subclassing pysyncobj's classes and handing SyncObj `BoundedTcpTransport` as its
transport class:
- the server binds exactly `bindAddress` (kraftlite sets it to the node's Raft address);
- a connection buffers into a bytearray with a read position (linear), and checks a length
  as soon as its 4 bytes arrive: negative, or over the limit, closes the connection before
  another byte is read. Before the peer has authenticated the limit is
  `PortLimits.pre_auth_max_message_bytes` and only the bytes the current message still needs
  are read; afterwards it is `max_message_bytes`, and one poll event reads at most
  `read_budget_bytes`, so no connection holds the tick thread for long;
- at most `max_pending_connections` incoming connections may be unauthenticated at once
  (the next is closed on accept), and one that has not authenticated within
  `pre_auth_deadline_ms` is closed.

Authenticated means the peer sent a message carrying the random key this side chose for the
connection (pysyncobj's handshake: each side sends a random key encrypted with the password
(Fernet), and every later message carries the other side's key). That takes the password
and is fresh, so a replayed handshake does not count. Nothing a connection sends is
decompressed or unpickled before its Fernet token verifies, so a wrong password never gets
past the first message; a transport without a password is refused outright.

pysyncobj is pinned to 0.3.17 (pyproject.toml): the name-mangled attributes and methods
used here (`_TcpConnection__socket`, `_TcpConnection__tryReadBuffer`,
`_TcpServer__onNewConnection`, ...) are that version's; re-check them before a bump
(tests/integration/test_raft_transport.py pins the version).
"""

from __future__ import annotations

import functools
import logging
import socket
import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import InvalidToken
from pysyncobj import pickle as syncobj_pickle
from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic as syncobj_monotonic
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.tcp_server import TcpServer
from pysyncobj.transport import TCPTransport

from kraftlite.clock import Clock, SystemClock

log = logging.getLogger(__name__)

# pysyncobj frames every message with struct.pack("i", len): native int, as its peers send.
_LENGTH = struct.Struct("i")

# A real handshake message (a 32-byte random key, or that key with the node's address) is
# about 160-250 bytes on the wire once pickled, compressed and Fernet-encrypted (measured:
# tests/integration/test_raft_transport.py); 4 KiB leaves room for long host names.
PRE_AUTH_MAX_MESSAGE_BYTES = 4 << 10
# The biggest real message is one command forwarded whole (apply_command; append_entries
# splits entries over 64 KiB and snapshots go in 64 KiB chunks). A controller takes at most
# 1 MiB of HTTP body, so a command's incompressible part is about 1 MiB, about 1.4 MiB once
# encrypted (Fernet is base64); the largest decision, a 10,000-partition topic, is 2.1 MB of
# JSON but 54 KB on the wire. 16 MiB is ten times the worst case.
MAX_MESSAGE_BYTES = 16 << 20
# Voters connect to each other once (a pair's one connection); handshakes take milliseconds.
MAX_PENDING_CONNECTIONS = 16
PRE_AUTH_DEADLINE_MS = 3000
# Bytes one connection may read per poll event once authenticated (pysyncobj reads until
# the socket is dry); the poller is level-triggered, so the rest waits one tick.
READ_BUDGET_BYTES = 1 << 20
_LOG_EVERY_MS = 1000  # at most one "closed" line a second: a flood must not flood the log


@dataclass(frozen=True, slots=True)
class PortLimits:
    """Bounds on what a peer of the Raft port may make this node read and hold."""

    pre_auth_max_message_bytes: int = PRE_AUTH_MAX_MESSAGE_BYTES
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_pending_connections: int = MAX_PENDING_CONNECTIONS
    pre_auth_deadline_ms: int = PRE_AUTH_DEADLINE_MS
    read_budget_bytes: int = READ_BUDGET_BYTES


@dataclass
class PortStats:
    """Counters of one node's Raft port, written on pysyncobj's tick thread."""

    clock: Clock = field(default_factory=SystemClock)
    accepted: int = 0
    closed: Counter[str] = field(default_factory=Counter)  # reason (a fixed text) -> count
    largest_pre_auth_message: int = 0  # bytes on the wire, length prefix excluded
    largest_message: int = 0
    most_read_before_close: int = 0  # by any one connection this port closed
    _next_log_ms: int = 0
    _unlogged: int = 0

    def record_close(self, reason: str, peer: str, bytes_read: int, detail: str = "") -> None:
        self.closed[reason] += 1
        self.most_read_before_close = max(self.most_read_before_close, bytes_read)
        now = self.clock.monotonic_ms()
        if now < self._next_log_ms:
            self._unlogged += 1
            return
        self._next_log_ms = now + _LOG_EVERY_MS
        log.warning(
            "raft port: closed %s after %d bytes: %s%s (%d more closed since the last line)",
            peer,
            bytes_read,
            reason,
            detail,
            self._unlogged,
        )
        self._unlogged = 0


class _Undecodable(Exception):
    """A message that cannot be taken: "reason" or "reason:detail" (reasons are fixed)."""


class BoundedTcpConnection(TcpConnection):  # type: ignore[misc]
    """A pysyncobj connection whose reads are bounded and linear (see the module docstring).

    Replaces TcpConnection's private `__tryReadBuffer` and `__processParseMessage`, which its
    `__processConnection` calls on a read event, and keeps its own buffer.
    """

    def __init__(self, *, limits: PortLimits, stats: PortStats, peer: str, **kwargs: Any) -> None:
        self._limits = limits
        self._stats = stats
        self.peer = peer
        self._start()
        super().__init__(**kwargs)
        self._recv_size: int = kwargs.get("recvBufferSize", 1 << 16)

    # -- lifecycle: pysyncobj reuses an outgoing connection object for every reconnect --

    def _start(self) -> None:
        self._drop_buffer()
        self.bytes_read = 0  # kept after a close, for the log line and tests
        self.opened_ms = self._stats.clock.monotonic_ms()

    def _drop_buffer(self) -> None:
        self._buffer = bytearray()
        self._position = 0  # bytes of _buffer already handed out as messages
        self.authenticated = False

    def connect(self, host: str, port: int) -> bool:
        self._start()
        return bool(super().connect(host, port))

    def disconnect(self) -> None:
        self._drop_buffer()  # first: the disconnect callback may reconnect this object
        super().disconnect()

    def close_for(self, reason: str, detail: str = "") -> None:
        self._stats.record_close(reason, self.peer, self.bytes_read, detail)
        self.disconnect()

    @property
    def closed(self) -> bool:
        return bool(self.state == CONNECTION_STATE.DISCONNECTED)

    # -- reading -------------------------------------------------------------------------

    def _limit(self) -> int:
        if self.authenticated:
            return self._limits.max_message_bytes
        return self._limits.pre_auth_max_message_bytes

    def _declared_length(self) -> int | None:
        """The next message's length once its 4 bytes are here; closes on a bad one."""
        if len(self._buffer) - self._position < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(self._buffer, self._position)
        if length < 0:
            self.close_for("negative length", f" ({length})")
            return None
        if length > self._limit():
            stage = "the limit" if self.authenticated else "the pre-auth limit"
            self.close_for(f"length over {stage}", f" ({length} bytes declared)")
            return None
        return int(length)

    def _wanted(self) -> int:
        """How many more bytes complete the next message (its length prefix first)."""
        buffered = len(self._buffer) - self._position
        length = self._declared_length()
        if length is None:
            return _LENGTH.size - buffered
        return _LENGTH.size + length - buffered

    def _TcpConnection__tryReadBuffer(self) -> None:  # pysyncobj's private name
        sock: socket.socket = self._TcpConnection__socket
        budget = self._limits.read_budget_bytes
        while budget > 0 and not self.closed:
            size = min(self._recv_size, budget)
            if not self.authenticated:  # read what the current message needs, no more
                size = min(size, self._wanted())
                if self.closed or size <= 0:
                    break
            try:
                chunk = sock.recv(size)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.disconnect()
                return
            if not chunk:
                self.disconnect()
                return
            self._buffer += chunk
            self.bytes_read += len(chunk)
            budget -= len(chunk)
            self._declared_length()  # close at once on a bad length
        self._TcpConnection__lastReadTime = syncobj_monotonic()

    def _TcpConnection__processParseMessage(self) -> Any:
        length = self._declared_length()
        start = self._position + _LENGTH.size
        if length is None or len(self._buffer) - start < length:
            return None
        data = bytes(self._buffer[start : start + length])
        self._position = start + length
        if self._position == len(self._buffer):
            self._buffer.clear()
            self._position = 0
        elif self._position > len(self._buffer) // 2:  # amortised: moves less than it read
            del self._buffer[: self._position]
            self._position = 0
        was_authenticated = self.authenticated
        try:
            message = self._decode(data)
        except _Undecodable as exc:
            reason, _, detail = str(exc).partition(":")
            self.close_for(reason, detail and f" ({detail})")
            return None
        stats = self._stats
        if was_authenticated:
            stats.largest_message = max(stats.largest_message, length)
        else:
            stats.largest_pre_auth_message = max(stats.largest_pre_auth_message, length)
        return message

    def _decode(self, data: bytes) -> Any:
        """Fernet token -> zlib -> pickle, as pysyncobj's peers send; nothing is unpickled
        before the token verifies."""
        encryptor = self.encryptor
        if encryptor is None:
            raise _Undecodable("no password")
        try:
            timestamp = encryptor.extract_timestamp(data)
            plain = encryptor.decrypt(data)
        except InvalidToken:  # a wrong password, or not a Fernet token at all
            raise _Undecodable("invalid token") from None
        if timestamp < self.recvLastTimestamp:
            raise _Undecodable("stale token")
        self.recvLastTimestamp: int = timestamp
        try:
            message = syncobj_pickle.loads(zlib.decompress(plain))
        except Exception as exc:  # noqa: BLE001 - a password holder's broken message: close
            raise _Undecodable(f"undecodable message:{type(exc).__name__}") from None
        if self.recvRandKey:
            if not (
                isinstance(message, tuple) and len(message) == 2 and message[0] == self.recvRandKey
            ):
                raise _Undecodable("wrong connection key")
            self.authenticated = True
            message = message[1]
        return message


class BoundedTcpServer(TcpServer):  # type: ignore[misc]
    """pysyncobj's listener, with accept replaced: bounded connections, a pending cap."""

    def __init__(
        self,
        poller: Any,
        host: str,
        port: int,
        on_new_connection: Any,
        *,
        send_buffer_size: int,
        recv_buffer_size: int,
        connection_timeout: float,
        limits: PortLimits,
        stats: PortStats,
    ) -> None:
        super().__init__(
            poller,
            host,
            port,
            on_new_connection,
            sendBufferSize=send_buffer_size,
            recvBufferSize=recv_buffer_size,
            connectionTimeout=connection_timeout,
        )
        self._poller = poller
        self._on_new = on_new_connection
        self._send_buffer_size = send_buffer_size
        self._recv_buffer_size = recv_buffer_size
        self._connection_timeout = connection_timeout
        self._limits = limits
        self._stats = stats
        self.pending: list[BoundedTcpConnection] = []  # accepted, not yet authenticated

    def prune(self) -> None:
        """Forget connections that authenticated or closed; close those past the deadline."""
        now = self._stats.clock.monotonic_ms()
        still = []
        for conn in self.pending:
            if conn.closed or conn.authenticated:
                continue
            if now - conn.opened_ms > self._limits.pre_auth_deadline_ms:
                conn.close_for("not authenticated in time")
                continue
            still.append(conn)
        self.pending = still

    def _TcpServer__onNewConnection(self, descr: int, event: int) -> None:
        if event & POLL_EVENT_TYPE.READ:
            try:
                sock, address = self._TcpServer__socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # pysyncobj unbinds here for good; keep listening
                log.warning("raft port: accept failed: %s", exc)
                return
            peer = f"{address[0]}:{address[1]}"
            self.prune()
            if len(self.pending) >= self._limits.max_pending_connections:
                sock.close()
                self._stats.record_close("too many unauthenticated connections", peer, 0)
                return
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer_size)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._recv_buffer_size)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
            conn = BoundedTcpConnection(
                limits=self._limits,
                stats=self._stats,
                peer=f"incoming {peer}",
                poller=self._poller,
                socket=sock,
                timeout=self._connection_timeout,
                sendBufferSize=self._send_buffer_size,
                recvBufferSize=self._recv_buffer_size,
            )
            self._stats.accepted += 1
            self.pending.append(conn)
            self._on_new(conn)
        if event & POLL_EVENT_TYPE.ERROR:
            self.unbind()


class BoundedTcpTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCP transport with BoundedTcpServer and BoundedTcpConnection swapped in.

    Pass `functools.partial(BoundedTcpTransport, limits=..., stats=...)` as SyncObj's
    `transportClass`.
    """

    def __init__(
        self,
        syncobj: Any,
        self_node: Any,
        other_nodes: Any,
        *,
        limits: PortLimits,
        stats: PortStats,
    ) -> None:
        if syncobj.encryptor is None:
            raise ValueError("the Raft transport needs a password: without one it is pickle")
        self._limits = limits
        self._stats = stats
        super().__init__(syncobj, self_node, other_nodes)  # calls addNode, _createServer

    def _createServer(self) -> None:
        """Bind exactly bindAddress (or the node's own address), never 0.0.0.0 or ::."""
        conf = self._syncObj.conf
        address = conf.bindAddress or self._selfNode.address
        host, port = address.rsplit(":", 1)
        self._server = BoundedTcpServer(
            self._syncObj._poller,
            globalDnsResolver().resolve(host),
            int(port),
            self._onNewIncomingConnection,
            send_buffer_size=conf.sendBufferSize,
            recv_buffer_size=conf.recvBufferSize,
            connection_timeout=conf.connectionTimeout,
            limits=self._limits,
            stats=self._stats,
        )

    def addNode(self, node: Any) -> None:
        """pysyncobj's, with the outgoing connection made a BoundedTcpConnection: the peer
        this node dials could be anyone listening on that address."""
        super().addNode(node)
        if node not in self._connections:
            return  # the other side connects to us
        conf = self._syncObj.conf
        conn = BoundedTcpConnection(
            limits=self._limits,
            stats=self._stats,
            peer=f"outgoing {node.address}",
            poller=self._syncObj._poller,
            timeout=conf.connectionTimeout,
            sendBufferSize=conf.sendBufferSize,
            recvBufferSize=conf.recvBufferSize,
            keepalive=conf.tcp_keepalive,
        )
        conn.encryptor = self._syncObj.encryptor
        conn.setOnConnectedCallback(functools.partial(self._onOutgoingConnected, conn))
        conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
        conn.setOnDisconnectedCallback(functools.partial(self._onDisconnected, conn))
        self._connections[node] = conn  # replaces the one pysyncobj made, never connected

    def _onTick(self) -> None:
        super()._onTick()
        if self._server is not None:
            self._server.prune()
