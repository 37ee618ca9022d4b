"""The broker's calls to the controller quorum, over HTTP, with failover.

Any controller forwards a write to the active one, so a call goes to the controller that
last answered, and on a connection error or NOT_CONTROLLER without a leader it moves to the
next URL. A controller that does not answer (hung, paused, cut off) is tried last by
later calls for a few seconds, and `attempt_timeout_s` bounds how long one attempt waits on it, so a
hung controller cannot hold heartbeats until the session runs out. Errors with an API
code come back as KraftliteError. The failover is a kraftlite.retry policy: rounds over the
controllers until the call's deadline, a short pause between rounds, time on the Clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import aiohttp
import orjson

from kraftlite.clock import Clock, SystemClock
from kraftlite.errors import ErrorCode, KraftliteError, error_from_problem
from kraftlite.retry import Backoff, RetryPolicy, codes

SUSPECT_MS = 5_000  # a controller that did not answer is tried last for this long
# Rounds over the controllers (each tries every one known when it starts) until the call's
# deadline (`timeout_s`, set per call); 0.1 s between rounds. Only these answers move on to
# the next controller: any other is the quorum's answer.
FAILOVER = RetryPolicy(
    codes(ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT),
    timeout_s=15.0,
    backoff=Backoff(0.1, 0.1),
)
MIN_ATTEMPT_S = 0.1  # the last attempt before the deadline still gets this long


class ControllerClient:
    def __init__(
        self, urls: tuple[str, ...], session: aiohttp.ClientSession, clock: Clock | None = None
    ) -> None:
        self._configured = urls
        self._learned: tuple[str, ...] = ()
        self._session = session
        self._clock: Clock = clock or SystemClock()
        self._preferred: str | None = None
        self._suspect_until: dict[str, int] = {}  # url -> the clock's monotonic ms

    @property
    def urls(self) -> tuple[str, ...]:
        """The configured controllers, then the ones learned from metadata."""
        return (*self._configured, *self._learned)

    def learn(self, urls: Iterable[str]) -> None:
        """The current voters' URLs as the metadata names them (voters added since this
        broker started; removed ones drop out), tried after the configured ones."""
        configured = set(self._configured)
        self._learned = tuple(u for u in dict.fromkeys(urls) if u not in configured)

    def rotate(self) -> None:
        """Prefer the next controller from now on (the current one seems to lag)."""
        urls = self.urls
        current = urls.index(self._preferred) if self._preferred in urls else 0
        self._preferred = urls[(current + 1) % len(urls)]

    def _order(self) -> list[str]:
        """Controllers to try, from the preferred one on; those that failed to answer in
        the last SUSPECT_MS last."""
        urls, now = self.urls, self._clock.monotonic_ms()
        start = urls.index(self._preferred) if self._preferred in urls else 0
        rotated = [urls[(start + i) % len(urls)] for i in range(len(urls))]
        return sorted(rotated, key=lambda u: self._suspect_until.get(u, 0) > now)

    def _suspect(self, url: str) -> None:
        self._suspect_until[url] = self._clock.monotonic_ms() + SUSPECT_MS

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout_s: float = 15.0,
        attempt_timeout_s: float | None = None,
        params: dict[str, str] | None = None,
        raw: bool = False,
    ) -> tuple[int, Any]:
        """(status, JSON body) of the first controller that answers; KraftliteError for an
        error answer that retrying elsewhere would not change, or when time runs out. `body`
        is JSON values, or bytes already encoded (a message's). With `raw`, a successful
        answer's body comes back as bytes, unparsed.
        """
        status, payload, _ = await self.call_with_headers(
            method,
            path,
            body,
            timeout_s=timeout_s,
            attempt_timeout_s=attempt_timeout_s,
            params=params,
            raw=raw,
        )
        return status, payload

    async def call_with_headers(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout_s: float = 15.0,
        attempt_timeout_s: float | None = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        raw: bool = False,
    ) -> tuple[int, Any, dict[str, str]]:
        """`call`, with the answer's headers; `headers` go with the request."""
        policy = dataclasses.replace(FAILOVER, timeout_s=timeout_s)
        async for attempt in policy.run_async(self._clock, self._order):
            assert attempt.remaining_s is not None  # (the policy has a deadline)
            limit_s = max(attempt.remaining_s, MIN_ATTEMPT_S)
            if attempt_timeout_s is not None:
                limit_s = min(limit_s, attempt_timeout_s)
            with attempt:
                return await self._attempt(
                    attempt.target,
                    method,
                    path,
                    body,
                    params=params,
                    headers=headers,
                    raw=raw,
                    timeout_s=limit_s,
                )
        raise AssertionError("unreachable: the attempts end in a return or an error")

    async def _attempt(
        self,
        base: str,
        method: str,
        path: str,
        body: Any,
        *,
        params: dict[str, str] | None,
        headers: dict[str, str] | None,
        raw: bool,
        timeout_s: float,
    ) -> tuple[int, Any, dict[str, str]]:
        """One controller's answer. One that does not answer, or answers as no controller
        would, is suspect and raises NOT_CONTROLLER (the next one is tried)."""
        url = base + path
        try:
            async with self._session.request(
                method,
                url,
                data=body if body is None or isinstance(body, bytes) else orjson.dumps(body),
                params=params,
                headers={"Content-Type": "application/json", **(headers or {})},
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                body_bytes = await response.read()
                status = response.status
                answer_headers = dict(response.headers)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._suspect(base)
            raise KraftliteError(ErrorCode.NOT_CONTROLLER, f"{url}: {exc!r}") from exc
        if raw and status < 400:
            self._suspect_until.pop(base, None)
            self._preferred = base
            return status, body_bytes, answer_headers
        try:
            payload = orjson.loads(body_bytes) if body_bytes else None
        except orjson.JSONDecodeError:
            payload = body_bytes[:200].decode("utf-8", "replace")
        if status < 400:
            self._suspect_until.pop(base, None)
            self._preferred = base
            return status, payload, answer_headers
        if not isinstance(payload, dict) or "error_code" not in payload:
            # not a controller's answer (something else listens there now): as if it did
            # not answer
            self._suspect(base)
            raise KraftliteError(ErrorCode.NOT_CONTROLLER, f"{url}: HTTP {status}")
        self._suspect_until.pop(base, None)
        error = error_from_problem(status, payload)
        if not FAILOVER.retry_on(error):
            self._preferred = base  # the quorum's answer: this controller speaks for it
        raise error
