"""The source and the sink on a Spark standalone cluster (issue 28): a master and two workers,
each a JVM of its own started with PySpark's own launcher, a job sent with `spark-submit
--master spark://...` from a directory outside the repository. It reads with
`format("kraftlite")` and no register call (Spark's lookup of `pyspark_*` modules finds it
wherever kraftlite is installed), in a batch and in a stream to its end (AvailableNow) into
the kraftlite sink, and writes a batch with the sink, against a real kraftlite cluster; its
tasks run on the workers' executors, never on the driver.

Where this machine can make test hosts (tests/harness/hosts.py: root, iproute2, nftables),
every process has a host of its own: the kraftlite nodes on six, the Spark master and the
driver on "client", each worker and its executors on "worker-1" and "worker-2", so the
executors are separate machines as far as the network goes, each reaching the brokers at
their advertised addresses. Elsewhere everything runs on 127.0.0.1 (the test says which).
"""

from __future__ import annotations

import asyncio
import collections
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftlite.client import Admin, Consumer
from kraftlite.spark.local import submitted
from tests.harness import hosts
from tests.harness.hosts import TestNet
from tests.harness.processes import Cluster
from tests.spark.support import SparkStandalone, bootstrap, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(300)]
APP = Path(__file__).parent / "apps" / "cluster_app.py"
COUNT, PARTITIONS = 60, 3


NODES = [*(f"controller-{i}" for i in (1, 2, 3)), *(f"broker-{i}" for i in (1, 2, 3))]


@pytest.fixture
def placed(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[SparkStandalone, Cluster]]:
    """The Spark cluster and the kraftlite cluster it works with: on test hosts of their own
    where this machine can make them, else on 127.0.0.1 (the Spark tests' shared cluster)."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17 or newer, and there is no java on PATH")
    if hosts.available() is not None:
        print(f"on 127.0.0.1: {hosts.available()}")
        yield from standalone(tmp_path, request.getfixturevalue("cluster"))
        return
    net = TestNet([*NODES, "client", "worker-1", "worker-2"])
    try:
        with net.inside("client"):
            cluster = Cluster(tmp_path / "kraftlite", net=net)
            try:
                cluster.start()
                yield from standalone(tmp_path, cluster, net)
            finally:
                cluster.stop()
    finally:
        net.close()


def standalone(
    tmp_path: Path, cluster: Cluster, net: TestNet | None = None
) -> Iterator[tuple[SparkStandalone, Cluster]]:
    spark_cluster = SparkStandalone(tmp_path / "spark", workers=2, cores=1, net=net)
    spark_cluster.start()
    try:
        yield spark_cluster, cluster
    finally:
        spark_cluster.close()


def key(i: int) -> str | None:
    """What tests/spark/support.py's `send` gives record i."""
    return f"k{i}" if i % 3 else None


def value(i: int, prefix: str = "") -> str | None:
    return f"{prefix}value-{i}" if i % 7 else None


def raw(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def headers(i: int) -> tuple[tuple[str, bytes | None], ...]:
    return (("n", str(i).encode()), ("bin", b"\x00\xff")) if i % 2 else ()


def committed_records(cluster: Cluster, topic: str, timeout_s: float = 60) -> list:
    """Every record of `topic` a read_committed reader sees once its transactions are
    decided (the sink's default is exactly-once)."""

    async def go() -> list:
        async with Consumer(
            bootstrap(cluster), enable_auto_commit=False, isolation_level="read_committed"
        ) as consumer:
            await consumer.assign_topic(topic)
            ends = await consumer.end_offsets(consumer.assignment())
            await consumer.seek_to_beginning()
            found: list = []
            deadline = time.monotonic() + timeout_s
            while any([await consumer.position(tp) < end for tp, end in ends.items()]):
                assert time.monotonic() < deadline, f"{topic}: not read to {ends}"
                found.extend(await consumer.poll(500))
            return found

    return asyncio.run(go())


def test_source_and_sink_on_a_standalone_cluster(
    placed: tuple[SparkStandalone, Cluster], tmp_path: Path
) -> None:
    standalone, cluster = placed
    sent = produce(cluster, "cl-in", PARTITIONS, COUNT)

    async def create() -> None:
        async with Admin(bootstrap(cluster)) as admin:
            for topic in ("cl-streamed", "cl-written"):
                await admin.create_topic(topic, partitions=PARTITIONS)

    asyncio.run(create())
    driver = tmp_path / "driver"  # the driver's working directory: not the repository
    driver.mkdir()
    result = tmp_path / "result.json"
    standalone.submit(
        APP,
        *(bootstrap(cluster), "cl-in", "cl-streamed", "cl-written"),
        *(str(tmp_path / "checkpoint"), str(result)),
        cwd=driver,
    )
    seen = json.loads(result.read_text())
    assert seen["master"] == standalone.url  # spark-submit's, not local[2]

    # the batch read: every record, where it was acknowledged
    expected = sorted([m.partition, m.offset, key(i), value(i)] for i, m in enumerate(sent))
    assert sorted(seen["rows"]) == expected

    # the stream: to its end, in micro-batches of at most 25 records (maxOffsetsPerTrigger)
    batches = [rows for rows in seen["micro_batches"] if rows]
    assert sum(batches) == COUNT and len(batches) >= 3 and max(batches) <= 25, batches
    streamed = committed_records(cluster, "cl-streamed")
    assert collections.Counter(
        (r.key, r.value, tuple(r.headers)) for r in streamed
    ) == collections.Counter((raw(key(i)), raw(value(i)), headers(i)) for i in range(COUNT))

    # the batch write
    written = committed_records(cluster, "cl-written")
    assert collections.Counter((r.key, r.value) for r in written) == collections.Counter(
        (raw(key(i)), raw(value(i, "w-"))) for i in range(COUNT)
    )

    # the tasks ran on the executors of the two workers (one each, on the worker's host),
    # none on the driver
    tasks = standalone.tasks(seen["app_id"])
    assert {host for _, host in tasks} == (
        {standalone.address_of(f"worker-{n}") for n in (1, 2)}
        if standalone.net is not None
        else {"127.0.0.1"}
    ), tasks
    tasks_per_executor = {executor: n for (executor, _), n in tasks.items()}
    per_worker = []
    for worker in standalone.alive_workers():
        state = standalone.worker_state(worker)
        per_worker.append(
            [
                str(e["id"])
                for e in state["executors"] + state["finishedexecutors"]
                if e["appid"] == seen["app_id"]
            ]
        )
    assert sorted(per_worker) == [[e] for e in sorted(tasks_per_executor)], (per_worker, tasks)
    assert len(tasks_per_executor) == 2 and all(n > 0 for n in tasks.values()), tasks
    assert standalone.completed_app(seen["app_id"])["state"] == "FINISHED"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),  # python -m kraftlite.spark.examples.purchases: local[2]
        ({"PYSPARK_GATEWAY_PORT": "41234"}, True),  # started by spark-submit
        ({"PYSPARK_SUBMIT_ARGS": "--master spark://h:7077 pyspark-shell"}, True),
        ({"PYSPARK_SUBMIT_ARGS": "--master=spark://h:7077 pyspark-shell"}, True),
        ({"PYSPARK_SUBMIT_ARGS": "--conf spark.master=spark://h:7077 pyspark-shell"}, True),
        ({"PYSPARK_SUBMIT_ARGS": "--driver-memory 2g pyspark-shell"}, False),
    ],
)
def test_the_master_is_spark_submits_when_it_chose_one(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: bool
) -> None:
    for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_SUBMIT_ARGS"):
        monkeypatch.delenv(name, raising=False)
    for name, setting in env.items():
        monkeypatch.setenv(name, setting)
    assert submitted() is expected
