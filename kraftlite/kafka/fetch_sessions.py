"""Kafka clients' fetch sessions (KIP-227), one per connection.

A consumer that fetches many partitions names them all in every Fetch unless the broker
keeps a session: then it names only the partitions whose position moved, and the answer
carries only the partitions with news. Pure decisions; `handlers.Session.fetch` does the I/O.

Rules:
1. A session belongs to the connection that opened it and ends with it. A connection holds
   at most one; an id it did not open is FETCH_SESSION_ID_NOT_FOUND there, so session ids
   need no secrecy and the sessions a broker keeps are bounded by its connections.
2. The request's (session id, epoch), as KIP-227 has them:
   - (0, -1): a full fetch and no session (also every Fetch before v7);
   - (0, 0): a full fetch that opens a session;
   - (id, 0): closes session `id` and opens another;
   - (id, -1): closes session `id`; a full fetch and no session;
   - (id, epoch > 0): an incremental fetch, which must name this connection's session and
     its next epoch, else it is refused whole (FETCH_SESSION_ID_NOT_FOUND /
     INVALID_FETCH_SESSION_EPOCH) and the client starts over with a full fetch.
   A session never holds more than MAX_FETCH_PARTITIONS partitions. A full fetch naming
   more, or one partition twice, is answered without one (session id 0: the client goes on
   with full fetches); an incremental one that would grow past it closes the session
   (FETCH_SESSION_ID_NOT_FOUND).
3. An incremental fetch adds or updates the partitions it names and drops the forgotten
   ones, then reads every partition of the session in the session's order; a partition
   that returned records moves to the end, so that under `max_bytes` the ones after it get
   their turn.
4. A full answer carries every partition. An incremental one carries a partition only with
   news: records, an error, or a high watermark or log start other than the one the client
   was last told.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kraftlite.broker.service import MAX_FETCH_PARTITIONS
from kraftlite.errors import ErrorCode, KraftliteError

PartitionKey = tuple[str, int]
NO_SESSION = 0  # a session id: none
INITIAL_EPOCH = 0  # a session epoch: open a session
FINAL_EPOCH = -1  # a session epoch: no session
_MAX_EPOCH = 2**31 - 1


@dataclass(slots=True)
class Position:
    """Where the client reads a partition from, and what it was last told of it."""

    fetch_offset: int
    max_bytes: int
    leader_epoch: int = -1
    told_high_watermark: int = -1
    told_log_start: int = -1


@dataclass
class FetchSession:
    session_id: int
    next_epoch: int = 1
    partitions: dict[PartitionKey, Position] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """What one Fetch reads, and how it is answered."""

    partitions: list[tuple[PartitionKey, Position]]  # in the order to read them
    session: FetchSession | None  # None: a full fetch with no session
    incremental: bool  # rule 4: only partitions with news are answered

    @property
    def session_id(self) -> int:
        return NO_SESSION if self.session is None else self.session.session_id


class ConnectionFetchSession:
    """The fetch session of one connection (rule 1); `new_id` gives non-zero int32 ids."""

    def __init__(self, new_id: Iterable[int]) -> None:
        self._ids = iter(new_id)
        self.session: FetchSession | None = None

    def plan(
        self,
        session_id: int,
        epoch: int,
        named: list[tuple[PartitionKey, Position]],
        forgotten: list[PartitionKey],
    ) -> Plan:
        """Rules 2 and 3 for one Fetch that names `named` and forgets `forgotten`."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION or epoch == INITIAL_EPOCH:
                self.session = None  # closed: by its id, or replaced by the new one
            full = dict(named)
            if epoch == FINAL_EPOCH or len(full) != len(named) or len(full) > MAX_FETCH_PARTITIONS:
                # (a partition named twice is the fetch's error: BrokerService.fetch_many)
                return Plan(named, None, incremental=False)
            self.session = FetchSession(next(self._ids), partitions=full)
            return Plan(named, self.session, incremental=False)
        session = self.session
        if session is None or session.session_id != session_id:
            raise KraftliteError(
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                f"this connection has no fetch session {session_id}",
            )
        if epoch != session.next_epoch:
            raise KraftliteError(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session epoch {epoch} is not {session.next_epoch}",
            )
        session.next_epoch = 1 if epoch == _MAX_EPOCH else epoch + 1
        for key in forgotten:
            session.partitions.pop(key, None)
        for key, position in named:
            known = session.partitions.get(key)
            if known is None:
                session.partitions[key] = position
            else:
                known.fetch_offset = position.fetch_offset
                known.max_bytes = position.max_bytes
                known.leader_epoch = position.leader_epoch
        if len(session.partitions) > MAX_FETCH_PARTITIONS:
            self.session = None
            raise KraftliteError(
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                f"a fetch session holds at most {MAX_FETCH_PARTITIONS} partitions",
            )
        return Plan(list(session.partitions.items()), session, incremental=True)

    @staticmethod
    def must_answer(
        plan: Plan,
        position: Position,
        *,
        error: bool,
        records: bool,
        high_watermark: int,
        log_start: int,
    ) -> bool:
        """Rule 4 for one partition; what the client is told is remembered."""
        news = (
            error
            or records
            or high_watermark != position.told_high_watermark
            or log_start != position.told_log_start
        )
        if news or not plan.incremental:
            position.told_high_watermark = high_watermark
            position.told_log_start = log_start
            return True
        return False

    @staticmethod
    def returned_records(plan: Plan, keys: Iterable[PartitionKey]) -> None:
        """Rule 3: partitions that returned records go to the end of the session."""
        if plan.session is None:
            return
        partitions = plan.session.partitions
        for key in keys:
            position = partitions.pop(key, None)
            if position is not None:
                partitions[key] = position
