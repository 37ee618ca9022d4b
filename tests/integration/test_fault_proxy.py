"""The fault-injecting proxy itself: it names the process that connects, forwards, cuts open
connections (a keep-alive pool cannot carry traffic across a cut), refuses or holds new
ones per the cut's mode, and forwards again after a heal.
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.harness.network import CLIENT, FaultProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[tuple[FaultProxy, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # This test process plays node "me": its own connections are identified as that node.
    running = FaultProxy(lambda: {os.getpid(): "me"})
    port = running.add_route("echo", server.server_address[1])
    try:
        yield running, port
    finally:
        running.close()
        server.shutdown()
        server.server_close()


def roundtrip(conn: socket.socket, payload: bytes = b"ping") -> bytes:
    conn.sendall(payload)
    return conn.recv(4096)


def assert_cut(conn: socket.socket) -> None:
    """Nothing comes back: the connection is reset or closed."""
    try:
        answer = roundtrip(conn)
    except OSError:
        return
    assert answer == b""


def test_forwards_and_names_the_connecting_process(proxy: tuple[FaultProxy, int]) -> None:
    running, port = proxy
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        assert roundtrip(conn) == b"ping"
    assert running.accepted == {("me", "echo"): 1}
    assert CLIENT == "client"  # anything not in sources() would be named this


def test_a_cut_aborts_open_connections_and_refuses_new_ones(
    proxy: tuple[FaultProxy, int],
) -> None:
    running, port = proxy
    with socket.create_connection(("127.0.0.1", port), timeout=5) as kept:
        assert roundtrip(kept) == b"ping"
        running.cut("me", "echo")
        assert_cut(kept)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as fresh:
        assert_cut(fresh)
    running.heal()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as healed:
        assert roundtrip(healed) == b"ping"


def test_a_hanging_cut_forwards_nothing_until_healed(proxy: tuple[FaultProxy, int]) -> None:
    running, port = proxy
    running.cut("me", "echo", mode="hang")
    with socket.create_connection(("127.0.0.1", port), timeout=0.5) as held:
        held.sendall(b"ping")
        with pytest.raises(TimeoutError):
            held.recv(4096)
        running.heal()
        held.settimeout(5)
        assert held.recv(4096) == b""  # closed on heal; the client reconnects
    with socket.create_connection(("127.0.0.1", port), timeout=5) as fresh:
        assert roundtrip(fresh) == b"ping"


def test_a_cut_of_one_link_leaves_the_others(proxy: tuple[FaultProxy, int]) -> None:
    running, port = proxy
    running.cut("someone-else", "echo")
    running.cut("me", "elsewhere")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        assert roundtrip(conn) == b"ping"


def _sockets_on(port: int) -> set[int]:
    """Inodes of this process's open sockets whose local end is 127.0.0.1:port."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                mine.add(int(target[len("socket:[") : -1]))
    local = f":{port:04X}"
    found = set()
    with open("/proc/net/tcp") as lines:
        next(lines)
        for line in lines:
            fields = line.split()
            if fields[1].endswith(local) and int(fields[9]) in mine:
                found.add(int(fields[9]))
    return found


def test_closing_while_connections_arrive_leaves_no_socket_open() -> None:
    """Connections accepted as the proxy closes, some not yet served, are closed with it:
    nothing is left for the garbage collector (a ResourceWarning that fails the suite)."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    running = FaultProxy(lambda: {os.getpid(): "me"})
    port = running.add_route("echo", server.server_address[1])
    clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(30)]
    try:
        running.close()
        assert _sockets_on(port) == set()
    finally:
        for client in clients:
            client.close()
        server.shutdown()
        server.server_close()
