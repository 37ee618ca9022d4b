"""What one single-record produce costs the brokers, and what replication adds to it.

Starts `kraftlite dev` (3 controllers + 3 brokers, scripts/bench.py's cluster) and, on one
Kafka connection to a partition's leader, sends Produce requests one at a time (each a
1 KiB record, acks=all, the next sent once the answer is back), first to a topic with
replication factor 1 (the baseline: the Kafka listener's request path and the append),
then RF 3 (the same plus two followers' replication rounds). Prints, per run and as medians:
requests a second, the round trip, and the three brokers' CPU (user + system, from /proc)
per request. RF 3 less RF 1 is what replicating one record to two followers costs.

Issue 29's goal is 0.4 ms of broker CPU per acknowledged record at RF 3 (NATS JetStream
R3 spends 0.35 ms); docs/perf/README.md has the figures and where the time goes.

Run: python scripts/bench_request_cost.py [--requests 8000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench  # scripts/bench.py: the cluster
import peers  # scripts/peers.py: process CPU
import profile_single  # scripts/profile_single.py: the node processes

from kraftlite.protocol.kafka import messages, records

_SIZE = struct.Struct(">i")
VALUE = b"x" * 1024


class Connection:
    """One Kafka connection sending Produce v9 requests one at a time."""

    def __init__(self, address: tuple[str, int], topic: str) -> None:
        self.sock = socket.create_connection(address, timeout=30)
        self.topic = topic
        self.correlation = 0

    def produce(self) -> None:
        batch = records.encode_batch(
            [records.KafkaRecord(0, int(time.time() * 1000), None, VALUE, [])]
        )
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 10_000,
            "topic_data": [
                {"name": self.topic, "partition_data": [{"index": 0, "records": batch}]}
            ],
        }
        self.correlation += 1
        request = messages.encode_request(0, 9, self.correlation, "bench", body)
        self.sock.sendall(_SIZE.pack(len(request)) + request)
        (size,) = _SIZE.unpack(self._read(4))
        answer = messages.decode_response(0, 9, self._read(size)).body
        code = answer["responses"][0]["partition_responses"][0]["error_code"]
        if code:
            raise SystemExit(f"produce failed: error {code}")

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise SystemExit("the broker closed the connection")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def measure(
    bootstrap: str, dev_pid: int, topic: str, replicas: int, count: int
) -> dict[str, float]:
    bench.fresh_topic(bootstrap, topic, 1, replicas)
    _, described = bench.call("GET", f"{bootstrap}/v1/topics/{topic}")
    leader = described["partitions"][0]["leader"]
    base = int(bootstrap.rsplit(":", 1)[1])
    connection = Connection(("127.0.0.1", base + 100 + leader - 1), topic)
    brokers = [pid for name, pid in profile_single.node_pids(dev_pid).items() if "broker" in name]
    try:
        for _ in range(500):  # warm up: connections, caches, the replicas' sessions
            connection.produce()
        cpu, started = peers.process_cpu_seconds(brokers), time.perf_counter()
        for _ in range(count):
            connection.produce()
        elapsed = time.perf_counter() - started
        spent = peers.process_cpu_seconds(brokers) - cpu
    finally:
        connection.close()
    return {
        "requests_per_s": count / elapsed,
        "round_trip_us": elapsed / count * 1e6,
        "broker_cpu_us_per_request": spent / count * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=8000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs: dict[int, list[dict[str, float]]] = {1: [], 3: []}
    root = Path(tempfile.mkdtemp(prefix="kraftlite-bench-request-cost-"))
    process, bootstrap = bench.start_cluster(root)
    try:
        for run in range(args.runs):
            for replicas, results in runs.items():
                figures = measure(
                    bootstrap, process.pid, f"cost-rf{replicas}-{run}", replicas, args.requests
                )
                results.append(figures)
                print(
                    f"run {run + 1} RF {replicas}: {figures['requests_per_s']:,.0f} requests/s, "
                    f"round trip {figures['round_trip_us']:,.0f} us, brokers' CPU "
                    f"{figures['broker_cpu_us_per_request']:,.0f} us a request"
                )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    medians = {
        replicas: {key: statistics.median(r[key] for r in results) for key in results[0]}
        for replicas, results in runs.items()
    }
    print(f"\nmedians of {args.runs} runs, {args.requests} requests each:")
    for replicas, figures in medians.items():
        print(
            f"RF {replicas}: {figures['requests_per_s']:>7,.0f} requests/s  round trip "
            f"{figures['round_trip_us']:>6,.0f} us  brokers' CPU "
            f"{figures['broker_cpu_us_per_request']:>6,.0f} us a request"
        )
    added = medians[3]["broker_cpu_us_per_request"] - medians[1]["broker_cpu_us_per_request"]
    print(f"replication to two followers adds {added:,.0f} us of broker CPU a record")
    print(json.dumps({"bench": "request_cost", "medians": medians}))


if __name__ == "__main__":
    main()
