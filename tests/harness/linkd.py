"""Link delay for the test hosts (tests/harness/hosts.py): a TUN forwarder in the hub namespace.

This machine's kernel has no `sch_netem`, so links cannot be delayed with `tc`. Instead the
hub routes forwarded packets into a TUN device while any link has a delay; this process reads
each one, holds it for its links' delay (the source's link out, the destination's link in,
each `delay ± jitter`, uniform, as netem draws it), and writes it back, where the kernel routes
it on to its host (packets from the TUN device are routed by the main table; see `hosts.py`).
Jitter reorders packets, as netem's does.

Protocol, one JSON object per line: stdin takes `{"delays": {"10.88.3.2": [delay_ms,
jitter_ms], ...}}` (a host's address -> its link's delay; absent = none) and answers `ok` on
stdout once applied (and once at the start, when the device exists); EOF on stdin ends it.

Usage (inside the hub namespace): python -m tests.harness.linkd DEVICE
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import random
import struct
import sys

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
MAX_PACKET = 65_536

Delays = dict[bytes, tuple[float, float]]  # packed IPv4 address -> (delay s, jitter s)


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def hold_for(packet: bytes, delays: Delays, rng: random.Random) -> float:
    """Seconds to hold an IPv4 packet: its source link's delay plus its destination's."""
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return 0.0
    total = 0.0
    for address in (packet[12:16], packet[16:20]):
        if (link := delays.get(address)) is not None:
            delay, jitter = link
            total += max(0.0, delay + rng.uniform(-jitter, jitter))
    return total


def parse(line: str) -> Delays:
    wanted = json.loads(line)["delays"]
    return {
        bytes(int(octet) for octet in address.split(".")): (ms / 1000, jitter / 1000)
        for address, (ms, jitter) in wanted.items()
    }


async def main(device: str) -> None:
    fd = open_tun(device)
    print("ok", flush=True)  # the device exists: the hub may bring it up
    loop = asyncio.get_running_loop()
    rng = random.Random()
    delays: Delays = {}

    def send(packet: bytes) -> None:
        with contextlib.suppress(OSError):  # its host's link is down: the packet is lost
            os.write(fd, packet)

    def readable() -> None:
        for _ in range(64):
            try:
                packet = os.read(fd, MAX_PACKET)
            except BlockingIOError:
                return
            hold = hold_for(packet, delays, rng)
            if hold > 0:
                loop.call_later(hold, send, packet)
            else:
                send(packet)

    loop.add_reader(fd, readable)
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    while line := await commands.readline():
        delays = parse(line.decode())
        print("ok", flush=True)
    loop.remove_reader(fd)
    os.close(fd)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
