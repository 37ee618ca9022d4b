"""Raw Kafka requests for tests, with kraftlite's own codec: one request per connection."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka.messages import ApiKey


def frame(payload: bytes) -> bytes:
    """A request frame: the 4-byte big-endian size, then the bytes."""
    return struct.pack(">i", len(payload)) + payload


def read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def call(address: str, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """Send one request to the listener at `address` ("host:port"); its decoded answer."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(frame(messages.encode_request(api_key, version, 7, "test", body)))
        size = struct.unpack(">i", read_exactly(sock, 4))[0]
        return messages.decode_response(api_key, version, read_exactly(sock, size)).body


class Connection:
    """Several requests on one connection (state a broker keeps per connection, such as a
    fetch session); a context manager."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=30)
        self._correlation = 0

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self._sock.close()

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self._correlation += 1
        request = messages.encode_request(api_key, version, self._correlation, "test", body)
        self._sock.sendall(frame(request))
        size = struct.unpack(">i", read_exactly(self._sock, 4))[0]
        return messages.decode_response(api_key, version, read_exactly(self._sock, size)).body


def plain_login(address: str, user: str, password: str) -> Connection:
    """A connection to the Kafka listener at `address`, authenticated (SASL PLAIN) as
    `user`: what that broker alone answers its principal."""
    connection = Connection(address)
    try:
        handshake = connection.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert handshake["error_code"] == 0, handshake
        token = b"\0" + user.encode() + b"\0" + password.encode()
        answer = connection.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        assert answer["error_code"] == 0, answer
    except BaseException:
        connection.__exit__()
        raise
    return connection
