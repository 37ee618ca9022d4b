"""The test hosts themselves (tests/harness/hosts.py): each fault does to TCP what it says,
measured between two hosts with an echo server, and `heal` undoes it."""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.harness.hosts import TestNet

pytestmark = [pytest.mark.integration, pytest.mark.network, pytest.mark.timeout(120)]

ECHO = """
import socket, threading
server = socket.create_server(("0.0.0.0", 7000), reuse_port=True)
def echo(connection):
    with connection:
        while data := connection.recv(65536):
            connection.sendall(data)
while True:
    threading.Thread(target=echo, args=(server.accept()[0],), daemon=True).start()
"""


@pytest.fixture
def two() -> Iterator[TestNet]:
    """Hosts a and b (an echo server on b:7000), the test on host a."""
    net = TestNet(["a", "b"])
    server = None
    try:
        server = subprocess.Popen(net["b"].command([sys.executable, "-c", ECHO]))
        with net.inside("a"):
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection((net["b"].address, 7000), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the echo server never answered"
                    time.sleep(0.05)
            yield net
    finally:
        if server is not None:
            server.kill()
            server.wait()
        net.close()


def connect(net: TestNet, timeout_s: float = 1.5) -> socket.socket:
    return socket.create_connection((net["b"].address, 7000), timeout=timeout_s)


def round_trip_ms(connection: socket.socket, rounds: int = 15) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        connection.sendall(b"x")
        assert connection.recv(16) == b"x"
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def test_hosts_reach_each_other_and_only_through_the_hub(two: TestNet) -> None:
    with connect(two) as connection:
        assert round_trip_ms(connection) < 5
    assert two["a"].address != two["b"].address
    # the namespace the hosts were built from has no address or route in the test range
    for what in ("route", "address"):
        with two.outside():
            shown = subprocess.run(["ip", what], capture_output=True, text=True, check=True)
        assert "10.88." not in shown.stdout


def test_inside_moves_only_the_calling_thread_and_returns(two: TestNet) -> None:
    with two.inside("b"):  # b's own loopback: the echo server listens on every address
        socket.create_connection(("127.0.0.1", 7000), timeout=1).close()
    with pytest.raises(OSError):  # back on a, whose loopback has no server
        socket.create_connection(("127.0.0.1", 7000), timeout=1)


def test_delay_is_added_per_link_each_way(two: TestNet) -> None:
    two.shape_all(delay_ms=5)
    with connect(two) as connection:
        # a round trip crosses a's link and b's link twice: 4 x 5 ms
        assert 19 <= round_trip_ms(connection) < 40
    two.shape("a", delay_ms=20, jitter_ms=5)
    with connect(two) as connection:
        assert 45 <= round_trip_ms(connection) < 90  # 2 x (20 +- 5) + 2 x 5
    two.heal(shapes=True)
    with connect(two) as connection:
        assert round_trip_ms(connection) < 5


def test_a_reset_cut_refuses_new_connections_and_resets_open_ones_one_way(two: TestNet) -> None:
    open_one = connect(two)
    two.cut("a", "b", "reset")
    with pytest.raises(ConnectionRefusedError):
        connect(two)
    open_one.sendall(b"x")
    with pytest.raises(ConnectionResetError):
        open_one.recv(16)
    open_one.close()
    two.heal()
    with connect(two) as connection:
        assert round_trip_ms(connection, 3) < 5


def test_a_hang_cut_and_silence_drop_packets_without_refusing(two: TestNet) -> None:
    for fault in ("hang", "silence"):
        open_one = connect(two)
        if fault == "hang":
            two.cut("a", "b", "hang")
        else:
            two.silence("b")
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            connect(two, timeout_s=1)
        assert time.monotonic() - start >= 0.9  # timed out, not refused
        open_one.settimeout(1)
        open_one.sendall(b"x")
        with pytest.raises(TimeoutError):
            open_one.recv(16)
        open_one.close()
        two.heal()
        with connect(two) as connection:
            assert round_trip_ms(connection, 3) < 5


def test_a_cut_is_one_way_b_may_still_connect_to_a(two: TestNet) -> None:
    listener = socket.create_server((two["a"].address, 7001))
    try:
        two.cut("a", "b", "hang")
        with two.inside("b"):
            socket.create_connection((two["a"].address, 7001), timeout=1).close()
        with pytest.raises(TimeoutError):
            connect(two, timeout_s=0.5)
    finally:
        listener.close()


def test_a_pulled_cable_makes_the_network_unreachable_until_healed(two: TestNet) -> None:
    two.cut_link("a")
    with pytest.raises(OSError):
        connect(two, timeout_s=1)
    two.heal()
    with connect(two, timeout_s=3) as connection:
        assert round_trip_ms(connection, 3) < 5


def test_loss_drops_about_the_share_asked(two: TestNet) -> None:
    """Connection attempts (one SYN each, 0.2 s to answer) through a link losing 40 %: a SYN
    and its SYN-ACK both cross it, so about 1 - 0.6^2 = 64 % fail (26 of 40, sd 3)."""
    two.shape("b", loss_pct=40)
    failed = 0
    for _ in range(40):
        try:
            connect(two, timeout_s=0.2).close()
        except TimeoutError:
            failed += 1
    assert 14 <= failed <= 37, failed
    two.heal(shapes=True)
    connect(two).close()


def test_partition_splits_sets_both_ways() -> None:
    net = TestNet(["x", "y", "z"])
    try:
        servers = {}
        for name in ("y", "z"):
            with net.inside(name):
                servers[name] = socket.create_server((net[name].address, 7002))
        net.partition(["x"], ["y"])
        with net.inside("x"):
            with pytest.raises(TimeoutError):
                socket.create_connection((net["y"].address, 7002), timeout=0.5)
            socket.create_connection((net["z"].address, 7002), timeout=1).close()
        with net.inside("y"), pytest.raises(OSError):
            socket.create_connection((net["x"].address, 7002), timeout=0.5)
        for server in servers.values():
            server.close()
    finally:
        net.close()
