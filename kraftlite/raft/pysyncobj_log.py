"""The replicated metadata log on pysyncobj (with transport.py, the only modules importing it).

How pysyncobj is used (shared design notes, dependencies.md, measured on this machine):
- One SyncObjConsumer holds the MetadataImage; its one replicated method applies a batch of
  versioned record bytes (never pickled objects of ours). The batch's expected_version makes
  apply a compare-and-set, and its request id makes a retried proposal idempotent.
- Settings: unbatched appends (batching waits for the next heartbeat: ~10 commits/s), no
  forked snapshot writer (it lost or duplicated acknowledged commands on restart), a 0.5 s
  reconnect time (default 5 s), a 2 s leader fallback, and a shared password, since the
  transport is otherwise unauthenticated pickle.
- The Raft port binds exactly the node's Raft address, and a peer's bytes are bounded and
  read linearly before and after it authenticates (transport.py: pysyncobj's own transport
  listened on 0.0.0.0 and let one stranger's 64 MiB stream starve the tick thread).
- pysyncobj's journal is an mmap that is never fsynced: a controller survives kill -9, but not
  the power loss of a majority of controllers at once (docs/design/metadata.md).
- Runtime attributes are set before SyncObjConsumer.__init__ so snapshots hold only the image
  and the recent request ids.
- The tick thread applies entries; the asyncio loop learns of new images through
  call_soon_threadsafe. Every proposal has a timeout: pysyncobj's own callbacks never time out.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from kraftlite.metadata.image import MetadataImage, StaleBatchError, apply_batch
from kraftlite.metadata.records import RecordBatch, RecordCodecError, decode_batch, encode_batch
from kraftlite.raft.transport import BoundedTcpTransport, PortLimits, PortStats

log = logging.getLogger(__name__)
_REMEMBERED_REQUESTS = 1024
# How long a leader that lost its majority keeps believing it leads (pysyncobj steps down
# after this long without answers; its default, 30 s, is far too long for us).
LEADER_FALLBACK_TIMEOUT_MS = 2000
# How long after starting a no-op that then committed this node may still answer as the
# leader (broker heartbeats): under the fallback timeout, which a new leader waits out
# before fencing anyone, with room for the moment between that check and the answer.
LEADERSHIP_CONFIRMATION_MS = LEADER_FALLBACK_TIMEOUT_MS - 500
CONFIRMATION_REFRESH_MS = 500  # the active controller starts a new one this often
CONFIRMATION_WAIT_MS = 800  # a heartbeat waits no longer for one (its attempt gets 1 s)
# Committed batches kept in memory for brokers that follow the log by offset; one further
# behind gets a snapshot of the image instead.
RETAINED_BATCHES = 100_000
RETAINED_BYTES = 128 << 20


class Outcome(Enum):
    COMMITTED = "committed"  # applied at the returned version
    DUPLICATE = "duplicate"  # the same request id committed before, at the returned version
    STALE = "stale"  # decided against an older image: decide again


@dataclass(frozen=True, slots=True)
class ProposeResult:
    outcome: Outcome
    version: int


class ProposeError(Exception):
    """The proposal did not commit (no leader, not the leader, timeout, queue full).

    `maybe_committed` is True when the outcome is unknown (it may still commit: retry with the
    same request id).
    """

    def __init__(self, reason: str, maybe_committed: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.maybe_committed = maybe_committed


class MetadataStateMachine(SyncObjConsumer):  # type: ignore[misc]
    """The replicated state: the metadata image and the ids of recent proposals."""

    def __init__(
        self,
        on_image: Callable[[MetadataImage, bytes | None], None],
        on_fatal: Callable[[Exception], None],
    ) -> None:
        # Set before SyncObjConsumer.__init__: pysyncobj leaves these out of snapshots.
        self._on_image = on_image
        self._on_fatal = on_fatal
        super().__init__()
        self.image = MetadataImage.EMPTY
        self.requests: collections.OrderedDict[str, int] = collections.OrderedDict()

    @replicated  # type: ignore[untyped-decorator]
    def apply_batch(self, payload: bytes) -> tuple[str, int]:
        """Runs on every voter, in log order, on pysyncobj's tick thread."""
        try:
            batch = decode_batch(payload)
        except RecordCodecError as exc:  # a newer writer: this node cannot follow the log
            self._on_fatal(exc)
            return Outcome.STALE.value, self.image.version
        if batch.request_id is not None and batch.request_id in self.requests:
            return Outcome.DUPLICATE.value, self.requests[batch.request_id]
        try:
            image = apply_batch(self.image, batch)
        except StaleBatchError:
            return Outcome.STALE.value, self.image.version
        except Exception as exc:  # MetadataInvariantError: a bug; stop rather than diverge
            self._on_fatal(exc)
            raise
        self.image = image
        if batch.request_id is not None:
            self.requests[batch.request_id] = image.version
            while len(self.requests) > _REMEMBERED_REQUESTS:
                self.requests.popitem(last=False)
        self._on_image(image, payload)
        return Outcome.COMMITTED.value, image.version

    @replicated  # type: ignore[untyped-decorator]
    def barrier(self) -> tuple[str, int]:
        """A no-op through the log: once applied here, this node's image is current."""
        return Outcome.COMMITTED.value, self.image.version

    def _deserialize(self, data: Any) -> None:  # a snapshot was loaded or installed
        super()._deserialize(data)
        self._on_image(self.image, None)  # no batch: followers of the log need a snapshot


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """A voter's Raft settings. Addresses are HOST:PORT.

    The Raft port listens on `bind_address`, by default exactly `self_address` (the address
    peers are given); set it only where that address is not a local one (NAT).
    """

    self_address: str
    peer_addresses: tuple[str, ...]
    data_dir: Path
    password: str
    election_timeout_min_s: float = 0.4
    election_timeout_max_s: float = 1.4
    heartbeat_period_s: float = 0.05
    bind_address: str | None = None
    port_limits: PortLimits = field(default_factory=PortLimits)
    retained_batches: int = RETAINED_BATCHES  # metadata.log.retained.batches
    # A voter joining a running quorum (`kraftlite controller --join`): on its first start
    # (no journal yet) it starts no election until it has heard from a leader and caught up
    # (it is added meanwhile), so an empty log never bumps the term and disrupts the quorum
    # it joins. Later starts elect as any voter.
    join: bool = False
    # pysyncobj's dynamic membership (add_voter, remove_voter). With it, a snapshot carries
    # the voters' addresses and replaces a follower's list when installed, so every voter
    # must list the others at the same addresses (off where they do not: NAT, proxies).
    membership_changes: bool = True


class RaftMetadataLog:
    """The metadata log as seen from the asyncio loop: propose batches, read the image."""

    def __init__(
        self,
        settings: RaftSettings,
        loop: asyncio.AbstractEventLoop,
        on_fatal: Callable[[Exception], None],
    ) -> None:
        self._loop = loop
        self._image = MetadataImage.EMPTY
        # The committed batches that led to the image, as proposed (encoded) bytes: the
        # last ones, contiguous, after version `_recent_base` (brokers follow them by offset).
        self._recent: collections.deque[bytes] = collections.deque()
        self._recent_base = 0
        self._recent_bytes = 0
        self._retained_batches = settings.retained_batches
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[MetadataImage], None]] = []
        self._state = MetadataStateMachine(self._from_tick_thread, on_fatal)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        journal, dump = settings.data_dir / "raft.journal", settings.data_dir / "raft.dump"
        # --join holds elections back until this voter has once caught up with a leader (a
        # marker file then): later starts elect as any voter, so a whole quorum restarted
        # with --join still elects a leader
        joined = settings.data_dir / JOINED_MARKER
        joining = settings.join and not joined.exists()
        conf = (_JoiningConf if joining else SyncObjConf)(
            journalFile=str(journal),
            fullDumpFile=str(dump),
            appendEntriesUseBatch=False,
            useFork=False,
            connectionRetryTime=0.5,
            connectionTimeout=1.5,
            leaderFallbackTimeout=LEADER_FALLBACK_TIMEOUT_MS / 1000,
            appendEntriesPeriod=settings.heartbeat_period_s,
            raftMinTimeout=settings.election_timeout_min_s,
            raftMaxTimeout=settings.election_timeout_max_s,
            autoTickPeriod=0.01,
            password=settings.password,
            dynamicMembershipChange=settings.membership_changes,
            bindAddress=settings.bind_address or settings.self_address,
        )
        if joining:
            conf.raftMinTimeout = JOIN_ELECTION_TIMEOUT_S
            conf.raftMaxTimeout = JOIN_ELECTION_TIMEOUT_S + 1
            conf.onReady = functools.partial(
                _restore_timeouts,
                conf,
                settings.election_timeout_min_s,
                settings.election_timeout_max_s,
                joined,
            )
        self._membership_changes = settings.membership_changes
        self._tick_actions: collections.deque[Callable[[], object]] = collections.deque()
        self.port_stats = PortStats()
        self._syncobj = SyncObj(
            settings.self_address,
            list(settings.peer_addresses),
            conf=conf,
            consumers=[self._state],
            transportClass=functools.partial(
                BoundedTcpTransport, limits=settings.port_limits, stats=self.port_stats
            ),
        )
        self._syncobj.addOnTickCallback(self._run_tick_actions)

    # -- images -------------------------------------------------------------------------

    def _from_tick_thread(self, image: MetadataImage, payload: bytes | None) -> None:
        self._loop.call_soon_threadsafe(self._publish, image, payload)

    def _publish(self, image: MetadataImage, payload: bytes | None) -> None:
        if image.version < self._image.version:
            return  # an older image arrived late
        self._retain(image.version, payload)
        self._image = image
        self._changed.set()
        self._changed = asyncio.Event()
        for listener in self._listeners:
            listener(image)

    @property
    def image(self) -> MetadataImage:
        """The latest image applied on this node (may lag the leader's)."""
        return self._image

    def _retain(self, version: int, payload: bytes | None) -> None:
        """Keep `payload`, the batch that made `version`, if it continues the kept ones; a
        jump (a snapshot was loaded) starts over after it.
        """
        if payload is None or version != self._recent_base + len(self._recent) + 1:
            self._recent.clear()
            self._recent_base, self._recent_bytes = version, 0
            return
        self._recent.append(payload)
        self._recent_bytes += len(payload)
        while len(self._recent) > self._retained_batches or self._recent_bytes > RETAINED_BYTES:
            self._recent_bytes -= len(self._recent.popleft())
            self._recent_base += 1

    @property
    def first_retained_version(self) -> int:
        """Brokers at this version or later can follow by records; earlier need a snapshot."""
        return self._recent_base

    def batches_after(self, version: int, max_bytes: int) -> list[bytes] | None:
        """The committed batches after `version`, oldest first, about `max_bytes` of them
        (at least one); None when this node no longer keeps the first of them.
        """
        if version < self._recent_base:
            return None
        found: list[bytes] = []
        size = 0
        for payload in itertools.islice(self._recent, version - self._recent_base, None):
            if found and size + len(payload) > max_bytes:
                break
            found.append(payload)
            size += len(payload)
        return found

    def add_listener(self, listener: Callable[[MetadataImage], None]) -> None:
        self._listeners.append(listener)

    async def wait_for_change(self, after_version: int, timeout_s: float) -> MetadataImage:
        """The image once its version exceeds `after_version`, or the current one at timeout."""
        deadline = self._loop.time() + timeout_s
        while self._image.version <= after_version:
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                break
        return self._image

    # -- proposals ----------------------------------------------------------------------

    async def propose(self, batch: RecordBatch, timeout_s: float) -> ProposeResult:
        """Commit `batch` through Raft; returns once this node applied it (or knows it is
        stale or a duplicate). Raises ProposeError when it did not commit in time.
        """
        payload = encode_batch(batch)
        result = await self._call(self._state.apply_batch, (payload,), timeout_s)
        outcome, version = result
        proposed = ProposeResult(Outcome(outcome), int(version))
        await self.wait_for_change(proposed.version - 1, timeout_s)  # published on the loop
        return proposed

    async def barrier(self, timeout_s: float) -> int:
        """Commit a no-op; afterwards this node's image includes everything committed before."""
        _, version = await self._call(self._state.barrier, (), timeout_s)
        await self.wait_for_change(int(version) - 1, timeout_s)
        return int(version)

    async def _call(self, method: Any, args: tuple[Any, ...], timeout_s: float) -> Any:
        future: asyncio.Future[Any] = self._loop.create_future()

        def resolve(result: Any, error: Any) -> None:  # on the tick thread
            self._loop.call_soon_threadsafe(_settle, future, result, error)

        method(*args, callback=resolve)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise ProposeError("timed out waiting for the quorum", maybe_committed=True) from None

    # -- status -------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return bool(self._syncobj._isLeader())

    def leader_address(self) -> str | None:
        leader = self._syncobj._getLeader()
        return None if leader is None else str(getattr(leader, "id", leader))

    def status(self) -> dict[str, Any]:
        """pysyncobj's status, read from the asyncio thread while the tick thread may change
        the peer tables it iterates: retried, as voter_addresses is."""
        for _ in range(9):
            try:
                return self._status(self._syncobj.getStatus())
            except RuntimeError:  # "dictionary changed size during iteration"
                continue
        return self._status(self._syncobj.getStatus())

    @staticmethod
    def _status(raw: dict[str, Any]) -> dict[str, Any]:
        leader = raw.get("leader")
        return {
            "self": str(getattr(raw["self"], "id", raw["self"])),
            "leader": None if leader is None else str(getattr(leader, "id", leader)),
            "state": {0: "follower", 1: "candidate", 2: "leader"}.get(raw["state"], "unknown"),
            "term": raw["raft_term"],
            "commit_index": raw["commit_idx"],
            "last_applied": raw["last_applied"],
            "has_quorum": bool(raw["has_quorum"]),
            "connected": {
                key.removeprefix("partner_node_status_server_"): value == 2
                for key, value in raw.items()
                if key.startswith("partner_node_status_server_")
            },
            # the last log index the leader knows each other voter holds (leader only)
            "match_index": {
                key.removeprefix("match_idx_server_"): value
                for key, value in raw.items()
                if raw["state"] == 2 and key.startswith("match_idx_server_")
            },
        }

    # -- membership (one voter at a time: Raft's single-server changes, as KIP-853) --------

    @property
    def membership_changes(self) -> bool:
        return bool(self._membership_changes)

    def voter_addresses(self) -> set[str]:
        """The Raft addresses of the voters as this node's configuration has them (a change
        counts from when its entry is appended, as in Raft's single-server changes). Read
        from the asyncio thread while the tick thread may change the set: retried."""
        for _ in range(10):
            try:
                others = {str(getattr(n, "id", n)) for n in self._syncobj.otherNodes}
                break
            except RuntimeError:  # changed size during iteration
                continue
        else:
            raise ProposeError("the voter set kept changing", maybe_committed=False)
        return {*others, str(getattr(self._syncobj.selfNode, "id", self._syncobj.selfNode))}

    async def add_voter(self, address: str, timeout_s: float) -> None:
        await self._call(self._syncobj.addNodeToCluster, (address,), timeout_s)

    async def remove_voter(self, address: str, timeout_s: float) -> None:
        await self._call(self._syncobj.removeNodeFromCluster, (address,), timeout_s)

    def transfer_leadership(self) -> None:
        """Hand leadership to the most caught-up voter (Raft's TimeoutNow), best effort, on
        the tick thread (it reads Raft state and writes to a peer's connection)."""
        syncobj = self._syncobj
        self._tick_actions.append(lambda: syncobj.transferLeadership(callback=lambda *_: None))

    def _run_tick_actions(self) -> None:
        """pysyncobj calls this on every tick, on its thread (holding its callback lock: an
        action must not add or remove tick callbacks)."""
        while self._tick_actions:
            self._tick_actions.popleft()()

    def close(self) -> None:
        self._syncobj.destroy_synchronous()


JOIN_ELECTION_TIMEOUT_S = 10**9  # never, until _restore_timeouts


class _JoiningConf(SyncObjConf):  # type: ignore[misc]
    """A joining voter's settings: its election timeouts are "never" until it has caught
    up, which pysyncobj's check (timeouts below the connection timeout) would refuse; the
    check runs on the timeouts it will use from then on."""

    raftMinTimeout: float
    raftMaxTimeout: float

    def validate(self) -> None:
        waiting = self.raftMinTimeout, self.raftMaxTimeout
        self.raftMinTimeout, self.raftMaxTimeout = 0.4, 1.4
        try:
            super().validate()
        finally:
            self.raftMinTimeout, self.raftMaxTimeout = waiting


JOINED_MARKER = "joined"


def _restore_timeouts(conf: SyncObjConf, low: float, high: float, joined: Path) -> None:
    """On the tick thread, once a joining voter has caught up with a leader: it was added."""
    conf.raftMinTimeout, conf.raftMaxTimeout = low, high
    joined.touch()


_FAILURES = {
    FAIL_REASON.QUEUE_FULL: ("the Raft queue is full", False),
    FAIL_REASON.MISSING_LEADER: ("no Raft leader", False),
    FAIL_REASON.DISCARDED: ("discarded by a new leader", False),
    FAIL_REASON.NOT_LEADER: ("not the Raft leader", False),
    FAIL_REASON.LEADER_CHANGED: ("the Raft leader changed", True),
    FAIL_REASON.REQUEST_DENIED: ("request denied", False),
}


def _settle(future: asyncio.Future[Any], result: Any, error: Any) -> None:
    if future.done():
        return
    if error == FAIL_REASON.SUCCESS:
        future.set_result(result)
        return
    reason, maybe = _FAILURES.get(error, ("unknown outcome", True))
    future.set_exception(ProposeError(reason, maybe_committed=maybe))
