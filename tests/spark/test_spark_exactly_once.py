"""The kraftlite sink writes each row exactly once (kraftlite/spark/sink.py rule 4), and the
source reads read_committed by default (source.py rule 6), against a real cluster:

- a micro-batch replayed after its driver died halfway through committing it commits
  nothing twice (the sink's own calls, driven as Spark drives them);
- a batch write whose job fails leaves nothing a read_committed reader sees;
- a streaming query killed (its driver, with SIGKILL, at random, while its transactions
  are open, and its executors' Python workers) and restarted from its checkpoint each time
  writes every input row exactly once (real Spark, local mode, in a process of its own).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from kraftlite.client import Admin, Producer
from kraftlite.spark.cluster import Brokers
from kraftlite.spark.sink import RecordSender, SinkCommit, SinkSettings, end_all
from tests.harness.processes import Cluster, http
from tests.spark.support import bootstrap, reader

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]
APP = Path(__file__).parent / "apps" / "eos_copy.py"


def create(cluster: Cluster, topic: str, partitions: int) -> None:
    async def go() -> None:
        async with Admin(bootstrap(cluster)) as admin:
            await admin.create_topic(topic, partitions=partitions)

    asyncio.run(go())


def values(spark: Any, cluster: Cluster, topic: str, **options: str) -> collections.Counter:
    rows = reader(spark, cluster, subscribe=topic, **options).select("value").collect()
    return collections.Counter(bytes(r.value) for r in rows)


def settled(cluster: Cluster, topic: str, timeout_s: float = 60) -> None:
    """Every transaction on `topic` decided and its markers written: each partition's last
    stable offset is its high watermark (a read_committed read then sees all it will)."""
    deadline = time.monotonic() + timeout_s
    while True:
        described = http("GET", cluster.urls[1] + f"/v1/topics/{topic}?isolation=read_committed")[1]
        open_ = [
            p["partition"]
            for p in described["partitions"]
            if p["last_stable_offset"] != p["high_watermark"]
        ]
        if not open_:
            return
        assert time.monotonic() < deadline, f"{topic}: partitions {open_} keep a transaction open"
        time.sleep(0.2)


def task(settings: SinkSettings, transactional_id: str, rows: list[bytes]) -> SinkCommit:
    """One write task, as sink.write_task runs it in Spark."""
    sender = RecordSender(settings, transactional_id)
    for value in rows:
        sender.add({"value": value, "key": None})
    return sender.flush()


def test_a_replayed_micro_batch_commits_nothing_twice(spark: Any, cluster: Cluster) -> None:
    create(cluster, "eos-replay", 2)
    settings = SinkSettings(Brokers(tuple(cluster.urls.values())), "eos-replay", 4096, 30_000)
    first = [f"a{i}".encode() for i in range(40)]
    second = [f"b{i}".encode() for i in range(40)]
    ids = ("sink-test-q-0", "sink-test-q-1")

    # micro-batch 7: both tasks write; the driver commits the first, then dies
    end_all(settings, [task(settings, ids[0], first)], commit=True, tag="7")
    task(settings, ids[1], second)  # left open by the dead driver

    # the restarted query replays micro-batch 7: the same rows from the same tasks; the
    # second task's InitProducerId aborts what its first attempt left open
    replayed = [task(settings, ids[0], first), task(settings, ids[1], second)]
    found = http("GET", cluster.urls[2] + f"/v1/transactions/{ids[0]}")[1]
    assert (found["state"], found["commit_tag"]) == ("Ongoing", "7")
    end_all(settings, replayed, commit=True, tag="7")
    settled(cluster, "eos-replay")

    committed = values(spark, cluster, "eos-replay")  # read_committed: the default
    assert committed == collections.Counter(first + second)
    everything = values(
        spark, cluster, "eos-replay", **{"kafka.isolation.level": "read_uncommitted"}
    )
    assert everything == collections.Counter((first + second) * 2)  # the aborted copies too

    # micro-batch 8 goes on as usual; an aborted one is never seen
    end_all(settings, [task(settings, ids[0], [b"c0"])], commit=True, tag="8")
    end_all(settings, [task(settings, ids[1], [b"gone"])], commit=False, tag="9")
    settled(cluster, "eos-replay")
    assert values(spark, cluster, "eos-replay") == collections.Counter([*first, *second, b"c0"])
    for transactional_id, tag in zip(ids, ("8", "7"), strict=True):
        found = http("GET", cluster.urls[3] + f"/v1/transactions/{transactional_id}")[1]
        assert found["commit_tag"] == tag  # an abort leaves the last commit's tag


def test_a_failed_batch_write_leaves_nothing_committed(spark: Any, cluster: Cluster) -> None:
    create(cluster, "eos-batch", 2)

    def write(frame: Any) -> None:
        (
            frame.write.format("kraftlite")
            .option("kraftlite.bootstrap", bootstrap(cluster))
            .option("topic", "eos-batch")
            .option("batchMaxBytes", "256")
            .mode("append")
            .save()
        )

    rows = spark.range(0, 200, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")
    broken = rows.selectExpr("value", "IF(value = '199', 7, NULL) AS partition")
    with pytest.raises(Exception, match="has partitions 0-1, a row asks for 7"):
        write(broken)
    # the failed task's open transaction is fenced by the driver's abort, well before its
    # timeout (300 s): readers are not held back
    settled(cluster, "eos-batch", timeout_s=30)
    assert values(spark, cluster, "eos-batch") == collections.Counter()

    write(rows)
    settled(cluster, "eos-batch")
    assert values(spark, cluster, "eos-batch") == collections.Counter(
        str(i).encode() for i in range(200)
    )


# -- a streaming query killed and restarted ---------------------------------------------------


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line), from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        found[int(entry)] = (parent, cmdline)
    return found


def descendants(root: int, procs: dict[int, tuple[int, str]] | None = None) -> set[int]:
    """`root`'s descendants in one snapshot of the processes (`procs`, else taken now)."""
    procs = _processes() if procs is None else procs
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, (parent, _) in procs.items() if parent in frontier} - found
        found |= frontier
    return found


def kill_python_workers(root: int) -> int:
    """SIGKILL the Python workers (forked by pyspark.daemon, which has a process group of
    its own) under process `root`: the tasks running in them fail, and Spark runs them
    again. How many were killed."""
    procs = _processes()
    under = descendants(root, procs)
    daemons = {pid for pid in under if "pyspark.daemon" in procs[pid][1]}
    killed = 0
    for pid in under:
        if procs[pid][0] in daemons:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


class App:
    """eos_copy.py in a process group of its own (the Python driver and its JVM) and the
    JVM's Python workers: SIGKILL takes all of them, as a machine losing power would."""

    def __init__(self, cluster: Cluster, checkpoint: Path, log: Path) -> None:
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(APP), bootstrap(cluster), str(checkpoint), "0.02"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        under = descendants(self.proc.pid)  # the Python daemon has a group of its own
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in under:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(30)
        self.log.close()


def committed_count(cluster: Cluster, topic: str) -> int:
    """Records below each partition's last stable offset (markers included: a measure of
    progress, not the check)."""
    described = http("GET", cluster.urls[1] + f"/v1/topics/{topic}?isolation=read_committed")[1]
    return sum(p["last_stable_offset"] or 0 for p in described["partitions"])


def query_transactions(cluster: Cluster, checkpoint: Path) -> dict[str, dict[str, Any]]:
    """The sink's transactions of the query whose checkpoint this is, by id."""
    metadata = checkpoint / "metadata"
    if not metadata.exists():
        return {}
    import json  # noqa: PLC0415

    query_id = json.loads(metadata.read_text().splitlines()[0])["id"]
    found = {}
    for task_partition in range(4):
        name = f"kraftlite-spark-{query_id}-{task_partition}"
        status, answer = http(
            "GET", cluster.urls[1] + f"/v1/transactions/{urllib.parse.quote(name)}"
        )
        if status == 200:
            found[name] = answer
    return found


def wait_for(what: str, check: Any, explain: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}: {explain()}"
        time.sleep(0.05)


@pytest.mark.randomized  # (120 s: one randomized fault run per suite run, tests/conftest.py)
def test_a_stream_killed_anywhere_writes_every_row_once(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    create(cluster, "eos-in", 3)
    create(cluster, "eos-out", 3)
    sent = [0]

    async def send(count: int) -> None:  # the next `count` input rows
        async with Producer(bootstrap(cluster), linger_ms=5) as producer:
            for i in range(sent[0], sent[0] + count):
                await producer.send("eos-in", f"v{i}".encode(), partition=i % 3)
            await producer.flush()
        sent[0] += count

    checkpoint, log = tmp_path / "checkpoint", tmp_path / "app.log"
    kills: list[str] = []

    def run(until: Any, what: str) -> None:
        asyncio.run(send(300))  # each round has micro-batches to do
        app = App(cluster, checkpoint, log)

        def explain() -> str:
            return (
                f"seed {seed}; kills so far {kills}; workers killed {executors_killed[0]}; "
                f"output {committed_count(cluster, 'eos-out')}; transactions "
                f"{query_transactions(cluster, checkpoint)}"
            )

        try:
            wait_for(what, lambda: until(app), explain)
        finally:
            app.kill()
        kills.append(what)

    progress = [0]

    def moved_on(app: App) -> bool:  # some committed output beyond the last round's
        assert app.proc.poll() is None, log.read_text()[-3000:]
        count = committed_count(cluster, "eos-out")
        if count > progress[0] and rng.random() < 0.3:
            progress[0] = count
            return True
        return False

    def open_transaction(app: App) -> bool:  # a task has written; its driver has not committed
        assert app.proc.poll() is None, log.read_text()[-3000:]
        found = query_transactions(cluster, checkpoint)
        return any(t["state"] == "Ongoing" and t["partitions"] for t in found.values())

    executors_killed = [0]

    def workers_killed(app: App) -> bool:  # then on to an open transaction again
        assert app.proc.poll() is None, log.read_text()[-3000:]
        if executors_killed[0] < 2 and open_transaction(app):
            executors_killed[0] += kill_python_workers(app.proc.pid) > 0
            return False
        return executors_killed[0] >= 2 and open_transaction(app)

    run(moved_on, "the driver, mid-stream")
    run(open_transaction, "the driver, with a micro-batch written and not committed")
    run(workers_killed, "executors' Python workers twice, then the driver")
    run(moved_on, "the driver, mid-stream again")

    def caught_up(app: App) -> bool:  # every row there at least once (twice is checked below)
        assert app.proc.poll() is None, log.read_text()[-3000:]
        if committed_count(cluster, "eos-out") < sent[0]:
            return False
        time.sleep(1)
        return len(values(spark, cluster, "eos-out")) >= sent[0]

    run(caught_up, "the driver, once every row was written")
    total = sent[0]
    expected = collections.Counter(f"copied-v{i}".encode() for i in range(total))
    settled(cluster, "eos-out")
    got = values(spark, cluster, "eos-out")
    twice = {v: n for v, n in got.items() if n > 1}
    missing = expected - got
    assert not twice and not missing and set(got) == set(expected), (
        f"seed {seed}; kills {kills}; twice {list(twice)[:10]}; missing {list(missing)[:10]}; "
        f"{len(got)} distinct of {total}"
    )
