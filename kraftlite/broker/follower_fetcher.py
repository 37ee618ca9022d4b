"""Follower fetching: one long-polled request loop per leader broker, for every partition
this broker follows from it (Kafka's fetcher threads, one fetch session per source broker).

Each round asks, per partition, for the offset after our log end with the epoch of our last
batch; the leader answers data, or a divergence to truncate to (KIP-595 over KIP-101), or an
error. Our next request's offset is how the leader learns our log end offset.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import aiohttp
import orjson
import structlog

from kraftlite.broker.partition import Partition, ReplicaFetchResult, Role
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import framing

log = structlog.get_logger(__name__)
PartitionKey = tuple[str, int]
REPLICA_FETCH_PATH = "/v1/internal/replica-fetch"
ERROR_BACKOFF_S = 0.2  # Kafka's replica.fetch.backoff.ms is 1000; metadata moves faster here


class FollowerFetcher:
    def __init__(
        self,
        leader_id: int,
        *,
        broker_id: int,
        broker_epoch: Callable[[], int],
        leader_url: Callable[[int], str | None],
        session: aiohttp.ClientSession,
        max_wait_ms: int = 500,
        max_bytes: int = 8 << 20,
    ) -> None:
        self.leader_id = leader_id
        self.partitions: dict[PartitionKey, Partition] = {}
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._leader_url = leader_url
        self._session = session
        self._max_wait_ms = max_wait_ms
        self._max_bytes = max_bytes
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # A partition whose last answer was an error sits out until then (loop time), so one
        # partition waiting for metadata does not turn the long-poll into a busy loop.
        self._backoff_until: dict[PartitionKey, float] = {}

    def add(self, partition: Partition) -> None:
        key = (partition.topic_id, partition.index)
        self.partitions[key] = partition
        self._backoff_until.pop(key, None)  # new metadata: try at once
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"fetch-from-{self.leader_id}"
            )

    def remove(self, key: PartitionKey) -> None:
        self.partitions.pop(key, None)
        self._backoff_until.pop(key, None)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        backoff = 0.05
        loop = asyncio.get_running_loop()
        while True:
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            now = loop.time()
            if all(self._backoff_until.get(key, 0) > now for key in self.partitions):
                await asyncio.sleep(min(self._backoff_until[key] for key in self.partitions) - now)
                continue
            try:
                await self._fetch_once()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - leader down or moving: metadata will tell
                log.debug("replica_fetch_failed", leader=self.leader_id, error=repr(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def _fetch_once(self) -> None:
        url = self._leader_url(self.leader_id)
        if url is None:
            raise KraftliteError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "leader URL unknown")
        now = asyncio.get_running_loop().time()
        asked = {
            key: (p, p.leader_epoch)
            for key, p in self.partitions.items()
            if p.role is Role.FOLLOWER
            and p.leader_id == self.leader_id
            and self._backoff_until.get(key, 0) <= now
        }
        body = {
            "replica_id": self._broker_id,
            "broker_epoch": self._broker_epoch(),
            "max_wait_ms": self._max_wait_ms,
            "max_bytes": self._max_bytes,
            "partitions": [
                {
                    "topic_id": p.topic_id,
                    "partition": p.index,
                    "leader_epoch": epoch,
                    "fetch_offset": p.log.log_end_offset,
                    "last_fetched_epoch": p.log.latest_epoch,
                }
                for p, epoch in asked.values()
            ],
        }
        self._changed.clear()
        async with self._session.post(
            url + REPLICA_FETCH_PATH,
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=self._max_wait_ms / 1000 + 10),
        ) as response:
            raw = await response.read()
            if response.status != 200:
                raise KraftliteError(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"replica fetch: HTTP {response.status}"
                )
        header, segments = framing.decode(raw)
        for answer, data in zip(header["partitions"], segments, strict=True):
            entry = asked.get((answer["topic_id"], answer["partition"]))
            if entry is None:
                continue
            partition, epoch = entry
            key = (partition.topic_id, partition.index)
            try:  # one partition's failure must not stop the others
                failed = self._apply(partition, epoch, answer, data)
            except Exception as exc:  # noqa: BLE001 - logged; the partition backs off
                log.warning("replica_apply_failed", partition=partition.name, error=repr(exc))
                failed = True
            if failed:
                self._backoff_until[key] = asyncio.get_running_loop().time() + ERROR_BACKOFF_S
            else:
                self._backoff_until.pop(key, None)

    def _apply(self, partition: Partition, epoch: int, answer: dict, data: memoryview) -> bool:  # type: ignore[type-arg]
        """Apply one partition's answer; True if it was an error (back off)."""
        code = answer.get("error_code")
        if code == ErrorCode.OFFSET_OUT_OF_RANGE.name:
            start = int(answer.get("log_start_offset", 0))
            if partition.log.log_end_offset < start:
                partition.reset_to_leader_start(start, epoch)
                return False
            return True
        if code is not None:
            return True  # NOT_LEADER / FENCED_LEADER_EPOCH: wait for metadata to move
        partition.append_from_leader(
            ReplicaFetchResult(
                answer["high_watermark"],
                answer["log_start_offset"],
                bytes(data),
                answer.get("diverging_epoch"),
                answer.get("diverging_end_offset", -1),
            ),
            epoch,
        )
        return False
