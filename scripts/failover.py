"""How long a partition or the controller quorum is unavailable after a node dies.

Starts 3 controllers and 3 brokers (each its own process) with the given
`broker.session.timeout.ms`, and measures, --runs times each, median and max:

  broker  kill -9 of a partition's leader under acks=all load -> the first acks=all write
          acknowledged again (through another broker): the session timeout, then the
          election, then the followers' first fetches from the new leader
  controller  kill -9 of the active controller -> the first topic created again (the
          Raft election, then the new active controller catching up)

The last line is JSON. Run: python scripts/failover.py [--runs 3] [--session-timeout-ms 9000]
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
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=9000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kraftlite-failover-") as root:
        cluster = Cluster(
            Path(root),
            controller_config={
                "broker.session.timeout.ms": args.session_timeout_ms,
                "broker.heartbeat.interval.ms": min(2000, args.session_timeout_ms // 4),
            },
        )
        try:
            cluster.start()
            brokers = [broker_failover(cluster, run) for run in range(args.runs)]
            controllers = [controller_failover(cluster, run) for run in range(args.runs)]
        finally:
            cluster.close()
    result = {
        "bench": "failover",
        "session_timeout_ms": args.session_timeout_ms,
        "broker_leader_s": {
            "median": round(statistics.median(brokers), 2),
            "max": round(max(brokers), 2),
        },
        "controller_s": {
            "median": round(statistics.median(controllers), 2),
            "max": round(max(controllers), 2),
        },
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
