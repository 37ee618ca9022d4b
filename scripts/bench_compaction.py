"""Log compaction and the key index on one partition log (LMDB), with baselines measured in
the same run (issue 26).

It writes a compacted partition's log (`--records` records of 100 B values over `--keys`
keys, in batches of 100, all below the high watermark) and measures, each `--runs` times
on a fresh copy (medians printed):
  read       baseline: the log read back in 8 MiB pages and decoded into columns, MB/s
  clean      one forced pass of the cleaner (broker/cleaner.py), deciding in the cleaner's
             process as a broker's does (broker/cleaner_process.py), MB/s of log cleaned
  index      building the key index from the log start (storage/log.py rule 8), MB/s
  lookup     a random key's latest record: the index lookup and the read of its record,
             p50/p99 in microseconds, against the baseline of one raw LMDB get of a key in
             the same environment
  append     a producer's cost while the cleaner works: appends of 100-record batches (one
             every 2 ms) with cleaner passes back to back on another thread, p50/p99 in
             microseconds, against the same appends with no cleaner, and with the passes
             deciding on the cleaner's thread instead of its process; this process's
             threads switch as a broker's do (eventloop.SWITCH_INTERVAL_S)
  offsets    a group coordinator's load (groups/coordinator.py `replay`) of an offsets
             partition holding `--commits` commit records (commits of 10 partitions each, by
             1,000 groups): before, the whole history, as an offsets topic without compaction
             kept it; after, what one pass of the cleaner leaves (live offsets only)
With `--http` (needs the bench extra, `pip install -e '.[bench]'`, and Debian's
redis-server) it also starts a local cluster (`kraftlite dev`, 3 controllers and 3 brokers),
writes `--keys` keys of 100 B values to a compacted topic (RF 3) and, on one keep-alive
connection each, times:
  http get   `GET /v1/topics/{t}/keys/{key}` of random keys from the partition's leader,
             p50/p99 in microseconds, with `GET /readyz` on the same connection as the HTTP
             stack's floor
  redis get  GET of the same keys and values from a local non-persistent redis-server
  produce    the goal's other side: what producers write to that one partition, MB/s of
             log (8 concurrent binary batches of 1,000 keyed 100 B records, acks=all, to
             its leader), against which the cleaner's MB/s above is held
The last line is one JSON object of the medians.

Run: python scripts/bench_compaction.py [--runs 3] [--records 200000] [--keys 10000]
     [--commits 1000000] [--http]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from kraftlite import eventloop
from kraftlite.broker import cleaner
from kraftlite.broker.cleaner_process import CleanerProcess
from kraftlite.groups.coordinator import offset_key, replay
from kraftlite.protocol import batch as fmt
from kraftlite.protocol.headers import BATCH_TYPE
from kraftlite.storage.compaction import CleanPolicy, PassPlan
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


def build_offsets(path: Path, commits: int) -> tuple[int, int]:
    """An offsets partition of `commits` commit records: 1,000 groups each committing 10
    partitions at a time, round after round. (its bytes, its live keys)."""
    storage = LogStorage(StorageConfig(path=path))
    log = storage.open_partition("__consumer_offsets-0")
    groups, partitions = 1000, 10
    for n in range(commits // partitions):
        group = f"group-{n % groups}"
        keys = [offset_key(group, "orders", p) for p in range(partitions)]
        values = [
            orjson.dumps({"offset": n, "metadata": "", "ts": NOW_MS}) for _ in range(partitions)
        ]
        log.append(fmt.encode_batch(values, keys=keys, timestamps=[n] * partitions), 0)
    log.set_high_watermark(log.log_end_offset)
    size = log.size_bytes
    storage.close()
    return size, min(groups, commits // partitions) * partitions


def timed_replay(log: PartitionLog) -> tuple[float, int]:
    """(seconds, records read) of one coordinator load."""
    started = time.perf_counter()
    _, records = replay(log)
    return time.perf_counter() - started, records


def http_and_redis_gets(root: Path, keys: int, count: int, rng: random.Random) -> dict[str, float]:
    """The `--http` figures: key reads from a local cluster and GETs from redis-server."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench  # noqa: PLC0415 - scripts/bench.py: its cluster start
    import peers  # noqa: PLC0415 - scripts/peers.py: its redis-server
    import redis  # noqa: PLC0415 - the bench extra

    values = {b"key-%d" % k: rng.randbytes(50).hex().encode() for k in range(keys)}
    process, url = bench.start_cluster(root / "cluster")
    try:
        status, answer = bench.call(
            "POST",
            url + "/v1/topics",
            {"name": "table", "partitions": 1, "replication_factor": 3,
             "configs": {"cleanup.policy": "compact"}},
        )  # fmt: skip
        assert status == 201, answer
        items = list(values.items())
        for start in range(0, len(items), 500):
            records = [
                {"key": k.decode(), "value": v.decode()} for k, v in items[start : start + 500]
            ]
            for _ in range(50):
                status, answer = bench.call(
                    "POST", url + "/v1/topics/table/records", {"records": records}
                )
                if status == 200:
                    break
                time.sleep(0.2)
            assert status == 200, answer
        _, described = bench.call("GET", url + "/v1/topics/table")
        _, brokers = bench.call("GET", url + "/v1/brokers")
        leader = described["partitions"][0]["leader"]
        leader_url = next(b["url"] for b in brokers["brokers"] if b["id"] == leader)
        host, port = leader_url.removeprefix("http://").split(":")  # no relay hop
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        names = [rng.choice(items)[0].decode() for _ in range(count)]

        def get(path: str) -> Any:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            return response.status, body

        produce_mb_s = asyncio.run(produce_rate(leader_url, keys, rng))
        for _ in range(300):  # until the leader's index has caught up
            if get(f"/v1/topics/table/keys/{names[0]}")[0] == 200:
                break
            time.sleep(0.1)
        took, floor = [], []
        for name in names:
            started = time.perf_counter()
            status, body = get(f"/v1/topics/table/keys/{name}")
            took.append((time.perf_counter() - started) * 1e6)
            assert status == 200, body
            started = time.perf_counter()
            get("/readyz")  # the HTTP stack's own cost, on the same connection
            floor.append((time.perf_counter() - started) * 1e6)
    finally:
        process.terminate()
        process.wait(60)
    with peers.RedisServer(root / "redis") as server, redis.Redis(port=server.port) as client:
        client.mset(values)
        redis_took = []
        for name in names:
            started = time.perf_counter()
            assert client.get(name) is not None
            redis_took.append((time.perf_counter() - started) * 1e6)
    return {
        "produce_mb_s": produce_mb_s,
        "http_p50": percentile(took, 0.5),
        "http_p99": percentile(took, 0.99),
        "readyz_p50": percentile(floor, 0.5),
        "redis_p50": percentile(redis_took, 0.5),
        "redis_p99": percentile(redis_took, 0.99),
    }


async def produce_rate(
    leader_url: str, keys: int, rng: random.Random, seconds: float = 5.0, producers: int = 8
) -> float:
    """MB/s of log written to partition 0 of the "table" topic by `producers` concurrent
    binary batches of 1,000 keyed 100 B records, acks=all, straight to its leader."""
    import aiohttp  # noqa: PLC0415 - the cluster's own client library

    chosen = [b"key-%d" % rng.randrange(keys) for _ in range(1000)]
    batch = fmt.encode_batch(
        [rng.randbytes(100) for _ in chosen],
        keys=chosen,
        timestamps=[int(time.time() * 1000)] * 1000,
    )
    url = f"{leader_url}/v1/topics/table/partitions/0/records?acks=all"
    headers = {"Content-Type": BATCH_TYPE, "X-Kraftlite-No-Forward": "1"}
    written = 0
    deadline = time.monotonic() + seconds

    async def produce(session: aiohttp.ClientSession) -> None:
        nonlocal written
        while time.monotonic() < deadline:
            async with session.post(url, data=batch, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise SystemExit(f"produce failed: {response.status}")
            written += len(batch)

    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(produce(session) for _ in range(producers)))
    return written / (time.monotonic() - started) / 1e6


def timed_read(log: PartitionLog) -> float:
    started = time.perf_counter()
    offset = log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 8 << 20, max_offset=log.high_watermark)
        decoded = list(fmt.decode_stream(data))
        offset = decoded[-1].header.next_offset
    return time.perf_counter() - started


def appends_while(
    log: PartitionLog,
    keys: int,
    rng: random.Random,
    planner: cleaner.Planner | None,
    count: int = 1000,
) -> list[float]:
    """Microseconds per append of a 100-record batch (and its high watermark), paced at one
    every 2 ms, with or without (`planner` None) cleaner passes running back to back on
    another thread (they share the partition's lock and LMDB's one writer)."""
    stop = threading.Event()
    passes = 0

    def clean_again() -> None:
        nonlocal passes
        with contextlib.suppress(cleaner.Stopped):
            while not stop.is_set():
                cleaner.clean(
                    log, NOW_MS, POLICY, force=True, stopping=stop.is_set, planner=planner
                )
                passes += 1

    cleaning = planner is not None
    worker = threading.Thread(target=clean_again) if cleaning else None
    if worker is not None:
        worker.start()
    took = []
    try:
        for n in range(count):
            chosen = [b"key-%d" % rng.randrange(keys) for _ in range(BATCH)]
            batch = fmt.encode_batch(
                [rng.randbytes(100) for _ in range(BATCH)], keys=chosen, timestamps=[n] * BATCH
            )
            started = time.perf_counter()
            log.append(batch, 0)
            log.set_high_watermark(log.log_end_offset)
            took.append((time.perf_counter() - started) * 1e6)
            time.sleep(0.002)
    finally:
        stop.set()
        if worker is not None:
            worker.join()
    if cleaning and not passes:
        raise SystemExit("no cleaner pass ran while appending: make --records larger")
    return took


def lookups(log: PartitionLog, keys: int, rng: random.Random, count: int = 2000) -> list[float]:
    """Microseconds per lookup of a random key: index, then the record's batch read."""
    took = []
    for _ in range(count):
        key = b"key-%d" % rng.randrange(keys)
        started = time.perf_counter()
        offset = log.key_offset(key)
        if offset is not None:
            data = log.read(offset, 1, max_offset=log.high_watermark)
            fmt.record_in(next(fmt.split_batches(data)), offset)
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
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--http", action="store_true", help="HTTP key reads against Redis GET")
    args = parser.parse_args()
    rng = random.Random(26)
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    sys.setswitchinterval(eventloop.SWITCH_INTERVAL_S)  # as a broker's process
    process = CleanerProcess()
    process.start_pass(NOW_MS, POLICY, 0, ())  # started before anything is timed
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
            process.start_pass(NOW_MS, POLICY, 0, ())  # running (the last run's appends may
            # have ended it mid-pass): a broker's is started once, not per pass
            started = time.perf_counter()
            cleaner.clean(log, NOW_MS, POLICY, force=True, planner=process.start_pass)
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
            for name, planner in (
                ("append_alone", None),
                ("append_cleaning", process.start_pass),
                ("append_cleaning_thread", PassPlan),
            ):
                took = appends_while(log, args.keys, rng, planner)
                results.setdefault(f"{name}_p50", []).append(percentile(took, 0.5))
                results.setdefault(f"{name}_p99", []).append(percentile(took, 0.99))
            storage.close()
            shutil.rmtree(path)
        offsets_size, live = build_offsets(root / "offsets", args.commits)
        for name in ("load_before_s", "load_after_s", "records_before", "records_after"):
            results[name] = []
        for run in range(args.runs):
            path = root / f"offsets-{run}"
            shutil.copytree(root / "offsets", path)
            storage = LogStorage(StorageConfig(path=path))
            log = storage.open_partition("__consumer_offsets-0")
            took, records = timed_replay(log)
            results["load_before_s"].append(took)
            results["records_before"].append(records)
            cleaner.clean(log, NOW_MS, CleanPolicy(), force=True)
            took, records = timed_replay(log)
            results["load_after_s"].append(took)
            results["records_after"].append(records)
            storage.close()
            shutil.rmtree(path)
        if args.http:
            for run in range(args.runs):
                for name, value in http_and_redis_gets(
                    root / f"http-{run}", args.keys, 2000, rng
                ).items():
                    results.setdefault(name, []).append(value)
        medians = {name: round(statistics.median(v), 3) for name, v in results.items()}
        print(f"log: {args.records} records of 100 B over {args.keys} keys, {size / 1e6:.1f} MB")
        print(f"baseline read+decode  {medians['read']:8.1f} MB/s")
        print(f"cleaner pass          {medians['clean']:8.1f} MB/s of log cleaned")
        print(f"key index build       {medians['index']:8.1f} MB/s of (cleaned) log indexed")
        print(
            f"key lookup            p50 {medians['lookup_p50']:.1f} us, p99 "
            f"{medians['lookup_p99']:.1f} us (baseline raw LMDB get: p50 "
            f"{medians['raw_p50']:.1f} us, p99 {medians['raw_p99']:.1f} us)"
        )
        print(
            f"append under cleaning p50 {medians['append_cleaning_p50']:.0f} us, p99 "
            f"{medians['append_cleaning_p99']:.0f} us (baseline, no cleaner: p50 "
            f"{medians['append_alone_p50']:.0f} us, p99 {medians['append_alone_p99']:.0f} us; "
            f"deciding on the cleaner's thread: p50 {medians['append_cleaning_thread_p50']:.0f}"
            f" us, p99 {medians['append_cleaning_thread_p99']:.0f} us)"
        )
        print(
            f"offsets load          {args.commits} commits ({offsets_size / 1e6:.0f} MB, {live} "
            f"live offsets): before compaction {medians['load_before_s']:.2f} s "
            f"({medians['records_before']:.0f} records), after "
            f"{medians['load_after_s']:.3f} s ({medians['records_after']:.0f} records)"
        )
        if args.http:
            print(
                f"http key read         p50 {medians['http_p50']:.0f} us, p99 "
                f"{medians['http_p99']:.0f} us (baseline redis GET: p50 "
                f"{medians['redis_p50']:.0f} us, p99 {medians['redis_p99']:.0f} us; "
                f"p50 {medians['http_p50'] / medians['redis_p50']:.1f}x; the HTTP stack alone, "
                f"GET /readyz: p50 {medians['readyz_p50']:.0f} us)"
            )
            print(
                f"produce one partition {medians['produce_mb_s']:8.1f} MB/s of log (RF 3, "
                f"acks=all): the cleaner's {medians['clean']:.1f} MB/s is "
                f"{medians['clean'] / medians['produce_mb_s']:.2f}x it (goal: at least 1x)"
            )
            print(
                f"lookup vs redis       p50 {medians['lookup_p50'] / medians['redis_p50']:.2f}x "
                "(the key index lookup and record read, without HTTP)"
            )
        print(json.dumps({"bench": "compaction", "runs": args.runs, **medians}))
    finally:
        process.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
