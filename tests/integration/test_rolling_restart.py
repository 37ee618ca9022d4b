"""A rolling restart with `kraftlite cluster roll` (kraftlite/cli/roll.py, api/restart.py) on
a real 3+3 cluster, under a writer, a consumer group of three of kraftlite's consumers and
a classic group of two librdkafka consumers: every node restarts in place (same process, a
new boot id), controllers first, each once the cluster is whole again; the group keeps its
members across every coordinator move (their records in `__consumer_offsets`,
groups/members_log.py), and every acknowledged record is consumed by both groups. Then the
refusal: a roll does not start while a broker is down (a caller without ALTER on the
cluster cannot restart a node: tests/security/test_authorization.py)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer

from kraftlite.client import KraftliteError, SyncAdmin, SyncConsumer
from tests.harness.observe import wait_until
from tests.harness.processes import Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC, GROUP, CLASSIC_GROUP = "rolling", "rolling-group", "rolling-classic"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("rolling"), kafka=True)
    running.start()
    try:
        yield running
    finally:
        running.close()


def kraftlite(
    cluster: Cluster, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraftlite", *args, "--bootstrap", cluster.urls[1]],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def process_ids(cluster: Cluster) -> dict[str, int]:
    every = [*cluster.processes.values(), *cluster.quorum.processes.values()]
    return {p.name: p.popen.pid for p in every if p.popen is not None}


def boot_ids(cluster: Cluster) -> dict[str, str]:
    urls = {f"broker-{b}": url for b, url in cluster.urls.items()}
    urls |= {f"controller-{c}": url for c, url in cluster.quorum.urls.items()}
    return {name: http("GET", url + "/readyz")[1]["boot_id"] for name, url in urls.items()}


class Load:
    """A writer (HTTP, through any broker that answers) and three group consumers."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.stop = threading.Event()  # everything
        self.stop_writing = threading.Event()
        self.acked: set[str] = set()
        self.consumed: set[str] = set()
        self.members: list[set[str]] = []
        self.lock = threading.Lock()
        self.classic_consumed: set[str] = set()
        self.threads = [
            threading.Thread(target=self.write, daemon=True),
            *(threading.Thread(target=self.consume, daemon=True) for _ in range(3)),
            *(threading.Thread(target=self.consume_classic, daemon=True) for _ in range(2)),
        ]

    def write(self) -> None:
        for n in itertools.count():
            if self.stop.is_set() or self.stop_writing.is_set():
                return
            for url in self.cluster.urls.values():
                try:
                    status, _ = http(
                        "POST",
                        url + f"/v1/topics/{TOPIC}/records",
                        {"records": [{"key": f"k{n % 60}", "value": f"v{n}"}]},
                        timeout=5,
                    )
                except OSError:
                    continue
                if status == 200:
                    with self.lock:
                        self.acked.add(f"v{n}")
                    break
            time.sleep(0.02)

    def consume(self) -> None:
        with SyncConsumer(
            list(self.cluster.urls.values()), group_id=GROUP, auto_offset_reset="earliest"
        ) as consumer:
            consumer.subscribe([TOPIC])
            while not self.stop.is_set():
                try:
                    records = consumer.poll(500)
                except Exception:  # a broker restarting: poll again
                    time.sleep(0.2)
                    continue
                with self.lock:
                    self.consumed.update(r.value.decode() for r in records)

    def consume_classic(self) -> None:
        """A Kafka client in a classic group (JoinGroup, librdkafka's default protocol)."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "group.id": CLASSIC_GROUP,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    with self.lock:
                        self.classic_consumed.add(message.value().decode())
        finally:
            consumer.close()

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def settled_members(cluster: Cluster) -> set[str] | None:
    """The group's three members once it is stable."""
    with SyncAdmin(cluster.urls[1]) as admin:
        try:
            described = admin.describe_group(GROUP)
        except KraftliteError:  # not made yet
            return None
    members = {m["member_id"] for m in described["members"]}
    return members if len(members) == 3 and described["state"] == "stable" else None


def group_members(cluster: Cluster) -> set[str]:
    with SyncAdmin(cluster.urls[1]) as admin:
        return {m["member_id"] for m in admin.describe_group(GROUP)["members"]}


def test_a_roll_restarts_every_node_in_place_and_the_group_keeps_its_members(
    cluster: Cluster,
) -> None:
    cluster.create_topic(TOPIC, partitions=6, replication_factor=3)
    dry_run = kraftlite(cluster, "cluster", "roll", "--dry-run", "--output", "json")
    planned = json.loads(dry_run.stdout)
    names = [step["node"] for step in planned]
    assert names[3:] == ["broker-1", "broker-2", "broker-3"]
    assert sorted(names[:3]) == ["controller-1", "controller-2", "controller-3"]
    pids = process_ids(cluster)
    before = boot_ids(cluster)
    with Load(cluster) as load:
        members = wait_until(lambda: settled_members(cluster), what="three members", timeout_s=60)
        wait_until(lambda: len(load.consumed) > 50 or None, what="records consumed", timeout_s=60)
        rolled = kraftlite(cluster, "cluster", "roll", "--timeout", "120", "--output", "json")
        assert rolled.returncode == 0, rolled.stderr
        assert [n["node"] for n in json.loads(rolled.stdout)["nodes"]] == names
        # the same members: no coordinator move made anyone join again
        assert group_members(cluster) == members
        load.stop_writing.set()  # what the writer was told is written must be read
        load.threads[0].join(30)
        wait_until(
            lambda: load.acked <= load.consumed or None,
            what="every acknowledged record consumed",
            timeout_s=90,
        )
        wait_until(
            lambda: load.acked <= load.classic_consumed or None,
            what="every acknowledged record consumed by the classic group",
            timeout_s=90,
        )
    after = boot_ids(cluster)
    assert all(after[name] != before[name] for name in before)  # every node started again
    assert process_ids(cluster) == pids  # in place: the same processes
    for line in ("restarting", "back in"):
        assert line in rolled.stderr


def test_a_roll_waits_for_a_whole_cluster_and_gives_up_saying_why(cluster: Cluster) -> None:
    cluster.processes[3].terminate()
    try:
        wait_until(
            lambda: (
                any(
                    b["id"] == 3 and (b["fenced"] or b["in_controlled_shutdown"])
                    for b in http("GET", cluster.urls[1] + "/v1/cluster")[1]["brokers"]
                )
                or None
            ),
            what="broker 3 fenced",
            timeout_s=30,
        )
        before = boot_ids_of_brokers(cluster, (1, 2))
        refused = kraftlite(cluster, "cluster", "roll", "--only", "brokers", "--timeout", "2")
        assert refused.returncode == 1
        assert "broker 3 is" in refused.stderr and "the roll stopped" in refused.stderr
        assert boot_ids_of_brokers(cluster, (1, 2)) == before  # nothing restarted
    finally:
        cluster.processes[3].start()
        cluster.wait_ready([3])


def boot_ids_of_brokers(cluster: Cluster, ids: tuple[int, ...]) -> dict[int, Any]:
    return {b: http("GET", cluster.urls[b] + "/readyz")[1]["boot_id"] for b in ids}
