"""HTTP to a kraftlite cluster for the client: bootstrap URLs, problem+json back into typed
errors, and partition metadata (who leads what) with refresh.

Rules:
1. Any broker answers admin and metadata calls; a call moves to the next bootstrap URL when
   one does not answer.
2. Partition calls go straight to the leader with `X-Kraftlite-No-Forward: 1`; a 421 answer
   names the new leader and marks the cached metadata stale (Kafka clients do the same on
   NOT_LEADER_OR_FOLLOWER).
3. Errors are `KraftliteError`s carrying the API's error code and its retriable flag.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from kraftlite.client.credentials import NONE, Credentials
from kraftlite.errors import ErrorCode, KraftliteError, error_from_problem
from kraftlite.protocol import headers
from kraftlite.protocol.headers import BATCH_TYPE

NO_FORWARD = {headers.NO_FORWARD: "1"}
METADATA_ATTEMPTS = 20  # about 10 s in all


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_url: str | None


class Transport:
    def __init__(
        self,
        bootstrap: str | list[str],
        *,
        request_timeout_s: float = 30.0,
        credentials: Credentials | None = None,
    ) -> None:
        self.credentials = credentials or NONE
        self._auth_headers = self.credentials.headers()
        urls = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
        self.bootstrap = [u.strip().rstrip("/") for u in urls if u.strip()]
        if not self.bootstrap:
            raise ValueError("at least one bootstrap URL is needed")
        self.request_timeout_s = request_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._preferred = 0
        self._partitions: dict[str, list[PartitionInfo]] = {}

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            context = self.credentials.ssl_context()
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=64, ssl=True if context is None else context),
                timeout=aiohttp.ClientTimeout(total=self.request_timeout_s),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # -- any broker -----------------------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout_s: float | None = None,
        **params: str,
    ) -> Any:
        """JSON call on any broker (the next one when one does not answer)."""
        last: Exception | None = None
        for attempt in range(len(self.bootstrap)):
            index = (self._preferred + attempt) % len(self.bootstrap)
            try:
                result = await self.request(
                    self.bootstrap[index], method, path, body, params, timeout_s=timeout_s
                )
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                last = exc
                continue
            except KraftliteError as exc:
                if exc.code is not ErrorCode.BROKER_NOT_AVAILABLE:  # starting: ask another
                    raise
                last = exc
                continue
            self._preferred = index
            return result
        raise KraftliteError(ErrorCode.REQUEST_TIMED_OUT, f"no bootstrap broker answered: {last!r}")

    async def request(
        self,
        base_url: str,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """One call; a JSON answer parsed, or raw bytes for a binary answer."""
        payload = data if data is not None else None if body is None else orjson.dumps(body)
        all_headers = {
            "Content-Type": "application/json",
            **self._auth_headers,
            **(headers or {}),
        }
        timeout = None if timeout_s is None else aiohttp.ClientTimeout(total=timeout_s)
        async with self.session.request(
            method,
            base_url + path,
            data=payload,
            params=params,
            headers=all_headers,
            timeout=timeout,
        ) as response:
            raw = await response.read()
            if response.status >= 400:
                try:
                    problem = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    problem = raw[:200].decode("utf-8", "replace")
                error = error_from_problem(response.status, problem)
                if error.code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    self.invalidate()
                raise error
            if response.content_type == BATCH_TYPE:
                return raw, dict(response.headers)
            return orjson.loads(raw) if raw else None

    # -- metadata -------------------------------------------------------------------------

    def invalidate(self, topic: str | None = None) -> None:
        if topic is None:
            self._partitions.clear()
        else:
            self._partitions.pop(topic, None)

    def known_partition_count(self, topic: str) -> int:
        """Partitions of `topic` as last seen (0 if not looked up yet)."""
        return len(self._partitions.get(topic, ()))

    async def partitions(self, topic: str, *, refresh: bool = False) -> list[PartitionInfo]:
        """The topic's partitions and their leaders (cached until a 421 or `refresh`)."""
        if refresh or topic not in self._partitions:
            described = await self._describe(topic)
            cluster = await self.call("GET", "/v1/cluster")
            urls = {b["id"]: b["url"] for b in cluster["brokers"]}
            self._partitions[topic] = [
                PartitionInfo(p["partition"], p["leader"], urls.get(p["leader"]))
                for p in described["partitions"]
            ]
        return self._partitions[topic]

    async def _describe(self, topic: str) -> Any:
        for attempt in range(METADATA_ATTEMPTS):
            try:  # a topic created a moment ago may not have reached every broker yet
                return await self.call("GET", f"/v1/topics/{topic}")
            except KraftliteError as exc:
                if not exc.retriable or attempt == METADATA_ATTEMPTS - 1:
                    raise
            await asyncio.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    async def leader_url(self, topic: str, partition: int) -> str:
        for attempt in range(20):
            infos = await self.partitions(topic, refresh=attempt > 0)
            if not 0 <= partition < len(infos):
                raise KraftliteError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"{topic} has {len(infos)} partitions, not {partition + 1}",
                )
            url = infos[partition].leader_url
            if url is not None:
                return url
            await asyncio.sleep(min(0.05 * 2**attempt, 1.0))  # electing a leader
        raise KraftliteError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} has no leader")
