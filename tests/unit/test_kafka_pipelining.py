"""The Kafka listener's pipelining (kafka/server.py rule 11) over a real socket, with a
scripted session in place of the broker: requests start at the one before's `ordered`
point, are answered in order, and a request that closes the connection, one that asks
for it to close after its answer, a quota or a client that stops sending each leave the
connection in the state rule 11 says."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kraftlite.config import ListenerLimits
from kraftlite.kafka.handlers import CloseConnection
from kraftlite.kafka.server import KafkaServer
from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka.messages import ApiKey

Script = Callable[["ScriptedSession", int, asyncio.Event], Awaitable[bytes]]


def request(correlation_id: int, sasl: bool = False) -> bytes:
    """An ApiVersions request, or with `sasl` a SaslHandshake (which only changes how the
    server orders it: the scripted session answers both the same)."""
    if sasl:
        payload = messages.encode_request(
            ApiKey.SASL_HANDSHAKE, 1, correlation_id, "c", {"mechanism": "PLAIN"}
        )
    else:
        payload = messages.encode_request(ApiKey.API_VERSIONS, 0, correlation_id, "c", {})
    return struct.pack(">i", len(payload)) + payload


def answer(correlation_id: int) -> bytes:
    body = {"error_code": 0, "api_keys": []}
    return messages.encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)


class ScriptedSession:
    """What server.py needs of a handlers.Session, each request handled by `script`; as
    Session.handle, `ordered` is set when the request is handled (not when it fails),
    unless the script set it sooner (a produce, once appended)."""

    must_authenticate = False
    authenticated = True

    def __init__(self, script: Script) -> None:
        self.script = script
        self.close_after_answer = False
        self.ordered: asyncio.Event | None = None
        self.before_throttle: Callable[[], None] = lambda: None
        self.quota = False
        self.handled: list[int] = []
        self.running = 0
        self.most_running: dict[int, int] = {}

    def refusal(self, _key: int, _version: int) -> None:
        return None

    def count_unauthenticated(self) -> None:
        pass

    def close(self) -> None:
        pass

    def pipelines(self) -> bool:
        return not self.quota

    async def handle(self, decoded: Any) -> bytes:
        correlation_id = decoded.correlation_id
        self.handled.append(correlation_id)
        ordered = self.ordered
        assert ordered is not None
        self.running += 1
        self.most_running[correlation_id] = self.running
        try:
            done = await self.script(self, correlation_id, ordered)
        finally:
            self.running -= 1
        ordered.set()
        return done


class ScriptedHandlers:
    def __init__(self, session: ScriptedSession) -> None:
        self._session = session

    def session(self, _host: str, _principal: object) -> ScriptedSession:
        return self._session

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        return answer(correlation_id)


async def run(
    script: Script,
    correlation_ids: Iterable[int],
    *,
    half_close: bool = False,
    sasl: Iterable[int] = (),
) -> tuple[ScriptedSession, list[int]]:
    """Send every request at once (those in `sasl` as SaslHandshake; then end the stream,
    with `half_close`); the session, and the correlation ids of the answers in the order
    they came (until the server closes, or a second passes without one)."""
    handshakes = set(sasl)
    session = ScriptedSession(script)
    server = KafkaServer(ScriptedHandlers(session), ListenerLimits(), 1 << 20)  # type: ignore[arg-type]
    await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"".join(request(c, c in handshakes) for c in correlation_ids))
    await writer.drain()
    if half_close:
        writer.write_eof()
    answered: list[int] = []
    try:
        while True:
            head = await asyncio.wait_for(reader.readexactly(4), 1.0)
            body = await reader.readexactly(struct.unpack(">i", head)[0])
            answered.append(struct.unpack(">i", body[:4])[0])
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        pass  # closed by the server, or nothing more to answer
    writer.close()
    await server.close()
    return session, answered


async def test_requests_overlap_after_their_ordered_point_and_are_answered_in_order() -> None:
    async def slow_first(session: ScriptedSession, c: int, ordered: asyncio.Event) -> bytes:
        ordered.set()  # a produce, appended: the next may start
        await asyncio.sleep(0.05 * (8 - c))  # earlier ones wait longer (acks)
        return answer(c)

    session, answered = await run(slow_first, range(8))
    assert answered == list(range(8))
    assert max(session.most_running.values()) == 5  # at most five in flight


async def test_a_connection_with_a_quota_is_served_one_request_at_a_time() -> None:
    async def quota_after_first(session: ScriptedSession, c: int, ordered: asyncio.Event) -> bytes:
        if c == 0:
            ordered.set()
            session.quota = True  # an operator sets a quota meanwhile
            await asyncio.sleep(0.1)
            return answer(c)
        await asyncio.sleep(0.05)  # a throttled answer
        return answer(c)

    session, answered = await run(quota_after_first, range(6))
    assert answered == list(range(6))
    assert [session.most_running[c] for c in range(2, 6)] == [1, 1, 1, 1]


async def test_a_request_that_closes_stops_the_connection_after_the_answers_before_it() -> None:
    async def second_closes(session: ScriptedSession, c: int, ordered: asyncio.Event) -> bytes:
        if c == 0:
            ordered.set()
            await asyncio.sleep(0.2)  # waiting for its replicas
            return answer(c)
        if c == 1:
            raise CloseConnection("a failed acks=0 produce")
        return answer(c)

    session, answered = await run(second_closes, range(5))
    assert answered == [0]  # the first still answered
    assert session.handled == [0, 1]  # nothing after the one that closed


async def test_a_sasl_request_waits_for_those_before_it_and_a_failed_one_ends_it() -> None:
    async def second_fails_auth(session: ScriptedSession, c: int, ordered: asyncio.Event) -> bytes:
        if c == 0:
            ordered.set()
            await asyncio.sleep(0.2)
            return answer(c)
        if c == 1:
            session.close_after_answer = True  # a failed SASL exchange
        return answer(c)

    session, answered = await run(second_fails_auth, range(4), sasl=[1])
    assert session.most_running[1] == 1  # request 0 was answered before it started
    assert session.handled == [0, 1]
    assert answered == [0, 1]


async def test_a_client_that_stops_sending_still_gets_its_answers() -> None:
    async def waits(session: ScriptedSession, c: int, ordered: asyncio.Event) -> bytes:
        ordered.set()
        await asyncio.sleep(0.1)
        return answer(c)

    _, answered = await run(waits, range(3), half_close=True)
    assert answered == [0, 1, 2]
