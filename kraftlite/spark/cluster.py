"""The Spark source's calls to a kraftlite cluster: blocking, stateless, stdlib HTTP (each
executor task is a plain Python worker; an event loop per task buys nothing for sequential
paging). Metadata from any broker; fetches straight from each partition's leader, following
it when leadership moves (421 names the new one). Every retry is a kraftlite.retry policy,
its time read on the Cluster's Clock.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kraftlite.client.credentials import NONE, Credentials
from kraftlite.clock import Clock, SystemClock
from kraftlite.errors import ErrorCode, KraftliteError, error_from_problem
from kraftlite.protocol.headers import (
    BATCH_TYPE,
    NEXT_OFFSET,
    NO_FORWARD,
    STORED_BATCHES_ACCEPT,
    TRANSACTIONAL_ID,
)
from kraftlite.retry import Backoff, NotYet, RetryPolicy, not_yet, retriable

LOG = logging.getLogger("kraftlite.spark")


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    leader_url: str | None
    log_start_offset: int
    high_watermark: int  # where a read may plan to: the last stable offset for `committed`


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
        self,
        bootstrap: Brokers | tuple[str, ...],
        timeout_s: float | None = None,
        clock: Clock | None = None,
        *,
        committed: bool = False,
    ) -> None:
        """`committed`: reads see what transactions committed only (Kafka's
        isolation.level=read_committed): `topic` plans to each partition's last stable
        offset, and `fetch` leaves aborted records and transaction markers out."""
        if not bootstrap:
            raise ValueError("no broker URLs to start from")
        self.committed = committed
        self.clock: Clock = clock or SystemClock()
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
    ) -> tuple[bytes, int]:
        """A page of stored batches at `offset` and the offset after it (with `committed`,
        past aborted records and markers the page leaves out)."""
        params: dict[str, str | int] = {"offset": offset, "max_bytes": max_bytes}
        if self.committed:
            params["isolation"] = "read_committed"
        query = urllib.parse.urlencode(params)
        path = f"/v1/topics/{urllib.parse.quote(topic)}/partitions/{partition}/records?{query}"
        # stored batches as they are: a Kafka batch kept as sent is decoded here, on the
        # executor, not converted on the leader (spark/arrow.py)
        accept = {"Accept": STORED_BATCHES_ACCEPT, NO_FORWARD: "1"}
        body, headers = self._request(leader + path, accept)
        told = headers.get(NEXT_OFFSET)
        return body, _next_offset(body, offset) if told is None else int(told)

    def call(
        self, path: str, body: Any = None, attempts: int = 0, policy: RetryPolicy | None = None
    ) -> Any:
        """JSON from the first bootstrap broker that answers (a broker that is starting or
        cannot answer now passes the question on to the next one). With a `body`, a POST:
        only for idempotent calls (an offset commit), since it may be sent more than once.
        `attempts` rounds over the brokers (default METADATA_ATTEMPTS), with backoff between.
        """
        post: dict[str, Any] = {}
        if body is not None:
            post = {
                "method": "POST",
                "data": json.dumps(body).encode(),
                "headers": {"Content-Type": "application/json"},
            }
        if policy is None:
            policy = CALL_RETRY
        if attempts:
            policy = dataclasses.replace(policy, max_attempts=attempts)
        for attempt in policy.run(self.clock, lambda: self.bootstrap.urls):
            with attempt:
                answer = self._request(attempt.target + path, **post)[0]
                return json.loads(answer) if answer else None
        raise AssertionError("unreachable: the attempts end in a return or an error")

    def topics(self) -> list[str]:
        return [t["name"] for t in self.call("/v1/topics")["topics"]]

    def topic(self, topic: str, *, wait: bool = True) -> TopicState:
        """The topic with its partitions' leaders and offsets. A partition whose offsets are
        unknown right now (no leader, a leader just elected) is asked again, never taken as
        empty; without `wait` it is left out of `partitions` instead (a stream asks again
        next time, a producer or reader looking for one leader tries again).
        """
        described = self._described(topic, wait=wait)
        urls = {b["id"]: b["url"] for b in self.call("/v1/cluster")["brokers"]}
        return TopicState(
            described["topic_id"],
            len(described["partitions"]),
            [
                PartitionState(
                    p["partition"],
                    urls.get(p["leader"]),
                    p["log_start_offset"],
                    p["last_stable_offset"] if self.committed else p["high_watermark"],
                )
                for p in described["partitions"]
                if self._end_of(p) is not None
            ],
        )

    def _described(self, topic: str, *, wait: bool) -> Any:
        """The topic's description; with `wait`, asked again while some partition's offsets
        are unknown (errors of the call itself surface at once: it has its own retries)."""
        for attempt in OFFSETS_RETRY.run(self.clock):
            with attempt:
                isolation = "?isolation=read_committed" if self.committed else ""
                described = self.call(f"/v1/topics/{urllib.parse.quote(topic)}{isolation}")
                unknown = [
                    p["partition"] for p in described["partitions"] if self._end_of(p) is None
                ]
                if wait and unknown:
                    raise NotYet(
                        ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        f"{topic}: partitions {unknown} have no leader to give their offsets",
                    )
                return described
        raise AssertionError("unreachable: the attempts end in a return or an error")

    def _end_of(self, described: dict[str, Any]) -> int | None:
        """Where a read of the described partition may plan to; None while unknown (no
        leader; with `committed`, also a leader too old to say its last stable offset)."""
        if described["high_watermark"] is None:
            return None
        end: int | None = (
            described.get("last_stable_offset") if self.committed else (described["high_watermark"])
        )
        return end

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
        offset, leader = start, None
        while offset < end:
            try:
                leader, body, next_offset = self._next_page(
                    topic, partition, offset, end, leader=leader, max_bytes=max_bytes
                )
            except KraftliteError as exc:
                log_start = exc.details.get("log_start_offset")
                out_of_range = exc.code is ErrorCode.OFFSET_OUT_OF_RANGE
                if not (out_of_range and isinstance(log_start, int) and log_start > offset):
                    raise
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
            yield body, next_offset
            offset = next_offset

    def _next_page(
        self,
        topic: str,
        partition: int,
        offset: int,
        end: int,
        *,
        leader: str | None,
        max_bytes: int,
    ) -> tuple[str, bytes, int]:
        """(leader, page, next offset) for a page at `offset` that moves the read on, from
        the leader (looked up when None, or as a 421 names it), tried FETCH_ATTEMPTS more
        times on retriable errors, a leader that does not answer, or an empty page."""
        for attempt in FETCH_RETRY.run(self.clock):
            with attempt:
                try:
                    if leader is None:
                        leader = self._leader(topic, partition)
                    body, next_offset = self._fetch_page(
                        leader, topic, partition, offset, max_bytes
                    )
                except KraftliteError as exc:
                    leader = exc.details.get("leader_url")  # 421 names the new leader
                    raise
                except (urllib.error.URLError, OSError):
                    leader = None
                    raise
                if next_offset <= offset:  # planned below the HW, but not there (yet)
                    raise NotYet(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"{topic}-{partition}: nothing at {offset} although the plan reads "
                        f"up to {end}",
                    )
                return leader, body, next_offset
        raise AssertionError("unreachable: the attempts end in a return or an error")

    def produce(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        timeout_ms: int = 30_000,
        *,
        headers: dict[str, str] | None = None,
    ) -> int:
        """Append one encoded batch to a partition with acks=all, through leadership changes;
        the base offset it got. A retry after a lost answer may append the batch twice
        (at-least-once, as Kafka's producer without idempotence) unless it is sequenced.
        """
        path = f"/v1/topics/{urllib.parse.quote(topic)}/partitions/{partition}/records"
        query = urllib.parse.urlencode({"acks": "all", "timeout_ms": timeout_ms})
        headers = {"Content-Type": BATCH_TYPE, NO_FORWARD: "1", **(headers or {})}
        leader: str | None = None
        for attempt in PRODUCE_RETRY.run(self.clock):
            with attempt:
                try:
                    if leader is None:
                        leader = self._leader(topic, partition)
                    body, _ = self._request(
                        f"{leader}{path}?{query}", headers, method="POST", data=batch
                    )
                except KraftliteError as exc:
                    leader = exc.details.get("leader_url")  # 421 names the new leader
                    raise
                except (urllib.error.URLError, OSError):
                    leader = None
                    raise
                return int(json.loads(body)["offsets"][0]["offset"])
        raise AssertionError("unreachable: the attempts end in a return or an error")

    # -- transactions (the HTTP transaction API: docs/transactions.md) ---------------

    @staticmethod
    def _txn_path(transactional_id: str, call: str = "") -> str:
        return f"/v1/transactions/{urllib.parse.quote(transactional_id, safe='')}{call}"

    def init_transactions(self, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
        """InitProducerId: (producer id, epoch), fencing any earlier producer of the id and
        aborting the transaction it left open. Retried while that abort completes; a retry
        after a lost answer only bumps the epoch once more."""
        answer = self.call(
            self._txn_path(transactional_id, "/producer"),
            {"transaction_timeout_ms": timeout_ms},
            policy=TXN_RETRY,
        )
        return int(answer["producer_id"]), int(answer["producer_epoch"])

    def add_partitions(
        self, transactional_id: str, producer: tuple[int, int], topic: str, partition: int
    ) -> None:
        self.call(
            self._txn_path(transactional_id, "/partitions"),
            {
                "producer_id": producer[0],
                "producer_epoch": producer[1],
                "partitions": [{"topic": topic, "partition": partition}],
            },
            policy=TXN_RETRY,
        )

    def end_transaction(
        self,
        transactional_id: str,
        producer: tuple[int, int],
        *,
        commit: bool,
        tag: str | None = None,
    ) -> None:
        """EndTxn, answered once the outcome is decided (a retry of a decided one is
        answered as it). `tag` names what a commit commits (read back by `transaction`)."""
        body: dict[str, Any] = {
            "producer_id": producer[0],
            "producer_epoch": producer[1],
            "commit": commit,
        }
        if tag is not None:
            body["tag"] = tag
        self.call(self._txn_path(transactional_id, "/end"), body, policy=TXN_RETRY)

    def transaction(self, transactional_id: str) -> dict[str, Any] | None:
        """The id's state as its coordinator has it, None if it has none."""
        try:
            found: dict[str, Any] = self.call(self._txn_path(transactional_id), policy=TXN_RETRY)
        except KraftliteError as exc:
            if exc.code is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                return None
            raise
        return found

    def produce_transactional(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        transactional_id: str,
        timeout_ms: int = 30_000,
    ) -> int:
        """`produce` of a transactional producer's batch (sequenced: a retry after a lost
        answer is written once)."""
        return self.produce(
            topic, partition, batch, timeout_ms, headers={TRANSACTIONAL_ID: transactional_id}
        )


class DataLossError(RuntimeError):
    """Planned records are gone (retention) and failOnDataLoss is on."""


FETCH_ATTEMPTS = 8  # retries of one page or one produce, after its first try
METADATA_ATTEMPTS = 6  # rounds over the brokers, and looks for unknown offsets


def _unreachable(exc: BaseException) -> bool:
    # URLError is an OSError; a connection refused or reset, a timeout: the broker is gone
    return isinstance(exc, OSError)


def _worth_another(exc: BaseException) -> bool:
    return retriable(exc) or _unreachable(exc)


def _none_answered(last: Exception) -> BaseException:
    """Every broker kept giving a retriable answer: that is the answer. None answering at
    all is a timeout."""
    if isinstance(last, KraftliteError):
        return last
    return KraftliteError(ErrorCode.REQUEST_TIMED_OUT, f"no broker answered: {last!r}")


# Metadata and offset calls: rounds over the bootstrap brokers, 0.1 s doubling between.
CALL_RETRY = RetryPolicy(
    _worth_another,
    max_attempts=METADATA_ATTEMPTS,
    backoff=Backoff(0.1, 2.0),
    exhausted=_none_answered,
)
# A partition whose offsets are unknown (no leader, a leader just elected): asked again.
OFFSETS_RETRY = RetryPolicy(not_yet, max_attempts=METADATA_ATTEMPTS, backoff=Backoff(0.1, 2.0))
# A page of a read: an empty one (the leader's high watermark not there yet) is asked again.
FETCH_RETRY = RetryPolicy(
    lambda exc: not_yet(exc) or _worth_another(exc),
    max_attempts=FETCH_ATTEMPTS + 1,
    backoff=Backoff(0.1, 2.0),
)
# The transaction coordinator's calls: CONCURRENT_TRANSACTIONS while an id's last
# transaction is being ended (its markers written) is asked again, for up to ~15 s.
TXN_RETRY = RetryPolicy(
    _worth_another, max_attempts=20, backoff=Backoff(0.05, 1.0), exhausted=_none_answered
)
PRODUCE_RETRY = RetryPolicy(
    _worth_another, max_attempts=FETCH_ATTEMPTS + 1, backoff=Backoff(0.05, 2.0)
)


def _next_offset(body: bytes, offset: int) -> int:
    from kraftlite.protocol import batch as batch_format  # noqa: PLC0415

    last = offset
    for view in batch_format.split_batches(body):
        last = batch_format.read_header(view).next_offset
    return last
