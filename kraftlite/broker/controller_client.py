"""The broker's calls to the controller quorum, over HTTP, with failover.

Any controller forwards a write to the active one, so a call goes to the controller that
last answered, and on a connection error or NOT_CONTROLLER without a leader it moves to the
next URL. A controller that does not answer (hung, paused, cut off) is tried last by
later calls for a few seconds, and `attempt_timeout_s` bounds how long one attempt waits on it, so a
hung controller cannot hold heartbeats until the session runs out. Errors with an API
code come back as KraftliteError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import aiohttp
import orjson

from kraftlite.errors import ErrorCode, KraftliteError, error_from_problem

_RETRY_CODES = {ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT}
SUSPECT_S = 5.0  # a controller that did not answer is tried last for this long


class ControllerClient:
    def __init__(self, urls: tuple[str, ...], session: aiohttp.ClientSession) -> None:
        self._configured = urls
        self._learned: tuple[str, ...] = ()
        self._session = session
        self._preferred: str | None = None
        self._suspect_until: dict[str, float] = {}  # url -> loop time

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

    def _order(self, urls: tuple[str, ...], now: float) -> list[str]:
        """Controllers to try, from the preferred one on; those that failed to answer in
        the last SUSPECT_S seconds last."""
        start = urls.index(self._preferred) if self._preferred in urls else 0
        rotated = [urls[(start + i) % len(urls)] for i in range(len(urls))]
        return sorted(rotated, key=lambda u: self._suspect_until.get(u, 0.0) > now)

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
        error answer that retrying elsewhere would not change, or when time runs out. With
        `raw`, a successful answer's body comes back as bytes, unparsed.
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last: KraftliteError | None = None
        # each round tries every controller known when it starts (learned ones included)
        order: list[str] = []
        while loop.time() < deadline:
            if not order:
                order = self._order(self.urls, loop.time())
            base = order.pop(0)
            url = base + path
            remaining = max(deadline - loop.time(), 0.1)
            if attempt_timeout_s is not None:
                remaining = min(remaining, attempt_timeout_s)
            try:
                async with self._session.request(
                    method,
                    url,
                    data=None if body is None else orjson.dumps(body),
                    params=params,
                    headers={"Content-Type": "application/json", **(headers or {})},
                    timeout=aiohttp.ClientTimeout(total=remaining),
                ) as response:
                    body_bytes = await response.read()
                    status = response.status
                    answer_headers = dict(response.headers)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last = KraftliteError(ErrorCode.NOT_CONTROLLER, f"{url}: {exc!r}")
                self._suspect_until[base] = loop.time() + SUSPECT_S
            else:
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
                    # not a controller's answer (something else listens there now): as if
                    # it did not answer
                    last = KraftliteError(ErrorCode.NOT_CONTROLLER, f"{url}: HTTP {status}")
                    self._suspect_until[base] = loop.time() + SUSPECT_S
                else:
                    self._suspect_until.pop(base, None)
                    error = error_from_problem(status, payload)
                    if error.code not in _RETRY_CODES:
                        self._preferred = base
                        raise error
                    last = error
            if not order:  # a round without an answer: a pause before the next
                await asyncio.sleep(0.1)
        raise last or KraftliteError(ErrorCode.NOT_CONTROLLER, "no controller answered")
