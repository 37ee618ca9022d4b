"""A batch read whose partition leader is killed -9 halfway through still returns exactly the
planned records: the reader follows the partition to its new leader (an ISR member, so it
holds every acknowledged record).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftlite.spark.arrow import default_columns
from kraftlite.spark.options import Options
from kraftlite.spark.source import ReadSettings, plan, read_range
from tests.harness.processes import FAST_SESSIONS, Cluster, http
from tests.spark.support import bootstrap, produce, reader

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.timeout(300),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("spark-failover"),
        broker_config={"replica.lag.time.max.ms": 2000},
        controller_config=FAST_SESSIONS,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def leader_of(cluster: Cluster, topic: str) -> int:
    for broker_id, process in cluster.processes.items():
        if process.serving:
            described = http("GET", cluster.urls[broker_id] + f"/v1/topics/{topic}")[1]
            return int(described["partitions"][0]["leader"])
    raise AssertionError("no broker is up")


@pytest.mark.slice
def test_a_leader_killed_during_a_batch_read_changes_nothing_in_the_result(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    acked = produce(cluster, "moving", 1, 2000, **{"min.insync.replicas": 2})
    options = Options(
        {"kraftlite.bootstrap": bootstrap(cluster), "subscribe": "moving", "fetchMaxBytes": "4096"}
    )
    [planned] = plan(options, ReadSettings.of(options, default_columns(include_headers=True)))
    assert (planned.start, planned.end) == (0, 2000)

    batches = read_range(planned)
    rows = next(batches).to_pylist()  # the first page came from the first leader
    assert len(rows) < 2000  # so the rest is still to fetch
    first_leader = leader_of(cluster, "moving")
    cluster.processes[first_leader].kill()
    for batch in batches:  # the rest: from whoever leads now
        rows += batch.to_pylist()
    assert leader_of(cluster, "moving") != first_leader

    assert [r["offset"] for r in rows] == list(range(2000))
    for i, meta in enumerate(acked):
        row = rows[meta.offset]
        assert row["value"] == (f"value-{i}".encode() if i % 7 else None)
        assert row["key"] == (f"k{i}".encode() if i % 3 else None)
    # and Spark, planning on the cluster that lost a broker, reads the same
    assert reader(spark, cluster, subscribe="moving").count() == 2000
