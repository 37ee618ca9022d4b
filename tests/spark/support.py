"""Data for the Spark tests: records produced with the Python client, read back through
`format("kraftlite")`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kraftlite.client import Admin, Producer
from tests.harness.hosts import Host, TestNet
from tests.harness.processes import Cluster, free_ports

# Recent enough that time-based retention (7 days) keeps them; fixed within a run.
BASE_MS = int(time.time() * 1000) - 3_600_000


def bootstrap(cluster: Cluster) -> str:
    return ",".join(cluster.urls.values())


def produce(cluster: Cluster, topic: str, partitions: int, count: int, **configs: Any) -> list:
    """Create `topic` and send `count` records of every shape (null keys and values, headers)."""

    async def create() -> None:
        async with Admin(bootstrap(cluster)) as admin:
            await admin.create_topic(topic, partitions=partitions, configs=configs)

    asyncio.run(create())
    return send(cluster, topic, partitions, count)


def send(cluster: Cluster, topic: str, partitions: int, count: int, first: int = 0) -> list:
    """Records `first`..`first + count - 1`, record i to partition i % `partitions`."""

    async def go() -> list:
        async with Producer(bootstrap(cluster), linger_ms=1, max_batch_bytes=2048) as producer:
            futures = [
                await producer.send(
                    topic,
                    f"value-{i}".encode() if i % 7 else None,
                    key=f"k{i}".encode() if i % 3 else None,
                    headers=(("n", str(i).encode()), ("bin", b"\x00\xff")) if i % 2 else (),
                    partition=i % partitions,
                    timestamp=BASE_MS + i,
                )
                for i in range(first, first + count)
            ]
            await producer.flush()
            return [f.result() for f in futures]

    return asyncio.run(go())


def reader(spark: Any, cluster: Cluster, **options: str) -> Any:
    read = spark.read.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster))
    for name, value in options.items():
        read = read.option(name, value)
    return read.load()


def stream(spark: Any, cluster: Cluster, **options: str) -> Any:
    read = spark.readStream.format("kraftlite").option("kraftlite.bootstrap", bootstrap(cluster))
    for name, value in options.items():
        read = read.option(name, value)
    return read.load()


def run_available_now(writer: Any, checkpoint: Path, timeout_s: float = 180) -> list[int]:
    """Run a stream with Trigger.AvailableNow to its end; the rows of each micro-batch."""
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(timeout_s), "the query did not finish"
        return [progress["numInputRows"] for progress in query.recentProgress]
    finally:
        query.stop()


# -- a Spark standalone cluster ---------------------------------------------------------------


def descendants(root: int) -> set[int]:
    """`root`'s descendants now, from /proc (a Python worker daemon is in a process group of
    its own, so killing a JVM's group misses it)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def kill_tree(popen: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM `popen`'s process group (a JVM started in a session of its own: a worker's
    executors go with it), SIGKILL it after `grace_s`, then whatever it started that is left."""
    under = descendants(popen.pid)
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(20)
    for pid in under | descendants(popen.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class SparkStandalone:
    """A Spark standalone cluster: a master and `workers` workers of `cores` cores each,
    every one a JVM of its own started in the foreground with PySpark's own launcher
    (`bin/spark-class`; pip's pyspark has no sbin/start-master.sh), logs and work directories
    under `root`. Executors run `sys.executable` (this venv: kraftlite and pyarrow installed).

    On 127.0.0.1, or with `net` (tests/harness/hosts.py) on hosts of their own: the master
    and the driver on host "client", worker n and its executors on host "worker-n", each
    bound to its host's address, so every fetch an executor makes crosses the test network.
    """

    def __init__(
        self,
        root: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        net: TestNet | None = None,
    ) -> None:
        import pyspark  # noqa: PLC0415 - only where the spark extra is installed

        self.root = root
        self.net = net
        self.home = Path(pyspark.__file__).parent  # SPARK_HOME of a pip-installed pyspark
        self.port, self.ui_port, *self.worker_ui_ports = free_ports(2 + workers)
        self.address = self._host("client").address if net is not None else "127.0.0.1"
        self.url = f"spark://{self.address}:{self.port}"
        self.workers, self.cores, self.memory = workers, cores, memory
        self.processes: list[subprocess.Popen] = []
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_CONF_DIR": str(root / "conf"),  # none: Spark's defaults, not the machine's
            "SPARK_LOG_DIR": str(root / "logs"),
            "SPARK_LOCAL_DIRS": str(root / "local"),  # shuffle and block files, not /tmp
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            "PYSPARK_PYTHON": sys.executable,
        }
        self.env.pop("PYTHONPATH", None)

    def _host(self, name: str) -> Host:
        assert self.net is not None
        return self.net[name]

    def address_of(self, name: str) -> str:
        """Where process `name` ("client", "worker-1", ...) runs."""
        return self._host(name).address if self.net is not None else "127.0.0.1"

    def _command(self, name: str, args: list[str]) -> list[str]:
        return self._host(name).command(args) if self.net is not None else args

    def _start(self, name: str, host: str, *args: str) -> None:
        log = (self.root / "logs" / f"{name}.out").open("ab")
        self.processes.append(
            subprocess.Popen(
                self._command(host, [str(self.home / "bin" / "spark-class"), *args]),
                cwd=self.root,
                env={**self.env, "SPARK_LOCAL_IP": self.address_of(host)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()

    def start(self, timeout_s: float = 60) -> None:
        for directory in ("conf", "logs", "work", "local", "events"):
            (self.root / directory).mkdir(parents=True, exist_ok=True)
        try:
            self._start(
                "master",
                "client",
                "org.apache.spark.deploy.master.Master",
                *("--host", self.address, "--port", str(self.port)),
                *("--webui-port", str(self.ui_port)),
            )
            for n, ui_port in enumerate(self.worker_ui_ports, start=1):
                (self.root / "work" / f"worker-{n}").mkdir()
                self._start(
                    f"worker-{n}",
                    f"worker-{n}",
                    "org.apache.spark.deploy.worker.Worker",
                    *("--host", self.address_of(f"worker-{n}"), "--webui-port", str(ui_port)),
                    *("--cores", str(self.cores), "--memory", self.memory),
                    *("--work-dir", str(self.root / "work" / f"worker-{n}")),
                    self.url,
                )
            deadline = time.monotonic() + timeout_s
            while len(self.alive_workers()) < self.workers:
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                    raise AssertionError(f"Spark standalone not up:\n{self.logs()}")
                time.sleep(0.5)
        except BaseException:
            self.close()
            raise

    def state(self) -> dict[str, Any]:
        """The master's JSON (its web UI's /json/): workers, applications."""
        url = f"http://{self.address}:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)

    def alive_workers(self) -> list[dict[str, Any]]:
        try:
            workers = self.state()["workers"]
        except OSError:
            return []
        return [w for w in workers if w["state"] == "ALIVE"]

    def completed_app(self, app_id: str, timeout_s: float = 20) -> dict[str, Any]:
        """Application `app_id` as the master lists it once it ended (a driver's goodbye to
        the master is a one-way message: it may land after spark-submit exits)."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.state()
            for app in state["completedapps"]:
                if app["id"] == app_id:
                    return app
            assert time.monotonic() < deadline, f"{app_id} not completed: {state['activeapps']}"
            time.sleep(0.2)

    def worker_state(self, worker: dict[str, Any]) -> dict[str, Any]:
        """A worker's JSON (its web UI's /json/): its executors, running and finished."""
        with urllib.request.urlopen(worker["webuiaddress"] + "/json/", timeout=5) as answer:
            return json.load(answer)

    def submit(self, app: Path, *args: str, cwd: Path, timeout_s: float = 120) -> str:
        """`spark-submit --master` this cluster (client mode: the driver here, in `cwd`);
        its output. Fails, with the output, unless the job exits 0."""
        log_path = self.root / "logs" / f"submit-{app.stem}.out"
        command = [
            str(self.home / "bin" / "spark-submit"),
            *("--master", self.url),
            *("--conf", f"spark.driver.host={self.address}"),
            *("--conf", f"spark.driver.bindAddress={self.address}"),
            *("--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"),
            *("--conf", "spark.executor.memory=512m"),
            *("--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"),
            *("--conf", f"spark.cores.max={self.workers * self.cores}"),
            # every executor up before the first job: both workers' executors get tasks
            *("--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0"),
            *("--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=60s"),
            *("--conf", "spark.sql.shuffle.partitions=2"),
            *("--conf", "spark.ui.enabled=false"),
            # the driver's event log: which executor ran each task (`tasks`)
            *("--conf", "spark.eventLog.enabled=true"),
            *("--conf", f"spark.eventLog.dir={self.root / 'events'}"),
            *("--conf", "spark.eventLog.compress=false"),
            *("--conf", "spark.eventLog.rolling.enabled=false"),
            str(app),
            *args,
        ]
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                self._command("client", command),
                cwd=cwd,
                env={**self.env, "SPARK_LOCAL_IP": self.address},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                status = popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                status = None
            finally:
                kill_tree(popen, grace_s=5)
        output = log_path.read_text(errors="replace")
        assert status == 0, f"spark-submit {app.name}: exit {status}\n{output[-6000:]}"
        return output

    def tasks(self, app_id: str) -> dict[tuple[str, str], int]:
        """How many tasks each executor of application `app_id` ran, by (executor id, the
        address of the host it ran on; "driver": the driver itself), from its event log."""
        counts: dict[tuple[str, str], int] = {}
        with (self.root / "events" / app_id).open() as log:
            for line in log:
                event = json.loads(line)
                if event["Event"] == "SparkListenerTaskEnd":
                    task = event["Task Info"]
                    where = (task["Executor ID"], task["Host"])
                    counts[where] = counts.get(where, 0) + 1
        return counts

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:]
            for path in sorted((self.root / "logs").glob("*.out"))
        )

    def close(self) -> None:
        """Workers first (each takes its executors down), then the master."""
        for popen in reversed(self.processes):
            kill_tree(popen)
        self.processes.clear()
