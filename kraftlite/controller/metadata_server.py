"""Brokers follow the metadata log here, by offset (KRaft's brokers fetch the metadata topic).

Rules:
1. A fetch names the last version the broker applied. Any controller answers from its own
   replica of the log: the committed batches after that version, as the bytes that were
   proposed through Raft, spliced into the answer without decoding or re-encoding them.
2. A broker further behind than the batches this controller keeps in memory (it restarted
   from a Raft snapshot, or the broker was away for a long time) gets a snapshot of the
   image instead, then follows the batches after it. A snapshot is serialised once per
   version, off the event loop, and shared by every broker that needs it.
3. Nothing new: the fetch waits (long-poll) up to its `max_wait_ms`, then answers empty.
"""

from __future__ import annotations

import asyncio

import orjson
from msgspec import Raw

from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.views import image_to_json
from kraftlite.protocol.internal import MetadataFetchRequest, MetadataFetchResponse
from kraftlite.raft.pysyncobj_log import RaftMetadataLog


class MetadataServer:
    def __init__(self, log: RaftMetadataLog) -> None:
        self._log = log
        self._snapshot: tuple[int, asyncio.Future[bytes]] | None = None
        self.snapshots_served = 0
        self.batches_served = 0

    async def fetch(self, request: MetadataFetchRequest) -> bytes:
        image = await self._log.wait_for_change(request.after_version, request.max_wait_ms / 1000)
        if request.after_version >= image.version:
            return MetadataFetchResponse[Raw](image.version).encode()
        batches = self._log.batches_after(request.after_version, request.max_bytes)
        if batches is not None:
            self.batches_served += len(batches)
            return MetadataFetchResponse(image.version, tuple(map(Raw, batches))).encode()
        self.snapshots_served += 1
        snapshot = await asyncio.shield(self._snapshot_of(image))  # shared by all waiters
        return MetadataFetchResponse(image.version, snapshot=Raw(snapshot)).encode()

    def _snapshot_of(self, image: MetadataImage) -> asyncio.Future[bytes]:
        cached = self._snapshot
        if cached is not None and cached[0] == image.version:
            return cached[1]
        future = asyncio.ensure_future(asyncio.to_thread(_serialise, image))
        self._snapshot = (image.version, future)
        return future


def _serialise(image: MetadataImage) -> bytes:
    return orjson.dumps(image_to_json(image))
