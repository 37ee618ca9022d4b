"""Rebalance benchmark: the elastic cluster grown from 3 to 5 brokers while producers run,
without and with the replication throttle.

Each phase runs --runs times, each run on a fresh cluster (tests/harness, every node its
own process, in a temp dir): 3 controllers, 5 brokers defined and 3 started. One topic of
--partitions partitions, replication factor 3, is preloaded with --megabytes MB (10^6
bytes; --gigabytes for larger runs) of binary batches (--preload-batch-kib, acks=all,
straight to each partition's leader). Then:

  load          a background producer thread runs from here to the end of the run:
                --producers concurrent requests in flight, each an acks=all binary batch
                of --batch-records records of --record-bytes bytes to the next partition,
                sent to its leader (X-Kraftlite-No-Forward; a 421 names the new leader,
                any other failure re-reads the leaders and retries the same batch).
                A batch's latency is from its first send to its acknowledgement, retries
                included (a stall shows up in p99); `errors` counts failed attempts.
  baseline      --window-s seconds of that load (after --warmup-s) on 3 brokers: records/s
                acknowledged and p50/p99 batch latency. It is the baseline for `during`.
  move          brokers 4 and 5 start; in the throttled phase every broker's
                replication.throttled.rate is set (PUT /v1/brokers/{id}/configs); then
                POST /v1/cluster/rebalance, and GET /v1/reassignments and GET /v1/brokers
                polled every --poll-s until no reassignment is left and replicas per
                broker are within one:
                  balance_s        from the POST to that point
                  moves            partitions moved; replica_moves: replicas added
                  planned_mb       sum over moves of the partition's bytes (what the bench
                                   produced to it) times the replicas the move adds
                  moved_disk_mb    growth of brokers 4 and 5's data dirs (allocated blocks,
                                   st_blocks * 512: LMDB files are sparse) from just after
                                   they started to the balance point; it includes what the
                                   producer wrote to their replicas during the move
                  min_mb           the least any plan could copy: every replica's bytes
                                   (partition bytes x 3) x 2/5, the share of 2 new brokers
                                   out of 5; planned/min and moved_disk/min compare with it
                                   (disk_per_logical, the same ratio on brokers 1-3 before
                                   the move, says how much LMDB adds to a logical byte)
                  old_disk_mb      brokers 1-3's data dirs before the move and at the
                                   balance point (the replicas they gave up are deleted)
                  copy_mb_per_s    planned_mb / balance_s
                  copy_mb_by_leader  planned_mb by the broker leading each moving
                                   partition at the POST: the one that sends its copies
                  throttle_floor_s the least time the throttle allows: the busiest
                                   leader's copy_mb over the rate (each leader has its
                                   own bucket), less the second of burst a bucket starts
                                   with (kraftlite/security/quotas.py WINDOW_S);
                                   throttle_floor_even_s: the same were the copies spread
                                   evenly over the 3 leaders (planned_mb / 3 / rate - 1)
                during: records/s and p50/p99 latency of the batches acknowledged between
                the POST and the balance point, against the baseline.
  after         --after-s more seconds of load on 5 brokers: records/s, p50/p99, and when
                leaders (elected to the preferred replicas once the moves are done) were
                first within one per broker (leaders_balanced_s, from the POST).
  final         replicas and leaders per broker, partitions whose ISR is not all 3
                replicas, and the records the logs hold (high watermark - log start)
                against the records acknowledged (never fewer; more when a batch failed
                after its append, e.g. NOT_LEADER_OR_FOLLOWER as leadership moved while it
                waited for acks=all, and its retry appended it again: at least once).
The median of each figure is taken on its own; layouts, error kinds and record counts are
the last run's.

The throttled phase's rate per broker is --throttle-bytes-per-s, or by default a quarter
of the unthrottled phase's median copy rate split over the 3 brokers that lead the moving
partitions (the throttle is a leader's: one token bucket per broker). The unthrottled
phase is the baseline for the throttled one; the baseline window, for the move. Figures
are medians over --runs. Progress lines as it goes; a table, then one JSON line:
{"bench": "rebalance", ..., "unthrottled": {...}, "throttled": {...}}.

Run: python scripts/bench_rebalance.py [--partitions 30] [--megabytes 300 | --gigabytes 2]
     [--window-s 10] [--runs 3] [--throttle-bytes-per-s N] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests.harness package

from kraftlite.protocol import batch as fmt
from kraftlite.protocol.headers import BATCH_TYPE, NO_FORWARD
from kraftlite.security.quotas import WINDOW_S
from tests.harness.processes import Cluster, http

TOPIC = "rebalance"
OLD_BROKERS = [1, 2, 3]
NEW_BROKERS = [4, 5]
RF = 3
MB = 1_000_000
STARTED = time.monotonic()


class StepFailed(Exception):
    """A step of the benchmark could not be done."""

    def __init__(self, step: str, reason: str) -> None:
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:7.1f}s] {message}", flush=True)


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (st_blocks, so sparse files count what they use)."""
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(Path(directory) / name).st_blocks * 512
            except FileNotFoundError:
                continue
    return total


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n    ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def call(method: str, url: str, body: Any = None, timeout: float = 15) -> tuple[int, Any]:
    """(status, parsed body); status 0 when the node could not be reached."""
    try:
        return http(method, url, body, timeout=timeout)
    except (OSError, ValueError) as exc:
        return 0, repr(exc)


# ------------------------------------------------------------------------------ the load


@dataclass
class Sample:
    acked_at: float  # monotonic
    latency_s: float  # first send to acknowledgement
    records: int
    partition: int
    nbytes: int


@dataclass
class Failure:
    at: float
    what: str  # HTTP status and error code, or the exception


@dataclass(eq=False)
class LoadProducer(threading.Thread):
    """acks=all binary batches to partition leaders from `concurrency` loops (module doc)."""

    urls: dict[int, str]  # every broker's URL, by id
    metadata_urls: list[str]  # brokers to read leaders from (ones that stay up)
    partitions: int
    concurrency: int
    batch_records: int
    record_bytes: int
    timeout_ms: int = 10_000
    samples: list[Sample] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    stop_flag: threading.Event = field(default_factory=threading.Event)
    crashed: BaseException | None = None

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True, name="load-producer")
        self.leaders: dict[int, str] = {}

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by the main thread
            self.crashed = exc

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=self.timeout_ms / 1000 + 10)

    async def _refresh_leaders(self, session: aiohttp.ClientSession) -> None:
        for url in self.metadata_urls:
            try:
                async with session.get(
                    f"{url}/v1/topics/{TOPIC}", timeout=aiohttp.ClientTimeout(total=5)
                ) as response:
                    if response.status != 200:
                        continue
                    view = await response.json()
            except (aiohttp.ClientError, TimeoutError, ValueError):
                continue
            for p in view["partitions"]:
                if p["leader"] in self.urls:
                    self.leaders[p["partition"]] = self.urls[p["leader"]]
            return

    async def _main(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.concurrency * 4)
        async with aiohttp.ClientSession(connector=connector) as session:
            await self._refresh_leaders(session)
            counter = itertools.count()
            await asyncio.gather(*(self._loop(session, counter) for _ in range(self.concurrency)))

    async def _loop(self, session: aiohttp.ClientSession, counter: itertools.count[int]) -> None:
        value = b"v" * self.record_bytes
        headers = {"Content-Type": BATCH_TYPE, NO_FORWARD: "1"}
        timeout = aiohttp.ClientTimeout(total=self.timeout_ms / 1000 + 5)
        while not self.stop_flag.is_set():
            partition = next(counter) % self.partitions
            batch = fmt.encode_records(
                [fmt.Record(value=value)] * self.batch_records, now_ms=int(time.time() * 1000)
            )
            first_sent = time.monotonic()
            while not self.stop_flag.is_set():
                url = self.leaders.get(partition) or self.metadata_urls[0]
                target = (
                    f"{url}/v1/topics/{TOPIC}/partitions/{partition}/records"
                    f"?acks=all&timeout_ms={self.timeout_ms}"
                )
                try:
                    async with session.post(
                        target, data=batch, headers=headers, timeout=timeout
                    ) as response:
                        raw = await response.read()
                        status = response.status
                except (aiohttp.ClientError, TimeoutError) as exc:
                    self.failures.append(Failure(time.monotonic(), type(exc).__name__))
                    await asyncio.sleep(0.05)
                    await self._refresh_leaders(session)
                    continue
                if status == 200:
                    now = time.monotonic()
                    self.samples.append(
                        Sample(now, now - first_sent, self.batch_records, partition, len(batch))
                    )
                    break
                try:
                    answer = json.loads(raw)
                except ValueError:
                    answer = {}
                code = answer.get("error_code") if isinstance(answer, dict) else None
                self.failures.append(Failure(time.monotonic(), f"{status} {code}"))
                leader_url = answer.get("leader_url") if isinstance(answer, dict) else None
                if status == 421 and isinstance(leader_url, str) and leader_url:
                    self.leaders[partition] = leader_url
                else:
                    await asyncio.sleep(0.05)
                    await self._refresh_leaders(session)

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Records/s, p50/p99/max latency (ms) of batches acknowledged in [start, end),
        and failed attempts in it."""
        chosen = [s for s in list(self.samples) if start <= s.acked_at < end]
        failed = [f for f in list(self.failures) if start <= f.at < end]
        latencies = [s.latency_s * 1000 for s in chosen]
        span = max(end - start, 1e-9)
        return {
            "seconds": round(span, 1),
            "records_per_s": round(sum(s.records for s in chosen) / span, 1),
            "p50_ms": _round(percentile(latencies, 0.5)),
            "p99_ms": _round(percentile(latencies, 0.99)),
            "max_ms": _round(max(latencies) if latencies else None),
            "batches": len(chosen),
            "errors": len(failed),
            "error_kinds": _kinds(failed),
            "longest_gap_s": round(_longest_gap(chosen, start, end), 2),
        }


def _kinds(failures: list[Failure]) -> dict[str, int]:
    """Failed attempts by kind, the most frequent first."""
    kinds: dict[str, int] = {}
    for f in failures:
        kinds[f.what] = kinds.get(f.what, 0) + 1
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


def _longest_gap(samples: list[Sample], start: float, end: float) -> float:
    """The longest time in [start, end) without any acknowledgement (a producer stall)."""
    times = [start, *sorted(s.acked_at for s in samples), end]
    return max(b - a for a, b in itertools.pairwise(times))


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


# ------------------------------------------------------------------------------ a run


async def preload(
    urls: dict[int, str], leaders: dict[int, int], args: argparse.Namespace
) -> dict[int, tuple[int, int]]:
    """--megabytes of binary batches spread evenly over the partitions, acks=all, straight
    to the leaders; (records, bytes) per partition."""
    record_bytes = 1000
    per_batch = max(1, args.preload_batch_kib * 1024 // record_bytes)
    value = b"p" * record_bytes
    target_per_partition = args.total_bytes / args.partitions
    written: dict[int, tuple[int, int]] = dict.fromkeys(range(args.partitions), (0, 0))
    queue = [p for p in range(args.partitions)]
    done_bytes = 0
    last_report = time.monotonic()
    began = last_report

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done_bytes, last_report
        while queue:
            partition = queue.pop(0)
            records, nbytes = written[partition]
            if nbytes >= target_per_partition:
                continue
            batch = fmt.encode_records(
                [fmt.Record(value=value)] * per_batch, int(time.time() * 1e3)
            )
            url = (
                f"{urls[leaders[partition]]}/v1/topics/{TOPIC}/partitions/{partition}/records"
                "?acks=all&timeout_ms=30000"
            )
            try:
                async with session.post(
                    url,
                    data=batch,
                    headers={"Content-Type": BATCH_TYPE, NO_FORWARD: "1"},
                    timeout=aiohttp.ClientTimeout(total=60),
                ) as response:
                    body = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise StepFailed("preload", f"partition {partition}: {exc!r}") from None
            if status != 200:
                raise StepFailed("preload", f"partition {partition}: {status} {body[:300]!r}")
            written[partition] = (records + per_batch, nbytes + len(batch))
            done_bytes += len(batch)
            if written[partition][1] < target_per_partition:
                queue.append(partition)
            now = time.monotonic()
            if now - last_report >= 5:
                last_report = now
                say(
                    f"  preload {done_bytes / MB:,.0f} / {args.total_bytes / MB:,.0f} MB "
                    f"({done_bytes / MB / (now - began):.1f} MB/s)"
                )

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(args.preload_concurrency)))
    return written


def topic_view(cluster: Cluster, among: list[int] = OLD_BROKERS) -> dict[str, Any]:
    last: Any = None
    for b in among:
        status, body = call("GET", cluster.urls[b] + f"/v1/topics/{TOPIC}", timeout=10)
        if status == 200:
            return body  # type: ignore[no-any-return]
        last = (status, body)
    raise StepFailed("describe topic", f"no broker of {among} answered: {last}")


def brokers_view(cluster: Cluster) -> dict[int, dict[str, Any]]:
    status, body = call("GET", cluster.urls[1] + "/v1/brokers", timeout=10)
    if status != 200:
        raise StepFailed("GET /v1/brokers", f"{status} {body}")
    return {b["id"]: b for b in body["brokers"]}


def check_alive(cluster: Cluster, step: str, brokers: list[int]) -> None:
    every = [*(cluster.processes[b] for b in brokers), *cluster.quorum.processes.values()]
    for process in every:
        if not process.alive:
            code = None if process.popen is None else process.popen.returncode
            raise StepFailed(
                step,
                f"{process.name} died (exit code {code}); its log ends:\n    "
                + log_tail(process.log_path),
            )


def wait_for(step: str, condition: Any, timeout_s: float, poll_s: float = 0.5) -> Any:
    """`condition()` until truthy; a StepFailed it raises (a call that failed) is retried."""
    deadline = time.monotonic() + timeout_s
    why = ""
    while time.monotonic() < deadline:
        try:
            value = condition()
        except StepFailed as exc:
            value, why = None, f" (last: {exc})"
        if value:
            return value
        time.sleep(poll_s)
    raise StepFailed(step, f"not done within {timeout_s:g} s{why}")


def all_led(cluster: Cluster) -> dict[int, int] | None:
    """partition -> leader once every partition has a serving leader and a full ISR."""
    view = topic_view(cluster)
    parts = view["partitions"]
    if len(parts) == 0 or any(
        p["leader"] < 0 or p["high_watermark"] is None or len(p["isr"]) != len(p["replicas"])
        for p in parts
    ):
        return None
    return {p["partition"]: p["leader"] for p in parts}


def one_run(args: argparse.Namespace, root: Path, throttle: int | None) -> dict[str, Any]:
    cluster = Cluster(root, brokers=len(OLD_BROKERS) + len(NEW_BROKERS))
    producer: LoadProducer | None = None
    running = list(OLD_BROKERS)
    try:
        say(f"starting 3 controllers and brokers {OLD_BROKERS} in {root}")
        try:
            cluster.start(OLD_BROKERS)
        except AssertionError as exc:
            raise StepFailed("start cluster", str(exc)) from None
        status, body = call(
            "POST",
            cluster.urls[1] + "/v1/topics",
            {"name": TOPIC, "partitions": args.partitions, "replication_factor": RF},
        )
        if status != 201:
            raise StepFailed("create topic", f"{status} {body}")
        leaders = wait_for("topic leaders", lambda: all_led(cluster), 60)

        say(f"preloading {args.total_bytes / MB:,.0f} MB over {args.partitions} partitions")
        began = time.monotonic()
        written = asyncio.run(preload(cluster.urls, leaders, args))
        preload_s = time.monotonic() - began
        preloaded = sum(b for _, b in written.values())
        say(f"  preloaded {preloaded / MB:,.0f} MB in {preload_s:.1f} s")
        wait_for("full ISRs after preload", lambda: all_led(cluster), 120)
        check_alive(cluster, "preload", running)

        producer = LoadProducer(
            urls=cluster.urls,
            metadata_urls=[cluster.urls[b] for b in OLD_BROKERS],
            partitions=args.partitions,
            concurrency=args.producers,
            batch_records=args.batch_records,
            record_bytes=args.record_bytes,
        )
        producer.start()
        time.sleep(args.warmup_s)
        base_start = time.monotonic()
        say(f"baseline: {args.window_s:g} s of load on brokers {OLD_BROKERS}")
        time.sleep(args.window_s)
        base_end = time.monotonic()
        baseline = producer.window(base_start, base_end)
        say(
            f"  baseline {baseline['records_per_s']:,.0f} records/s, "
            f"p50 {baseline['p50_ms']} ms, p99 {baseline['p99_ms']} ms, "
            f"{baseline['errors']} errors"
        )
        if baseline["batches"] == 0:
            raise StepFailed("baseline", "the producer got no acknowledgement")
        old_disk = sum(disk_bytes(root / f"broker-{b}") for b in OLD_BROKERS)

        say(f"starting brokers {NEW_BROKERS}")
        for b in NEW_BROKERS:
            try:
                cluster.start_broker(b)
            except AssertionError as exc:
                raise StepFailed(f"start broker {b}", str(exc)) from None
            running.append(b)
        wait_for(
            "new brokers active",
            lambda: all(brokers_view(cluster).get(b, {}).get("state") == "active" for b in running),
            60,
        )
        if throttle is not None:
            for b in running:
                status, body = call(
                    "PUT",
                    cluster.urls[1] + f"/v1/brokers/{b}/configs",
                    {"configs": {"replication.throttled.rate": throttle}},
                )
                if status != 200:
                    raise StepFailed(f"set the throttle on broker {b}", f"{status} {body}")
            say(f"replication.throttled.rate = {throttle:,} bytes/s on brokers {running}")
        new_disk_before = sum(disk_bytes(root / f"broker-{b}") for b in NEW_BROKERS)
        # the leaders that will send the copies (a partition's leader stays until its move
        # is done; the throttle is theirs)
        leaders = wait_for("leaders before the move", lambda: all_led(cluster), 30)

        move_start = time.monotonic()
        status, body = call("POST", cluster.urls[1] + "/v1/cluster/rebalance", {"dry_run": False})
        if status != 202:
            raise StepFailed("POST /v1/cluster/rebalance", f"{status} {body}")
        moves = body["moves"]
        replica_moves = sum(len(set(m["to"]) - set(m["from"])) for m in moves)
        say(f"rebalance: {len(moves)} partitions move, {replica_moves} replicas added")
        if not moves:
            raise StepFailed("rebalance", "the plan moves nothing")

        last_report = move_start
        balanced_at: float | None = None
        counts: dict[int, int] = {}
        while balanced_at is None:
            now = time.monotonic()
            if now - move_start > args.balance_timeout_s:
                raise StepFailed(
                    "wait for balance",
                    f"not balanced after {args.balance_timeout_s:g} s: replicas {counts}",
                )
            check_alive(cluster, "move", running)
            if producer.crashed is not None:
                raise StepFailed("load", f"the producer thread crashed: {producer.crashed!r}")
            status, body = call("GET", cluster.urls[1] + "/v1/reassignments", timeout=10)
            ongoing = body["reassignments"] if status == 200 else None
            try:
                view = brokers_view(cluster)
            except StepFailed as exc:  # polled again; a lasting failure ends in the timeout
                say(f"  {exc}")
                view = {}
            counts = {b: view[b]["replicas"] for b in running if b in view} or counts
            balanced = (
                len(counts) == len(running) and max(counts.values()) - min(counts.values()) <= 1
            )
            if ongoing == [] and balanced:
                balanced_at = time.monotonic()
                break
            if now - last_report >= args.progress_s:
                last_report = now
                grown = sum(disk_bytes(root / f"broker-{b}") for b in NEW_BROKERS)
                grown -= new_disk_before
                during = producer.window(move_start, now)
                say(
                    f"  {now - move_start:5.1f} s: "
                    f"{'?' if ongoing is None else len(ongoing)} moves left, "
                    f"replicas {counts}, brokers 4-5 +{grown / MB:,.0f} MB, "
                    f"load {during['records_per_s']:,.0f} records/s "
                    f"p99 {during['p99_ms']} ms"
                )
            time.sleep(args.poll_s)
        new_disk_after = sum(disk_bytes(root / f"broker-{b}") for b in NEW_BROKERS)
        old_disk_after = sum(disk_bytes(root / f"broker-{b}") for b in OLD_BROKERS)
        balance_s = balanced_at - move_start
        say(f"  balanced after {balance_s:.1f} s: replicas {counts}")

        # after: more load on 5 brokers; when leaders were first within one
        leaders_balanced_s: float | None = None
        after_end = balanced_at + args.after_s
        while True:
            try:
                view = brokers_view(cluster)
            except StepFailed as exc:
                say(f"  {exc}")
                view = {}
            led = [view[b]["leaders"] for b in running if b in view]
            balanced = len(led) == len(running) and max(led) - min(led) <= 1
            if leaders_balanced_s is None and balanced:
                leaders_balanced_s = time.monotonic() - move_start
            if time.monotonic() >= after_end:
                break
            time.sleep(min(args.poll_s, max(0.0, after_end - time.monotonic())))
        during = producer.window(move_start, balanced_at)
        after = producer.window(balanced_at, after_end)
        producer.stop()
        if producer.is_alive():
            raise StepFailed("stop the producer", "its thread did not finish")
        check_alive(cluster, "after the move", running)

        # final state and sanity
        view = wait_for("GET /v1/brokers", lambda: brokers_view(cluster), 30)
        topic = wait_for("describe topic", lambda: topic_view(cluster, running), 30)
        not_full = [
            p["partition"] for p in topic["partitions"] if len(set(p["isr"])) != len(p["replicas"])
        ]
        held = sum(
            (p["high_watermark"] or 0) - (p["log_start_offset"] or 0) for p in topic["partitions"]
        )
        acked = sum(r for r, _ in written.values()) + sum(s.records for s in producer.samples)
        if held < acked:
            say(f"  WARNING: the logs hold {held:,} records but {acked:,} were acknowledged")

        # partition bytes at the balance point: preload + what the load producer got acked
        part_bytes = {p: b for p, (_, b) in written.items()}
        for s in producer.samples:
            if s.acked_at < balanced_at:
                part_bytes[s.partition] += s.nbytes
        planned = sum(
            part_bytes[m["partition"]] * len(set(m["to"]) - set(m["from"])) for m in moves
        )
        minimum = sum(part_bytes.values()) * RF * len(NEW_BROKERS) / len(running)
        by_leader: dict[int, int] = {}
        for m in moves:
            sender = leaders[m["partition"]]
            adds = len(set(m["to"]) - set(m["from"]))
            by_leader[sender] = by_leader.get(sender, 0) + part_bytes[m["partition"]] * adds
        base_logical = sum(b for _, b in written.values()) * RF
        moved_disk = new_disk_after - new_disk_before
        return {
            "throttle_bytes_per_s": throttle,
            "preload_mb": round(preloaded / MB, 1),
            "preload_s": round(preload_s, 1),
            "balance_s": round(balance_s, 2),
            "leaders_balanced_s": _round(leaders_balanced_s, 2),
            "moves": len(moves),
            "replica_moves": replica_moves,
            "planned_mb": round(planned / MB, 1),
            "min_mb": round(minimum / MB, 1),
            "moved_disk_mb": round(moved_disk / MB, 1),
            "planned_over_min": round(planned / minimum, 3),
            "moved_disk_over_min": round(moved_disk / minimum, 3),
            "disk_per_logical": round(old_disk / base_logical, 3),
            "old_disk_mb_before": round(old_disk / MB, 1),
            "old_disk_mb_after": round(old_disk_after / MB, 1),
            "copy_mb_per_s": round(planned / MB / balance_s, 2),
            "throttle_floor_s": (
                None
                if throttle is None
                else round(max(0.0, max(by_leader.values()) / throttle - WINDOW_S), 2)
            ),
            "throttle_floor_even_s": (
                None
                if throttle is None
                else round(max(0.0, planned / (throttle * len(OLD_BROKERS)) - WINDOW_S), 2)
            ),
            "copy_mb_by_leader": {str(b): round(by_leader[b] / MB) for b in sorted(by_leader)},
            "baseline": baseline,
            "during": during,
            "after": after,
            "final_replicas": {str(b): view[b]["replicas"] for b in running},
            "final_leaders": {str(b): view[b]["leaders"] for b in running},
            "isr_not_full": not_full,
            "records_held": held,
            "records_acked": acked,
            "producer_errors": _kinds(producer.failures),
        }
    finally:
        if producer is not None and producer.is_alive():
            producer.stop()
        cluster.close()


# ------------------------------------------------------------------------------ summary

SCALARS = [
    "preload_mb",
    "balance_s",
    "throttle_floor_s",
    "throttle_floor_even_s",
    "leaders_balanced_s",
    "moves",
    "replica_moves",
    "planned_mb",
    "min_mb",
    "moved_disk_mb",
    "planned_over_min",
    "moved_disk_over_min",
    "disk_per_logical",
    "old_disk_mb_before",
    "old_disk_mb_after",
    "copy_mb_per_s",
]
WINDOW_KEYS = ["records_per_s", "p50_ms", "p99_ms", "max_ms", "errors", "longest_gap_s"]


def median_of(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    m = statistics.median(present)
    return round(m, 3) if isinstance(m, float) else m


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over runs; the last run's layout and sanity figures."""
    summary: dict[str, Any] = {"runs": len(runs)}
    summary["throttle_bytes_per_s"] = runs[0]["throttle_bytes_per_s"]
    for key in SCALARS:
        summary[key] = median_of([r[key] for r in runs])
    for window in ("baseline", "during", "after"):
        summary[window] = {k: median_of([r[window][k] for r in runs]) for k in WINDOW_KEYS}
        summary[window]["error_kinds"] = runs[-1][window]["error_kinds"]
    base, during = summary["baseline"], summary["during"]
    summary["during_over_baseline_records_per_s"] = (
        round(during["records_per_s"] / base["records_per_s"], 3) if base["records_per_s"] else None
    )
    summary["during_over_baseline_p99"] = (
        round(during["p99_ms"] / base["p99_ms"], 2) if during["p99_ms"] and base["p99_ms"] else None
    )
    for key in (
        "copy_mb_by_leader",
        "final_replicas",
        "final_leaders",
        "isr_not_full",
        "records_held",
        "records_acked",
        "producer_errors",
    ):
        summary[key] = runs[-1][key]
    summary["every_run"] = [
        {k: r[k] for k in ("balance_s", "throttle_floor_s", "moved_disk_mb", "copy_mb_per_s")}
        | {"during_p99_ms": r["during"]["p99_ms"], "baseline_p99_ms": r["baseline"]["p99_ms"]}
        for r in runs
    ]
    return summary


def table(phases: dict[str, dict[str, Any]]) -> str:
    names = list(phases)
    rows: list[tuple[str, list[Any]]] = [
        ("throttle (bytes/s per broker)", [phases[n]["throttle_bytes_per_s"] for n in names]),
    ]
    rows += [(key, [phases[n][key] for n in names]) for key in SCALARS]
    for window in ("baseline", "during", "after"):
        for key in WINDOW_KEYS:
            rows.append((f"{window} {key}", [phases[n][window][key] for n in names]))
    held = [f"{phases[n]['records_held']:,} / {phases[n]['records_acked']:,}" for n in names]
    rows += [
        (
            "during/baseline records/s",
            [phases[n]["during_over_baseline_records_per_s"] for n in names],
        ),
        ("during/baseline p99", [phases[n]["during_over_baseline_p99"] for n in names]),
        ("copy MB by sending leader", [phases[n]["copy_mb_by_leader"] for n in names]),
        ("final replicas per broker", [phases[n]["final_replicas"] for n in names]),
        ("final leaders per broker", [phases[n]["final_leaders"] for n in names]),
        ("partitions with ISR not full", [phases[n]["isr_not_full"] for n in names]),
        ("records held / acked", held),
        ("producer errors (whole run)", [phases[n]["producer_errors"] for n in names]),
    ]

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, dict):
            return " ".join(f"{k}:{v}" for k, v in value.items())
        if isinstance(value, list):
            return str(len(value)) if value else "0"
        if isinstance(value, float):
            return f"{value:,.3f}".rstrip("0").rstrip(".")
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    width = max(len(label) for label, _ in rows)
    cols = [max(len(n), *(len(cell(v[i])) for _, v in rows)) for i, n in enumerate(names)]
    lines = [f"{'':<{width}}  " + "  ".join(f"{n:>{c}}" for n, c in zip(names, cols, strict=True))]
    for label, values in rows:
        cells = "  ".join(f"{cell(v):>{c}}" for v, c in zip(values, cols, strict=True))
        lines.append(f"{label:<{width}}  {cells}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ main


def run_phase(
    name: str, args: argparse.Namespace, base: Path, throttle: int | None
) -> list[dict[str, Any]]:
    runs = []
    for i in range(args.runs):
        root = base / f"{name}-{i + 1}"
        say(f"=== {name} run {i + 1}/{args.runs}")
        try:
            result = one_run(args, root, throttle)
        except StepFailed:
            print(f"cluster root kept for its logs: {root}", flush=True)
            raise
        runs.append(result)
        say(
            f"=== {name} run {i + 1}: balanced in {result['balance_s']} s, "
            f"{result['moved_disk_mb']} MB to brokers 4-5 (min {result['min_mb']} MB), "
            f"during p99 {result['during']['p99_ms']} ms vs baseline "
            f"{result['baseline']['p99_ms']} ms"
        )
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--partitions", type=int, default=30)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--megabytes", type=float, default=300, help="preloaded, in all (10^6 B)")
    size.add_argument("--gigabytes", type=float, help="preloaded, in all (10^9 B)")
    parser.add_argument("--window-s", type=float, default=10, help="baseline window")
    parser.add_argument("--warmup-s", type=float, default=3)
    parser.add_argument("--after-s", type=float, default=5, help="load after the balance")
    parser.add_argument("--runs", type=int, default=3, help="runs per phase (medians)")
    parser.add_argument("--producers", type=int, default=4, help="requests in flight")
    parser.add_argument("--batch-records", type=int, default=10)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--preload-batch-kib", type=int, default=256)
    parser.add_argument("--preload-concurrency", type=int, default=6)
    parser.add_argument(
        "--throttle-bytes-per-s",
        type=int,
        help="per broker (default: a quarter of the unthrottled copy rate over 3 leaders)",
    )
    parser.add_argument("--balance-timeout-s", type=float, default=900)
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--progress-s", type=float, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the cluster roots")
    args = parser.parse_args()
    args.total_bytes = int(args.gigabytes * 1e9 if args.gigabytes else args.megabytes * MB)
    if args.partitions < 1 or args.total_bytes < 1 or args.runs < 1:
        parser.error("--partitions, the size and --runs must be positive")

    base = Path(tempfile.mkdtemp(prefix="kraftlite-rebalance-"))
    phases: dict[str, dict[str, Any]] = {}
    try:
        unthrottled = run_phase("unthrottled", args, base, None)
        phases["unthrottled"] = summarize(unthrottled)
        throttle = args.throttle_bytes_per_s
        if throttle is None:
            copy_rate = phases["unthrottled"]["copy_mb_per_s"] * MB
            throttle = max(1, int(copy_rate / 4 / len(OLD_BROKERS)))
            say(
                f"throttle: a quarter of {copy_rate / MB:.2f} MB/s over "
                f"{len(OLD_BROKERS)} leading brokers = {throttle:,} bytes/s per broker"
            )
        phases["throttled"] = summarize(run_phase("throttled", args, base, throttle))
    except StepFailed as exc:
        print(f"FAILED at step {exc.step!r}: {exc.reason}", flush=True)
        return 1
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return 1
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    print()
    print(
        f"{args.partitions} partitions x RF {RF}, {args.total_bytes / MB:,.0f} MB preloaded, "
        f"3 -> 5 brokers; medians of {args.runs} run(s) per phase"
    )
    print(table(phases))
    result = {
        "bench": "rebalance",
        "partitions": args.partitions,
        "target_mb": round(args.total_bytes / MB, 1),
        "replication_factor": RF,
        "runs": args.runs,
        "producers": args.producers,
        "batch_records": args.batch_records,
        "record_bytes": args.record_bytes,
        **phases,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
