"""Fast failure detection: a dead broker is fenced in about a second, not a session.

Rules:
1. A broker process that dies (kill -9, a crash) stops heartbeating and closes its sockets
   at once; its listening port then refuses connections. Both together are taken as proof:
   a broker whose heartbeats are LATE_HEARTBEATS intervals late and whose advertised
   address then refuses a TCP connection twice, PROBE_GAP_S apart, with still no heartbeat
   meanwhile, is dead, and it is fenced at once (the decision that fences an expired
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
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse

from kraftlite.controller.decisions import ControllerResult, fence_expired_brokers
from kraftlite.metadata.image import MetadataImage

PROBE_TIMEOUT_S = 0.5
PROBE_GAP_S = 0.1
LATE_HEARTBEATS = 1.5  # heartbeat intervals without one before the controller probes


async def refuses_connections(url: str) -> bool:
    """Whether `url`'s host refuses a TCP connection to its port twice in a row (rule 1).
    A timeout, a reset after accepting, or a name that does not resolve is no proof."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if host is None:
        return False
    for attempt in range(2):
        if attempt:
            await asyncio.sleep(PROBE_GAP_S)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT_S)
        except ConnectionRefusedError:
            continue
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return False
    return True


def fence_dead_broker(
    image: MetadataImage, broker_id: int, broker_epoch: int
) -> ControllerResult[list[int]]:
    """Fence the broker's registration `broker_epoch` if it is still the current one and
    unfenced (rule 3); nothing otherwise."""
    broker = image.brokers.get(broker_id)
    if broker is None or broker.broker_epoch != broker_epoch or broker.fenced:
        return ControllerResult((), [])
    return fence_expired_brokers(image, [broker_id])
