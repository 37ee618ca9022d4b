"""The console's figures fan-out is shared (broker/stats.py rule 6), and work over many
partitions yields to the event loop (broker/offsets.py rule 3). In-process: the fan-out is a
fake that counts its calls, so no cluster is started."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from kraftlite.broker.offsets import Offsets, paced
from kraftlite.broker.rates import RateWindow
from kraftlite.broker.stats import StatsWindow
from kraftlite.groups.offsets import CommittedOffset
from kraftlite.service import _lag_rows


class FakeFanOut:
    """Counts fan-outs, how many ran at once, and answers figures naming the asked topics."""

    def __init__(self, delay_s: float = 0.01) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.running = self.most_at_once = 0
        self.delay_s = delay_s

    async def __call__(self, topics: Sequence[str]) -> dict[str, Any]:
        self.calls.append(tuple(topics))
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        await asyncio.sleep(self.delay_s)  # the node calls
        self.running -= 1
        return {
            "offline_partitions": 0,
            "brokers": [{"id": 1, "answered": True, "fan_out": len(self.calls)}],
            "topics": {name: {"size_bytes": len(name)} for name in topics},
        }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _window(clock: Clock, fresh_s: float = 1.0) -> StatsWindow:
    return StatsWindow(RateWindow(), fresh_s=fresh_s, clock=clock)


async def test_concurrent_requests_share_one_fan_out() -> None:
    fan_out, window = FakeFanOut(), _window(Clock())
    answers = await asyncio.gather(*(window.shared(["a", "b"], fan_out) for _ in range(50)))
    assert fan_out.calls == [("a", "b")]
    assert all(answer == answers[0] for answer in answers)
    assert answers[0]["topics"] == {"a": {"size_bytes": 1}, "b": {"size_bytes": 1}}


async def test_rapid_requests_covered_by_a_fresh_fan_out_reuse_it() -> None:
    clock = Clock()
    fan_out, window = FakeFanOut(), _window(clock)
    await window.shared(["orders", "payments"], fan_out)
    clock.now += 0.5
    # the same topics, fewer, in another order, or none (the overview): the same fan-out,
    # each answer naming exactly the topics it asked for, in its order
    assert (await window.shared(["payments", "orders"], fan_out))["topics"] == {
        "payments": {"size_bytes": 8},
        "orders": {"size_bytes": 6},
    }
    assert list((await window.shared(["payments"], fan_out))["topics"]) == ["payments"]
    assert (await window.shared([], fan_out))["topics"] == {}
    assert (await window.shared([], fan_out))["brokers"][0]["fan_out"] == 1
    assert fan_out.calls == [("orders", "payments")]


async def test_a_fan_out_answers_only_while_fresh_and_only_topics_it_covered() -> None:
    clock = Clock()
    fan_out, window = FakeFanOut(), _window(clock)
    await window.shared(["a"], fan_out)
    await window.shared(["a", "b"], fan_out)  # b was not asked: a new fan-out
    assert fan_out.calls == [("a",), ("a", "b")]
    clock.now += 1.0  # both are stale now
    answer = await window.shared(["a"], fan_out)
    assert fan_out.calls == [("a",), ("a", "b"), ("a",)]
    assert answer["brokers"][0]["fan_out"] == 3


async def test_a_broker_runs_one_fan_out_at_a_time() -> None:
    """Requests for different topics at once wait for each other, then share what they can:
    a client cannot make one broker call every broker many times over at once."""
    fan_out, window = FakeFanOut(), _window(Clock())
    asked = [["a"], ["b"], ["a"], ["c"], [], ["b"]]
    answers = await asyncio.gather(*(window.shared(topics, fan_out) for topics in asked))
    assert fan_out.most_at_once == 1
    assert sorted(fan_out.calls) == [("a",), ("b",), ("c",)]
    assert [list(answer["topics"]) for answer in answers] == asked


async def test_a_failed_fan_out_is_not_remembered() -> None:
    window = _window(Clock())

    async def failing(topics: Sequence[str]) -> dict[str, Any]:
        raise RuntimeError("no figures")

    with pytest.raises(RuntimeError):
        await window.shared(["a"], failing)
    fan_out = FakeFanOut()
    await window.shared(["a"], fan_out)
    assert fan_out.calls == [("a",)]


async def test_paced_work_lets_other_tasks_run_between_chunks() -> None:
    ticks = 0

    async def other() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(other())
    await asyncio.sleep(0)
    seen = []
    async for chunk in paced(list(range(10)), size=3):
        seen.append((list(chunk), ticks))
    task.cancel()
    assert [chunk for chunk, _ in seen] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    moments = [at for _, at in seen]
    assert moments == sorted(set(moments))  # the other task ran between every two chunks


def test_lag_rows_are_by_group_then_partition_with_unknown_lag_left_none() -> None:
    shown = {
        "g1": {("t", 1): CommittedOffset(5, ""), ("t", 0): CommittedOffset(9, "")},
        "g2": {("u", 0): CommittedOffset(3, "")},
    }
    ends = {("t", 0): Offsets(0, 10), ("t", 1): Offsets(0, 4)}
    rows = [(r.group, r.topic, r.partition, r.committed, r.lag) for r in _lag_rows(shown, ends)]
    assert rows == [("g1", "t", 0, 9, 1), ("g1", "t", 1, 5, 0), ("g2", "u", 0, 3, None)]
