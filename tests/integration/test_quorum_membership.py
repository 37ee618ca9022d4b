"""Controller quorum membership on real processes (one voter at a time, as KIP-853): the
quorum grows 3 -> 5 and shrinks 5 -> 3 under acks=all load, a dead voter is replaced, and
changes that would leave no live majority are refused. The checker finds nothing lost."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.checker import assert_no_violations
from tests.harness.observe import Producer, check_partition, create, error_code, wait_until
from tests.harness.processes import Cluster, Process, free_ports, http, http_retry

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(240)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path, broker_config={"replica.lag.time.max.ms": 3000})
    running.start()
    try:
        yield running
    finally:
        running.close()


def quorum(cluster: Cluster) -> dict[str, Any]:
    status, body = http("GET", cluster.urls[1] + "/v1/quorum")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def voter_ids(cluster: Cluster) -> list[int]:
    return sorted(v["id"] for v in quorum(cluster)["voters"])


def start_joining(cluster: Cluster, node_id: int) -> tuple[str, str]:
    """A new controller process started with --join; (its Raft address, its URL)."""
    raft_port, http_port = free_ports(2)
    raft, listen = f"127.0.0.1:{raft_port}", f"127.0.0.1:{http_port}"
    voters = {v["id"]: v["address"] for v in quorum(cluster)["voters"]}
    voters[node_id] = raft
    process = Process(
        f"controller-{node_id}",
        [
            "controller",
            "--config",
            str(cluster.root / "controller.toml"),
            "--node-id",
            str(node_id),
            "--listen",
            listen,
            "--raft",
            raft,
            "--quorum",
            ",".join(f"{n}@{a}" for n, a in sorted(voters.items())),
            "--data-dir",
            str(cluster.root / f"controller-{node_id}"),
            "--join",
        ],
        cluster.root / f"controller-{node_id}.log",
    )
    process.start()
    cluster.quorum.processes[node_id] = process
    cluster.quorum.urls[node_id] = f"http://{listen}"

    def answers() -> bool:
        try:
            return http("GET", f"http://{listen}/healthz", timeout=2)[0] == 200
        except OSError:
            return False

    wait_until(answers, what=f"controller {node_id} to answer")
    return raft, f"http://{listen}"


def add_voter(cluster: Cluster, node_id: int) -> None:
    raft, url = start_joining(cluster, node_id)
    status, body = http_retry(
        "POST", cluster.urls[2] + "/v1/quorum/voters", {"id": node_id, "raft": raft, "url": url}
    )
    assert status == 200, body
    assert node_id in [v["id"] for v in body["voters"]], body

    def caught_up() -> bool:
        try:
            status, mine = http("GET", url + "/v1/quorum", timeout=2)
        except OSError:
            return False
        leader = quorum(cluster)
        return (
            status == 200
            and mine["leader_id"] == leader["leader_id"]
            and mine["metadata_offset"] >= leader["metadata_offset"] - 1
        )

    wait_until(caught_up, timeout_s=30, what=f"voter {node_id} to catch up")


def remove_voter(cluster: Cluster, node_id: int) -> tuple[int, Any]:
    return http_retry("DELETE", cluster.urls[3] + f"/v1/quorum/voters/{node_id}")


@pytest.mark.slice
def test_the_quorum_grows_to_five_and_shrinks_to_three_under_load(cluster: Cluster) -> None:
    create(cluster, "voters", **{"min.insync.replicas": 2})
    producer = Producer(cluster, "voters")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 50, what="acks")
    add_voter(cluster, 4)
    add_voter(cluster, 5)
    assert voter_ids(cluster) == [1, 2, 3, 4, 5]
    # a 5-voter quorum survives two dead voters
    cluster.quorum.processes[1].kill()
    cluster.quorum.processes[2].kill()
    wait_until(lambda: cluster.quorum.leader(timeout_s=20, among=[3, 4, 5]), what="a leader of 3-5")
    status, body = http_retry("POST", cluster.urls[3] + "/v1/topics", {"name": "after"})
    assert status == 201, body
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 50, what="acks with 3 of 5 voters")
    # shrink back to three: the dead ones go
    for node_id in (1, 2):
        status, body = remove_voter(cluster, node_id)
        assert status == 204, body
    assert voter_ids(cluster) == [3, 4, 5]
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 50, what="acks with voters 3-5")
    producer.stop()
    assert_no_violations(check_partition(cluster, "voters", producer.acked))


def test_a_dead_voter_is_replaced_and_unsafe_changes_are_refused(cluster: Cluster) -> None:
    create(cluster, "replaced")
    cluster.quorum.processes[3].kill()
    wait_until(lambda: cluster.quorum.leader(timeout_s=20, among=[1, 2]), what="a leader")
    # 2 of 3 live: a fourth voter would need 3 live ones
    status, body = http_retry(
        "POST",
        cluster.urls[1] + "/v1/quorum/voters",
        {"id": 4, "raft": "127.0.0.1:1", "url": "http://127.0.0.1:2"},
    )
    assert (status, error_code(body)) == (409, "QUORUM_AT_RISK"), body
    # removing a live one would leave 1 of 2 live
    live = next(n for n in (1, 2) if n != quorum(cluster)["leader_id"])
    status, body = remove_voter(cluster, live)
    assert (status, error_code(body)) == (409, "QUORUM_AT_RISK"), body
    for bad, code in [
        ({"id": 1, "raft": "127.0.0.1:5", "url": "http://127.0.0.1:6"}, "DUPLICATE_VOTER"),
        ({"id": 9, "raft": "nope", "url": "http://127.0.0.1:6"}, "INVALID_REQUEST"),
        ({"id": -1, "raft": "127.0.0.1:5", "url": "http://127.0.0.1:6"}, "INVALID_REQUEST"),
        ({"id": 9, "raft": "127.0.0.1:5", "url": "ftp://x:1"}, "INVALID_REQUEST"),
    ]:
        status, body = http_retry("POST", cluster.urls[1] + "/v1/quorum/voters", bad)
        assert error_code(body) == code, (bad, body)
    status, body = remove_voter(cluster, 7)
    assert (status, error_code(body)) == (404, "VOTER_NOT_FOUND"), body
    # replace: the dead voter out, a new one in
    status, body = remove_voter(cluster, 3)
    assert status == 204, body
    add_voter(cluster, 4)
    assert voter_ids(cluster) == [1, 2, 4]
    # the new quorum commits: a topic, and a controller failover among the new voters
    leader = quorum(cluster)["leader_id"]
    cluster.quorum.processes[leader].kill()
    survivors = [n for n in (1, 2, 4) if n != leader]
    wait_until(lambda: cluster.quorum.leader(timeout_s=20, among=survivors), what="leader")
    status, body = http_retry("POST", cluster.urls[2] + "/v1/topics", {"name": "afterwards"})
    assert status == 201, body


def test_brokers_follow_a_quorum_whose_first_voters_are_all_gone(cluster: Cluster) -> None:
    """Voters 4-6 replace 1-3, one at a time; the brokers, started knowing only 1-3, find
    4-6 in metadata (controllers.discovery.enable) and keep heartbeating, following
    metadata and passing admin calls on."""
    create(cluster, "moved-quorum")
    for new, old in ((4, 1), (5, 2), (6, 3)):
        add_voter(cluster, new)
        status, body = http_retry("DELETE", cluster.urls[1] + f"/v1/quorum/voters/{old}")
        assert status == 204, body
        cluster.quorum.processes[old].terminate()
    status, body = http_retry("POST", cluster.urls[2] + "/v1/topics", {"name": "afterwards"})
    assert status == 201, body
    status, body = http("GET", cluster.urls[3] + "/v1/quorum")
    assert status == 200 and sorted(v["id"] for v in body["voters"]) == [4, 5, 6], body
    time.sleep(10)  # past a session (9 s): a broker that could not heartbeat is fenced by now
    assert not any(b["fenced"] for b in http("GET", cluster.urls[1] + "/v1/brokers")[1]["brokers"])
    wait_until(
        lambda: all(http("GET", url + "/readyz")[0] == 200 for url in cluster.urls.values()),
        what="every broker ready (heartbeats answered by the new voters)",
    )
    status, body = http(
        "POST", cluster.urls[1] + "/v1/topics/moved-quorum/records", {"records": [{"value": "v"}]}
    )
    assert status == 200, body
    # the whole new quorum restarts, still with --join: voters with a journal elect as any
    for node_id in (4, 5, 6):
        cluster.quorum.processes[node_id].kill()
    for node_id in (4, 5, 6):
        cluster.quorum.processes[node_id].start()
    wait_until(lambda: cluster.quorum.leader(timeout_s=30, among=[4, 5, 6]), what="a leader")
    status, body = http_retry("POST", cluster.urls[2] + "/v1/topics", {"name": "restarted"})
    assert status == 201, body


def test_a_voter_that_does_not_run_is_not_added(cluster: Cluster) -> None:
    raft_port, http_port = free_ports(2)
    status, body = http_retry(
        "POST",
        cluster.urls[1] + "/v1/quorum/voters",
        {"id": 4, "raft": f"127.0.0.1:{raft_port}", "url": f"http://127.0.0.1:{http_port}"},
    )
    assert (status, error_code(body)) == (404, "VOTER_NOT_FOUND"), body
    assert voter_ids(cluster) == [1, 2, 3]
