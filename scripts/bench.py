"""End-to-end benchmark of a kraftlite cluster, with its baselines measured in the same run.

Starts a local cluster (`kraftlite dev`: 3 controllers + 3 brokers, each its own process) in
a temporary directory unless --bootstrap points at a running one, creates a topic with
3 partitions and replication factor 3, and measures from one load-generating process:

  produce binary   pre-encoded batches of --batch records x --size bytes (the Python client's
                   path: binary batch format, straight to each partition's leader with
                   X-Kraftlite-No-Forward), --producers concurrent requests, acks=1 and acks=all
  produce JSON     the same records as a JSON body to the topic endpoint (acks=all)
  latency          one producer, one record per request, acks=all: p50 and p99
  consume          binary fetches of everything produced, from every partition's leader
  client produce   kraftlite.client.Producer, one record per send(), acks=all (issue 5)
  group consume    three kraftlite.client.Consumers in one group over 6 partitions
  single record    issue 15's workload: --single-producers producers, each sending one 100 B
                   record and awaiting its acks=all answer before the next, over 8
                   partitions, RF 3 (min.insync.replicas 2) and RF 1, through
                   kraftlite.client.Producer (linger_ms=0) and raw HTTP; records/s, p50,
                   p99 and the server CPU per acknowledged record over all six processes
  client consume   kraftlite.client.Consumer reading 600,000 records of one partition
Baselines, same run, same client and concurrency:
  bare aiohttp     a bare aiohttp endpoint (own process) that reads the same batch bodies and
                   discards them: the ceiling of HTTP in Python on this machine
  raw LMDB         py-lmdb puts of the same batches, one transaction per batch, no fsync
  NATS JetStream   (scripts/peers.py) 3 nats-servers, one stream per partition with 3 and 1
                   replicas, the same single-record workload through nats-py
  redis-py XRANGE  the same records read back from a local redis-server's stream
The load generator runs on uvloop for every system. Every figure is the median over --runs;
the last lines compare with the peers and the issue's goals, then one JSON object.

Run: python scripts/bench.py [--runs 3] [--seconds 5] [--producers 8] [--bootstrap URL]
     [--only single,consume,batch] [--no-peers]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import lmdb

from kraftlite import eventloop
from kraftlite.client import Admin, Consumer, Producer
from kraftlite.dev import free_base_port
from kraftlite.protocol import batch as fmt

sys.path.insert(0, str(Path(__file__).parent))
import peers  # scripts/peers.py, next to this file

BATCH = "application/vnd.kraftlite.batch"
TOPIC = "bench"
PARTITIONS = 3


# ------------------------------------------------------------------------------ the cluster


def start_cluster(root: Path) -> tuple[subprocess.Popen[str], str]:
    base = free_base_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kraftlite",
            "dev",
            "--data-dir",
            str(root),
            "--base-port",
            str(base),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("Ctrl-C"):
            return process, f"http://127.0.0.1:{base}"
    raise SystemExit("the cluster did not start")


def call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


# ------------------------------------------------------------------------------ load


async def run_for(seconds: float, workers: int, step: Callable[[int], Awaitable[int]]) -> float:
    """Items per second over `seconds`, with `workers` concurrent loops of `step`."""
    done = 0
    deadline = time.monotonic() + seconds

    async def loop(worker: int) -> None:
        nonlocal done
        i = worker
        while time.monotonic() < deadline:
            finished = await step(i)  # not `done += await ...`: that reads `done` before awaiting
            done += finished
            i += workers

    started = time.monotonic()
    await asyncio.gather(*(loop(w) for w in range(workers)))
    return done / (time.monotonic() - started)


async def produce_binary(
    session: aiohttp.ClientSession, leaders: dict[int, str], batch: bytes, count: int,
    acks: str, seconds: float, producers: int,
) -> float:  # fmt: skip
    async def step(i: int) -> int:
        partition = i % PARTITIONS
        async with session.post(
            f"{leaders[partition]}/v1/topics/{TOPIC}/partitions/{partition}/records?acks={acks}",
            data=batch,
            headers={"Content-Type": BATCH, "X-Kraftlite-No-Forward": "1"},
        ) as response:
            await response.read()
            if response.status != 200:
                raise SystemExit(f"produce failed: {response.status}")
        return count

    return await run_for(seconds, producers, step)


async def produce_json(
    session: aiohttp.ClientSession, bootstrap: str, body: bytes, count: int, seconds: float,
    producers: int,
) -> float:  # fmt: skip
    async def step(i: int) -> int:
        async with session.post(
            f"{bootstrap}/v1/topics/{TOPIC}/records?acks=all",
            data=body,
            headers={"Content-Type": "application/json"},
        ) as response:
            await response.read()
            if response.status != 200:
                raise SystemExit(f"JSON produce failed: {response.status}")
        return count

    return await run_for(seconds, producers, step)


async def latency(
    session: aiohttp.ClientSession, leaders: dict[int, str], seconds: float
) -> tuple[float, float]:
    record = fmt.encode_records([fmt.Record(value=b"x" * 100, key=b"k")], now_ms=0)
    samples = []
    deadline = time.monotonic() + seconds
    url = f"{leaders[0]}/v1/topics/{TOPIC}/partitions/0/records?acks=all"
    headers = {"Content-Type": BATCH, "X-Kraftlite-No-Forward": "1"}
    while time.monotonic() < deadline:
        started = time.perf_counter()
        async with session.post(url, data=record, headers=headers) as response:
            await response.read()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


async def consume(session: aiohttp.ClientSession, leaders: dict[int, str]) -> tuple[float, int]:
    """Read every partition from offset 0 to its high watermark; (records/s, records)."""
    total = 0

    async def read_partition(partition: int) -> None:
        nonlocal total
        offset = 0
        url = f"{leaders[partition]}/v1/topics/{TOPIC}/partitions/{partition}/records"
        while True:
            async with session.get(
                url,
                params={"offset": str(offset), "max_bytes": str(8 << 20)},
                headers={"Accept": BATCH, "X-Kraftlite-No-Forward": "1"},
            ) as response:
                data = await response.read()
                hw = int(response.headers["X-Kraftlite-High-Watermark"])
            for view in fmt.split_batches(data):
                header = fmt.read_header(view)
                total += header.base_offset + header.record_count - max(offset, header.base_offset)
                offset = header.next_offset
            if offset >= hw:
                return

    started = time.monotonic()
    await asyncio.gather(*(read_partition(p) for p in range(PARTITIONS)))
    return total / (time.monotonic() - started), total


# ------------------------------------------------------------------------------ single record


async def timed(
    workers: int, seconds: float, step: Callable[[int, int], Awaitable[None]], cpu_pids: list[int]
) -> dict[str, float]:
    """`workers` loops of `step(worker, i)`, each awaited, for `seconds` after a 1 s warm-up:
    steps/s, p50 and p99 ms, and the CPU ms per step of `cpu_pids` and their children."""
    samples: list[float] = []
    measuring = False

    async def loop(worker: int, deadline: float) -> None:
        i = worker
        while time.monotonic() < deadline:
            started = time.perf_counter()
            await step(worker, i)
            if measuring:
                samples.append((time.perf_counter() - started) * 1000)
            i += 1

    await asyncio.gather(*(loop(w, time.monotonic() + 1) for w in range(workers)))
    measuring = True
    cpu, own = peers.process_cpu_seconds(cpu_pids), time.process_time()
    started = time.monotonic()
    await asyncio.gather(*(loop(w, started + seconds) for w in range(workers)))
    elapsed = time.monotonic() - started
    used, own = peers.process_cpu_seconds(cpu_pids) - cpu, time.process_time() - own
    samples.sort()
    cpu_ms = used * 1000 / len(samples) if cpu_pids else float("nan")
    return {"records_per_s": len(samples) / elapsed, "p50_ms": statistics.median(samples),
            "p99_ms": samples[len(samples) * 99 // 100], "cpu_ms_per_record": cpu_ms,
            "client_cpu_ms_per_record": own * 1000 / len(samples)}  # fmt: skip


def fresh_topic(bootstrap: str, name: str, partitions: int, rf: int) -> dict[int, str]:
    """Create `name` (deleted first) and return partition -> leader URL once all lead."""
    call("DELETE", f"{bootstrap}/v1/topics/{name}")
    configs = {"min.insync.replicas": 2} if rf >= 3 else {}
    for _ in range(50):  # the old one may still be going
        status, body = call("POST", f"{bootstrap}/v1/topics", {"name": name,
                            "partitions": partitions, "replication_factor": rf,
                            "configs": configs})  # fmt: skip
        if status == 201:
            break
        time.sleep(0.2)
    else:
        raise SystemExit(f"topic creation failed: {status} {body}")
    brokers = {b["id"]: b["url"] for b in call("GET", f"{bootstrap}/v1/cluster")[1]["brokers"]}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, topic = call("GET", f"{bootstrap}/v1/topics/{name}")
        parts = topic.get("partitions", []) if status == 200 else []
        if parts and all(p["high_watermark"] is not None and len(p["isr"]) == rf for p in parts):
            return {p["partition"]: brokers[p["leader"]] for p in parts}
        time.sleep(0.2)
    raise SystemExit(f"{name}: partitions got no leaders")


async def single_record(
    bootstrap: str, rf: int, args: argparse.Namespace, cpu_pids: list[int], *, client: bool
) -> dict[str, float]:
    """Issue 15's workload on kraftlite: records/s, p50, p99, server CPU ms per record."""
    topic = f"single-rf{rf}"
    leaders = fresh_topic(bootstrap, topic, args.single_partitions, rf)
    value = b"x" * 100
    count = args.single_partitions
    record = fmt.encode_records([fmt.Record(value=value)], now_ms=int(time.time() * 1000))
    producers = [Producer(bootstrap, acks="all", linger_ms=0) for _ in range(args.single_producers)]
    sessions = [aiohttp.ClientSession() for _ in range(args.single_producers)]
    headers = {"Content-Type": BATCH, "X-Kraftlite-No-Forward": "1"}

    async def via_client(worker: int, i: int) -> None:
        await (await producers[worker].send(topic, value, partition=i % count))

    async def via_http(worker: int, i: int) -> None:
        partition = i % count
        url = f"{leaders[partition]}/v1/topics/{topic}/partitions/{partition}/records?acks=all"
        async with sessions[worker].post(url, data=record, headers=headers) as response:
            await response.read()
            if response.status != 200:
                raise SystemExit(f"produce failed: {response.status}")

    try:
        step = via_client if client else via_http
        return await timed(args.single_producers, args.seconds, step, cpu_pids)
    finally:
        for producer in producers:
            await producer.close()
        for session in sessions:
            await session.close()


async def client_consume(bootstrap: str, records: int, size: int) -> dict[str, float]:
    """kraftlite.client.Consumer reading `records` of one partition from the start:
    records/s and the client's CPU µs per record."""
    topic = "consume-one"
    leaders = fresh_topic(bootstrap, topic, 1, 3)
    batch = fmt.encode_records([fmt.Record(value=b"v" * size)] * 1000, now_ms=0)
    async with aiohttp.ClientSession() as session:
        for _ in range(records // 1000):
            async with session.post(
                f"{leaders[0]}/v1/topics/{topic}/partitions/0/records?acks=all",
                data=batch, headers={"Content-Type": BATCH, "X-Kraftlite-No-Forward": "1"},
            ) as response:  # fmt: skip
                await response.read()
    consumer = Consumer(bootstrap, max_bytes_per_partition=8 << 20)
    try:
        consumer.assign([(topic, 0)])
        await consumer.seek_to_beginning((topic, 0))
        await consumer.poll(timeout_ms=100)  # connections and metadata, not timed
        consumer.seek((topic, 0), 0)
        got = 0
        cpu, started = time.process_time(), time.monotonic()
        while got < records:
            got += len(await consumer.poll(timeout_ms=500))
        elapsed = time.monotonic() - started
        return {"records_per_s": got / elapsed,
                "client_cpu_us_per_record": (time.process_time() - cpu) * 1e6 / got}  # fmt: skip
    finally:
        await consumer.close()


# ------------------------------------------------------------------------------ the client


async def client_produce(bootstrap: str, size: int, seconds: float) -> float:
    """Records/s through kraftlite.client.Producer (batching, acks=all), one process."""
    value = b"v" * size
    async with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        sent = 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            for _ in range(1000):
                await producer.send(TOPIC, value)
            sent += 1000
        await producer.flush()
        return sent / (time.monotonic() - started)


async def group_consume(bootstrap: str, members: int, topic: str, records: int) -> float:
    """Records/s for `members` Consumers of one group reading `topic` from the start."""
    group = f"bench-{time.monotonic_ns()}"
    consumers = [
        Consumer(bootstrap, group_id=group, auto_offset_reset="earliest") for _ in range(members)
    ]
    got = 0
    try:
        for consumer in consumers:
            await consumer.subscribe([topic])
        started = time.monotonic()

        async def run(consumer: Consumer) -> None:
            nonlocal got
            while got < records and time.monotonic() - started < 120:
                batch = await consumer.poll(timeout_ms=200)
                got += len(batch)

        await asyncio.gather(*(run(c) for c in consumers))
        return got / (time.monotonic() - started)
    finally:
        for consumer in consumers:
            await consumer.close()


async def prepare_group_topic(bootstrap: str, size: int, records: int) -> str:
    name = f"bench-group-{time.monotonic_ns()}"
    async with Admin(bootstrap) as admin:
        await admin.create_topic(name, partitions=6, replication_factor=3)
    batch = fmt.encode_records([fmt.Record(value=b"v" * size)] * 1000, now_ms=0)
    async with Producer(bootstrap) as producer:  # metadata lookups only
        for partition in range(6):
            url = await producer._transport.leader_url(name, partition)
            for _ in range(records // 6000):
                await producer._transport.request(
                    url, "POST", f"/v1/topics/{name}/partitions/{partition}/records",
                    params={"acks": "1"}, data=batch, headers={"Content-Type": BATCH},
                )  # fmt: skip
    return name


# ------------------------------------------------------------------------------ baselines

BARE_SERVER = """
import sys
from aiohttp import web
async def handler(request):
    await request.read()
    return web.json_response({"offsets": []})
app = web.Application(client_max_size=64 << 20)
app.router.add_post("/x", handler)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


async def bare_aiohttp(
    session: aiohttp.ClientSession, batch: bytes, count: int, seconds: float, producers: int
) -> float:
    port = free_base_port() + 500
    server = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(port)])  # noqa: ASYNC220
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                await asyncio.sleep(0.05)

        async def step(i: int) -> int:
            async with session.post(f"http://127.0.0.1:{port}/x", data=batch) as response:
                await response.read()
            return count

        return await run_for(seconds, producers, step)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()


def raw_lmdb(batch: bytes, count: int, seconds: float) -> float:
    root = Path(tempfile.mkdtemp(prefix="kl-bench-lmdb-"))
    env = lmdb.open(str(root), map_size=1 << 36, sync=False, metasync=False, max_dbs=4)
    db = env.open_db(b"batches")
    done, i = 0, 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            with env.begin(write=True) as txn:
                txn.put(b"\x00\x00\x00\x01" + (i * count).to_bytes(8, "big"), batch, db=db)
            done += count
            i += 1
        return done / (time.monotonic() - started)
    finally:
        env.close()
        shutil.rmtree(root)


# ------------------------------------------------------------------------------ main


async def batch_run(args: argparse.Namespace, bootstrap: str) -> dict[str, float]:
    """The batched figures (issues 4 and 5): binary and JSON produce, latency, consume."""
    leaders = fresh_topic(bootstrap, TOPIC, PARTITIONS, 3)
    records = [fmt.Record(value=b"v" * args.size, key=None) for _ in range(args.batch)]
    batch = fmt.encode_records(records, now_ms=int(time.time() * 1000))
    json_body = json.dumps({"records": [{"value": "v" * args.size} for _ in range(args.batch)]})
    connector = aiohttp.TCPConnector(limit=64)
    result: dict[str, float] = {}
    async with aiohttp.ClientSession(connector=connector) as session:
        s, c, n = args.seconds, args.batch, args.producers
        result["produce_records_per_s"] = await produce_binary(
            session, leaders, batch, c, "1", s, n
        )
        result["produce_acks_all_records_per_s"] = await produce_binary(
            session, leaders, batch, c, "all", s, n
        )
        result["produce_json_acks_all_records_per_s"] = await produce_json(
            session, bootstrap, json_body.encode(), c, s, n
        )
        result["p50_ms"], result["p99_ms"] = await latency(session, leaders, s)
        result["consume_records_per_s"], result["consumed_records"] = await consume(
            session, leaders
        )
        result["baseline_bare_aiohttp_records_per_s"] = await bare_aiohttp(session, batch, c, s, n)
    result["client_produce_acks_all_records_per_s"] = await client_produce(bootstrap, args.size, s)
    topic = await prepare_group_topic(bootstrap, args.size, 600_000)
    result["group_of_3_consume_records_per_s"] = await group_consume(bootstrap, 3, topic, 600_000)
    result["baseline_raw_lmdb_records_per_s"] = raw_lmdb(batch, c, s)
    return result


def _prefixed(prefix: str, figures: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}_{k}": v for k, v in figures.items()}


async def one_run(
    args: argparse.Namespace, bootstrap: str, cpu_pids: list[int], nats: peers.NatsCluster | None
) -> dict[str, float]:
    result: dict[str, float] = {}
    if "single" in args.only:
        for rf in (3, 1):
            for client in (True, False):
                name = f"single_rf{rf}_{'client' if client else 'http'}"
                figures = await single_record(bootstrap, rf, args, cpu_pids, client=client)
                result |= _prefixed(name, figures)
            if nats is not None:
                figures = await peers.nats_single_record(
                    nats.urls, replicas=rf, producers=args.single_producers,
                    partitions=args.single_partitions, seconds=args.seconds, pids=nats.pids,
                )  # fmt: skip
                result |= _prefixed(f"nats_r{rf}", figures)
    if "consume" in args.only:
        result |= _prefixed("client_consume", await client_consume(bootstrap, 600_000, args.size))
        if not args.no_peers:
            with (
                tempfile.TemporaryDirectory(prefix="kl-bench-redis-") as root,
                peers.RedisServer(Path(root)) as redis_server,
            ):
                figures = peers.redis_xrange(redis_server.port, records=600_000, size=args.size)
            result |= _prefixed("redis_xrange", figures)
    if "batch" in args.only:
        result |= await batch_run(args, bootstrap)
    return result


GOALS = [  # (what, ours, theirs, the goal's ratio, higher is better)
    ("single-record acks=all RF 3 records/s, client / NATS R3", "single_rf3_client_records_per_s",
     "nats_r3_records_per_s", 2.0, True),
    ("single-record acks=all RF 3 p99, client / NATS R3", "single_rf3_client_p99_ms",
     "nats_r3_p99_ms", 1.0, False),
    ("single-record acks=all RF 1 records/s, client / NATS R1", "single_rf1_client_records_per_s",
     "nats_r1_records_per_s", None, True),
    ("client consume records/s / redis-py XRANGE", "client_consume_records_per_s",
     "redis_xrange_records_per_s", 1.0, True),
    ("client batched produce / raw HTTP binary batches", "client_produce_acks_all_records_per_s",
     "produce_acks_all_records_per_s", 0.8, True),
]  # fmt: skip


def report(median: dict[str, float]) -> None:
    print("\ncompared (medians)")
    for what, ours, theirs, goal, higher in GOALS:
        if ours in median and theirs in median and median[theirs]:
            ratio = median[ours] / median[theirs]
            met = "" if goal is None else (
                "  goal " + ("≥" if higher else "≤") + f" {goal}: "
                + ("met" if (ratio >= goal if higher else ratio <= goal) else "NOT met")
            )  # fmt: skip
            print(f"  {what:<58} {ratio:>6.2f}{met}")
    cpu = median.get("single_rf3_client_cpu_ms_per_record")
    if cpu is not None and cpu == cpu:  # not NaN (a cluster started here)
        nats_cpu = median.get("nats_r3_cpu_ms_per_record", float("nan"))
        print(f"  {'server CPU ms per acknowledged record, RF 3 (NATS R3)':<58} {cpu:>6.3f}"
              f" ({nats_cpu:.3f})  goal ≤ 0.5: {'met' if cpu <= 0.5 else 'NOT met'}")  # fmt: skip
    cores = os.cpu_count() or 1
    for name, prefix in (("kraftlite RF 3, client", "single_rf3_client"),
                         ("kraftlite RF 3, raw HTTP", "single_rf3_http"),
                         ("kraftlite RF 1, raw HTTP", "single_rf1_http"),
                         ("NATS R3", "nats_r3"), ("NATS R1", "nats_r1")):  # fmt: skip
        server = median.get(f"{prefix}_cpu_ms_per_record", float("nan"))
        client = median.get(f"{prefix}_client_cpu_ms_per_record", float("nan"))
        if server == server and client == client:  # both measured (not NaN)
            ceiling = cores * 1000 / (server + client)
            what = "CPU ms per record, servers + load generator: " + name
            print(f"  {what:<58} {server + client:>6.3f}"
                  f"  (at most {ceiling:,.0f} records/s on {cores} cores)")  # fmt: skip
    if "baseline_bare_aiohttp_records_per_s" in median:
        ratio = (
            median["produce_acks_all_records_per_s"] / median["baseline_bare_aiohttp_records_per_s"]
        )
        print(f"  {'acks=all produce / bare aiohttp endpoint':<58} {ratio:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1000, help="records per batch")
    parser.add_argument("--size", type=int, default=100, help="bytes per record value")
    parser.add_argument("--single-producers", type=int, default=4)
    parser.add_argument("--single-partitions", type=int, default=8)
    parser.add_argument("--only", default="single,consume,batch", help="sections to run")
    parser.add_argument("--no-peers", action="store_true", help="skip NATS and Redis")
    parser.add_argument("--bootstrap", help="a running cluster's broker URL (else start one)")
    args = parser.parse_args()
    args.only = set(args.only.split(","))
    root = Path(tempfile.mkdtemp(prefix="kl-bench-"))
    cluster = None
    try:
        if args.bootstrap:
            bootstrap, cpu_pids = args.bootstrap, []
        else:
            cluster, bootstrap = start_cluster(root)
            cpu_pids = [cluster.pid]
        with contextlib.ExitStack() as stack:
            nats = None
            if "single" in args.only and not args.no_peers:
                nats = stack.enter_context(peers.NatsCluster(root / "nats"))
            runs = []
            for run in range(args.runs):
                figures = eventloop.run(one_run(args, bootstrap, cpu_pids, nats))
                runs.append(figures)
                print(f"run {run + 1}: " + ", ".join(f"{k}={v:,.3g}" for k, v in figures.items()))
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print("\nmedian of", args.runs, "runs")
        for key, value in median.items():
            print(f"  {key:<44} {value:>14,.3f}")
        report(median)
        print(json.dumps({"bench": "e2e", **{k: round(v, 3) for k, v in median.items()},
                          "runs": args.runs, "producers": args.producers,
                          "batch_records": args.batch, "record_bytes": args.size,
                          "single_producers": args.single_producers,
                          "single_partitions": args.single_partitions}))  # fmt: skip
    finally:
        if cluster is not None:
            cluster.send_signal(signal.SIGTERM)
            cluster.wait(timeout=60)
            if cluster.stdout is not None:
                cluster.stdout.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
