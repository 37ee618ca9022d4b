"""HTTP to a kraftlite cluster for the client: bootstrap URLs, problem+json back into typed
errors, and partition metadata (who leads what) with refresh.

Rules:
1. Any broker answers admin and metadata calls; a call moves to the next bootstrap URL when
   one does not answer.
2. Partition calls go straight to the leader with `X-Kraftlite-No-Forward: 1`; a 421 answer
   names the new leader and marks the cached metadata stale (Kafka clients do the same on
   NOT_LEADER_OR_FOLLOWER).
3. Errors are `KraftliteError`s carrying the API's error code and its retriable flag.
4. Retries follow kraftlite.retry (one policy, time on the injected Clock): a call tries
   each bootstrap URL once from the one that last answered; a topic's description is asked
   again while its error is retriable; a partition without a leader is looked up again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from kraftlite.client.credentials import NONE, Credentials
from kraftlite.clock import Clock, SystemClock
from kraftlite.errors import ErrorCode, KraftliteError, error_from_problem
from kraftlite.protocol import headers
from kraftlite.protocol.headers import BATCH_TYPE
from kraftlite.retry import NO_WAIT, Backoff, NotYet, RetryPolicy, not_yet, retriable

NO_FORWARD = {headers.NO_FORWARD: "1"}
METADATA_ATTEMPTS = 20


def _ask_another(exc: BaseException) -> bool:
    """A bootstrap broker that did not answer, or is starting: the next one may."""
    if isinstance(exc, KraftliteError):
        return exc.code is ErrorCode.BROKER_NOT_AVAILABLE
    return isinstance(exc, aiohttp.ClientConnectionError | TimeoutError)


def _none_answered(last: Exception) -> KraftliteError:
    return KraftliteError(ErrorCode.REQUEST_TIMED_OUT, f"no bootstrap broker answered: {last!r}")


# One round over the bootstrap URLs, no wait: callers have retries of their own.
BOOTSTRAP_RETRY = RetryPolicy(
    _ask_another, max_attempts=1, backoff=NO_WAIT, exhausted=_none_answered
)
# A topic created a moment ago may not have reached every broker yet: 20 tries whose waits
# add up to about 10 s (0.05 s doubling, at most 0.6 s).
DESCRIBE_RETRY = RetryPolicy(retriable, max_attempts=METADATA_ATTEMPTS, backoff=Backoff(0.05, 0.6))
# A partition whose leader is being elected: asked again, 20 tries over about 15 s.
LEADER_RETRY = RetryPolicy(not_yet, max_attempts=20, backoff=Backoff(0.05, 1.0))


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
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
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
        headers: dict[str, str] | None = None,
        **params: str,
    ) -> Any:
        """JSON call on any broker (the next one when one does not answer)."""
        count = len(self.bootstrap)
        order = [(self._preferred + i) % count for i in range(count)]
        async for attempt in BOOTSTRAP_RETRY.run_async(self.clock, lambda: order):
            with attempt:
                index = attempt.target
                result = await self.request(
                    self.bootstrap[index],
                    method,
                    path,
                    body,
                    params,
                    headers=headers,
                    timeout_s=timeout_s,
                )
                self._preferred = index
                return result
        raise AssertionError("unreachable: the attempts end in a return or an error")

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
        async for attempt in DESCRIBE_RETRY.run_async(self.clock):
            with attempt:
                return await self.call("GET", f"/v1/topics/{topic}")
        raise AssertionError("unreachable: the attempts end in a return or an error")

    async def leader_url(self, topic: str, partition: int) -> str:
        """The partition's leader; while it has none (an election), the metadata is asked
        again. Any error of the lookup itself surfaces at once (it has its own retries)."""
        async for attempt in LEADER_RETRY.run_async(self.clock):
            with attempt:
                infos = await self.partitions(topic, refresh=attempt.number > 0)
                if not 0 <= partition < len(infos):
                    raise KraftliteError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"{topic} has {len(infos)} partitions, not {partition + 1}",
                    )
                url = infos[partition].leader_url
                if url is None:
                    raise NotYet(
                        ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} has no leader"
                    )
                return url
        raise AssertionError("unreachable: the attempts end in a return or an error")
