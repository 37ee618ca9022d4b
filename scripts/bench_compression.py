"""Stored bytes against what a compressing Kafka producer sent (issue 29's first goal).

Starts `kraftlite dev` (3 controllers + 3 brokers, scripts/bench.py's cluster) in a temporary
directory and, for each codec (none, lz4, zstd), produces the same JSON events (about 650 B
each, a seeded generator: the bytes do not change from run to run) with confluent-kafka
(acks=all, linger 20 ms) to a topic of one partition with replication factor 3, then reads:

  sent        the producer's `txbytes` (librdkafka's statistics, summed over brokers):
              every byte it sent, protocol included, so the ratios below are a lower bound
  leader log  the partition leader's log size (`GET /v1/cluster/stats?topics=`); each
              follower stores the same bytes, and replication carries them

and the same values through kraftlite's Python producer over HTTP (`compression=codec`,
linger 20 ms, acks=all, awaited one `send` at a time): its leader's log size and records/s.

Goal (issue 29): disk bytes within 1.2x of the compressed bytes the producer sent, and
replication bytes likewise (per replica). Before issue 29, the Kafka edge decompressed
every batch and stored it uncompressed (docs/adr/0002).

Then each topic is read whole over HTTP binary fetches from its leader, twice, and the
records decoded as the Python client decodes them: once asking for columnar batches (the
leader converts each kept Kafka batch, `Accept: application/vnd.kraftlite.batch`: the
baseline), once for stored batches as they are (`...; format=3`: the client decodes):
records a second (wall, the client's decoding included), bytes on the wire, and the
leader's CPU per record (its process's user + system time over the read).

Run: python scripts/bench_compression.py [--records 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).parent))
import bench  # scripts/bench.py: the cluster
import peers  # scripts/peers.py: process CPU
import profile_single  # scripts/profile_single.py: the node processes

from kraftlite.client.producer import Producer as KraftliteProducer
from kraftlite.protocol import stored as stored_batches

CODECS = ("none", "lz4", "zstd")
GOAL = 1.2


def kafka_bootstrap(http_bootstrap: str) -> str:
    base = int(http_bootstrap.rsplit(":", 1)[1])
    return ",".join(f"127.0.0.1:{base + 100 + i}" for i in range(3))


def events(count: int) -> list[bytes]:
    """JSON events as an application sends them: ids, a user, a kind, a timestamp and
    text from a small vocabulary (so they compress as such events do, about 2-3x)."""
    rng = random.Random(29)
    words = [f"w{i}" for i in range(500)]
    return [
        json.dumps(
            {
                "id": i,
                "user": f"user-{rng.randrange(10_000)}",
                "event": rng.choice(["view", "click", "buy"]),
                "ts": 1_700_000_000_000 + i,
                "text": " ".join(rng.choice(words) for _ in range(120)),
            }
        ).encode()
        for i in range(count)
    ]


def produce(bootstrap: str, topic: str, codec: str, values: list[bytes]) -> int:
    """Every value acknowledged (acks=all); the bytes the producer sent."""
    stats: dict[str, Any] = {}
    failed = 0

    def delivered(err: object, _message: object) -> None:
        nonlocal failed
        failed += err is not None

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 20,
            "statistics.interval.ms": 200,
            "stats_cb": lambda raw: stats.update(json.loads(raw)),
        }
    )
    for n, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
        if n % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    if failed:
        raise SystemExit(f"{failed} deliveries failed")
    time.sleep(0.5)  # the statistics after the last delivery
    producer.poll(0)
    return sum(int(b.get("txbytes", 0)) for b in stats.get("brokers", {}).values())


def client_produce(bootstrap: str, topic: str, codec: str, values: list[bytes]) -> float:
    """The values through kraftlite's Python producer over HTTP (`compression=codec`: its
    batches go as Kafka batches, kept as sent), acks=all; records a second."""

    async def run() -> float:
        started = time.perf_counter()
        async with KraftliteProducer(bootstrap, compression=codec, linger_ms=20) as producer:
            for value in values:
                await producer.send(topic, value, partition=0)
            await producer.flush()
        return len(values) / (time.perf_counter() - started)

    return asyncio.run(run())


def stored(bootstrap: str, topic: str) -> int:
    """The leader's log bytes of the topic's partition, once two reads agree."""
    last = -1
    while True:
        status, answer = bench.call("GET", f"{bootstrap}/v1/cluster/stats?topics={topic}")
        assert status == 200, answer
        size = int(answer["topics"][topic]["size_bytes"])
        if size == last:
            return size
        last = size
        time.sleep(0.5)


READS = {
    "converted": "application/vnd.kraftlite.batch",
    "as stored": "application/vnd.kraftlite.batch; format=3",
}


def read_all(bootstrap: str, topic: str, accept: str, count: int, dev_pid: int) -> dict[str, float]:
    """The partition read whole from its leader with `accept`, the records decoded."""
    _, described = bench.call("GET", f"{bootstrap}/v1/topics/{topic}")
    leader = described["partitions"][0]["leader"]
    _, cluster = bench.call("GET", f"{bootstrap}/v1/cluster")
    url = next(b["url"] for b in cluster["brokers"] if b["id"] == leader)
    pid = profile_single.node_pids(dev_pid)[f"broker-{leader}"]
    offset = records = wire = 0
    cpu, started = peers.process_cpu_seconds([pid]), time.perf_counter()
    while offset < count:
        request = urllib.request.Request(
            f"{url}/v1/topics/{topic}/partitions/0/records?offset={offset}&max_bytes={8 << 20}",
            headers={"Accept": accept},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read()
            offset = int(response.headers["X-Kraftlite-Next-Offset"])
        wire += len(body)
        records += sum(len(d.values) for d in stored_batches.decode_stream(body))
    elapsed = time.perf_counter() - started
    leader_cpu = peers.process_cpu_seconds([pid]) - cpu
    assert records >= count, (records, count)
    return {
        "records_per_s": count / elapsed,
        "wire_bytes": wire,
        "leader_cpu_us_per_record": leader_cpu / count * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    values = events(args.records)
    raw = sum(len(v) for v in values)
    root = Path(tempfile.mkdtemp(prefix="kraftlite-bench-compression-"))
    process, bootstrap = bench.start_cluster(root)
    figures: dict[str, dict[str, float]] = {}
    try:
        for codec in CODECS:
            topic = f"compression-{codec}"
            bench.fresh_topic(bootstrap, topic, 1, 3)
            sent = produce(kafka_bootstrap(bootstrap), topic, codec, values)
            leader = stored(bootstrap, topic)
            figures[codec] = {
                "sent_bytes": sent,
                "leader_log_bytes": leader,
                "disk_over_sent": leader / sent,
            }
            for name, accept in READS.items():
                read = read_all(bootstrap, topic, accept, len(values), process.pid)
                figures[codec].update({f"{name}: {k}": v for k, v in read.items()})
            client_topic = f"client-{codec}"
            bench.fresh_topic(bootstrap, client_topic, 1, 3)
            rate = client_produce(bootstrap, client_topic, codec, values)
            figures[codec]["client_records_per_s"] = rate
            figures[codec]["client_log_bytes"] = stored(bootstrap, client_topic)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.records:,} events, {raw:,} bytes of values")
    print(
        f"{'codec':<6} {'sent':>14} {'leader log':>14} {'disk / sent':>12} "
        f"{'python client: log':>19} {'records/s':>10}"
    )
    for codec, f in figures.items():
        print(
            f"{codec:<6} {f['sent_bytes']:>14,.0f} {f['leader_log_bytes']:>14,.0f} "
            f"{f['disk_over_sent']:>12.2f} {f['client_log_bytes']:>19,.0f} "
            f"{f['client_records_per_s']:>10,.0f}"
        )
    print("\nreading each topic whole over HTTP binary fetches (the client decodes):")
    print(f"{'codec':<6} {'read':<10} {'records/s':>11} {'on the wire':>14} {'leader us/rec':>14}")
    for codec, f in figures.items():
        for name in READS:
            print(
                f"{codec:<6} {name:<10} {f[f'{name}: records_per_s']:>11,.0f} "
                f"{f[f'{name}: wire_bytes']:>14,.0f} "
                f"{f[f'{name}: leader_cpu_us_per_record']:>14.2f}"
            )
    for codec in ("lz4", "zstd"):
        ratio = figures[codec]["disk_over_sent"]
        verdict = "met" if ratio <= GOAL else "not met"
        print(
            f"goal: {codec} disk within {GOAL}x of what the producer sent: {ratio:.2f}x ({verdict})"
        )
    print(json.dumps({"bench": "compression", "records": args.records, **figures}))


if __name__ == "__main__":
    main()
