"""Scale benchmark (issue 13): what a cluster costs and how it behaves as it grows to
100,000 partitions.

Starts --controllers controllers and --brokers brokers (tests/harness, each its own process,
in a temp dir) and grows the cluster's topics, size by size (--sizes), to P partitions in
all, replication factor 3, in topics of --partitions-per-topic. At each size:
  create        partitions created per second: the topics added at this step, created by
                --create-concurrency concurrent POST /v1/topics spread over the brokers (a
                topic each, or --topics-per-request in the batch form)
  isr_full      time from the last creation until every partition, as the brokers'
                GET /v1/topics/{t} show it (polled), has a leader serving it (a high
                watermark) and every replica in its ISR (a new partition starts with a full
                ISR: ISRs that shrink afterwards show as `isr_not_full_after` in idle)
  idle          CPU of the whole cluster in cores (utime + stime of every node process from
                /proc/PID/stat over --idle-s seconds, once the ISRs are full and nothing is
                sent), RSS per broker (VmRSS) and per replica it holds (RSS / replicas, and
                (RSS - the broker's RSS before any topic) / replicas); then the partitions
                whose ISR is not full (the active controller's view)
  propagation   one topic (1 partition) created on the active controller, then every
                broker's GET /v1/topics/{t}/partitions/0/offsets polled every 10 ms until it
                answers 200 (the broker knows the topic and its leader serves it): p50 / p99
                / max from the controller's 201 (--propagation-samples times). Not
                GET /v1/topics/{t}: a broker's describe asks each leader for its offsets, and
                a leader finds them by scanning every replica it holds, so polling it at
                100,000 partitions would load the cluster more than what it measures
  produce_fetch one JSON record produced (acks=all) on every partition, straight to its
                leader, and fetched back from its offset; --concurrency requests in flight
  kill9         kill -9 of the broker leading the most partitions (about a third), then the
                time until the active controller's metadata has moved every partition off it
                (metadata_moved_s: leaders and ISRs), and until every partition (or
                --probe-partitions-per-topic of each topic) takes an acks=all write again
                (so a partition whose ISR still holds the dead broker counts only once the
                ISR has shrunk):
                one JSON produce per topic with a record for each partition not yet written,
                sent to the surviving brokers (which forward to leaders) with timeout_ms
                --probe-timeout-ms and retried, a partition counting as writable when a
                request including it is answered. A request answers when its slowest
                partition does, so writable_p50_s is an upper bound; writable_s, the last
                partition, is late by at most one attempt (--probe-timeout-ms and a round
                trip). probe_refusals counts refusals per partition and error code
                (REQUEST_TIMED_OUT: writes left waiting for the ISR to move).
                Then the broker is restarted: time to /readyz 200 and until every ISR is full
                again (then leadership is given up to --rebalance-wait-s to return to the
                preferred replicas)
  shutdown      the same with SIGTERM (a controlled shutdown) instead of kill -9, plus the
                time until the process exited, then its restart
  controller    kill -9 of the active controller, then the time until a topic creation
                through a broker succeeds again; then its restart: time until it is ready
                and has replayed the active controller's metadata offset
Growing stops, saying at which size and phase and why, when a phase exceeds --timeout-s, a
node dies, or the machine runs short of memory or disk; the figures measured so far are
kept. Every process is stopped at the end. The last line is one JSON object:
{"bench": "scale", "steps": [{"partitions", "create", "isr_full", "idle", "propagation",
"produce_fetch", "kill9", "shutdown", "controller"}, ...], "reached_partitions", "stopped"}.

Run: python scripts/bench_scale.py [--sizes 1000,10000,30000,100000] [--brokers 3]
     [--controllers 3] [--partitions-per-topic 100] [--skip-faults] [--timeout-s 600]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests.harness package

from tests.harness.processes import Cluster, ControllerQuorum, Process

REPO = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEFAULT_SESSION_TIMEOUT_MS = 9000  # the controllers' default broker.session.timeout.ms
RETRIABLE_STATUSES = {0, 408, 421, 500, 502, 503, 504}


class Stop(Exception):
    """Growing stops here: `phase` could not finish, for `reason`."""

    def __init__(self, phase: str, reason: str) -> None:
        super().__init__(f"{phase}: {reason}")
        self.phase = phase
        self.reason = reason


def percentile(values: list[float], fraction: float) -> float:
    """Nearest rank (with 20 samples, p99 is the largest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return math.inf


def log_tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


class ScaleBench:
    def __init__(self, cluster: Cluster, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.args = args
        self.rf = min(3, args.brokers)
        self.topics: dict[str, int] = {}  # every topic this benchmark created: partitions
        self.phase = "start"
        self.progress = ""  # what the current phase has done so far, for a timeout's message
        self.down: set[str] = set()  # processes stopped on purpose
        self.empty_rss: dict[str, float] = {}  # every node's RSS before any topic
        self.names = itertools.count()
        self.current: dict[str, Any] = {"partitions": None}  # the step being measured
        self.partial: dict[str, Any] = {}  # the phase being measured, as far as it got
        self.session: aiohttp.ClientSession

    # ------------------------------------------------------------------ plumbing

    @property
    def partitions(self) -> int:
        return sum(self.topics.values())

    def nodes(self) -> dict[str, Process]:
        every = [*self.cluster.quorum.processes.values(), *self.cluster.processes.values()]
        return {p.name: p for p in every}

    def broker_urls(self, exclude: Collection[int] = ()) -> list[str]:
        return [u for b, u in self.cluster.urls.items() if b not in exclude]

    def check_alive(self) -> None:
        for name, process in self.nodes().items():
            if name in self.down:
                continue
            if process.popen is None or process.popen.poll() is not None:
                code = None if process.popen is None else process.popen.returncode
                raise Stop(
                    self.phase,
                    f"{name} died (exit code {code}); its log ends: {log_tail(process.log_path)}",
                )

    async def call(
        self, method: str, url: str, body: Any = None, wait_s: float = 30, **kwargs: Any
    ) -> tuple[int, Any]:
        """(status, parsed JSON or text); status 0 when the node could not be reached."""
        try:
            async with self.session.request(
                method,
                url,
                json=body,
                timeout=aiohttp.ClientTimeout(total=wait_s),
                **kwargs,
            ) as response:
                raw = await response.read()
                try:
                    return response.status, json.loads(raw) if raw else None
                except ValueError:
                    return response.status, raw[:200].decode(errors="replace")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return 0, repr(exc)

    async def run_phase(self, name: str, work: Callable[[], Awaitable[Any]]) -> Any:
        """Run one phase under --timeout-s. A phase may put figures in `self.partial` as it
        goes: they stay in the step's figures (marked incomplete) if it does not finish."""
        self.phase, self.progress = name, ""
        self.partial = self.current[name] = {"incomplete": True}
        self.check_alive()
        try:
            async with asyncio.timeout(self.args.timeout_s):
                result = await work()
        except TimeoutError:
            raise Stop(
                name, f"not done within --timeout-s {self.args.timeout_s:g} s ({self.progress})"
            ) from None
        except OSError as exc:  # on the benchmark's side: out of sockets, files or memory?
            raise Stop(name, f"OS error: {exc!r}") from None
        self.check_alive()
        self.current[name] = result
        return result

    async def active_controller(self) -> tuple[int, str]:
        """The active controller every live controller agrees on (it may take a while)."""
        quorum = self.cluster.quorum
        while True:
            seen = set()
            for node_id, url in quorum.urls.items():
                if quorum.processes[node_id].alive:
                    status, body = await self.call("GET", url + "/v1/quorum", wait_s=2)
                    seen.add(body.get("leader_id") if status == 200 else None)
            if len(seen) == 1 and None not in seen:
                leader = int(seen.pop())
                if quorum.processes[leader].alive:
                    status, _ = await self.call("GET", quorum.urls[leader] + "/readyz", wait_s=2)
                    if status == 200:
                        return leader, quorum.urls[leader]
            self.progress = f"no active controller that every live one agrees on: {seen}"
            await asyncio.sleep(0.1)

    async def describe_all(
        self, names: list[str] | None = None, *, via_brokers: bool = False
    ) -> dict[str, dict[str, Any]]:
        """Topics as the active controller has them, or as the brokers do (round robin; a
        broker adds each partition's high watermark, which only a serving leader gives);
        each retried until it answers."""
        if via_brokers:
            urls = self.broker_urls(self.down_brokers())
        else:
            urls = [(await self.active_controller())[1]]
        sem = asyncio.Semaphore(self.args.concurrency)
        views: dict[str, dict[str, Any]] = {}

        async def one(i: int, name: str) -> None:
            for attempt in itertools.count():
                async with sem:
                    url = urls[(i + attempt) % len(urls)]
                    status, body = await self.call("GET", f"{url}/v1/topics/{name}", wait_s=30)
                if status == 200:
                    views[name] = body
                    return
                self.progress = f"GET {url}/v1/topics/{name}: {status} {str(body)[:300]}"
                await asyncio.sleep(0.2)

        todo = list(self.topics) if names is None else names
        await asyncio.gather(*(one(i, n) for i, n in enumerate(todo)))
        return views

    def down_brokers(self) -> set[int]:
        return {b for b, p in self.cluster.processes.items() if p.name in self.down}

    def layout(self, views: dict[str, dict[str, Any]]) -> tuple[Counter[int], Counter[int]]:
        """(leaders, replicas) per broker."""
        leaders: Counter[int] = Counter()
        replicas: Counter[int] = Counter()
        for view in views.values():
            for p in view["partitions"]:
                leaders[p["leader"]] += 1
                replicas.update(p["replicas"])
        return leaders, replicas

    def full(self, partition: dict[str, Any]) -> bool:
        """Led, every replica in the ISR, and (in a broker's view) its leader serving it."""
        return (
            partition["leader"] >= 0
            and len(set(partition["isr"])) == len(partition["replicas"])
            and partition.get("high_watermark", 0) is not None
        )

    def not_full(self, views: dict[str, dict[str, Any]]) -> int:
        return sum(not self.full(p) for v in views.values() for p in v["partitions"])

    async def wait_ready(self, url: str) -> None:
        while True:
            status, _ = await self.call("GET", url + "/readyz", wait_s=2)
            if status == 200:
                return
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ growing

    def check_room(self, target: int, last: dict[str, Any] | None) -> None:
        """Stop before a step the machine cannot hold (memory projected from the last step)."""
        available = mem_available_mib()
        if available < self.args.min_free_mib:
            raise Stop("grow", f"only {available:.0f} MiB of memory available")
        free_disk = shutil.disk_usage(self.cluster.root).free / 2**20
        if free_disk < self.args.min_free_mib:
            raise Stop("grow", f"only {free_disk:.0f} MiB of disk free")
        if last is not None and last.get("idle") and last["partitions"] > 0:
            grown = sum(last["idle"]["rss_mib"].values()) - sum(self.empty_rss.values())
            per_partition = max(grown, 0) / last["partitions"]
            needed = per_partition * (target - self.partitions)
            if needed > available - self.args.min_free_mib:
                raise Stop(
                    "grow",
                    f"{target:,} partitions would need about {needed:,.0f} MiB more "
                    f"({per_partition * 1024:.1f} KiB per partition at {last['partitions']:,}), "
                    f"{available:,.0f} MiB available",
                )

    async def grow(self, target: int) -> dict[str, Any]:
        """Create topics until the cluster has `target` partitions: one topic per POST, or
        --topics-per-request in one (the batch form, `{"topics": [...]}`)."""
        per_topic, batch = self.args.partitions_per_topic, self.args.topics_per_request
        before = self.partitions
        plan, planned = [], before
        while planned < target:
            count = min(per_topic, target - planned)
            plan.append((f"scale-{next(self.names):06d}", count))
            planned += count
        chunks = [dict(plan[i : i + batch]) for i in range(0, len(plan), batch)]
        urls = self.broker_urls()
        sem = asyncio.Semaphore(self.args.create_concurrency)
        started = time.monotonic()

        async def create(i: int, left: dict[str, int]) -> None:
            for attempt in itertools.count():
                specs = [
                    {"name": n, "partitions": c, "replication_factor": self.rf}
                    for n, c in left.items()
                ]
                body = specs[0] if batch == 1 else {"topics": specs}
                async with sem:
                    url = urls[(i + attempt) % len(urls)]
                    status, answer = await self.call("POST", url + "/v1/topics", body, wait_s=120)
                outcomes = answer.get("topics", [answer]) if isinstance(answer, dict) else []
                if status not in {200, 201}:
                    code = answer.get("error_code") if isinstance(answer, dict) else None
                    if attempt and code == "TOPIC_ALREADY_EXISTS" and batch == 1:
                        outcomes = [{"name": specs[0]["name"]}]  # it committed, the answer was lost
                    elif status in RETRIABLE_STATUSES:
                        self.progress = f"retrying {len(left)} topics: {status} {answer}"
                        await asyncio.sleep(0.5)
                        continue
                    else:
                        raise Stop("create", f"creating {list(left)[:3]}...: {status} {answer}")
                for outcome in outcomes:
                    code = outcome.get("error_code")
                    if code is not None and not (attempt and code == "TOPIC_ALREADY_EXISTS"):
                        raise Stop("create", f"creating {outcome['name']}: {outcome}")
                    self.topics[outcome["name"]] = left.pop(outcome["name"])
                self.progress = f"{self.partitions - before:,} of {target - before:,} created"
                if not left:
                    return

        await asyncio.gather(*(create(i, chunk) for i, chunk in enumerate(chunks)))
        elapsed = time.monotonic() - started
        created = self.partitions - before
        return {
            "partitions_added": created,
            "topics_added": len(plan),
            "requests": len(chunks),
            "seconds": round(elapsed, 2),
            "partitions_per_s": round(created / elapsed, 1) if elapsed else None,
        }

    async def wait_isr_full(self) -> dict[str, Any]:
        """Until every partition, as the brokers describe it, has a leader that serves it
        (a high watermark) and every replica in its ISR. A new partition starts with a full
        ISR, so this is mostly the leaders coming up; ISRs that shrink later (followers
        falling behind) show in the idle phase's `isr_not_full_after`."""
        started = time.monotonic()
        pending = list(self.topics)
        while True:
            views = await self.describe_all(pending, via_brokers=True)
            pending = [n for n, v in views.items() if not all(map(self.full, v["partitions"]))]
            if not pending:
                return {"seconds": round(time.monotonic() - started, 2)}
            example = next(p for p in views[pending[0]]["partitions"] if not self.full(p))
            self.progress = (
                f"{self.not_full(views):,} partitions not led with a full ISR, "
                f"e.g. {pending[0]}: {example}"
            )
            await asyncio.sleep(0.5)

    # ------------------------------------------------------------------ measuring

    async def idle(self) -> dict[str, Any]:
        await asyncio.sleep(self.args.settle_s)
        pids = {n: p.popen.pid for n, p in self.nodes().items() if p.popen is not None}
        before = {n: cpu_seconds(pid) for n, pid in pids.items()}
        started = time.monotonic()
        await asyncio.sleep(self.args.idle_s)
        after = {n: cpu_seconds(pid) for n, pid in pids.items()}
        elapsed = time.monotonic() - started
        cores = {n: round((after[n] - before[n]) / elapsed, 3) for n in pids}
        rss = {n: round(rss_mib(pid), 1) for n, pid in pids.items()}
        views = await self.describe_all()
        _, replicas = self.layout(views)
        per_replica = {}
        marginal = {}
        for broker_id, process in self.cluster.processes.items():
            held = replicas.get(broker_id, 0)
            if held:
                per_replica[process.name] = round(rss[process.name] * 1024 / held, 2)
                extra = rss[process.name] - self.empty_rss.get(process.name, 0.0)
                marginal[process.name] = round(extra * 1024 / held, 2)
        return {
            "cluster_cores": round(sum(cores.values()), 3),
            "cores": cores,
            "rss_mib": rss,
            "replicas": {self.cluster.processes[b].name: n for b, n in sorted(replicas.items())},
            "rss_per_replica_kib": per_replica,
            "rss_per_replica_over_empty_kib": marginal,
            "seconds": round(elapsed, 1),
            "isr_not_full_after": self.not_full(views),
        }

    async def propagation(self, size: int) -> dict[str, Any]:
        brokers = self.broker_urls()
        samples, commits = [], []
        for i in range(self.args.propagation_samples):
            name = f"prop-{size}-{i}-{uuid.uuid4().hex[:6]}"
            body = {"name": name, "partitions": 1, "replication_factor": self.rf}
            while True:
                _, url = await self.active_controller()
                sent = time.monotonic()
                status, answer = await self.call("POST", url + "/v1/topics", body, wait_s=60)
                committed = time.monotonic()
                if status == 201:
                    break
                if status not in RETRIABLE_STATUSES:
                    raise Stop("propagation", f"creating {name} on {url}: {status} {answer}")
                self.progress = f"creating {name} on {url}: {status} {answer}; retrying"
                await asyncio.sleep(0.2)
            self.topics[name] = 1

            async def served(broker: str, topic: str = name) -> float:
                while True:
                    status, _ = await self.call(
                        "GET", f"{broker}/v1/topics/{topic}/partitions/0/offsets", wait_s=10
                    )
                    if status == 200:
                        return time.monotonic()
                    await asyncio.sleep(0.01)

            seen = await asyncio.gather(*(served(b) for b in brokers))
            samples.append(max(seen) - committed)
            commits.append(committed - sent)
            self.progress = f"{i + 1} samples"
        return {
            "p50_ms": ms(statistics.median(samples)),
            "p99_ms": ms(percentile(samples, 0.99)),
            "max_ms": ms(max(samples)),
            "create_p50_ms": ms(statistics.median(commits)),
            "samples": len(samples),
        }

    async def broker_url_map(self) -> dict[int, str]:
        for url in itertools.cycle(self.broker_urls()):
            status, body = await self.call("GET", url + "/v1/cluster", wait_s=10)
            if status == 200:
                return {b["id"]: b["url"] for b in body["brokers"]}
            await asyncio.sleep(0.2)
        raise AssertionError("unreachable")

    async def produce_fetch(self) -> dict[str, Any]:
        views = await self.describe_all()
        urls = await self.broker_url_map()
        fallback = self.broker_urls()
        targets = [
            (name, p["partition"], urls.get(p["leader"], fallback[0]))
            for name, view in views.items()
            for p in view["partitions"]
        ]
        sem = asyncio.Semaphore(self.args.concurrency)
        errors: list[str] = []
        done = 0

        async def one(topic: str, index: int, url: str) -> None:
            nonlocal done
            base = f"{url}/v1/topics/{topic}/partitions/{index}/records"
            value = uuid.uuid4().hex
            async with sem:
                status, body = await self.call(
                    "POST", base + "?acks=all", {"records": [{"value": value}]}, wait_s=60
                )
                if status != 200:
                    errors.append(f"produce {topic}/{index}: {status} {body}")
                    return
                offset = body["offsets"][0]["offset"]
                status, body = await self.call(
                    "GET", f"{base}?offset={offset}&max_records=1", wait_s=60
                )
            records = body.get("records") if isinstance(body, dict) else None
            if status != 200 or not records or records[0]["value"] != value:
                errors.append(f"fetch {topic}/{index}@{offset}: {status} {body}")
                return
            done += 1
            self.progress = f"{done:,} of {len(targets):,} partitions produced and fetched"

        started = time.monotonic()
        await asyncio.gather(*(one(*t) for t in targets))
        elapsed = time.monotonic() - started
        return {
            "seconds": round(elapsed, 2),
            "partitions": len(targets),
            "ok": done,
            "failed": len(errors),
            "round_trips_per_s": round(2 * done / elapsed, 1) if elapsed else None,
            "first_errors": errors[:3],
        }

    # ------------------------------------------------------------------ faults

    async def writable(self, started: float, exclude: set[int]) -> dict[str, Any]:
        """Until every partition takes an acks=all write (see the module docstring)."""
        urls = self.broker_urls(exclude)
        timeout_ms = self.args.probe_timeout_ms
        sample = self.args.probe_partitions_per_topic
        pending = {
            name: set(range(min(count, sample) if sample > 0 else count))
            for name, count in self.topics.items()
        }
        total = sum(len(left) for left in pending.values())
        at: list[float] = []
        requests = 0
        sem = asyncio.Semaphore(self.args.probe_concurrency)
        last_error: list[str] = []
        errors: Counter[str] = Counter()  # per partition refused, by error code

        async def probe(i: int, name: str) -> None:
            nonlocal requests
            left = pending[name]
            for attempt in itertools.count():
                records = [{"value": "probe", "partition": p} for p in sorted(left)]
                async with sem:
                    status, body = await self.call(
                        "POST",
                        f"{urls[(i + attempt) % len(urls)]}/v1/topics/{name}/records"
                        f"?acks=all&timeout_ms={timeout_ms}",
                        {"records": records},
                        wait_s=timeout_ms / 1000 + 10,
                    )
                requests += 1
                now = time.monotonic() - started
                if status == 200:
                    for entry in body["offsets"]:
                        if entry["partition"] not in left:
                            continue
                        if entry.get("offset") is not None:
                            left.discard(entry["partition"])
                            at.append(now)
                        else:
                            errors[entry.get("error_code", "?")] += 1
                else:
                    code = body.get("error_code") if isinstance(body, dict) else None
                    errors[code or f"HTTP {status}"] += len(left)
                if not left:
                    return
                last_error[:] = [f"{name}: {status} {str(body)[:300]}"]
                self.progress = (
                    f"{total - len(at):,} of {total:,} partitions not writable yet "
                    f"after {now:.1f} s; last error {last_error[0]}"
                )
                await asyncio.sleep(0.1)

        await asyncio.gather(*(probe(i, n) for i, n in enumerate(pending)))
        if not at:
            return {"writable_s": 0.0, "probe_requests": requests}
        return {
            "writable_s": round(max(at), 3),
            "writable_p50_s": round(statistics.median(at), 3),
            "partitions_unwritable_over_1s": sum(t > 1 for t in at),
            "probe_requests": requests,
            "probe_refusals": dict(errors.most_common()),
        }

    async def restart_broker(self, broker_id: int, out: dict[str, Any]) -> None:
        """Start the broker again; `out` gets its time to /readyz 200, then to full ISRs."""
        process = self.cluster.processes[broker_id]
        started = time.monotonic()
        process.start()
        self.down.discard(process.name)
        self.progress = f"{process.name} restarted, not ready yet"
        await self.wait_ready(self.cluster.urls[broker_id])
        out["ready_s"] = round(time.monotonic() - started, 2)
        self.progress = f"{process.name} ready after {out['ready_s']} s, waiting for full ISRs"
        await self.wait_isr_full()
        out["isr_full_s"] = round(time.monotonic() - started, 2)

    async def balance(self) -> dict[str, Any]:
        """Wait (up to --rebalance-wait-s) for leaders to spread again: the controllers move
        leadership back to preferred replicas every leader.imbalance.check.interval.ms."""
        started = time.monotonic()
        brokers = len(self.cluster.processes)
        while True:
            leaders, _ = self.layout(await self.describe_all())
            share = max(leaders.values()) / max(1, sum(leaders.values()))
            waited = time.monotonic() - started
            if share <= 1 / brokers + 0.1 or waited > self.args.rebalance_wait_s:
                return {"max_leader_share": round(share, 3), "waited_s": round(waited, 1)}
            await asyncio.sleep(2)

    async def victim(self, figures: dict[str, Any]) -> int:
        """The broker leading the most partitions (noted in `figures`)."""
        leaders, _ = self.layout(await self.describe_all())
        broker_id, led = max(
            ((b, leaders.get(b, 0)) for b in self.cluster.processes), key=lambda x: x[1]
        )
        total = sum(leaders.values())
        figures |= {
            "broker": broker_id,
            "leaders": led,
            "leader_share": round(led / max(1, total), 3),
        }
        return broker_id

    async def after_restart(self, broker_id: int, figures: dict[str, Any]) -> dict[str, Any]:
        self.progress = "every partition writable; restarting the broker"
        figures["restart"] = {}
        await self.restart_broker(broker_id, figures["restart"])
        figures["rebalance"] = await self.balance()
        figures.pop("incomplete", None)
        return figures

    async def moved_off(self, started: float, broker_id: int) -> dict[str, Any]:
        """Until the active controller's metadata has no partition led by `broker_id` or
        with it in the ISR: the cluster's own reaction, apart from the probes' cost."""
        while True:
            views = await self.describe_all()
            left = sum(
                1
                for view in views.values()
                for p in view["partitions"]
                if p["leader"] == broker_id or broker_id in p["isr"]
            )
            if not left:
                return {"metadata_moved_s": round(time.monotonic() - started, 3)}
            await asyncio.sleep(0.2)

    async def kill9(self) -> dict[str, Any]:
        figures = self.partial
        broker_id = await self.victim(figures)
        process = self.cluster.processes[broker_id]
        self.down.add(process.name)
        started = time.monotonic()
        process.kill()
        moved, writable = await asyncio.gather(
            self.moved_off(started, broker_id), self.writable(started, exclude={broker_id})
        )
        figures |= moved | writable
        return await self.after_restart(broker_id, figures)

    async def controlled_shutdown(self) -> dict[str, Any]:
        figures = self.partial
        broker_id = await self.victim(figures)
        process = self.cluster.processes[broker_id]
        popen = process.popen
        assert popen is not None
        self.down.add(process.name)
        started = time.monotonic()
        popen.send_signal(signal.SIGTERM)

        async def exited() -> dict[str, Any]:
            while popen.poll() is None:
                if time.monotonic() - started > self.args.shutdown_wait_s:
                    popen.kill()
                    popen.wait()
                    return {"exit_s": None, "exit": f"killed after {self.args.shutdown_wait_s} s"}
                await asyncio.sleep(0.02)
            return {"exit_s": round(time.monotonic() - started, 2), "exit": popen.returncode}

        ended, moved, figures_writable = await asyncio.gather(
            exited(),
            self.moved_off(started, broker_id),
            self.writable(started, exclude={broker_id}),
        )
        process.popen = None
        figures |= figures_writable | moved | ended
        return await self.after_restart(broker_id, figures)

    async def controller_failover(self, size: int) -> dict[str, Any]:
        quorum = self.cluster.quorum
        figures = self.partial
        node_id, _ = await self.active_controller()
        figures["killed"] = node_id
        process = quorum.processes[node_id]
        self.down.add(process.name)
        name = f"failover-{size}-{uuid.uuid4().hex[:6]}"
        body = {"name": name, "partitions": 1, "replication_factor": self.rf}
        urls = self.broker_urls()
        started = time.monotonic()
        process.kill()
        for attempt in itertools.count():
            status, answer = await self.call(
                "POST", urls[attempt % len(urls)] + "/v1/topics", body, wait_s=10
            )
            code = answer.get("error_code") if isinstance(answer, dict) else None
            if status == 201 or code == "TOPIC_ALREADY_EXISTS":
                break
            self.progress = f"no topic created yet: {status} {str(answer)[:300]}"
            await asyncio.sleep(0.05)
        figures["failover_s"] = round(time.monotonic() - started, 3)
        self.topics[name] = 1
        new_leader, leader_url = await self.active_controller()
        figures["new_active"] = new_leader
        _, state = await self.call("GET", leader_url + "/v1/quorum", wait_s=10)
        target = state["metadata_offset"] if isinstance(state, dict) else 0
        started = time.monotonic()
        process.start()
        self.down.discard(process.name)
        self.progress = f"controller {node_id} restarted, not caught up yet"
        while True:
            status, state = await self.call("GET", quorum.urls[node_id] + "/v1/quorum", wait_s=2)
            if status == 200 and state.get("metadata_offset", -1) >= target:
                break
            await asyncio.sleep(0.05)
        await self.wait_ready(quorum.urls[node_id])
        figures["restart_caught_up_s"] = round(time.monotonic() - started, 2)
        figures.pop("incomplete", None)
        return figures

    # ------------------------------------------------------------------ the run

    async def step(self, size: int, last: dict[str, Any] | None) -> dict[str, Any]:
        figures: dict[str, Any] = {"partitions": size}
        self.current = figures
        self.phase = "grow"
        self.check_room(size, last)
        figures["create"] = await self.run_phase("create", lambda: self.grow(size))
        say(size, "create", figures["create"])
        isr = await self.run_phase("isr_full", self.wait_isr_full)
        isr["since_create_start_s"] = round(figures["create"]["seconds"] + isr["seconds"], 2)
        figures["isr_full"] = isr
        say(size, "isr_full", isr)
        figures["idle"] = await self.run_phase("idle", self.idle)
        say(size, "idle", figures["idle"])
        figures["propagation"] = await self.run_phase("propagation", lambda: self.propagation(size))
        say(size, "propagation", figures["propagation"])
        figures["produce_fetch"] = await self.run_phase("produce_fetch", self.produce_fetch)
        say(size, "produce_fetch", figures["produce_fetch"])
        if self.args.skip_faults:
            return figures
        if len(self.cluster.processes) > 1:
            figures["kill9"] = await self.run_phase("kill9", self.kill9)
            say(size, "kill9", figures["kill9"])
            figures["shutdown"] = await self.run_phase("shutdown", self.controlled_shutdown)
            say(size, "shutdown", figures["shutdown"])
        if len(self.cluster.quorum.processes) > 1:
            figures["controller"] = await self.run_phase(
                "controller", lambda: self.controller_failover(size)
            )
            say(size, "controller", figures["controller"])
        figures["partitions_at_end"] = self.partitions
        return figures

    async def run(self, result: dict[str, Any]) -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as self.session:
            self.phase = "start"
            await asyncio.sleep(self.args.settle_s)
            self.empty_rss = {
                n: round(rss_mib(p.popen.pid), 1)
                for n, p in self.nodes().items()
                if p.popen is not None
            }
            result["rss_empty_mib"] = self.empty_rss
            last = None
            for size in self.args.sizes:
                self.current = {"partitions": size}
                try:
                    last = await self.step(size, last)
                finally:
                    result["steps"].append(self.current)
                    result["reached_partitions"] = self.partitions


def code_version() -> str | None:
    """The commit the cluster runs (a node restarted mid-run loads the working tree then)."""
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def say(size: int, phase: str, figures: dict[str, Any]) -> None:
    print(f"# P={size:,} {phase}: {json.dumps(figures)}", flush=True)


def make_cluster(root: Path, args: argparse.Namespace) -> Cluster:
    controller_config: dict[str, Any] = {}
    if args.session_timeout_ms != DEFAULT_SESSION_TIMEOUT_MS:
        controller_config = {
            "broker.session.timeout.ms": args.session_timeout_ms,
            "broker.heartbeat.interval.ms": max(100, min(2000, args.session_timeout_ms // 4)),
        }
    cluster = Cluster(root, brokers=args.brokers, controller_config=controller_config)
    if args.controllers != len(cluster.quorum.processes):
        # Cluster always builds a quorum of 3: replace it (nothing has started yet) and point
        # the brokers at the new one
        cluster.quorum = ControllerQuorum(root, size=args.controllers, config=controller_config)
        controllers = ",".join(cluster.quorum.urls.values())
        for process in cluster.processes.values():
            process.args[process.args.index("--controllers") + 1] = controllers
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=lambda s: sorted(int(x) for x in s.split(",")),
        default=[1000, 10_000, 30_000, 100_000],
        help="total partitions to grow to, comma-separated",
    )
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--controllers", type=int, default=3)
    parser.add_argument("--partitions-per-topic", type=int, default=100)
    parser.add_argument("--create-concurrency", type=int, default=4)
    parser.add_argument(
        "--topics-per-request",
        type=int,
        default=1,
        help='more than 1: the batch form of POST /v1/topics ({"topics": [...]})',
    )
    parser.add_argument("--concurrency", type=int, default=64, help="produce/fetch, describes")
    parser.add_argument("--probe-concurrency", type=int, default=1000)
    parser.add_argument(
        "--probe-partitions-per-topic",
        type=int,
        default=0,
        help="probe this many partitions of each topic after a fault (0: all of them)",
    )
    parser.add_argument(
        "--probe-timeout-ms",
        type=int,
        default=2000,
        help="timeout_ms of each acks=all probe: a write stuck longer is retried",
    )
    parser.add_argument("--propagation-samples", type=int, default=20)
    parser.add_argument("--idle-s", type=float, default=10)
    parser.add_argument("--settle-s", type=float, default=2)
    parser.add_argument("--rebalance-wait-s", type=float, default=40)
    parser.add_argument("--shutdown-wait-s", type=float, default=60)
    parser.add_argument("--session-timeout-ms", type=int, default=DEFAULT_SESSION_TIMEOUT_MS)
    parser.add_argument("--timeout-s", type=float, default=600, help="per phase")
    parser.add_argument("--min-free-mib", type=float, default=1024)
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the data dir and logs")
    args = parser.parse_args()

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    root = Path(tempfile.mkdtemp(prefix="kl-bench-scale-"))
    result: dict[str, Any] = {
        "bench": "scale",
        "brokers": args.brokers,
        "controllers": args.controllers,
        "replication_factor": min(3, args.brokers),
        "partitions_per_topic": args.partitions_per_topic,
        "session_timeout_ms": args.session_timeout_ms,
        "machine_cores": os.cpu_count(),
        "code": code_version(),
        "steps": [],
        "reached_partitions": 0,
        "stopped": None,
    }
    cluster = None
    bench = None
    try:
        cluster = make_cluster(root, args)
        bench = ScaleBench(cluster, args)
        cluster.start()
        asyncio.run(bench.run(result))
    except Stop as stop:
        size = bench.current["partitions"] if bench else None
        result["stopped"] = {"size": size, "phase": stop.phase, "reason": stop.reason}
    except BaseException as exc:  # never end without the JSON line
        size = bench.current["partitions"] if bench else None
        phase = bench.phase if bench else "start"
        result["stopped"] = {"size": size, "phase": phase, "reason": f"{exc!r}"}
    finally:
        if cluster is not None:
            cluster.stop()
        if args.keep:
            result["data_dir"] = str(root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    if code_version() != result["code"]:
        result["code_at_end"] = code_version()
        print(f"# the code changed during the run: {result['code']} -> {result['code_at_end']}")
    if result["stopped"]:
        stopped = result["stopped"]
        print(
            f"# stopped growing at P={stopped['size']}, phase {stopped['phase']}: "
            f"{stopped['reason']}",
            flush=True,
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
