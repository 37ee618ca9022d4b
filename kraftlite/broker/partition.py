"""One partition replica on this broker: its log, its role (leader, follower, offline) and
the tasks waiting on it. The leader's bookkeeping is the pure `replica_state`; this class
runs it against the log and the clock and wakes waiters.

Rules:
1. Only the leader of the current epoch appends producer batches; every wait re-checks the
   role and epoch when it wakes, so a leader that loses leadership fails its waiting produces
   with NOT_LEADER_OR_FOLLOWER.
2. Consumers read below the high watermark only; followers read up to the log end.
3. A follower fetch carries the follower's view of the leader epoch and the epoch of its
   last batch; the leader answers a divergence (KIP-595's diverging epoch, on KIP-101's
   epoch cache) instead of data, and the follower truncates to it.
4. Transactions (issue 27): the leader's producer state (producer_state.py) knows the
   open and aborted transactions; read_committed consumers read below the last stable
   offset, which it derives from them and the high watermark. Only the leader writes a
   marker (`write_marker`, for the transaction coordinator), through the same state and
   lock as the producers' batches; a client's batch may not be a control batch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

from kraftlite.broker import replica_state as rs
from kraftlite.broker.cleaner import CleanerState
from kraftlite.broker.log_store import ReplicaLog
from kraftlite.broker.notifier import Notifier
from kraftlite.broker.producer_state import AbortedTxn, ProducerStates
from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import PartitionRegistration
from kraftlite.metadata.records import NO_LEADER
from kraftlite.metadata.topics import effective_config, is_compacted
from kraftlite.protocol import batch as batch_format
from kraftlite.storage.log import AppendInfo

T = TypeVar("T")
_LOW_WATERMARK_POLL_S = 1.0  # a backstop: reports and ISR changes wake the waiters


class Role(Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


class Tell(Enum):
    """Whom a change to a replica concerns, and how soon (replication.md, "Fetch sessions").

    NOW: followers, at once (records, log start, role); LATER: followers, with the next
    answer they get anyway (a new high watermark: its own round would cost each follower a
    request per acknowledged write, and followers only need the HW if they become leader);
    NO: only the ISR check and the HW checkpoint (a follower's fetch, a lease lapse).
    """

    NOW = "now"
    LATER = "later"
    NO = "no"


class Acks(Enum):
    NONE = "0"
    LEADER = "1"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """An AlterPartition this leader sent, with the epochs it was decided against."""

    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    base: tuple[int, ...] = field(default=(), compare=False)  # the ISR it changes (metrics)


@dataclass(frozen=True, slots=True)
class ReplicaFetchResult:
    high_watermark: int
    log_start_offset: int
    data: bytes = b""
    diverging_epoch: int | None = None  # set: truncate to `diverging_end_offset` first
    diverging_end_offset: int = -1
    # An ISR expansion this fetch qualified the follower for, already pending: send it.
    isr_proposal: IsrProposal | None = None


class Partition:
    def __init__(  # noqa: PLR0917 - identity, storage, clock, and who we are
        self,
        topic_id: str,
        topic: str,
        index: int,
        log: ReplicaLog,
        clock: Clock,
        broker_id: int,
        *,
        lease_valid: Callable[[], bool] = lambda: True,
    ) -> None:
        self.topic_id = topic_id
        self.topic = topic
        self.index = index
        self.log = log
        self.broker_id = broker_id
        self._clock = clock
        # The broker's leadership lease (lease.py), asked whenever we act as leader.
        self._lease_valid = lease_valid
        self._lapsed = False  # the lease lapsed while we led (see maybe_change_isr)
        self.role = Role.OFFLINE
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.registration: PartitionRegistration | None = None
        self.compacted = False  # cleanup.policy has compact: set with `configs`
        self.cleaner = CleanerState()  # what the log cleaner last saw (compacted only)
        self.configs = {}
        self.state: rs.LeaderState | None = None  # when leader
        self.hw_moved = Notifier()  # higher watermark or a role change (wakes local waiters)
        self.low_watermark_moved = Notifier()  # a follower's log start moved (DeleteRecords)
        # Told of every change, with whom it concerns (`Tell`); the replica manager wakes
        # fetch sessions and marks the partition for ISR checks and HW checkpoints.
        self.on_change: Callable[[Partition, Tell], None] | None = None
        # When each follower's fetch session last fetched this partition (rule 5 of
        # replica_state): asked before an append, never on an idle partition.
        self.sessions_seen: Callable[[Partition], Mapping[int, int]] | None = None
        # Whether a replica may join the ISR (live in this broker's metadata).
        self.is_eligible: Callable[[int], bool] = rs.anyone
        # Called with the ISR to propose when the leader's view calls for a change.
        self.on_isr_change: Callable[[Partition, tuple[int, ...]], None] | None = None
        # Idempotent producers (producer_state.py), as leader: rebuilt from the log in each
        # leader epoch, at the first idempotent batch; their appends go one at a time.
        self._producers: ProducerStates | None = None
        self._producers_epoch = -1
        self._producers_lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    def config(self, name: str) -> str:
        return effective_config(self.configs, name)

    def config_int(self, name: str) -> int:
        return int(self.config(name))

    @property
    def configs(self) -> Mapping[str, str]:
        return self._configs

    @configs.setter
    def configs(self, configs: Mapping[str, str]) -> None:
        """The topic's configs; `compacted` says once whether the log cleaner compacts it
        (every produce and the replica manager's rounds read it)."""
        self._configs = configs
        self.compacted = is_compacted(configs)

    # -- role changes (from metadata) ---------------------------------------------------

    def apply_registration(self, registration: PartitionRegistration) -> None:
        """Become what the committed registration says (called for every change)."""
        self.registration = registration
        self.low_watermark_moved.notify()  # the ISR, or the leadership, may have changed
        now = self._clock.monotonic_ms()
        if registration.leader == self.broker_id:
            if self.state is not None and self.state.leader_epoch == registration.leader_epoch:
                self.state = rs.with_registration(
                    self.state,
                    registration.partition_epoch,
                    registration.replicas,
                    registration.isr,
                )
            else:
                self.state = rs.become_leader(
                    self.broker_id,
                    registration.leader_epoch,
                    registration.partition_epoch,
                    registration.replicas,
                    registration.isr,
                    self.log.log_end_offset,
                    self.log.high_watermark,
                    now,
                    self.log.log_start_offset,
                )
            self.role = Role.LEADER
            self._advance_high_watermark()
        else:
            self.state = None
            self.role = Role.OFFLINE if registration.leader == NO_LEADER else Role.FOLLOWER
        self.leader_id = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.hw_moved.notify()
        self.changed()

    def go_offline(self) -> None:
        """The topic is gone or this broker left the replica set."""
        self.state = None
        self.role = Role.OFFLINE
        self.leader_id = NO_LEADER
        self.hw_moved.notify()
        self.changed()

    def not_leader(self) -> KraftliteError:
        return KraftliteError(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {self.broker_id} does not lead {self.name}",
            leader_id=self.leader_id,
        )

    @property
    def serving_as_leader(self) -> bool:
        """Whether this replica may act as leader now: it leads, and the broker's
        leadership lease holds (lease.py rule 1: asked when each request is served).
        """
        return self.state is not None and self._lease_valid()

    def lease_lapsed(self) -> KraftliteError:
        """The answer while we lead by metadata but our lease lapsed: retriable, and with no
        leader to forward to (the controllers may have given the partition to another).
        """
        return KraftliteError(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {self.broker_id} cannot vouch that it still leads {self.name}: it has "
            "not heard from the controllers for a session; retry",
            leader_id=NO_LEADER,
        )

    def _leader_state(self) -> rs.LeaderState:
        if self.state is None:
            raise self.not_leader()
        if not self._lease_valid():
            if not self._lapsed:
                self._lapsed = True
                self.changed(Tell.NO)  # the ISR check must see the lapse end
            raise self.lease_lapsed()
        return self.state

    # -- produce ------------------------------------------------------------------------

    async def produce(
        self,
        batch: bytes | memoryview,
        acks: Acks,
        timeout_s: float,
        *,
        verification: object | None = None,
        sequenced: bool = True,
        appended: Callable[[], None] | None = None,
    ) -> AppendInfo:
        """Append a producer's batch as leader; return once `acks` is satisfied;
        `appended` is called once the batch is in the log (before the wait for `acks`: a
        connection's next request may be appended then, in order). A batch of
        an idempotent producer (format 2, or 3 with a producer id) is checked against its
        producer's state first: a duplicate is not appended again, and answers with its
        first append's offsets. A transactional producer's first batch here needs its
        `verification` (`begin_verification`, producer_state.py rule 11)."""
        if batch_format.names_producer(batch):
            async with self._producers_lock:
                producers = await self._producer_states()
                header = batch_format.read_header(batch)
                if batch_format.is_control(header):
                    raise KraftliteError(
                        ErrorCode.INVALID_RECORD, "clients cannot write control batches"
                    )
                earlier = producers.check(
                    header, self._clock.now_ms(), verification, sequenced=sequenced
                )
                if earlier is None:
                    try:
                        info = self._append(batch, acks)
                    except BaseException:
                        self._producers = None  # appended or not: the log will say
                        raise
                    producers.record(header, info.first_offset, self._clock.now_ms())
                else:
                    info = AppendInfo(
                        earlier.first_offset,
                        earlier.last_offset,
                        header.record_count,
                        header.max_timestamp,
                        earlier.last_offset + 1,
                    )
        else:
            info = self._append(batch, acks)
        if appended is not None:
            appended()
        if acks is not Acks.ALL:
            return info
        # Not the lease again: once the ISR holds the records they are committed, and
        # failing the write now would only make the producer write them twice.
        min_isr = self.config_int("min.insync.replicas")
        state = await self._wait_for_high_watermark(
            info.log_end_offset, self._leader_state_epoch(), timeout_s
        )
        if not rs.enough_replicas(state, min_isr):  # the ISR shrank while we waited
            raise _not_enough_replicas(self.name, state, min_isr, appended=True)
        return info

    def _leader_state_epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1

    async def _producer_states(self) -> ProducerStates:
        """This leader epoch's producer state, rebuilt from the log's batch headers on a
        worker thread the first time it is needed (producer_state.py rule 5)."""
        epoch = self._leader_state().leader_epoch
        if self._producers is None or self._producers_epoch != epoch:
            now = self._clock.now_ms()
            log = self.log

            def marker_at(offset: int) -> batch_format.Marker:
                """The marker at `offset`; one retention or DeleteRecords removed since the
                headers were read counts as one from no known coordinator epoch."""
                try:
                    view = next(batch_format.split_batches(log.read(offset, 1)), None)
                    if view is not None and batch_format.read_header(view).base_offset == offset:
                        return batch_format.marker_of(view)
                except (KraftliteError, ValueError):
                    pass
                return batch_format.Marker(True, -1)

            rebuilt = await asyncio.to_thread(
                lambda: ProducerStates.rebuild(
                    log.producer_headers(),
                    now,
                    marker_at=marker_at,
                    high_watermark=log.high_watermark,
                )
            )
            if self._leader_state().leader_epoch != epoch:  # led by another meanwhile
                raise self.not_leader()
            self._producers, self._producers_epoch = rebuilt, epoch
        return self._producers

    async def write_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        timeout_s: float,
    ) -> int:
        """Rule 4: append the marker that ends `producer_id`'s transaction here, for the
        transaction coordinator (Kafka's WriteTxnMarkers), checked against the producer's
        state (producer_state.py rule 8); answered once the ISR holds it (acks=all, and
        min.insync.replicas). Its offset."""
        async with self._producers_lock:
            producers = await self._producer_states()
            producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
            now = self._clock.now_ms()
            marker = batch_format.encode_marker(
                producer_id, producer_epoch, commit, coordinator_epoch, now
            )
            try:
                info = self._append(marker, Acks.ALL)
            except BaseException:
                self._producers = None  # appended or not: the log will say
                raise
            producers.record_marker(
                batch_format.read_header(marker),
                batch_format.Marker(commit, coordinator_epoch),
                info.first_offset,
                now,
            )
        min_isr = self.config_int("min.insync.replicas")
        state = await self._wait_for_high_watermark(
            info.log_end_offset, self._leader_state_epoch(), timeout_s
        )
        if not rs.enough_replicas(state, min_isr):
            raise _not_enough_replicas(self.name, state, min_isr, appended=True)
        return info.first_offset

    async def begin_verification(self, producer_id: int) -> object | None:
        """Rule 4 (producer_state.py rule 11): a token for the producer's next transactional
        batch, or None when the producer has a transaction open here already (no
        verification needed: the coordinator's marker will end it)."""
        async with self._producers_lock:
            producers = await self._producer_states()
            entry = producers.entries.get(producer_id)
            if entry is not None and entry.txn_first_offset is not None:
                return None
            return producers.begin_verification(producer_id)

    async def transactions(self) -> ProducerStates:
        """Rule 4: this leader's producer state, with its transactions (rebuilt from the
        log the first time a leader epoch needs it)."""
        producers = self._producers
        if producers is not None and self._producers_epoch == self._leader_state().leader_epoch:
            return producers
        async with self._producers_lock:
            return await self._producer_states()

    def last_stable_offset(self, *, known: bool = False) -> int:
        """Rule 4 (producer_state.py rule 9), as leader. When this leader epoch has not
        built its producer state yet (`transactions` builds it): the high watermark, or
        with `known` (what a read_committed read may return) the log start."""
        log = self.log
        producers = self._producers
        if producers is None or self._producers_epoch != self._leader_state().leader_epoch:
            return log.log_start_offset if known else log.high_watermark
        return producers.last_stable_offset(log.high_watermark, log.log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """Rule 4: the aborted transactions a read_committed read of [fetch_offset, upper)
        skips (producer_state.py rule 10); none when the state is not built (nothing was
        read past the high watermark's last stable offset then either)."""
        producers = self._producers
        if producers is None or self._producers_epoch != self._leader_state().leader_epoch:
            return []
        producers.forget_aborted_below(self.log.log_start_offset)
        return producers.aborted(fetch_offset, upper)

    @contextlib.asynccontextmanager
    async def locked_producer_states(self) -> AsyncIterator[ProducerStates]:
        """This leader's idempotent producers as its next batch would find them (Kafka's
        DescribeProducers reads them), rebuilt from the log if this leader epoch has not
        needed them yet, and locked as the idempotent appends lock them: they wait until
        the block ends, so what it reads (on any thread) is one moment's."""
        async with self._producers_lock:
            yield await self._producer_states()

    def _append(self, batch: bytes | memoryview, acks: Acks) -> AppendInfo:
        """Check min.insync.replicas (acks=all) and append as leader."""
        state = self._leader_state()
        min_isr = self.config_int("min.insync.replicas")
        if acks is Acks.ALL and not rs.enough_replicas(state, min_isr):
            raise _not_enough_replicas(self.name, state, min_isr, appended=False)
        if self.sessions_seen is not None:
            seen = self.sessions_seen(self)
            if seen:
                state = self.state = rs.sessions_fetched(state, self.log.log_end_offset, seen)
        info = self.log.append(batch, state.leader_epoch)
        self.changed()
        self._advance_high_watermark()
        return info

    async def _wait_for_high_watermark(
        self, target: int, epoch: int, timeout_s: float
    ) -> rs.LeaderState:
        return await self._wait_as_leader(
            epoch,
            timeout_s,
            lambda state: state if state.high_watermark >= target else None,
            self.hw_moved,
            moved="leadership moved before the records were replicated; "
            "they may or may not survive, so retry",
            late=lambda: (
                "the records were appended by the leader but not replicated to the "
                "in-sync replicas in time; they may still be committed"
            ),
        )

    async def _wait_as_leader(
        self,
        epoch: int,
        timeout_s: float,
        reached: Callable[[rs.LeaderState], T | None],
        woken_by: Notifier,
        *,
        moved: str,
        late: Callable[[], str],
        poll_s: float | None = None,
    ) -> T:
        """Wait, as leader of `epoch`, until `reached` answers something, re-checked at
        every wake-up of `woken_by` (and every `poll_s`); NOT_LEADER_OR_FOLLOWER (`moved`)
        once the epoch is not ours, REQUEST_TIMED_OUT (`late()`) after `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if self.state is None or self.state.leader_epoch != epoch:
                raise KraftliteError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"{self.name}: {moved}",
                    leader_id=self.leader_id,
                )
            answer = reached(self.state)
            if answer is not None:
                return answer
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise KraftliteError(ErrorCode.REQUEST_TIMED_OUT, f"{self.name}: {late()}")
            await woken_by.wait(remaining if poll_s is None else min(remaining, poll_s))

    def _advance_high_watermark(self) -> None:
        if self.state is None:
            return
        before = self.state.high_watermark
        self.state = rs.advance_high_watermark(self.state, self.log.log_end_offset)
        if self.state.high_watermark != before:
            self.log.set_high_watermark(self.state.high_watermark)
            self.hw_moved.notify()
            self.changed(Tell.LATER)  # with their next answer: no round of its own

    # -- DeleteRecords --------------------------------------------------------------------

    async def delete_records(self, offset: int, timeout_s: float) -> int:
        """Kafka's DeleteRecords, as leader: move the log start to `offset` (-1: the high
        watermark), then wait until every replica that could lead has moved its own there
        (replica_state rule 6). Answers the low watermark then. OFFSET_OUT_OF_RANGE above
        the high watermark; an offset at or below the log start changes nothing, and is
        answered once the replicas are there too. The leader's log start moves at once and
        stays moved even if the wait times out (REQUEST_TIMED_OUT) or leadership moves
        (NOT_LEADER_OR_FOLLOWER): the followers follow it as they fetch."""
        state = self._leader_state()
        log = self.log
        target = log.high_watermark if offset == -1 else offset
        if not 0 <= target <= log.high_watermark:
            raise KraftliteError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{self.name}: offset {offset} is above the high watermark {log.high_watermark}",
                log_start_offset=log.log_start_offset,
                high_watermark=log.high_watermark,
            )
        epoch = state.leader_epoch
        if target > log.log_start_offset:
            await asyncio.to_thread(log.advance_log_start, target)
            self.changed(Tell.NOW)  # followers hear the new log start at once
        if self.state is not None and self.state.leader_epoch == epoch:
            # whether this call moved it or an earlier one (or retention) had: no replica
            # joins the ISR below it from now on (replica_state rule 6)
            self.state = rs.records_deleted(self.state, log.log_start_offset)

        def low_enough(state: rs.LeaderState) -> int | None:
            low = rs.low_watermark(state, log.log_start_offset, self.is_eligible)
            return low if low >= target else None

        return await self._wait_as_leader(
            epoch,
            timeout_s,
            low_enough,
            self.low_watermark_moved,  # a follower's report, an ISR or leadership change
            moved="leadership moved before every replica deleted the records; retry (the "
            "log start stays where it moved)",
            late=lambda: (
                f"the leader's log starts at {log.log_start_offset}, but not every "
                "live replica that could lead has said it deleted the records yet"
            ),
            poll_s=_LOW_WATERMARK_POLL_S,  # liveness changes wake no one
        )

    # -- consumer reads -----------------------------------------------------------------

    def high_watermark(self) -> int:
        self._leader_state()
        return self.log.high_watermark

    def read(self, offset: int, max_bytes: int, *, committed: bool = False) -> bytes:
        """Batches from `offset`, below the high watermark (leader only); below the last
        stable offset when `committed` (read_committed, rule 4)."""
        self._leader_state()
        log = self.log
        if offset > log.log_end_offset or offset < log.log_start_offset:
            raise KraftliteError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{log.log_start_offset}, {log.log_end_offset}]",
                log_start_offset=log.log_start_offset,
                high_watermark=log.high_watermark,
            )
        limit = self.last_stable_offset(known=True) if committed else log.high_watermark
        if offset >= limit:
            # Not committed yet (or a new leader still learning the HW, which can be below
            # the old leader's for a moment): nothing yet, not an error (Kafka does the same).
            return b""
        return log.read(offset, max_bytes, max_offset=limit)

    async def wait_for_records(self, offset: int, timeout_s: float) -> None:
        """Long-poll: until the high watermark passes `offset`, the role changes, or time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        epoch = self.leader_epoch
        while self.log.high_watermark <= offset and self.leader_epoch == epoch:
            remaining = deadline - loop.time()
            if remaining <= 0 or self.role is not Role.LEADER:
                return
            await self.hw_moved.wait(remaining)

    # -- follower fetches, on the leader ------------------------------------------------

    def replica_fetch(  # noqa: PLR0917 - a fetch position's fields
        self,
        follower_id: int,
        leader_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        max_bytes: int,
        log_start: int = rs.UNKNOWN_OFFSET,
    ) -> ReplicaFetchResult:
        state = self._leader_state()
        if leader_epoch < state.leader_epoch:
            raise KraftliteError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"{self.name}: epoch {leader_epoch} is older than {state.leader_epoch}",
            )
        if leader_epoch > state.leader_epoch:
            raise self.not_leader()  # our metadata is behind: the follower retries
        log = self.log
        # A leader with no epoch cache (its log was emptied by retention or reset) cannot
        # judge lineage: the log start and end checks below decide instead.
        if last_fetched_epoch >= 0 and log.latest_epoch >= 0:
            epoch, end = log.end_offset_for(last_fetched_epoch)
            if epoch != last_fetched_epoch or end < fetch_offset:
                if epoch < 0:
                    epoch, end = log.latest_epoch, log.log_end_offset
                return ReplicaFetchResult(
                    log.high_watermark, log.log_start_offset, b"", epoch, min(end, fetch_offset)
                )
        if fetch_offset > log.log_end_offset:
            return ReplicaFetchResult(
                log.high_watermark,
                log.log_start_offset,
                b"",
                log.latest_epoch,
                log.log_end_offset,
            )
        if fetch_offset < log.log_start_offset:
            raise KraftliteError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{self.name}: {fetch_offset} is below the log start {log.log_start_offset}",
                log_start_offset=log.log_start_offset,
                high_watermark=log.high_watermark,
            )
        now = self._clock.monotonic_ms()
        self.state = rs.record_fetch(
            state, follower_id, fetch_offset, log.log_end_offset, now, log_start
        )
        if log_start != state.followers.get(follower_id, rs.FollowerProgress()).log_start_offset:
            self.low_watermark_moved.notify()
        self.changed(Tell.NO)
        self._advance_high_watermark()
        proposal = None
        expansion = rs.expansion_at_fetch(self.state, follower_id, now, self.is_eligible)
        if expansion is not None:  # now, before an append moves the HW past this fetch
            proposal = IsrProposal(state.leader_epoch, state.partition_epoch, expansion, state.isr)
            self.state = rs.propose_isr(self.state, expansion)
        return ReplicaFetchResult(
            log.high_watermark,
            log.log_start_offset,
            log.read(fetch_offset, max_bytes),
            isr_proposal=proposal,
        )

    def changed(self, tell: Tell = Tell.NOW) -> None:
        if self.on_change is not None:
            self.on_change(self, tell)

    def isr_settled(self) -> bool:
        """No ISR change can come due before this replica changes again (replica_state)."""
        state = self.state
        return state is None or (
            not self._lapsed and rs.isr_settled(state, self.log.log_end_offset, self.is_eligible)
        )

    def maybe_change_isr(self, max_lag_ms: int) -> IsrProposal | None:
        """The ISR to propose to the controller now (marked pending), with the epochs it was
        decided against; None if no change is due.
        """
        state = self.state
        if state is None:
            return None
        now = self._clock.monotonic_ms()
        if not self._lease_valid():
            # Followers' fetches are refused while the lease is lapsed: their lag is ours.
            self._lapsed = True
            return None
        if self._lapsed:
            self._lapsed = False
            state = self.state = rs.resume_after_lapse(state, now)
        seen = self.sessions_seen(self) if self.sessions_seen is not None else None
        change = rs.isr_change(
            state, self.log.log_end_offset, now, max_lag_ms, self.is_eligible, last_rounds=seen
        )
        if change is None:
            return None
        self.state = rs.propose_isr(state, change)
        self._advance_high_watermark()  # an expansion may hold the HW; never lowers it
        return IsrProposal(state.leader_epoch, state.partition_epoch, change, state.isr)

    def is_pending(self, proposal: IsrProposal) -> bool:
        """Whether `proposal` is still the change this leader waits on (not superseded by a
        newer metadata image, another proposal or a leadership change).
        """
        state = self.state
        return (
            state is not None
            and state.leader_epoch == proposal.leader_epoch
            and state.partition_epoch == proposal.partition_epoch
            and state.pending_isr == proposal.isr
        )

    def isr_change_committed(self, proposal: IsrProposal, committed: PartitionRegistration) -> None:
        """The controller committed `proposal` (its answer carries the committed state)."""
        if not self.is_pending(proposal) or self.state is None:
            return  # superseded meanwhile: the metadata image already says what holds
        if committed.leader_epoch != self.state.leader_epoch:
            return  # leadership moved: the next image makes us follower
        self.state = rs.with_registration(
            self.state, committed.partition_epoch, committed.replicas, committed.isr
        )
        self._advance_high_watermark()
        self.low_watermark_moved.notify()

    def isr_change_refused(self, proposal: IsrProposal) -> None:
        """The controller definitely did not commit `proposal`: propose again later. Only for
        a definite refusal: while the outcome is unknown the proposal stays pending, so a
        member it may have added keeps counting for the high watermark.
        """
        if self.is_pending(proposal) and self.state is not None:
            self.state = rs.isr_change_failed(self.state, self._clock.monotonic_ms())
            # The maximal ISR shrank back: the HW may move now, with no fetch to move it.
            self._advance_high_watermark()

    # -- the follower's side ------------------------------------------------------------

    def append_from_leader(self, result: ReplicaFetchResult, leader_epoch: int) -> None:
        """Apply one fetch answer as follower (truncate on divergence, append, move HW)."""
        if self.role is not Role.FOLLOWER or self.leader_epoch != leader_epoch:
            return  # the metadata moved on while the fetch was in flight
        log = self.log
        if result.diverging_epoch is not None:
            target = result.diverging_end_offset
            if result.diverging_epoch >= 0:
                _, own_end = log.end_offset_for(result.diverging_epoch)
                if own_end >= 0:
                    target = min(target, own_end)
            if target < log.log_start_offset:
                log.truncate_fully_and_start_at(max(target, result.log_start_offset))
            elif target < log.log_end_offset:
                log.truncate_to(target)
        elif result.data:
            # A compacted log's gaps (storage/log.py rule 7) travel as they are, and may
            # outlive its compaction (cleanup.policy changed back to delete), so any topic's
            # follower takes them: the fetcher applies only data that answers the position
            # the follower is at, and a leader's answer starts above it only across a gap.
            log.append_replicated(result.data, allow_gaps=True)
        log.set_high_watermark(min(result.high_watermark, log.log_end_offset))
        self.changed(Tell.NO)  # a new high watermark to checkpoint

    async def follow_log_start(self, leader_log_start: int, leader_epoch: int) -> None:
        """Drop what lies below the leader's log start (Kafka's maybeIncrementLogStartOffset),
        after `append_from_leader` applied the same answer: the leader can no longer vouch
        for it, so it may be a divergent suffix of an old epoch that the epoch check, which
        only sees the leader's remaining epochs, cannot catch. On a worker thread: a
        DeleteRecords may delete much of the log at once."""
        if self.role is not Role.FOLLOWER or self.leader_epoch != leader_epoch:
            return
        if leader_log_start > self.log.log_start_offset:
            await asyncio.to_thread(self._follow_log_start, leader_log_start)

    def _follow_log_start(self, leader_log_start: int) -> None:
        log = self.log
        if leader_log_start <= log.log_start_offset:
            return
        if log.log_end_offset <= leader_log_start:
            log.truncate_fully_and_start_at(leader_log_start)
        else:
            log.advance_log_start(leader_log_start)

    def reset_to_leader_start(self, log_start_offset: int, leader_epoch: int) -> None:
        """The leader no longer has what we would fetch next (retention): start over there."""
        if self.role is Role.FOLLOWER and self.leader_epoch == leader_epoch:
            self.log.truncate_fully_and_start_at(log_start_offset)


def _not_enough_replicas(
    name: str, state: rs.LeaderState, min_isr: int, *, appended: bool
) -> KraftliteError:
    when = "after the append (the records may survive)" if appended else "nothing was appended"
    return KraftliteError(
        ErrorCode.NOT_ENOUGH_REPLICAS,
        f"{name}: the ISR {list(state.isr)} has fewer than min.insync.replicas={min_isr}; {when}",
        isr=list(state.isr),
        min_insync_replicas=min_isr,
        appended=appended,
    )
