"""Many partitions in one multi-process cluster (issue 13): metadata followed as a log by
offset, a broker catching up through a snapshot and then records, a kill -9 handled in
bounded batches, and fetch sessions that leave an idle cluster idle.

`scripts/bench_scale.py` measures the same at up to 100,000 partitions; here 10,000 are
enough to break anything that costs O(partitions) per change or per round.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.harness.observe import wait_until
from tests.harness.processes import FAST_SESSIONS, Cluster, http, http_retry

pytestmark = [pytest.mark.integration, pytest.mark.scale, pytest.mark.timeout(240)]
TOPICS, PER_TOPIC = 20, 500  # 10,000 partitions, RF 3: 30,000 replicas on 3 brokers


def topic_states(cluster: Cluster, broker: int, names: list[str]) -> dict[str, Any]:
    def one(name: str) -> tuple[str, Any]:
        status, body = http("GET", cluster.urls[broker] + f"/v1/topics/{name}", timeout=30)
        return name, body if status == 200 else None

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(one, names))


def all_isrs_full(cluster: Cluster, names: list[str], brokers: list[int]) -> bool:
    for broker in brokers:
        states = topic_states(cluster, broker, names)
        for body in states.values():
            if body is None or any(len(p["isr"]) != 3 for p in body["partitions"]):
                return False
    return True


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(
        tmp_path_factory.mktemp("scale"),
        controller_config={**FAST_SESSIONS, "metadata.log.retained.batches": 200},
    )
    started.start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def names(cluster: Cluster) -> list[str]:
    created = [f"scale-{i}" for i in range(TOPICS)]

    def create(name: str) -> None:
        status, body = http_retry(
            "POST",
            cluster.urls[1 + hash(name) % 3] + "/v1/topics",
            {"name": name, "partitions": PER_TOPIC, "replication_factor": 3},
            timeout_s=60,
        )
        assert status == 201, body

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, created))
    wait_until(lambda: all_isrs_full(cluster, created, [1, 2, 3]), 90, "every ISR full")
    return created


def leaders(cluster: Cluster, broker: int, names: list[str]) -> dict[tuple[str, int], int]:
    return {
        (name, p["partition"]): p["leader"]
        for name, body in topic_states(cluster, broker, names).items()
        if body is not None
        for p in body["partitions"]
    }


def test_10000_partitions_serve_and_an_idle_cluster_stays_idle(
    cluster: Cluster, names: list[str]
) -> None:
    # one record through every broker's forwarding, acks=all, on a sample of partitions
    rng = random.Random(13)
    sample = [(rng.choice(names), rng.randrange(PER_TOPIC)) for _ in range(60)]
    for i, (name, index) in enumerate(sample):
        url = cluster.urls[1 + i % 3] + f"/v1/topics/{name}/partitions/{index}/records"
        status, body = http_retry("POST", url, {"records": [{"value": f"v{i}"}]})
        assert status == 200 and "error_code" not in body["offsets"][0], body
        path = f"/v1/topics/{name}/partitions/{index}/records?offset=0&max_wait_ms=5000"
        status, read = http_retry("GET", cluster.urls[1 + (i + 1) % 3] + path)
        assert status == 200 and f"v{i}" in [r["value"] for r in read["records"]], read

    # idle: no produce, no admin. Fetch sessions and the ISR check cost nothing per idle
    # partition, so the whole cluster's CPU over a few seconds stays far below one core.
    time.sleep(2)  # let the last HW round settle
    pids = [p.popen.pid for p in [*cluster.processes.values(), *cluster.quorum.processes.values()]]
    before, start = sum(cpu_seconds(pid) for pid in pids), time.monotonic()
    time.sleep(5)
    cores = (sum(cpu_seconds(pid) for pid in pids) - before) / (time.monotonic() - start)
    print(f"idle cluster: {cores:.3f} cores")
    # Before fetch sessions this cluster burned ~1.9 cores idle at 10,000 partitions.
    assert cores < 0.6, f"idle cluster used {cores:.2f} cores"


def test_a_broker_down_through_many_changes_catches_up_by_snapshot_then_records(
    cluster: Cluster, names: list[str]
) -> None:
    """The controllers keep 200 batches here: a broker that misses more must take a snapshot
    of the image, then follow the records after it."""
    status, before = http("GET", cluster.quorum.urls[1] + "/v1/quorum")
    cluster.processes[3].kill()
    wait_until(
        lambda: all(v != 3 for v in leaders(cluster, 1, names).values()), 30, "leaders off 3"
    )
    extra = [f"while-down-{i}" for i in range(260)]  # each creation is a committed batch
    for name in extra:
        status, body = http_retry(
            "POST",
            cluster.urls[1] + "/v1/topics",
            {"name": name, "partitions": 1, "replication_factor": 2},
        )
        assert status == 201, body
    cluster.processes[3].start()
    cluster.wait_ready([3], timeout_s=60)
    served = [
        http("GET", url + "/v1/quorum")[1]["metadata_log"]["snapshots_served"]
        for url in cluster.quorum.urls.values()
    ]
    assert sum(served) > 0, "the restarted broker should have needed a snapshot"
    # it serves every topic created while it was down, and the records after the snapshot
    assert all(body is not None for body in topic_states(cluster, 3, extra[-20:]).values())
    status, body = http_retry(
        "POST", cluster.urls[1] + "/v1/topics", {"name": "after-snapshot", "partitions": 3}
    )
    assert status == 201, body
    wait_until(
        lambda: http("GET", cluster.urls[3] + "/v1/topics/after-snapshot")[0] == 200,
        20,
        "the restarted broker to follow records after its snapshot",
    )
    wait_until(lambda: all_isrs_full(cluster, names, [3]), 90, "broker 3 back in every ISR")
    assert before["metadata_log"]["first_retained_version"] >= 0
