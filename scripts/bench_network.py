"""kraftlite across hosts (issue 28): six test hosts in network namespaces with 1 ms on
every link (tests/harness/hosts.py), TLS on every listener and SCRAM clients, measured
against the same cluster on loopback in the same run. Needs root, iproute2 and nftables.

  produce 1        acks=all, one record awaited at a time by each of 4 producers: the
                   Python client over HTTPS (linger 0), and confluent-kafka over SASL_SSL
                   (linger 0, a flush per record): records/s, p50, p99
  produce batched  acks=all, one producer sending as fast as it can (linger 5 ms): records/s
  consume          every record produced above, read back from the beginning: records/s
Hosts only:
  faults           acks=all writers (HTTPS, through brokers that do not lead) on three
                   partitions; per fault, the longest stretch any partition took no write:
                   kill -9 of a leader, its cable pulled, its link silent, and the active
                   controller partitioned from every other host
  rolling restart  `kraftlite cluster roll --only brokers`: every broker restarted in place
                   in turn (a controlled shutdown first; the next once every partition is
                   fully replicated again) under a consumer group of three Python consumers
                   and a writer on six partitions: the longest stretch any partition went
                   unconsumed, and whether every acknowledged record was consumed

Every figure is the median over --runs; the last line is one JSON object.

Run (as root): python scripts/bench_network.py [--runs 3] [--seconds 5] [--only rolling]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import itertools
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kraftlite.client import Consumer, Credentials, Producer, SyncConsumer
from kraftlite.security import certs
from tests.harness import hosts
from tests.harness.hosts import TestNet
from tests.harness.observe import PartitionWriters
from tests.harness.processes import TLS_CONTEXT, Cluster, http

NODES = [*(f"controller-{i}" for i in (1, 2, 3)), *(f"broker-{i}" for i in (1, 2, 3))]
ADMIN, PASSWORD = "admin", "bench-admin-password"
SIZE = 100


def auth_header() -> dict[str, str]:
    token = base64.b64encode(f"{ADMIN}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def call(method: str, url: str, body: Any = None, timeout: float = 10) -> tuple[int, Any]:
    return http(method, url, body, headers=auth_header(), timeout=timeout)


def secure_cluster(root: Path, net: TestNet | None) -> Cluster:
    """TLS on every listener (one certificate naming every node's address), SCRAM or a
    client certificate required, the admin made at bootstrap."""
    now = datetime.datetime.now(datetime.UTC)
    ca = certs.make_ca("bench CA", now)
    addresses = ["127.0.0.1"] + ([net[n].address for n in NODES] if net else [])
    node = certs.issue(ca, "node", addresses, now)
    root.mkdir(parents=True, exist_ok=True)
    for name, data in (
        ("ca.pem", ca.cert_pem),
        ("node.pem", node.cert_pem),
        ("node.key", node.key_pem),
    ):
        (root / name).write_bytes(data)
    tls = {
        "tls.cert.file": str(root / "node.pem"),
        "tls.key.file": str(root / "node.key"),
        "tls.ca.file": str(root / "ca.pem"),
        "auth.required": True,
        "super.users": [f"User:{ADMIN}"],
    }
    return Cluster(
        root,
        broker_config={**tls, "replica.lag.time.max.ms": 10_000},
        controller_config={
            **tls,
            "auth.bootstrap.user": ADMIN,
            "auth.bootstrap.password": PASSWORD,
        },
        scheme="https",
        kafka=True,
        net=net,
        insecure=False,
    )


@contextlib.contextmanager
def running(root: Path, net: TestNet | None) -> Iterator[Cluster]:
    cluster = secure_cluster(root, net)
    context = ssl.create_default_context(cafile=str(root / "ca.pem"))
    TLS_CONTEXT.append(context)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
        TLS_CONTEXT.remove(context)


def create(cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    deadline = time.monotonic() + 60
    while True:
        status, body = call(
            "POST",
            cluster.urls[1] + "/v1/topics",
            {
                "name": topic,
                "partitions": partitions,
                "replication_factor": 3,
                "configs": {"min.insync.replicas": 2},
            },
        )
        if status == 201:
            break
        assert status in {401, 503} and time.monotonic() < deadline, (status, body)
        time.sleep(0.5)  # the bootstrap admin appears once a controller is active
    while True:
        status, body = call("GET", cluster.urls[1] + f"/v1/topics/{topic}")
        parts = body.get("partitions", []) if status == 200 else []
        if parts and all(p["high_watermark"] is not None for p in parts):
            return {p["partition"]: p["leader"] for p in parts}
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


def credentials(cluster: Cluster) -> Credentials:
    return Credentials(ADMIN, PASSWORD, ca_file=str(cluster.root / "ca.pem"))


def kafka_settings(cluster: Cluster) -> dict[str, str]:
    return {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": ADMIN,
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(cluster.root / "ca.pem"),
    }


def progress(message: str) -> None:
    print(f"bench_network: {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


# -- throughput and latency ------------------------------------------------------------


async def http_single(cluster: Cluster, topic: str, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def one(n: int) -> None:
        producer = Producer(
            list(cluster.urls.values()), linger_ms=0, credentials=credentials(cluster)
        )
        try:
            while time.monotonic() < deadline:
                start = time.perf_counter()
                await (await producer.send(topic, b"x" * SIZE, partition=n % 3))
                latencies.append((time.perf_counter() - start) * 1000)
        finally:
            await producer.close()

    start = time.monotonic()
    await asyncio.gather(*(one(n) for n in range(4)))
    return {
        "rps": len(latencies) / (time.monotonic() - start),
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
    }


async def http_batched(cluster: Cluster, topic: str, seconds: float) -> dict[str, float]:
    producer = Producer(list(cluster.urls.values()), linger_ms=5, credentials=credentials(cluster))
    sent = 0
    start = time.monotonic()
    try:
        pending = []
        while time.monotonic() - start < seconds:
            pending.append(await producer.send(topic, b"x" * SIZE))
            sent += 1
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await producer.close()
    return {"rps": sent / (time.monotonic() - start)}


async def http_consume(cluster: Cluster, topic: str) -> dict[str, float]:
    async with Consumer(list(cluster.urls.values()), credentials=credentials(cluster)) as consumer:
        await consumer.assign_topic(topic)
        ends = await consumer.end_offsets(consumer.assignment())
        await consumer.seek_to_beginning()
        wanted = sum(ends.values())
        got = 0
        start = time.monotonic()
        while got < wanted:
            got += len(await consumer.poll(1000))
        return {"rps": got / (time.monotonic() - start)}


def kafka_single(cluster: Cluster, topic: str, seconds: float) -> dict[str, float]:
    from confluent_kafka import Producer as KafkaProducer  # noqa: PLC0415

    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    def one(n: int) -> None:
        producer = KafkaProducer({**kafka_settings(cluster), "acks": "all", "linger.ms": 0})
        while time.monotonic() < deadline:
            start = time.perf_counter()
            producer.produce(topic, b"x" * SIZE, partition=n % 3)
            producer.flush(30)
            latencies.append((time.perf_counter() - start) * 1000)

    start = time.monotonic()
    threads = [threading.Thread(target=one, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "rps": len(latencies) / (time.monotonic() - start),
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
    }


def kafka_batched(cluster: Cluster, topic: str, seconds: float) -> dict[str, float]:
    from confluent_kafka import Producer as KafkaProducer  # noqa: PLC0415

    producer = KafkaProducer({**kafka_settings(cluster), "acks": "all", "linger.ms": 5})
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, b"x" * SIZE)
            sent += 1
        except BufferError:
            producer.poll(0.01)
    producer.flush(60)
    return {"rps": sent / (time.monotonic() - start)}


def kafka_consume(cluster: Cluster, topic: str, wanted: int) -> dict[str, float]:
    from confluent_kafka import Consumer as KafkaConsumer  # noqa: PLC0415

    consumer = KafkaConsumer(
        {
            **kafka_settings(cluster),
            "group.id": f"bench-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = 0
    start = None
    deadline = time.monotonic() + 120
    while got < wanted and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                start = start or time.monotonic()
                got += 1
    consumer.close()
    return {"rps": got / (time.monotonic() - (start or time.monotonic()) or 1)}


def edges(cluster: Cluster, seconds: float, run: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, measure in (
        ("http_single", lambda t: asyncio.run(http_single(cluster, t, seconds))),
        ("http_batched", lambda t: asyncio.run(http_batched(cluster, t, seconds))),
        ("kafka_single", lambda t: kafka_single(cluster, t, seconds)),
        ("kafka_batched", lambda t: kafka_batched(cluster, t, seconds)),
    ):
        topic = f"{name}-{run}"
        progress(name)
        create(cluster, topic, 3)
        for key, value in measure(topic).items():
            out[f"{name}_{key}"] = value
        if name == "http_batched":
            out["http_consume_rps"] = asyncio.run(http_consume(cluster, topic))["rps"]
        if name == "kafka_batched":
            wanted = int(out["kafka_batched_rps"] * seconds * 0.95)
            out["kafka_consume_rps"] = kafka_consume(cluster, topic, wanted)["rps"]
    return out


# -- faults -----------------------------------------------------------------------------


def wait_full_isr(cluster: Cluster, topics: list[str], timeout_s: float = 90) -> None:
    """Every partition of `topics` led and fully replicated, as every serving broker sees
    it (a broker just back from a fault may still show the state from before it)."""
    deadline = time.monotonic() + timeout_s
    for topic in topics:
        for broker_id, process in cluster.processes.items():
            while process.serving:
                try:
                    status, body = call(
                        "GET", cluster.urls[broker_id] + f"/v1/topics/{topic}", timeout=3
                    )
                except OSError:
                    status, body = 0, None
                if status == 200 and all(
                    len(p["isr"]) == len(p["replicas"]) and p["leader"] >= 0
                    for p in body["partitions"]
                ):
                    break
                assert time.monotonic() < deadline, f"{topic} not fully replicated: {body}"
                time.sleep(0.2)


def partition_active_controller(cluster: Cluster, net: TestNet) -> None:
    active = f"controller-{cluster.quorum.leader(get=call)}"
    net.partition([active], [host for host in net.hosts if host != active])


def faults(cluster: Cluster, net: TestNet, hold_s: float, run: int) -> dict[str, float]:
    out = {}
    for n, (name, inject) in enumerate(
        (
            ("kill", lambda victim: cluster.processes[victim].kill()),
            ("cable", lambda victim: net.cut_link(f"broker-{victim}")),
            ("silence", lambda victim: net.silence(f"broker-{victim}")),
            ("controller", lambda _: partition_active_controller(cluster, net)),
        )
    ):
        topic = f"faults-{run}-{n}"
        leaders = create(cluster, topic, 3)
        victim = leaders[0]
        progress(f"fault {name} (broker {victim} leads partition 0)")
        with PartitionWriters(cluster, topic, leaders, avoid=victim, post=call) as writers:
            time.sleep(1)
            start = time.monotonic()
            inject(victim)
            time.sleep(hold_s)
            out[f"fault_{name}_s"] = writers.longest_gap(start)
        net.heal()
        if not cluster.processes[victim].alive:
            cluster.processes[victim].start()
        wait_full_isr(cluster, [topic])
    return out


def rolling_restart(cluster: Cluster, run: int) -> dict[str, float]:
    topic = f"rolling-{run}"
    create(cluster, topic, 6)
    stop, stop_writing = threading.Event(), threading.Event()
    acked: set[str] = set()
    consumed: dict[int, list[tuple[float, str]]] = {p: [] for p in range(6)}
    lock = threading.Lock()

    def write() -> None:
        for n in itertools.count():
            if stop_writing.is_set():
                return
            for broker_id, process in cluster.processes.items():
                if not process.serving:
                    continue
                value = f"v{n}"
                try:
                    status, _ = call(
                        "POST",
                        cluster.urls[broker_id] + f"/v1/topics/{topic}/records",
                        {"records": [{"key": f"k{n % 60}", "value": value}]},
                        timeout=5,
                    )
                except OSError:
                    continue
                if status == 200:
                    acked.add(value)
                    break
            time.sleep(0.02)

    def consume() -> None:
        with SyncConsumer(
            list(cluster.urls.values()),
            group_id=f"rolling-{run}",
            auto_offset_reset="earliest",
            credentials=credentials(cluster),
        ) as consumer:
            consumer.subscribe([topic])
            while not stop.is_set():
                try:
                    records = consumer.poll(500)
                except Exception:  # a broker restarting: poll again
                    time.sleep(0.2)
                    continue
                now = time.monotonic()
                with lock:
                    for record in records:
                        consumed[record.partition].append((now, record.value.decode()))

    threads = [threading.Thread(target=write, daemon=True)] + [
        threading.Thread(target=consume, daemon=True) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(5)
        start = time.monotonic()
        progress("rolling restart: kraftlite cluster roll --only brokers")
        rolled = subprocess.run(
            [sys.executable, "-m", "kraftlite", "cluster", "roll", "--only", "brokers",
             "--timeout", "120", "--output", "json", "--bootstrap", cluster.urls[1],
             "--ca-file", str(cluster.root / "ca.pem")],
            env={**os.environ, "KRAFTLITE_USER": ADMIN, "KRAFTLITE_PASSWORD": PASSWORD},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )  # fmt: skip
        assert rolled.returncode == 0, rolled.stderr
        end = time.monotonic()
        # the writer goes on; wait (a while) for the group to consume past the restart
        deadline = end + 90
        while time.monotonic() < deadline:
            with lock:
                last = {p: rows[-1][0] if rows else 0.0 for p, rows in consumed.items()}
            if all(t > end + 1 for t in last.values()):
                break
            time.sleep(0.5)
        settled = time.monotonic()
        stop_writing.set()  # then every acknowledged record must come through
        threads[0].join(30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                seen = {value for rows in consumed.values() for _, value in rows}
            if acked <= seen:
                break
            time.sleep(0.5)
    finally:
        stop_writing.set()
        stop.set()
        for thread in threads:
            thread.join(60)
    gaps = []
    for rows in consumed.values():
        times = [start] + [t for t, _ in rows if start < t <= settled] + [settled]
        gaps.append(max(b - a for a, b in itertools.pairwise(times)))
    seen = {value for rows in consumed.values() for _, value in rows}
    return {
        "rolling_longest_unconsumed_s": max(gaps),
        "rolling_restart_s": end - start,
        "rolling_acked_not_consumed": len(acked - seen),
    }


def one_run(args: argparse.Namespace, run: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    parts = set(args.only or ("edges", "faults", "rolling"))
    with tempfile.TemporaryDirectory(prefix="kraftlite-bench-network-") as root:
        if "edges" in parts:
            with running(Path(root) / "loopback", None) as cluster:
                figures |= {
                    f"loopback_{k}": v for k, v in edges(cluster, args.seconds, run).items()
                }
        net = TestNet([*NODES, "client"])
        try:
            with net.inside("client"):
                if args.delay_ms:
                    net.shape_all(delay_ms=args.delay_ms)
                with running(Path(root) / "hosts", net) as cluster:
                    if "edges" in parts:
                        figures |= {
                            f"hosts_{k}": v for k, v in edges(cluster, args.seconds, run).items()
                        }
                    if "faults" in parts:
                        figures |= faults(cluster, net, args.hold, run)
                    if "rolling" in parts:
                        figures |= rolling_restart(cluster, run)
        finally:
            net.close()
    print(json.dumps({"run": run, **{k: round(v, 3) for k, v in figures.items()}}), flush=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--hold", type=float, default=8, help="seconds each fault is held")
    parser.add_argument(
        "--delay-ms", type=float, default=1, help="delay on every link (0: no forwarder)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=("edges", "faults", "rolling"),
        help="measure only these (repeatable; default: all)",
    )
    args = parser.parse_args()
    why = hosts.available()
    if why is not None:
        print(f"bench_network: {why}", file=sys.stderr)
        return 2
    runs = [one_run(args, run) for run in range(args.runs)]
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    for key, value in median.items():
        print(f"{key:45} {value:12.2f}")
    print(
        json.dumps(
            {"bench": "network", "runs": args.runs, **{k: round(v, 3) for k, v in median.items()}}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
