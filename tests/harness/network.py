"""A fault-injecting TCP proxy for multi-process tests: cut links between nodes, then heal.

Every proxied listener (a broker's advertised URL, a controller's URL) gets a proxy port in
this test process; nodes are told to reach each other through those ports. On each accepted
connection the proxy finds which node opened it (Linux: the peer's port -> socket inode in
/proc/net/tcp -> the node process holding that inode), so one proxy port serves every peer
and a link is the ordered pair (source node, destination node). Connections from anything
else (the test's own clients) come from `CLIENT`.

`cut(src, dst)` stops src from reaching dst: open connections src -> dst are aborted (RST)
at once, so keep-alive pools cannot carry traffic across the fault, and new ones are either
reset at once (`mode="reset"`, like a refused port) or held open with nothing forwarded
(`mode="hang"`, like packets dropped: the client waits for its timeout). HTTP is
client-initiated, so cutting one direction means one side can still ask and the other
cannot. Both directions = both cuts. `heal` removes cuts and closes held connections.
docs/design/fault-injection.md describes the mechanism and its limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

CLIENT = "client"
Link = tuple[str, str]


def socket_inode(local_port: int, remote_port: int) -> int | None:
    """The inode of the IPv4 loopback socket 127.0.0.1:local_port -> :remote_port."""
    want_local, want_remote = f":{local_port:04X}", f":{remote_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), Path(table).open() as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if fields[1].endswith(want_local) and fields[2].endswith(want_remote):
                    return int(fields[9])
    return None


def process_holding(inode: int, pids: Iterable[int]) -> int | None:
    """Which of `pids` has socket `inode` open."""
    target = f"socket:[{inode}]"
    for pid in pids:
        with contextlib.suppress(OSError):
            fd_dir = f"/proc/{pid}/fd"
            for fd in os.listdir(fd_dir):
                with contextlib.suppress(OSError):
                    if os.readlink(f"{fd_dir}/{fd}") == target:
                        return pid
    return None


@dataclass(eq=False)
class _Connection:
    link: Link
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    held: bool = False  # accepted under a "hang" cut: nothing forwarded

    def abort(self) -> None:
        for writer in self.writers:
            writer.transport.abort()


@dataclass
class _Route:
    name: str
    upstream: tuple[str, int]
    port: int = 0
    server: asyncio.Server | None = None


class FaultProxy:
    """Proxies in a background asyncio thread; `sources()` maps live node pids to names."""

    def __init__(self, sources: Callable[[], dict[int, str]]) -> None:
        self._sources = sources
        self._routes: list[_Route] = []
        self._cuts: dict[Link, str] = {}  # link -> mode
        self._connections: set[_Connection] = set()
        self._accepted: set[asyncio.StreamWriter] = set()  # client sides not yet closed
        self._serving: set[asyncio.Task[None]] = set()
        self.accepted: dict[Link, int] = {}  # connections seen per link, for tests and docs
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    # -- configuration, from the test thread ---------------------------------------------

    def add_route(self, name: str, upstream_port: int, port: int = 0) -> int:
        """Proxy node `name` (listening on 127.0.0.1:upstream_port) on `port` (any free one
        by default); the port to use instead. A node may have several routes (HTTP, Raft):
        a cut from src to `name` cuts them all."""

        async def start() -> int:
            route = _Route(name, ("127.0.0.1", upstream_port))
            route.server = await asyncio.start_server(
                lambda r, w: self._accept(route, r, w), "127.0.0.1", port
            )
            route.port = route.server.sockets[0].getsockname()[1]
            self._routes.append(route)
            return route.port

        return self._call(start())

    def cut(self, src: str, dst: str, mode: str = "reset") -> None:
        """src can no longer reach dst; connections src -> dst open now are aborted."""
        assert mode in {"reset", "hang"}, mode

        async def apply() -> None:
            self._cuts[(src, dst)] = mode
            for connection in [c for c in self._connections if c.link == (src, dst)]:
                connection.abort()
                self._connections.discard(connection)

        self._call(apply())

    def isolate(
        self, node: str, others: Iterable[str], mode: str = "reset", both: bool = True
    ) -> None:
        """Cut `node` off from each of `others` (and them from it, with `both`)."""
        for other in others:
            self.cut(node, other, mode)
            if both:
                self.cut(other, node, mode)

    def heal(self, links: Iterable[Link] | None = None) -> None:
        """Remove the given cuts (all by default); held ("hang") connections are closed."""

        async def apply() -> None:
            healed = set(self._cuts) if links is None else set(links)
            for link in healed:
                self._cuts.pop(link, None)
            for connection in [c for c in self._connections if c.link in healed]:
                if connection.held:
                    connection.abort()
                    self._connections.discard(connection)

        self._call(apply())

    def close(self) -> None:
        async def stop() -> None:
            # Accept no more, but leave the servers open until the accepts in flight (tasks
            # of asyncio's own) are done: one that finds its server closed leaks its socket
            # (CPython 3.11), and a socket left to the garbage collector is a
            # ResourceWarning, which fails the suite.
            for route in self._routes:
                if route.server is not None:
                    for listening in route.server.sockets:
                        self._loop.remove_reader(listening.fileno())
            for connection in self._connections:
                connection.abort()
            for _ in range(5):  # each round cancels the serving tasks the last one started
                others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                if not others:
                    break
                for task in self._serving:
                    task.cancel()
                await asyncio.wait(others, timeout=1)
            for route in self._routes:
                if route.server is not None:
                    route.server.close()
            for writer in self._accepted:  # its task was cancelled before it first ran
                writer.transport.abort()
            for _ in range(3):  # an aborted transport closes its socket in a callback
                await asyncio.sleep(0)

        with contextlib.suppress(Exception):
            self._call(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    # -- the proxy itself ----------------------------------------------------------------

    def _source(self, peer_port: int, listen_port: int) -> str:
        inode = socket_inode(peer_port, listen_port)
        if inode is None:
            return CLIENT
        sources = self._sources()
        pid = process_holding(inode, sources)
        return CLIENT if pid is None else sources[pid]

    def _accept(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # known before the serving task first runs, so close() can always close it
        self._accepted.add(writer)
        task = asyncio.get_running_loop().create_task(self._serve(route, reader, writer))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            await self._serve_accepted(route, reader, writer)
        finally:  # never leave the accepted socket open (a ResourceWarning)
            self._accepted.discard(writer)
            writer.transport.abort()

    async def _serve_accepted(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        link = (self._source(writer.get_extra_info("peername")[1], route.port), route.name)
        self.accepted[link] = self.accepted.get(link, 0) + 1
        connection = _Connection(link, [writer])
        mode = self._cuts.get(link)
        if mode == "reset":
            return  # aborted by _serve
        self._connections.add(connection)
        try:
            if mode == "hang":
                connection.held = True
                while await reader.read(65536):
                    pass  # swallowed: nothing reaches the node, nothing comes back
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*route.upstream)
            except OSError:
                return  # the node is down: the client sees its connection closed
            connection.writers.append(up_writer)
            if link in self._cuts:  # cut while connecting
                return
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._connections.discard(connection)
            connection.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        writer.transport.abort()
    else:
        writer.close()  # EOF from one side: end the whole connection (HTTP needs no half-close)
