"""Slow and many connections against a real broker: slowloris headers and slow bodies are
cut off, one address cannot take more than `max.connections.per.ip`, and the cluster's own
traffic (from another address) is not affected.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.harness.processes import Cluster, http, http_retry

pytestmark = [pytest.mark.security, pytest.mark.timeout(180)]
ATTACKER = "127.0.0.2"  # loopback, but not the address the cluster's own calls come from
LIMITS = {
    "max.connections.per.ip": 20,
    "connections.max.idle.ms": 2000,
    "request.read.timeout.ms": 2000,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("connections"), brokers=1, broker_config=LIMITS)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5, source_address=(ATTACKER, 0))
    sock.settimeout(0.2)
    return sock


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> bool:
    """True once the server closes `sock` (EOF or reset), sending `trickle` a byte at a time
    meanwhile; False if it is still open after `seconds`."""
    deadline = time.monotonic() + seconds
    position = 0
    while time.monotonic() < deadline:
        if position < len(trickle):
            try:
                sock.sendall(trickle[position : position + 1])
            except OSError:
                return True
            position += 1
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return True
        if not data:
            return True
        if b"HTTP/1.1 5" in data or b"HTTP/1.1 4" in data:  # an error answer, then the close
            continue
    return False


def test_headers_sent_a_byte_at_a_time_are_cut_off(cluster: Cluster) -> None:
    sock = _connect(cluster.urls[1])
    with contextlib.closing(sock):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        trickle = b"".join(f"X-Slow-{i}: {i}\r\n".encode() for i in range(200))
        assert _closed_within(sock, 15, trickle)


def test_an_idle_connection_is_closed(cluster: Cluster) -> None:
    sock = _connect(cluster.urls[1])
    with contextlib.closing(sock):
        assert _closed_within(sock, 15)


def test_a_body_that_does_not_arrive_in_time_is_refused(cluster: Cluster) -> None:
    sock = _connect(cluster.urls[1])
    with contextlib.closing(sock):
        sock.sendall(
            b"POST /v1/topics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\n\r\n{"
        )
        answer = b""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and b"\r\n\r\n" not in answer:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 504"), answer[:200]
        assert b"REQUEST_TIMED_OUT" in answer or b"\r\n\r\n" in answer


def test_one_address_gets_at_most_its_share_of_connections(cluster: Cluster) -> None:
    url = cluster.urls[1]
    held = [_connect(url) for _ in range(20)]
    try:
        # each held connection is admitted: it gets an answer
        held[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        held[0].settimeout(10)
        assert held[0].recv(65536).startswith(b"HTTP/1.1 200")
        extra = _connect(url)
        with contextlib.closing(extra):
            assert _closed_within(extra, 5)
        # the cluster's own traffic and other clients come from elsewhere: unaffected
        status, _ = http("POST", url + "/v1/topics", {"name": "still-works"})
        assert status == 201
        assert http("GET", url + "/readyz")[0] == 200
    finally:
        for sock in held:
            sock.close()
    # released (once the node has seen them close): the address may connect again
    deadline = time.monotonic() + 10
    while True:
        again = _connect(url)
        with contextlib.closing(again), contextlib.suppress(OSError):  # refused: again
            again.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            again.settimeout(10)
            if again.recv(65536).startswith(b"HTTP/1.1 200"):
                break
        assert time.monotonic() < deadline, "the address was never let in again"
        time.sleep(0.2)


# -- slots the clients cannot take from the nodes (listener.py rule 1) ------------------------

FULL = {"max.connections": 40, "connections.reserved.for.nodes": 32}
ATTACKERS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")


@pytest.fixture(scope="module")
def full_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("full"), brokers=2, broker_config=FULL, controller_config=FULL
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _open(url: str, source: str) -> socket.socket | None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        sock = socket.create_connection((host, int(port)), timeout=2, source_address=(source, 0))
    except OSError:
        return None
    sock.settimeout(0.2)
    return sock


def test_a_flood_of_clients_from_many_addresses_cannot_keep_a_broker_from_rejoining(
    full_cluster: Cluster,
) -> None:
    """Every connection slot of every controller and of broker 1 held by clients from four
    addresses, and more arriving all along: broker 2, killed and restarted, registers with
    the controllers and catches up through the slots reserved for the nodes."""
    targets = [*full_cluster.quorum.urls.values(), full_cluster.urls[1]]
    held: list[socket.socket] = []
    stop = threading.Event()

    def flood() -> None:  # new connections all along, into the reserved slots
        while not stop.is_set():
            for url in targets:
                sock = _open(url, ATTACKERS[len(held) % len(ATTACKERS)])
                if sock is not None:
                    held.append(sock)
            time.sleep(0.02)

    flooding = threading.Thread(target=flood, daemon=True)
    try:
        for url in targets:
            for i in range(FULL["max.connections"]):
                sock = _open(url, ATTACKERS[i % len(ATTACKERS)])
                if sock is not None:
                    held.append(sock)
        # every regular slot is taken: a client's request now lands in a reserved slot, and
        # one that is not a node's is closed unanswered
        extra = _open(full_cluster.urls[1], ATTACKERS[0])
        assert extra is not None
        with contextlib.closing(extra):
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert _closed_within(extra, 3)
        flooding.start()
        full_cluster.processes[2].kill()
        full_cluster.processes[2].start()
        full_cluster.wait_ready([2], timeout_s=40)
    finally:
        stop.set()
        if flooding.is_alive():
            flooding.join(5)
        for sock in held:
            sock.close()
    # and it stays in the cluster: the controllers hear its heartbeats (unfenced). Asked
    # once the flood is gone: a client's call a broker passes on to a controller is the
    # client's traffic, and gets none of the reserved slots (listener.py rule 1)
    status, brokers = http_retry("GET", full_cluster.urls[2] + "/v1/brokers")
    assert status == 200, brokers
    assert {b["id"]: b["fenced"] for b in brokers["brokers"]}.get(2) is False
