"""The controller's knock on a broker's address (kraftlite/controller/liveness.py rule 6),
on real sockets of this machine's loopback."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlite.config import ConfigError, ControllerConfig
from kraftlite.controller import liveness
from kraftlite.controller.liveness import Knock, combined, knock, settled


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_listening_port_answers_and_a_closed_one_refuses(listening: int) -> None:
    assert await knock(f"http://127.0.0.1:{listening}") is Knock.ANSWERED
    assert await knock(f"http://127.0.0.1:{closed_port()}") is Knock.REFUSED


async def test_every_address_of_a_name_is_knocked_on(
    listening: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name resolving first to an address where nothing listens (an IPv6 one, say): that
    refusal is no proof while another address of the host accepts."""
    closed = closed_port()

    def resolving_to(*ports: int) -> Any:
        async def addresses(host: str, port: int) -> list[Any]:
            return [(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", p)) for p in ports]

        return addresses

    monkeypatch.setattr(liveness, "_addresses", resolving_to(closed, listening))
    assert await knock("http://broker.example:1") is Knock.ANSWERED
    monkeypatch.setattr(liveness, "_addresses", resolving_to(closed, closed))
    assert await knock("http://broker.example:1") is Knock.REFUSED


async def test_a_name_that_does_not_resolve_proves_nothing() -> None:
    assert await knock("http://no-such-host.invalid:80", timeout_s=2) is Knock.UNKNOWN


@pytest.mark.parametrize(
    ("results", "verdict"),
    [
        ([Knock.REFUSED, Knock.ANSWERED], Knock.ANSWERED),
        ([Knock.UNKNOWN, Knock.ANSWERED], Knock.ANSWERED),
        ([Knock.REFUSED, Knock.REFUSED], Knock.REFUSED),
        ([Knock.REFUSED, Knock.UNANSWERED], Knock.UNKNOWN),  # up on one, silent on another
        ([Knock.REFUSED, Knock.UNKNOWN], Knock.UNKNOWN),
        ([Knock.UNANSWERED, Knock.UNANSWERED], Knock.UNANSWERED),
        ([Knock.UNANSWERED, Knock.UNKNOWN], Knock.UNKNOWN),
        ([Knock.UNANSWERED], Knock.UNANSWERED),
    ],
)
def test_one_verdict_from_several_addresses(results: list[Knock], verdict: Knock) -> None:
    assert combined(results) is verdict


def test_the_kernel_decides_an_attempt_the_loop_gave_up_on(listening: int) -> None:
    """Asked after the loop's timeout: a connection that completed meanwhile is answered,
    even on a descriptor above select()'s limit of 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"at most {hard} open files here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    spare = []
    try:
        while not spare or spare[-1] < 1100:  # the lowest free descriptors, taken
            spare.append(os.open(os.devnull, os.O_RDONLY))
        with socket.socket() as attempt:
            assert attempt.fileno() > 1024
            attempt.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                attempt.connect(("127.0.0.1", listening))
            for _ in range(100):
                if settled(attempt) is Knock.ANSWERED:
                    break
            assert settled(attempt) is Knock.ANSWERED
    finally:
        for descriptor in spare:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


BASE = {"node.id": 1, "raft": "127.0.0.1:1", "quorum": ["1@127.0.0.1:1"], "metadata.log.dir": "d"}


def test_the_unreachable_timeout_must_leave_room_for_its_knocks_and_heartbeats() -> None:
    assert ControllerConfig.from_mapping(BASE, "x").broker_unreachable_timeout_ms == 2500
    with pytest.raises(ConfigError, match="must be >= 2000"):
        ControllerConfig.from_mapping({**BASE, "broker.unreachable.timeout.ms": 1000}, "x")
    with pytest.raises(ConfigError, match=r"four broker\.heartbeat\.interval\.ms"):
        ControllerConfig.from_mapping({**BASE, "broker.heartbeat.interval.ms": 1000}, "x")
    # at or above the session it is off, and heartbeats may be as slow as they like
    off = {**BASE, "broker.heartbeat.interval.ms": 1000, "broker.unreachable.timeout.ms": 9000}
    assert ControllerConfig.from_mapping(off, "x").broker_unreachable_timeout_ms == 9000
    assert liveness.MIN_UNANSWERED == 4
