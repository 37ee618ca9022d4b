"""The Kafka edge against the HTTP edge, on one cluster in one run (issue 16).

Starts `kraftlite dev` (3 controllers + 3 brokers, each broker with a Kafka listener) in a
temporary directory, creates topics of 3 partitions with replication factor 3, and measures
from this process, --runs times:

  HTTP binary produce   pre-encoded batches of 1,000 records x 100 B, acks=all, 8 requests
                        in flight, straight to each partition's leader (scripts/bench.py's
                        path: the fastest the HTTP edge takes records)
  Kafka produce         confluent-kafka (librdkafka 2.16) Producer, acks=all, 100 B values,
                        batches as the client forms them (its defaults: linger.ms 5,
                        batch.size 1 MB), idempotence off and on
  Kafka raw produce     pre-encoded Kafka batches of 1,000 records x 100 B, acks=all, 8
                        Produce requests in flight (one per connection), straight to each
                        partition's leader: the HTTP binary path's load over the Kafka
                        edge, so the two edges compare with no client cost on either
                        (each produce figure with the CPU µs per record the three brokers
                        and this process spent meanwhile: which side a gap is on)
  HTTP binary consume   binary fetches of everything produced, from each leader
  Kafka consume         confluent-kafka Consumer (its defaults) assigned every partition
                        from offset 0, consume(10000) until it has read everything; with
                        1 partition (and the CPU µs per record its leader's process spent
                        meanwhile), with 3 (3 leaders), and with 3 and librdkafka's
                        fetch.queue.backoff.ms at 10 instead of 1000
  client ceiling        librdkafka produce() calls/s into its queue with no broker: the
                        load generator's own limit
  conversion            in this process: µs per record to convert stored batches to Kafka's
                        format and back (kraftlite/protocol/kafka/records.py), the Kafka edge's own
                        cost per record (docs/adr/0002)

Goals (issue 16): the Kafka produce path at least as fast as the HTTP binary path, and a
confluent-kafka consumer reading >= 1,000,000 records/s of 100 B records. Every figure is the
median over --runs; the last line is one JSON object.

Run: python scripts/bench_kafka.py [--runs 3] [--seconds 5] [--records 600000]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import aiohttp
from confluent_kafka import Consumer, Producer, TopicPartition

from kraftlite import eventloop
from kraftlite.protocol import batch as fmt

try:
    from kraftlite.protocol.kafka import messages, records
except ImportError:  # a tree from before issue 24 (for before/after figures)
    from kraftlite.kafka import messages, records  # type: ignore[no-redef]

sys.path.insert(0, str(Path(__file__).parent))
import bench  # scripts/bench.py: the cluster, the HTTP load
import peers  # scripts/peers.py: CPU seconds of a process
import profile_single  # scripts/profile_single.py: the node processes

PARTITIONS = 3
SIZE = 100
BATCH_RECORDS = 1000


def kafka_bootstrap(http_bootstrap: str) -> str:
    base = int(http_bootstrap.rsplit(":", 1)[1])
    return ",".join(f"127.0.0.1:{base + 100 + i}" for i in range(3))


def kafka_produce(bootstrap: str, topic: str, seconds: float, idempotent: bool) -> float:
    """Records/s acknowledged (acks=all) over `seconds`, flush included."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent}
    )
    value = b"x" * SIZE
    failed = 0

    def delivered(err: object, _message: object) -> None:
        nonlocal failed
        failed += err is not None

    sent = 0
    started = time.monotonic()
    deadline = started + seconds
    while time.monotonic() < deadline:
        for _ in range(1000):
            try:
                producer.produce(topic, value, on_delivery=delivered)
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
    producer.flush(60)
    elapsed = time.monotonic() - started
    if failed:
        raise SystemExit(f"{failed} Kafka deliveries failed")
    return sent / elapsed


async def kafka_raw_produce(leaders: dict[int, str], topic: str, seconds: float) -> float:
    """Records/s acknowledged (acks=all) for pre-encoded Kafka batches, 8 requests in flight
    as bench.py's HTTP binary produce: one connection per loop, to the partition's leader."""
    now = int(time.time() * 1000)
    batch = records.encode_batch(
        [records.KafkaRecord(i, now, None, b"x" * SIZE, ()) for i in range(BATCH_RECORDS)]
    )
    streams: dict[tuple[int, int], tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

    async def step(i: int) -> int:
        partition = i % PARTITIONS  # as bench.py's: each loop turns over the partitions
        key = (i % 8, partition)  # a loop's connection to that partition's leader
        if key not in streams:
            host, port = kafka_bootstrap(leaders[partition]).split(",")[0].rsplit(":", 1)
            streams[key] = await asyncio.open_connection(host, int(port))
        reader, writer = streams[key]
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 30_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
            ],
        }
        request = messages.encode_request(messages.ApiKey.PRODUCE, 9, i, "bench", body)
        writer.write(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        answer = messages.decode_response(
            messages.ApiKey.PRODUCE, 9, await reader.readexactly(size)
        )
        code = answer.body["responses"][0]["partition_responses"][0]["error_code"]
        if code:
            raise SystemExit(f"Kafka produce failed: error {code}")
        return BATCH_RECORDS

    try:
        return await bench.run_for(seconds, 8, step)
    finally:
        for _, writer in streams.values():
            writer.close()


def client_ceiling(records_: int) -> float:
    """produce() calls/s into librdkafka's queue with no broker to send to: the most this
    process can offer as a load generator, whatever the cluster does."""
    producer = Producer(
        {
            "bootstrap.servers": "127.0.0.1:9",  # nobody: nothing is sent
            "queue.buffering.max.messages": records_ + 1,
            "queue.buffering.max.kbytes": 2**21,
            "message.timeout.ms": 1000,
        }
    )
    value = b"x" * SIZE
    started = time.monotonic()
    for _ in range(records_):
        producer.produce("ceiling", value)
    rate = records_ / (time.monotonic() - started)
    producer.purge()
    producer.flush(5)
    return rate


def broker_pid(url: str) -> int:
    """The pid of the broker process `kraftlite dev` started listening at `url`."""
    listen = url.removeprefix("http://")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--broker-id" in args and listen.encode() in args:
            return int(proc.name)
    raise SystemExit(f"no broker process listens at {url}")


def kafka_consume(
    bootstrap: str,
    topic: str,
    total: int,
    partitions: int,
    settings: dict[str, object],
    cpu_pid: int | None = None,
) -> tuple[float, float, float]:
    """Records/s a confluent-kafka Consumer (its defaults, plus `settings`) reads from
    offset 0 of every partition of `topic` until it has `total` records, the CPU µs per
    record process `cpu_pid` (a leader) spent meanwhile (NaN without one), and the cores
    this process kept busy (librdkafka's threads and the Python loop: the client's side)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            **settings,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    cpu = peers.process_cpu_seconds([cpu_pid]) if cpu_pid else 0.0
    own, started = time.process_time(), time.monotonic()
    while got < total:
        for message in consumer.consume(10_000, timeout=5):
            if message.error() is None:
                got += 1
        if time.monotonic() - started > 120:
            raise SystemExit(f"read {got} of {total} records in 120 s")
    elapsed, own = time.monotonic() - started, time.process_time() - own
    used = peers.process_cpu_seconds([cpu_pid]) - cpu if cpu_pid else float("nan")
    consumer.close()
    return got / elapsed, used * 1e6 / got, own / elapsed


async def http_produce(leaders: dict[int, str], seconds: float, producers: int) -> float:
    batch = fmt.encode_batch(
        [b"x" * SIZE] * BATCH_RECORDS, timestamps=[int(time.time() * 1000)] * BATCH_RECORDS
    )
    async with aiohttp.ClientSession() as session:
        return await bench.produce_binary(
            session, leaders, batch, BATCH_RECORDS, "all", seconds, producers
        )


async def http_consume(leaders: dict[int, str]) -> float:
    async with aiohttp.ClientSession() as session:
        consumed, _ = await bench.consume(session, leaders)
    return consumed


def conversion_us() -> dict[str, float]:
    count = 1000
    stored = bytes(
        fmt.stamp(
            fmt.encode_batch(
                [b"x" * SIZE] * count, keys=[b"k" * 10] * count, timestamps=[1] * count
            ),
            0,
            0,
        )
    )
    kafka = records.kraftlite_to_kafka(stored)
    out = min(timeit.repeat(lambda: records.kraftlite_to_kafka(stored), number=20, repeat=5))
    back = min(
        timeit.repeat(
            lambda: records.kafka_to_kraftlite(*records.decode_batches(kafka)), number=20, repeat=5
        )
    )
    return {
        "to_kafka_us_per_record": out / 20 / count * 1e6,
        "from_kafka_us_per_record": back / 20 / count * 1e6,
    }


def one_run(bootstrap: str, dev_pid: int, args: argparse.Namespace) -> dict[str, float]:
    """Every figure once, each on a topic made for it and deleted after it: a figure
    measured beside the data of the ones before ran measurably slower (a cluster's third
    fresh topic took 40 % fewer records/s than its first), which favoured the first."""
    kafka = kafka_bootstrap(bootstrap)
    brokers = [p for name, p in profile_single.node_pids(dev_pid).items() if "broker" in name]
    figures: dict[str, float] = {}

    def done(topic: str) -> None:
        bench.call("DELETE", f"{bootstrap}/v1/topics/{topic}")

    def produced(name: str, measure: Callable[[], float]) -> None:
        """`measure()`'s records/s, and the CPU µs per record the three brokers and this
        process (the load generator: librdkafka's threads too) spent meanwhile. The records
        are counted as the rate times the time measure() ran, which includes making its
        client and connections (a few ms of 5 s: the figures come out under 1 % low)."""
        cpu, own, started = (
            peers.process_cpu_seconds(brokers),
            time.process_time(),
            time.monotonic(),
        )
        rate = measure()
        count = rate * (time.monotonic() - started)
        figures[name] = rate
        figures[f"{name}_brokers_cpu_us"] = (peers.process_cpu_seconds(brokers) - cpu) * 1e6 / count
        figures[f"{name}_client_cpu_us"] = (time.process_time() - own) * 1e6 / count

    leaders = bench.fresh_topic(bootstrap, bench.TOPIC, PARTITIONS, 3)
    produced("http_binary_produce", lambda: eventloop.run(http_produce(leaders, args.seconds, 8)))
    figures["http_binary_consume"] = eventloop.run(http_consume(leaders))
    done(bench.TOPIC)
    raw_topic = "kafka-bench-raw"
    raw_leaders = bench.fresh_topic(bootstrap, raw_topic, PARTITIONS, 3)
    produced(
        "kafka_raw_produce",
        lambda: eventloop.run(kafka_raw_produce(raw_leaders, raw_topic, args.seconds)),
    )
    done(raw_topic)
    for idempotent in (False, True):
        name = "kafka_produce_idempotent" if idempotent else "kafka_produce"
        topic = f"kafka-bench-{int(idempotent)}"
        bench.fresh_topic(bootstrap, topic, PARTITIONS, 3)
        produced(name, functools.partial(kafka_produce, kafka, topic, args.seconds, idempotent))
        done(topic)
    for partitions in (1, PARTITIONS):
        topic = f"kafka-consume-{partitions}"
        leaders = bench.fresh_topic(bootstrap, topic, partitions, 3)
        fill = Producer({"bootstrap.servers": kafka, "acks": "1", "linger.ms": 20})
        for _ in range(args.records):
            while True:
                try:
                    fill.produce(topic, b"x" * SIZE)
                    break
                except BufferError:  # its queue is full: let deliveries drain it
                    fill.poll(0.05)
        fill.flush(120)
        if partitions == 1:
            rate, cpu_us, cores = kafka_consume(
                kafka, topic, args.records, 1, {}, cpu_pid=broker_pid(leaders[0])
            )
            figures["kafka_consume_1_partition"] = rate
            figures["kafka_consume_1_partition_leader_cpu_us_per_record"] = cpu_us
            figures["kafka_consume_1_partition_client_cores"] = cores
            # (librdkafka's fetch.queue.backoff.ms, below, holds one partition back too)
            rate, cpu_us, cores = kafka_consume(
                kafka,
                topic,
                args.records,
                1,
                {"fetch.queue.backoff.ms": 10},
                cpu_pid=broker_pid(leaders[0]),
            )
            figures["kafka_consume_1_partition_short_backoff"] = rate
            figures["kafka_consume_1_partition_short_backoff_leader_cpu_us"] = cpu_us
            figures["kafka_consume_1_partition_short_backoff_client_cores"] = cores
        else:
            figures["kafka_consume"] = kafka_consume(kafka, topic, args.records, partitions, {})[0]
            # librdkafka pauses a partition's fetches for fetch.queue.backoff.ms (1 s) when
            # its local queue passes queued.min.messages (100,000): at a million records/s
            # that is most of the time. The same consumer with a short backoff:
            figures["kafka_consume_short_backoff"] = kafka_consume(
                kafka, topic, args.records, partitions, {"fetch.queue.backoff.ms": 10}
            )[0]
        done(topic)
    figures["kafka_client_ceiling"] = client_ceiling(args.records)
    figures.update(conversion_us())
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--records", type=int, default=600_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kraftlite-bench-kafka-"))
    process, bootstrap = bench.start_cluster(root)
    try:
        runs = []
        for run in range(args.runs):
            figures = one_run(bootstrap, process.pid, args)
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
    ratio = median["kafka_produce"] / median["http_binary_produce"]
    print(
        f"goal: Kafka produce >= HTTP binary produce: {ratio:.2f}x "
        f"({'met' if ratio >= 1 else 'not met'})"
    )
    raw = median["kafka_raw_produce"] / median["http_binary_produce"]
    print(f"the edges alone (pre-encoded batches on both): Kafka {raw:.2f}x HTTP binary")
    paths = (
        ("HTTP binary", "http_binary_produce"),
        ("Kafka raw", "kafka_raw_produce"),
        ("confluent-kafka", "kafka_produce"),
        ("idempotent", "kafka_produce_idempotent"),
    )
    for whose, suffix in (("the three brokers'", "brokers"), ("the load generator's", "client")):
        spent = ", ".join(f"{n} {median[f'{key}_{suffix}_cpu_us']:.2f}" for n, key in paths)
        print(f"{whose} CPU µs a produced record: {spent}")
    for key in (
        "kafka_consume_1_partition",
        "kafka_consume_1_partition_short_backoff",
        "kafka_consume",
        "kafka_consume_short_backoff",
    ):
        consume = median[key]
        print(
            f"goal: confluent-kafka consumer >= 1,000,000 records/s ({key}): {consume:,.0f} "
            f"({'met' if consume >= 1_000_000 else 'not met'})"
        )
    print(json.dumps(median))


if __name__ == "__main__":
    main()
