"""Quix Streams on kraftlite (issue 26): a stateful application keeps its state in a
compacted changelog topic it creates itself (`cleanup.policy=compact`, through
CreateTopics), the cleaner compacts it, and the application started again with its local
state gone restores every key's count from the compacted changelog and counts on from
there.

Quix Streams 3.28 pins confluent-kafka below 2.13 and pydantic below 2.14, older than the
project's own, so it runs in a virtualenv of its own under .cache/ (git-ignored), made on
first use from the package index.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.processes import FAST_SESSIONS, Cluster, http, http_retry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

QUIX = "quixstreams==3.28.1"
ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).parent / "apps" / "quix_counter.py"
CHANGELOG = "changelog__counter--words--default"  # Quix Streams' name for the store's


@pytest.fixture(scope="module")
def quix_python() -> Path:
    """The python of a virtualenv with Quix Streams, made once."""
    venv = ROOT / ".cache" / "venvs" / QUIX.replace("==", "-")
    python = venv / "bin" / "python"
    if not (venv / "ready").exists():
        # no pip of its own (ensurepip alone took 3.4 s): this venv's pip installs into it
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)], check=True
        )
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
             "--disable-pip-version-check", QUIX],
            check=True,
            timeout=600,
        )  # fmt: skip
        (venv / "ready").touch()
    return python


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("quix"),
        controller_config=FAST_SESSIONS,
        broker_config={
            "log.cleaner.backoff.ms": 200,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300,
        },
        kafka=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def send_words(cluster: Cluster, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(first, first + count):
        producer.produce("words", key=f"k{i % 3}", value=f"w{i}")
    assert producer.flush(30) == 0


def run_app(python: Path, cluster: Cluster, state: Path, count: int) -> list[dict[str, object]]:
    """The application until it processed `count` words; what it wrote to `counts`."""
    done = subprocess.run(
        [str(python), str(APP), cluster.bootstrap, str(state), str(count)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("COUNTS "))
    return list(json.loads(line.removeprefix("COUNTS ")))


def changelog_records(cluster: Cluster) -> int:
    offset, total = 0, 0
    while True:
        status, answer = http_retry(
            "GET", cluster.urls[1] + f"/v1/topics/{CHANGELOG}/partitions/0/records?offset={offset}"
        )
        assert status == 200, answer
        total += len(answer["records"])
        if answer["next_offset"] >= answer["high_watermark"]:
            return total
        offset = answer["next_offset"]


def test_a_stateful_application_restores_its_state_from_a_compacted_changelog(
    quix_python: Path, cluster: Cluster, tmp_path: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("words", 1, 3)])["words"].result(30)
    send_words(cluster, 0, 60)
    first = run_app(quix_python, cluster, tmp_path / "state-1", 60)
    assert [c["total"] for c in first[-3:]] == [20, 20, 20]

    # the application made its changelog compacted; clean it eagerly, and wait until it is
    status, described = http("GET", cluster.urls[1] + f"/v1/topics/{CHANGELOG}")
    assert status == 200 and described["configs"]["cleanup.policy"] == "compact", described
    status, answer = http(
        "PUT",
        cluster.urls[1] + f"/v1/topics/{CHANGELOG}/configs",
        {"configs": {"min.cleanable.dirty.ratio": "0.01"}},
    )
    assert status == 200, answer
    deadline = time.monotonic() + 60
    while (left := changelog_records(cluster)) > 20:  # 60 writes of 3 keys, cleaned
        assert time.monotonic() < deadline, left
        time.sleep(0.2)

    send_words(cluster, 60, 6)
    again = run_app(quix_python, cluster, tmp_path / "state-2", 6)  # no local state
    assert {(c["word"], c["total"]) for c in again} == {
        (f"w{i}", 22 if i >= 63 else 21) for i in range(60, 66)
    }


EOS_APP = Path(__file__).parent / "apps" / "quix_eos_counter.py"


def committed_counts(cluster: Cluster, quiet_s: float = 2.0) -> list[dict[str, Any]]:
    """What a read_committed consumer reads of `eos-counts`, from the start."""
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"check-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        reader.assign([TopicPartition("eos-counts", p, 0) for p in range(2)])
        found: list[dict[str, Any]] = []
        quiet = time.monotonic()
        while time.monotonic() - quiet < quiet_s:
            message = reader.poll(0.2)
            if message is None or message.error() is not None:
                continue
            found.append(json.loads(message.value()))
            quiet = time.monotonic()
        return found
    finally:
        reader.close()


def test_exactly_once_processing_killed_and_restarted_counts_every_word_once(
    quix_python: Path, cluster: Cluster, tmp_path: Path
) -> None:
    """Issue 27: Quix Streams with processing_guarantee=exactly-once (Kafka transactions:
    its output, its changelog and its input offsets committed together), killed with
    SIGKILL mid-stream and started again on the same state: every word is counted exactly
    once, each key's totals run 1, 2, 3... with no gap and no repeat."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name in ("eos-words", "eos-counts"):
        admin.create_topics([NewTopic(name, 2, 3)])[name].result(30)
    words = 150
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(words):
        producer.produce("eos-words", key=f"k{i % 5}", value=f"w{i}")
    assert producer.flush(30) == 0
    state = tmp_path / "eos-state"
    for run, until in ((1, words // 3), (2, words)):
        log_path = tmp_path / f"eos-{run}.log"
        with log_path.open("w") as log_file:
            app = subprocess.Popen(
                [str(quix_python), str(EOS_APP), cluster.bootstrap, str(state), "0.01"],
                stdout=subprocess.DEVNULL,
                stderr=log_file,
            )
        try:
            deadline = time.monotonic() + 180
            while len(committed_counts(cluster, quiet_s=0.3)) < until:
                assert app.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, f"run {run} stalled"
        finally:
            app.kill()  # SIGKILL: whatever its open transaction holds is aborted
            app.wait(30)
    counts = committed_counts(cluster)
    assert len(counts) == words, len(counts)
    by_key: dict[int, list[int]] = {}
    for entry in counts:
        by_key.setdefault(int(str(entry["word"])[1:]) % 5, []).append(int(entry["total"]))
    for key, totals in by_key.items():
        assert sorted(totals) == list(range(1, words // 5 + 1)), key
