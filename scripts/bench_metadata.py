"""Controller-quorum benchmark: committed metadata changes per second, and failover time.

Starts three `kraftlite controller` processes on loopback (in a temp dir), registers one
broker, then measures:
  changes/s   AlterPartition round trips (ISR shrink/expand alternately, each a committed
              change) and topic creations, sent over HTTP to the active controller by a
              few concurrent clients; every change is a Raft commit on a 3-voter quorum.
  failover    kill -9 of the active controller, then the time until a write through a
              survivor commits (the killed controller is restarted before the next round).
The baseline in the same run is a bare aiohttp endpoint answering the same POSTs, the ceiling
of the HTTP round trip on this machine. The last line is one JSON object:
{"bench": "metadata", "changes_per_s", "failover_median_s", "failover_max_s", ...}.

Run: python scripts/bench_metadata.py [--seconds 5] [--failovers 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kraftlite.protocol.internal import AlterPartitionRequest, IsrChange
from tests.harness.processes import ControllerQuorum, http, http_retry


async def alter_partition_loop(
    session: aiohttp.ClientSession, url: str, broker: dict, topic: dict, seconds: float
) -> int:
    """Shrink and expand the ISR of one partition in turn; returns committed changes."""
    deadline = time.monotonic() + seconds
    changes = 0
    state = topic["partitions"][0]
    full = list(state["replicas"])
    while time.monotonic() < deadline:
        new_isr = full[:1] if len(state["isr"]) > 1 else full
        body = AlterPartitionRequest(
            broker["id"],
            broker["epoch"],
            (
                IsrChange(
                    topic["topic_id"],
                    0,
                    state["leader_epoch"],
                    state["partition_epoch"],
                    tuple(new_isr),
                ),
            ),
        ).to_json()
        async with session.post(url + "/v1/internal/alter-partition", json=body) as response:
            answer = await response.json()
            if response.status != 200 or "error_code" in answer["partitions"][0]:
                raise RuntimeError(f"AlterPartition failed: {answer}")
        state = {**state, **answer["partitions"][0]}
        changes += 1
    return changes


async def create_topics_loop(session: aiohttp.ClientSession, url: str, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    created = 0
    while time.monotonic() < deadline:
        name = f"bench-{uuid.uuid4().hex[:12]}"
        async with session.post(
            url + "/v1/topics", json={"name": name, "replication_factor": 1}
        ) as response:
            if response.status != 201:
                raise RuntimeError(f"create topic failed: {await response.text()}")
        created += 1
    return created


async def measure_changes(url: str, brokers: list[dict], seconds: float) -> dict[str, float]:
    async with aiohttp.ClientSession() as session:
        topics = []
        for i in range(len(brokers)):
            async with session.post(
                url + "/v1/topics",
                json={"name": f"isr-{i}-{uuid.uuid4().hex[:6]}", "replication_factor": 1},
            ) as r:
                topic = await r.json()
            # one partition led by each broker: a leader may only alter its own partitions
            assert topic["partitions"][0]["leader"] in {b["id"] for b in brokers}
            topics.append(
                (next(b for b in brokers if b["id"] == topic["partitions"][0]["leader"]), topic)
            )
        started = time.monotonic()
        results = await asyncio.gather(
            *(alter_partition_loop(session, url, b, t, seconds) for b, t in topics),
            create_topics_loop(session, url, seconds),
        )
        elapsed = time.monotonic() - started
    return {
        "alter_partition_per_s": sum(results[:-1]) / elapsed,
        "topic_creations_per_s": results[-1] / elapsed,
        "changes_per_s": sum(results) / elapsed,
    }


async def bare_aiohttp_baseline(seconds: float, clients: int) -> float:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/x", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    count = 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal count
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            async with session.post(f"http://127.0.0.1:{port}/x", json={"a": 1}) as r:
                await r.read()
            count += 1

    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    rate = count / (time.monotonic() - started)
    await runner.cleanup()
    return rate


def register(url: str, broker_id: int) -> dict:
    status, reg = http_retry(
        "POST",
        url + "/v1/internal/brokers",
        {
            "v": 1,
            "broker_id": broker_id,
            "incarnation_id": uuid.uuid4().hex,
            "url": f"http://127.0.0.1:{1000 + broker_id}",
        },
    )
    assert status == 200, reg
    status, beat = http_retry(
        "POST",
        url + f"/v1/internal/brokers/{broker_id}/heartbeat",
        {"v": 1, "broker_epoch": reg["broker_epoch"], "metadata_version": reg["broker_epoch"]},
    )
    assert status == 200, beat
    return {"id": broker_id, "epoch": reg["broker_epoch"]}


def measure_failover(quorum: ControllerQuorum) -> float:
    leader = quorum.leader()
    survivors = [n for n in quorum.urls if n != leader]
    quorum.processes[leader].kill()
    started = time.monotonic()
    while True:  # a write through a survivor (forwarded to whoever leads) commits
        try:
            status, _ = http(
                "POST",
                quorum.urls[survivors[0]] + "/v1/internal/brokers",
                {"v": 1, "broker_id": 99, "incarnation_id": uuid.uuid4().hex, "url": "http://x:1"},
                timeout=5,
            )
        except OSError:
            status = 0
        if status == 200:
            elapsed = time.monotonic() - started
            break
        time.sleep(0.02)
    quorum.processes[leader].start()
    quorum.leader()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--failovers", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kl-bench-meta-") as root:
        quorum = ControllerQuorum(Path(root))
        quorum.start()
        try:
            leader = quorum.leader()
            url = quorum.urls[leader]
            brokers = [register(url, b) for b in (1, 2, 3)]
            runs = []
            baselines = []
            for run in range(args.runs):
                url = quorum.urls[quorum.leader()]
                # nothing heartbeats for these brokers: register them afresh (unfenced) per run
                brokers = [register(url, b) for b in (1, 2, 3)]
                runs.append(asyncio.run(measure_changes(url, brokers, args.seconds)))
                baselines.append(asyncio.run(bare_aiohttp_baseline(args.seconds, 4)))
                print(
                    f"# run {run + 1}: {runs[-1]} (bare aiohttp {baselines[-1]:.0f}/s)", flush=True
                )
            failovers = []
            for i in range(args.failovers):
                failovers.append(measure_failover(quorum))
                print(f"# failover {i + 1}: {failovers[-1]:.2f} s", flush=True)
                # brokers must stay registered: they heartbeat nowhere here, so re-register
                url = quorum.urls[quorum.leader()]
                brokers = [register(url, b) for b in (1, 2, 3)]
        finally:
            quorum.stop()
    changes = statistics.median(r["changes_per_s"] for r in runs)
    print(
        json.dumps(
            {
                "bench": "metadata",
                "changes_per_s": round(changes),
                "alter_partition_per_s": round(
                    statistics.median(r["alter_partition_per_s"] for r in runs)
                ),
                "topic_creations_per_s": round(
                    statistics.median(r["topic_creations_per_s"] for r in runs)
                ),
                "bare_aiohttp_requests_per_s": round(statistics.median(baselines)),
                "failover_median_s": round(statistics.median(failovers), 3),
                "failover_max_s": round(max(failovers), 3),
                "runs": args.runs,
                "failovers": len(failovers),
            }
        )
    )


if __name__ == "__main__":
    main()
