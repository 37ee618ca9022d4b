"""Fast failure detection: a dead broker is fenced in about a second, an unreachable one in a
few, not after a session.

Rules:
1. A broker process that dies (kill -9, a crash) stops heartbeating and closes its sockets
   at once; its listening port then refuses connections. Both together are taken as proof:
   a broker whose heartbeats are LATE_HEARTBEATS intervals late and whose advertised
   address then refuses a TCP connection twice in a row, KNOCK_INTERVAL_S apart, with still
   no heartbeat meanwhile, is dead, and it is fenced at once (the decision that fences an expired
   session). A paused (SIGSTOP), overloaded or cut-off broker does not refuse (its kernel
   still accepts, or nothing answers at all): it is left to the session timeout and its
   lease (broker/lease.py). A live broker whose port the controller's path refuses (a
   firewall's REJECT, a load balancer with no ready backend) is still heartbeating, so it
   is not fenced either. What is assumed: a broker that stopped heartbeating and whose
   address refuses connections is not serving clients elsewhere.
2. Probes start from a follower's report that the broker refused its fetch (the broker
   led partitions: their producers wait on it), and from a heartbeat later than
   LATE_HEARTBEATS intervals (any broker). At most one probe of a broker at a time.
3. A probe names the registration it suspects (its broker epoch): a broker that registered
   again meanwhile (a restart) is not fenced by it.
4. A broker whose heartbeats are `broker.unreachable.timeout.ms` late and whose address has
   answered none of the probe's connection attempts (at least MIN_UNANSWERED of them, one
   started every KNOCK_INTERVAL_S, each given KNOCK_TIMEOUT_S: a SYN that gets no answer,
   neither accept nor refusal) is unreachable: a silent host, a pulled cable, a partition
   between it and the controllers. It is fenced then, not after its session, so its
   partitions get new leaders within seconds. That is safe because its leadership lease runs
   by the same timeout (broker/lease.py rule 1): by then it has stopped leading, whether it
   is dead or alive on the other side of the fault. A broker whose address answers any
   attempt (accepts: even paused, or slow behind a lossy link, its kernel answers) is not
   fenced by the probe: the session decides, and a flaky link does not fence a broker that
   keeps heartbeating; once a knock was answered, rule 4 waits until the broker is heard
   from again (a flaky link's later silent knocks prove nothing new). What this costs: a
   broker that cannot reach any controller while they can reach it (a one-way fault) stops
   leading after this timeout but is fenced only after its session.
5. Rule 4 holds only where every lease in force runs by the same timeout: for a broker
   whose heartbeats say its lease does (an older broker keeps a session's lease), and, for
   a controller that just took over, only from a session after its takeover's fallback
   (its predecessors' answers, whatever timeout they named, may lease up to a session),
   unless the broker's current registration is one it committed itself in this term.
6. A knock tries every address the broker's host name resolves to (resolved on threads of
   their own): answered if any accepts, refused only if all refuse, unanswered only if none
   answers at all; a failed lookup, an error of the controller's own, or refusals mixed with
   silence prove nothing (unknown: neither counts towards a fence nor saves the broker).
   Its verdict is the kernel's: a connection that completed while the controller's
   event loop was held up is answered, not timed out (the socket is asked at the end).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import errno
import functools
import ipaddress
import select
import socket
import urllib.parse
from dataclasses import dataclass

from kraftlite.controller.decisions import ControllerResult, fence_expired_brokers
from kraftlite.metadata.image import MetadataImage

KNOCK_TIMEOUT_S = 1.0  # a SYN is sent again after 1 s: an attempt gets one answer's chance
KNOCK_INTERVAL_S = 0.25  # a new attempt this often while none has answered
MIN_UNANSWERED = 4  # rule 4: the attempts that must all go unanswered
LATE_HEARTBEATS = 1.5  # heartbeat intervals without one before the controller probes
NO_ROUTE = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH})


class Knock(enum.Enum):
    """What one connection attempt to a broker's advertised address got."""

    ANSWERED = "answered"  # accepted: its host is up and reachable
    REFUSED = "refused"  # its host is up, nothing listens: rule 1
    UNANSWERED = "unanswered"  # nothing at all within the timeout: rule 4
    UNKNOWN = "unknown"  # proves nothing either way (a failed lookup, our own error)


async def knock(url: str, timeout_s: float = KNOCK_TIMEOUT_S) -> Knock:
    """One TCP connection attempt to each address of `url`'s host, at once (rule 6):
    answered if any accepts, refused if every one refuses, unanswered if none answers at
    all. A name that does not resolve, an error of our own, or a mix of refusals and
    silence is unknown: no proof of anything."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if host is None:
        return Knock.UNKNOWN
    try:
        addresses = await asyncio.wait_for(_addresses(host, port), timeout_s)
    except (OSError, TimeoutError):
        return Knock.UNKNOWN
    if not addresses:
        return Knock.UNKNOWN
    results = await asyncio.gather(
        *(_attempt(a, timeout_s) for a in addresses), return_exceptions=True
    )
    return combined([r if isinstance(r, Knock) else Knock.UNKNOWN for r in results])


def combined(results: list[Knock]) -> Knock:
    """One verdict from the knocks on each of a host's addresses (rule 6)."""
    if Knock.ANSWERED in results:
        return Knock.ANSWERED
    for verdict in (Knock.REFUSED, Knock.UNANSWERED):
        if all(result is verdict for result in results):
            return verdict
    return Knock.UNKNOWN  # its host up on one address and silent on another, or unknown


_Address = tuple[int, int, int, tuple[object, ...]]  # family, type, proto, sockaddr
# Names are resolved on a thread of their own: a hung resolver holds up knocks only, not
# the default executor that decisions run on.
_RESOLVER = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="knock-dns")


async def _addresses(host: str, port: int) -> list[_Address]:
    with contextlib.suppress(ValueError):
        literal = ipaddress.ip_address(host)
        family = socket.AF_INET6 if literal.version == 6 else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 0, (str(literal), port))]
    found = await asyncio.get_running_loop().run_in_executor(
        _RESOLVER, functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    )
    return [(family, kind, proto, address) for family, kind, proto, _, address in found]


async def _attempt(address: _Address, timeout_s: float) -> Knock:
    family, kind, protocol, sockaddr = address
    try:
        attempt = socket.socket(family, kind, protocol)
    except OSError:  # out of descriptors, a family we lack: our own trouble
        return Knock.UNKNOWN
    with attempt:
        attempt.setblocking(False)
        try:
            await asyncio.wait_for(
                asyncio.get_running_loop().sock_connect(attempt, sockaddr), timeout_s
            )
        except ConnectionRefusedError:
            return Knock.REFUSED
        except TimeoutError:
            return settled(attempt)
        except OSError as exc:
            # No route to it (a router or ARP gave up on its host) is its silence too; were
            # the fault our own link's, we could not commit a fence without a Raft majority.
            return Knock.UNANSWERED if exc.errno in NO_ROUTE else Knock.UNKNOWN
    return Knock.ANSWERED


def settled(attempt: socket.socket) -> Knock:
    """What the kernel says of an attempt the event loop gave up on: connected (the answer
    came while the loop was busy), refused, or still nothing."""
    poller = select.poll()
    poller.register(attempt, select.POLLOUT)
    if not poller.poll(0):
        return Knock.UNANSWERED
    error = attempt.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error == 0:
        return Knock.ANSWERED
    if error == errno.ECONNREFUSED:
        return Knock.REFUSED
    return Knock.UNANSWERED if error in NO_ROUTE else Knock.UNKNOWN


@dataclass
class Probe:
    """The knocks one probe of a broker has had so far, and what they prove (pure)."""

    refused_in_a_row: int = 0
    unanswered: int = 0
    answered: bool = False

    def add(self, result: Knock) -> None:
        if result is Knock.UNKNOWN:
            return  # proves nothing: neither counts towards a fence nor saves the broker
        if result is Knock.ANSWERED:
            self.answered = True
        elif result is Knock.REFUSED:
            self.refused_in_a_row += 1
        else:
            self.unanswered += 1
            self.refused_in_a_row = 0

    def verdict(self, late_ms: int, unreachable_ms: int | None, silent_ms: int) -> str | None:
        """Why to fence a broker unheard for `silent_ms`, or None: dead (rule 1: refused
        twice in a row), unreachable (rule 4), or not proven."""
        if self.answered or silent_ms < late_ms:
            return None
        if self.refused_in_a_row >= 2:
            return "its port refuses connections"
        if (
            unreachable_ms is not None
            and silent_ms >= unreachable_ms
            and self.unanswered >= MIN_UNANSWERED
        ):
            return "it is unreachable"
        return None


def fence_dead_broker(
    image: MetadataImage, broker_id: int, broker_epoch: int
) -> ControllerResult[list[int]]:
    """Fence the broker's registration `broker_epoch` if it is still the current one and
    unfenced (rule 3); nothing otherwise."""
    broker = image.brokers.get(broker_id)
    if broker is None or broker.broker_epoch != broker_epoch or broker.fenced:
        return ControllerResult((), [])
    return fence_expired_brokers(image, [broker_id])
