"""The Spark source's resolver (kraftlite/spark/resolve.py) against a hostile Kafka endpoint:
a real socket server on 127.0.0.1 speaking kraftlite's codec, answering as a liar would. The
resolver never falls back to PLAIN, never believes a forged SCRAM signature, and is bounded
in time and size whatever the server does."""

from __future__ import annotations

import base64
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kraftlite.client import Credentials
from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.security.scram_exchange import ScramError
from kraftlite.spark.options import Security
from kraftlite.spark.resolve import MAX_FRAME, ResolveError, kafka_http_url

pytestmark = [pytest.mark.security, pytest.mark.timeout(60)]
LOGIN = Security(Credentials("alice", "alice-pw"), tls=False, mechanism="SCRAM-SHA-256")
VERSIONS = {
    "error_code": 0,
    "api_keys": [
        {"api_key": int(k), "min_version": 0, "max_version": v}
        for k, v in [
            (ApiKey.METADATA, 12),
            (ApiKey.DESCRIBE_CONFIGS, 4),
            (ApiKey.SASL_HANDSHAKE, 1),
            (ApiKey.SASL_AUTHENTICATE, 2),
        ]
    ],
}
Answer = Callable[[messages.Request], bytes | None]  # a frame to send, or None to hang up


def _frame(request: messages.Request, body: dict[str, Any]) -> bytes:
    payload = messages.encode_response(
        request.api_key, request.api_version, request.correlation_id, body
    )
    return struct.pack(">i", len(payload)) + payload


@pytest.fixture
def liar() -> Iterator[tuple[list[messages.Request], Callable[[Answer], int]]]:
    """A server answering each request with `answer`; the requests it saw."""
    seen: list[messages.Request] = []
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(answer: Answer) -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                while not stop.is_set():
                    try:
                        head = conn.recv(4, socket.MSG_WAITALL)
                        if len(head) < 4:
                            break
                        size = struct.unpack(">i", head)[0]
                        request = messages.decode_request(conn.recv(size, socket.MSG_WAITALL))
                    except OSError:
                        break
                    seen.append(request)
                    frame = answer(request)
                    if frame is None:
                        break
                    try:
                        conn.sendall(frame)
                    except OSError:
                        break

    threads: list[threading.Thread] = []

    def start(answer: Answer) -> int:
        thread = threading.Thread(target=serve, args=(answer,), daemon=True)
        thread.start()
        threads.append(thread)
        return int(listener.getsockname()[1])

    try:
        yield seen, start
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
        listener.close()


def test_a_refused_scram_mechanism_is_no_reason_to_send_the_password(
    liar: tuple[list[messages.Request], Callable[[Answer], int]],
) -> None:
    seen, start = liar

    def answer(request: messages.Request) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return _frame(request, VERSIONS)
        if request.api_key == ApiKey.SASL_HANDSHAKE:  # "only PLAIN here, send it"
            return _frame(request, {"error_code": 33, "mechanisms": ["PLAIN"]})
        return None

    port = start(answer)
    with pytest.raises(ResolveError, match="takes SASL 'PLAIN', not SCRAM-SHA-256"):
        kafka_http_url("127.0.0.1", port, 5, LOGIN)
    assert [r.api_key for r in seen] == [ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE]


def test_a_server_that_cannot_prove_it_knows_the_credential_is_not_believed(
    liar: tuple[list[messages.Request], Callable[[Answer], int]],
) -> None:
    seen, start = liar

    def answer(request: messages.Request) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return _frame(request, VERSIONS)
        if request.api_key == ApiKey.SASL_HANDSHAKE:
            return _frame(request, {"error_code": 0, "mechanisms": ["SCRAM-SHA-256"]})
        if request.api_key == ApiKey.SASL_AUTHENTICATE:
            token = request.body["auth_bytes"].decode()
            if token.startswith("n,,"):
                nonce = token.split("r=", 1)[1]
                salt = base64.b64encode(b"salt").decode()
                reply = f"r={nonce}server,s={salt},i=4096".encode()
            else:  # the client's proof: accept it and sign with a key we do not have
                reply = b"v=" + base64.b64encode(b"\0" * 32)
            return _frame(request, {"error_code": 0, "auth_bytes": reply})
        return _frame(request, {"brokers": []})  # never reached

    port = start(answer)
    with pytest.raises(ScramError, match="does not check"):
        kafka_http_url("127.0.0.1", port, 5, LOGIN)
    assert ApiKey.METADATA not in {r.api_key for r in seen}


def test_a_server_that_dribbles_its_answer_is_given_one_deadline(
    liar: tuple[list[messages.Request], Callable[[Answer], int]],
) -> None:
    _, start = liar

    def answer(request: messages.Request) -> bytes | None:
        frame = _frame(request, VERSIONS)
        return frame[:5]  # a size and one byte, then nothing: every read waits

    port = start(answer)
    started = time.monotonic()
    with pytest.raises(ResolveError, match="in time"):
        kafka_http_url("127.0.0.1", port, 1.0, LOGIN)
    assert time.monotonic() - started < 3


def test_an_answer_larger_than_any_of_these_is_not_read(
    liar: tuple[list[messages.Request], Callable[[Answer], int]],
) -> None:
    _, start = liar
    port = start(lambda request: struct.pack(">i", MAX_FRAME + 1))
    with pytest.raises(ResolveError, match="is not Kafka's"):
        kafka_http_url("127.0.0.1", port, 5, LOGIN)
