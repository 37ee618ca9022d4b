"""Peer baselines for bench.py (`import peers`), measured on this machine.

  NATS single record  3-node JetStream cluster (file storage, default sync), one stream per
                      partition, producers awaiting each publish ack: records/s, p50/p99, server CPU
  Redis XRANGE        non-persistent redis-server, a stream read back in pages with sync redis-py

Run: python scripts/peers.py [--runs 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests.harness package
from tests.harness.processes import free_ports

# nats-py and redis-py (`pip install -e '.[bench]'`) are imported where they are used, so
# that bench.py runs without them when it is told --no-peers

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime + stime in clock ticks) of `pid`, or None if it has gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may contain spaces
    return int(fields[1]), int(fields[11]) + int(fields[12])


def process_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of `pids` and all their descendants (vanished ones skipped)."""
    stats = {int(p.name): _stat(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()}
    ticks, todo, seen = 0, list(pids), set()
    while todo:
        pid = todo.pop()
        if pid not in seen and (stat := stats.get(pid) or _stat(pid)):
            seen.add(pid)
            ticks += stat[1]
            todo.extend(child for child, st in stats.items() if st and st[0] == pid)
    return ticks / os.sysconf("SC_CLK_TCK")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process, then SIGKILL whichever has not exited within 10 s."""
    for proc in procs:
        proc.terminate()  # a no-op once it has been reaped
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _jsz_meta(port: int) -> dict[str, Any]:
    """The `meta_cluster` object of a nats-server's /jsz monitoring endpoint ({} if absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/jsz", timeout=1) as response:
        return dict(json.load(response).get("meta_cluster") or {})


class NatsCluster:
    """`nodes` clustered nats-server processes with JetStream (file storage) under `root`."""

    def __init__(self, root: Path, nodes: int = 3) -> None:
        self.root, self.nodes = root, nodes
        ports = free_ports(3 * nodes)
        self.client_ports, self.route_ports, self.http_ports = (ports[i::3] for i in range(3))
        self.urls = [f"nats://127.0.0.1:{p}" for p in self.client_ports]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []

    def __enter__(self) -> NatsCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.route_ports)
        try:
            for i in range(self.nodes):
                name, store = f"n{i + 1}", json.dumps(str(self.root / f"n{i + 1}"))
                conf = self.root / f"{name}.conf"
                port, http, route = self.client_ports[i], self.http_ports[i], self.route_ports[i]
                cluster = (
                    f"cluster {{ name: peers, listen: 127.0.0.1:{route}, routes: [{routes}] }}"
                )
                conf.write_text(
                    f"server_name: {name}\nhost: 127.0.0.1\nport: {port}\nhttp: 127.0.0.1:{http}\n"
                    f"jetstream {{ store_dir: {store} }}\n"
                    # one node stays standalone: a 1-node cluster waits for routes forever
                    f"{cluster if self.nodes > 1 else ''}\n"
                )
                with (self.root / f"{name}.log").open("wb") as log:
                    argv = [NATS_SERVER, "-c", str(conf)]
                    self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
            self.pids = [p.pid for p in self.procs]
            self._wait_ready()
        except BaseException:
            _stop(self.procs)
            raise
        return self

    def _wait_ready(self, timeout: float = 30.0) -> None:
        """Until every node's /jsz answers and names a meta leader over the full cluster."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a nats-server exited; see {self.root}/*.log")
            with contextlib.suppress(OSError):
                metas = [_jsz_meta(port) for port in self.http_ports]
                if self.nodes == 1 or all(
                    m.get("leader") and m.get("cluster_size") == self.nodes for m in metas
                ):
                    return
            time.sleep(0.1)
        raise TimeoutError(f"JetStream not ready within {timeout} s; see {self.root}/*.log")

    def __exit__(self, *exc_info: object) -> None:
        _stop(self.procs)


async def nats_single_record(
    urls: list[str],
    *,
    replicas: int,
    producers: int = 4,
    partitions: int = 8,
    size: int = 100,
    seconds: float = 5.0,
    pids: list[int],
) -> dict[str, float]:
    """One record per publish, ack awaited, `producers` clients over `partitions` streams:
    records/s, p50/p99 ms per publish and server CPU ms per acknowledged record."""
    import nats  # noqa: PLC0415 - the bench extra
    from nats.js.api import StreamConfig  # noqa: PLC0415
    from nats.js.errors import NotFoundError  # noqa: PLC0415

    conns = [await nats.connect(urls) for _ in range(producers)]
    js = conns[0].jetstream()
    names = [f"p{i}" for i in range(partitions)]
    try:
        for name in names:
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(name)
            await js.add_stream(StreamConfig(name=name, subjects=[name], num_replicas=replicas))
        payload = os.urandom(size)
        latencies: list[float] = []
        measuring = False

        async def produce(k: int, until: float) -> None:
            ctx = conns[k].jetstream()
            i = k
            while (start := time.perf_counter()) < until:
                await ctx.publish(names[i % partitions], payload)
                if measuring:
                    latencies.append(time.perf_counter() - start)
                i += 1

        loop = asyncio.get_running_loop()
        end = time.perf_counter() + 1.0 + seconds
        tasks = [loop.create_task(produce(k, end)) for k in range(producers)]
        await asyncio.sleep(1.0)  # warm-up: leaders settled, connections hot
        measuring = True
        cpu0, t0, own0 = process_cpu_seconds(pids), time.perf_counter(), time.process_time()
        await asyncio.gather(*tasks)
        cpu1, t1, own1 = process_cpu_seconds(pids), time.perf_counter(), time.process_time()
        latencies.sort()
        n = len(latencies)
        return {
            "records_per_s": n / (t1 - t0),
            "p50_ms": latencies[n // 2] * 1000,
            "p99_ms": latencies[min(n - 1, n * 99 // 100)] * 1000,
            "cpu_ms_per_record": (cpu1 - cpu0) * 1000 / n,
            "client_cpu_ms_per_record": (own1 - own0) * 1000 / n,
        }
    finally:
        for name in names:
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(name)
        for conn in conns:
            await conn.close()


class RedisServer:
    """A redis-server on a free 127.0.0.1 port with no persistence, in a temp dir under root."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_ports(1)[0]
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0

    def __enter__(self) -> RedisServer:
        import redis  # noqa: PLC0415 - the bench extra

        self.root.mkdir(parents=True, exist_ok=True)
        workdir = tempfile.mkdtemp(prefix="redis-", dir=self.root)
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", workdir]
        argv += ["--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.proc.pid
        for _ in range(200):  # 10 s
            with contextlib.suppress(redis.ConnectionError), redis.Redis(port=self.port) as c:
                c.ping()
                return self
            time.sleep(0.05)
        _stop([self.proc])
        raise TimeoutError("redis-server did not answer PING within 10 s")

    def __exit__(self, *exc_info: object) -> None:
        if self.proc is not None:
            _stop([self.proc])


def redis_xrange(
    port: int, *, records: int, size: int = 100, page: int = 10_000
) -> dict[str, float]:
    """XRANGE of a `records`-entry stream in pages of `page` with sync redis-py:
    records/s and client CPU µs per record (the XADD fill is not timed)."""
    import redis  # noqa: PLC0415 - the bench extra

    with redis.Redis(port=port, decode_responses=False) as client:
        client.delete("bench")
        value = os.urandom(size)
        for first in range(0, records, 10_000):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(10_000, records - first)):
                pipe.xadd("bench", {"v": value})
            pipe.execute()
        count, start = 0, b"-"
        cpu0, t0 = time.process_time(), time.perf_counter()
        while entries := client.xrange("bench", min=start, max="+", count=page):
            count += len(entries)
            start = b"(" + entries[-1][0]
        cpu1, t1 = time.process_time(), time.perf_counter()
        assert count == records, (count, records)
        client.delete("bench")
        return {
            "records_per_s": count / (t1 - t0),
            "client_cpu_us_per_record": (cpu1 - cpu0) * 1e6 / count,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    secs = args.seconds
    results: dict[str, list[dict[str, float]]] = {
        "NATS JetStream R3": [],
        "NATS JetStream R1": [],
        "redis-py XRANGE": [],
    }
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        with NatsCluster(Path(tmp) / "nats") as nc:
            for _ in range(args.runs):
                for r in (3, 1):
                    run = nats_single_record(nc.urls, replicas=r, seconds=secs, pids=nc.pids)
                    results[f"NATS JetStream R{r}"].append(asyncio.run(run))
        with RedisServer(Path(tmp) / "redis") as server:
            for _ in range(args.runs):
                results["redis-py XRANGE"].append(redis_xrange(server.port, records=600_000))
    print(f"median of {args.runs} runs")
    for name, runs in results.items():
        medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(f"  {name:<18} " + ", ".join(f"{k}={v:,.2f}" for k, v in medians.items()))


if __name__ == "__main__":
    main()
