"""Which LMDB layout for thousands of partitions per broker? (the numbers behind docs/adr/0001)

Layouts compared, each with sync=False (the default durability policy) and 10 KB batch values:
  env-per-partition   one LMDB environment per partition, keys = 8-byte big-endian offsets
  named-db            one environment per broker, one named database per partition
  prefixed-keys       one environment, one database, keys = 4-byte partition id + offset
                      (append=True impossible: keys of many partitions interleave)

For each partition count it reports: time to open/create all partitions, appends/s when one
transaction appends one batch to one partition (round robin), appends/s when one transaction
appends to 16 partitions at once (group commit; impossible across environments), random
reads/s, and open file descriptors. Run: python scripts/bench_layout.py [--partitions 10 1000 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import lmdb

VALUE = os.urandom(10_000)
MAP = 1 << 34


def key(offset: int) -> bytes:
    return offset.to_bytes(8, "big")


class EnvPerPartition:
    def __init__(self, root: Path, partitions: int) -> None:
        self.envs = [
            lmdb.open(str(root / f"p{i}"), map_size=MAP, sync=False, max_dbs=2)
            for i in range(partitions)
        ]
        self.next = [0] * partitions

    def append(self, parts: list[int]) -> None:
        for p in parts:  # separate environments cannot share a transaction
            with self.envs[p].begin(write=True) as txn:
                assert txn.put(key(self.next[p]), VALUE, append=True)
            self.next[p] += 100

    def read(self, p: int, offset: int) -> bytes | None:
        with self.envs[p].begin() as txn:
            return txn.get(key(offset))

    def close(self) -> None:
        for env in self.envs:
            env.close()


class NamedDb:
    def __init__(self, root: Path, partitions: int) -> None:
        self.env = lmdb.open(str(root / "env"), map_size=MAP, sync=False, max_dbs=partitions + 8)
        self.dbs = [self.env.open_db(f"p{i}".encode()) for i in range(partitions)]
        self.next = [0] * partitions

    def append(self, parts: list[int]) -> None:
        with self.env.begin(write=True) as txn:
            for p in parts:
                assert txn.put(key(self.next[p]), VALUE, append=True, db=self.dbs[p])
                self.next[p] += 100

    def read(self, p: int, offset: int) -> bytes | None:
        with self.env.begin() as txn:
            return txn.get(key(offset), db=self.dbs[p])

    def close(self) -> None:
        self.env.close()


class PrefixedKeys:
    def __init__(self, root: Path, partitions: int) -> None:
        self.env = lmdb.open(str(root / "env"), map_size=MAP, sync=False)
        self.next = [0] * partitions

    def append(self, parts: list[int]) -> None:
        with self.env.begin(write=True) as txn:
            for p in parts:
                assert txn.put(p.to_bytes(4, "big") + key(self.next[p]), VALUE)
                self.next[p] += 100

    def read(self, p: int, offset: int) -> bytes | None:
        with self.env.begin() as txn:
            return txn.get(p.to_bytes(4, "big") + key(offset))

    def close(self) -> None:
        self.env.close()


LAYOUTS = {"env-per-partition": EnvPerPartition, "named-db": NamedDb, "prefixed-keys": PrefixedKeys}


def run(layout: str, partitions: int, appends: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="kl-layout-"))
    try:
        rng = random.Random(1)
        started = time.perf_counter()
        store = LAYOUTS[layout](root, partitions)
        open_s = time.perf_counter() - started
        fds = len(os.listdir("/proc/self/fd"))
        started = time.perf_counter()
        for i in range(appends):
            store.append([i % partitions])
        single = appends / (time.perf_counter() - started)
        rounds = appends // 16
        started = time.perf_counter()
        for _ in range(rounds):
            store.append(rng.sample(range(partitions), min(16, partitions)))
        grouped = rounds * min(16, partitions) / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(appends):
            p = rng.randrange(partitions)
            store.read(p, 0)
        reads = appends / (time.perf_counter() - started)
        store.close()
        return {
            "open_s": round(open_s, 3),
            "appends_per_s": round(single),
            "group_appends_per_s": round(grouped),
            "reads_per_s": round(reads),
            "fds": fds,
        }
    finally:
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[10, 1000, 4000])
    parser.add_argument("--appends", type=int, default=8000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = []
    for partitions in args.partitions:
        for layout in LAYOUTS:
            runs = [run(layout, partitions, args.appends) for _ in range(args.runs)]
            median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            row = {"layout": layout, "partitions": partitions, **median}
            results.append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps({"bench": "layout", "runs": args.runs, "results": results}))


if __name__ == "__main__":
    main()
