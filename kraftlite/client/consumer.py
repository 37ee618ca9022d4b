"""Consumer: in a group (`subscribe`), or on partitions it picks itself (`assign`).

Fetches the assigned partitions from their leaders in the binary format, all at once, with
long-poll, and keeps a position per partition. A partition without a position starts at the
group's committed offset, else at `auto_offset_reset` (earliest or latest, Kafka's setting),
and so does one whose position fell out of the log (retention), as Kafka's consumer does.

In a group the coordinator assigns partitions (server-side, KIP-848 style). A background task
heartbeats; a new assignment is taken at the start of the application's next `poll()` (as
Kafka's consumer rebalances inside poll): by then the application has finished the records of
the previous poll, so partitions taken away are committed where it really stopped (with
auto-commit) and dropped, new ones start at their committed offsets, and the next heartbeat
confirms the answer's epoch, which is what lets the coordinator give the dropped partitions
to another member. Auto-commit also runs inside poll, for the same reason. A member told it
is unknown or fenced, or out of contact for most of its session, drops everything at once
and joins again.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import structlog
from aiohttp import ClientError

from kraftlite.client.credentials import Credentials
from kraftlite.client.transport import NO_FORWARD, Transport
from kraftlite.clock import Clock, SystemClock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import stored
from kraftlite.protocol.headers import STORED_BATCHES_ACCEPT
from kraftlite.retry import Backoff, RetryPolicy, retriable

log = structlog.get_logger(__name__)
TopicPartition = tuple[str, int]
SESSION_SAFETY = 0.8  # stop consuming after this share of the session without contact


def _leader_retriable(exc: BaseException) -> bool:
    """A retriable answer, or a leader that did not answer (down or moving)."""
    return retriable(exc) or isinstance(exc, OSError | TimeoutError | ClientError)


# Reads from a partition's leader (offsets, fetches): 10 tries over about 5.5 s.
LEADER_CALL_RETRY = RetryPolicy(_leader_retriable, max_attempts=10, backoff=Backoff(0.05, 1.0))
_COORDINATOR_BUSY = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,  # a new coordinator replays its offsets
    ErrorCode.COORDINATOR_NOT_AVAILABLE,  # the offsets topic is being made
}
# A join, a commit or an offsets read while the coordinator is not ready: asked again (each
# is safe to repeat: the member id is the client's own, KIP-1082), for up to a minute
GROUP_CALL_RETRY = RetryPolicy(
    lambda exc: isinstance(exc, KraftliteError) and exc.code in _COORDINATOR_BUSY,
    timeout_s=60.0,
    backoff=Backoff(0.1, 2.0),
)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: batch_format.Headers  # (name, value) pairs; a value may be None (null)


class Consumer:
    def __init__(
        self,
        bootstrap: str | list[str],
        *,
        group_id: str | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int | None = None,
        client_id: str = "kraftlite-python",
        max_bytes_per_partition: int = 1 << 20,
        transport: Transport | None = None,
        credentials: Credentials | None = None,
        clock: Clock | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        if auto_offset_reset not in {"earliest", "latest"}:
            raise ValueError("auto_offset_reset must be earliest or latest")
        if isolation_level not in {"read_uncommitted", "read_committed"}:
            raise ValueError("isolation_level must be read_uncommitted or read_committed")
        # Kafka's isolation.level: read_committed never returns a record of an aborted
        # transaction, nor one past the last stable offset
        self.isolation_level = isolation_level
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.session_timeout_ms = session_timeout_ms
        self.client_id = client_id
        self.max_bytes = max_bytes_per_partition
        self._clock: Clock = clock or SystemClock()
        self._transport = transport or Transport(
            bootstrap, credentials=credentials, clock=self._clock
        )
        self._positions: dict[TopicPartition, int | None] = {}
        self._topics: list[str] = []
        self.member_id: str | None = None
        self.member_epoch = 0
        self._heartbeat_interval_s = 1.0
        self._membership: asyncio.Task[None] | None = None
        self._pending_answer: dict[str, Any] | None = None
        self._last_auto_commit = 0.0
        self._session_s = (session_timeout_ms or 10_000) / 1000
        self._last_contact = 0.0
        self._committed_positions: dict[TopicPartition, int] = {}

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group, close connections."""
        if self._membership is not None:  # (not awaited as a task result: never raises)
            self._membership.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._membership
            self._membership = None
        if self.member_id is not None and self.group_id is not None:
            if self.enable_auto_commit:
                with contextlib.suppress(KraftliteError, OSError, TimeoutError, ClientError):
                    await self.commit()
            self._positions = {}  # holds nothing from here on: then it may leave
            with contextlib.suppress(KraftliteError, OSError, TimeoutError, ClientError):
                await self._transport.call(
                    "DELETE", f"/v1/groups/{self.group_id}/members/{self.member_id}"
                )
            self.member_id = None
        await self._transport.close()

    # -- the group ------------------------------------------------------------------------

    async def subscribe(self, topics: list[str]) -> None:
        """Join the group (`group_id`) for `topics`; partitions arrive with heartbeats."""
        if self.group_id is None:
            raise ValueError("subscribe needs a group_id")
        self._topics = list(topics)
        self._positions = {}
        await self._join()
        self._membership = asyncio.get_running_loop().create_task(self._membership_loop())

    async def _join(self) -> None:
        # The member id is ours (KIP-1082): a join retried after a lost answer is the same
        # member, not a second one holding partitions until it expires.
        member_id = uuid.uuid4().hex
        body: dict[str, Any] = {
            "topics": self._topics,
            "client_id": self.client_id,
            "member_id": member_id,
        }
        if self.session_timeout_ms is not None:
            body["session_timeout_ms"] = self.session_timeout_ms
        started = self._now_s()
        answer = await self._group_call("POST", f"/v1/groups/{self.group_id}/members", body)
        self.member_id = answer["member_id"]
        self.member_epoch = 0
        self._session_s = int(answer.get("session_timeout_ms", 10_000)) / 1000
        self._last_contact = started
        await self._apply(answer)

    def _now_s(self) -> float:
        """Monotonic seconds on the consumer's clock (contact and auto-commit times)."""
        return self._clock.monotonic_ms() / 1000

    def _session_lapsed(self) -> bool:
        """Rule: a member that has not reached its coordinator for most of its session
        stops consuming on its own: the coordinator may already have expired it and handed
        its partitions on (the client-side half of "never two owners").
        """
        elapsed = self._now_s() - self._last_contact
        return self.member_id is not None and elapsed > self._session_s * SESSION_SAFETY

    def _release_all(self, why: str) -> None:
        if self._positions:
            log.warning("group_partitions_released", group=self.group_id, reason=why)
        self._positions = {}
        self._pending_answer = None

    def _answer_changes_assignment(self, answer: dict[str, Any]) -> bool:
        assigned = {(e["topic"], p) for e in answer["assignment"] for p in e["partitions"]}
        return assigned != set(self._positions)

    async def _membership_loop(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval_s)
            try:
                if self.member_id is None or self._session_lapsed():
                    self._release_all("no contact with the coordinator for the session")
                    await self._join()
                    continue
                sent = self._now_s()
                answer = await self._transport.call(
                    "POST",
                    f"/v1/groups/{self.group_id}/members/{self.member_id}/heartbeat",
                    {"member_epoch": self.member_epoch},
                    timeout_s=self._session_s / 3,
                )
                self._last_contact = sent
                self._heartbeat_interval_s = int(answer["heartbeat_interval_ms"]) / 1000
                if self._answer_changes_assignment(answer):
                    self._pending_answer = answer  # taken at the next poll()
                else:
                    self._pending_answer = None  # (a newer answer undid an unapplied one)
                    self.member_epoch = int(answer["member_epoch"])
            except KraftliteError as exc:
                if exc.code in {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH}:
                    self._release_all(str(exc))  # before joining again
                    self.member_id = None
                else:
                    log.debug("heartbeat_failed", group=self.group_id, error=str(exc))
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one failure
                log.debug("heartbeat_failed", group=self.group_id, error=repr(exc))

    async def _between_polls(self) -> None:
        """Group work that must happen while the application holds no records: it called
        poll() again, so it is done with the previous ones.
        """
        if self._session_lapsed():
            self._release_all("no contact with the coordinator for the session")
            return
        answer, self._pending_answer = self._pending_answer, None
        if answer is not None:
            await self._apply(answer)
        now = self._now_s()
        if self.enable_auto_commit and now - self._last_auto_commit >= self.auto_commit_interval_s:
            self._last_auto_commit = now
            with contextlib.suppress(KraftliteError, OSError, TimeoutError, ClientError):
                await self.commit()

    async def _apply(self, answer: dict[str, Any]) -> None:
        """Take the assignment of a join or heartbeat answer."""
        self._heartbeat_interval_s = int(answer["heartbeat_interval_ms"]) / 1000
        assigned = {
            (entry["topic"], p) for entry in answer["assignment"] for p in entry["partitions"]
        }
        # Stop consuming what is taken away first (a fetch in flight now returns nothing for
        # it), then commit where we stopped: we still own it until the next heartbeat.
        revoked = {
            tp: self._positions.pop(tp) for tp in list(self._positions) if tp not in assigned
        }
        final = {tp: pos for tp, pos in revoked.items() if pos is not None}
        if final and self.enable_auto_commit:
            with contextlib.suppress(KraftliteError, OSError, TimeoutError):
                await self.commit(final)
        added = [tp for tp in sorted(assigned) if tp not in self._positions]
        if added:
            committed = await self.committed()
            for tp in added:
                self._positions[tp] = committed.get(tp)  # None: auto_offset_reset
        self.member_epoch = int(answer["member_epoch"])

    async def committed(self) -> dict[TopicPartition, int]:
        """The group's committed offsets."""
        answer = await self._group_call("GET", f"/v1/groups/{self.group_id}/offsets")
        return {(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]}

    async def _group_call(self, method: str, path: str, body: Any = None) -> Any:
        async for attempt in GROUP_CALL_RETRY.run_async(self._clock):
            with attempt:
                return await self._transport.call(method, path, body)
        raise AssertionError("unreachable: the attempts end in a return or an error")

    async def commit(
        self,
        offsets: dict[TopicPartition, int] | None = None,
        *,
        partitions: list[TopicPartition] | None = None,
    ) -> None:
        """Commit `offsets` (default: the current positions of the assigned partitions)."""
        if self.group_id is None:
            raise ValueError("commit needs a group_id")
        if offsets is None:
            chosen = partitions if partitions is not None else list(self._positions)
            offsets = {
                tp: pos
                for tp in chosen
                if (pos := self._positions.get(tp)) is not None
                and self._committed_positions.get(tp) != pos
            }
        if not offsets:
            return
        body: dict[str, Any] = {
            "offsets": [
                {"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())
            ]
        }
        if self.member_id is not None:
            body |= {"member_id": self.member_id, "member_epoch": self.member_epoch}
        await self._group_call("POST", f"/v1/groups/{self.group_id}/offsets", body)
        self._committed_positions.update(offsets)

    # -- assignment and positions ---------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._positions = {tp: self._positions.get(tp) for tp in partitions}

    def assignment(self) -> list[TopicPartition]:
        return list(self._positions)

    async def assign_topic(self, topic: str) -> None:
        """Assign every partition of `topic`."""
        infos = await self._transport.partitions(topic, refresh=True)
        self.assign([(topic, info.partition) for info in infos])

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._positions[partition] = offset

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._positions):
            self._set_if_assigned(tp, await self._offset_at(tp, "earliest"))

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._positions):
            self._set_if_assigned(tp, await self._offset_at(tp, "latest"))

    def _set_if_assigned(self, tp: TopicPartition, offset: int) -> None:
        """A position found after an await lands only if the partition is still ours (the
        group may have taken it away meanwhile)."""
        if tp in self._positions:
            self._positions[tp] = offset

    async def position(self, partition: TopicPartition) -> int:
        current = self._positions.get(partition)
        if current is None:
            current = await self._offset_at(partition, self.auto_offset_reset)
            if partition in self._positions and self._positions[partition] is None:
                self._positions[partition] = current  # still ours, and not set meanwhile
        return current

    async def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """The first offset whose timestamp is at or after each time (the end if none)."""
        return {tp: await self._offset_at(tp, str(ts)) for tp, ts in timestamps.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: await self._offset_at(tp, "latest") for tp in partitions}

    async def _offset_at(self, partition: TopicPartition, at: str) -> int:
        topic, index = partition
        answer = await self._leader_call(
            topic, index, f"/v1/topics/{topic}/partitions/{index}/offsets", {"at": at}, {}
        )
        return int(answer["offset"])

    async def _leader_call(
        self, topic: str, index: int, path: str, params: dict[str, str], headers: dict[str, str]
    ) -> Any:
        """A GET on the partition's leader, through leadership changes. Looking the leader
        up is outside the attempt: its errors surface at once (it has retries of its own)."""
        async for attempt in LEADER_CALL_RETRY.run_async(self._clock):
            url = await self._transport.leader_url(topic, index)
            with attempt:
                try:
                    return await self._transport.request(
                        url, "GET", path, params=params, headers={**NO_FORWARD, **headers}
                    )
                except (OSError, TimeoutError, ClientError):
                    self._transport.invalidate(topic)  # who leads now?
                    raise
        raise AssertionError("unreachable: the attempts end in a return or an error")

    # -- fetching -------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Records from every assigned partition, waiting up to `timeout_ms` for some."""
        if self.group_id is not None:
            await self._between_polls()
        if not self._positions:  # nothing assigned (yet): wait, as a poll would
            await asyncio.sleep(timeout_ms / 1000)
            return []
        fetched = list(self._positions)  # the group may change the assignment meanwhile
        results = await asyncio.gather(
            *(self._fetch(tp, timeout_ms) for tp in fetched), return_exceptions=True
        )
        records: list[ConsumerRecord] = []
        for tp, result in zip(fetched, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, KraftliteError | OSError | TimeoutError | ClientError):
                    raise result
                log.debug("fetch_failed", partition=tp, error=repr(result))
                continue
            offset, fetched_records, end = result
            # Deliver and advance together, and only if the partition is still ours at the
            # position fetched from: a position (and so a commit) never runs ahead of what
            # the application was given (past a transaction's markers, which hold none).
            if end > offset and self._positions.get(tp) == offset:
                records.extend(fetched_records)
                self._positions[tp] = end
        return records

    async def _fetch(
        self, tp: TopicPartition, timeout_ms: int
    ) -> tuple[int, list[ConsumerRecord], int]:
        """(the position fetched from, the records from it, the offset after the batches
        read)."""
        topic, index = tp
        offset = await self.position(tp)
        try:
            data, headers = await self._leader_call(
                topic,
                index,
                f"/v1/topics/{topic}/partitions/{index}/records",
                {
                    "offset": str(offset),
                    "max_bytes": str(self.max_bytes),
                    "max_wait_ms": str(timeout_ms),
                    "isolation": self.isolation_level,
                },
                {"Accept": STORED_BATCHES_ACCEPT},  # kept Kafka batches too, decoded here
            )
        except KraftliteError as exc:
            if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                reset = await self._offset_at(tp, self.auto_offset_reset)
                log.warning("offset_out_of_range", partition=tp, offset=offset, reset_to=reset)
                if tp in self._positions:
                    self._positions[tp] = reset
                return offset, [], offset
            raise
        # past what the leader left out (markers, aborted transactions); an older broker
        # sends no header: the batches' own end
        end = int(headers.get("X-Kraftlite-Next-Offset", -1))
        if end < 0:
            end = batch_format.next_offset_after(data) if data else offset
        if stored.kafka_bytes(data):  # compressed batches: decoded off the loop
            got, cut = await asyncio.to_thread(_records, tp, data, offset, self.max_bytes)
        else:
            got, cut = _records(tp, data, offset, self.max_bytes)
        return offset, got, end if cut is None else cut

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            for record in await self.poll():
                yield record


def _records(
    tp: TopicPartition, data: bytes, offset: int, max_bytes: int
) -> tuple[list[ConsumerRecord], int | None]:
    """The records from `offset` on in a fetch answer, built straight from each batch's
    columns: one object per record and no Python loop of our own. A Kafka batch kept as
    sent is decompressed here (protocol/stored.py), so decoding stops once the batches
    decoded come to `max_bytes` (one at least), as the leader cuts converted answers: the
    offset after the last one decoded is then the second value (else None), where the
    next fetch goes on (a few KB of zstd can hold a GB of records)."""
    topic, index = tp
    records: list[ConsumerRecord] = []
    decoded_bytes = 0
    for view in batch_format.split_batches(data):
        if decoded_bytes >= max_bytes:
            return records, batch_format.read_header(view).base_offset
        columns = stored.columnar(view)
        decoded_bytes += len(columns)
        decoded = batch_format.decode(columns)
        if batch_format.is_control(decoded.header):
            continue  # a transaction's marker: no record (Kafka's consumers skip it too)
        base, count = decoded.header.base_offset, decoded.header.record_count
        skip = max(offset - base, 0)  # a batch can start before the position asked for
        if skip >= count:
            continue
        records.extend(
            map(
                ConsumerRecord,
                repeat(topic),
                repeat(index),
                range(base + skip, base + count),
                decoded.timestamps[skip:],
                decoded.keys[skip:],
                decoded.values[skip:],
                decoded.headers[skip:],
            )
        )
    return records, None
