"""The event loop every kraftlite process runs on: uvloop where it is installed, else
asyncio's own.

uvloop (libuv under asyncio's API, supported by aiohttp) halves the CPU of a bare aiohttp
round trip on loopback here (107 against 202 µs for a small HTTP request and answer, 20
against 54 µs for a WebSocket message); across a whole cluster, where the work above the
loop dominates, it measured a few percent better on every figure of `scripts/bench.py`,
within this machine's run-to-run noise (docs/perf/README.md, "uvloop").
`KRAFTLITE_EVENT_LOOP=asyncio` keeps asyncio's loop (for debugging with tools that know
only it); Windows has no uvloop and always does.

`run_node` (a controller's or broker's process) also has the process's threads hand the
GIL over every `SWITCH_INTERVAL_S` rather than CPython's 5 ms: the loop's thread waits that
long for it whenever a worker thread runs Python (the log cleaner's I/O, the key index, a
coordinator's load). With the cleaner
at work beside a producer's appends it measured p99 2.5 ms at 1 ms against 4.1 ms at 5 ms
(scripts/bench_compaction.py "append", whose appends alone measure p99 0.3 to 1.1 ms).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
SWITCH_INTERVAL_S = 0.001


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes new event loops: uvloop's unless it is missing or turned off."""
    if os.environ.get("KRAFTLITE_EVENT_LOOP", "uvloop") == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop  # noqa: PLC0415 - optional: not on Windows
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on `loop_factory()`'s loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def run_node(main: Coroutine[Any, Any, T]) -> T:
    """`run` for a node's process, its threads switching every SWITCH_INTERVAL_S."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return run(main)


def new_event_loop() -> asyncio.AbstractEventLoop:
    return loop_factory()()
