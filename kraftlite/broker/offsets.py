"""A partition's offsets (log start, high watermark) as its leader knows them, asked of the
leader: read here when this broker leads the partition, else one `/v1/internal/offsets` call
per (leader, topic), bounded in time.

Rules:
1. A partition whose leader is unknown or does not answer in time is left out of the answer
   rather than failing it: callers show it as unknown.
2. The node call is typed both ways (protocol/internal.py's OffsetsRequest and
   OffsetsResponse): an answer that is not one, or is about another topic, counts as no
   answer (rule 1); only the partitions asked of that leader are taken from it.
3. Work over many partitions on the event loop yields to it every CHUNK of them (`paced`):
   a scrape or a console page naming 100,000 partitions must not hold every other request.
4. `committed` also asks each partition's last stable offset (read_committed's end, issue
   27): the leader builds its producer state first if this leader epoch has not (a
   transaction left open by the last leader holds it back, as Kafka's ListOffsets for
   read_committed). An older broker's answer without it leaves it None.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Final, NamedTuple, TypeVar

import aiohttp
import structlog

from kraftlite.errors import KraftliteError
from kraftlite.protocol.internal import (
    MessageError,
    OffsetsRequest,
    OffsetsResponse,
    PartitionOffsets,
)

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker
    from kraftlite.broker.partition import Partition

log = structlog.get_logger(__name__)
TopicPartition = tuple[str, int]
TIMEOUT_S = 2.0
CHUNK: Final = 1_000  # items handled between two yields to the event loop (rule 3)
T = TypeVar("T")


class Offsets(NamedTuple):
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int | None = None  # when asked for (rule 4)


async def paced(items: Sequence[T], size: int = CHUNK) -> AsyncIterator[Sequence[T]]:
    """Rule 3: `items` in slices of `size`, yielding to the event loop between two slices.
    The caller passes a snapshot (a list it made): what it iterates may change meanwhile."""
    for start in range(0, len(items), size):
        if start:
            await asyncio.sleep(0)
        yield items[start : start + size]


async def leader_offsets(
    broker: Broker, partitions: Iterable[TopicPartition], *, committed: bool = False
) -> dict[TopicPartition, Offsets]:
    replicas = broker.replicas
    result: dict[TopicPartition, Offsets] = {}
    remote: dict[tuple[int, str], set[int]] = {}
    async for chunk in paced(list(partitions)):
        for topic, index in chunk:
            try:
                local = replicas.leader_partition(topic, index)
            except KraftliteError as exc:
                leader = exc.details.get("leader_id")
                if isinstance(leader, int) and leader >= 0:
                    remote.setdefault((leader, topic), set()).add(index)
                continue
            result[(topic, index)] = await _offsets_of(local, committed)

    async def ask(leader: int, topic: str, indexes: set[int]) -> None:
        url = replicas.broker_url(leader)
        if url is None:
            return
        try:
            async with broker.session.get(
                url + "/v1/internal/offsets",
                params=OffsetsRequest(topic, committed).to_params(),
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
            ) as response:
                if response.status != 200:
                    log.info(
                        "offsets_not_learned", leader=leader, topic=topic, status=response.status
                    )
                    return
                answer = OffsetsResponse.decode(await response.read())
        except (aiohttp.ClientError, TimeoutError, MessageError) as exc:
            log.info("offsets_not_learned", leader=leader, topic=topic, error=repr(exc))
            return
        if answer.topic != topic:
            log.info("offsets_not_learned", leader=leader, topic=topic, answered=answer.topic)
            return
        for found in answer.partitions:
            if found.partition in indexes:
                result[(topic, found.partition)] = Offsets(
                    found.log_start_offset, found.high_watermark, found.last_stable_offset
                )

    await asyncio.gather(*(ask(leader, t, ixs) for (leader, t), ixs in remote.items()))
    return result


async def _offsets_of(partition: Partition, committed: bool) -> Offsets:
    log_ = partition.log
    if not committed:
        return Offsets(log_.log_start_offset, log_.high_watermark)
    await partition.transactions()  # rule 4
    return Offsets(
        log_.log_start_offset, log_.high_watermark, partition.last_stable_offset(known=True)
    )


async def local_offsets(
    broker: Broker, topic: str, *, committed: bool = False
) -> dict[int, Offsets]:
    """The offsets of the topic's partitions this broker leads (what `/v1/internal/offsets`
    answers): O(the topic's partitions), looked up through metadata, never a scan of every
    replica held here."""
    replicas = broker.replicas
    image = replicas.image.topic(topic)
    if image is None:
        return {}
    result = {}
    async for chunk in paced(list(image.partitions)):
        for index in chunk:
            partition = replicas.partitions.get((image.topic_id, index))
            if partition is not None and partition.serving_as_leader:
                result[index] = await _offsets_of(partition, committed)
    return result


def offsets_answer(topic: str, local: dict[int, Offsets]) -> OffsetsResponse:
    """`local_offsets` as the node call answers it (rule 2)."""
    return OffsetsResponse(
        topic,
        tuple(
            PartitionOffsets(index, o.log_start_offset, o.high_watermark, o.last_stable_offset)
            for index, o in local.items()
        ),
    )
