"""The callers of kraftlite/retry.py keep their budgets, rotations and errors: the client's
transport and producer, the Spark cluster calls, the broker's controller client. Network
calls are fakes; policies with waits are swapped for the same ones without (NO_WAIT), so
nothing here really sleeps."""

from __future__ import annotations

import dataclasses
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest

import kraftlite.client.transport as transport_module
import kraftlite.spark.cluster as cluster_module
from kraftlite.broker.controller_client import ControllerClient
from kraftlite.client.producer import Producer
from kraftlite.client.transport import PartitionInfo, Transport
from kraftlite.clock import ManualClock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.retry import NO_WAIT, NotYet
from kraftlite.spark.cluster import FETCH_ATTEMPTS, METADATA_ATTEMPTS, Cluster


def no_waits(monkeypatch: pytest.MonkeyPatch, module: Any, *names: str) -> None:
    for name in names:
        policy = getattr(module, name)
        monkeypatch.setattr(module, name, dataclasses.replace(policy, backoff=NO_WAIT))


# -- client: Transport ------------------------------------------------------------------------


def transport_answering(answers: dict[str, list[Any]]) -> tuple[Transport, list[str]]:
    """A Transport whose requests to each URL take the next of that URL's `answers` (an
    exception is raised); the URLs asked, in order."""
    transport = Transport(["http://b0", "http://b1", "http://b2"], clock=ManualClock())
    asked: list[str] = []

    async def request(base_url: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(base_url)
        answer = answers[base_url].pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    transport.request = request  # type: ignore[method-assign]
    return transport, asked


async def test_a_call_tries_each_bootstrap_broker_once_from_the_last_that_answered() -> None:
    starting = KraftliteError(ErrorCode.BROKER_NOT_AVAILABLE)
    transport, asked = transport_answering(
        {
            "http://b0": [aiohttp.ClientConnectionError()],
            "http://b1": [starting],
            "http://b2": [{"n": 1}, {"n": 2}],
        }
    )
    assert await transport.call("GET", "/v1/cluster") == {"n": 1}
    assert asked == ["http://b0", "http://b1", "http://b2"]
    assert await transport.call("GET", "/v1/cluster") == {"n": 2}
    assert asked[3:] == ["http://b2"]


async def test_a_call_starts_at_the_preferred_broker_and_wraps_around() -> None:
    transport, asked = transport_answering(
        {"http://b0": [{"n": 0}], "http://b1": [], "http://b2": [TimeoutError()]}
    )
    transport._preferred = 2
    assert await transport.call("GET", "/x") == {"n": 0}
    assert asked == ["http://b2", "http://b0"]
    assert transport._preferred == 0


async def test_an_answer_no_other_broker_would_change_surfaces_at_once() -> None:
    unknown = KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    transport, asked = transport_answering({"http://b0": [unknown]})
    with pytest.raises(KraftliteError) as caught:
        await transport.call("GET", "/v1/topics/nope")
    assert caught.value is unknown and asked == ["http://b0"]


async def test_no_bootstrap_broker_answering_is_a_timeout_after_one_round() -> None:
    refused = aiohttp.ClientConnectionError("refused")
    transport, asked = transport_answering(
        {url: [refused] for url in ("http://b0", "http://b1", "http://b2")}
    )
    with pytest.raises(KraftliteError) as caught:
        await transport.call("GET", "/x")
    assert caught.value.code is ErrorCode.REQUEST_TIMED_OUT
    assert "no bootstrap broker answered" in caught.value.message
    assert caught.value.__cause__ is refused
    assert len(asked) == 3


async def test_a_partition_without_a_leader_is_looked_up_again_then_fails_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_waits(monkeypatch, transport_module, "LEADER_RETRY")
    transport = Transport("http://b0", clock=ManualClock())
    refreshes: list[bool] = []

    async def partitions(topic: str, *, refresh: bool = False) -> list[PartitionInfo]:
        refreshes.append(refresh)
        return [PartitionInfo(0, -1, None)]

    transport.partitions = partitions  # type: ignore[method-assign]
    with pytest.raises(KraftliteError) as caught:
        await transport.leader_url("t", 0)
    assert caught.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert caught.value.message == "t-0 has no leader"
    assert refreshes == [False] + [True] * 19  # 20 looks, each after the first fresh


async def test_a_partition_index_out_of_range_is_not_retried() -> None:
    transport = Transport("http://b0", clock=ManualClock())
    looks = 0

    async def partitions(topic: str, *, refresh: bool = False) -> list[PartitionInfo]:
        nonlocal looks
        looks += 1
        return [PartitionInfo(0, 1, "http://b0")]

    transport.partitions = partitions  # type: ignore[method-assign]
    with pytest.raises(KraftliteError, match="has 1 partitions, not 3"):
        await transport.leader_url("t", 2)
    assert looks == 1


async def test_describe_keeps_its_twenty_tries_for_retriable_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_waits(monkeypatch, transport_module, "DESCRIBE_RETRY")
    transport, asked = transport_answering(
        {"http://b0": [KraftliteError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)] * 25}
    )
    transport.bootstrap = ["http://b0"]
    with pytest.raises(KraftliteError) as caught:
        await transport._describe("t")
    assert caught.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert len(asked) == transport_module.METADATA_ATTEMPTS == 20


def test_the_describe_waits_add_up_to_about_ten_seconds_as_before() -> None:
    policy = transport_module.DESCRIBE_RETRY
    waits = [policy.backoff.wait_s(n) for n in range(19)]
    assert 9.0 <= sum(waits) <= 10.0  # the linear 0.05 s steps added up to 9.5 s


# -- client: Producer -------------------------------------------------------------------------


class Leaderless:
    """A transport whose produce requests fail in turn with `errors`."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = errors
        self.requests = 0
        self.invalidated = 0

    async def leader_url(self, topic: str, partition: int) -> str:
        return "http://leader"

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        return {"offsets": [{"offset": 7}]}

    def invalidate(self, topic: str | None = None) -> None:
        self.invalidated += 1


async def test_the_producer_tries_retries_plus_one_times_and_times_out_an_unanswered_batch() -> (
    None
):
    leader = Leaderless([TimeoutError("no answer")] * 10)
    producer = Producer("http://x", transport=leader, retries=3, acks="1")  # type: ignore[arg-type]
    producer._retry = dataclasses.replace(producer._retry, backoff=NO_WAIT)
    with pytest.raises(KraftliteError) as caught:
        await producer._attempts("t", 0, b"batch")
    assert caught.value.code is ErrorCode.REQUEST_TIMED_OUT
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert (leader.requests, leader.invalidated) == (4, 4)


async def test_the_producer_surfaces_a_non_retriable_answer_at_once() -> None:
    too_large = KraftliteError(ErrorCode.MESSAGE_TOO_LARGE)
    leader = Leaderless([too_large])
    producer = Producer("http://x", transport=leader, acks="1")  # type: ignore[arg-type]
    with pytest.raises(KraftliteError) as caught:
        await producer._attempts("t", 0, b"batch")
    assert caught.value is too_large and leader.requests == 1


async def test_the_producer_retries_a_moved_leader_and_gets_its_offsets() -> None:
    leader = Leaderless([KraftliteError(ErrorCode.NOT_LEADER_OR_FOLLOWER)] * 2)
    producer = Producer("http://x", transport=leader, acks="1")  # type: ignore[arg-type]
    assert producer._retry.max_attempts == 11  # retries=10 by default
    assert [producer._retry.backoff.wait_s(n) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    producer._retry = dataclasses.replace(producer._retry, backoff=NO_WAIT)
    assert await producer._attempts("t", 0, b"batch") == [7]
    assert leader.requests == 3


# -- Spark: Cluster ------------------------------------------------------------------------------


def cluster_answering(monkeypatch: pytest.MonkeyPatch, answer: Any) -> tuple[Cluster, list[str]]:
    """A Cluster over b0 and b1 whose requests go to `answer(url)`; the URLs asked."""
    no_waits(monkeypatch, cluster_module, "CALL_RETRY", "FETCH_RETRY", "PRODUCE_RETRY")
    cluster = Cluster(("http://b0", "http://b1"), clock=ManualClock())
    asked: list[str] = []

    def request(url: str, *args: Any, **kwargs: Any) -> tuple[bytes, Any]:
        asked.append(url)
        return answer(url), {}

    monkeypatch.setattr(cluster, "_request", request)
    return cluster, asked


def test_a_spark_call_goes_round_the_brokers_for_its_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(url: str) -> bytes:
        raise ConnectionRefusedError(url)

    cluster, asked = cluster_answering(monkeypatch, refuse)
    with pytest.raises(KraftliteError) as caught:
        cluster.call("/v1/topics")
    assert caught.value.code is ErrorCode.REQUEST_TIMED_OUT
    assert asked == ["http://b0/v1/topics", "http://b1/v1/topics"] * METADATA_ATTEMPTS
    asked.clear()
    with pytest.raises(KraftliteError):
        cluster.call("/v1/topics", attempts=1)  # the stream's commit: one round
    assert len(asked) == 2


def test_a_spark_call_surfaces_the_brokers_last_retriable_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def answer(url: str) -> bytes:
        if "b0" in url:
            raise ConnectionRefusedError(url)
        raise KraftliteError(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    cluster, _ = cluster_answering(monkeypatch, answer)
    with pytest.raises(KraftliteError) as caught:
        cluster.call("/v1/groups/g/offsets", {"offsets": []}, attempts=2)
    assert caught.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_a_spark_call_moves_on_from_a_starting_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    def answer(url: str) -> bytes:
        if "b0" in url:
            raise KraftliteError(ErrorCode.BROKER_NOT_AVAILABLE)
        return b'{"topics": []}'

    cluster, asked = cluster_answering(monkeypatch, answer)
    assert cluster.call("/v1/topics") == {"topics": []}
    assert asked == ["http://b0/v1/topics", "http://b1/v1/topics"]


def page(base_offset: int, count: int) -> bytes:
    return batch_format.encode_batch(
        [b"v"] * count, timestamps=[0] * count, base_offset=base_offset
    )


def fetching(monkeypatch: pytest.MonkeyPatch, pages: list[Any]) -> tuple[Cluster, list[str]]:
    """A Cluster whose leader is http://l0 and whose fetches answer `pages` in turn."""
    cluster, asked = cluster_answering(monkeypatch, lambda url: b"")

    def fetch_page(
        leader: str, topic: str, partition: int, offset: int, max_bytes: int
    ) -> tuple[bytes, int]:
        asked.append(leader)
        answer = pages.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer, batch_format.next_offset_after(answer) if answer else offset

    monkeypatch.setattr(cluster, "_leader", lambda topic, partition: "http://l0")
    monkeypatch.setattr(cluster, "_fetch_page", fetch_page)
    return cluster, asked


def test_a_fetch_follows_a_named_leader_and_looks_up_a_gone_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moved = KraftliteError(ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_url="http://l1")
    cluster, asked = fetching(monkeypatch, [moved, page(0, 2), ConnectionResetError(), page(2, 2)])
    pages = list(cluster.fetch("t", 0, 0, 4))
    assert [next_offset for _, next_offset in pages] == [2, 4]
    assert asked == ["http://l0", "http://l1", "http://l1", "http://l0"]


def test_a_page_that_stays_empty_fails_after_its_retries_each_page_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    empty = b""
    # the first page gets there on its last try; the second never does
    answers = [empty] * FETCH_ATTEMPTS + [page(0, 1)] + [empty] * (FETCH_ATTEMPTS + 1)
    cluster, asked = fetching(monkeypatch, answers)
    read = cluster.fetch("t", 0, 0, 5)
    assert next(read)[1] == 1
    with pytest.raises(KraftliteError) as caught:
        next(read)
    assert caught.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert "nothing at 1 although the plan reads up to 5" in caught.value.message
    assert len(asked) == 2 * (FETCH_ATTEMPTS + 1)


def test_records_lost_to_retention_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = KraftliteError(ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=3)
    cluster, asked = fetching(monkeypatch, [gone, page(3, 2)])
    with pytest.raises(cluster_module.DataLossError):
        list(cluster.fetch("t", 0, 0, 5))
    cluster, asked = fetching(monkeypatch, [gone, page(3, 2)])
    assert [n for _, n in cluster.fetch("t", 0, 0, 5, skip_lost=True)] == [5]
    assert len(asked) == 2


def test_a_spark_produce_follows_the_leader_for_its_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def answer(url: str) -> bytes:
        if url.startswith("http://l0"):
            raise KraftliteError(ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_url="http://l1")
        return b'{"offsets": [{"offset": 42}]}'

    cluster, asked = cluster_answering(monkeypatch, answer)
    monkeypatch.setattr(cluster, "_leader", lambda topic, partition: "http://l0")
    assert cluster.produce("t", 0, b"batch") == 42
    assert [url.split("/v1")[0] for url in asked] == ["http://l0", "http://l1"]

    def refuse(url: str) -> bytes:
        raise ConnectionRefusedError(url)

    cluster, asked = cluster_answering(monkeypatch, refuse)
    monkeypatch.setattr(cluster, "_leader", lambda topic, partition: "http://l0")
    with pytest.raises(ConnectionRefusedError):
        cluster.produce("t", 0, b"batch")
    assert len(asked) == FETCH_ATTEMPTS + 1


def test_unknown_offsets_are_asked_again_then_fail_naming_the_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_waits(monkeypatch, cluster_module, "OFFSETS_RETRY")
    cluster = Cluster(("http://b0",), clock=ManualClock())
    described = {"topic_id": "x", "partitions": [{"partition": 0, "high_watermark": None}]}
    calls: list[str] = []
    monkeypatch.setattr(cluster, "call", lambda path, *a, **k: calls.append(path) or described)
    with pytest.raises(NotYet, match=r"partitions \[0\] have no leader"):
        cluster.topic("t")
    assert len(calls) == METADATA_ATTEMPTS


# -- broker: ControllerClient ------------------------------------------------------------------


class Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.headers: dict[str, str] = {}
        self._body = orjson.dumps(body)

    async def read(self) -> bytes:
        return self._body


class Controllers:
    """An aiohttp session stand-in: each controller URL answers with its handler, which
    may move the clock (a slow controller) or raise (one that does not answer)."""

    def __init__(self, clock: ManualClock, handlers: dict[str, Any]) -> None:
        self.clock = clock
        self.handlers = handlers
        self.asked: list[str] = []
        self.timeouts: list[float | None] = []

    @asynccontextmanager
    async def _answer(self, base: str) -> Any:
        result = self.handlers[base]()
        yield result

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        base = url.rsplit("/x", 1)[0]
        self.asked.append(base)
        self.timeouts.append(kwargs["timeout"].total)
        return self._answer(base)


def not_controller() -> Response:
    return Response(503, {"error_code": "NOT_CONTROLLER", "message": "no"})


def ok() -> Response:
    return Response(200, {"ok": True})


async def test_the_controller_client_moves_on_and_prefers_the_one_that_answered() -> None:
    clock = ManualClock()
    session = Controllers(clock, {"http://c1": not_controller, "http://c2": ok})
    client = ControllerClient(("http://c1", "http://c2"), session, clock)  # type: ignore[arg-type]
    assert await client.call("GET", "/x") == (200, {"ok": True})
    assert await client.call("GET", "/x") == (200, {"ok": True})
    assert session.asked == ["http://c1", "http://c2", "http://c2"]


async def test_a_quorum_answer_surfaces_at_once_and_its_controller_is_preferred() -> None:
    clock = ManualClock()

    def exists() -> Response:
        return Response(409, {"error_code": "TOPIC_ALREADY_EXISTS", "message": "t"})

    session = Controllers(clock, {"http://c1": not_controller, "http://c2": exists})
    client = ControllerClient(("http://c1", "http://c2"), session, clock)  # type: ignore[arg-type]
    with pytest.raises(KraftliteError) as caught:
        await client.call("POST", "/x", {})
    assert caught.value.code is ErrorCode.TOPIC_ALREADY_EXISTS
    assert client._preferred == "http://c2"


async def test_a_controller_that_does_not_answer_is_tried_last_for_a_while() -> None:
    clock = ManualClock()

    def hung() -> Response:
        clock.advance(1_000)
        raise TimeoutError

    session = Controllers(clock, {"http://c1": hung, "http://c2": ok, "http://c3": ok})
    urls = ("http://c1", "http://c2", "http://c3")
    client = ControllerClient(urls, session, clock)  # type: ignore[arg-type]
    await client.call("GET", "/x", timeout_s=10, attempt_timeout_s=2)
    assert session.asked == ["http://c1", "http://c2"]
    assert session.timeouts == [2, 2]  # the attempt's cap, below the time left
    client.rotate()  # prefer c3, then c1 and c2 in turn: c1 is suspect, so it goes last
    session.handlers["http://c3"] = not_controller
    session.asked.clear()
    await client.call("GET", "/x")
    assert session.asked == ["http://c3", "http://c2"]
    clock.advance(5_000)  # c1 is no longer suspect: it is first again when preferred
    client.rotate()
    client.rotate()
    session.asked.clear()
    with pytest.raises(KraftliteError) as caught:
        await client.call("GET", "/x", timeout_s=1.0)
    assert session.asked == ["http://c1"]  # it took the whole second
    assert caught.value.code is ErrorCode.NOT_CONTROLLER


async def test_the_controller_deadline_ends_the_failover_with_the_last_answer() -> None:
    clock = ManualClock()

    def slow_no() -> Response:
        clock.advance(500)
        return not_controller()

    session = Controllers(clock, {"http://c1": slow_no, "http://c2": slow_no})
    client = ControllerClient(("http://c1", "http://c2"), session, clock)  # type: ignore[arg-type]
    with pytest.raises(KraftliteError) as caught:
        await client.call("GET", "/x", timeout_s=1.0)
    assert caught.value.code is ErrorCode.NOT_CONTROLLER
    # c1 then c2 with what is left; the pause before another round would pass the deadline
    assert session.asked == ["http://c1", "http://c2"]
    assert session.timeouts == [1.0, 0.5]
    assert clock.monotonic_ms() == 1_000


async def test_the_last_try_before_the_deadline_still_gets_a_tenth_of_a_second() -> None:
    clock = ManualClock()

    def slow_no() -> Response:
        clock.advance(980)
        return not_controller()

    session = Controllers(clock, {"http://c1": slow_no, "http://c2": ok})
    client = ControllerClient(("http://c1", "http://c2"), session, clock)  # type: ignore[arg-type]
    assert await client.call("GET", "/x", timeout_s=1.0) == (200, {"ok": True})
    assert session.timeouts == [1.0, 0.1]
