"""The Spark source's calls to a kraftlite cluster: blocking, stateless, stdlib HTTP (each
executor task is a plain Python worker; an event loop per task buys nothing for sequential
paging). Metadata from any broker; fetches straight from each partition's leader, following
it when leadership moves (421 names the new one).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kraftlite.client.credentials import NONE, Credentials
from kraftlite.errors import ErrorCode, KraftliteError, error_from_problem
from kraftlite.protocol.headers import BATCH_TYPE, NO_FORWARD

LOG = logging.getLogger("kraftlite.spark")


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    leader_url: str | None
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class TopicState:
    topic_id: str  # changes when a topic is deleted and created again under its name
    partition_count: int
    partitions: list[PartitionState]


@dataclass(frozen=True, slots=True)
class Brokers:
    """Where the cluster is (its brokers' HTTP URLs, resolved from the bootstrap options on
    the driver), how to authenticate, and how long one request may take; picklable, so
    executors' tasks carry it."""

    urls: tuple[str, ...]
    credentials: Credentials = NONE
    timeout_ms: int = 30_000

    def __iter__(self) -> Iterator[str]:
        return iter(self.urls)

    def __len__(self) -> int:
        return len(self.urls)


class Cluster:
    def __init__(
        self, bootstrap: Brokers | tuple[str, ...], timeout_s: float | None = None
    ) -> None:
        if not bootstrap:
            raise ValueError("no broker URLs to start from")
        self.bootstrap = bootstrap if isinstance(bootstrap, Brokers) else Brokers(bootstrap)
        self.timeout_s = self.bootstrap.timeout_ms / 1000 if timeout_s is None else timeout_s
        self._auth_headers = self.bootstrap.credentials.headers()
        self._ssl_context = self.bootstrap.credentials.ssl_context()

    def _request(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        method: str = "GET",
        data: bytes | None = None,
    ) -> tuple[bytes, Any]:
        # S310: the URLs are the brokers' (http), from the options and the cluster
        request = urllib.request.Request(  # noqa: S310
            url, data=data, headers={**self._auth_headers, **(headers or {})}, method=method
        )
        try:
            with urllib.request.urlopen(  # noqa: S310
                request, timeout=self.timeout_s, context=self._ssl_context
            ) as response:
                return response.read(), response.headers
        except urllib.error.HTTPError as error:
            raw = error.read()
            error.close()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = raw[:200].decode("utf-8", "replace")
            raise error_from_problem(error.code, payload) from None

    def _leader(self, topic: str, partition: int) -> str:
        states = self.partitions(topic, wait=False)  # only this partition matters
        leader = next((p.leader_url for p in states if p.partition == partition), None)
        if leader is None:
            raise KraftliteError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} has no leader now"
            )
        return leader

    def _fetch_page(
        self, leader: str, topic: str, partition: int, offset: int, max_bytes: int
    ) -> bytes:
        query = urllib.parse.urlencode({"offset": offset, "max_bytes": max_bytes})
        path = f"/v1/topics/{urllib.parse.quote(topic)}/partitions/{partition}/records?{query}"
        body, _ = self._request(leader + path, {"Accept": BATCH_TYPE, NO_FORWARD: "1"})
        return body

    def call(self, path: str, body: Any = None, attempts: int = 0) -> Any:
        """JSON from the first bootstrap broker that answers (a broker that is starting or
        cannot answer now passes the question on to the next one). With a `body`, a POST:
        only for idempotent calls (an offset commit), since it may be sent more than once.
        `attempts` rounds over the brokers (default METADATA_ATTEMPTS), with backoff between.
        """
        last: Exception | None = None
        post: dict[str, Any] = {}
        if body is not None:
            post = {
                "method": "POST",
                "data": json.dumps(body).encode(),
                "headers": {"Content-Type": "application/json"},
            }
        for attempt in range(attempts or METADATA_ATTEMPTS):
            if attempt:
                time.sleep(min(0.1 * 2 ** (attempt - 1), 2.0))
            for base in self.bootstrap:
                try:
                    answer = self._request(base + path, **post)[0]
                    return json.loads(answer) if answer else None
                except (urllib.error.URLError, OSError) as exc:
                    last = exc
                except KraftliteError as exc:
                    if not exc.retriable:
                        raise
                    last = exc
        if isinstance(last, KraftliteError):
            raise last  # every broker kept saying so: that is the answer
        raise KraftliteError(ErrorCode.REQUEST_TIMED_OUT, f"no broker answered: {last!r}")

    def topics(self) -> list[str]:
        return [t["name"] for t in self.call("/v1/topics")["topics"]]

    def topic(self, topic: str, *, wait: bool = True) -> TopicState:
        """The topic with its partitions' leaders and offsets. A partition whose offsets are
        unknown right now (no leader, a leader just elected) is asked again, never taken as
        empty; without `wait` it is left out of `partitions` instead (a stream asks again
        next time, a producer or reader looking for one leader tries again).
        """
        unknown: list[int] = []
        for attempt in range(METADATA_ATTEMPTS):
            described = self.call(f"/v1/topics/{urllib.parse.quote(topic)}")
            unknown = [
                p["partition"] for p in described["partitions"] if p["high_watermark"] is None
            ]
            if not wait or not unknown:
                break
            time.sleep(min(0.1 * 2**attempt, 2.0))
        else:
            raise KraftliteError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"{topic}: partitions {unknown} have no leader to give their offsets",
            )
        urls = {b["id"]: b["url"] for b in self.call("/v1/cluster")["brokers"]}
        return TopicState(
            described["topic_id"],
            len(described["partitions"]),
            [
                PartitionState(
                    p["partition"],
                    urls.get(p["leader"]),
                    p["log_start_offset"],
                    p["high_watermark"],
                )
                for p in described["partitions"]
                if p["high_watermark"] is not None
            ],
        )

    def partitions(self, topic: str, *, wait: bool = True) -> list[PartitionState]:
        return self.topic(topic, wait=wait).partitions

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose record's timestamp is at or after `timestamp_ms` (Kafka's
        ListOffsets by time), or None if no record below the high watermark is."""
        path = f"/v1/topics/{urllib.parse.quote(topic)}/partitions/{partition}/offsets"
        found = self.call(f"{path}?at={timestamp_ms}")
        return None if found.get("timestamp") is None else int(found["offset"])

    def fetch(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int,
        *,
        skip_lost: bool = False,
        max_bytes: int = 4 << 20,
    ) -> Iterator[tuple[bytes, int]]:
        """The stored batches covering [start, end), page by page, from the leader:
        (body of concatenated batches, the next offset to ask for).

        Records deleted by retention since planning raise DataLossError, or are skipped with
        `skip_lost`. Records not yet below the high watermark (a new leader still learning
        it) are waited for, a few times, like any other retriable answer.
        """
        offset, leader, attempts = start, None, 0
        while offset < end:
            try:
                if leader is None:
                    leader = self._leader(topic, partition)
                body = self._fetch_page(leader, topic, partition, offset, max_bytes)
            except KraftliteError as exc:
                log_start = exc.details.get("log_start_offset")
                out_of_range = exc.code is ErrorCode.OFFSET_OUT_OF_RANGE
                if out_of_range and isinstance(log_start, int) and log_start > offset:
                    if not skip_lost:
                        raise DataLossError(
                            f"{topic}-{partition}: offsets {offset}-{min(log_start, end) - 1}"
                            " were deleted by retention before this read reached them (set "
                            "failOnDataLoss=false to skip them)"
                        ) from None
                    LOG.warning(
                        "%s-%s: offsets %s-%s were deleted by retention before this read "
                        "reached them; skipping them (failOnDataLoss=false)",
                        topic, partition, offset, min(log_start, end) - 1,
                    )  # fmt: skip
                    offset = log_start
                    continue
                if not exc.retriable or attempts >= FETCH_ATTEMPTS:
                    raise
                leader = exc.details.get("leader_url")  # 421 names the new leader
            except (urllib.error.URLError, OSError):
                if attempts >= FETCH_ATTEMPTS:
                    raise
                leader = None
            else:
                next_offset = _next_offset(body, offset)
                if next_offset > offset:
                    attempts = 0
                    yield body, next_offset
                    offset = next_offset
                    continue
                if attempts >= FETCH_ATTEMPTS:  # planned below the HW, but not there (yet)
                    raise KraftliteError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"{topic}-{partition}: nothing at {offset} although the plan reads "
                        f"up to {end}",
                    )
            attempts += 1
            time.sleep(min(0.05 * 2**attempts, 2.0))

    def produce(self, topic: str, partition: int, batch: bytes, timeout_ms: int = 30_000) -> int:
        """Append one encoded batch to a partition with acks=all, through leadership changes;
        the base offset it got. A retry after a lost answer may append the batch twice
        (at-least-once, as Kafka's producer without idempotence).
        """
        path = f"/v1/topics/{urllib.parse.quote(topic)}/partitions/{partition}/records"
        query = urllib.parse.urlencode({"acks": "all", "timeout_ms": timeout_ms})
        headers = {"Content-Type": BATCH_TYPE, NO_FORWARD: "1"}
        leader: str | None = None
        for attempt in range(FETCH_ATTEMPTS + 1):
            try:
                if leader is None:
                    leader = self._leader(topic, partition)
                body, _ = self._request(
                    f"{leader}{path}?{query}", headers, method="POST", data=batch
                )
                return int(json.loads(body)["offsets"][0]["offset"])
            except KraftliteError as exc:
                if not exc.retriable or attempt >= FETCH_ATTEMPTS:
                    raise
                leader = exc.details.get("leader_url")  # 421 names the new leader
            except (urllib.error.URLError, OSError):
                if attempt >= FETCH_ATTEMPTS:
                    raise
                leader = None
            time.sleep(min(0.05 * 2**attempt, 2.0))
        raise AssertionError("unreachable")


class DataLossError(RuntimeError):
    """Planned records are gone (retention) and failOnDataLoss is on."""


FETCH_ATTEMPTS = 8
METADATA_ATTEMPTS = 6


def _next_offset(body: bytes, offset: int) -> int:
    from kraftlite.protocol import batch as batch_format  # noqa: PLC0415

    last = offset
    for view in batch_format.split_batches(body):
        last = batch_format.read_header(view).next_offset
    return last
