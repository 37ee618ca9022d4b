"""The Raft port's bounded reader (kraftlite/raft/transport.py) on real loopback sockets.

A BoundedTcpServer is driven by a pump thread standing in for pysyncobj's tick thread;
peers are plain sockets that speak pysyncobj's framing (a native int length, then a Fernet
token of zlib(pickle(message))) and its key exchange.
"""

from __future__ import annotations

import importlib.metadata
import os
import pickle
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller

from kraftlite.raft.transport import (
    PRE_AUTH_MAX_MESSAGE_BYTES,
    BoundedTcpConnection,
    BoundedTcpServer,
    PortLimits,
    PortStats,
)

pytestmark = pytest.mark.integration

PASSWORD = "the-cluster-password"
ENCRYPTOR = getEncryptor(PASSWORD)


def frame(message: Any, encryptor: Any = ENCRYPTOR, timestamp: int | None = None) -> bytes:
    at = int(time.time()) if timestamp is None else timestamp
    data = encryptor.encrypt_at_time(zlib.compress(pickle.dumps(message), 3), at)
    return struct.pack("i", len(data)) + data


def read_frame(sock: socket.socket) -> Any:
    (length,) = struct.unpack("i", recv_exactly(sock, 4))
    return pickle.loads(zlib.decompress(ENCRYPTOR.decrypt(recv_exactly(sock, length))))


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "closed"
        data += chunk
    return data


def wait_for(condition: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def closed_by_server(sock: socket.socket, timeout_s: float = 10) -> bool:
    """True once the server closed: EOF or reset (what it sent before is discarded)."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


class Port:
    """A BoundedTcpServer with pysyncobj's incoming handshake: the peer's first message is
    its key; this side answers with its own; later messages are collected."""

    def __init__(self, limits: PortLimits) -> None:
        self.poller = createPoller("auto")
        self.stats = PortStats()
        self.connections: list[BoundedTcpConnection] = []
        self.messages: list[Any] = []
        self.server = BoundedTcpServer(
            self.poller,
            "127.0.0.1",
            0,
            self._on_new,
            send_buffer_size=1 << 16,
            recv_buffer_size=1 << 16,
            connection_timeout=30,
            limits=limits,
            stats=self.stats,
        )
        self.server.bind()
        self.port = self.server._TcpServer__socket.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _on_new(self, conn: BoundedTcpConnection) -> None:
        conn.encryptor = ENCRYPTOR
        conn.setOnMessageReceivedCallback(lambda message: self._on_message(conn, message))
        self.connections.append(conn)

    def _on_message(self, conn: BoundedTcpConnection, message: Any) -> None:
        if not conn.sendRandKey:
            conn.sendRandKey = message
            conn.recvRandKey = os.urandom(32)
            conn.send(conn.recvRandKey)
            return
        self.messages.append(message)

    def _pump(self) -> None:  # the tick thread
        while not self._stop.is_set():
            self.poller.poll(0.01)
            self.server.prune()

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def handshake(self) -> tuple[socket.socket, bytes]:
        """A peer that knows the password: returns its socket and the key to send with."""
        sock = self.connect()
        my_key = os.urandom(32)
        sock.sendall(frame(my_key))
        echoed, server_key = read_frame(sock)
        assert echoed == my_key
        return sock, server_key

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self.connections:
            conn.disconnect()
        self.server.unbind()


@pytest.fixture
def port() -> Iterator[Port]:
    serving = Port(PortLimits(max_message_bytes=8 << 20))
    yield serving
    serving.close()


def flood(sock: socket.socket, header: bytes, total: int) -> int:
    """Send the header, then junk until `total` bytes or the server closes; bytes sent."""
    junk = os.urandom(1 << 16)
    sent = 0
    try:
        sock.sendall(header)
        sent = len(header)
        while sent < total:
            sent += sock.send(junk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_pysyncobj_is_the_version_whose_private_names_are_patched() -> None:
    assert importlib.metadata.version("pysyncobj") == "0.3.17"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (struct.pack("i", 64 << 20), "length over the pre-auth limit"),
        (struct.pack("i", 2**31 - 1), "length over the pre-auth limit"),
        (struct.pack("i", PRE_AUTH_MAX_MESSAGE_BYTES + 1), "length over the pre-auth limit"),
        (struct.pack("I", 2**31), "negative length"),
        (struct.pack("i", -1), "negative length"),
    ],
    ids=["64 MiB", "2 GiB", "limit + 1", "-2 GiB", "-1"],
)
def test_an_oversized_or_negative_length_closes_after_four_bytes(
    port: Port, header: bytes, reason: str
) -> None:
    with port.connect() as sock:
        sent = flood(sock, header, 64 << 20)
        assert closed_by_server(sock)
    wait_for(lambda: port.connections and port.connections[0].closed)
    assert port.connections[0].bytes_read == 4
    assert sent < 64 << 20  # the stranger was cut off, not merely ignored
    assert port.stats.closed == {reason: 1}
    assert port.messages == []


def test_garbage_within_the_limit_is_read_once_then_closed(port: Port) -> None:
    garbage = os.urandom(PRE_AUTH_MAX_MESSAGE_BYTES)
    with port.connect() as sock:
        sock.sendall(struct.pack("i", len(garbage)) + garbage + os.urandom(1 << 20))
        assert closed_by_server(sock)
    wait_for(lambda: port.connections and port.connections[0].closed)
    # the first message, and nothing past it
    assert port.connections[0].bytes_read == 4 + PRE_AUTH_MAX_MESSAGE_BYTES
    assert port.stats.closed == {"invalid token": 1}


def test_a_wrong_password_never_gets_in(port: Port) -> None:
    wrong = getEncryptor("not-the-password")
    with port.connect() as sock:
        sock.sendall(frame(os.urandom(32), wrong) + frame("127.0.0.1:1", wrong))
        assert closed_by_server(sock)
    wait_for(lambda: port.connections and port.connections[0].closed)
    assert not port.connections[0].authenticated
    assert port.messages == []
    assert port.stats.closed == {"invalid token": 1}


def test_a_replayed_first_message_does_not_authenticate(port: Port) -> None:
    """The first message proves the password but not freshness: a captured one replayed
    keeps the pre-auth limit, and messages without the fresh key are refused."""
    with port.connect() as sock:
        sock.sendall(frame(os.urandom(32)))
        read_frame(sock)  # the server's key, which a replayer cannot read without the password
        assert not port.connections[0].authenticated
        sent = flood(sock, struct.pack("i", 1 << 20), 8 << 20)
        assert closed_by_server(sock)
    assert sent < 8 << 20
    assert port.messages == []


def test_after_authentication_big_and_many_messages_arrive_whole_and_in_order(
    port: Port,
) -> None:
    sock, key = port.handshake()
    with sock:
        sock.sendall(frame((key, "127.0.0.1:1")))
        wait_for(lambda: port.messages == ["127.0.0.1:1"])
        assert port.connections[0].authenticated
        big = os.urandom(5 << 20)  # incompressible: about 7 MiB on the wire
        # framed in sending order: a token older than the one before is refused
        frames = frame((key, big)) + b"".join(frame((key, ("small", i))) for i in range(500))
        sock.sendall(frames)
        wait_for(lambda: len(port.messages) == 502, timeout_s=60)
        assert port.messages[1] == big
        assert port.messages[2:] == [("small", i) for i in range(500)]
        assert not port.connections[0].closed
        assert len(port.connections[0]._buffer) == 0  # consumed, not kept behind a position
        assert port.stats.largest_message > 5 << 20
        # a real handshake's messages, for PRE_AUTH_MAX_MESSAGE_BYTES
        assert 0 < port.stats.largest_pre_auth_message < 512


def test_after_authentication_the_bigger_limit_still_holds(port: Port) -> None:
    sock, key = port.handshake()
    with sock:
        sock.sendall(frame((key, "127.0.0.1:1")))
        wait_for(lambda: port.connections[0].authenticated)
        sent = flood(sock, struct.pack("i", (8 << 20) + 1), 64 << 20)
        assert closed_by_server(sock)
    assert sent < 64 << 20
    assert port.stats.closed == {"length over the limit": 1}


def test_a_message_without_the_connection_key_is_refused(port: Port) -> None:
    sock, _ = port.handshake()
    with sock:
        sock.sendall(frame((os.urandom(32), "127.0.0.1:1")))
        assert closed_by_server(sock)
    assert port.messages == []
    assert port.stats.closed == {"wrong connection key": 1}


def test_an_older_token_than_the_last_one_is_refused(port: Port) -> None:
    """pysyncobj's replay guard within a connection, kept."""
    sock, key = port.handshake()
    with sock:
        now = int(time.time())
        sock.sendall(frame((key, "127.0.0.1:1"), timestamp=now + 10))
        wait_for(lambda: port.messages == ["127.0.0.1:1"])
        sock.sendall(frame((key, "again"), timestamp=now))
        assert closed_by_server(sock)
    assert port.messages == ["127.0.0.1:1"]
    assert port.stats.closed == {"stale token": 1}


def test_unauthenticated_connections_are_capped_and_expire() -> None:
    port = Port(PortLimits(max_pending_connections=4, pre_auth_deadline_ms=2000))
    try:
        idle = []
        for _ in range(7):  # one at a time: the listen backlog is only 5
            idle.append(port.connect())
            wait_for(lambda: port.stats.accepted + sum(port.stats.closed.values()) == len(idle))
        assert port.stats.accepted == 4
        assert port.stats.closed == {"too many unauthenticated connections": 3}
        # the deadline closes the four that were let in
        for sock in idle:
            assert closed_by_server(sock)
        assert port.stats.closed["not authenticated in time"] == 4
        # a peer that does authenticate in time is not closed
        sock, key = port.handshake()
        with sock:
            sock.sendall(frame((key, "127.0.0.1:1")))
            time.sleep(1)
            assert port.messages == ["127.0.0.1:1"]
            assert not port.connections[-1].closed
        for sock in idle:
            sock.close()
    finally:
        port.close()
