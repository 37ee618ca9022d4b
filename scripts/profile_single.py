"""Profile issue 15's single-record acks=all workload on every node at once.

Starts `kraftlite dev` (3 controllers + 3 brokers), runs bench.py's single-record workload
(4 producers, one 100 B record awaited at a time, 8 partitions, RF 3) and records each node
with py-spy meanwhile: a flame graph per node (SVG) and a table of where the busy samples
go, summed over the three brokers, written to --out (docs/perf/ by default).

Run: python scripts/profile_single.py [--seconds 10] [--out docs/perf] [--label after]
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench  # scripts/bench.py, next to this file

from kraftlite import eventloop

# frames that mean a thread is waiting, not working (py-spy samples them without --idle
# when a thread sits in a C call it cannot see into)
IDLE = ("select (selectors", "_worker (concurrent", "Condition.wait", "Event.wait", "run_forever")
# frames every busy sample of the event loop passes through: not worth a row
ROOTS = (
    "<frozen runpy>", "click/", "asyncio/runners.py", "base_events.py", "asyncio/events.py",
    "kraftlite/__main__.py", "kraftlite/cli/", "kraftlite/eventloop.py", "threading.py",
)  # fmt: skip


def node_pids(dev_pid: int) -> dict[str, int]:
    """The dev cluster's node processes by role and id (their command lines say which)."""
    out = subprocess.run(
        ["pgrep", "-P", str(dev_pid), "-a"], check=False, capture_output=True, text=True
    )
    nodes = {}
    for line in out.stdout.splitlines():
        pid, _, command = line.partition(" ")
        words = command.split()
        for role, flag in (("broker", "--broker-id"), ("controller", "--node-id")):
            if role in words and flag in words:
                nodes[f"{role}-{words[words.index(flag) + 1]}"] = int(pid)
    return nodes


def busy_tables(raw_files: list[Path], top: int) -> str:
    """Where busy samples go over all files (py-spy --format raw): inclusive per function,
    and self (the innermost frame, where the CPU was actually spent)."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for path in raw_files:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            if any(idle in frames[-1] for idle in IDLE):
                continue
            total += int(count)
            own[frames[-1]] += int(count)
            for frame in set(frames):
                inclusive[frame] += int(count)

    def table(counts: collections.Counter[str], rows: int) -> str:
        ranked = [(f, n) for f, n in counts.most_common() if not any(r in f for r in ROOTS)]
        lines = [f"| {n * 100 / total:5.1f} % | `{frame}` |" for frame, n in ranked[:rows]]
        return "\n".join(["| busy samples | function (file:line) |", "|---:|---|", *lines])

    return (
        f"Inclusive (a WebSocket handler runs inside the middlewares that admitted it):\n\n"
        f"{table(inclusive, top)}\n\nSelf:\n\n{table(own, top // 2)}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path("docs/perf"))
    parser.add_argument("--label", default="now")
    parser.add_argument("--top", type=int, default=60)
    args = parser.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    root = Path(tempfile.mkdtemp(prefix="kl-profile-"))
    cluster, bootstrap = bench.start_cluster(root)
    recorders = []
    try:
        nodes = node_pids(cluster.pid)
        workload = argparse.Namespace(seconds=args.seconds, single_producers=4, single_partitions=8)
        bench.fresh_topic(bootstrap, "single-rf3", 8, 3)
        args.out.mkdir(parents=True, exist_ok=True)
        for name, pid in nodes.items():
            for fmt, suffix in (("flamegraph", "svg"), ("raw", "txt")):
                target = (
                    args.out if fmt == "flamegraph" else root
                ) / f"{args.label}-{name}.{suffix}"
                duration = str(int(args.seconds + 2))
                recorders.append(subprocess.Popen(
                    [py_spy, "record", "-p", str(pid), "-r", "100", "-d", duration,
                     "--format", fmt, "-o", str(target), "--nonblocking", "--gil"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))  # fmt: skip
        figures = eventloop.run(
            bench.single_record(bootstrap, 3, workload, [cluster.pid], client=True)
        )
        for recorder in recorders:
            recorder.wait(timeout=60)
        brokers = sorted(root.glob(f"{args.label}-broker-*.txt"))
        summary = args.out / f"{args.label}-summary.md"
        summary.write_text(
            f"# Single-record acks=all, RF 3, 4 producers: {args.label}\n\n"
            f"`python scripts/profile_single.py --label {args.label}` — "
            + ", ".join(f"{k} {v:,.3g}" for k, v in figures.items())
            + "\n\nWhere the three brokers' busy samples go (inclusive, idle waits left out):\n\n"
            + busy_tables(brokers, args.top)
        )
        print(summary.read_text())
    finally:
        for recorder in recorders:
            if recorder.poll() is None:
                recorder.kill()
        cluster.send_signal(signal.SIGTERM)
        cluster.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
