"""Seeded random faults, one at a time, on a `Cluster(faults=True)`: the randomized chaos
test and scripts/chaos.py share it. The seed fixes the sequence of faults and their victims
(not the timing of the processes, which the machine decides)."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.checker import (
    Violation,
    committed_offsets_monotone,
    consumed_as_compacted,
    consumed_as_logged,
)
from tests.harness.hosts import Shape, TestNet
from tests.harness.observe import (
    GroupReader,
    Producer,
    check_partition,
    create,
    key_of,
    partition_0,
    read_partition,
    wait_for_full_isr,
    wait_until,
)
from tests.harness.processes import FAST_SESSIONS, Cluster, http

GROUP_SESSION_MS = 6000
FAULTS = (
    "kill -9 broker",
    "pause broker",
    "cut broker from controllers",
    "cut broker from brokers",
    "cut link between brokers",
    "isolate broker",
    "kill -9 controller",
    "pause controller",
    "cut controller from controllers",
)
# Faults of packets, on test hosts only (Cluster(net=...); tests/harness/hosts.py)
NET_FAULTS = (
    "silence broker",
    "silence controller",
    "pull the cable of broker",
    "slow lossy link of broker",
)


@dataclass
class Nemesis:
    cluster: Cluster
    rng: random.Random
    log: Callable[[str], None] = print
    injected: list[str] = field(default_factory=list)
    _undo: Callable[[], None] | None = None

    def inject(self) -> str:
        """Apply one random fault; `heal` undoes it."""
        assert self._undo is None, "one fault at a time"
        network = self.cluster.network
        assert network is not None
        fault = self.rng.choice(FAULTS + NET_FAULTS if isinstance(network, TestNet) else FAULTS)
        brokers = sorted(self.cluster.processes)
        broker = self.rng.choice(brokers)
        mode = self.rng.choice(["reset", "hang"])
        if fault in NET_FAULTS:
            assert isinstance(network, TestNet)
            fault, broker = self._packets(network, fault, broker), -1
        elif fault == "kill -9 broker":
            self.cluster.processes[broker].kill()
            self._undo = self.cluster.processes[broker].start
        elif fault == "pause broker":
            self.cluster.processes[broker].pause()
            self._undo = self.cluster.processes[broker].resume
        elif fault == "cut broker from controllers":
            self.cluster.cut_from_controllers(broker, mode)
            self._undo = network.heal
        elif fault == "cut broker from brokers":
            peers = [f"broker-{b}" for b in brokers if b != broker]
            network.isolate(f"broker-{broker}", peers, mode)
            self._undo = network.heal
        elif fault == "isolate broker":  # from the controllers and the other brokers
            self.cluster.cut_from_controllers(broker, mode)
            peers = [f"broker-{b}" for b in brokers if b != broker]
            network.isolate(f"broker-{broker}", peers, mode)
            self._undo = network.heal
        elif fault == "cut link between brokers":
            other = self.rng.choice([b for b in brokers if b != broker])
            self.cluster.cut_between_brokers(broker, other, mode)
            fault, broker = f"{fault} {broker}<->{other}", -1
            self._undo = network.heal
        elif fault == "kill -9 controller":
            node = self.rng.choice(sorted(self.cluster.quorum.processes))
            self.cluster.quorum.processes[node].kill()
            self._undo = self.cluster.quorum.processes[node].start
            fault, broker = f"{fault} {node}", -1
        elif fault == "cut controller from controllers":  # its Raft links, both ways
            node = self.rng.choice(sorted(self.cluster.quorum.processes))
            self.cluster.cut_from_other_controllers(node, mode)
            self._undo = network.heal
            fault, broker = f"{fault} {node}", -1
        else:
            node = self.rng.choice(sorted(self.cluster.quorum.processes))
            self.cluster.quorum.processes[node].pause()
            self._undo = self.cluster.quorum.processes[node].resume
            fault, broker = f"{fault} {node}", -1
        described = fault if broker < 0 else f"{fault} {broker}"
        if "cut" in fault or "isolate" in fault:
            described += f" ({mode})"
        self.injected.append(described)
        self.log(f"fault: {described}")
        return described

    def _packets(self, net: TestNet, fault: str, broker: int) -> str:
        host = f"broker-{broker}"
        if fault == "silence controller":
            host = f"controller-{self.rng.choice(sorted(self.cluster.quorum.processes))}"
        if fault.startswith("silence"):
            net.silence(host)
            self._undo = net.heal
        elif fault == "pull the cable of broker":
            net.cut_link(host)
            self._undo = net.heal
        else:  # what must not get a broker fenced (issue 28): 100 +- 100 ms, 5 % lost
            before = net.faults.shapes.get(host, Shape())
            net.shape(host, delay_ms=100, jitter_ms=100, loss_pct=5)
            self._undo = lambda: net.shape(host, **vars(before))
        return f"{fault.rsplit(' ', 1)[0]} {host}"

    def heal(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None
            self.log("healed")

    def run(self, seconds: float, hold_s: tuple[float, float] = (1.0, 4.0)) -> None:
        """Faults for `seconds`: each held for a random time in `hold_s`, then healed and
        followed by as long a quiet time."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.inject()
            time.sleep(self.rng.uniform(*hold_s))
            self.heal()
            time.sleep(self.rng.uniform(*hold_s))
        self.heal()


@dataclass
class ChaosResult:
    seed: int
    acked: int
    faults: list[str]
    unavailable_s: float
    violations: list[Violation]
    readable: int = 0  # records readable at the end (fewer than acked: the cleaner ran)

    @property
    def lost(self) -> int:
        return sum(v.invariant == "lost" for v in self.violations)

    def summary(self) -> dict[str, Any]:
        return {
            "bench": "chaos",
            "acked": self.acked,
            "lost": self.lost,
            "faults": len(self.faults),
            "unavailable_s": round(self.unavailable_s, 1),
            "seed": self.seed,
            "violations": [str(v) for v in self.violations[:20]],
        }


def unavailable_seconds(acked_at: list[float], start: float, end: float, gap_s: float) -> float:
    """Total time in stretches of more than `gap_s` with no acknowledgement."""
    times = [start, *sorted(t for t in acked_at if start <= t <= end), end]
    return sum(b - a for a, b in itertools.pairwise(times) if b - a > gap_s)


@dataclass(eq=False)
class Mover(threading.Thread):
    """Moves the topic's replicas while the faults run (the elastic cluster, issue 14): its
    replication factor goes 3 -> 2 -> 3 -> ... every few seconds (a replica deleted, then one
    copied back from the leader), through random serving brokers. A change the faults
    refuse (too few live brokers, no controller) is tried again at the next turn; `settle`
    brings it back to 3 and waits for the move to complete."""

    cluster: Cluster
    topic: str
    rng: random.Random
    log: Callable[[str], None] = print
    changes: list[int] = field(default_factory=list)
    stop_flag: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def _alter(self, factor: int) -> bool:
        serving = [self.cluster.urls[b] for b, p in self.cluster.processes.items() if p.serving]
        try:
            status, _ = http(
                "PATCH",
                self.rng.choice(serving) + f"/v1/topics/{self.topic}",
                {"replication_factor": factor},
                timeout=10,
            )
        except OSError:
            return False
        return status == 202

    def run(self) -> None:
        factor = 2
        while not self.stop_flag.wait(self.rng.uniform(2.0, 4.0)):
            if self._alter(factor):
                self.changes.append(factor)
                self.log(f"move: replication factor {factor}")
                factor = 5 - factor

    def settle(self) -> None:
        self.stop_flag.set()
        self.join(15)
        wait_until(lambda: self._alter(3), timeout_s=60, what="replication factor 3 again")


# A compacted topic cleaned as soon as anything is dirty, tombstones and all (issue 26)
EAGER_COMPACTION = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}


def chaos_run(
    root: Path,
    seconds: float,
    seed: int,
    log: Callable[[str], None] = print,
    moves: bool = False,
    compacted: bool = False,
    net: TestNet | None = None,
) -> ChaosResult:
    """A cluster (3 controllers, 3 brokers), a topic with min.insync.replicas=2, two acks=all
    producers through random brokers and two members of a consumer group reading it, random
    faults for `seconds` (with `moves`, its replicas moving meanwhile: Mover); then heal,
    wait for the whole ISR and for the group to have consumed everything, stop, check.
    `compacted`: the topic is compacted (every replica's cleaner running every 200 ms all
    along) and the producers send keyed records. With `net` (hosts named as the processes;
    the calling thread inside another), the nodes run on test hosts and the faults include
    those of packets (NET_FAULTS)."""
    rng = random.Random(seed)
    cluster = Cluster(
        root,
        broker_config={
            "replica.lag.time.max.ms": 2000,
            # a new coordinator freezes assignments for this long (groups.md): keep it short
            "group.consumer.max.session.timeout.ms": GROUP_SESSION_MS,
            "log.cleaner.backoff.ms": 200,
        },
        controller_config=FAST_SESSIONS,
        faults=net is None,
        net=net,
    )
    try:
        cluster.start()
        configs = EAGER_COMPACTION if compacted else {}
        create(cluster, "chaos", **{"min.insync.replicas": 2, **configs})
        pickers = [random.Random(seed + i) for i in (1, 2)]
        producers = [
            Producer(
                cluster,
                "chaos",
                keyed=compacted,
                target=lambda picker=picker: picker.choice(
                    [cluster.urls[b] for b, p in cluster.processes.items() if p.serving]
                ),
            )
            for picker in pickers
        ]
        readers = [
            GroupReader(cluster, "chaos", "chaos-readers", session_timeout_ms=GROUP_SESSION_MS)
            for _ in range(2)
        ]
        start = time.monotonic()
        for thread in [*producers, *readers]:
            thread.start()
        nemesis = Nemesis(cluster, rng, log)
        mover = Mover(cluster, "chaos", random.Random(seed + 3), log) if moves else None
        if mover is not None:
            mover.start()
        nemesis.run(seconds)
        end = time.monotonic()
        if mover is not None:
            mover.settle()
            nemesis.injected += [f"replication factor {f}" for f in mover.changes]
        wait_for_full_isr(cluster, "chaos", timeout_s=90)
        for producer in producers:
            producer.stop()
        violations = _group_violations(cluster, readers, producers, compacted=compacted)
        refused = set().union(*(p.refused for p in producers))
        acked_at = [a.done_at for p in producers for a in p.answers if a.status == 200]
        readable = len(read_partition(cluster, "chaos")[1])
        violations += check_partition(
            cluster, "chaos", *(p.acked for p in producers), refused=refused, compacted=compacted
        )
        return ChaosResult(
            seed=seed,
            acked=sum(len(p.acked) for p in producers),
            faults=nemesis.injected,
            unavailable_s=unavailable_seconds(acked_at, start, end, gap_s=1.0),
            violations=violations,
            readable=readable,
        )
    finally:
        cluster.close()


def _group_violations(
    cluster: Cluster,
    readers: list[GroupReader],
    producers: list[Producer],
    *,
    compacted: bool = False,
) -> list[Violation]:
    """Once the group has consumed up to the high watermark (or gave up waiting): it read
    only committed records, skipped none (on a compacted topic: none that the cleaner
    keeps), and its committed offsets never went back."""
    highest = max((max(p.acked) for p in producers if p.acked), default=-1)
    wait_until(  # a new leader's HW can lag what was acknowledged: as check_partition
        lambda: (partition_0(cluster, "chaos")["high_watermark"] or 0) > highest,
        what="the high watermark above every acknowledged offset",
    )
    _, readable = read_partition(cluster, "chaos")
    wanted = {offset for offset, _ in readable}
    if compacted:  # the records a pass keeps (others may go before a reader gets them)
        newest: dict[bytes, int] = {}
        for offset, value in readable:
            newest[key_of(value)] = offset
        wanted = set(newest.values())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not wanted <= set().union(
        *(r.offsets() for r in readers)
    ):
        time.sleep(0.5)
    for reader in readers:
        reader.stop()
    _, readable = read_partition(cluster, "chaos")  # what they read may be past the first read
    consumed = [record for reader in readers for record in reader.consumed]
    if compacted:  # what the first read held may be cleaned away before a reader got it
        seen = [observation for reader in readers for observation in reader.committed_seen]
        return consumed_as_compacted(consumed, readable, key_of) + committed_offsets_monotone(seen)
    violations = consumed_as_logged(consumed, readable)
    missed = sorted(wanted - {offset for offset, _ in consumed})
    if missed:
        violations.append(
            Violation("consumed", f"the group never consumed {len(missed)} offsets: {missed[:10]}")
        )
    seen = [observation for reader in readers for observation in reader.committed_seen]
    return violations + committed_offsets_monotone(seen)
