"""The chaos suite's transactional workload (issue 27): a consume-transform-produce job of
Kafka clients (librdkafka, confluent-kafka) with exactly-once processing, under the seeded
random faults of nemesis.py (kill -9, SIGSTOP and cut links of brokers, so of partition
leaders and the transaction coordinator, and of controllers, the active one among them),
then checked (checker.py invariant 7) by a read_committed reader of its output.

The faults: first those the issue names (kill -9 of a transaction coordinator, SIGSTOP of
an output partition's leader, the active controller cut from the others), then random ones.
The job: WORKERS threads, each a read_committed consumer of `txn-in` in one group and a
transactional producer of its own id. Each poll's records become one transaction: their
outputs to `txn-out` (each naming its input, its transaction and the transaction's size)
and the consumer's positions (send_offsets_to_transaction), committed together. A failed
transaction is aborted and the consumer rewound to its committed offsets; a fenced or
otherwise broken worker starts again with a new consumer and a new producer of the same
transactional id (which fences what is left of the old one). A commit or an abort whose
answer never came is neither: the checker takes it either way, whole or not at all.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from kraftlite.protocol.headers import NO_FORWARD
from tests.harness.checker import (
    TxnOutput,
    Violation,
    outputs_exactly_once,
    transactions_seen_whole,
)
from tests.harness.nemesis import Nemesis
from tests.harness.observe import wait_until
from tests.harness.processes import FAST_SESSIONS, Cluster, http

WORKERS = 2
PARTITIONS = 3
SESSION_MS = 6000
TRANSACTION_TIMEOUT_MS = 10_000
PAUSE_S = 0.1


@dataclass
class Ledger:
    """What the workers learnt of their transactions' outcomes."""

    committed: set[str] = field(default_factory=set)
    aborted: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    restarts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, outcome: str, transaction: str) -> None:
        with self.lock:
            {"committed": self.committed, "aborted": self.aborted, "unknown": self.unknown}[
                outcome
            ].add(transaction)


class RestartError(Exception):
    """The worker's producer or consumer cannot go on: start both again."""


@dataclass(eq=False)
class Worker(threading.Thread):
    cluster: Cluster
    index: int
    ledger: Ledger
    stop_flag: threading.Event = field(default_factory=threading.Event)
    sequence: int = 0

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True, name=f"txn-worker-{self.index}")

    def _clients(self) -> tuple[Consumer, Producer]:
        consumer = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "group.id": "txn-workers",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_MS,
                "log_level": 0,
            }
        )
        consumer.subscribe(["txn-in"])
        producer = Producer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "transactional.id": f"txn-worker-{self.index}",
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 5,
                "log_level": 0,
            }
        )
        producer.init_transactions(60)
        return consumer, producer

    def run(self) -> None:
        while not self.stop_flag.is_set():
            try:
                consumer, producer = self._clients()
            except KafkaException:
                time.sleep(0.5)  # the cluster is not there for it now: try again
                continue
            try:
                while not self.stop_flag.is_set():
                    self._one_transaction(consumer, producer)
            except RestartError:
                with self.ledger.lock:
                    self.ledger.restarts += 1
            finally:
                consumer.close()

    def _one_transaction(self, consumer: Consumer, producer: Producer) -> None:
        messages = [m for m in consumer.consume(num_messages=10, timeout=0.5) if not m.error()]
        if not messages:
            return
        time.sleep(PAUSE_S)  # the job's own work: it spans the faults
        self.sequence += 1
        name = f"w{self.index}-{self.sequence}-{random.getrandbits(32):08x}"
        try:
            producer.begin_transaction()
            for message in messages:
                output = {"in": message.value().decode(), "txn": name, "n": len(messages)}
                producer.produce("txn-out", json.dumps(output).encode(), key=message.key())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            self._commit(producer, name)
        except KafkaException as exc:
            self._failed(consumer, producer, name, exc.args[0])

    def _commit(self, producer: Producer, name: str) -> None:
        for _ in range(5):
            try:
                producer.commit_transaction(30)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.retriable():  # its outcome unknown yet: ask again (librdkafka's rule)
                    continue
                raise
            self.ledger.note("committed", name)
            return
        self.ledger.note("unknown", name)
        raise RestartError(name)

    def _failed(self, consumer: Consumer, producer: Producer, name: str, error: KafkaError) -> None:
        if not error.txn_requires_abort():
            self.ledger.note("unknown", name)  # fenced, or fatal: maybe committed, maybe not
            raise RestartError(name)
        try:
            producer.abort_transaction(30)
        except KafkaException:
            self.ledger.note("unknown", name)
            raise RestartError(name) from None
        self.ledger.note("aborted", name)
        self._rewind(consumer)

    @staticmethod
    def _rewind(consumer: Consumer) -> None:
        """Back to the group's committed offsets: what the aborted transaction read is read
        again."""
        try:
            committed = consumer.committed(consumer.assignment(), timeout=30)
            for tp in committed:
                offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as exc:
            raise RestartError("rewind") from exc


@dataclass
class TxnChaosResult:
    seed: int
    inputs: int
    faults: list[str]
    ledger: Ledger
    violations: list[Violation]

    def summary(self) -> dict[str, Any]:
        return {
            "bench": "txn-chaos",
            "inputs": self.inputs,
            "committed": len(self.ledger.committed),
            "aborted": len(self.ledger.aborted),
            "unknown": len(self.ledger.unknown),
            "restarts": self.ledger.restarts,
            "faults": len(self.faults),
            "seed": self.seed,
            "violations": [str(v) for v in self.violations[:20]],
        }


def read_committed_outputs(cluster: Cluster, idle_s: float = 5.0) -> list[TxnOutput]:
    """Every record of `txn-out` a read_committed consumer reads from the start, until none
    came for `idle_s`."""
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"txn-checker-{random.getrandbits(32):08x}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    reader.assign([TopicPartition("txn-out", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: list[TxnOutput] = []
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s:
            for message in reader.consume(num_messages=500, timeout=0.5):
                if message.error():
                    continue
                data = json.loads(message.value())
                seen.append(TxnOutput(data["in"], data["txn"], data["n"]))
                last = time.monotonic()
    finally:
        reader.close()
    return seen


def txn_chaos_run(
    root: Path, seconds: float, seed: int, log: Callable[[str], None] = print, inputs: int = 3000
) -> TxnChaosResult:
    """A cluster (3 controllers, 3 brokers, Kafka listeners), `inputs` records in `txn-in`,
    the job running through random faults for `seconds`, then healed and left to finish;
    then the checks."""
    rng = random.Random(seed)
    cluster = Cluster(
        root,
        broker_config={
            "replica.lag.time.max.ms": 2000,
            "group.consumer.max.session.timeout.ms": SESSION_MS,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
        },
        controller_config=FAST_SESSIONS,
        faults=True,
        kafka=True,
    )
    try:
        cluster.start()
        for topic in ("txn-in", "txn-out"):
            cluster.create_topic(topic, PARTITIONS, 3, configs={"min.insync.replicas": 2})
        sources = [str(i) for i in range(inputs)]
        writer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
        for i, source in enumerate(sources):
            writer.produce("txn-in", source.encode(), partition=i % PARTITIONS)
        assert writer.flush(60) == 0, "the input was not all written"
        ledger = Ledger()
        workers = [Worker(cluster, i, ledger) for i in range(WORKERS)]
        for worker in workers:
            worker.start()
        nemesis = Nemesis(cluster, rng, log)
        targeted = _targeted_faults(cluster, rng, log)
        nemesis.run(seconds)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _all_read(
            read_committed_outputs(cluster, 1.0), sources
        ):
            time.sleep(1)
        for worker in workers:
            worker.stop_flag.set()
        for worker in workers:
            worker.join(60)
        seen = read_committed_outputs(cluster)
        violations = transactions_seen_whole(seen, ledger.committed, ledger.aborted)
        violations += outputs_exactly_once(sources, seen)
        return TxnChaosResult(seed, inputs, targeted + nemesis.injected, ledger, violations)
    finally:
        cluster.close()


def _targeted_faults(
    cluster: Cluster, rng: random.Random, log: Callable[[str], None], hold_s: float = 2.0
) -> list[str]:
    """Before the random ones, the faults the issue names, each held `hold_s` then healed:
    kill -9 of worker 0's transaction coordinator, SIGSTOP of `txn-out` partition 0's
    leader, the active controller cut from the other controllers."""
    done = []
    coordinator = _coordinator(cluster, "txn-worker-0")
    cluster.processes[coordinator].kill()
    done.append(f"kill -9 transaction coordinator {coordinator}")
    log(f"fault: {done[-1]}")
    time.sleep(hold_s)
    cluster.processes[coordinator].start()
    time.sleep(hold_s)
    leader = _leader_of(cluster, "txn-out", 0)
    cluster.processes[leader].pause()
    done.append(f"pause leader {leader}")
    log(f"fault: {done[-1]}")
    time.sleep(hold_s)
    cluster.processes[leader].resume()
    time.sleep(hold_s)
    active = cluster.quorum.leader()
    cluster.cut_from_other_controllers(active, rng.choice(["reset", "hang"]))
    done.append(f"cut active controller {active} from controllers")
    log(f"fault: {done[-1]}")
    time.sleep(hold_s)
    cluster.heal()
    log("healed")
    return done


def _coordinator(cluster: Cluster, transactional_id: str) -> int:
    """The broker that answers for the id itself (the others, told not to forward, answer
    421 NOT_COORDINATOR)."""

    def answering() -> int | None:
        for broker, url in cluster.urls.items():
            try:
                status, _ = http(
                    "GET", url + f"/v1/transactions/{transactional_id}", headers={NO_FORWARD: "1"}
                )
            except OSError:
                continue
            if status == 200:
                return broker
        return None

    found: int = wait_until(answering, what=f"{transactional_id}'s coordinator")
    return found


def _leader_of(cluster: Cluster, topic: str, partition: int) -> int:
    def leader() -> int | None:
        for url in cluster.urls.values():
            try:
                status, described = http("GET", url + f"/v1/topics/{topic}", timeout=2)
            except OSError:
                continue
            if status == 200:
                found = described["partitions"][partition]["leader"]
                return found if found in cluster.processes else None
        return None

    found: int = wait_until(leader, what=f"{topic}-{partition}'s leader")
    return found


def _all_read(seen: list[TxnOutput], sources: list[str]) -> bool:
    return set(sources) <= {record.source for record in seen}
