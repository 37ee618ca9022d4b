"""A broker's life with the controllers: register, heartbeat, follow metadata, shut down.

Rules:
1. A process registers once with a fresh incarnation id and gets a broker epoch; it starts
   fenced and the controller unfences it once its metadata has caught up with its own
   registration (it then knows every partition it holds).
2. Heartbeats every `broker.heartbeat.interval.ms`, each sent on its own without waiting for
   the one before (at most MAX_HEARTBEATS_IN_FLIGHT unanswered): a packet lost on a lossy
   link holds up one request until TCP sends it again, not the ones after it, so the
   answers that renew the lease keep coming. An answer saying the epoch is stale or the
   broker unknown means the controller lost us: register again (same incarnation).
3. Metadata is a log followed by offset: long-poll any controller for the batches after
   the version we applied, replay them (metadata/follower.py), and act on what they touched
   (HTTP observers; docs/design/replication.md says why not pysyncobj read-only nodes).
4. Shutdown is controlled: ask to be fenced (leadership moves away first), then stop.
5. Leadership is leased from the controllers (lease.py): every answered heartbeat renews
   the lease once our metadata has reached the version the answer carries; a newer version
   is fetched at once from the controllers, not left to the long-poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import msgspec
import structlog

from kraftlite.broker.controller_client import ControllerClient
from kraftlite.broker.lease import LeadershipLease
from kraftlite.broker.log_store import LogStore
from kraftlite.broker.replica_manager import ReplicaManager, ReplicationSettings
from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.follower import MetadataFollower
from kraftlite.metadata.image import StaleBatchError
from kraftlite.metadata.records import RecordCodecError
from kraftlite.protocol import names
from kraftlite.protocol.admin import AdminRequest, CreateTopicRequest
from kraftlite.protocol.headers import METADATA_VERSION
from kraftlite.protocol.internal import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    MessageError,
    MetadataFetchRequest,
    MetadataFetchResponse,
)

T = TypeVar("T")
A = TypeVar("A")
MAX_HEARTBEATS_IN_FLIGHT = 3
log = structlog.get_logger(__name__)
METADATA_WAIT_MS = 10_000
INLINE_METADATA_BYTES = 256 << 10  # larger metadata answers are replayed in a thread


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What one client request may ask of a broker (Kafka's names and defaults where they
    exist; docs/configuration.md)."""

    socket_request_max_bytes: int = 100 << 20  # socket.request.max.bytes: any body
    json_request_max_bytes: int = 8 << 20  # json.request.max.bytes: parsed record by record
    fetch_max_bytes: int = 55 << 20  # fetch.max.bytes: one fetch answer
    timestamp_after_max_ms: int = 3_600_000  # log.message.timestamp.after.max.ms (Kafka 4)
    timestamp_before_max_ms: int = 2**63 - 1  # log.message.timestamp.before.max.ms


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    broker_id: int
    url: str
    controllers: tuple[str, ...]
    rack: str | None = None
    kafka: str | None = None  # the Kafka listener's advertised "host:port", if it has one
    controllers_discovery: bool = False  # controllers.discovery.enable
    replication: ReplicationSettings | None = None
    limits: RequestLimits = RequestLimits()
    shutdown_timeout_s: float = 5.0


def _message(read: Callable[[Any], T], body: Any) -> T:
    """A controller's answer as its typed message; a malformed one is a failed call."""
    try:
        return read(body)
    except MessageError as exc:
        raise KraftliteError(ErrorCode.NOT_CONTROLLER, f"bad controller answer: {exc}") from None


class Broker:
    def __init__(
        self,
        settings: BrokerSettings,
        storage: LogStore,
        session: aiohttp.ClientSession,
        clock: Clock,
        forward_session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.settings = settings
        self.incarnation_id = uuid.uuid4().hex
        self.broker_epoch = -1
        self.fenced = True
        self.cluster_id = ""
        self.session = session  # replication and the controllers
        # Requests forwarded to partition leaders use their own pool: a burst of long-polls
        # or acks=all produces must not queue replication or heartbeats behind it.
        self.forward_session = forward_session or session
        self.clock = clock
        self.controllers = ControllerClient(settings.controllers, session, clock)
        # Registration and heartbeats pick their controller apart from metadata long-polls
        # and AlterPartition: a long-poll's choice must not send heartbeats to a hung one.
        self._session_controllers = ControllerClient(settings.controllers, session, clock)
        self.lease = LeadershipLease()
        self.replicas = ReplicaManager(
            settings.replication or ReplicationSettings(settings.broker_id),
            storage,
            controllers=self.controllers,
            session=session,
            clock=clock,
            broker_epoch=lambda: self.broker_epoch,
            lease_valid=lambda: self.lease.valid(clock.monotonic_ms()),
        )
        self._heartbeat_interval_s = 2.0
        self._session_timeout_ms = 9000  # as the controller last answered
        self._beats: set[asyncio.Task[None]] = set()  # heartbeats in flight (rule 2)
        self._fenced_as_of = 0  # the sequence of the heartbeat that last set `fenced`
        self._revocations = 0  # registrations lost so far (answers for them are ignored)
        self._sequence = 0  # heartbeats sent by this incarnation
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._catching_up: asyncio.Task[None] | None = None
        self._registered = asyncio.Event()
        self.metadata = MetadataFollower()  # the log as followed; replicas act on it
        self._metadata_lock = asyncio.Lock()

    @property
    def broker_id(self) -> int:
        return self.settings.broker_id

    @property
    def ready(self) -> bool:
        return (
            self.broker_epoch >= 0
            and not self.fenced
            and self.replicas.image.version >= self.broker_epoch
        )

    def starting(self) -> str | None:
        """Why this broker cannot answer clients yet (security/gate.py rule 4): its metadata
        does not reach its own registration, so every topic would look unknown; or None."""
        if self.broker_epoch < 0 or self.replicas.image.version < self.broker_epoch:
            return f"broker {self.broker_id} is starting: its metadata is not current yet"
        return None

    async def wait_for_metadata(self, version: int, timeout_s: float) -> bool:
        """Wait until this broker applied metadata `version`; False at the timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.replicas.image.version < version:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await self.replicas.image_changed.wait(remaining)
        return True

    async def admin_call(
        self, request: AdminRequest[A], *, headers: dict[str, str] | None = None
    ) -> A:
        """A typed admin call to the controller quorum (protocol/admin.py), answered once
        this broker's metadata holds its change too (read your writes on this broker).
        `headers` say for whom the call is made (the controllers authorize that principal;
        none: this broker itself). Error answers raise KraftliteError."""
        try:
            path = request.route()
        except ValueError as exc:  # ".." and the like: no topic has such a name
            raise KraftliteError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
        body = request.body()
        _, answer, answered = await self.controllers.call_with_headers(
            request.method,
            path,
            None if body is None else msgspec.json.encode(body),
            headers=headers,
            raw=True,
        )
        await self.read_your_writes(answered)
        try:
            return request.answer(answer)
        except MessageError as exc:  # (the change was made: a retry would be refused)
            raise KraftliteError(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"bad controller answer: {exc}"
            ) from None

    async def ensure_internal_topic(self, name: str, partitions: int) -> bool:
        """A compacted internal topic of the brokers' own (the group and transaction
        coordinators'), created on first use, replicated min(3, live brokers) with
        min.insync.replicas min(2, factor): any broker may ask, one wins. Whether this call
        created it."""
        if self.replicas.image.topic(name) is not None:
            return False
        factor = max(1, min(3, len(self.replicas.image.live_broker_ids())))
        wanted = CreateTopicRequest(
            name,
            partitions,
            factor,
            {"cleanup.policy": "compact", "min.insync.replicas": min(2, factor)},
            internal=True,
        )
        try:
            await self.admin_call(wanted)  # answered once this broker has it
        except KraftliteError as exc:
            if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            await self.wait_for_metadata(self.replicas.image.version + 1, timeout_s=5.0)
            return False
        return True

    async def read_your_writes(self, answered: Mapping[str, str]) -> None:
        """Wait (5 s at most) until this broker holds the metadata version a controller's
        answer to a change names (METADATA_VERSION), if it names one."""
        version = names.decimal(answered.get(METADATA_VERSION, ""))
        if version is not None:
            await self.wait_for_metadata(version, timeout_s=5.0)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.replicas.start()
        self._tasks = [
            loop.create_task(self._heartbeat_loop(), name="heartbeat"),
            loop.create_task(self._metadata_loop(), name="metadata"),
        ]

    async def stop(self) -> None:
        """Controlled shutdown (Kafka's): stop heartbeating, ask to be fenced (the controller
        moves our leaderships to other ISR members in the same batch), wait until metadata
        shows we lead nothing, then stop. Partitions still led at the deadline go offline
        here first, so no write is acknowledged by a leader on its way out.
        """
        self._stopping = True  # no heartbeat but the shutdown's from now on
        heartbeat, others = [*self._tasks[:1], *self._beats], self._tasks[1:]
        for task in heartbeat:
            task.cancel()  # a late periodic heartbeat would unfence us again
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.broker_epoch >= 0:
            try:
                await asyncio.wait_for(
                    self._heartbeat(want_shutdown=True), self.settings.shutdown_timeout_s
                )
                await self._wait_until_leading_nothing(self.settings.shutdown_timeout_s)
            except (KraftliteError, TimeoutError) as exc:
                log.warning("controlled_shutdown_incomplete", error=str(exc))
        for partition in self.replicas.partitions.values():
            if partition.state is not None:
                partition.go_offline()
        if self._catching_up is not None:
            others.append(self._catching_up)
        for task in others:
            task.cancel()
        for task in others:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.replicas.stop()

    async def _wait_until_leading_nothing(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while any(p.state is not None for p in self.replicas.partitions.values()):
            if loop.time() >= deadline:
                return
            await asyncio.sleep(0.05)

    async def _register(self) -> None:
        sent = self.clock.monotonic_ms()
        wanted = BrokerRegistrationRequest(
            self.broker_id,
            self.incarnation_id,
            self.settings.url,
            self.settings.rack,
            self.settings.kafka,
            honours_lease_timeout=True,
        )
        _, body = await self._session_controllers.call(
            "POST", "/v1/internal/brokers", wanted.encode(), raw=True
        )
        answer = _message(BrokerRegistrationResponse.decode, body)
        self.fenced = True  # a registration starts fenced (rule 1), whatever came before
        self.broker_epoch = answer.broker_epoch
        self.cluster_id = answer.cluster_id
        self._heartbeat_interval_s = answer.heartbeat_interval_ms / 1000
        self._answered(
            sent, answer.metadata_version, answer.session_timeout_ms, answer.lease_timeout_ms
        )
        self._registered.set()
        log.info("broker_registered", broker_epoch=self.broker_epoch)

    async def _heartbeat(self, *, want_shutdown: bool = False) -> None:
        sent = self.clock.monotonic_ms()
        # Each attempt gets a second at least: the controller may wait up to
        # CONFIRMATION_WAIT_MS for a Raft round trip before answering.
        timeout_s = max(self._heartbeat_interval_s, 2.0)
        epoch, revocations = self.broker_epoch, self._revocations
        self._sequence += 1
        sequence = self._sequence
        beat = BrokerHeartbeatRequest(
            epoch, self.replicas.image.version, want_shutdown, honours_lease_timeout=True
        )
        _, body = await self._session_controllers.call(
            "POST",
            f"/v1/internal/brokers/{self.broker_id}/heartbeat",
            beat.encode(),
            timeout_s=timeout_s,
            attempt_timeout_s=timeout_s / 2,  # a hung controller gets half, the next the rest
            raw=True,
        )
        answer = _message(BrokerHeartbeatResponse.decode, body)
        if epoch != self.broker_epoch or revocations != self._revocations:
            return  # about a registration lost meanwhile (rule 2): it must not lease anything
        if sequence > self._fenced_as_of:  # an answer overtaken by a later one says nothing
            self._fenced_as_of = sequence
            was_fenced, self.fenced = self.fenced, answer.fenced
            if was_fenced != self.fenced:
                log.info("broker_fenced" if self.fenced else "broker_unfenced")
                if not self.fenced:  # leaders refused us for ISRs while fenced: ask again
                    self.replicas.restart_fetch_sessions()
        self._answered(
            sent, answer.metadata_version, answer.session_timeout_ms, answer.lease_timeout_ms
        )

    def _answered(
        self,
        sent_ms: int,
        metadata_version: int,
        session_timeout_ms: int,
        lease_timeout_ms: int | None,
    ) -> None:
        """Rule 5: renew the lease; fetch the answer's metadata version now if we lack it.
        A controller that names no lease timeout (older than it) fences by the session."""
        was_valid = self.lease.valid(self.clock.monotonic_ms())
        self._session_timeout_ms = session_timeout_ms
        self.lease.answered(sent_ms, metadata_version, lease_timeout_ms or session_timeout_ms)
        if not was_valid and self.lease.valid(self.clock.monotonic_ms()):
            log.info("leadership_lease_renewed")
        wanted = self.lease.waiting_for_version()
        if wanted is not None and (self._catching_up is None or self._catching_up.done()):
            self._catching_up = asyncio.get_running_loop().create_task(
                self._catch_up(wanted), name="metadata-catch-up"
            )

    async def _catch_up(self, version: int) -> None:
        """Fetch metadata until we hold `version`, asking without a long wait (a controller
        that lags answers at once with what it has, and the next one is tried).
        """
        deadline = asyncio.get_running_loop().time() + self._session_timeout_ms / 1000
        while self.replicas.image.version < version:
            if asyncio.get_running_loop().time() >= deadline:
                return  # the next heartbeat answer tries again
            try:
                moved = await self._follow(wait_ms=200, attempt_timeout_s=1.0)
            except KraftliteError as exc:
                log.warning("metadata_catch_up_failed", error=str(exc))
                await asyncio.sleep(0.1)
                continue
            if self.metadata.image.version < version:
                self.controllers.rotate()
                if not moved:
                    await asyncio.sleep(0.05)

    def _metadata_stuck(self) -> bool:
        """Heartbeats answered for a whole session, yet our metadata never reached their
        version: our lease cannot be renewed, so our partitions serve nothing. Better that
        the controllers fence us and move them: no heartbeats until metadata catches up.
        """
        since = self.lease.waiting_since()
        return (
            since is not None
            and self.replicas.image.version >= self.broker_epoch >= 0
            and self.clock.monotonic_ms() - since > self._session_timeout_ms
        )

    async def _heartbeat_loop(self) -> None:
        lease_was_valid = False
        loop = asyncio.get_running_loop()
        while True:
            try:
                if self.broker_epoch < 0:
                    self._cancel_beats()  # answers about the lost registration
                    await self._register()
                if self._metadata_stuck():
                    log.error(
                        "metadata_stuck_heartbeats_paused", version=self.replicas.image.version
                    )
                else:
                    self._beats = {beat for beat in self._beats if not beat.done()}
                    if len(self._beats) < MAX_HEARTBEATS_IN_FLIGHT:
                        self._beats.add(loop.create_task(self._beat(), name="heartbeat-beat"))
            except KraftliteError as exc:
                log.warning("registration_failed", error=str(exc))
            except Exception:
                log.exception("heartbeat_crashed")
            await asyncio.sleep(self._heartbeat_interval_s)
            now = self.clock.monotonic_ms()
            lease_valid = self.lease.valid(now)
            if lease_was_valid and not lease_valid:
                until = self.lease.valid_until_ms
                log.warning(
                    "leadership_lease_lapsed",
                    lease_timeout_ms=self.lease.timeout_ms,
                    lapsed_ms_ago=None if until is None else now - until,  # noticed late
                )
            lease_was_valid = lease_valid

    async def _beat(self) -> None:
        """One periodic heartbeat (rule 2), on its own."""
        epoch = self.broker_epoch
        try:
            await self._heartbeat()
        except KraftliteError as exc:
            if exc.code in {ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED}:
                if epoch == self.broker_epoch:  # not about a registration already replaced
                    # Another registration holds our id (or none does): we lead nothing.
                    log.warning("broker_registration_lost", error=str(exc))
                    self._revoke()
                return
            log.warning("heartbeat_failed", error=str(exc))
        except Exception:
            log.exception("heartbeat_crashed")

    def _revoke(self) -> None:
        """Our registration is lost: no lease, and no answer to a heartbeat sent for it
        counts any more (one still in flight may come back after this)."""
        self.lease.revoke()
        self._revocations += 1
        self.broker_epoch = -1

    def _cancel_beats(self) -> None:
        for beat in self._beats:
            beat.cancel()
        self._beats = set()

    async def _follow(self, wait_ms: int, attempt_timeout_s: float | None = None) -> bool:
        """Fetch the metadata batches after ours from a controller (waiting up to `wait_ms`
        for some), apply them, and act on them; True if our metadata moved.
        """
        wanted = MetadataFetchRequest(self.metadata.image.version, wait_ms)
        _, body = await self.controllers.call(
            "GET",
            "/v1/internal/metadata",
            params=wanted.to_params(),
            timeout_s=wait_ms / 1000 + 10,
            attempt_timeout_s=attempt_timeout_s or wait_ms / 1000 + 5,
            raw=True,
        )
        async with self._metadata_lock:
            try:
                if len(body) > INLINE_METADATA_BYTES:  # decode and replay off the loop
                    moved = await asyncio.to_thread(self._replay, body)
                else:
                    moved = self._replay(body)
            except (MessageError, RecordCodecError, StaleBatchError) as exc:
                # A gap or a bad answer: nothing of it applied; ask again (another one).
                raise KraftliteError(ErrorCode.NOT_CONTROLLER, f"metadata answer: {exc}") from None
            await self._act_on_metadata()
        return moved

    def _replay(self, body: bytes) -> bool:
        answer: MetadataFetchResponse[dict[str, Any]] = MetadataFetchResponse.decode(body)
        return self.metadata.apply(answer.batches, answer.snapshot)

    async def _act_on_metadata(self) -> None:
        """Take what the followed metadata brings, once it reaches our own registration:
        nothing older is acted on (a controller still catching up could otherwise make us
        lead at old epochs, or delete logs as orphans). The caller holds the metadata lock.
        """
        image = self.metadata.image
        before = self.replicas.image.version
        if image.version <= max(before, self.broker_epoch - 1):
            return
        changes = self.metadata.changes_since(self.replicas.image, self.broker_id)
        self.replicas.apply_image(image, changes, self.metadata.config_topics())
        if self.settings.controllers_discovery:  # voters added since we started
            voters = image.voters or image.controllers  # recorded once membership changed
            current = [url for n, url in image.controllers.items() if n in voters]
            for client in (self.controllers, self._session_controllers):
                client.learn(current)
        self.metadata.acted()
        self.lease.applied(image.version)
        if before < self.broker_epoch <= image.version and not self._stopping:
            try:
                await self._heartbeat()  # caught up with our registration: unfence now
            except KraftliteError as exc:  # the periodic heartbeat will
                log.warning("unfence_heartbeat_failed", error=str(exc))

    async def _metadata_loop(self) -> None:
        await self._registered.wait()
        while True:
            try:
                if not await self._follow(METADATA_WAIT_MS):
                    self.controllers.rotate()  # this one lags (or nothing changed): try another
            except KraftliteError as exc:
                log.warning("metadata_fetch_failed", error=str(exc))
                await asyncio.sleep(0.5)
            except Exception:
                log.exception("metadata_apply_crashed")
                await asyncio.sleep(0.5)
