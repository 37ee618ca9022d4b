"""The log cleaner's process: where a broker's cleaner passes decode and decide
(compaction.PassPlan), so that their CPU does not hold the broker's GIL.

A pass on a thread of the broker's own process made a producer's appends wait for the GIL
(CPython hands it over every 5 ms, and a long C call holds it longer): appends of 100
records went from p50 0.19 / p99 1.2 ms alone to 3.5 / 19 ms while passes ran
(scripts/bench_compaction.py "append"). Decoding and deciding are most of a pass; here they
run in a process of their own, while the broker's cleaner thread keeps the I/O (it reads
the log and hands the bytes over, then writes the rewrites it gets back, a chunk per
transaction, as before: the process never opens the log, so it cannot damage it).

Rules:
1. One process per broker, started with the first pass that needs it and again with the
   first pass after it died; a broker without compacted partitions starts none.
2. Typed messages over a socket pair, one reply to each request, in order: `Begin` a pass,
   `Fold` and `Plan` bytes of the log (compaction.py rule 7), `End` it (its keys freed).
   A failure in the process is answered `Failed` and ends the pass on the broker (its
   cleaner logs it; the next pass starts over).
3. The process ends when its socket closes: when the broker stops (`close`), or dies,
   even by kill -9. It ignores SIGINT and SIGTERM, so a signal to the broker's process
   group stops it through the broker. A broker that stops kills it (`kill`, from any
   thread), so no request waits on it (a stopped process, SIGSTOP, would hold a send of a
   MiB for ever), and starts no other. A request the broker stops waiting for (it is
   stopping, or the process died) ends the process: no reply is ever read by the wrong
   request.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable, Collection, Generator, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TypeVar

from kraftlite.broker.cleaner import Stopped
from kraftlite.storage.compaction import CleanPolicy, PassPlan
from kraftlite.storage.log import BatchRewrite

POLL_S = 0.1  # how often a wait for a reply looks at `stopping` and the process
CLOSE_WAIT_S = 5.0
# the process's command: this module under its own name (not `-m`'s __main__), so the
# messages it unpickles and pickles are this module's classes
# messages it unpickles and pickles are this module's classes), with -P (the broker's
# working directory is not on its path) and, before any import, SIGINT and SIGTERM ignored
# (rule 3: a signal to the broker's process group stops it through the broker)
_MAIN = (
    "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "from kraftlite.broker.cleaner_process import main; main()"
)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # where kraftlite is imported from


@dataclass(frozen=True, slots=True)
class Begin:
    now_ms: int
    policy: CleanPolicy
    log_start: int
    whole: frozenset[int]
    aborted: frozenset[int]
    undecided: frozenset[int]


@dataclass(frozen=True, slots=True)
class Fold:
    data: bytes


@dataclass(frozen=True, slots=True)
class Plan:
    data: bytes


@dataclass(frozen=True, slots=True)
class End:
    pass


@dataclass(frozen=True, slots=True)
class Began:
    pass


@dataclass(frozen=True, slots=True)
class Ended:
    pass


@dataclass(frozen=True, slots=True)
class Folded:
    pass


@dataclass(frozen=True, slots=True)
class Planned:
    rewrites: list[BatchRewrite]


@dataclass(frozen=True, slots=True)
class Failed:
    error: str


Request = Begin | Fold | Plan | End
Reply = Began | Folded | Planned | Ended | Failed
_R = TypeVar("_R", Began, Folded, Planned, Ended)


class CleanerProcessError(Exception):
    """The cleaner's process failed a request, or died."""


def answer(plan: PassPlan | None, request: Request) -> tuple[PassPlan | None, Reply]:
    """The process's reply to `request` (rule 2), and the pass it works on after it."""
    match request:
        case Begin(now_ms, policy, log_start, whole, aborted, undecided):
            return PassPlan(now_ms, policy, log_start, whole, aborted, undecided), Began()
        case Fold(data) if plan is not None:
            plan.fold_one(data)
            return plan, Folded()
        case Plan(data) if plan is not None:
            return plan, Planned(plan.plan_one(data))
        case End():
            return None, Ended()  # the pass's keys go with it
    return plan, Failed(f"{type(request).__name__} without a pass begun")


def serve(connection: Connection) -> None:
    """The process's loop (rule 3): until its socket closes."""
    plan: PassPlan | None = None
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            return
        try:
            plan, reply = answer(plan, request)
        except Exception:  # noqa: BLE001 - the broker logs it; the next pass starts over
            plan, reply = None, Failed(traceback.format_exc())
        try:
            connection.send(reply)
        except OSError:
            return


class CleanerProcess:
    """The broker's side (rules 1 and 3): `start_pass` is a compaction planner for
    cleaner.clean. Used from the cleaner's one thread; `close` once that has stopped."""

    def __init__(self, stopping: Callable[[], bool] = lambda: False) -> None:
        self._stopping = stopping
        self._process: subprocess.Popen[bytes] | None = None
        self._connection: Connection | None = None
        self.outstanding = False  # a request sent whose reply has not been received

    def start_pass(  # noqa: PLR0917 - a Planner (broker/cleaner.py)
        self,
        now_ms: int,
        policy: CleanPolicy,
        log_start: int,
        whole: Collection[int],
        aborted: Collection[int] = frozenset(),
        undecided: Collection[int] = frozenset(),
    ) -> RemotePass:
        begin = Begin(
            now_ms, policy, log_start, frozenset(whole), frozenset(aborted), frozenset(undecided)
        )
        self.request(begin, Began)
        assert self._process is not None
        return RemotePass(self, self._process)

    def request(
        self,
        request: Request,
        expected: type[_R],
        within: subprocess.Popen[bytes] | None = None,
    ) -> _R:
        """The process's reply to `request` (rule 2), started first if it is not running;
        `within`: the process a pass began in, which must still be the one running."""
        self.send(request, within)
        return self.receive(expected, within)

    def send(self, request: Request, within: subprocess.Popen[bytes] | None = None) -> None:
        """`request`, its reply to be `receive`d before the next is sent (rule 2)."""
        if within is not None and (self._process is not within or within.poll() is not None):
            raise CleanerProcessError("the log cleaner's process died during the pass")
        if self.outstanding:  # its reply would answer this request: start over
            self.close(kill=True)
        connection = self._started()
        with self._failing():
            connection.send(request)
        self.outstanding = True

    def receive(self, expected: type[_R], within: subprocess.Popen[bytes] | None = None) -> _R:
        """The reply to the request sent last."""
        connection = self._connection
        if connection is None or (within is not None and self._process is not within):
            raise CleanerProcessError("the log cleaner's process died during the pass")
        with self._failing():
            self._wait(connection)
            reply = connection.recv()
        self.outstanding = False
        if isinstance(reply, Failed):
            raise CleanerProcessError(f"the log cleaner's process failed: {reply.error}")
        if not isinstance(reply, expected):
            self.close(kill=True)
            raise CleanerProcessError(f"the log cleaner's process answered {reply!r}")
        return reply

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """A send or receive that fails ends the process (rule 3)."""
        try:
            yield
        except (OSError, EOFError) as exc:
            self.close(kill=True)
            if self._stopping():
                raise Stopped from exc  # `kill` ended it
            raise CleanerProcessError(f"the log cleaner's process is gone: {exc!r}") from exc
        except BaseException:
            self.close(kill=True)  # its reply, if any, must never answer the next request
            raise

    def _wait(self, connection: Connection) -> None:
        while not connection.poll(POLL_S):
            if self._stopping():
                raise Stopped
            if self._process is not None and self._process.poll() is not None:
                raise CleanerProcessError("the log cleaner's process died")

    def _started(self) -> Connection:
        if self._connection is not None and self._process is not None:
            if self._process.poll() is None:
                return self._connection
            self.close()
        if self._stopping():
            raise Stopped
        ours, theirs = socket.socketpair()
        with ours, theirs:
            self._process = subprocess.Popen(  # noqa: S603 - our own module
                [sys.executable, "-P", "-c", _MAIN, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
                env={**os.environ, "PYTHONPATH": _python_path()},
            )
            self._connection = Connection(ours.detach())
        return self._connection

    def running(self, process: subprocess.Popen[bytes]) -> bool:
        """Whether `process` is the one this side talks to."""
        return self._process is process

    def kill(self) -> None:
        """Kill the process now, from any thread (rule 3: the broker is stopping): a request
        in flight on the cleaner's thread fails at once; `close` still reaps it."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()

    def close(self, *, kill: bool = False) -> None:
        """End the process (rule 3): its socket closes, then it exits; killed if it has
        not within CLOSE_WAIT_S, or at once (`kill`: what it works on is abandoned)."""
        connection, process = self._connection, self._process
        self._connection = self._process = None
        self.outstanding = False
        if connection is not None:
            connection.close()
        if process is not None:
            if kill:
                process.kill()
            try:
                process.wait(CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class RemotePass:
    """One pass's decisions, made in the cleaner's process (cleaner.Planning). Each read is
    sent once the reply to the one before has come, so there is one request at a time (no
    two sides ever block sending to each other), while the next read from the log, and
    the writes of the rewrites received, overlap the process's work on the one sent."""

    def __init__(self, owner: CleanerProcess, process: subprocess.Popen[bytes]) -> None:
        self._owner = owner
        self._process = process  # the one the pass began in

    def fold(self, reads: Iterable[bytes]) -> None:
        with self._abandoned_unless_done():
            sent = False
            for data in reads:  # read while the process folds the one sent before
                if sent:
                    self._owner.receive(Folded, self._process)
                self._owner.send(Fold(data), self._process)
                sent = True
            if sent:
                self._owner.receive(Folded, self._process)

    def plan(self, reads: Iterable[bytes]) -> Generator[list[BatchRewrite]]:
        with self._abandoned_unless_done():
            planned: Planned | None = None
            sent = False
            for data in reads:  # read while the process plans the one sent before
                if sent:
                    planned = self._owner.receive(Planned, self._process)
                self._owner.send(Plan(data), self._process)
                sent = True
                if planned is not None:
                    yield planned.rewrites  # written while the process plans `data`
            if sent:
                yield self._owner.receive(Planned, self._process).rewrites

    def end(self) -> None:
        self._owner.request(End(), Ended, self._process)

    @contextlib.contextmanager
    def _abandoned_unless_done(self) -> Iterator[None]:
        """A pass that ends with a request unanswered (a read or a write failed, or the
        broker is stopping) ends its process: that reply must not answer the next request
        (`send` would also start over). A stop loses the rewrites of the read it had sent."""
        try:
            yield
        except BaseException:
            if self._owner.outstanding and self._owner.running(self._process):
                self._owner.close(kill=True)
            raise


def _python_path() -> str:
    """The child's PYTHONPATH: kraftlite's own root first (so a source tree run imports the
    same kraftlite), then the broker's."""
    inherited = os.environ.get("PYTHONPATH")
    return _PACKAGE_ROOT if not inherited else os.pathsep.join((_PACKAGE_ROOT, inherited))


def main() -> None:
    """The process (`_MAIN`): its socket's descriptor is its one argument."""
    with contextlib.closing(Connection(int(sys.argv[1]))) as connection:
        serve(connection)
