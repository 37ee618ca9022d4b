"""Consumer (assign-only for now; group membership arrives with the group coordinator).

Fetches the assigned partitions from their leaders in the binary format, all at once, with
long-poll, and keeps a position per partition. A partition without a position starts at
`auto_offset_reset` (earliest or latest, Kafka's setting), and so does one whose position
fell out of the log (retention), as Kafka's consumer does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from kraftlite.client.transport import BATCH_TYPE, NO_FORWARD, Transport
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format

log = structlog.get_logger(__name__)
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


class Consumer:
    def __init__(
        self,
        bootstrap: str | list[str],
        *,
        auto_offset_reset: str = "latest",
        max_bytes_per_partition: int = 1 << 20,
        transport: Transport | None = None,
    ) -> None:
        if auto_offset_reset not in {"earliest", "latest"}:
            raise ValueError("auto_offset_reset must be earliest or latest")
        self.auto_offset_reset = auto_offset_reset
        self.max_bytes = max_bytes_per_partition
        self._transport = transport or Transport(bootstrap)
        self._positions: dict[TopicPartition, int | None] = {}

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._transport.close()

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
            self._positions[tp] = await self._offset_at(tp, "earliest")

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._positions):
            self._positions[tp] = await self._offset_at(tp, "latest")

    async def position(self, partition: TopicPartition) -> int:
        current = self._positions.get(partition)
        if current is None:
            current = await self._offset_at(partition, self.auto_offset_reset)
            self._positions[partition] = current
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
        for attempt in range(10):
            url = await self._transport.leader_url(topic, index)
            try:
                return await self._transport.request(
                    url, "GET", path, params=params, headers={**NO_FORWARD, **headers}
                )
            except KraftliteError as exc:
                if not exc.retriable or attempt == 9:
                    raise
            except (OSError, TimeoutError):
                self._transport.invalidate(topic)
                if attempt == 9:
                    raise
            await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
        raise AssertionError("unreachable")

    # -- fetching -------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Records from every assigned partition, waiting up to `timeout_ms` for some."""
        results = await asyncio.gather(
            *(self._fetch(tp, timeout_ms) for tp in self._positions), return_exceptions=True
        )
        records: list[ConsumerRecord] = []
        for tp, result in zip(list(self._positions), results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, KraftliteError | OSError | TimeoutError):
                    raise result
                log.debug("fetch_failed", partition=tp, error=repr(result))
                continue
            records.extend(result)
        return records

    async def _fetch(self, tp: TopicPartition, timeout_ms: int) -> list[ConsumerRecord]:
        topic, index = tp
        offset = await self.position(tp)
        try:
            data, _ = await self._leader_call(
                topic,
                index,
                f"/v1/topics/{topic}/partitions/{index}/records",
                {
                    "offset": str(offset),
                    "max_bytes": str(self.max_bytes),
                    "max_wait_ms": str(timeout_ms),
                },
                {"Accept": BATCH_TYPE},
            )
        except KraftliteError as exc:
            if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                reset = await self._offset_at(tp, self.auto_offset_reset)
                log.warning("offset_out_of_range", partition=tp, offset=offset, reset_to=reset)
                self._positions[tp] = reset
                return []
            raise
        records = [
            ConsumerRecord(topic, index, r.offset, r.timestamp, r.key, r.value, r.headers)
            for decoded in batch_format.decode_stream(data)
            for r in decoded.records()
            if r.offset >= offset
        ]
        if records and self._positions.get(tp) == offset:  # not moved by a seek meanwhile
            self._positions[tp] = records[-1].offset + 1
        return records

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            for record in await self.poll():
                yield record
