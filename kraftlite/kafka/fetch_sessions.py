"""Kafka clients' fetch sessions (KIP-227), one per connection.

A consumer that fetches many partitions names them all in every Fetch unless the broker
keeps a session: then it names only the partitions whose position moved, and the answer
carries only the partitions with news. Pure decisions; `handlers.Session.fetch` does the I/O.

Rules:
1. A session belongs to the connection that opened it and ends with it. A connection holds
   at most one; an id it did not open is FETCH_SESSION_ID_NOT_FOUND there, so session ids
   need no secrecy.
2. The request's (session id, epoch), as KIP-227 has them:
   - epoch -1: a full fetch and no session (also every Fetch before v7);
   - epoch 0: a full fetch that opens a session;
   - epoch > 0: an incremental fetch, which must name this connection's session and its
     next epoch, else it is refused whole (FETCH_SESSION_ID_NOT_FOUND /
     INVALID_FETCH_SESSION_EPOCH) and the client starts over with a full fetch.
   A full fetch ends the connection's session, if any (a client sends one only to leave
   its session, or to replace it).
3. Sessions are bounded: at most MAX_FETCH_PARTITIONS partitions each, and a broker-wide
   `SessionBudget` of partitions over all connections (Kafka bounds its session cache the
   same way). Only partitions that exist and that the client may read are held (`admit`),
   so a client with no rights cannot spend the budget on made-up names. A full fetch that
   would not fit, names a partition twice or one not admitted is answered without a
   session (session id 0: the client goes on with full fetches, which the protocol
   allows); an incremental one that would is refused and its session closed
   (FETCH_SESSION_ID_NOT_FOUND: the client starts over).
4. An incremental fetch adds or updates the partitions it names, then drops the forgotten
   ones (as Kafka's FetchSession.update), then reads every partition of the session in the
   session's order; a partition that returned records moves to the end, so that under
   `max_bytes` the ones after it get their turn. A session left with no partition is
   closed, and that fetch answered without one.
5. A full answer carries every partition. An incremental one carries a partition only with
   news: records, an error, or a high watermark or log start other than the one the client
   was last told (the last stable offset is the high watermark: no transactions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.service import MAX_FETCH_PARTITIONS

PartitionKey = tuple[str, int]
NO_SESSION = 0  # a session id: none
INITIAL_EPOCH = 0  # a session epoch: open a session
FINAL_EPOCH = -1  # a session epoch: no session
_MAX_EPOCH = 2**31 - 1
MAX_SESSION_PARTITIONS = 100_000  # rule 3: over all of a listener's sessions


@dataclass(slots=True)
class Position:
    """Where the client reads a partition from, and what it was last told of it."""

    fetch_offset: int
    max_bytes: int
    leader_epoch: int = -1
    told_high_watermark: int = -1
    told_log_start: int = -1
    told_last_stable: int = -1


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


class SessionBudget:
    """Rule 3's broker-wide bound: partitions held by every session of this listener."""

    def __init__(self, limit: int = MAX_SESSION_PARTITIONS) -> None:
        self.limit = limit
        self.used = 0

    def take(self, count: int) -> bool:
        if self.used + count > self.limit:
            return False
        self.used += count
        return True

    def give_back(self, count: int) -> None:
        self.used -= count


class ConnectionFetchSession:
    """The fetch session of one connection (rule 1); `new_id` gives non-zero int32 ids."""

    def __init__(self, new_id: Iterable[int], budget: SessionBudget) -> None:
        self._ids = iter(new_id)
        self._budget = budget
        self.session: FetchSession | None = None
        self._held = 0  # partitions taken from the budget

    def close(self) -> None:
        """The session ends (the connection closed, or rules 2-4 end it)."""
        self.session = None
        self._budget.give_back(self._held)
        self._held = 0

    def _hold(self, count: int) -> bool:
        """Resize what this session holds of the budget to `count`, if it fits."""
        if count > MAX_FETCH_PARTITIONS or not self._budget.take(count - self._held):
            return False
        self._held = count
        return True

    def plan(
        self,
        session_id: int,
        epoch: int,
        named: list[tuple[PartitionKey, Position]],
        forgotten: list[PartitionKey],
        admit: Callable[[PartitionKey], bool],
    ) -> Plan:
        """Rules 2-4 for one Fetch that names `named` and forgets `forgotten`; `admit` says
        whether a partition may be held (rule 3)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self.close()
            full = dict(named)
            if (
                epoch == FINAL_EPOCH
                or len(full) != len(named)  # (a partition named twice: fetch_many refuses)
                or len(full) > MAX_FETCH_PARTITIONS
                or not all(map(admit, full))
                or not self._hold(len(full))
            ):
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
        added = {key for key, _ in named if key not in session.partitions}
        if len(added) > MAX_FETCH_PARTITIONS or not (
            all(map(admit, added)) and self._hold(len(session.partitions) + len(added))
        ):
            self.close()
            raise KraftliteError(
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                "the fetch session cannot hold more partitions: start a new one",
            )
        session.next_epoch = 1 if epoch == _MAX_EPOCH else epoch + 1
        for key, position in named:
            known = session.partitions.get(key)
            if known is None:
                session.partitions[key] = position
            else:
                known.fetch_offset = position.fetch_offset
                known.max_bytes = position.max_bytes
                known.leader_epoch = position.leader_epoch
        for key in forgotten:
            session.partitions.pop(key, None)
        self._hold(len(session.partitions))  # shrinking always fits
        if not session.partitions:
            self.close()
            return Plan([], None, incremental=False)
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
        last_stable: int = -1,
    ) -> bool:
        """Rule 4 for one partition; what the client is told is remembered (the last
        stable offset too: a read_committed client waits on it, as Kafka's sessions say)."""
        news = (
            error
            or records
            or high_watermark != position.told_high_watermark
            or log_start != position.told_log_start
            or last_stable != position.told_last_stable
        )
        if news or not plan.incremental:
            position.told_high_watermark = high_watermark
            position.told_log_start = log_start
            position.told_last_stable = last_stable
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
