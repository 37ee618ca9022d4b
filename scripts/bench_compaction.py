"""Log compaction and the key index on one partition log (LMDB), with baselines measured in
the same run (issue 26).

It writes a compacted partition's log (`--records` records of 100 B values over `--keys`
keys, in batches of 100, all below the high watermark) and measures, each `--runs` times
on a fresh copy (medians printed):
  read       baseline: the log read back in 8 MiB pages and decoded into columns, MB/s
  clean      one forced pass of the cleaner (broker/cleaner.py), MB/s of log cleaned
  index      building the key index from the log start (storage/log.py rule 8), MB/s
  lookup     a random key's latest record: the index lookup and the read of its record,
             p50/p99 in microseconds, against the baseline of one raw LMDB get of a key in
             the same environment
The HTTP round trip of `GET /v1/topics/{t}/keys/{key}` and the Redis GET comparison are not
part of this script yet. The last line is one JSON object of the medians.

Run: python scripts/bench_compaction.py [--runs 3] [--records 200000] [--keys 10000]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from kraftlite.broker import cleaner
from kraftlite.protocol import batch as fmt
from kraftlite.storage.compaction import CleanPolicy
from kraftlite.storage.log import LogStorage, PartitionLog, StorageConfig

BATCH = 100
POLICY = CleanPolicy(delete_retention_ms=0)
NOW_MS = 10**13


def build(path: Path, records: int, keys: int, rng: random.Random) -> int:
    """The log; its size in bytes."""
    storage = LogStorage(StorageConfig(path=path))
    log = storage.open_partition("t-0")
    for start in range(0, records, BATCH):
        count = min(BATCH, records - start)
        chosen = [b"key-%d" % rng.randrange(keys) for _ in range(count)]
        values = [rng.randbytes(100) for _ in range(count)]
        log.append(fmt.encode_batch(values, keys=chosen, timestamps=[start] * count), 0)
    log.set_high_watermark(log.log_end_offset)
    size = log.size_bytes
    storage.close()
    return size


def timed_read(log: PartitionLog) -> float:
    started = time.perf_counter()
    offset = log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 8 << 20, max_offset=log.high_watermark)
        decoded = list(fmt.decode_stream(data))
        offset = decoded[-1].header.next_offset
    return time.perf_counter() - started


def lookups(log: PartitionLog, keys: int, rng: random.Random, count: int = 2000) -> list[float]:
    """Microseconds per lookup of a random key: index, then the record's batch read."""
    took = []
    for _ in range(count):
        key = b"key-%d" % rng.randrange(keys)
        started = time.perf_counter()
        offset = log.key_offset(key)
        if offset is not None:
            data = log.read(offset, 1, max_offset=log.high_watermark)
            batch = next(fmt.decode_stream(data))
            next(r for r in batch.records() if r.offset == offset)
        took.append((time.perf_counter() - started) * 1e6)
    return took


def raw_gets(log: PartitionLog, count: int = 2000) -> list[float]:
    """Baseline: microseconds per raw LMDB get of a stored batch key (one read txn each)."""
    storage = log.storage
    keys = [log._key(h.base_offset) for h in log.batch_headers()][:count]
    took = []
    for key in keys:
        started = time.perf_counter()
        with storage.reading() as txn:
            bytes(txn.get(key, db=storage._batches))
        took.append((time.perf_counter() - started) * 1e6)
    return took


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    args = parser.parse_args()
    rng = random.Random(26)
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    try:
        size = build(root / "template", args.records, args.keys, rng)
        results: dict[str, list[float]] = {
            k: [] for k in ("read", "clean", "index", "lookup_p50", "lookup_p99", "raw_p50")
        }
        results["raw_p99"] = []
        for run in range(args.runs):
            path = root / f"run-{run}"
            shutil.copytree(root / "template", path)
            storage = LogStorage(StorageConfig(path=path))
            log = storage.open_partition("t-0")
            results["read"].append(size / timed_read(log) / 1e6)
            started = time.perf_counter()
            cleaner.clean(log, NOW_MS, POLICY, force=True)
            results["clean"].append(size / (time.perf_counter() - started) / 1e6)
            started = time.perf_counter()
            while log.indexed_offset < log.high_watermark:
                log.index_keys(128 << 10)
            results["index"].append(log.size_bytes / (time.perf_counter() - started) / 1e6)
            took = lookups(log, args.keys, rng)
            results["lookup_p50"].append(percentile(took, 0.5))
            results["lookup_p99"].append(percentile(took, 0.99))
            raw = raw_gets(log)
            results["raw_p50"].append(percentile(raw, 0.5))
            results["raw_p99"].append(percentile(raw, 0.99))
            storage.close()
            shutil.rmtree(path)
        medians = {name: round(statistics.median(v), 1) for name, v in results.items()}
        print(f"log: {args.records} records of 100 B over {args.keys} keys, {size / 1e6:.1f} MB")
        print(f"baseline read+decode  {medians['read']:8.1f} MB/s")
        print(f"cleaner pass          {medians['clean']:8.1f} MB/s of log cleaned")
        print(f"key index build       {medians['index']:8.1f} MB/s of (cleaned) log indexed")
        print(
            f"key lookup            p50 {medians['lookup_p50']:.1f} us, p99 "
            f"{medians['lookup_p99']:.1f} us (baseline raw LMDB get: p50 "
            f"{medians['raw_p50']:.1f} us, p99 {medians['raw_p99']:.1f} us)"
        )
        print(json.dumps({"bench": "compaction", "runs": args.runs, **medians}))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
