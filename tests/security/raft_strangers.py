"""Strangers at a Raft port: what tests and scripts/flood_raft.py throw at a controller."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

MiB = 1 << 20

# What a stranger opens a connection with. pysyncobj frames a message with a native int
# length; 0.3.17 would buffer any length up to 2 GiB - 1, with quadratic copies.
HEADERS = {
    "declared 64 MiB": struct.pack("i", 64 * MiB),
    "declared 2 GiB": struct.pack("i", 2**31 - 1),
    "garbage": os.urandom(64),  # whatever length its first 4 bytes make
}


@dataclass(frozen=True, slots=True)
class Attempt:
    open_s: float  # from connect until the stranger saw it closed (or stopped)
    sent: int  # bytes the kernel took from the stranger: an upper bound on what was read
    closed_by_server: bool


@dataclass
class Stranger:
    """A thread that connects, sends `header` and then junk up to `total` bytes, waits for
    the server to close, and does it again until `stop` is set."""

    address: str
    header: bytes
    stop: threading.Event
    total: int = 64 * MiB
    attempts: list[Attempt] = field(default_factory=list)
    refused: int = 0

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, daemon=True, name=f"stranger {self.header!r}")
        thread.start()
        return thread

    def _run(self) -> None:
        host, port = self.address.rsplit(":", 1)
        junk = os.urandom(MiB // 16)
        while not self.stop.is_set():
            try:
                sock = socket.create_connection((host, int(port)), timeout=5)
            except OSError:
                self.refused += 1
                time.sleep(0.01)
                continue
            opened = time.monotonic()
            sent, closed = 0, False
            with sock:
                try:
                    sock.sendall(self.header)
                    sent = len(self.header)
                    while sent < self.total and not self.stop.is_set():
                        sent += sock.send(junk[: self.total - sent])
                    closed = wait_closed(sock, self.stop)
                except OSError:  # reset or broken pipe: the server closed it
                    closed = True
            self.attempts.append(Attempt(time.monotonic() - opened, sent, closed))


def wait_closed(sock: socket.socket, stop: threading.Event | None = None) -> bool:
    """Read until the server closes (True) or `stop` is set / 10 s pass (False)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        try:
            if not sock.recv(MiB):
                return True
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True
    return False


def idle_connections(address: str, count: int) -> list[socket.socket]:
    """Connections that say nothing (a slowloris holding the port's pending slots)."""
    host, port = address.rsplit(":", 1)
    return [socket.create_connection((host, int(port)), timeout=5) for _ in range(count)]
