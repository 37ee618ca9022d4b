"""The controller's knock on a broker's address (kraftlite/controller/liveness.py rule 6),
on real sockets of this machine's loopback."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
from collections.abc import Iterator

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


async def test_every_address_of_a_name_is_knocked_on(listening: int) -> None:
    """`localhost` may resolve to ::1 first, where nothing listens: that refusal is no proof
    while 127.0.0.1 accepts."""
    assert await knock(f"http://localhost:{listening}") is Knock.ANSWERED


async def test_a_name_that_does_not_resolve_proves_nothing() -> None:
    assert await knock("http://no-such-host.invalid:80", timeout_s=2) is Knock.ANSWERED


@pytest.mark.parametrize(
    ("results", "verdict"),
    [
        ([Knock.REFUSED, Knock.ANSWERED], Knock.ANSWERED),
        ([Knock.REFUSED, Knock.REFUSED], Knock.REFUSED),
        ([Knock.REFUSED, Knock.UNANSWERED], Knock.ANSWERED),  # its host is up somewhere
        ([Knock.UNANSWERED, Knock.UNANSWERED], Knock.UNANSWERED),
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
        with socket.socket() as fresh:
            fresh.setblocking(False)
            assert settled(fresh) is not Knock.REFUSED
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
