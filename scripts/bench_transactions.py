"""Kafka transactions against idempotent produce, on one cluster in one run (issue 27).

Starts `kraftlite dev` (3 controllers + 3 brokers with Kafka listeners) in a temporary
directory, and measures with confluent-kafka (librdkafka), on topics of 3 partitions with
replication factor 3, acks=all, 100 B values, --runs times:

  idempotent produce      records/s acknowledged, enable.idempotence (the baseline)
  transactional produce   records/s committed, transactions of 100 and of 1,000 records,
                          each spread over the 3 partitions, begin/produce/commit back to
                          back (a commit waits for the coordinator's PrepareCommit, not for
                          the markers: the next AddPartitionsToTxn may be told
                          CONCURRENT_TRANSACTIONS until they are written, as Kafka's)
  read_committed consume  records/s a Consumer reads of a topic of committed transactions
                          with isolation.level read_committed, then read_uncommitted
  consume-transform-produce
                          end-to-end latency of one record: produced (idempotent) to `in`,
                          read by a read_committed consumer in a group, written to `out` in
                          a transaction with the consumer's offsets
                          (send_offsets_to_transaction), committed, and read by a
                          read_committed consumer of `out`: p50 and p99 over --loops records

Goal (issue 27): transactional produce at 1,000 records per transaction at most 20 % slower
than idempotent produce in the same run. Every figure is the median over --runs; the last
line is one JSON object.

Run: python scripts/bench_transactions.py [--runs 3] [--seconds 5] [--loops 200]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).parent))
import bench  # scripts/bench.py: the cluster
from bench_kafka import kafka_bootstrap  # the Kafka listeners of bench.start_cluster's

PARTITIONS = 3
VALUE = b"x" * 100


def idempotent_produce(bootstrap: str, topic: str, seconds: float) -> float:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, VALUE, partition=sent % PARTITIONS)
            sent += 1
        except BufferError:
            producer.poll(0.01)
    producer.flush(120)
    return sent / (time.monotonic() - started)


def transactional_produce(
    bootstrap: str, topic: str, seconds: float, per_txn: int
) -> tuple[float, int]:
    """(records/s committed, records committed)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(60)
    committed = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        producer.begin_transaction()
        for i in range(per_txn):
            while True:
                try:
                    producer.produce(topic, VALUE, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.commit_transaction(60)
        committed += per_txn
    return committed / (time.monotonic() - started), committed


def consume(bootstrap: str, topic: str, total: int, isolation: str) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = time.monotonic()
    while got < total:
        wanted = min(10_000, total - got)  # (a call waits for all it asks, or its timeout)
        got += sum(1 for m in consumer.consume(wanted, timeout=5) if m.error() is None)
        if time.monotonic() - started > 120:
            raise SystemExit(f"read {got} of {total} records in 120 s")
    elapsed = time.monotonic() - started
    consumer.close()
    return got / elapsed


def consume_transform_produce(bootstrap: str, source: str, sink: str, loops: int) -> list[float]:
    """Milliseconds from producing each record to `source` until its transformed copy is
    readable (read_committed) in `sink`, one record at a time."""
    group = f"bench-ctp-{uuid.uuid4().hex[:8]}"
    feeder = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    reader.assign([TopicPartition(source, 0, 0)])
    writer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"bench-ctp-{group}", "linger.ms": 0}
    )
    writer.init_transactions(60)
    checker = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{group}-check",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    checker.assign([TopicPartition(sink, 0, 0)])
    latencies = []
    for n in range(loops):
        sent = time.monotonic()
        feeder.produce(source, f"{n}".encode(), partition=0)
        feeder.flush(30)
        message = None
        while message is None or message.error() is not None:
            message = reader.poll(5)
        writer.begin_transaction()
        writer.produce(sink, message.value() + b"!", partition=0)
        offsets = [TopicPartition(source, 0, message.offset() + 1)]
        writer.send_offsets_to_transaction(offsets, reader.consumer_group_metadata(), 30)
        writer.commit_transaction(30)
        out = None
        while out is None or out.error() is not None:
            out = checker.poll(5)
        if out.value() != f"{n}!".encode():
            raise SystemExit(f"read {out.value()!r} for record {n}")
        latencies.append((time.monotonic() - sent) * 1000)
    for client in (reader, checker):
        client.close()
    return latencies


def one_run(http: str, args: argparse.Namespace) -> dict[str, float]:
    kafka = kafka_bootstrap(http)
    figures: dict[str, float] = {}

    def fresh(name: str, partitions: int = PARTITIONS) -> str:
        bench.fresh_topic(http, name, partitions, 3)
        return name

    def done(*topics: str) -> None:
        for topic in topics:
            bench.call("DELETE", f"{http}/v1/topics/{topic}")

    topic = fresh("txn-bench-idempotent")
    figures["idempotent_produce"] = idempotent_produce(kafka, topic, args.seconds)
    done(topic)
    for per_txn in (100, 1000):
        topic = fresh(f"txn-bench-{per_txn}")
        rate, records = transactional_produce(kafka, topic, args.seconds, per_txn)
        figures[f"transactional_produce_{per_txn}"] = rate
        if per_txn == 1000:
            figures["consume_read_committed"] = consume(kafka, topic, records, "read_committed")
            figures["consume_read_uncommitted"] = consume(kafka, topic, records, "read_uncommitted")
        done(topic)
    source, sink = fresh("txn-bench-in", 1), fresh("txn-bench-out", 1)
    latencies = sorted(consume_transform_produce(kafka, source, sink, args.loops))
    figures["ctp_p50_ms"] = latencies[len(latencies) // 2]
    figures["ctp_p99_ms"] = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    done(source, sink)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--loops", type=int, default=200)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kraftlite-bench-txn-"))
    process, http = bench.start_cluster(root)
    try:
        runs = []
        for run in range(args.runs):
            try:
                figures = one_run(http, args)
            except KafkaException as exc:
                raise SystemExit(f"run {run + 1}: {exc}") from None
            runs.append(figures)
            print(f"run {run + 1}: " + ", ".join(f"{k} {v:,.2f}" for k, v in figures.items()))
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    print()
    title = f"figure (median of {args.runs} runs)"
    print(f"{title:<40} {'value':>14}")
    for key, value in median.items():
        print(f"{key:<40} {value:>14,.2f}")
    ratio = median["transactional_produce_1000"] / median["idempotent_produce"]
    print(
        f"goal: transactional produce (1,000 records per transaction) at most 20 % slower "
        f"than idempotent: {ratio:.2f}x ({'met' if ratio >= 0.8 else 'not met'})"
    )
    committed = median["consume_read_committed"] / median["consume_read_uncommitted"]
    print(f"read_committed consume: {committed:.2f}x read_uncommitted")
    print(json.dumps(median))


if __name__ == "__main__":
    main()
