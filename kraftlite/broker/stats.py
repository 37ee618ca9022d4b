"""Figures only brokers know, for the console (`GET /v1/cluster/stats`): each broker's
leaders, replicas, bytes on disk and produce/fetch rates, and per topic (only the topics
asked for) its size, each partition's size and its rates, and a compacted topic's cleaner
figures per partition (from its leader).

Rules:
1. Each broker answers for itself (`local_stats`, served at `/v1/internal/stats` to nodes);
   the broker a client asked gathers every live broker's answer with one signed node call
   each, bounded in time, as offsets.py does, and sums them (`cluster_stats`). A broker that
   does not answer in time is shown as such, never fails the whole answer.
2. Sizes count a partition once: a topic's and a partition's size are its leader's log;
   a broker's `disk_bytes` counts every replica it holds.
3. Rates come from the produce/fetch counters of metrics.py (counted where the leader
   serves), sampled when asked (rates.py rule 1), so summing brokers counts nothing twice.
4. Authorization stays at the edge: the topics asked of other brokers are already the ones
   the client may DESCRIBE.
5. The node call is typed both ways (protocol/internal.py's BrokerStatsRequest and
   BrokerStatsResponse; this broker's own figures are one too): an answer that is not one
   counts as a broker that did not answer (rule 1).
6. Clients share fan-outs (`StatsWindow.shared`): a request whose topics a fan-out that
   ended less than FRESH_S ago covered gets that fan-out's figures, and a broker runs one
   fan-out at a time (others wait, then look again). However often, and however many at
   once, clients ask, a broker calls every broker at most once per FRESH_S per set of
   topics, one round at a time, never once per request.
7. Counting many replicas or partitions yields to the event loop (offsets.py rule 3).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import aiohttp
import msgspec
import structlog
from prometheus_client import Counter

from kraftlite.broker import metrics
from kraftlite.broker.offsets import paced
from kraftlite.broker.rates import Rates, RateWindow
from kraftlite.metadata.views import partition_health
from kraftlite.protocol.internal import (
    RATE_NAMES,
    BrokerStatsRequest,
    BrokerStatsResponse,
    CompactionStats,
    MessageError,
    StatsRates,
    TopicStats,
)

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker
    from kraftlite.broker.cleaner import CleanerState

log = structlog.get_logger(__name__)
TIMEOUT_S = 2.0
FRESH_S: Final = 1.0  # rule 6: how long a fan-out's figures answer later requests
REMEMBERED: Final = 16  # rule 6: fan-outs kept (topic sets of that many console pages)
RateKey = tuple[str, str]  # (one of RATE_NAMES, topic)
FanOut = Callable[[Sequence[str]], Awaitable[dict[str, Any]]]


def _counters() -> Mapping[str, Counter]:
    return {
        "produce_bytes": metrics.PRODUCED_BYTES,
        "produce_records": metrics.PRODUCED_RECORDS,
        "fetch_bytes": metrics.FETCHED_BYTES,
        "fetch_records": metrics.FETCHED_RECORDS,
    }


def counter_totals() -> dict[RateKey, float]:
    """Every (rate name, topic) counter's total in this process."""
    totals: dict[RateKey, float] = {}
    for name, counter in _counters().items():
        for family in counter.collect():
            for sample in family.samples:
                if sample.name.endswith("_total") and "topic" in sample.labels:
                    totals[(name, sample.labels["topic"])] = sample.value
    return totals


def _by_topic(rates: Rates[RateKey] | None) -> tuple[StatsRates | None, dict[str, StatsRates]]:
    """Per-second figures: of every topic, and of each topic (one pass)."""
    if rates is None:
        return None, {}
    total = dict.fromkeys(RATE_NAMES, 0.0)
    topics: dict[str, dict[str, float]] = {}
    for (name, topic), value in rates.per_second.items():
        total[name] += value
        topics.setdefault(topic, dict.fromkeys(RATE_NAMES, 0.0))[name] += value
    return _rounded(total), {topic: _rounded(figures) for topic, figures in topics.items()}


def _rounded(figures: dict[str, float]) -> StatsRates:
    return StatsRates(*(round(figures[name], 3) for name in RATE_NAMES))


async def local_stats(
    broker: Broker, topics: Iterable[str], window: RateWindow[RateKey], now_ms: int
) -> BrokerStatsResponse:
    """Rule 1: this broker's figures, and the named topics' figures as far as it leads them."""
    replicas = broker.replicas
    rates = window.observe(now_ms, counter_totals())
    total, by_topic = _by_topic(rates)
    idle = None if rates is None else StatsRates(0.0, 0.0, 0.0, 0.0)
    leaders = disk_bytes = 0
    held = list(replicas.partitions.values())  # a snapshot: the loop runs between chunks
    async for chunk in paced(held):
        for partition in chunk:
            if partition.serving_as_leader:
                leaders += 1
            disk_bytes += partition.log.size_bytes
    per_topic = {}
    for name in topics:
        image = replicas.image.topic(name)
        if image is None:
            continue
        sizes, compaction = {}, {}
        async for indexes in paced(list(image.partitions)):
            for index in indexes:
                led = replicas.partitions.get((image.topic_id, index))
                if led is not None and led.serving_as_leader:
                    sizes[index] = led.log.size_bytes
                    if led.compacted:
                        compaction[index] = _compaction(led.cleaner, now_ms)
        per_topic[name] = TopicStats(sizes, by_topic.get(name, idle), compaction)
    return BrokerStatsResponse(
        broker.broker_id,
        leaders,
        len(held),
        disk_bytes,
        total,
        None if rates is None else rates.span_ms,
        per_topic,
    )


def _compaction(seen: CleanerState, now_ms: int) -> CompactionStats:
    """A led compacted partition's cleaner figures (as its metrics show them)."""
    dirtiness = seen.dirtiness
    return CompactionStats(
        0.0 if dirtiness is None else min(1.0, max(0.0, dirtiness.ratio)),
        0 if dirtiness is None else dirtiness.lag_ms(now_ms),
        None if seen.last_pass_ms is None else max(0, now_ms - seen.last_pass_ms),
    )


async def _ask(broker: Broker, url: str, topics: Sequence[str]) -> BrokerStatsResponse | None:
    """Rules 1 and 5: one broker's figures, or None."""
    try:
        async with broker.session.get(
            url + "/v1/internal/stats",
            params=BrokerStatsRequest(tuple(topics)).to_params(),
            timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
        ) as response:
            if response.status != 200:
                log.info("stats_not_learned", url=url, status=response.status)
                return None
            return BrokerStatsResponse.decode(await response.read())
    except (aiohttp.ClientError, TimeoutError, MessageError) as exc:
        log.info("stats_not_learned", url=url, error=repr(exc))
        return None


def _add_rates(into: dict[str, float] | None, more: StatsRates | None) -> dict[str, float] | None:
    if more is None:
        return into
    base = into or dict.fromkeys(RATE_NAMES, 0.0)
    return {name: round(base[name] + getattr(more, name), 3) for name in RATE_NAMES}


async def _fan_out(
    broker: Broker, topics: Sequence[str], window: RateWindow[RateKey]
) -> dict[str, Any]:
    """Rule 1: every live broker's figures (this one's computed here), summed."""
    image = broker.replicas.image
    live = [
        (broker_id, registration.url)
        for broker_id, registration in sorted(image.brokers.items())
        if not registration.fenced
    ]

    async def figures(broker_id: int, url: str) -> BrokerStatsResponse | None:
        if broker_id == broker.broker_id:
            return await local_stats(broker, topics, window, broker.clock.now_ms())
        return await _ask(broker, url, topics)

    found = await asyncio.gather(*(figures(broker_id, url) for broker_id, url in live))
    answers = dict(zip((broker_id for broker_id, _ in live), found, strict=True))
    brokers: list[dict[str, Any]] = []
    totals: dict[str, float] | None = None
    per_topic: dict[str, dict[str, Any]] = {
        name: {"size_bytes": 0, "partitions": {}, "rates": None, "compaction": {}}
        for name in topics
    }
    for broker_id in sorted(image.brokers):
        answer = answers.get(broker_id)
        if answer is None:
            brokers.append({"id": broker_id, "answered": False})
            continue
        brokers.append(
            {
                "id": broker_id,
                "answered": True,
                "leaders": answer.leaders,
                "replicas": answer.replicas,
                "disk_bytes": answer.disk_bytes,
                "rates": None if answer.rates is None else answer.rates.to_json(),
            }
        )
        totals = _add_rates(totals, answer.rates)
        for name, topic in answer.topics.items():
            into = per_topic.get(name)
            if into is None:  # not asked: a broker's answer is not trusted to be only that
                continue
            async for sizes in paced(list(topic.partitions.items())):
                for index, size in sizes:
                    into["partitions"][str(index)] = size
                    into["size_bytes"] += size
            into["rates"] = _add_rates(into["rates"], topic.rates)
            for index, cleaner in topic.compaction.items():
                into["compaction"][str(index)] = msgspec.structs.asdict(cleaner)
    return {
        **partition_health(image),
        "rates": totals,
        "brokers": brokers,
        "topics": per_topic,
    }


class StatsWindow:
    """The console's figures on one broker (one per HTTP app, api/console_api.py): the rate
    window of this broker's counters (rule 3) and the fan-outs clients share (rule 6).

    A fan-out's figures are answered to many requests: they are only read (serialised),
    never changed, once made.
    """

    def __init__(
        self,
        rates: RateWindow[RateKey],
        fresh_s: float = FRESH_S,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.rates = rates
        self.fresh_s = fresh_s
        self._clock = clock  # seconds, monotonic; None: the event loop's
        # (when it ended, the topics it covered, its figures), newest last
        self._recent: deque[tuple[float, frozenset[str], dict[str, Any]]] = deque(maxlen=REMEMBERED)
        self._lock = asyncio.Lock()  # rule 6: one fan-out at a time

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def _fresh(self, topics: Sequence[str]) -> dict[str, Any] | None:
        now, wanted = self._now(), set(topics)
        newest = None
        for ended, covered, figures in self._recent:  # oldest first: the newest match wins
            if now - ended < self.fresh_s and wanted <= covered:
                newest = figures
        return newest

    async def shared(self, topics: Sequence[str], fan_out: FanOut) -> dict[str, Any]:
        """Rule 6: the figures of `topics` (distinct names), from a fresh fan-out that
        covered them, else from a new one `fan_out(topics)` (one at a time)."""
        figures = self._fresh(topics)
        if figures is None:
            async with self._lock:
                figures = self._fresh(topics)  # one that ended while this request waited
                if figures is None:
                    figures = await fan_out(topics)
                    self._recent.append((self._now(), frozenset(topics), figures))
        found = figures["topics"]
        # in the order asked, as a fan-out of exactly these topics answers them
        return {**figures, "topics": {name: found[name] for name in topics}}


async def cluster_stats(
    broker: Broker, topics: Sequence[str], window: StatsWindow
) -> dict[str, Any]:
    """Rules 1 and 6: every live broker's figures, summed, shared by requests close in
    time (`GET /v1/cluster/stats`)."""
    return await window.shared(topics, lambda asked: _fan_out(broker, asked, window.rates))


def new_stats_window() -> StatsWindow:
    """A broker app's console figures: rates over about the last 10 s, sampled at most once
    a second (docs/console.md)."""
    return StatsWindow(RateWindow(window_ms=10_000, sample_interval_ms=1_000, min_span_ms=1_000))


__all__ = [
    "FRESH_S",
    "RateKey",
    "StatsWindow",
    "cluster_stats",
    "counter_totals",
    "local_stats",
    "new_stats_window",
]
