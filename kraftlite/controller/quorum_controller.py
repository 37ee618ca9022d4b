"""The controller service: turns requests into committed metadata, one decision at a time.

Rules:
1. Single writer: decisions run one at a time under a lock, each against the latest image
   (Kafka: "single-threaded ... avoids the need for complex locking").
2. A decision's records are proposed as one batch with the image version it read. STALE
   means the image moved (e.g. a new leader applied more): decide again.
3. When the outcome is unknown (a timeout or a leader change mid-flight), the *same* batch is
   proposed again with the same request id: DUPLICATE means it had committed, so the first
   decision's response stands; STALE means it had not.
4. Only the active controller (the Raft leader) decides; elsewhere `submit` raises
   NOT_CONTROLLER with the leader's id and URL.
5. Broker sessions, fencing and preferred-leader elections run as a periodic task on the
   active controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import structlog

from kraftlite.clock import Clock
from kraftlite.controller import access, decisions, elastic, liveness, metrics
from kraftlite.controller.decisions import BrokerHeartbeatResponse
from kraftlite.controller.heartbeats import BrokerSessions
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.records import (
    FenceBrokerRecord,
    MetadataRecord,
    RecordBatch,
    RegisterBrokerRecord,
    UserScramCredentialRecord,
)
from kraftlite.raft.pysyncobj_log import (
    CONFIRMATION_REFRESH_MS,
    CONFIRMATION_WAIT_MS,
    LEADER_FALLBACK_TIMEOUT_MS,
    LEADERSHIP_CONFIRMATION_MS,
    Outcome,
    ProposeError,
    RaftMetadataLog,
)

T = TypeVar("T")
log = structlog.get_logger(__name__)
# Records per Raft commit (about 130 bytes each): a decision larger than this that may commit
# in parts (decisions.py rule 6) does, so no Raft entry or apply grows with the cluster.
MAX_BATCH_RECORDS = 5_000


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    node_id: int
    url: str  # this controller's HTTP URL
    voters: Mapping[str, int]  # Raft address -> node id
    cluster_id: str = ""
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    heartbeat_interval_ms: int = 500  # broker.heartbeat.interval.ms (told to brokers)
    leader_imbalance_check_interval_ms: int = 30_000
    replacement_delay_ms: int = 900_000  # broker.replacement.delay.ms; -1: no self-healing
    healing_check_interval_ms: int = 5_000
    liveness_probes: bool = True  # broker.liveness.probes.enable (liveness.py)
    unreachable_timeout_ms: int = 2500  # broker.unreachable.timeout.ms (liveness.py rule 4)
    request_timeout_s: float = 10.0
    tick_interval_s: float = 0.25
    bootstrap_credential: UserScramCredentialRecord | None = None  # auth.bootstrap.user

    @property
    def unreachable_fencing_ms(self) -> int | None:
        """How late heartbeats may be before a broker that answers no probe is fenced
        (liveness.py rule 4); None when that never comes before the session."""
        if not self.liveness_probes or self.unreachable_timeout_ms >= self.session_timeout_ms:
            return None
        return self.unreachable_timeout_ms

    @property
    def lease_timeout_ms(self) -> int:
        """The soonest we may fence a broker after hearing from it, which its leadership
        lease runs by (broker/lease.py rule 1)."""
        return self.unreachable_fencing_ms or self.session_timeout_ms


class QuorumController:
    def __init__(
        self, settings: ControllerSettings, metadata_log: RaftMetadataLog, clock: Clock
    ) -> None:
        self.settings = settings
        self.log = metadata_log
        self._clock = clock
        # Replica placement and topic ids. The OS's generator: a Mersenne Twister's state
        # can be read back from 624 of its outputs (156 topic ids), and then every later id
        # foretold (issue 24). Decisions take any random.Random, so tests pass a seeded one.
        self.rng: random.Random = random.SystemRandom()
        self._write_lock = asyncio.Lock()
        self.sessions = BrokerSessions()
        self._active_term: int | None = None  # the Raft term this node last became active in
        # Batches that fence or re-register brokers, by request id, while they may still
        # apply: (the version they were decided at, those brokers). See _note_in_flight.
        self._in_flight: dict[str, tuple[int, frozenset[int]]] = {}
        # Brokers a decision committing in several batches fences or registers, until done.
        self._batched_brokers: set[int] = set()
        # Offline partitions may have a live ISR member to elect (a batched decision stopped
        # half-way, or we just took over): see _repair_offline.
        self._repair_due = True
        # When the latest no-op that committed in this term was started (see
        # _confirm_leadership), and the one in flight.
        self._leadership_confirmed_ms: int | None = None
        self._confirming: asyncio.Task[None] | None = None
        self._confirming_term: int | None = None
        self._last_rebalance_ms = 0
        self._last_healing_ms = 0
        # A rebalance, drain or replication factor change started moves: once none is left,
        # preferred leaders are elected (the plan balanced them) rather than at the next
        # periodic election.
        self.elect_after_moves = False
        # Brokers being probed (controller/liveness.py), and the probe itself (injectable).
        self._probing: dict[int, asyncio.Task[None]] = {}
        # liveness.py rule 4's conditions: brokers whose leases run by our lease timeout
        # (their heartbeats say so), when a knock was last answered (as the broker's last
        # contact then: no rule 4 until it is heard from again), and from when no lease a
        # predecessor granted can still hold (a takeover's fallback and a session after it).
        self._lease_aware: set[int] = set()
        self._knock_answered: dict[int, int | None] = {}
        self._unreachable_from_ms: int | None = None
        # The registrations we committed, with the Raft term we committed them in
        self._registered_here: dict[int, tuple[int, int]] = {}  # broker -> (term, epoch)
        # Brokers a fence is being decided for: their heartbeats wait for it (_changing).
        self._fencing: set[int] = set()
        # The registration (epoch) of each broker that asked to shut down.
        self._shutdown_asked: dict[int, int] = {}
        self._membership_lock = asyncio.Lock()
        self.knock = liveness.knock
        self._last_moves_check_ms = 0
        self._task: asyncio.Task[None] | None = None
        # The metadata version each broker's last heartbeat reported (metrics: its lag).
        self.broker_metadata_versions: dict[int, int] = {}

    # -- leadership ---------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.log.image

    def voters(self) -> dict[str, int]:
        """Raft address -> node id of the voters. Who votes is Raft's configuration (a change
        whose record did not commit still counts); the ids are as recorded (the voters each
        change records, and a new voter before its change) or as started (`--quorum`); a
        voter known by neither is -1."""
        names = dict(self.settings.voters)
        names.update({address: node_id for node_id, address in self.image.voters.items()})
        return {address: names.get(address, -1) for address in self.log.voter_addresses()}

    def leader_id(self) -> int | None:
        address = self.log.leader_address()
        leader = None if address is None else self.voters().get(address)
        return None if leader is None or leader < 0 else leader

    def leader_url(self) -> str | None:
        leader = self.leader_id()
        return None if leader is None else self.image.controllers.get(leader)

    def is_active(self) -> bool:
        return self.log.is_leader()

    def is_caught_up(self) -> bool:
        """Active, and its image holds everything committed before its term (the takeover
        commit is done): only then may it vouch for brokers' sessions (broker/lease.py).
        """
        return (
            self.is_active()
            and self._active_term is not None
            and self._active_term == self.log.status()["term"]
        )

    def not_controller(self) -> KraftliteError:
        return KraftliteError(
            ErrorCode.NOT_CONTROLLER,
            "this controller is not the active one",
            leader_id=self.leader_id(),
            leader_url=self.leader_url(),
        )

    # -- writes -------------------------------------------------------------------------

    async def submit(
        self,
        decide: Callable[[MetadataImage], decisions.ControllerResult[T]],
        *,
        require_active: bool = True,
        offload: bool = False,
        fencing: Iterable[int] = (),
        guard: Callable[[], bool] | None = None,
    ) -> T:
        """Decide against the latest image, commit the records, return the response.
        `offload`: a decision over every partition runs in a thread, so the event loop
        keeps answering heartbeats meanwhile (it must read nothing the loop changes but
        broker sessions). `fencing`: brokers the decision may fence, whose heartbeats are
        answered only after it from the moment it is taken (_changing). `guard`: checked
        on the loop before each decision (the first, and each retry after a stale
        proposal), with the write lock held and `fencing` marked; False refuses the decision
        as deposed (NOT_CONTROLLER)."""
        if require_active and not self.is_active():
            raise self.not_controller()
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        queued = time.perf_counter()
        async with self._write_lock:
            metrics.EVENT_QUEUE_TIME.observe(time.perf_counter() - queued)
            with self._deciding_fence(fencing):
                return await self._decide_and_commit(
                    decide, deadline, require_active=require_active, offload=offload, guard=guard
                )

    async def _decide_and_commit(
        self,
        decide: Callable[[MetadataImage], decisions.ControllerResult[T]],
        deadline: float,
        *,
        require_active: bool = True,
        offload: bool = False,
        guard: Callable[[], bool] | None = None,
    ) -> T:
        """`submit`'s work; the caller holds the write lock.

        decisions.py rule 6: a non-atomic decision larger than MAX_BATCH_RECORDS commits its
        first MAX_BATCH_RECORDS records, then the next ones, each batch at the version the
        one before made; if anything else landed in between (a write forwarded by another
        controller) the decision is taken again against the new image first. Brokers the
        decision fences or registers answer no heartbeat from the image meanwhile.
        """
        loop = asyncio.get_running_loop()
        batched: set[int] = set()
        rest: tuple[tuple[MetadataRecord, ...], T, int] | None = None
        try:
            while True:
                if require_active and not self.is_active():
                    raise self.not_controller()  # deposed between attempts
                if guard is not None and not guard():  # before each decision, retries too
                    raise self.not_controller()
                image = self.log.image
                if rest is not None and rest[2] == image.version:
                    # nothing but our last batch landed since: the rest of the decision
                    # still holds (its records are per partition), no need to decide again
                    result = decisions.ControllerResult(rest[0], rest[1], atomic=False)
                else:
                    # a refusal raises KraftliteError: nothing proposed
                    result = await asyncio.to_thread(decide, image) if offload else decide(image)
                rest = None
                if not result.records:
                    return result.response
                records = result.records
                partial = not result.atomic and len(records) > MAX_BATCH_RECORDS
                if partial:
                    if not batched:
                        batched = _brokers_changed(records)
                        self._batched_brokers |= batched
                    records = records[:MAX_BATCH_RECORDS]
                    self._repair_due = True  # if we stop half-way: see _repair_offline
                batch = RecordBatch(image.version, records, uuid.uuid4().hex)
                self._note_in_flight(batch)
                proposed = time.perf_counter()
                outcome = await self._propose_until_known(batch, deadline)
                metrics.COMMIT_LATENCY.observe(time.perf_counter() - proposed)
                if outcome is not Outcome.STALE and not partial:
                    return result.response
                if partial and outcome is not Outcome.STALE:
                    # progress: the rest gets a full request timeout of its own
                    deadline = max(deadline, loop.time() + self.settings.request_timeout_s)
                    if outcome is Outcome.COMMITTED:
                        rest = (result.records[len(records) :], result.response, image.version + 1)
                elif loop.time() >= deadline:
                    raise KraftliteError(ErrorCode.REQUEST_TIMED_OUT, "metadata kept changing")
        finally:
            self._batched_brokers -= batched

    async def _propose_until_known(self, batch: RecordBatch, deadline: float) -> Outcome:
        loop = asyncio.get_running_loop()
        maybe_committed = False  # once unknown, the outcome stays unknown until we learn it
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise KraftliteError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    "the controller quorum did not commit the change in time "
                    "(is a majority of controllers up?)",
                )
            try:
                result = await self.log.propose(batch, timeout_s=min(remaining, 2.0))
            except ProposeError as exc:
                maybe_committed = maybe_committed or exc.maybe_committed
                if not maybe_committed and not self.log.is_leader():
                    raise self.not_controller() from exc
                await asyncio.sleep(0.05)
                continue  # same batch, same request id: DUPLICATE if it had committed
            return result.outcome

    # -- periodic work ------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")

    async def stop(self) -> None:
        for probe in list(self._probing.values()):
            probe.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        registered = False
        while True:
            try:
                if not registered and self.log.status()["leader"] is not None:
                    await self.submit(self._register_self, require_active=False)
                    registered = True
                await self._tick()
            except KraftliteError as exc:
                log.warning("controller_tick_failed", error=str(exc))
            except Exception:  # a bug or a lost quorum must not end the periodic work
                log.exception("controller_tick_crashed")
            await asyncio.sleep(self.settings.tick_interval_s)

    def _register_self(self, image: MetadataImage) -> decisions.ControllerResult[None]:
        return decisions.register_controller(image, self.settings.node_id, self.settings.url)

    async def _tick(self) -> None:
        if not self.is_active():
            self._active_term = None
            return
        term = self.log.status()["term"]
        if term != self._active_term:  # newly active, or active again in a later term
            deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
            async with self._write_lock:  # image now current; older decisions can never apply
                await self._commit_noop(deadline)
            now = self._clock.monotonic_ms()  # after the commit, which may take a while
            # heartbeats.py rule 2, and broker/lease.py rule 3: a deposed leader may have
            # answered heartbeats for up to the fallback timeout after we took over.
            self.sessions.reset(self.image.brokers, now + LEADER_FALLBACK_TIMEOUT_MS)
            # liveness.py rule 4: a predecessor's answers may have leased up to a session
            self._unreachable_from_ms = (
                now + LEADER_FALLBACK_TIMEOUT_MS + self.settings.session_timeout_ms
            )
            self._knock_answered.clear()
            self._shutdown_asked.clear()
            self._last_rebalance_ms = now
            self._leadership_confirmed_ms = None
            self._repair_due = True
            self.broker_metadata_versions.clear()  # what a former term heard is stale
            self._active_term = term
            log.info("became_active_controller", version=self.image.version, term=term)
        bootstrap = self.settings.bootstrap_credential
        if bootstrap is not None and bootstrap.name not in self.image.users:
            created = await self.submit(lambda image: access.bootstrap_user(image, bootstrap))
            if created:
                log.info("bootstrap_user_created", user=bootstrap.name)
        now = self._clock.monotonic_ms()
        confirmed = self._leadership_confirmed_ms
        if confirmed is None or now - confirmed >= CONFIRMATION_REFRESH_MS:
            self._start_confirmation()  # in the background: heartbeats rarely wait for one
        late = self.sessions.silent(
            self.image.unfenced_broker_ids(),
            now,
            int(self.settings.heartbeat_interval_ms * liveness.LATE_HEARTBEATS),
        )
        for broker_id in late:  # liveness.py rule 2
            self.suspect(broker_id, self.image.brokers[broker_id].broker_epoch)
        expired = self._expired(self.image)
        if expired:
            fenced = await self.submit(
                lambda image: self._fence_expired(image, among=expired),
                offload=True,
                fencing=expired,
                guard=lambda: self._in_term(term),
            )
            if fenced:
                log.info("brokers_fenced", brokers=fenced, reason="session expired")
        if now - self._last_rebalance_ms >= self.settings.leader_imbalance_check_interval_ms:
            self._last_rebalance_ms = now
            self._repair_due = True
            completed = await self.submit(decisions.complete_reassignments, offload=True)
            if completed:
                log.info("stalled_reassignments_completed", partitions=completed)
            moved = await self.submit(decisions.elect_preferred_leaders, offload=True)
            if moved:
                log.info("preferred_leaders_elected", partitions=moved)
        if self._repair_due:
            await self._repair_offline()
        if self.elect_after_moves and now - self._last_moves_check_ms >= 1000:
            self._last_moves_check_ms = now
            if not await asyncio.to_thread(_moving, self.image):
                self.elect_after_moves = False
                moved = await self.submit(decisions.elect_preferred_leaders, offload=True)
                log.info("preferred_leaders_elected", partitions=moved, after="moves")
        if now - self._last_healing_ms >= self.settings.healing_check_interval_ms:
            self._last_healing_ms = now
            await self._heal()

    async def _heal(self) -> None:
        """Self-healing (controller/elastic.py rule 5): replicas of brokers fenced for longer
        than the replacement delay move to live brokers. Silence counts from the last
        heartbeat this controller saw (or from its takeover: never early)."""
        delay = self.settings.replacement_delay_ms
        if delay < 0:
            return
        fenced = [b for b, r in self.image.brokers.items() if r.fenced]
        dead = self.sessions.silent(
            fenced, self._clock.monotonic_ms(), self.settings.session_timeout_ms + delay
        )
        if not dead:
            return
        moves = await self.submit(
            lambda image: elastic.replace_dead_brokers(image, dead), offload=True
        )
        if moves:
            log.info("dead_brokers_replaced", brokers=dead, moves=len(moves))

    async def _repair_offline(self) -> None:
        """Elect leaders for offline partitions that have a live ISR member (decisions.py
        rule 6: a batched fence that stopped half-way can leave such partitions behind, with
        the broker it was fencing still live). After a takeover, and periodically."""
        self._repair_due = False
        elected = await self.submit(decisions.elect_offline_leaders, offload=True)
        if elected:
            log.info("offline_partitions_elected", partitions=elected)

    def _expired(self, image: MetadataImage) -> list[int]:
        now = self._clock.monotonic_ms()
        return self.sessions.expired(
            image.unfenced_broker_ids(), now, self.settings.session_timeout_ms
        )

    def _fence_expired(
        self, image: MetadataImage, among: Iterable[int]
    ) -> decisions.ControllerResult[list[int]]:
        """Decided under the write lock, on contact as of now: a heartbeat that arrived
        while the fence waited for the lock saves the broker. Only brokers `among` those
        marked as being fenced (submit's `fencing`): one expiring meanwhile waits a tick.
        """
        return decisions.fence_expired_brokers(image, set(self._expired(image)) & set(among))

    def _in_term(self, term: int | None) -> bool:
        """Still the caught-up active controller of `term` (nothing deposed us meanwhile)."""
        return self.is_caught_up() and self._active_term == term

    def _note_in_flight(self, batch: RecordBatch) -> None:
        """Remember a batch that fences or re-registers brokers until it can no longer
        apply: a batch applies only at the version it was decided at, so once the image has
        moved past that version it either did or never will. Until then those brokers'
        heartbeats are not answered from the image (broker_heartbeat), which the batch may
        be about to change under them.
        """
        brokers = frozenset(
            r.broker_id
            for r in batch.records
            if isinstance(r, FenceBrokerRecord | RegisterBrokerRecord)
        )
        if brokers and batch.request_id is not None:
            self._in_flight[batch.request_id] = (batch.expected_version, brokers)

    def _changing(self, broker_id: int) -> bool:
        """Whether a batch that may still apply fences or re-registers `broker_id` (or a
        decision committing in several batches, or a fence, is under way for it)."""
        if broker_id in self._batched_brokers or broker_id in self._fencing:
            return True
        version = self.image.version
        self._in_flight = {k: v for k, v in self._in_flight.items() if v[0] >= version}
        return any(broker_id in brokers for _, brokers in self._in_flight.values())

    @contextlib.contextmanager
    def _deciding_fence(self, broker_ids: Iterable[int]) -> Iterator[None]:
        """While a fence of `broker_ids` is decided (in a thread) and committed, their
        heartbeats are answered only after it (_changing): one arriving meanwhile would
        otherwise be answered unfenced from the image the fence is about to change."""
        marked = set(broker_ids) - self._fencing
        self._fencing |= marked
        try:
            yield
        finally:
            self._fencing -= marked

    async def _commit_noop(self, deadline: float) -> None:
        """Commit an empty batch decided now (it moves the version on, as KRaft's
        LeaderChangeMessage starts each epoch): afterwards the image holds everything
        committed before, and no batch decided earlier, by us or a deposed predecessor
        whose proposal is still in flight or forwarded late, can apply. The caller holds
        the write lock. Only as the active controller (pysyncobj would forward it).
        """
        loop = asyncio.get_running_loop()
        while True:
            if not self.is_active():
                raise self.not_controller()
            batch = RecordBatch(self.log.image.version, (), uuid.uuid4().hex)
            if await self._propose_until_known(batch, deadline) is not Outcome.STALE:
                return
            if loop.time() >= deadline:
                raise KraftliteError(ErrorCode.REQUEST_TIMED_OUT, "metadata kept changing")

    def _start_confirmation(self) -> asyncio.Task[None]:
        """The leadership confirmation of this term in flight, started if there is none."""
        task = self._confirming
        if task is None or task.done() or self._confirming_term != self._active_term:
            task = asyncio.get_running_loop().create_task(
                self._barrier_started_at(self._clock.monotonic_ms(), self._active_term)
            )
            task.add_done_callback(_ignore_outcome)  # waiters see it; nobody else must
            self._confirming, self._confirming_term = task, self._active_term
        return task

    async def _confirm_leadership(self) -> None:
        """broker/lease.py rule 3, without trusting pysyncobj's own view: a no-op committed
        through Raft that we started at time s proves no later leader had taken over by s.
        A new leader fences no one until a session plus the fallback timeout after taking
        over, so answers given up to LEADERSHIP_CONFIRMATION_MS after such a start are safe
        even if this node was deposed meanwhile and its tick thread has not noticed. The
        periodic task keeps one recent; a heartbeat waits at most CONFIRMATION_WAIT_MS.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONFIRMATION_WAIT_MS / 1000
        while True:
            confirmed = self._leadership_confirmed_ms
            now = self._clock.monotonic_ms()
            if confirmed is not None and now - confirmed < LEADERSHIP_CONFIRMATION_MS:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise KraftliteError(
                    ErrorCode.REQUEST_TIMED_OUT, "the controller quorum did not confirm in time"
                )
            try:
                await asyncio.wait_for(asyncio.shield(self._start_confirmation()), remaining)
            except TimeoutError:
                continue  # the deadline check above answers
            except ProposeError:
                await asyncio.sleep(min(0.05, remaining))  # a fresh one next round

    async def _barrier_started_at(self, started_ms: int, term: int | None) -> None:
        await self.log.barrier(min(self.settings.request_timeout_s, 2.0))
        if term is not None and term == self._active_term:
            self._leadership_confirmed_ms = max(self._leadership_confirmed_ms or 0, started_ms)

    # -- quorum membership (one voter at a time, as KIP-853) ------------------------------

    def _live_voters(self, addresses: set[str]) -> int:
        """Of `addresses`, how many this active controller is connected to (itself too)."""
        status = self.log.status()
        connected = status["connected"]
        return sum(1 for a in addresses if a == status["self"] or connected.get(a))

    async def add_voter(
        self,
        node_id: int,
        raft: str,
        url: str,
        verify: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Add a voter: the Raft configuration first (pysyncobj's single-server change),
        then the metadata that names it. Refused while the voters that are live now would
        not be a majority of the larger quorum (the new one may take a while to catch up).
        `verify` (the HTTP edge's check that the new voter runs as said) goes last.
        """
        async with self._membership_lock:
            self._membership_allowed()
            voters = self.voters()
            if node_id in voters.values():
                raise KraftliteError(ErrorCode.DUPLICATE_VOTER, f"{node_id} is a voter already")
            if raft in voters:
                raise KraftliteError(
                    ErrorCode.DUPLICATE_VOTER, f"{raft} is voter {voters[raft]}'s address"
                )
            size = len(voters) + 1
            live = self._live_voters(set(voters))
            if live < size // 2 + 1:
                raise KraftliteError(
                    ErrorCode.QUORUM_AT_RISK,
                    f"{live} of {len(voters)} voters are live: {size} voters need "
                    f"{size // 2 + 1}; replace the dead ones first",
                )
            if verify is not None:
                await verify()
            # its name first (a change whose record never commits still has a name), then
            # the Raft change, then the voters as they are
            members = {**voters, raft: node_id}
            await self.submit(lambda image: decisions.record_voters(image, members, node_id, url))
            if raft not in self.log.voter_addresses():
                await self._raft_change(self.log.add_voter, raft)
            log.info("voter_added", node_id=node_id, raft=raft)

    async def remove_voter(self, node_id: int) -> None:
        """Remove a voter (the active controller hands leadership over first: NOT_CONTROLLER,
        retriable). Refused if the voters left would not have a live majority."""
        async with self._membership_lock:
            self._membership_allowed()
            voters = self.voters()
            address = next((a for a, n in voters.items() if n == node_id), None)
            if address is None:
                raise KraftliteError(ErrorCode.VOTER_NOT_FOUND, f"{node_id} is not a voter")
            remaining = {a: n for a, n in voters.items() if a != address}
            live = self._live_voters(set(remaining))
            if not remaining or live < len(remaining) // 2 + 1:
                raise KraftliteError(
                    ErrorCode.QUORUM_AT_RISK,
                    f"without voter {node_id}, {live} of {len(remaining)} voters are live",
                )
            if address == self.log.status()["self"]:
                self.log.transfer_leadership()
                raise KraftliteError(
                    ErrorCode.NOT_CONTROLLER,
                    f"voter {node_id} is the active controller: it hands over; ask again",
                    leader_id=None,
                )
            if address in self.log.voter_addresses():
                await self._raft_change(self.log.remove_voter, address)
            await self.submit(lambda image: decisions.record_voters(image, remaining))
            log.info("voter_removed", node_id=node_id, raft=address)

    def _membership_allowed(self) -> None:
        if not self.log.membership_changes:
            raise KraftliteError(
                ErrorCode.POLICY_VIOLATION,
                "membership changes are off here (quorum.membership.changes.enable)",
            )
        if not self.is_active():
            raise self.not_controller()

    async def _raft_change(
        self, change: Callable[[str, float], Awaitable[None]], raft: str
    ) -> None:
        try:
            await change(raft, self.settings.request_timeout_s)
        except ProposeError as exc:
            raise KraftliteError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"the quorum did not commit the membership change ({exc}); it may still: "
                "GET /v1/quorum says",
            ) from None

    # -- fast failure detection (liveness.py) --------------------------------------------

    def suspect(self, broker_id: int, broker_epoch: int) -> None:
        """Probe the broker's address, and fence that registration if it proves dead or
        unreachable (rules 1 and 4)."""
        registration = self.image.brokers.get(broker_id)
        if (
            not self.settings.liveness_probes
            or not self.is_caught_up()  # a takeover's sessions are not yet ours
            or registration is None
            or registration.fenced
            or registration.broker_epoch != broker_epoch
            or broker_id in self._probing
        ):
            return
        task = asyncio.get_running_loop().create_task(
            self._probe(broker_id, broker_epoch, registration.url), name=f"probe-{broker_id}"
        )
        self._probing[broker_id] = task
        task.add_done_callback(lambda _: self._probing.pop(broker_id, None))

    def _still_suspect(self, broker_id: int, broker_epoch: int, term: int | None) -> bool:
        """The registration is unfenced and current, and we are still the caught-up active
        controller of the term the probe started in (a takeover's sessions are not ours)."""
        registration = self.image.brokers.get(broker_id)
        return (
            registration is not None
            and not registration.fenced
            and registration.broker_epoch == broker_epoch
            and self._in_term(term)
        )

    def _unreachable_ms(self, broker_id: int) -> int | None:
        """How late its heartbeats must be for rule 4 to fence the broker now, or None
        while rule 4 may not: off, a predecessor's leases may still hold (unless we took its
        current registration ourselves), the broker runs a session's lease, or a knock was
        answered since it was last heard from."""
        unreachable_ms = self.settings.unreachable_fencing_ms
        from_ms = self._unreachable_from_ms
        if (
            unreachable_ms is None
            or from_ms is None
            or (self._clock.monotonic_ms() < from_ms and not self._ours(broker_id))
            or broker_id not in self._lease_aware
            or (
                broker_id in self._knock_answered
                and self._knock_answered[broker_id] == self.sessions.last_contact(broker_id)
            )
        ):
            return None
        return unreachable_ms

    def _ours(self, broker_id: int) -> bool:
        """Whether the broker's current registration was committed by us in this term: no
        predecessor can have answered a heartbeat for it."""
        registration = self.image.brokers.get(broker_id)
        return (
            registration is not None
            and self._active_term is not None
            and self._registered_here.get(broker_id)
            == (self._active_term, registration.broker_epoch)
        )

    async def _probe(self, broker_id: int, broker_epoch: int, url: str) -> None:
        """liveness.py rules 1 and 4: once the broker's heartbeats are late, knock on its
        address every KNOCK_INTERVAL_S (each attempt with its own timeout) until one is
        answered (alive: the session decides), a heartbeat arrives, or the knocks prove it
        dead or unreachable; then fence it, if still no heartbeat came meanwhile."""
        late_ms = int(self.settings.heartbeat_interval_ms * liveness.LATE_HEARTBEATS)
        term = self._active_term
        probe = liveness.Probe()
        knocks: set[asyncio.Task[liveness.Knock]] = set()
        try:
            silent_ms = self.sessions.silent_for(broker_id, self._clock.monotonic_ms())
            if silent_ms < late_ms:  # wait once for it to be late; a heartbeat ends it
                await asyncio.sleep((late_ms - silent_ms) / 1000)
            loop = asyncio.get_running_loop()
            next_knock = loop.time()
            while self._still_suspect(broker_id, broker_epoch, term):
                if self.sessions.silent_for(broker_id, self._clock.monotonic_ms()) < late_ms:
                    return  # heard from
                if loop.time() >= next_knock:
                    knocks.add(loop.create_task(self.knock(url)))
                    next_knock = loop.time() + liveness.KNOCK_INTERVAL_S
                wait_s = max(next_knock - loop.time(), 0)
                if not knocks:
                    await asyncio.sleep(wait_s)
                    continue
                done, knocks = await asyncio.wait(
                    knocks, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED
                )
                for knocked in done:
                    probe.add(knocked.result())
                if probe.answered:  # alive: rule 4 waits until it is heard from again
                    self._knock_answered[broker_id] = self.sessions.last_contact(broker_id)
                    return
                silent_ms = self.sessions.silent_for(broker_id, self._clock.monotonic_ms())
                reason = probe.verdict(late_ms, self._unreachable_ms(broker_id), silent_ms)
                if reason is not None:
                    await self._fence_suspect(
                        broker_id, broker_epoch, term, probe, late_ms=late_ms, reason=reason
                    )
                    return
        except KraftliteError as exc:  # deposed, or the quorum is slow: the session decides
            log.info("dead_broker_fence_failed", broker=broker_id, error=str(exc))
        except Exception:
            log.exception("dead_broker_probe_crashed", broker=broker_id)
        finally:
            for knocked in knocks:
                knocked.cancel()

    async def _fence_suspect(
        self,
        broker_id: int,
        broker_epoch: int,
        term: int | None,
        probe: liveness.Probe,
        *,
        late_ms: int,
        reason: str,
    ) -> None:
        unreachable_ms: int | None = None

        def guard() -> bool:
            # on the loop, with the write lock held and this broker's heartbeats held back
            nonlocal unreachable_ms
            unreachable_ms = self._unreachable_ms(broker_id)
            return self._still_suspect(broker_id, broker_epoch, term)

        def decide(image: MetadataImage) -> decisions.ControllerResult[list[int]]:
            # a heartbeat that arrived before the lock was taken saves the broker
            silent_ms = self.sessions.silent_for(broker_id, self._clock.monotonic_ms())
            if probe.verdict(late_ms, unreachable_ms, silent_ms) is None:
                return decisions.ControllerResult((), [])
            return liveness.fence_dead_broker(image, broker_id, broker_epoch)

        fenced = await self.submit(decide, offload=True, fencing=[broker_id], guard=guard)
        if fenced:
            log.info("brokers_fenced", brokers=fenced, reason=reason)

    # -- broker-facing ------------------------------------------------------------------

    async def register_broker(
        self,
        broker_id: int,
        incarnation_id: str,
        url: str,
        rack: str | None,
        kafka: str | None = None,
        *,
        honours_lease_timeout: bool = False,
    ) -> int:
        def fence_previous(image: MetadataImage) -> decisions.ControllerResult[list[int]]:
            """A new incarnation: fence the old one first, in bounded batches (its
            partitions may be many), so the registration itself stays one small batch.
            """
            existing = image.brokers.get(broker_id)
            if existing is None or existing.incarnation_id == incarnation_id:
                return decisions.ControllerResult((), [])
            return decisions.fence_expired_brokers(image, [broker_id])

        await self.submit(fence_previous)
        existing = self.image.brokers.get(broker_id)
        retried = existing is not None and existing.incarnation_id == incarnation_id
        term = self.log.status()["term"]  # Raft's: the takeover may not be done yet
        epoch = await self.submit(
            lambda image: decisions.register_broker(
                image, broker_id, incarnation_id, url, rack, kafka=kafka
            )
        )
        self.sessions.contact(broker_id, self._clock.monotonic_ms())
        if honours_lease_timeout:
            self._lease_aware.add(broker_id)
        else:
            self._lease_aware.discard(broker_id)
        # A new epoch we committed, as leader of one Raft term from before the decision to
        # after it (a retry keeps an epoch maybe not ours; a leadership change meanwhile may
        # have let another controller commit it). No predecessor knows that epoch.
        if not retried and self.is_active() and self.log.status()["term"] == term:
            self._registered_here[broker_id] = (term, epoch)
        return epoch

    async def broker_heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        metadata_version: int,
        want_shutdown: bool,
        honours_lease_timeout: bool = False,
    ) -> tuple[decisions.BrokerHeartbeatResponse, int]:
        """The answer, and the metadata version it was given at (the broker's lease counts
        the answer once its own metadata has reached that version).
        """
        if not self.is_caught_up():
            raise self.not_controller()
        # rule 1 of heartbeats.py: contact counts on arrival, before the queue, but only
        # from the registration it names (a zombie incarnation keeps no session alive)
        registration = self.image.brokers.get(broker_id)
        if registration is not None and registration.broker_epoch == broker_epoch:
            self.sessions.contact(broker_id, self._clock.monotonic_ms())
            self.broker_metadata_versions[broker_id] = metadata_version
            if honours_lease_timeout:
                self._lease_aware.add(broker_id)
            else:
                self._lease_aware.discard(broker_id)
        # A registration that asked to shut down is never unfenced again, by heartbeats it
        # sent before (they go out several at a time: broker.py rule 2) or after; a restart
        # registers a new epoch.
        if want_shutdown and registration is not None and registration.broker_epoch == broker_epoch:
            self._shutdown_asked[broker_id] = broker_epoch
        await self._confirm_leadership()
        if not self.is_caught_up():
            raise self.not_controller()  # deposed while confirming

        def decide(image: MetadataImage) -> decisions.ControllerResult[BrokerHeartbeatResponse]:
            return decisions.broker_heartbeat(
                image,
                broker_id,
                broker_epoch,
                metadata_version,
                want_shutdown,
                may_unfence=self._shutdown_asked.get(broker_id) != broker_epoch,
            )

        # Most heartbeats change nothing: answer those at once rather than behind a write
        # waiting on Raft, which would make healthy brokers' leases lapse.
        if not self._changing(broker_id):
            quick = decide(self.image)
            if not quick.records:
                return quick.response, self.image.version
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        queued = time.perf_counter()
        async with self._write_lock:
            metrics.EVENT_QUEUE_TIME.observe(time.perf_counter() - queued)
            if self._changing(broker_id):
                # A fence or registration of this broker may still apply: settle it first
                # (a commit moves the version past it), then decide on what it left.
                await self._commit_noop(deadline)
            response = await self._decide_and_commit(decide, deadline, offload=want_shutdown)
        await self._confirm_leadership()  # the queue may have taken a while
        if not self.is_caught_up():
            raise self.not_controller()
        return response, self.image.version


def _moving(image: MetadataImage) -> bool:
    return any(p.reassigning for _, _, p in image.partitions())


def _brokers_changed(records: tuple[MetadataRecord, ...]) -> set[int]:
    return {r.broker_id for r in records if isinstance(r, FenceBrokerRecord | RegisterBrokerRecord)}


def _ignore_outcome(task: asyncio.Task[None]) -> None:
    """A confirmation that failed to commit is retried, not reported; anything else is a bug."""
    if task.cancelled():
        return
    error = task.exception()
    if error is not None and not isinstance(error, ProposeError):
        log.error("leadership_confirmation_crashed", error=repr(error))
