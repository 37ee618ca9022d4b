"""A consumer-group member in its own process, for multi-process group tests: subscribes,
consumes, and prints its assignment as one JSON line whenever it changes. SIGTERM closes it
cleanly (commit, leave); SIGKILL is a crash.

Run: python -m tests.harness.group_member BOOTSTRAP GROUP TOPIC
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

from kraftlite.client import Consumer


async def main(bootstrap: str, group: str, topic: str) -> None:
    consumer = Consumer(  # a 4 s session: a crash and a leave are seconds apart
        bootstrap, group_id=group, auto_offset_reset="earliest", session_timeout_ms=4000
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await consumer.subscribe([topic])
    shown = None
    while not stop.is_set():
        await consumer.poll(timeout_ms=100)
        current = sorted(p for _, p in consumer.assignment())
        if current != shown:
            print(json.dumps({"assignment": current}), flush=True)
            shown = current
    await consumer.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
