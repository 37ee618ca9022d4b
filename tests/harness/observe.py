"""Observing a multi-process cluster for the fault checker: load it, read it back, read its
replicas' data dirs. The checks themselves are pure, in tests/harness/checker.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kraftlite.client.consumer import Consumer
from kraftlite.errors import KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.headers import NO_FORWARD
from kraftlite.storage.log import LogStorage, StorageConfig
from tests.harness.checker import (
    StoredRecord,
    Violation,
    dense_offsets,
    isr_logs_agree,
    isr_tables_agree,
    latest_kept,
    lost_acknowledged,
    one_writer_per_epoch,
    ordered_offsets,
    refused_not_appended,
)
from tests.harness.processes import TLS_CONTEXT, Cluster, http, signed_http


def wait_until(condition: Callable[[], Any], timeout_s: float = 30, what: str = "it") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def described_on(
    cluster: Cluster, broker: int, topic: str, send: Callable[..., tuple[int, Any]] = http
) -> dict[str, Any] | None:
    """`topic` as `broker` describes it (`send`: `http`, or a call that logs in), None while
    it does not know it yet: an admin call is answered once the controllers committed it
    (and the broker that answered holds it); every other broker's metadata follows a moment
    later, as Kafka's brokers' do."""
    status, described = send("GET", cluster.urls[broker] + f"/v1/topics/{topic}")
    return described if status == 200 else None


def gauge(
    url: str,
    family: str,
    headers: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> float | None:
    """A node's gauge from its /metrics, the sample with exactly `labels` (default: none);
    None when the node is unreachable or has no such sample."""
    request = urllib.request.Request(url + "/metrics", headers=headers or {})
    context = TLS_CONTEXT[-1] if TLS_CONTEXT and url.startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    return next(
        (s.value for f in text_string_to_metric_families(text) if f.name == family
         for s in f.samples if s.labels == (labels or {})),
        None,
    )  # fmt: skip


def wait_for_brokers_metadata(
    cluster: Cluster, headers: dict[str, str] | None = None, timeout_s: float = 30
) -> None:
    """Until every live broker has applied the metadata the controllers had applied when
    called. An admin call (a user, an ACL, a quota, a topic) is answered once the
    controllers committed it; each broker applies it a moment later, as Kafka's brokers
    do. `headers`: credentials that may read /metrics, on a cluster that requires them."""
    applied = [
        gauge(url, "kraftlite_controller_metadata_offset", headers)
        for node_id, url in cluster.quorum.urls.items()
        if cluster.quorum.processes[node_id].alive
    ]
    target = max((v for v in applied if v is not None), default=None)
    assert target is not None, "no controller answered"

    def applied_everywhere() -> bool:
        return all(
            (gauge(url, "kraftlite_metadata_version", headers) or -1) >= target
            for broker_id, url in cluster.urls.items()
            if cluster.processes[broker_id].alive
        )

    wait_until(applied_everywhere, timeout_s, f"every broker to apply metadata {target}")


def wait_for_full_isr(cluster: Cluster, topic: str, timeout_s: float = 30) -> None:
    """Until every broker is in partition 0's ISR, as every serving broker sees it (one
    whose metadata is still behind, e.g. just healed, would show an old ISR and epoch);
    on timeout, say how it looked last."""
    seen: list[Any] = []

    def full() -> bool:
        try:
            views = [partition_0(cluster, topic, among=[b]) for b in cluster.processes]
        except AssertionError:  # a broker not up or not answering yet
            return False
        seen[:] = views
        agreed = {(v["leader"], v["leader_epoch"]) for v in views}
        return len(agreed) == 1 and all(
            sorted(v["isr"]) == sorted(cluster.processes) for v in views
        )

    try:
        wait_until(full, timeout_s, what="a full ISR")
    except AssertionError:
        raise AssertionError(f"no full ISR for {topic} in {timeout_s} s; last: {seen}") from None


def serving_urls(cluster: Cluster) -> list[str]:
    return [cluster.urls[b] for b, p in cluster.processes.items() if p.serving]


def describe(cluster: Cluster, topic: str, among: list[int] | None = None) -> dict[str, Any]:
    """The topic as the first serving broker (of `among`) that answers describes it."""
    for broker_id in among or list(cluster.processes):
        if not cluster.processes[broker_id].serving:
            continue
        # internal topics are the brokers' own: the harness asks as a node would
        send = signed_http if topic.startswith("__") else http
        try:
            status, body = send("GET", cluster.urls[broker_id] + f"/v1/topics/{topic}", timeout=5)
        except OSError:
            continue  # starting up
        if status == 503:
            continue  # up, but not caught up with metadata yet
        assert status == 200, body
        return body
    raise AssertionError("no broker answered")


def partition_0(cluster: Cluster, topic: str, among: list[int] | None = None) -> dict[str, Any]:
    return describe(cluster, topic, among)["partitions"][0]  # type: ignore[no-any-return]


def create(cluster: Cluster, topic: str, **configs: Any) -> dict[str, Any]:
    """One partition, replication factor 3; waits until it has a leader and a HW."""
    status, body = http(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": topic, "partitions": 1, "replication_factor": 3, "configs": configs},
    )
    assert status == 201, body
    wait_until(lambda: partition_0(cluster, topic)["high_watermark"] is not None, what="a leader")
    return describe(cluster, topic)


_producer_ids = itertools.count()
KEYS = 25  # the keys of a compacted topic's producers (`key_of`)


def key_of(value: bytes) -> bytes:
    """The key a keyed Producer sends `value` with: one of KEYS, derived from the value,
    so the checker finds it again from the value alone."""
    return b"key-%d" % (zlib.crc32(value) % KEYS)


@dataclass
class Answer:
    """One produce request as the producer saw it."""

    sent_at: float
    done_at: float
    target: str
    status: int
    error_code: str | None
    last_offset: int = -1  # the highest offset acknowledged, on a 200


@dataclass(eq=False)
class Producer(threading.Thread):
    """acks=all batches of 5 records to partition 0 in a loop, retrying on any failure, and
    recording every acknowledged offset with its value. `target()` picks the URL per request
    (by default any serving broker, which forwards to the leader)."""

    cluster: Cluster
    topic: str
    target: Callable[[], str] | None = None
    no_forward: bool = False
    timeout_ms: int = 3000
    keyed: bool = False  # each record with its `key_of` (a compacted topic takes no other)
    acked: dict[int, bytes] = field(default_factory=dict)
    # Values refused with "nothing was appended" (NOT_ENOUGH_REPLICAS before the append):
    # they must never show up in the log.
    refused: set[bytes] = field(default_factory=set)
    answers: list[Answer] = field(default_factory=list)
    stop_flag: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)
        self.prefix = f"{self.topic}-p{next(_producer_ids)}"  # values unique across producers

    def run(self) -> None:
        n = 0
        while not self.stop_flag.is_set():
            values = [f"{self.prefix}-{n}-{i}" for i in range(5)]
            n += 1
            sent_at = time.monotonic()
            try:
                target = self.target() if self.target else serving_urls(self.cluster)[0]
                status, body = http(
                    "POST",
                    target + f"/v1/topics/{self.topic}/partitions/0/records"
                    f"?acks=all&timeout_ms={self.timeout_ms}",
                    {"records": [self._record(v) for v in values]},
                    headers={NO_FORWARD: "1"} if self.no_forward else None,
                    timeout=self.timeout_ms / 1000 + 5,
                )
            except (OSError, IndexError):  # a node down, or none serving right now
                target, status, body = "", 0, None
            error, last = None, -1
            if status == 200 and all("offset" in o for o in body["offsets"]):
                last = max(o["offset"] for o in body["offsets"])
                for value, answer in zip(values, body["offsets"], strict=True):
                    self.acked[answer["offset"]] = value.encode()
            else:
                error = error_code(body)
                if isinstance(body, dict) and body.get("appended") is False:
                    self.refused.update(v.encode() for v in values)
                time.sleep(0.05)
            self.answers.append(Answer(sent_at, time.monotonic(), target, status, error, last))

    def _record(self, value: str) -> dict[str, str]:
        if self.keyed:
            return {"key": key_of(value.encode()).decode(), "value": value}
        return {"value": value}

    def stop(self) -> None:
        self.stop_flag.set()
        self.join()

    def acks_after(self, when: float, target: str | None = None) -> list[Answer]:
        return [
            a
            for a in self.answers
            if a.sent_at >= when and a.status == 200 and target in (None, a.target)
        ]


@dataclass(eq=False)
class GroupReader(threading.Thread):
    """A member of consumer group `group` reading `topic` from the earliest offset with the
    Python client (through any broker), committing after every poll that returned records,
    and reading the committed offsets back after each. Records what it consumed and every
    committed offset it read, with when the read was sent and answered."""

    cluster: Cluster
    topic: str
    group: str
    session_timeout_ms: int = 6000
    consumed: list[tuple[int, bytes]] = field(default_factory=list)
    committed_seen: list[tuple[float, float, tuple[str, str, int], int]] = field(
        default_factory=list
    )
    errors: list[str] = field(default_factory=list)
    stop_flag: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def run(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        consumer = Consumer(
            list(self.cluster.urls.values()),
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=self.session_timeout_ms,
        )
        subscribed = False
        try:
            while not self.stop_flag.is_set():
                try:
                    if not subscribed:
                        await consumer.subscribe([self.topic])
                        subscribed = True
                    records = await consumer.poll(500)
                    self.consumed += [(r.offset, r.value or b"") for r in records]
                    if records:
                        await consumer.commit()
                    sent = time.monotonic()
                    committed = await consumer.committed()
                    answered = time.monotonic()
                    self.committed_seen += [
                        (sent, answered, (self.group, topic, partition), offset)
                        for (topic, partition), offset in committed.items()
                    ]
                except (KraftliteError, OSError, TimeoutError, aiohttp.ClientError) as exc:
                    self.errors.append(repr(exc))  # the client retries; so do we
                    await asyncio.sleep(0.2)
        finally:
            with contextlib.suppress(Exception):
                await consumer.close()

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(30)

    def offsets(self) -> set[int]:
        return {offset for offset, _ in self.consumed}


@dataclass(eq=False)
class HighWatermarkReader(threading.Thread):
    """Reads partition 0's high watermark from one broker, answered there or refused (never
    forwarded), in a loop: (sent, answered, HW) for every answer that gave one."""

    url: str
    topic: str
    reads: list[tuple[float, float, int]] = field(default_factory=list)
    stop_flag: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def run(self) -> None:
        path = f"/v1/topics/{self.topic}/partitions/0/records?offset=0&max_records=1"
        while not self.stop_flag.is_set():
            sent = time.monotonic()
            try:
                status, body = http("GET", self.url + path, headers={NO_FORWARD: "1"}, timeout=5)
            except OSError:
                status, body = 0, None
            if status == 200:
                self.reads.append((sent, time.monotonic(), int(body["high_watermark"])))
            time.sleep(0.02)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(10)


def error_code(body: Any) -> str | None:
    if isinstance(body, dict):
        if "error_code" in body:
            return str(body["error_code"])
        for answer in body.get("offsets", []):
            if "error_code" in answer:
                return str(answer["error_code"])
    return None


def _answer_200(cluster: Cluster, path: str) -> Any:
    """The body of a 200 from a serving broker; None otherwise (a broker whose metadata is
    a moment behind answers 421: retried, as a client would)."""
    status, body = http("GET", serving_urls(cluster)[0] + path)
    return body if status == 200 else None


def read_partition(cluster: Cluster, topic: str) -> tuple[int, list[tuple[int, bytes]]]:
    """(log start offset, every record below the HW) of partition 0, through the API."""
    out: list[tuple[int, bytes]] = []
    offset, log_start = 0, None
    while True:
        path = f"/v1/topics/{topic}/partitions/0/records?offset={offset}"
        body = wait_until(lambda path=path: _answer_200(cluster, path), what=f"a read at {offset}")
        log_start = body["log_start_offset"] if log_start is None else log_start
        out += [(r["offset"], r["value"].encode()) for r in body["records"]]
        if body["next_offset"] >= body["high_watermark"]:
            return log_start, out
        offset = body["next_offset"]


def replica_logs(cluster: Cluster, topic_id: str) -> dict[int, list[StoredRecord]]:
    """Every broker's copy of partition 0, read from its data dir (the cluster stopped)."""
    logs = {}
    for broker_id in cluster.processes:
        storage = LogStorage(StorageConfig(path=cluster.root / f"broker-{broker_id}"))
        try:
            log = storage.open_partition(f"{topic_id}-0")
            data = log.read(log.log_start_offset, 1 << 30)
            logs[broker_id] = [
                StoredRecord(r.offset, b.header.leader_epoch, r.value or b"")
                for b in batch_format.decode_stream(data)
                for r in b.records()
            ]
        finally:
            storage.close()
    return logs


def check_partition(
    cluster: Cluster,
    topic: str,
    *acked_by: dict[int, bytes],
    refused: set[bytes] | None = None,
    compacted: bool = False,
) -> list[Violation]:
    """Every invariant on partition 0 of `topic`; stops the cluster to read its data dirs.
    `acked_by`: each producer's acknowledgements (offset -> value), checked one by one (after
    an unclean election two may hold different values at one offset). Waits first for the
    HW to pass every acknowledged offset (a new leader's HW can lag). `compacted`: the
    topic's, written by keyed Producers (checker.py's 1c-3c)."""
    refused = refused or set()
    highest = max((max(acked) for acked in acked_by if acked), default=-1)
    wait_until(
        lambda: (partition_0(cluster, topic)["high_watermark"] or 0) > highest,
        what="the high watermark above every acknowledged offset",
    )
    log_start, readable = read_partition(cluster, topic)
    violations = refused_not_appended(refused, readable)
    offsets = [offset for offset, _ in readable]
    if compacted:
        violations += [v for acked in acked_by for v in latest_kept(acked, readable, key_of)]
        violations += ordered_offsets(offsets, log_start)
    else:
        violations += [v for acked in acked_by for v in lost_acknowledged(acked, readable)]
        violations += dense_offsets(offsets, log_start)
    state = describe(cluster, topic)
    isr, hw = state["partitions"][0]["isr"], state["partitions"][0]["high_watermark"]
    cluster.stop()
    logs = replica_logs(cluster, str(state["topic_id"]))
    if compacted:
        violations += isr_tables_agree(logs, isr, hw, key_of)
    else:
        violations += isr_logs_agree(logs, isr, hw)
    violations += one_writer_per_epoch(logs)
    return violations


class PartitionWriters:
    """One acks=all writer per partition of `topic` (a single-record JSON produce, again
    and again), each through a broker other than `avoid`, so a fault on `avoid` shows as
    the longest stretch a partition took no write. `post` sends a request (`http`, or one
    that logs in)."""

    def __init__(
        self,
        cluster: Cluster,
        topic: str,
        partitions: Iterable[int],
        avoid: int,
        post: Callable[..., tuple[int, Any]] = http,
        timeout_s: float = 10,
    ) -> None:
        self.acked: dict[int, list[float]] = {p: [] for p in partitions}
        self._stop = threading.Event()
        self._post, self._timeout_s, self._topic = post, timeout_s, topic
        others = [b for b in cluster.urls if b != avoid]
        self._threads = [
            threading.Thread(
                target=self._write, args=(cluster.urls[others[p % len(others)]], p), daemon=True
            )
            for p in self.acked
        ]

    def _write(self, url: str, partition: int) -> None:
        while not self._stop.is_set():
            try:
                status, _ = self._post(
                    "POST",
                    url + f"/v1/topics/{self._topic}/partitions/{partition}/records",
                    {"records": [{"value": "x"}]},
                    timeout=self._timeout_s,
                )
            except OSError:
                continue
            if status == 200:
                self.acked[partition].append(time.monotonic())
            else:
                time.sleep(0.05)

    def __enter__(self) -> PartitionWriters:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self._timeout_s + 5)

    def acked_since(self, since: float) -> dict[int, int]:
        return {p: sum(1 for t in times if t > since) for p, times in self.acked.items()}

    def longest_gap(self, since: float) -> float:
        """The longest stretch from `since` in which some partition took no write."""
        gaps = []
        for times in self.acked.values():
            window = [since] + [t for t in times if t > since]
            gaps.append(max((b - a for a, b in itertools.pairwise(window)), default=float("inf")))
        return max(gaps)
