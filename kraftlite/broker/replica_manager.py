"""The replicas this broker holds: created, led, followed and deleted as metadata says.

Rules:
1. Metadata is the only trigger: every new image becomes LocalChanges (pure) and each
   changed partition takes its registration (leader, follower, offline).
2. A follower fetches from its leader through the one FollowerFetcher for that leader.
3. ISR changes go to the controller in batches (AlterPartition with many partitions, sent
   after a few milliseconds' linger); the leader acts on the committed answer only, and a
   change whose outcome is unknown is sent again as it was.
4. Background work (HW checkpoints, retention) never blocks the event loop: LMDB calls
   that may take long run in a thread; a partition's log serializes its own mutations.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from kraftlite.broker.controller_client import ControllerClient
from kraftlite.broker.follower_fetcher import FollowerFetcher, PartitionKey
from kraftlite.broker.notifier import Notifier, wait_any
from kraftlite.broker.partition import IsrProposal, Partition, Role
from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from kraftlite.metadata.local_changes import LocalChanges, local_changes
from kraftlite.protocol.internal import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    IsrChange,
    MessageError,
)
from kraftlite.storage.log import LogStorage

log = structlog.get_logger(__name__)
ALTER_PARTITION_LINGER_S = 0.005  # ISR changes collected this long go in one request
ALTER_PARTITION_MAX_ITEMS = 2_000  # partitions per request (the controller takes 1 MiB)


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    broker_id: int
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    retention_check_interval_ms: int = 300_000
    hw_checkpoint_interval_ms: int = 5_000


def log_name(topic_id: str, partition: int) -> str:
    return f"{topic_id}-{partition}"


class ReplicaManager:
    def __init__(
        self,
        settings: ReplicationSettings,
        storage: LogStorage,
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
        self._isr_wake = asyncio.Event()
        self._first_image = True
        self._newest_image = MetadataImage.EMPTY
        self.image_changed = Notifier()

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
            partition.configs = image.topics[local.topic_id].configs
            partition.apply_registration(local.registration)
            self._route(partition)
        for topic_id, _, index in changes.deletes:
            self._delete(topic_id, index)
        if config_topics is None:
            for partition in self.partitions.values():
                topic = image.topics.get(partition.topic_id)
                if topic is not None:
                    partition.configs = topic.configs
        else:
            for topic_id in config_topics:
                topic = image.topics.get(topic_id)
                if topic is not None:
                    for index in topic.partitions:
                        hosted = self.partitions.get((topic_id, index))
                        if hosted is not None:
                            hosted.configs = topic.configs
        if self._first_image:
            self._delete_orphans(image)
            self._first_image = False
        self.image = image
        self.image_changed.notify()

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
                self._fetchers[partition.leader_id] = existing
            existing.add(partition)

    def _delete(self, topic_id: str, index: int) -> None:
        partition = self.partitions.pop((topic_id, index), None)
        for fetcher in self._fetchers.values():
            fetcher.remove((topic_id, index))
        if partition is not None:
            partition.go_offline()
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

    async def serve_replica_fetch(self, request: dict[str, Any]) -> tuple[list[dict], list[bytes]]:  # type: ignore[type-arg]
        """Answer a follower's fetch for all its partitions; long-poll while none has data."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(int(request.get("max_wait_ms", 0)), 30_000) / 1000
        max_bytes = int(request.get("max_bytes", 8 << 20))
        follower = int(request["replica_id"])
        registration = self.image.brokers.get(follower)
        if registration is None or registration.broker_epoch != int(request["broker_epoch"]):
            # A previous incarnation's fetch (or a stranger's) must not count as the
            # follower's log end offset: the HW would move on data it may not hold.
            raise KraftliteError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"replica {follower} with broker epoch {request['broker_epoch']} is not the "
                "registered one",
            )
        while True:
            answers, segments, waits = [], [], []
            news = False  # data, an error or a divergence: answer now
            for item in request["partitions"]:
                answer, data = self._replica_fetch_one(follower, item, max_bytes)
                answers.append(answer)
                segments.append(data)
                news = news or bool(data) or "error_code" in answer or "diverging_epoch" in answer
                partition = self.partitions.get((item["topic_id"], item["partition"]))
                if partition is not None:
                    waits.append(partition.appended)
            if news or loop.time() >= deadline:
                return answers, segments
            await wait_any(waits, deadline - loop.time())

    def _replica_fetch_one(
        self, follower: int, item: dict[str, Any], max_bytes: int
    ) -> tuple[dict[str, Any], bytes]:
        key = (item["topic_id"], item["partition"])
        answer: dict[str, Any] = {"topic_id": key[0], "partition": key[1]}
        partition = self.partitions.get(key)
        if partition is None:
            answer.update(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER.name, message="no replica")
            return answer, b""
        try:
            result = partition.replica_fetch(
                follower,
                int(item["leader_epoch"]),
                int(item["fetch_offset"]),
                int(item["last_fetched_epoch"]),
                max_bytes,
            )
        except KraftliteError as exc:
            answer.update(error_code=exc.code.name, message=exc.message, **exc.details)
            return answer, b""
        if result.isr_proposal is not None:
            self._send_alter_partition(partition, result.isr_proposal)
        answer["high_watermark"] = result.high_watermark
        answer["log_start_offset"] = result.log_start_offset
        if result.diverging_epoch is not None:
            answer["diverging_epoch"] = result.diverging_epoch
            answer["diverging_end_offset"] = result.diverging_end_offset
        return answer, result.data

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

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for fetcher in self._fetchers.values():
            await fetcher.stop()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
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
        for partition in list(self.partitions.values()):
            proposal = partition.maybe_change_isr(self.settings.replica_lag_time_max_ms)
            if proposal is not None:
                self._send_alter_partition(partition, proposal)

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
            unknown = []
            for start in range(0, len(queued), ALTER_PARTITION_MAX_ITEMS):
                unknown += await self._alter_partitions(
                    queued[start : start + ALTER_PARTITION_MAX_ITEMS]
                )
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
                "POST", "/v1/internal/alter-partition", request.to_json(), timeout_s=10
            )
            answer = AlterPartitionResponse.from_json(body)
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
        for partition in list(self.partitions.values()):
            with contextlib.suppress(KraftliteError):
                await asyncio.to_thread(partition.log.checkpoint_high_watermark)

    async def _retention(self) -> None:
        for partition in list(self.partitions.values()):
            try:
                deleted = await asyncio.to_thread(
                    partition.log.apply_retention,
                    self._clock.now_ms(),
                    partition.config_int("retention.ms"),
                    partition.config_int("retention.bytes"),
                )
            except KraftliteError:
                continue  # deleted meanwhile
            if deleted:
                log.info("retention", partition=partition.name, deleted_records=deleted)


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
