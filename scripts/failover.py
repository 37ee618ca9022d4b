"""How long a partition or the controller quorum is unavailable after a node dies.

Starts 3 controllers and 3 brokers (each its own process) with the given
`broker.session.timeout.ms`, and measures, --runs times each, median and max:

  broker  kill -9 of a partition's leader under acks=all load -> the first acks=all write
          acknowledged again (through another broker): the dead leader is fenced (in about
          a second: its port refuses the followers' fetches and the controller's probe,
          controller/liveness.py), then the election, then the followers' first fetches
          from the new leader
  broker_baseline  the same with broker.liveness.probes.enable = false: fenced only when
          its session times out (what kraftlite did before fast failure detection)
  controller  kill -9 of the active controller -> the first topic created again (the
          Raft election, then the new active controller catching up)

The last line is JSON. Run: python scripts/failover.py [--runs 10] [--session-timeout-ms 9000]
[--baseline-runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests.harness package

from tests.harness.observe import create, partition_0, wait_for_full_isr, wait_until
from tests.harness.processes import Cluster, http


def write_ok(url: str, topic: str) -> bool:
    try:
        status, _ = http(
            "POST",
            url + f"/v1/topics/{topic}/partitions/0/records?acks=all&timeout_ms=2000",
            {"records": [{"value": "x"}]},
            timeout=5,
        )
    except OSError:
        return False
    return status == 200


def broker_failover(cluster: Cluster, run: int) -> float:
    topic = f"failover-{run}"
    leader = create(cluster, topic, **{"min.insync.replicas": 2})["partitions"][0]["leader"]
    other = next(b for b in cluster.processes if b != leader)
    wait_until(lambda: write_ok(cluster.urls[other], topic), what="a first write")
    cluster.processes[leader].kill()
    killed = time.monotonic()
    wait_until(lambda: write_ok(cluster.urls[other], topic), timeout_s=120, what="failover")
    elapsed = time.monotonic() - killed
    cluster.processes[leader].start()
    wait_for_full_isr(cluster, topic, timeout_s=60)
    assert partition_0(cluster, topic)["leader"] != -1
    return elapsed


def controller_failover(cluster: Cluster, run: int) -> float:
    active = cluster.quorum.leader()
    cluster.quorum.processes[active].kill()
    killed = time.monotonic()

    def created() -> bool:
        try:
            status, _ = http(
                "POST",
                cluster.urls[1] + "/v1/topics",
                {"name": f"after-controller-{run}", "partitions": 1, "replication_factor": 3},
                timeout=5,
            )
        except OSError:
            return False
        return status == 201

    wait_until(created, timeout_s=120, what="a topic created after the controller died")
    elapsed = time.monotonic() - killed
    cluster.quorum.processes[active].start()
    cluster.quorum.leader()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--baseline-runs", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=9000)
    args = parser.parse_args()
    controller_config = {  # heartbeats at their default (500 ms)
        "broker.session.timeout.ms": args.session_timeout_ms,
        "broker.heartbeat.interval.ms": min(500, args.session_timeout_ms // 4),
    }
    with tempfile.TemporaryDirectory(prefix="kraftlite-failover-") as root:
        cluster = Cluster(Path(root) / "fast", controller_config=controller_config)
        try:
            cluster.start()
            brokers = [broker_failover(cluster, run) for run in range(args.runs)]
            print(f"broker failover (s): {[round(b, 2) for b in brokers]}", flush=True)
            controllers = [controller_failover(cluster, run) for run in range(args.runs)]
            print(f"controller failover (s): {[round(c, 2) for c in controllers]}", flush=True)
        finally:
            cluster.close()
        baseline = Cluster(
            Path(root) / "baseline",
            controller_config={**controller_config, "broker.liveness.probes.enable": False},
        )
        try:
            baseline.start()
            slow = [broker_failover(baseline, run) for run in range(args.baseline_runs)]
            print(f"baseline broker failover (s): {[round(b, 2) for b in slow]}", flush=True)
        finally:
            baseline.close()
    result = {
        "bench": "failover",
        "session_timeout_ms": args.session_timeout_ms,
        "broker_leader_s": _summary(brokers),
        "broker_leader_baseline_s": _summary(slow),
        "controller_s": _summary(controllers),
    }
    print(json.dumps(result), flush=True)
    return 0


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2)}


if __name__ == "__main__":
    sys.exit(main())
