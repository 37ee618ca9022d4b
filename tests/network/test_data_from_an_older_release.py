"""Today's code on data an earlier kraftlite wrote (issue 28: rolling upgrades): the data
directories of a 3+3 cluster on the test hosts, written by commit 22c3180 (before data
formats were recorded; scripts/make_data_fixture.py made them), opened by today's nodes at
the same addresses. Every record, the idempotent producer's, and the group's offsets read
back; the cluster takes writes; each directory now records its format."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tests.harness.hosts import TestNet
from tests.harness.processes import Cluster, http, http_retry
from tests.network.fixture_workload import (
    GROUP,
    GROUP_OFFSETS,
    KAFKA_TOPIC,
    NODES,
    TOPIC,
    kafka_values,
    records,
)

pytestmark = [pytest.mark.integration, pytest.mark.network, pytest.mark.timeout(180)]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "data-22c3180.tar.gz"


def test_todays_nodes_read_an_earlier_releases_data(tmp_path: Path) -> None:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / "fixture"  # its name is the cluster id the controllers were given
    assert not list(root.rglob("kraftlite-format.json")), "the fixture predates format files"
    net = TestNet([*NODES, "client"])  # the same hosts, so the same addresses
    try:
        with net.inside("client"):
            cluster = Cluster(root, net=net, kafka=True)
            try:
                cluster.start()
                check(cluster)
            finally:
                cluster.close()
    finally:
        net.close()
    for name in NODES:
        recorded = json.loads((root / name / "kraftlite-format.json").read_text())
        assert recorded["kind"] == name.split("-")[0] and recorded["storage_format"] == 1


def check(cluster: Cluster) -> None:
    for partition in range(3):
        wanted = [(r["key"], r["value"], r["headers"]) for r in records(partition)]
        deadline = time.monotonic() + 30
        while True:
            status, body = http(
                "GET",
                cluster.urls[1] + f"/v1/topics/{TOPIC}/partitions/{partition}/records?offset=0",
            )
            got = [(r["key"], r["value"], r["headers"]) for r in body.get("records", [])]
            if status == 200 and got == wanted:
                break
            assert time.monotonic() < deadline, (status, body)
            time.sleep(0.2)
    status, body = http_retry("GET", cluster.urls[3] + f"/v1/groups/{GROUP}/offsets")
    assert status == 200, body
    committed = {(o["topic"], o["partition"]): o["offset"] for o in body["offsets"]}
    assert committed == {(TOPIC, p): o for p, o in GROUP_OFFSETS}
    # assigned, not subscribed: a group's coordinator that moved holds its partitions back
    # for a while (docs/design/groups.md), which is not what this test is about
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "after-upgrade",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(KAFKA_TOPIC, p, OFFSET_BEGINNING) for p in range(3)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    wanted_kafka = {v for p in range(3) for v in kafka_values(p)}
    while seen != wanted_kafka and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    assert seen == wanted_kafka
    status, body = http_retry(
        "POST",
        cluster.urls[2] + f"/v1/topics/{TOPIC}/partitions/0/records",
        {"records": [{"value": "after"}]},
    )
    assert status == 200 and body["offsets"][0]["offset"] == 10, body
