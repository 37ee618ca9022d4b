"""A kraftlite cluster across test hosts (tests/harness/hosts.py): 3 controllers and 3
brokers each on a host of its own, clients on a seventh, every link a real one that the
faults act on packet by packet."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.harness.checker import assert_no_violations
from tests.harness.hosts import TestNet
from tests.harness.nemesis import chaos_run
from tests.harness.processes import Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.network, pytest.mark.timeout(180)]


def test_a_cluster_across_six_hosts_serves_both_edges_from_a_seventh(
    tmp_path: Path, net: TestNet
) -> None:
    net.shape_all(delay_ms=1)  # ~4 ms between hosts, as across a rack
    cluster = Cluster(tmp_path, net=net, kafka=True)
    try:
        cluster.start()
        assert all(net["client"].address not in url for url in cluster.urls.values())
        cluster.create_topic("across", partitions=3, replication_factor=3)
        for broker_id, url in cluster.urls.items():  # any broker serves any partition
            status, body = http(
                "POST",
                url + f"/v1/topics/across/partitions/{broker_id - 1}/records",
                {"records": [{"value": f"http-{broker_id}"}]},
            )
            assert status == 200, body
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for n in range(30):
            producer.produce("across", f"kafka-{n}".encode(), partition=n % 3)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "across-readers",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["across"])
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while len(seen) < 33 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value().decode())
        consumer.close()
        assert sorted(seen) == sorted(
            [f"http-{b}" for b in (1, 2, 3)] + [f"kafka-{n}" for n in range(30)]
        )
        # what the cluster registered: each broker at its own host's address
        status, brokers = http("GET", cluster.urls[1] + "/v1/brokers")
        assert status == 200, brokers
        advertised = {b["id"]: b["url"] for b in brokers["brokers"]}
        assert advertised == {b: cluster.urls[b] for b in (1, 2, 3)}
    finally:
        cluster.close()


@pytest.mark.chaos
@pytest.mark.randomized
@pytest.mark.timeout(300)
def test_random_faults_on_real_links_lose_nothing(tmp_path: Path, net: TestNet) -> None:
    """The randomized chaos run on test hosts: the proxy's faults acting on packets, plus
    silenced hosts, pulled cables and a slow, lossy link, with 1 ms on every link."""
    net.shape_all(delay_ms=1)
    result = chaos_run(tmp_path, seconds=30, seed=28, log=lambda _: None, net=net)
    packets = ("silence", "pull the cable", "slow lossy link")
    assert any(fault.startswith(packets) for fault in result.faults), result.faults
    assert result.acked > 0
    assert_no_violations(result.violations)
