"""The replicas this broker holds: created, led, followed and deleted as metadata says.

Rules:
1. Metadata is the only trigger: every new image becomes LocalChanges (pure) and each
   changed partition takes its registration (leader, follower, offline).
2. A follower fetches from its leader through the one FollowerFetcher for that leader.
3. ISR changes go to the controller in batches (AlterPartition with many partitions, sent
   after a few milliseconds' linger); the leader acts on the committed answer only, and a
   change whose outcome is unknown is sent again as it was.
4. Background work (HW checkpoints, retention, cleaning) never blocks the event loop: LMDB
   calls that may take long run in a thread; a partition's log serializes its own
   mutations. Retention applies to topics whose cleanup.policy has `delete`.
5. Replication throttle (`replication.throttled.rate`, Kafka's leader throttle): what this
   broker as leader sends replicas that a reassignment adds and that are not in sync yet
   comes from one token bucket at that rate; a partition whose turn finds it empty is
   answered next round. In-sync followers are never throttled.
6. The log cleaner (Kafka's, `log.cleaner.enable`): every `log.cleaner.backoff.ms` each
   compacted partition this broker holds, led or followed (each replica cleans its own
   log, as Kafka's do), gets a pass if one is due (broker/cleaner.py), one partition at
   a time on the cleaner's own thread, all passes together held to
   `log.cleaner.io.max.bytes.per.second`. The thread reads and writes; a pass decodes and
   decides in the cleaner's process (broker/cleaner_process.py), off the broker's GIL.
   Stopping the broker ends a pass between two of its transactions, waits for it, then
   ends the process.
7. Each compacted partition's key index (storage/log.py rule 8) follows its high
   watermark on every replica, led or followed, so a new leader's has little to catch up
   on (service.py rule 8 catches up the rest before it answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import aiohttp
import structlog

from kraftlite.broker import cleaner, metrics
from kraftlite.broker.cleaner_process import CleanerProcess
from kraftlite.broker.controller_client import ControllerClient
from kraftlite.broker.fetch_sessions import FetchSession, FetchSessions, SessionPartition
from kraftlite.broker.follower_fetcher import FollowerFetcher, PartitionKey
from kraftlite.broker.log_store import LogStore, ReplicaLog
from kraftlite.broker.notifier import Notifier
from kraftlite.broker.partition import IsrProposal, Partition, Role, Tell
from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from kraftlite.metadata.local_changes import LocalChanges, local_changes
from kraftlite.metadata.topics import has_retention
from kraftlite.protocol.internal import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerUnreachableReport,
    IsrChange,
    MessageError,
    PartitionFetchAnswer,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from kraftlite.security.quotas import QuotaTracker
from kraftlite.storage import compaction
from kraftlite.storage.compaction import CleanPolicy

log = structlog.get_logger(__name__)
ALTER_PARTITION_LINGER_S = 0.005  # ISR changes collected this long go in one request
ALTER_PARTITION_MAX_ITEMS = 2_000  # partitions per request (the controller takes 1 MiB)
RETENTION_SLICE = 1_000  # partitions per thread hop of a retention round
REPORT_INTERVAL_MS = 1_000  # a refused leader is reported at most this often
THROTTLE_RETRY_S = 0.05  # a long-poll with throttled partitions only looks again this often
KEY_INDEX_INTERVAL_MS = 500  # how often the key indexes follow their high watermarks (rule 7)
# batches indexed per transaction: ~4,500 puts of the smallest records, a few ms of LMDB's
# one writer (appends on the event loop wait for it)
KEY_INDEX_CHUNK_BYTES = 128 << 10
KEY_INDEX_CHUNKS_PER_ROUND = 8  # per partition, so one far behind does not hold up the rest


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    broker_id: int
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    retention_check_interval_ms: int = 300_000
    hw_checkpoint_interval_ms: int = 5_000
    throttled_rate: int | None = None  # replication.throttled.rate (static), bytes/s
    cleaner_enable: bool = True  # log.cleaner.enable (rule 6)
    cleaner_backoff_ms: int = 15_000  # log.cleaner.backoff.ms
    cleaner_io_max_bytes_per_second: int | None = None  # unset: unthrottled, as Kafka's
    cleaner_process: bool = True  # passes decide in a process of their own (rule 6)


def log_name(topic_id: str, partition: int) -> str:
    return f"{topic_id}-{partition}"


class ReplicaManager:
    def __init__(
        self,
        settings: ReplicationSettings,
        storage: LogStore,
        *,
        controllers: ControllerClient,
        session: aiohttp.ClientSession,
        clock: Clock,
        broker_epoch: Callable[[], int],
        lease_valid: Callable[[], bool] = lambda: True,
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.image = MetadataImage.EMPTY
        self.partitions: dict[PartitionKey, Partition] = {}
        self._controllers = controllers
        self._session = session
        self._clock = clock
        self._broker_epoch = broker_epoch
        self._lease_valid = lease_valid  # the broker's leadership lease (lease.py)
        self._fetchers: dict[int, FollowerFetcher] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._isr_queue: dict[PartitionKey, tuple[Partition, IsrProposal]] = {}
        self._active: set[PartitionKey] = set()  # partitions the ISR check must look at
        self._hw_dirty: set[PartitionKey] = set()  # high watermarks to checkpoint
        self.fetch_sessions = FetchSessions()
        self._isr_wake = asyncio.Event()
        self._first_image = True
        self._newest_image = MetadataImage.EMPTY
        self.image_changed = Notifier()
        # Leader-side throttle of replicas catching up in a reassignment (rule 5).
        self._throttle = QuotaTracker()
        self._reported: dict[int, int] = {}  # leader id -> when its refusal was reported
        self._reports: set[asyncio.Task[None]] = set()
        self._compacted: dict[PartitionKey, Partition] = {}  # what rules 6 and 7 visit
        # the log cleaner's thread (rule 6), and its signal to end a pass early
        self._cleaner_pool = ThreadPoolExecutor(1, thread_name_prefix="log-cleaner")
        self._cleaner_stopping = threading.Event()
        # wall clock at which the cleaner began its last complete round, or started (as
        # Kafka's time-since-last-run-ms counts); None: no cleaner runs
        self.cleaner_round_ms: int | None = None
        rate = settings.cleaner_io_max_bytes_per_second
        self._cleaner_throttle = (  # its sleeps end when the broker stops
            None
            if rate is None
            else cleaner.IoThrottle(rate, clock, sleep=self._cleaner_stopping.wait)
        )
        self._cleaner_process = (
            CleanerProcess(self._cleaner_stopping.is_set) if settings.cleaner_process else None
        )

    # -- metadata -------------------------------------------------------------------------

    def apply_image(
        self,
        image: MetadataImage,
        changes: LocalChanges | None = None,
        config_topics: set[str] | None = None,
    ) -> None:
        """Take every change `image` brings for this broker (`changes`, computed from the
        records that led to it; by comparing whole images if not given). The image becomes
        current only once all are applied: if one fails, they are all brought again.
        """
        old = self.image
        me = self.settings.broker_id
        if changes is None:
            changes, config_topics = local_changes(old, image, me), None
        self._newest_image = image  # broker_url() resolves leaders against it meanwhile
        for local in (*changes.leaders, *changes.followers):
            partition = self._hosted(local.topic_id, local.topic, local.partition)
            self._configure(partition, image.topics[local.topic_id].configs)
            partition.apply_registration(local.registration)
            self._route(partition)
        for topic_id, _, index in changes.deletes:
            self._delete(topic_id, index)
        if config_topics is None:
            for partition in self.partitions.values():
                topic = image.topics.get(partition.topic_id)
                if topic is not None:
                    self._configure(partition, topic.configs)
        else:
            for topic_id in config_topics:
                topic = image.topics.get(topic_id)
                if topic is not None:
                    for index in topic.partitions:
                        hosted = self.partitions.get((topic_id, index))
                        if hosted is not None:
                            self._configure(hosted, topic.configs)
        if self._first_image:
            self._delete_orphans(image)
            self._first_image = False
        self._activate_for_unfenced(old, image)
        self.image = image
        self.image_changed.notify()

    def _activate_for_unfenced(self, old: MetadataImage, new: MetadataImage) -> None:
        """A broker that became live may join the ISRs it is out of: look at the partitions
        we lead where it is such a replica (idle ones would not be looked at otherwise)."""
        back = {b for b in new.brokers if new.is_live(b) and not old.is_live(b)} - {
            self.settings.broker_id
        }
        if not back:
            return
        for key, partition in self.partitions.items():
            state = partition.state
            if state is not None and any(b in state.replicas and b not in state.isr for b in back):
                self._active.add(key)

    def _eligible(self, broker_id: int) -> bool:
        return self._newest_image.is_live(broker_id)

    def _hosted(self, topic_id: str, topic: str, index: int) -> Partition:
        key = (topic_id, index)
        partition = self.partitions.get(key)
        if partition is None:
            partition = Partition(
                topic_id,
                topic,
                index,
                self.storage.open_partition(log_name(topic_id, index)),
                self._clock,
                self.settings.broker_id,
                lease_valid=self._lease_valid,
            )
            partition.on_change = self._partition_changed
            partition.sessions_seen = self._sessions_seen
            partition.is_eligible = self._eligible
            self.partitions[key] = partition
        return partition

    def _route(self, partition: Partition) -> None:
        key = (partition.topic_id, partition.index)
        for leader_id, fetcher in self._fetchers.items():
            if leader_id != partition.leader_id or partition.role is not Role.FOLLOWER:
                fetcher.remove(key)
        if partition.role is Role.FOLLOWER:
            existing = self._fetchers.get(partition.leader_id)
            if existing is None:
                existing = FollowerFetcher(
                    partition.leader_id,
                    broker_id=self.settings.broker_id,
                    broker_epoch=self._broker_epoch,
                    leader_url=self.broker_url,
                    session=self._session,
                    max_wait_ms=self.settings.replica_fetch_wait_max_ms,
                )
                existing.on_refused = self._report_refused
                self._fetchers[partition.leader_id] = existing
            existing.add(partition)

    def _report_refused(self, leader_id: int) -> None:
        """A leader's port refused our fetch: tell the controllers, at most once a second
        per leader, so a dead leader is fenced in about a second rather than a session
        (they check for themselves first: controller/liveness.py)."""
        now = self._clock.monotonic_ms()
        registration = self._newest_image.brokers.get(leader_id)
        if registration is None or registration.fenced:
            return
        if now - self._reported.get(leader_id, -REPORT_INTERVAL_MS) < REPORT_INTERVAL_MS:
            return
        self._reported[leader_id] = now
        report = BrokerUnreachableReport(
            self.settings.broker_id, self._broker_epoch(), registration.broker_epoch
        )
        task = asyncio.get_running_loop().create_task(self._send_report(leader_id, report))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def _send_report(self, leader_id: int, report: BrokerUnreachableReport) -> None:
        try:
            await self._controllers.call(
                "POST",
                f"/v1/internal/brokers/{leader_id}/unreachable",
                report.encode(),
                timeout_s=2,
            )
        except KraftliteError as exc:
            log.info("unreachable_report_failed", broker=leader_id, error=str(exc))

    def _configure(self, partition: Partition, configs: Mapping[str, str]) -> None:
        """A hosted partition's topic configs, and whether the cleaner and the key index
        visit it (rules 6 and 7: their rounds look at compacted partitions only)."""
        partition.configs = configs
        key = (partition.topic_id, partition.index)
        if partition.compacted:
            self._compacted[key] = partition
        else:
            self._compacted.pop(key, None)

    def _delete(self, topic_id: str, index: int) -> None:
        self._compacted.pop((topic_id, index), None)
        partition = self.partitions.pop((topic_id, index), None)
        for fetcher in self._fetchers.values():
            fetcher.remove((topic_id, index))
        if partition is not None:
            partition.go_offline()
            if topic_id not in self._newest_image.topics:  # the topic is gone, its series too
                metrics.forget_topic(partition.topic)
        self.storage.delete_partition(log_name(topic_id, index))
        log.info("replica_deleted", topic_id=topic_id, partition=index)

    def _delete_orphans(self, image: MetadataImage) -> None:
        """Replicas on disk that metadata no longer gives us (deleted while we were down)."""
        wanted = {
            log_name(t.topic_id, i)
            for t, i, r in image.partitions()
            if self.settings.broker_id in r.replicas
        }
        for name in self.storage.partition_names():
            if name not in wanted:
                self.storage.delete_partition(name)
                log.info("orphan_replica_deleted", name=name)

    def restart_fetch_sessions(self) -> None:
        """This broker was unfenced: every follower fetcher names all its partitions again."""
        for fetcher in self._fetchers.values():
            fetcher.restart_session()

    def broker_url(self, broker_id: int) -> str | None:
        broker = self._newest_image.brokers.get(broker_id)
        return None if broker is None else broker.url

    # -- lookups for the API --------------------------------------------------------------

    def topic(self, name: str) -> TopicImage:
        topic = self.image.topic(name)
        if topic is None:
            raise KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        return topic

    def registration(self, name: str, index: int) -> tuple[TopicImage, PartitionRegistration]:
        topic = self.topic(name)
        registration = topic.partitions.get(index)
        if registration is None:
            raise KraftliteError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {name!r} has no partition {index} (it has {len(topic.partitions)})",
            )
        return topic, registration

    def leader_partition(self, name: str, index: int) -> Partition:
        """This broker's replica if it leads the partition; else NOT_LEADER_OR_FOLLOWER with
        the leader's id and URL.
        """
        topic, registration = self.registration(name, index)
        partition = self.partitions.get((topic.topic_id, index))
        if partition is not None and partition.role is Role.LEADER:
            if not partition.serving_as_leader:
                raise partition.lease_lapsed()
            return partition
        raise self.not_leader(name, index, registration.leader)

    def not_leader(self, name: str, index: int, leader_id: int) -> KraftliteError:
        return KraftliteError(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {self.settings.broker_id} does not lead {name}-{index}",
            leader_id=leader_id,
            leader_url=self.broker_url(leader_id),
        )

    # -- replica fetch, as leader ---------------------------------------------------------

    async def serve_replica_fetch(
        self, request: ReplicaFetchRequest
    ) -> tuple[ReplicaFetchResponse, list[bytes]]:
        """Answer a follower's fetch in its session (fetch_sessions.py): the partitions it
        named or that changed since, with news only; long-poll while none has any.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.max_wait_ms / 1000
        follower = request.replica_id
        registration = self.image.brokers.get(follower)
        if registration is None or registration.broker_epoch != request.broker_epoch:
            # A previous incarnation's fetch (or a stranger's) must not count as the
            # follower's log end offset: the HW would move on data it may not hold.
            raise KraftliteError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"replica {follower} with broker epoch {request.broker_epoch} is not the "
                "registered one",
            )
        session, touched = self.fetch_sessions.open(request, self._clock.monotonic_ms())
        candidates = session.take_deferred(touched)
        throttle = self.throttled_rate()
        held: list[PartitionKey] = []  # throttled this round: looked at first next round
        while True:
            answers: list[PartitionFetchAnswer] = []
            segments: list[bytes] = []
            budget = request.max_bytes
            for position, key in enumerate(candidates):
                if budget <= 0:  # the rest first next round (rotated, so none starves)
                    session.defer(candidates[position:])
                    break
                entry = session.partitions.get(key)
                if entry is None:
                    continue
                limit = budget
                throttled = throttle is not None and self._catching_up(key, follower)
                if throttle is not None and throttled:
                    limit = self._throttle_allowance(throttle, budget)
                    if limit <= 0:
                        held.append(key)
                        continue
                answer, data = self._replica_fetch_one(follower, entry, limit)
                if throttled:
                    self._throttle_spent(throttle, len(data))
                if answer is None:
                    entry.checked = True
                    continue
                entry.checked = answer.error_code is None
                if _only_high_watermark(answer, data, entry):
                    session.later.add(key)  # not worth a round of its own (Tell.LATER)
                    continue
                _told(entry, answer)
                answers.append(answer)
                segments.append(data)
                budget -= len(data)
            if answers or loop.time() >= deadline:
                if held:
                    session.defer(list(dict.fromkeys([*session.deferred, *held])))
                for answer in self._high_watermark_news(session):
                    answers.append(answer)
                    segments.append(b"")
                return ReplicaFetchResponse(session.session_id, tuple(answers)), segments
            # nothing to say yet: wait for news, or for the throttle to refill
            wait = deadline - loop.time()
            if held and throttle is not None:  # until the bucket refills, not before
                wait = min(wait, max(self._throttle_wait_ms(throttle) / 1000, THROTTLE_RETRY_S))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):  # no task per wait, unlike wait_for
                    await session.wake.wait()
            candidates = list(dict.fromkeys([*held, *session.take_deferred(session.take_dirty())]))
            held = []

    def _high_watermark_news(self, session: FetchSession) -> list[PartitionFetchAnswer]:
        """The high watermarks (Tell.LATER) this follower has not been told, for an answer
        that goes anyway: only for positions the leader checked since the follower named
        them (not one answered with an error, deferred or held by the throttle) and while
        its lease holds. Partitions no longer led here are left to their role change, which
        tells followers at once.
        """
        news = []
        for key in session.take_later():
            entry = session.partitions.get(key)
            partition = self.partitions.get(key)
            if entry is None or partition is None or partition.state is None:
                continue
            if not entry.checked or not partition.serving_as_leader:
                session.later.add(key)  # told once a fetch of it is checked, or the lease back
                continue
            log = partition.log
            if log.high_watermark == entry.told_high_watermark:
                continue
            answer = PartitionFetchAnswer(key[0], key[1], log.high_watermark, log.log_start_offset)
            _told(entry, answer)
            news.append(answer)
        return news

    def _replica_fetch_one(
        self, follower: int, entry: SessionPartition, max_bytes: int
    ) -> tuple[PartitionFetchAnswer | None, bytes]:
        """One partition's answer, or None when the follower has nothing new to hear."""
        position = entry.position
        topic_id, index = position.topic_id, position.partition
        partition = self.partitions.get((topic_id, index))
        if partition is None:
            error = KraftliteError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "no replica")
            return _error_answer(topic_id, index, error), b""
        try:
            result = partition.replica_fetch(
                follower,
                position.leader_epoch,
                position.fetch_offset,
                position.last_fetched_epoch,
                max_bytes,
                position.log_start_offset,
            )
        except KraftliteError as exc:
            return _error_answer(topic_id, index, exc), b""
        if result.isr_proposal is not None:
            self._send_alter_partition(partition, result.isr_proposal)
        if (
            not result.data
            and result.diverging_epoch is None
            and result.high_watermark == entry.told_high_watermark
            and result.log_start_offset == entry.told_log_start
        ):
            return None, b""
        answer = PartitionFetchAnswer(
            topic_id,
            index,
            result.high_watermark,
            result.log_start_offset,
            result.diverging_epoch,
            result.diverging_end_offset if result.diverging_epoch is not None else -1,
        )
        return answer, result.data

    # -- replication throttle (rule 5) ---------------------------------------------------

    def throttled_rate(self) -> int | None:
        """`replication.throttled.rate` for this broker: its dynamic config in metadata,
        else its static one; None: unthrottled."""
        dynamic = self._newest_image.broker_configs.get(self.settings.broker_id, {})
        value = dynamic.get("replication.throttled.rate")
        return int(value) if value is not None else self.settings.throttled_rate

    def _catching_up(self, key: PartitionKey, follower: int) -> bool:
        """Whether `follower` is a replica a reassignment adds that is not in sync yet (not
        even proposed: a pending member already counts for the high watermark)."""
        partition = self.partitions.get(key)
        registration = None if partition is None else partition.registration
        state = None if partition is None else partition.state
        return (
            registration is not None
            and follower in registration.adding
            and (state is None or follower not in state.maximal_isr)
        )

    def _throttle_wait_ms(self, rate: int) -> int:
        """How long until the bucket is out of debt (0: it is not)."""
        now = self._clock.monotonic_ms()
        return self._throttle.record({"rate": rate}, "replication", "rate", 0, now)

    def _throttle_allowance(self, rate: int, budget: int) -> int:
        """Bytes a catching-up replica may get now: none while the bucket is in debt, else
        at most a tenth of a second's worth (at least one batch goes)."""
        if self._throttle_wait_ms(rate) > 0:
            return 0
        return max(1, min(budget, rate // 10))

    def _throttle_spent(self, rate: int | None, sent: int) -> None:
        if rate is not None and sent:
            now = self._clock.monotonic_ms()
            self._throttle.record({"rate": rate}, "replication", "rate", sent, now)

    def _partition_changed(self, partition: Partition, tell: Tell) -> None:
        key = (partition.topic_id, partition.index)
        self._hw_dirty.add(key)
        if partition.state is not None:
            self._active.add(key)
        if tell is Tell.NOW:
            self.fetch_sessions.changed(key)
        elif tell is Tell.LATER:
            self.fetch_sessions.changed_later(key)

    def _sessions_seen(self, partition: Partition) -> dict[int, int]:
        return self.fetch_sessions.last_rounds((partition.topic_id, partition.index))

    # -- background work ------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        interval_ms = min(self.settings.replica_lag_time_max_ms / 4, 500)
        self._tasks = [
            loop.create_task(self._every(interval_ms, self._check_isrs), name="isr"),
            loop.create_task(self._send_isr_changes(), name="alter-partition"),
            loop.create_task(
                self._every(self.settings.hw_checkpoint_interval_ms, self._checkpoint),
                name="hw-checkpoint",
            ),
            loop.create_task(
                self._every(self.settings.retention_check_interval_ms, self._retention),
                name="retention",
            ),
        ]
        self._tasks.append(
            loop.create_task(self._every(KEY_INDEX_INTERVAL_MS, self._index_keys), name="key-index")
        )
        if self.settings.cleaner_enable:
            self.cleaner_round_ms = self._clock.now_ms()
            self._tasks.append(
                loop.create_task(
                    self._every(self.settings.cleaner_backoff_ms, self._clean), name="log-cleaner"
                )
            )

    async def stop(self) -> None:
        self._cleaner_stopping.set()  # a pass in flight ends after its transaction
        if self._cleaner_process is not None:
            self._cleaner_process.kill()  # or at its request to the process (rule 6)
        for task in self._tasks:
            task.cancel()
        for fetcher in self._fetchers.values():
            await fetcher.stop()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.to_thread(self._cleaner_pool.shutdown)  # no pass outlives the logs
        if self._cleaner_process is not None:
            await asyncio.to_thread(self._cleaner_process.close)
        for partition in self.partitions.values():
            with contextlib.suppress(Exception):
                partition.log.checkpoint_high_watermark()

    async def _every(self, interval_ms: float, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` every `interval_ms`; an error is logged and the next round still runs."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await work()
            except Exception:  # background work must outlive one bad round
                log.exception("background_work_failed", work=getattr(work, "__name__", "?"))

    async def _check_isrs(self) -> None:
        """Only partitions that changed since they were last settled (Partition.isr_settled):
        an idle partition costs nothing here.
        """
        active, self._active = self._active, set()
        for key in active:
            partition = self.partitions.get(key)
            if partition is None or partition.state is None:
                continue
            try:
                proposal = partition.maybe_change_isr(self.settings.replica_lag_time_max_ms)
                if proposal is not None:
                    self._send_alter_partition(partition, proposal)
                settled = partition.isr_settled()
            except Exception:  # one bad partition must not drop the others' checks
                log.exception("isr_check_failed", partition=partition.name)
                settled = False
            if not settled:
                self._active.add(key)

    def _send_alter_partition(self, partition: Partition, proposal: IsrProposal) -> None:
        """Queue `proposal` for the next AlterPartition (rule 3): changes collected over a
        few milliseconds go to the controller in one request, and commit in one batch.
        """
        self._isr_queue[(partition.topic_id, partition.index)] = (partition, proposal)
        self._isr_wake.set()

    async def _send_isr_changes(self) -> None:
        """Send queued ISR changes until each one's outcome is known. While unknown
        (timeouts, no active controller) a change stays pending and is sent again as is:
        the controller answers a retry of a committed change with the committed state.
        """
        backoff = 0.0
        while True:
            await self._isr_wake.wait()
            await asyncio.sleep(max(ALTER_PARTITION_LINGER_S, backoff))
            self._isr_wake.clear()
            queued = [(p, pr) for p, pr in self._isr_queue.values() if p.is_pending(pr)]
            self._isr_queue.clear()
            unknown: list[tuple[Partition, IsrProposal]] = []
            for start in range(0, len(queued), ALTER_PARTITION_MAX_ITEMS):
                chunk = queued[start : start + ALTER_PARTITION_MAX_ITEMS]
                try:
                    unknown += await self._alter_partitions(chunk)
                except Exception:  # a bug: keep the changes, and the sender, alive
                    log.exception("alter_partition_crashed", partitions=len(chunk))
                    unknown += chunk
            for partition, proposal in unknown:  # unless a newer change replaced it
                self._isr_queue.setdefault(
                    (partition.topic_id, partition.index), (partition, proposal)
                )
            if self._isr_queue:
                self._isr_wake.set()
            backoff = min(max(backoff * 2, 0.1), 2.0) if unknown else 0.0

    async def _alter_partitions(
        self, queued: list[tuple[Partition, IsrProposal]]
    ) -> list[tuple[Partition, IsrProposal]]:
        """One AlterPartition request; returns the changes whose outcome is still unknown."""
        request = AlterPartitionRequest(
            self.settings.broker_id,
            self._broker_epoch(),
            tuple(
                IsrChange(p.topic_id, p.index, pr.leader_epoch, pr.partition_epoch, pr.isr)
                for p, pr in queued
            ),
        )
        try:
            _, body = await self._controllers.call(
                "POST", "/v1/internal/alter-partition", request.encode(), timeout_s=10, raw=True
            )
            answer = AlterPartitionResponse.decode(body)
        except KraftliteError as exc:
            if exc.code in _NOT_COMMITTED:  # the whole request was refused
                log.info("isr_changes_refused", partitions=len(queued), error=str(exc))
                for partition, proposal in queued:
                    partition.isr_change_refused(proposal)
                return []
            log.info("isr_changes_unknown", partitions=len(queued), error=str(exc))
            return queued
        except MessageError as exc:
            log.warning("isr_changes_bad_answer", error=str(exc))
            return queued
        results = {(r.topic_id, r.partition): r for r in answer.results}
        unknown = []
        for partition, proposal in queued:
            result = results.get((partition.topic_id, partition.index))
            if result is None:
                unknown.append((partition, proposal))
            elif result.state is not None:
                state = result.state
                log.info("isr_changed", partition=partition.name, isr=list(state.isr))
                metrics.record_isr_change(proposal.base, state.isr)
                partition.isr_change_committed(
                    proposal,
                    PartitionRegistration(
                        state.replicas,
                        state.isr,
                        state.leader,
                        state.leader_epoch,
                        state.partition_epoch,
                    ),
                )
            elif result.error_code in _NOT_COMMITTED_NAMES:
                log.info("isr_change_refused", partition=partition.name, error=result.message)
                partition.isr_change_refused(proposal)
            # else superseded: the partition moved on, and the next metadata says how
        return unknown

    async def _checkpoint(self) -> None:
        """Checkpoint the high watermarks that moved since the last round, in one thread."""
        dirty, self._hw_dirty = self._hw_dirty, set()
        logs = [p.log for key in dirty if (p := self.partitions.get(key)) is not None]
        if logs:
            try:
                await asyncio.to_thread(_checkpoint_all, logs)
            except BaseException:
                self._hw_dirty |= dirty  # the next round writes them
                raise

    async def _retention(self) -> None:
        """Apply retention to every partition whose topic has it (rule 4), a slice at a
        time in one thread each."""
        partitions = [p for p in self.partitions.values() if has_retention(p.configs)]
        for start in range(0, len(partitions), RETENTION_SLICE):
            chunk = [
                (p, p.config_int("retention.ms"), p.config_int("retention.bytes"))
                for p in partitions[start : start + RETENTION_SLICE]
            ]
            deleted = await asyncio.to_thread(_apply_retention, chunk, self._clock.now_ms())
            for partition, count in deleted:
                log.info("retention", partition=partition.name, deleted_records=count)
                partition.changed()  # followers hear of the new log start
                fetcher = self._fetchers.get(partition.leader_id)
                if partition.role is Role.FOLLOWER and fetcher is not None:
                    fetcher.log_start_moved((partition.topic_id, partition.index))  # the leader too

    async def _clean(self) -> None:
        """Rule 6: a pass over each compacted partition this broker holds, when due."""
        loop = asyncio.get_running_loop()
        began_ms = self._clock.now_ms()
        for partition in list(self._compacted.values()):
            if partition.role is Role.OFFLINE:
                continue
            clean = functools.partial(
                cleaner.clean,
                partition.log,
                self._clock.now_ms(),
                clean_policy(partition),
                throttle=self._cleaner_throttle,
                stopping=self._cleaner_stopping.is_set,
                observe=functools.partial(setattr, partition.cleaner, "dirtiness"),
                planner=(
                    compaction.PassPlan
                    if self._cleaner_process is None
                    else self._cleaner_process.start_pass
                ),
            )
            try:
                result = await loop.run_in_executor(self._cleaner_pool, clean)
            except cleaner.Stopped:
                return
            except KraftliteError as exc:  # deleted or closed meanwhile
                log.info("log_clean_skipped", partition=partition.name, error=str(exc))
                continue
            except Exception:  # one partition's failure (a bug, a disk) stops no other's
                log.exception("log_clean_failed", partition=partition.name)
                continue
            if result is None:
                continue
            if not result.ended_early:  # one that did, the next pass plans again
                partition.cleaner.passed(result, self._clock.now_ms())
            metrics.record_clean(result)
            log.info(
                "log_cleaned",
                partition=partition.name,
                start=result.start,
                end=result.end,
                rewritten_batches=result.rewritten,
                freed_bytes=result.freed_bytes,
                ended_early=result.ended_early,
            )
        self.cleaner_round_ms = began_ms  # every look of the round came after it

    def compacted_partitions(self) -> list[Partition]:
        """The compacted partitions this broker holds (what the cleaner visits)."""
        return list(self._compacted.values())

    async def _index_keys(self) -> None:
        """Rule 7: each compacted partition's key index, a few chunks at a time."""
        for partition in list(self._compacted.values()):
            if partition.role is Role.OFFLINE:
                continue
            replica_log = partition.log
            for _ in range(KEY_INDEX_CHUNKS_PER_ROUND):
                before = replica_log.indexed_offset
                if before >= replica_log.high_watermark:
                    break
                try:
                    after = await asyncio.to_thread(replica_log.index_keys, KEY_INDEX_CHUNK_BYTES)
                except KraftliteError:  # deleted or closed meanwhile
                    break
                if after <= before:
                    break


def clean_policy(partition: Partition) -> CleanPolicy:
    """A compacted partition's cleaner configs (Kafka's names)."""
    return CleanPolicy(
        min_compaction_lag_ms=partition.config_int("min.compaction.lag.ms"),
        delete_retention_ms=partition.config_int("delete.retention.ms"),
        min_cleanable_dirty_ratio=float(partition.config("min.cleanable.dirty.ratio")),
        max_compaction_lag_ms=partition.config_int("max.compaction.lag.ms"),
    )


def _checkpoint_all(logs: list[ReplicaLog]) -> None:
    for partition_log in logs:
        with contextlib.suppress(KraftliteError):  # deleted meanwhile
            partition_log.checkpoint_high_watermark()


def _apply_retention(
    chunk: list[tuple[Partition, int, int]], now_ms: int
) -> list[tuple[Partition, int]]:
    deleted = []
    for partition, retention_ms, retention_bytes in chunk:
        try:
            count = partition.log.apply_retention(now_ms, retention_ms, retention_bytes)
        except KraftliteError:
            continue  # deleted meanwhile
        if count:
            deleted.append((partition, count))
    return deleted


def _only_high_watermark(
    answer: PartitionFetchAnswer, data: bytes, entry: SessionPartition
) -> bool:
    """An answer whose only news is a higher watermark: told with the next answer."""
    return (
        not data
        and answer.error_code is None
        and answer.diverging_epoch is None
        and answer.log_start_offset == entry.told_log_start
    )


def _told(entry: SessionPartition, answer: PartitionFetchAnswer) -> None:
    if answer.error_code is None:
        entry.told_high_watermark = answer.high_watermark
        entry.told_log_start = answer.log_start_offset


def _error_answer(topic_id: str, index: int, error: KraftliteError) -> PartitionFetchAnswer:
    return PartitionFetchAnswer(
        topic_id,
        index,
        log_start_offset=int(error.details.get("log_start_offset", 0)),
        error_code=error.code.name,
        message=error.message,
    )


# AlterPartition answers that mean the proposal was not committed (propose again later); the
# others (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_
# OR_PARTITION) mean the partition moved on, and newer metadata will say how.
_NOT_COMMITTED = frozenset(
    {
        ErrorCode.INELIGIBLE_REPLICA,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.STALE_BROKER_EPOCH,
        ErrorCode.BROKER_ID_NOT_REGISTERED,
    }
)
_NOT_COMMITTED_NAMES = frozenset(code.name for code in _NOT_COMMITTED)
