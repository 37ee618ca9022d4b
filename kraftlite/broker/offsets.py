"""A partition's offsets (log start, high watermark) as its leader knows them, asked of the
leader: read here when this broker leads the partition, else one `/v1/internal/offsets` call
per (leader, topic), bounded in time. A partition whose leader is unknown or does not answer
in time is left out of the answer rather than failing it: callers show it as unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

import aiohttp
import orjson
import structlog

from kraftlite.errors import KraftliteError

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker

log = structlog.get_logger(__name__)
TopicPartition = tuple[str, int]
TIMEOUT_S = 2.0


class Offsets(NamedTuple):
    log_start_offset: int
    high_watermark: int


async def leader_offsets(
    broker: Broker, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, Offsets]:
    replicas = broker.replicas
    result: dict[TopicPartition, Offsets] = {}
    remote: dict[tuple[int, str], set[int]] = {}
    for topic, index in partitions:
        try:
            local = replicas.leader_partition(topic, index)
        except KraftliteError as exc:
            leader = exc.details.get("leader_id")
            if isinstance(leader, int) and leader >= 0:
                remote.setdefault((leader, topic), set()).add(index)
            continue
        result[(topic, index)] = Offsets(local.log.log_start_offset, local.log.high_watermark)

    async def ask(leader: int, topic: str, indexes: set[int]) -> None:
        url = replicas.broker_url(leader)
        if url is None:
            return
        try:
            async with broker.session.get(
                url + "/v1/internal/offsets",
                params={"topic": topic},
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
            ) as response:
                if response.status != 200:
                    return
                answer = orjson.loads(await response.read())
            for key, value in answer["partitions"].items():
                if int(key) in indexes:
                    result[(topic, int(key))] = Offsets(
                        int(value["log_start_offset"]), int(value["high_watermark"])
                    )
        except (
            aiohttp.ClientError,
            TimeoutError,
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
        ) as exc:
            log.info("offsets_not_learned", leader=leader, topic=topic, error=repr(exc))

    await asyncio.gather(*(ask(leader, t, ixs) for (leader, t), ixs in remote.items()))
    return result


def local_offsets(broker: Broker, topic: str) -> dict[int, Offsets]:
    """The offsets of the topic's partitions this broker leads (what `/v1/internal/offsets`
    answers): O(the topic's partitions), looked up through metadata, never a scan of every
    replica held here."""
    replicas = broker.replicas
    image = replicas.image.topic(topic)
    if image is None:
        return {}
    result = {}
    for index in image.partitions:
        partition = replicas.partitions.get((image.topic_id, index))
        if partition is not None and partition.serving_as_leader:
            result[index] = Offsets(partition.log.log_start_offset, partition.log.high_watermark)
    return result
