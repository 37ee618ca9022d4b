"""A stranger floods the active controller's Raft port: does the quorum keep committing?

Starts 3 controllers and 1 broker (each its own process, tests/harness), creates a topic, and
commits metadata changes one after another (PUT /v1/topics/probe/configs on the active
controller; each is one Raft commit) for --seconds without a flood (baseline), then for
--seconds while a thread streams junk into the active controller's Raft port: a 4-byte
header declaring a --mib MiB message, then --mib MiB of random bytes, reconnecting each time
the controller closes the connection (issue 12's attack; pysyncobj 0.3.17 itself buffered
such a message with quadratic copies and starved its tick thread).

Prints, per phase: commits, failed commits, commit latency p50 / p99 / max, whether the
broker was fenced; for the flood: connections opened, how long each stayed open, the bytes
the stranger got into the socket, and the bytes the controller says it read before closing
(its "raft port: closed" log lines). The last line is JSON.

Run: .venv/bin/python scripts/flood_raft.py [--seconds 10] [--mib 64]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests.harness package

from tests.harness.processes import Cluster, http
from tests.security.raft_strangers import MiB, Stranger


@dataclass
class Phase:
    latencies_ms: list[float] = field(default_factory=list)
    failures: int = 0
    no_leader: int = 0  # attempts that found no agreed active controller within 5 s
    fenced_seen: bool = False
    longest_gap_ms: float = 0.0  # the longest stretch without a commit

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        return {
            "commits": len(lat),
            "failed": self.failures,
            "p50_ms": round(statistics.median(lat), 1) if lat else None,
            "p99_ms": round(lat[int(0.99 * (len(lat) - 1))], 1) if lat else None,
            "max_ms": round(lat[-1], 1) if lat else None,
            "no_leader": self.no_leader,
            "longest_gap_ms": round(self.longest_gap_ms, 1),
            "broker_fenced": self.fenced_seen,
        }


def commit_for(cluster: Cluster, seconds: float, phase: Phase, counter: list[int]) -> None:
    deadline = time.monotonic() + seconds
    next_fence_check = 0.0
    last_commit = time.monotonic()
    while time.monotonic() < deadline:
        counter[0] += 1
        phase.longest_gap_ms = max(phase.longest_gap_ms, (time.monotonic() - last_commit) * 1000)
        try:
            url = cluster.quorum.urls[cluster.quorum.leader(timeout_s=5)]
        except AssertionError:
            phase.no_leader += 1
            continue
        started = time.monotonic()
        try:
            status, _ = http(
                "PUT",
                url + "/v1/topics/probe/configs",
                {"configs": {"retention.ms": str(3_600_000 + counter[0])}},
                timeout=15,
            )
        except OSError:
            status = 0
        elapsed_ms = (time.monotonic() - started) * 1000
        if status == 200:
            phase.latencies_ms.append(elapsed_ms)
            phase.longest_gap_ms = max(
                phase.longest_gap_ms, (time.monotonic() - last_commit) * 1000
            )
            last_commit = time.monotonic()
        else:
            phase.failures += 1
        if time.monotonic() > next_fence_check:
            next_fence_check = time.monotonic() + 0.5
            try:
                _, body = http("GET", url + "/v1/cluster", timeout=15)
                phase.fenced_seen |= any(b["fenced"] for b in body["brokers"])
            except (OSError, KeyError, TypeError):
                pass
    phase.longest_gap_ms = max(phase.longest_gap_ms, (time.monotonic() - last_commit) * 1000)


def server_reads(cluster: Cluster, node_id: int) -> list[int]:
    """Bytes read per closed stranger connection, from the controller's log lines."""
    text = cluster.quorum.processes[node_id].log_path.read_text(errors="replace")
    return [int(m) for m in re.findall(r"raft port: closed .*? after (\d+) bytes", text)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--mib", type=int, default=64, help="declared message size, MiB")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="flood-raft-") as tmp:
        cluster = Cluster(Path(tmp) / "flood", brokers=1)
        try:
            cluster.start()
            status, body = http(
                "POST",
                cluster.urls[1] + "/v1/topics",
                {"name": "probe", "partitions": 1, "replication_factor": 1},
            )
            assert status == 201, body
            counter = [0]
            baseline = Phase()
            commit_for(cluster, args.seconds, baseline, counter)

            target = cluster.quorum.leader()
            raft = cluster.quorum.processes[target].args
            header = struct.pack("i", args.mib * MiB)
            flood = Stranger(raft[raft.index("--raft") + 1], header, threading.Event())
            flood.total = len(header) + args.mib * MiB
            flooder = flood.start()
            flooding = Phase()
            commit_for(cluster, args.seconds, flooding, counter)
            flood.stop.set()
            flooder.join(timeout=60)
            time.sleep(0.5)  # let the last close reach the log
            reads = server_reads(cluster, target)
        finally:
            cluster.close()

    open_s = sorted(a.open_s for a in flood.attempts)
    sent = sorted(a.sent for a in flood.attempts)
    result = {
        "declared_mib": args.mib,
        "phase_s": args.seconds,
        "baseline": baseline.summary(),
        "flood": flooding.summary(),
        "flooded_controller": target,
        "stranger": {
            "connections": len(flood.attempts),
            "closed_by_server": sum(a.closed_by_server for a in flood.attempts),
            "refused": flood.refused,
            "open_ms_p50": round(1000 * statistics.median(open_s), 1) if open_s else None,
            "open_ms_max": round(1000 * open_s[-1], 1) if open_s else None,
            "bytes_sent_p50": statistics.median(sent) if sent else None,
            "bytes_sent_max": sent[-1] if sent else None,
            "bytes_sent_total": sum(sent),
        },
        "server": {
            "closed_logged": len(reads),
            "bytes_read_max": max(reads) if reads else None,
        },
    }
    for name in ("baseline", "flood"):
        print(f"{name:9s} {json.dumps(result[name])}")
    print(f"stranger  {json.dumps(result['stranger'])}")
    print(f"server    {json.dumps(result['server'])}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
