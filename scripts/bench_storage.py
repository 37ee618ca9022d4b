"""Partition-log benchmark, with raw LMDB puts as the baseline measured in the same run.

For each durability policy (fsync every append; fsync every 1000 ms, the default) and for
100 B and 1 KB records in batches of 1, 100 and 1000 it measures:
  append    the log's append path given batches already encoded, as the broker receives them
            (validate both CRCs and the structure, assign offsets, stamp, persist with the
            epoch cache, time index and meta in the same transaction)
  baseline  raw py-lmdb puts of the same encoded blobs, one transaction per batch (the same
            transaction pattern), same sync flags, same periodic fsync thread
  read      reading everything back by offset through the log (1 MiB per read), and the raw
            cursor scan of the baseline
  encode / decode  the client-side cost per record of encoding a batch and decoding it into
            columns (keys, values, timestamps, headers)
Cases are interleaved and repeated (--runs); every figure is the median. The last line is one
JSON object for 100 B records in batches of 1000 with the default policy.

Run: python scripts/bench_storage.py [--runs 5] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import lmdb

from kraftlite.protocol import batch as fmt
from kraftlite.storage.log import LogStorage, StorageConfig

POLICIES = {"fsync-every-append": 0, "fsync-every-1000ms": 1000}
DEFAULT_POLICY = "fsync-every-1000ms"
RECORD_SIZES = (100, 1000)
BATCH_SIZES = (1, 100, 1000)
DISTINCT_BATCHES = 16


@dataclass(frozen=True)
class Case:
    policy: str
    record_size: int
    batch_size: int

    @property
    def flush_interval_ms(self) -> int:
        return POLICIES[self.policy]


def make_batches(record_size: int, batch_size: int) -> list[bytes]:
    now = int(time.time() * 1000)
    return [
        fmt.encode_batch(
            [os.urandom(record_size) for _ in range(batch_size)],
            keys=[b"user-%06d" % (n * batch_size + i) for i in range(batch_size)],
            timestamps=[now + i for i in range(batch_size)],
        )
        for n in range(DISTINCT_BATCHES)
    ]


def timed(seconds: float, step: Callable[[int], int]) -> float:
    """Call step(i) until `seconds` passed; returns records per second (step returns records)."""
    records = 0
    i = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        records += step(i)
        i += 1
        if i % 8 == 0 and time.perf_counter() >= deadline:
            break
    return records / (time.perf_counter() - started)


def bench_log(case: Case, batches: list[bytes], seconds: float) -> tuple[float, float]:
    root = Path(tempfile.mkdtemp(prefix="kl-bench-"))
    storage = LogStorage(
        StorageConfig(path=root, flush_interval_ms=case.flush_interval_ms, map_size_bytes=1 << 34)
    )
    storage.start_flusher()
    try:
        log = storage.open_partition("bench-0")
        append_rate = timed(
            seconds, lambda i: log.append(batches[i % DISTINCT_BATCHES], 0).record_count
        )
        position = {"offset": 0}

        def read_step(_: int) -> int:
            if position["offset"] >= log.log_end_offset:
                position["offset"] = 0
            stream = log.read(position["offset"], 1 << 20)
            headers = [fmt.read_header(view) for view in fmt.split_batches(stream)]
            position["offset"] = headers[-1].next_offset
            return headers[-1].next_offset - headers[0].base_offset

        read_rate = timed(seconds, read_step)
        return append_rate, read_rate
    finally:
        storage.close()
        shutil.rmtree(root)


def bench_baseline(case: Case, batches: list[bytes], seconds: float) -> tuple[float, float]:
    root = Path(tempfile.mkdtemp(prefix="kl-base-"))
    sync = case.flush_interval_ms == 0
    env = lmdb.open(str(root), map_size=1 << 34, sync=sync, metasync=sync, max_dbs=8)
    db = env.open_db(b"batches")
    stop = threading.Event()

    def flusher() -> None:
        while not stop.wait(case.flush_interval_ms / 1000):
            env.sync(True)

    thread = threading.Thread(target=flusher, daemon=True)
    if not sync:
        thread.start()
    prefix = b"\x00\x00\x00\x01"
    try:

        def put(i: int) -> int:
            with env.begin(write=True) as txn:
                txn.put(
                    prefix + (i * case.batch_size).to_bytes(8, "big"),
                    batches[i % DISTINCT_BATCHES],
                    db=db,
                )
            return case.batch_size

        append_rate = timed(seconds, put)

        position = {"key": prefix}

        def scan(_: int) -> int:
            # The log's read pattern: walk forward ~1 MiB at a time, copying the values out of
            # the map into one buffer; wrap around at the end.
            views = []
            total = 0
            with env.begin(buffers=True) as txn:
                cursor = txn.cursor(db=db)
                if not cursor.set_range(position["key"]):
                    cursor.first()
                for key, value in cursor:
                    if views and total + len(value) > 1 << 20:
                        position["key"] = bytes(key)
                        break
                    views.append(value)
                    total += len(value)
                else:
                    position["key"] = prefix
                b"".join(views)
            return len(views) * case.batch_size

        read_rate = timed(seconds, scan)
        return append_rate, read_rate
    finally:
        stop.set()
        if not sync:
            thread.join()
        env.close()
        shutil.rmtree(root)


def bench_codec(record_size: int, batch_size: int, seconds: float) -> tuple[float, float]:
    values = [os.urandom(record_size) for _ in range(batch_size)]
    keys = [b"user-%06d" % i for i in range(batch_size)]
    stamps = [1_700_000_000_000 + i for i in range(batch_size)]
    encoded = fmt.encode_batch(values, keys=keys, timestamps=stamps)

    def encode(_: int) -> int:
        fmt.encode_batch(values, keys=keys, timestamps=stamps)
        return batch_size

    def decode(_: int) -> int:
        fmt.decode(encoded)
        return batch_size

    return 1e9 / timed(seconds, encode), 1e9 / timed(seconds, decode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="per measurement")
    args = parser.parse_args()
    cases = [Case(p, r, b) for p in POLICIES for r in RECORD_SIZES for b in BATCH_SIZES]
    inputs = {(r, b): make_batches(r, b) for r in RECORD_SIZES for b in BATCH_SIZES}
    samples: dict[Case, list[tuple[float, float, float, float]]] = {c: [] for c in cases}
    codec: dict[tuple[int, int], list[tuple[float, float]]] = {k: [] for k in inputs}
    for run in range(args.runs):
        for case in cases:  # log and baseline alternate, so load drifts hit both alike
            batches = inputs[case.record_size, case.batch_size]
            log_append, log_read = bench_log(case, batches, args.seconds)
            raw_append, raw_read = bench_baseline(case, batches, args.seconds)
            samples[case].append((log_append, raw_append, log_read, raw_read))
        for key, measured in codec.items():
            measured.append(bench_codec(*key, args.seconds / 2))
        print(f"# run {run + 1}/{args.runs} done", flush=True)

    print(
        f"{'policy':<20}{'record':>7}{'batch':>7}{'append rec/s':>14}{'raw LMDB rec/s':>16}"
        f"{'ratio':>7}{'read rec/s':>13}{'raw scan rec/s':>16}"
    )
    medians: dict[Case, tuple[float, ...]] = {}
    for case in cases:
        columns = list(zip(*samples[case], strict=True))
        ratios = [a / b for a, b, _, _ in samples[case]]
        med = (*(statistics.median(c) for c in columns), statistics.median(ratios))
        medians[case] = med
        print(
            f"{case.policy:<20}{case.record_size:>7}{case.batch_size:>7}{med[0]:>14,.0f}"
            f"{med[1]:>16,.0f}{med[4]:>7.2f}{med[2]:>13,.0f}{med[3]:>16,.0f}"
        )
    print(f"{'record':>7}{'batch':>7}{'encode ns/rec':>15}{'decode ns/rec':>15}")
    for (record_size, batch_size), values in codec.items():
        enc = statistics.median(v[0] for v in values)
        dec = statistics.median(v[1] for v in values)
        print(f"{record_size:>7}{batch_size:>7}{enc:>15,.0f}{dec:>15,.0f}")
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak_rss_mb:.0f} MB")

    headline = medians[Case(DEFAULT_POLICY, 100, 1000)]
    encode_ns = statistics.median(v[0] for v in codec[100, 1000])
    decode_ns = statistics.median(v[1] for v in codec[100, 1000])
    print(
        json.dumps(
            {
                "bench": "storage",
                "policy": DEFAULT_POLICY,
                "record_bytes": 100,
                "batch_records": 1000,
                "runs": args.runs,
                "records_per_s": round(headline[0]),
                "baseline_records_per_s": round(headline[1]),
                "ratio": round(headline[4], 3),
                "read_records_per_s": round(headline[2]),
                "baseline_read_records_per_s": round(headline[3]),
                "encode_ns_per_record": round(encode_ns),
                "decode_ns_per_record": round(decode_ns),
                "peak_rss_mb": round(peak_rss_mb),
            }
        )
    )


if __name__ == "__main__":
    main()
