"""Replica fetch sessions on a leader (KIP-227's idea, for followers).

Rules:
1. One session per follower broker: a full fetch (session id NEW_SESSION) replaces it. The
   session keeps, per partition, the position the follower last sent and the high
   watermark and log start it was last told.
2. A later fetch must name the session and its next epoch, else it is refused whole
   (FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH) and the follower starts over:
   a lost answer can never leave the two sides disagreeing about positions.
3. A partition is looked at only when the fetch names it (its position moved) or when the
   leader's replica changed since (`changed`: records appended, the high watermark or log
   start moved, the role changed), so a round where nothing changed costs O(1), not
   O(partitions), and idle partitions cost nothing.
4. An answer carries only partitions with news: data, a divergence, an error, or a high
   watermark or log start the follower has not been told. A new high watermark alone
   (`changed_later`) wakes no one: it goes with the next answer the follower gets for
   another reason, or when its long-poll ends, so an acknowledged write costs each
   follower one round (the records), not two (the records, then the HW they moved).
5. Each follower's new session says the newest stored batch format it reads (absent: 2, a
   follower from before format 3); it is kept with the broker epoch it came with, so a
   follower that restarts (a new epoch) is of format 2 again until it says otherwise
   (`reads_format`: the rolling upgrade's gate for format 3, protocol/stored.py).
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol.batch import MAGIC_V2
from kraftlite.protocol.internal import NEW_SESSION, FetchPosition, ReplicaFetchRequest

PartitionKey = tuple[str, int]


@dataclass(slots=True)
class SessionPartition:
    position: FetchPosition
    told_high_watermark: int = -1
    told_log_start: int = -1
    # The leader checked `position` (epoch, lineage, range) and found nothing wrong: only
    # then may a high watermark alone be told for it (rule 4).
    checked: bool = False


@dataclass
class FetchSession:
    session_id: int
    follower: int
    broker_epoch: int
    next_epoch: int = 1
    last_round_ms: int = 0  # when its latest fetch arrived
    partitions: dict[PartitionKey, SessionPartition] = field(default_factory=dict)
    dirty: set[PartitionKey] = field(default_factory=set)
    later: set[PartitionKey] = field(default_factory=set)  # a HW to tell with the next answer
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    deferred: list[PartitionKey] = field(default_factory=list)

    def take_dirty(self) -> set[PartitionKey]:
        dirty, self.dirty = self.dirty, set()
        self.wake.clear()
        return dirty

    def take_later(self) -> set[PartitionKey]:
        later, self.later = self.later, set()
        return later

    def defer(self, keys: list[PartitionKey]) -> None:
        """Partitions a full answer had no room for: looked at first next round."""
        self.deferred = keys

    def take_deferred(self, keys: set[PartitionKey]) -> list[PartitionKey]:
        """`keys` to look at, the ones deferred last round first."""
        deferred, self.deferred = self.deferred, []
        if not deferred:
            return list(keys)
        first = set(deferred)
        return [*deferred, *(k for k in keys if k not in first)]


class FetchSessions:
    def __init__(self) -> None:
        self._by_follower: dict[int, FetchSession] = {}
        self._watching: dict[PartitionKey, dict[int, FetchSession]] = {}
        self._formats: dict[int, tuple[int, int]] = {}  # rule 5: follower -> (epoch, format)

    def __len__(self) -> int:
        return len(self._by_follower)

    def open(
        self, request: ReplicaFetchRequest, now_ms: int
    ) -> tuple[FetchSession, set[PartitionKey]]:
        """The session this fetch belongs to (rules 1-2), updated with the fetch's positions,
        and the partitions to look at now.
        """
        if request.session_id == NEW_SESSION:
            self.close(request.replica_id)
            said = MAGIC_V2 if request.record_format is None else request.record_format
            self._formats[request.replica_id] = (request.broker_epoch, said)
            session = FetchSession(_new_id(), request.replica_id, request.broker_epoch)
            self._by_follower[request.replica_id] = session
        else:
            found = self._by_follower.get(request.replica_id)
            if (
                found is None
                or found.session_id != request.session_id
                or found.broker_epoch != request.broker_epoch
            ):
                raise KraftliteError(
                    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                    f"no fetch session {request.session_id} for replica {request.replica_id}",
                )
            if request.session_epoch != found.next_epoch:
                raise KraftliteError(
                    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                    f"session epoch {request.session_epoch} is not {found.next_epoch}",
                )
            session = found
            session.next_epoch += 1
        session.last_round_ms = now_ms
        for key in request.forgotten:
            if session.partitions.pop(key, None) is not None:
                self._unwatch(key, session)
            session.dirty.discard(key)
            session.later.discard(key)
        touched = session.take_dirty()
        for position in request.partitions:
            key = (position.topic_id, position.partition)
            entry = session.partitions.get(key)
            if entry is None:
                session.partitions[key] = SessionPartition(position)
                self._watching.setdefault(key, {})[session.follower] = session
            else:
                entry.position = position
                entry.checked = False
            touched.add(key)
        return session, touched

    def reads_format(self, follower: int, broker_epoch: int) -> int:
        """Rule 5: the newest stored batch format `follower`, in its registration of
        `broker_epoch`, said it reads; 2 when it said nothing in that registration."""
        said = self._formats.get(follower)
        return said[1] if said is not None and said[0] == broker_epoch else MAGIC_V2

    def close(self, follower: int) -> None:
        session = self._by_follower.pop(follower, None)
        if session is not None:
            for key in session.partitions:
                self._unwatch(key, session)

    def _unwatch(self, key: PartitionKey, session: FetchSession) -> None:
        watchers = self._watching.get(key)
        if watchers is not None and watchers.get(session.follower) is session:
            del watchers[session.follower]
            if not watchers:
                del self._watching[key]

    def changed(self, key: PartitionKey) -> None:
        """Rule 3: the leader's replica of `key` changed; wake the sessions that fetch it."""
        for session in self._watching.get(key, {}).values():
            session.dirty.add(key)
            session.wake.set()

    def changed_later(self, key: PartitionKey) -> None:
        """Rule 4: a new high watermark of `key`, for the sessions' next answers."""
        for session in self._watching.get(key, {}).values():
            session.later.add(key)

    def last_rounds(self, key: PartitionKey) -> dict[int, int]:
        """When each session that fetches `key` last fetched (replica_state rule 5)."""
        return {f: s.last_round_ms for f, s in self._watching.get(key, {}).items()}


def _new_id() -> int:
    return secrets.randbits(31) or 1
