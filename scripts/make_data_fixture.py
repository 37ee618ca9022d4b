"""Make tests/fixtures/data-<commit>.tar.gz: the data directories of a 3+3 cluster on the
test hosts (tests/harness/hosts.py), written by an older commit of kraftlite, for
tests/network/test_data_from_an_older_release.py (issue 28: today's code must start on an
earlier release's data). What it writes is `WORKLOAD` below; the test checks all of it.

Run (as root): python scripts/make_data_fixture.py [--commit 22c3180]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.harness.hosts import TestNet  # noqa: E402
from tests.harness.processes import Cluster, http, http_retry  # noqa: E402
from tests.network.fixture_workload import (  # noqa: E402
    GROUP,
    GROUP_OFFSETS,
    KAFKA_TOPIC,
    NODES,
    TOPIC,
    kafka_values,
    records,
)


def write(cluster: Cluster) -> None:
    from confluent_kafka import Producer  # noqa: PLC0415

    for name in (TOPIC, KAFKA_TOPIC):
        cluster.create_topic(name, partitions=3, replication_factor=3)
    for partition in range(3):
        status, body = http_retry(
            "POST",
            cluster.urls[1] + f"/v1/topics/{TOPIC}/partitions/{partition}/records",
            {"records": records(partition)},
        )
        assert status == 200, body
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    for partition in range(3):
        for value in kafka_values(partition):
            producer.produce(KAFKA_TOPIC, value, partition=partition)
    assert producer.flush(30) == 0
    status, body = http(
        "POST",
        cluster.urls[2] + f"/v1/groups/{GROUP}/offsets",
        {"offsets": [{"topic": TOPIC, "partition": p, "offset": o} for p, o in GROUP_OFFSETS]},
    )
    assert status in {200, 204}, (status, body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="22c3180")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", args.commit],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    out = REPO / "tests" / "fixtures" / f"data-{commit}.tar.gz"
    with tempfile.TemporaryDirectory(prefix="kraftlite-fixture-") as work:
        old = Path(work) / "old"
        old.mkdir()
        archive = subprocess.run(
            ["git", "archive", commit], cwd=REPO, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        # the nodes import the old commit's kraftlite: its tree first on their path, and as
        # their working directory (python -m puts the working directory first)
        os.environ["PYTHONPATH"] = str(old)
        os.chdir(old)
        root = Path(work) / "fixture"
        net = TestNet([*NODES, "client"])
        try:
            with net.inside("client"):
                cluster = Cluster(root, net=net, kafka=True)
                try:
                    cluster.start()
                    write(cluster)
                    time.sleep(2)  # followers fetch the last high watermark
                finally:
                    cluster.close()
        finally:
            net.close()
        written = sorted(p.name for p in root.rglob("kraftlite-format.json"))
        assert not written, f"the nodes ran today's code, not {commit}'s: {written}"
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out, "w:gz") as tar:
            for path in sorted(root.iterdir()):
                if path.is_dir():  # the data directories; configs and logs are the test's
                    tar.add(
                        path,
                        arcname=f"fixture/{path.name}",
                        filter=lambda info: None if info.name.endswith("lock.mdb") else info,
                    )
    print(f"{out} ({out.stat().st_size} bytes, written by {commit})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
