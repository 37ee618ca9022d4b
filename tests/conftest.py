"""Shared fixtures, and the chaos layer's slice.

The chaos layer (marker `chaos`) is the suite's slowest: about 10 minutes of its 30 on this
2-core machine. A run takes a bounded slice of it unless KRAFTLITE_FULL_SUITE=1:
- one of the randomized fault runs (marker `randomized`: under acks=all load, with
  replicas moving, on a compacted topic, under a transactional job, on real links, and a
  Spark stream killed anywhere; 40-120 s each), chosen by the day (UTC), so each runs in
  CI at least once every six days;
  KRAFTLITE_RANDOMIZED=N takes the Nth (0-based, in test id order) instead;
- every chaos test also marked `slice`: a killed leader's fencing, kill -9 of a leader
  under load, a move under load, the quorum's membership under load, a leader killed under
  a Spark read;
- and a rotating quarter of the others (dealt in test id order), chosen by the day (UTC),
  so each of them runs in CI at least once every four days; KRAFTLITE_SHARE=N takes
  quarter N (0-3) instead. Each chaos test builds its own cluster, so any subset runs as
  the whole does (the Spark tests share one cluster, and all of them always run).
The rest are deselected; the run's header says which quarter it took.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftlite.storage.log import LogStorage, StorageConfig

SHARES = 4
ROTATING_LAYERS = ("chaos",)


def _share() -> int | None:
    """The quarter of the chaos layer's unsliced tests this run takes; None: all."""
    if os.environ.get("KRAFTLITE_FULL_SUITE") == "1":
        return None
    chosen = os.environ.get("KRAFTLITE_SHARE")
    if chosen is not None:
        return int(chosen) % SHARES
    return datetime.datetime.now(datetime.UTC).toordinal() % SHARES


def pytest_report_header(config: pytest.Config) -> str:
    share = _share()
    if share is None:
        return "chaos layer: all of it (KRAFTLITE_FULL_SUITE=1)"
    return (
        f"chaos layer: its slice, one randomized run and quarter {share} of the rest "
        "(KRAFTLITE_FULL_SUITE=1 runs all)"
    )


def _randomized(count: int) -> int:
    """Which of the `count` randomized fault runs this run takes."""
    chosen = os.environ.get("KRAFTLITE_RANDOMIZED")
    if chosen is not None:
        return int(chosen) % count
    return datetime.datetime.now(datetime.UTC).toordinal() % count


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    share = _share()
    if share is None:
        return
    randomized = sorted(item.nodeid for item in items if item.get_closest_marker("randomized"))
    if randomized:
        taken = randomized[_randomized(len(randomized))]
        skipped = {nodeid for nodeid in randomized if nodeid != taken}
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid in skipped])
        items[:] = [item for item in items if item.nodeid not in skipped]
    rotating = sorted(
        (item.nodeid for item in items
         if item.get_closest_marker("slice") is None
         and item.get_closest_marker("randomized") is None
         and any(item.get_closest_marker(layer) for layer in ROTATING_LAYERS)),
    )  # fmt: skip
    dropped_ids = {nodeid for n, nodeid in enumerate(rotating) if n % SHARES != share}
    dropped = [item for item in items if item.nodeid in dropped_ids]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.nodeid not in dropped_ids]


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[LogStorage]:
    store = LogStorage(StorageConfig(path=tmp_path / "log"))
    yield store
    store.close()
