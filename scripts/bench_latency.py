"""Fixed-rate end-to-end latency, kraftlite against NATS JetStream R3 (issue 29).

The OpenMessaging Benchmark's workload, the one Kafka vendors publish, at this machine's
scale: producers send at a fixed rate, a consumer reads everything as it comes, and the
latency of each record is from the moment it was due to be sent (its place in the
schedule: a producer that falls behind is charged for it, no coordinated omission) to the
moment the consumer has it. Records of 1 KiB over 16 partitions, replication 3:

  kraftlite   `kraftlite dev` (3 controllers + 3 brokers) in a temporary directory; a topic
              of 16 partitions, RF 3, min.insync.replicas 2; a confluent-kafka Producer as
              OMB's Kafka driver sets it (acks=all, linger.ms 1, batch.size 1 MiB), records
              spread over the partitions in turn; a confluent-kafka Consumer assigned
              every partition at its end, in another process
  NATS R3     three nats-server processes with JetStream (scripts/peers.py); 16 streams of
              3 replicas (file storage); nats-py publishes each record as it is due
              without waiting for the one before (OMB's publishAsync), an ordered push
              consumer per stream in another process

Each rate runs --seconds (after a second of warm-up whose records are not counted), on
both systems, --runs times. Printed per rate and system: the rate reached, the
end-to-end p50, p99 and p99.9 (ms), and whether every record arrived; the medians over
the runs; then, for every rate NATS sustains, whether kraftlite's p99 is no higher (the
issue's goal). The load generator (Python, 2 processes per system) shares this machine's
cores with the servers, on both sides alike; nats-py is pure Python where librdkafka is C,
so a rate the NATS side does not reach may be its client's limit: its "rate reached"
column says so.

Run: python scripts/bench_latency.py [--runs 3] [--rates 1000,2000,5000,10000] [--seconds 10]
     (needs `pip install -e '.[bench]'` and `apt-get install nats-server`)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import time
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench  # scripts/bench.py: the cluster, topics
import peers  # scripts/peers.py: the NATS cluster

PARTITIONS = 16
SIZE = 1024
WARMUP_S = 1.0
DRAIN_S = 15.0  # how long the consumer waits past the schedule's end for the last records
_STAMP = struct.Struct("<dq")  # when the record was due (time.time()), its number


def _schedule(rate: float, seconds: float) -> tuple[int, float]:
    """(records, the schedule's start): warm-up included, starting a moment from now."""
    return int(rate * (seconds + WARMUP_S)), time.time() + 0.5


def _payload(due: float, number: int) -> bytes:
    return _STAMP.pack(due, number).ljust(SIZE, b"x")


def _summary(latencies: list[float], expected: int, rate: float, sent_s: float) -> dict[str, Any]:
    latencies.sort()
    n = len(latencies)

    def at(q: float) -> float:
        return latencies[min(n - 1, int(n * q))] * 1000 if n else float("nan")

    return {
        "rate_reached": expected / sent_s if sent_s > 0 else 0.0,
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "p999_ms": at(0.999),
        "complete": n == expected,
    }


# ------------------------------------------------------------------------------ kraftlite


def _kafka_producer(bootstrap: str, topic: str, total: int, start: float, rate: float,
                    out: Queue[Any]) -> None:  # fmt: skip
    from confluent_kafka import Producer  # noqa: PLC0415 - in the child process

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 1,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failed = 0

    def delivered(err: object, _message: object) -> None:
        nonlocal failed
        failed += err is not None

    for i in range(total):
        due = start + i / rate
        wait = due - time.time()
        if wait > 0:
            producer.poll(min(wait, 0.001)) if wait > 0.001 else time.sleep(wait)
            while (wait := due - time.time()) > 0:
                time.sleep(wait)
        while True:
            try:
                producer.produce(topic, _payload(due, i), partition=i % PARTITIONS,
                                 on_delivery=delivered)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.001)
        if i % 64 == 0:
            producer.poll(0)
    sent = time.time() - start
    producer.flush(60)
    out.put({"failed": failed, "sent_s": sent})


def _kafka_consumer(bootstrap: str, topic: str, total: int, warmup: int, limit_s: float,
                    ready: Any, out: Queue[Any]) -> None:  # fmt: skip
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-latency",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])  # a new topic
    consumer.consume(1, timeout=1.0)  # connected, fetching
    ready.set()
    latencies: list[float] = []
    seen = 0
    deadline = time.time() + limit_s
    while seen < total and time.time() < deadline:
        # (consume(n, timeout) waits for n records or the timeout: at a low rate that is
        # the timeout; poll answers with the first, then what else is there is taken)
        first = consumer.poll(0.2)
        if first is None:
            continue
        for message in [first, *consumer.consume(1000, timeout=0)]:
            if message.error() is not None:
                continue
            now = time.time()
            due, number = _STAMP.unpack_from(message.value())
            seen += 1
            if number >= warmup:
                latencies.append(now - due)
    consumer.close()
    out.put(latencies)


def kraftlite_at(bootstrap: str, kafka: str, rate: float, seconds: float) -> dict[str, Any]:
    topic = "latency"
    bench.fresh_topic(bootstrap, topic, PARTITIONS, 3)
    return _run((_kafka_consumer, (kafka, topic)), (_kafka_producer, (kafka, topic)), rate, seconds)


# ----------------------------------------------------------------------------------- NATS


async def _nats_publish(urls: list[str], total: int, start: float, rate: float) -> dict[str, Any]:
    import nats  # noqa: PLC0415 - the bench extra

    connection = await nats.connect(urls)
    js = connection.jetstream()
    pending: set[asyncio.Task[Any]] = set()
    failed = 0

    def done(task: asyncio.Task[Any]) -> None:
        nonlocal failed
        pending.discard(task)
        failed += task.cancelled() or task.exception() is not None

    for i in range(total):
        due = start + i / rate
        wait = due - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        task = asyncio.create_task(js.publish(f"s{i % PARTITIONS}", _payload(due, i)))
        pending.add(task)
        task.add_done_callback(done)
        if len(pending) > 20_000:  # bounded: a stalled server is a failed rate
            await asyncio.sleep(0.001)
    sent = time.time() - start
    if pending:
        await asyncio.wait(pending, timeout=60)
    await connection.close()
    return {"failed": failed, "sent_s": sent}


def _nats_producer(urls: list[str], total: int, start: float, rate: float,
                   out: Queue[Any]) -> None:  # fmt: skip
    out.put(asyncio.run(_nats_publish(urls, total, start, rate)))


async def _nats_read(
    urls: list[str], total: int, warmup: int, limit_s: float, ready: Any
) -> list[float]:
    import nats  # noqa: PLC0415

    connection = await nats.connect(urls)
    js = connection.jetstream()
    latencies: list[float] = []
    seen = 0
    finished = asyncio.Event()

    async def handle(message: Any) -> None:
        nonlocal seen
        now = time.time()
        due, number = _STAMP.unpack_from(message.data)
        seen += 1
        if number >= warmup:
            latencies.append(now - due)
        if seen >= total:
            finished.set()

    subscriptions = [
        await js.subscribe(f"s{p}", cb=handle, ordered_consumer=True)  # new streams: all
        for p in range(PARTITIONS)
    ]
    ready.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(finished.wait(), timeout=limit_s)
    for subscription in subscriptions:
        await subscription.unsubscribe()
    await connection.close()
    return latencies


def _nats_consumer(urls: list[str], total: int, warmup: int, limit_s: float, ready: Any,
                   out: Queue[Any]) -> None:  # fmt: skip
    out.put(asyncio.run(_nats_read(urls, total, warmup, limit_s, ready)))


async def _nats_streams(urls: list[str]) -> None:
    import nats  # noqa: PLC0415
    from nats.js.api import StreamConfig  # noqa: PLC0415
    from nats.js.errors import NotFoundError  # noqa: PLC0415

    connection = await nats.connect(urls)
    js = connection.jetstream()
    for p in range(PARTITIONS):
        name = f"s{p}"
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(name)
        await js.add_stream(StreamConfig(name=name, subjects=[name], num_replicas=3))
    await connection.close()


def nats_at(urls: list[str], rate: float, seconds: float) -> dict[str, Any]:
    asyncio.run(_nats_streams(urls))
    return _run((_nats_consumer, (urls,)), (_nats_producer, (urls,)), rate, seconds)


# ------------------------------------------------------------------------------- the run


def _run(consumer: tuple[Any, tuple[Any, ...]], producer: tuple[Any, tuple[Any, ...]],
         rate: float, seconds: float) -> dict[str, Any]:  # fmt: skip
    """One rate on one system: the consumer first (at the end of every partition), then
    the producer on the schedule; their results summed up."""
    context = multiprocessing.get_context("spawn")
    total, _ = _schedule(rate, seconds)  # (its start is taken once the consumer is ready)
    warmup = int(rate * WARMUP_S)
    ready = context.Event()
    consumed: Queue[Any] = context.Queue()
    produced: Queue[Any] = context.Queue()
    limit_s = seconds + WARMUP_S + DRAIN_S + 1.0
    reader = context.Process(
        target=consumer[0], args=(*consumer[1], total, warmup, limit_s, ready, consumed)
    )
    reader.start()
    try:
        if not ready.wait(60):
            raise SystemExit("the consumer did not start")
        _, start = _schedule(rate, seconds)
        writer = context.Process(
            target=producer[0], args=(*producer[1], total, start, rate, produced)
        )
        writer.start()
        sent = produced.get(timeout=seconds + WARMUP_S + 120)
        latencies = consumed.get(timeout=limit_s + 60)
        writer.join(30)
    finally:
        reader.join(30)
        if reader.is_alive():
            reader.kill()
    figures = _summary(latencies, total - warmup, rate, sent["sent_s"])
    figures["rate_reached"] = total / sent["sent_s"]
    figures["complete"] = figures["complete"] and not sent["failed"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rates", default="1000,2000,5000,10000")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    systems = ("kraftlite", "nats_r3")
    results: dict[tuple[str, float], list[dict[str, Any]]] = {}
    root = Path(tempfile.mkdtemp(prefix="kraftlite-bench-latency-"))
    process, bootstrap = bench.start_cluster(root / "kraftlite")
    base = int(bootstrap.rsplit(":", 1)[1])
    kafka = ",".join(f"127.0.0.1:{base + 100 + i}" for i in range(3))
    try:
        with peers.NatsCluster(root / "nats") as nats_cluster:
            for run in range(args.runs):
                for rate in rates:
                    for system in systems:
                        if system == "kraftlite":
                            figures = kraftlite_at(bootstrap, kafka, rate, args.seconds)
                        else:
                            figures = nats_at(nats_cluster.urls, rate, args.seconds)
                        results.setdefault((system, rate), []).append(figures)
                        print(f"run {run + 1} {system:<9} {rate:>8,.0f}/s: "
                              + ", ".join(f"{k} {v:,.2f}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in figures.items()), flush=True)  # fmt: skip
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(f"median of {args.runs} runs; end-to-end latency in ms, 1 KiB records, "
          f"{PARTITIONS} partitions, RF 3")  # fmt: skip
    print(
        f"{'rate/s':>8}  {'system':<9} {'reached':>9} {'p50':>8} {'p99':>8} {'p99.9':>8}  complete"
    )
    medians: dict[str, dict[str, Any]] = {}
    for (system, rate), runs in results.items():
        median = {k: statistics.median(r[k] for r in runs) for k in ("rate_reached", "p50_ms",
                  "p99_ms", "p999_ms")}  # fmt: skip
        median["complete"] = all(r["complete"] for r in runs)
        medians[f"{system}@{rate:.0f}"] = median
        print(f"{rate:>8,.0f}  {system:<9} {median['rate_reached']:>9,.0f} "
              f"{median['p50_ms']:>8.2f} {median['p99_ms']:>8.2f} {median['p999_ms']:>8.2f}  "
              f"{median['complete']}")  # fmt: skip
    for rate in rates:
        ours, theirs = medians[f"kraftlite@{rate:.0f}"], medians[f"nats_r3@{rate:.0f}"]
        sustained = theirs["complete"] and theirs["rate_reached"] >= 0.98 * rate
        if sustained:
            met = ours["complete"] and ours["p99_ms"] <= theirs["p99_ms"]
            print(f"goal at {rate:,.0f}/s (NATS R3 sustains it): kraftlite p99 "
                  f"{ours['p99_ms']:.2f} ms <= NATS {theirs['p99_ms']:.2f} ms: "
                  f"{'met' if met else 'NOT met'}")  # fmt: skip
        else:
            print(f"at {rate:,.0f}/s NATS R3 (its Python client here) does not keep up")
    print(json.dumps(medians))


if __name__ == "__main__":
    main()
