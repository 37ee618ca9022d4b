"""A broker's heartbeats (kraftlite/broker/broker.py rule 2, lease.py rule 1) against a
scripted controller: the lease runs by the answer's lease timeout, several heartbeats go
out at once, and an answer about a lost registration leases nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from kraftlite.broker.broker import MAX_HEARTBEATS_IN_FLIGHT, Broker, BrokerSettings
from kraftlite.broker.lease import lease_margin_ms
from kraftlite.clock import ManualClock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol.internal import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
)
from kraftlite.storage.memory import MemoryLogStorage


class ScriptedController:
    """Answers heartbeats when told to: each call waits for its own release."""

    def __init__(self) -> None:
        self.calls: list[tuple[BrokerHeartbeatRequest, asyncio.Future[bytes]]] = []

    async def call(self, method: str, path: str, body: bytes, **_: Any) -> tuple[int, bytes]:
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.calls.append((BrokerHeartbeatRequest.decode(body), answer))
        return 200, await answer

    @staticmethod
    def answer(epoch: int, *, fenced: bool = False, lease_ms: int | None = 2_500) -> bytes:
        return BrokerHeartbeatResponse(epoch, fenced, False, 0, 9_000, lease_ms).encode()


@pytest.fixture
async def broker() -> AsyncIterator[tuple[Broker, ScriptedController, ManualClock]]:
    clock = ManualClock()
    async with aiohttp.ClientSession() as session:
        made = Broker(
            BrokerSettings(1, "http://127.0.0.1:1", ("http://127.0.0.1:2",)),
            MemoryLogStorage(),
            session,
            clock,
        )
        made.broker_epoch = 7
        made.lease.applied(0)
        controller = ScriptedController()
        made._session_controllers = controller  # type: ignore[assignment]
        yield made, controller, clock


async def test_the_lease_runs_by_the_answers_lease_timeout(broker: Any) -> None:
    made, controller, clock = broker
    beat = asyncio.create_task(made._heartbeat())
    await asyncio.sleep(0)
    request, answer = controller.calls[0]
    assert request.honours_lease_timeout
    answer.set_result(controller.answer(7, lease_ms=2_500))
    await beat
    assert made.lease.valid(2_500 - lease_margin_ms(2_500) - 1)
    assert not made.lease.valid(2_500 - lease_margin_ms(2_500))
    # a controller older than the field leases a session
    clock.advance(10_000)
    beat = asyncio.create_task(made._heartbeat())
    await asyncio.sleep(0)
    controller.calls[1][1].set_result(controller.answer(7, lease_ms=None))
    await beat
    assert made.lease.valid(10_000 + 9_000 - lease_margin_ms(9_000) - 1)


async def test_an_answer_about_a_lost_registration_leases_nothing(broker: Any) -> None:
    """Two heartbeats in flight; the first comes back STALE_BROKER_EPOCH and the broker
    drops its registration, then registers again and gets the same epoch back (the same
    incarnation); the second heartbeat's answer, about the lost registration, must not bring
    the lease back."""
    made, controller, _ = broker
    first = asyncio.create_task(made._beat())
    second = asyncio.create_task(made._heartbeat())
    await asyncio.sleep(0)
    assert len(controller.calls) == 2
    controller.calls[0][1].set_exception(
        KraftliteError(ErrorCode.STALE_BROKER_EPOCH, "registered again")
    )
    await first
    assert made.broker_epoch == -1 and not made.lease.valid(0)
    made.broker_epoch = 7  # registered again: the same incarnation keeps its epoch
    controller.calls[1][1].set_result(controller.answer(7, fenced=False))
    await second
    assert not made.lease.valid(0)
    assert made.fenced  # as it was: the answer was about the lost registration


async def test_heartbeats_go_out_on_schedule_without_waiting_for_answers(broker: Any) -> None:
    made, controller, _ = broker
    made._heartbeat_interval_s = 0.01
    loop = asyncio.create_task(made._heartbeat_loop())
    try:
        for _ in range(100):
            if len(controller.calls) >= MAX_HEARTBEATS_IN_FLIGHT:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # no more than that many unanswered
        assert len(controller.calls) == MAX_HEARTBEATS_IN_FLIGHT
        controller.calls[0][1].set_result(controller.answer(7))
        for _ in range(100):
            if len(controller.calls) > MAX_HEARTBEATS_IN_FLIGHT:
                break
            await asyncio.sleep(0.01)
        assert len(controller.calls) == MAX_HEARTBEATS_IN_FLIGHT + 1
    finally:
        loop.cancel()
        made._cancel_beats()
        for _, answer in controller.calls:
            if not answer.done():
                answer.cancel()


async def test_an_older_answer_does_not_overrule_a_newer_ones_fencing(broker: Any) -> None:
    made, controller, clock = broker
    older = asyncio.create_task(made._heartbeat())
    await asyncio.sleep(0)
    clock.advance(500)
    newer = asyncio.create_task(made._heartbeat())
    await asyncio.sleep(0)
    controller.calls[1][1].set_result(controller.answer(7, fenced=False))
    await newer
    assert not made.fenced
    controller.calls[0][1].set_result(controller.answer(7, fenced=True))
    await older
    assert not made.fenced


async def test_a_registration_starts_fenced_whatever_came_before(broker: Any) -> None:
    made, _, _ = broker
    made.fenced = False  # as the lost registration was

    async def call(method: str, path: str, body: bytes, **_: Any) -> tuple[int, bytes]:
        answer = BrokerRegistrationResponse(8, "c", 500, 9_000, 0, 2_500)
        return 200, answer.encode()

    made._session_controllers.call = call
    await made._register()
    assert made.broker_epoch == 8 and made.fenced
