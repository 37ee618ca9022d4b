"""Follower fetching: one long-polled request loop per leader broker, for every partition
this broker follows from it (Kafka's fetcher threads, one fetch session per source broker).

Rounds travel over one WebSocket to the leader (`/v1/internal/replica-stream`), opened with
a signed handshake and kept: a round costs a message each way, not an HTTP request and its
answer (replication.md, "The replication stream"). A stream that fails is dropped, and the
next round opens a new one in a new session.

A fetch session (KIP-227's idea; the leader's side is fetch_sessions.py): the first request
lists every partition with the offset after our log end and the epoch of our last batch;
later ones list only partitions whose position moved (we appended or truncated, metadata
changed them, or a backoff ended) and those we stopped fetching. The leader answers only
partitions with news: data, a divergence to truncate to (KIP-595 over KIP-101), an error, or
a new high watermark. A round with nothing new costs O(1) on both sides. Any failed request
starts a new session, so the leader never holds a position we did not mean.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import cast

import aiohttp
import orjson
import structlog

from kraftlite.broker.partition import Partition, ReplicaFetchResult, Role
from kraftlite.errors import ErrorCode, KraftliteError, error_from_problem
from kraftlite.protocol import framing
from kraftlite.protocol.batch import MAGIC_KAFKA
from kraftlite.protocol.internal import (
    NEW_SESSION,
    FetchPosition,
    PartitionFetchAnswer,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)

log = structlog.get_logger(__name__)
PartitionKey = tuple[str, int]
REPLICA_STREAM_PATH = "/v1/internal/replica-stream"
REPLICA_FETCH_PATH = "/v1/internal/replica-fetch"  # one round per request, before the stream
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
        self._stream: aiohttp.ClientWebSocketResponse | None = None
        self._stream_url: str | None = None
        self._post_only: str | None = None  # a leader URL that has no stream route
        # The fetch session (fetch_sessions.py on the leader): its id and next epoch, the
        # positions the leader holds for us, partitions whose position it must hear
        # (`_dirty`), and partitions it must forget.
        self.session_id = NEW_SESSION
        self._session_epoch = 0
        self._sent: dict[PartitionKey, FetchPosition] = {}
        self._dirty: set[PartitionKey] = set()
        self._forgotten: set[PartitionKey] = set()
        # A partition whose last answer was an error sits out until then (loop time), so one
        # partition waiting for metadata does not turn the long-poll into a busy loop.
        self._backoff_until: dict[PartitionKey, float] = {}
        self.full_fetches = 0
        self.rounds = 0
        self._restart = False
        # Told when the leader's port refused a connection (fast failure detection).
        self.on_refused: Callable[[int], None] | None = None

    def add(self, partition: Partition) -> None:
        key = (partition.topic_id, partition.index)
        self.partitions[key] = partition
        self._backoff_until.pop(key, None)  # new metadata: try at once
        self._forgotten.discard(key)
        self._dirty.add(key)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"fetch-from-{self.leader_id}"
            )

    def restart_session(self) -> None:
        """Name every partition again in a new session from the next round (this broker
        was just unfenced: each leader records a fetch of every partition, so caught-up
        idle replicas rejoin the ISRs they were refused while fenced)."""
        self._restart = True
        self._changed.set()

    def remove(self, key: PartitionKey) -> None:
        if self.partitions.pop(key, None) is not None and key in self._sent:
            self._forgotten.add(key)
        self._backoff_until.pop(key, None)
        self._dirty.discard(key)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._drop_stream()

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            if not self.partitions and not self._forgotten:
                await self._drop_stream()  # nothing to fetch from this leader for now
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                await self._fetch_once()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - leader down or moving: metadata will tell
                log.debug("replica_fetch_failed", leader=self.leader_id, error=repr(exc))
                if _refused(exc):
                    self._post_only = None  # it may come back upgraded: try the stream again
                    if self.on_refused is not None:
                        self.on_refused(self.leader_id)  # its process is likely gone: say so
                self.session_id = NEW_SESSION  # it may have seen the request: start over
                if not isinstance(exc, KraftliteError):  # a refusal leaves the stream usable
                    await self._drop_stream()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    def _position(self, partition: Partition) -> FetchPosition | None:
        if partition.role is not Role.FOLLOWER or partition.leader_id != self.leader_id:
            return None  # metadata is moving it; the replica manager re-routes it
        return FetchPosition(
            partition.topic_id,
            partition.index,
            partition.leader_epoch,
            partition.log.log_end_offset,
            partition.log.latest_epoch,
            partition.log.log_start_offset,
        )

    def _request(self) -> tuple[ReplicaFetchRequest, dict[PartitionKey, FetchPosition]]:
        """The next fetch: every position when starting a session, else those that moved
        (and partitions back from a backoff), and what to forget.
        """
        if self._restart:
            self._restart = False
            self.session_id = NEW_SESSION
        now = asyncio.get_running_loop().time()
        expired = [k for k, until in self._backoff_until.items() if until <= now]
        for key in expired:
            del self._backoff_until[key]
            self._dirty.add(key)
        full = self.session_id == NEW_SESSION
        keys = self.partitions if full else self._dirty
        positions = {}
        for key in keys:
            partition = self.partitions.get(key)
            position = None if partition is None else self._position(partition)
            if position is not None:
                positions[key] = position
        request = ReplicaFetchRequest(
            self._broker_id,
            self._broker_epoch(),
            self._max_wait_ms,
            self._max_bytes,
            self.session_id,
            0 if full else self._session_epoch,
            tuple(positions.values()),
            () if full else tuple(self._forgotten),
            record_format=MAGIC_KAFKA if full else None,  # what this broker reads
        )
        return request, positions

    async def _fetch_once(self) -> None:
        url = self._leader_url(self.leader_id)
        if url is None:
            raise KraftliteError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "leader URL unknown")
        request, positions = self._request()
        self._changed.clear()
        raw = await self._round(url, request.encode())
        header, segments = framing.decode(raw)
        answer = ReplicaFetchResponse.from_json(header)
        self.rounds += 1
        if request.session_id == NEW_SESSION:
            self.full_fetches += 1
            self._sent = {}
            self._forgotten.clear()  # the new session holds only what we listed
            self._session_epoch = 1
        else:
            self._session_epoch += 1
        self.session_id = answer.session_id
        self._sent.update(positions)
        for key in request.forgotten:
            self._sent.pop(key, None)
            self._forgotten.discard(key)
        for key, sent in positions.items():
            partition = self.partitions.get(key)
            if partition is None:  # removed while the request was in flight
                self._forgotten.add(key)
            elif self._position(partition) == sent:
                self._dirty.discard(key)  # else it moved meanwhile: send it again
        adopting = []
        for item, data in zip(answer.partitions, segments, strict=True):
            if self._take(item, data):
                adopting.append(item)
        for item in adopting:  # after every append: these may wait for a worker thread
            await self._follow_log_start(item)

    async def _round(self, url: str, request: bytes) -> bytes:
        """One request and its answer over the stream to the leader at `url` (opened
        first if there is none, or it was to another address); by POST to a leader that
        has no stream (a version before it, during a rolling upgrade)."""
        if self._stream is None or self._stream.closed or self._stream_url != url:
            await self._drop_stream()
            if self._post_only == url:
                return await self._post(url, request)
            try:
                async with asyncio.timeout(self._max_wait_ms / 1000 + 10):  # a hung leader
                    self._stream = await self._session.ws_connect(
                        url + REPLICA_STREAM_PATH,
                        compress=0,
                        max_msg_size=0,  # answers are bounded by max_bytes plus the first batch
                        timeout=aiohttp.ClientWSTimeout(ws_close=1.0),
                    )
            except aiohttp.WSServerHandshakeError as exc:
                if exc.status in {404, 405}:
                    self._post_only = url
                raise
            self._stream_url = url
        await self._stream.send_bytes(request)
        answer = await self._stream.receive(timeout=self._max_wait_ms / 1000 + 10)
        if answer.type is aiohttp.WSMsgType.BINARY:
            return cast(bytes, answer.data)
        if answer.type is aiohttp.WSMsgType.TEXT:  # refused whole: a problem document
            raise error_from_problem(0, orjson.loads(answer.data))
        raise ConnectionResetError(f"replica stream to {self.leader_id} ended: {answer.type!r}")

    async def _post(self, url: str, request: bytes) -> bytes:
        async with self._session.post(
            url + REPLICA_FETCH_PATH,
            data=request,
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=self._max_wait_ms / 1000 + 10),
        ) as response:
            raw = await response.read()
            if response.status != 200:
                raise error_from_problem(response.status, orjson.loads(raw or b"null"))
        return raw

    async def _drop_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and not stream.closed:
            with contextlib.suppress(Exception):
                await stream.close()

    def _take(self, item: PartitionFetchAnswer, data: memoryview) -> bool:
        """Apply one partition's answer; whether the follower must then adopt the leader's
        log start (`_follow_log_start`)."""
        key = (item.topic_id, item.partition)
        partition = self.partitions.get(key)
        sent = self._sent.get(key)
        if partition is None or sent is None:
            return False
        before = self._position_facts(partition)
        try:  # one partition's failure must not stop the others
            failed = self._apply(partition, sent, item, data)
        except Exception as exc:  # noqa: BLE001 - logged; the partition backs off
            log.warning("replica_apply_failed", partition=partition.name, error=repr(exc))
            failed = True
        if failed:
            self._backoff_until[key] = asyncio.get_running_loop().time() + ERROR_BACKOFF_S
            return False
        if self._position_facts(partition) != before:
            self._dirty.add(key)  # the leader learns our new position in the next round
        return item.error_code is None and item.log_start_offset > partition.log.log_start_offset

    async def _follow_log_start(self, item: PartitionFetchAnswer) -> None:
        key = (item.topic_id, item.partition)
        partition, sent = self.partitions.get(key), self._sent.get(key)
        if partition is None or sent is None:
            return
        before = self._position_facts(partition)
        try:
            await partition.follow_log_start(item.log_start_offset, sent.leader_epoch)
        except Exception as exc:  # noqa: BLE001 - logged; the partition backs off
            log.warning("replica_log_start_failed", partition=partition.name, error=repr(exc))
            self._backoff_until[key] = asyncio.get_running_loop().time() + ERROR_BACKOFF_S
            return
        if self._position_facts(partition) != before:
            self._dirty.add(key)  # the leader hears our new log start (DeleteRecords waits)

    def log_start_moved(self, key: PartitionKey) -> None:
        """This replica's own retention moved its log start: the leader must hear it."""
        if key in self.partitions:
            self._dirty.add(key)
            self._changed.set()

    @staticmethod
    def _position_facts(partition: Partition) -> tuple[int, int, int]:
        log = partition.log
        return log.log_end_offset, log.latest_epoch, log.log_start_offset

    def _apply(
        self,
        partition: Partition,
        sent: FetchPosition,
        answer: PartitionFetchAnswer,
        data: memoryview,
    ) -> bool:
        """Apply one partition's answer; True if it was an error (back off). Records only
        when they answer the position this replica is still at: a compacted log's next
        batch may start above it (a cleaned gap), so an answer to a position it has left
        meanwhile could otherwise skip records (the position goes again next round; the
        high watermark is taken meanwhile, as the leader counts it told)."""
        epoch = sent.leader_epoch
        if len(data) and sent.fetch_offset != partition.log.log_end_offset:
            data = memoryview(b"")
        code = answer.error_code
        if code == ErrorCode.OFFSET_OUT_OF_RANGE.name:
            start = answer.log_start_offset
            if partition.log.log_end_offset < start:
                partition.reset_to_leader_start(start, epoch)
                return False
            return True
        if code is not None:
            return True  # NOT_LEADER / FENCED_LEADER_EPOCH: wait for metadata to move
        partition.append_from_leader(
            ReplicaFetchResult(
                answer.high_watermark,
                answer.log_start_offset,
                bytes(data),
                answer.diverging_epoch,
                answer.diverging_end_offset,
            ),
            epoch,
        )
        return False


def _refused(exc: BaseException) -> bool:
    """The leader's address refused the connection: nothing listens there any more."""
    return isinstance(exc, aiohttp.ClientConnectorError) and isinstance(
        exc.os_error, ConnectionRefusedError
    )
