"""Seeded random faults on a local cluster under acks=all load, then the fault checker.

Starts 3 controllers and 3 brokers (each its own process, brokers behind the fault-injecting
proxy of tests/harness/network.py), produces acks=all to a topic with min.insync.replicas=2
through random brokers while two consumer-group members read it, and for --seconds injects
one random fault at a time (kill -9 or pause of a broker, a broker cut off from the
controllers or the other brokers, a cut link between two brokers, kill -9 or pause of a
controller, a controller's Raft links cut), each held 1-4 s, then healed. Then it waits for
the whole ISR and for the group to consume everything, stops the cluster and checks every
invariant (docs/design/fault-injection.md).
The last line is JSON: {"bench": "chaos", "acked", "lost", "faults", "unavailable_s", "seed",
"violations"}; the exit status is 1 if any invariant was violated.

With --transactions the load is a consume-transform-produce job of Kafka clients with
exactly-once processing instead (tests/harness/txn_chaos.py), checked by a read_committed
reader: no aborted record, every transaction whole, each input's output once; the last line
is then {"bench": "txn-chaos", "inputs", "committed", "aborted", "unknown", "restarts",
"faults", "seed", "violations"}.

Run: python scripts/chaos.py --seconds 600 --seed 7 [--keep DIR] [--transactions]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests.harness package

from kraftlite.logs import configure_logging
from tests.harness.nemesis import chaos_run
from tests.harness.txn_chaos import txn_chaos_run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=None, help="default: from the clock")
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it (logs)")
    parser.add_argument(
        "--compacted",
        action="store_true",
        help="a compacted topic, keyed records, and every replica's cleaner running",
    )
    parser.add_argument(
        "--moves",
        action="store_true",
        help="move the topic's replicas meanwhile (its replication factor 3 -> 2 -> 3 ...)",
    )
    parser.add_argument(
        "--transactions",
        action="store_true",
        help="a transactional consume-transform-produce job (Kafka clients) as the load",
    )
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else time.time_ns() % 1_000_000

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)

    # The group members' client logs every retry at debug: only warnings here.
    configure_logging(role="chaos", node_id=None, log_format="console", level="warning")
    log(f"chaos: seed {seed}, {args.seconds:g} s of faults")

    def run(root: Path) -> Any:
        if args.transactions:
            return txn_chaos_run(root, args.seconds, seed, log)
        return chaos_run(root, args.seconds, seed, log, moves=args.moves, compacted=args.compacted)

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = run(args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="kraftlite-chaos-") as root:
            result = run(Path(root))
    print(json.dumps(result.summary()), flush=True)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
