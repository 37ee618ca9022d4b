"""The elastic cluster on real processes: partitions move between brokers (KIP-455
reassignment) under acks=all load, and the checker finds nothing acknowledged lost, offsets
dense and in-sync logs identical (tests/harness/checker.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftlite.storage.log import LogStorage, StorageConfig
from tests.harness.checker import assert_no_violations
from tests.harness.observe import (
    Producer,
    check_partition,
    create,
    describe,
    error_code,
    partition_0,
    serving_urls,
    wait_until,
)
from tests.harness.processes import FAST_SESSIONS, Cluster, http

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(180)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Four brokers, three started: the fourth joins during the test."""
    running = Cluster(
        tmp_path,
        brokers=4,
        broker_config={"replica.lag.time.max.ms": 2000},
        controller_config=FAST_SESSIONS,
    )
    running.start([1, 2, 3])
    try:
        yield running
    finally:
        running.close()


def create_topic(cluster: Cluster, name: str, **configs: Any) -> dict[str, Any]:
    """Partition 0 of a new one-partition RF 3 topic, once it has a leader."""
    return create(cluster, name, **configs)["partitions"][0]  # type: ignore[no-any-return]


def reassign(cluster: Cluster, topic: str, replicas: list[int] | None, via: int = 2) -> Any:
    status, body = http(
        "POST",
        cluster.urls[via] + "/v1/reassignments",
        {"partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]},
    )
    assert status == 202, body
    return body


def moves(cluster: Cluster) -> list[dict[str, Any]]:
    status, body = http("GET", serving_urls(cluster)[0] + "/v1/reassignments")
    assert status == 200, body
    return body["reassignments"]  # type: ignore[no-any-return]


def settled(cluster: Cluster, topic: str, target: list[int]) -> dict[str, Any] | None:
    """Partition 0 once every serving broker sees the move complete on `target`."""
    try:
        views = [
            partition_0(cluster, topic, among=[b])
            for b, p in cluster.processes.items()
            if p.serving
        ]
    except AssertionError:  # a broker still starting: not settled yet
        return None
    done = all(
        v["replicas"] == target and not v["adding_replicas"] and sorted(v["isr"]) == sorted(target)
        for v in views
    )
    return views[0] if done else None


@pytest.mark.slice
def test_a_partition_moves_to_a_new_broker_under_load_and_loses_nothing(cluster: Cluster) -> None:
    """The leader's replica moves to a broker that joined after the topic was created:
    broker 4 catches up as a follower, joins the ISR, then the final list commits with
    leadership moved off the leaving broker, which deletes its log."""
    before = create_topic(cluster, "moving", **{"min.insync.replicas": 2})
    leaving = before["leader"]
    target = [4, *(b for b in before["replicas"] if b != leaving)]
    producer = Producer(cluster, "moving")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 200, what="acks before the move")
    cluster.start_broker(4)
    answer = reassign(cluster, "moving", target)
    [started] = answer["reassignments"]
    assert started["adding"] == [4] and started["removing"] == [leaving], started
    after = wait_until(lambda: settled(cluster, "moving", target), what="the move to complete")
    assert after["leader"] != leaving and after["leader"] in target
    assert moves(cluster) == []
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 200, what="acks after the move")
    producer.stop()
    state = describe(cluster, "moving")
    assert state["partitions"][0]["replicas"] == target
    cluster.processes[leaving].terminate()
    storage = LogStorage(StorageConfig(path=cluster.root / f"broker-{leaving}"))
    try:
        assert f"{state['topic_id']}-0" not in storage.partition_names(), "its copy is deleted"
    finally:
        storage.close()
    assert_no_violations(check_partition(cluster, "moving", producer.acked))


def test_a_move_onto_a_dead_broker_stalls_visibly_and_can_be_cancelled(cluster: Cluster) -> None:
    before = create_topic(cluster, "stalled", **{"min.insync.replicas": 2})
    cluster.start_broker(4)
    producer = Producer(cluster, "stalled")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 100, what="acks before the move")
    cluster.processes[4].kill()  # dies before the move starts: the controller still lists it
    replicas = before["replicas"]
    target = [4, *replicas[1:]]
    status, body = http(
        "POST",
        cluster.urls[1] + "/v1/reassignments",
        {"partitions": [{"topic": "stalled", "partition": 0, "replicas": target}]},
    )
    if status == 400:  # already fenced: no new replica on a dead broker
        assert error_code(body) == "INVALID_REPLICA_ASSIGNMENT", body
    else:
        assert status == 202, body
        wait_until(lambda: moves(cluster), what="the move to be listed")
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= acked + 100, what="acks while it stalls")
        [stuck] = moves(cluster)
        assert stuck["adding"] == [4], stuck
        reassign(cluster, "stalled", None, via=3)
        wait_until(lambda: not moves(cluster), what="the cancel")
    wait_until(
        lambda: sorted(partition_0(cluster, "stalled")["replicas"]) == sorted(replicas),
        what="the original replicas",
    )
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 100, what="acks after the cancel")
    producer.stop()
    assert_no_violations(check_partition(cluster, "stalled", producer.acked))


def test_bad_reassignment_requests_change_nothing(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "checked")
    url = cluster.urls[1] + "/v1/reassignments"
    for body, status, code in [
        (
            {"partitions": [{"topic": "checked", "partition": 0, "replicas": [1, 1]}]},
            400,
            "INVALID_REPLICA_ASSIGNMENT",
        ),
        (
            {"partitions": [{"topic": "checked", "partition": 0, "replicas": [9]}]},
            400,
            "INVALID_REPLICA_ASSIGNMENT",
        ),
        (
            {"partitions": [{"topic": "checked", "partition": 0, "replicas": []}]},
            400,
            "INVALID_REPLICA_ASSIGNMENT",
        ),
        (
            {"partitions": [{"topic": "nope", "partition": 0, "replicas": [1]}]},
            404,
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        (
            {"partitions": [{"topic": "checked", "partition": 5, "replicas": [1]}]},
            404,
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        ({"partitions": "all"}, 400, "INVALID_REQUEST"),
    ]:
        answer_status, answer = http("POST", url, body)
        assert (answer_status, error_code(answer)) == (status, code), (body, answer)
    assert partition_0(cluster, "checked")["partition_epoch"] == 0, "nothing changed"
    status, body = http(
        "POST", url, {"partitions": [{"topic": "checked", "partition": 0, "replicas": None}]}
    )
    assert status == 202, body
    assert body["reassignments"][0]["error_code"] == "NO_REASSIGNMENT_IN_PROGRESS"


def brokers(cluster: Cluster) -> dict[int, dict[str, Any]]:
    status, body = http("GET", serving_urls(cluster)[0] + "/v1/brokers")
    assert status == 200, body
    return {b["id"]: b for b in body["brokers"]}


def create_many(cluster: Cluster, name: str, partitions: int, rf: int = 3) -> None:
    status, body = http(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": name, "partitions": partitions, "replication_factor": rf},
    )
    assert status == 201, body


def replica_counts(cluster: Cluster) -> dict[int, int]:
    return {b: v["replicas"] for b, v in brokers(cluster).items()}


def test_a_new_broker_gets_its_share_by_rebalance_then_a_drained_one_is_removed(
    cluster: Cluster,
) -> None:
    """3 -> 4 brokers: rebalance evens replicas and leaders (dry run first, changing
    nothing); then broker 1 is drained (leaders first, then replicas) and removed, while a
    producer writes with acks=all; the checker finds nothing lost."""
    create_many(cluster, "spread", 12)
    create_topic(cluster, "load", **{"min.insync.replicas": 2})
    producer = Producer(cluster, "load")
    producer.start()
    cluster.start_broker(4)
    wait_until(lambda: brokers(cluster)[4]["state"] == "active", what="broker 4 active")
    assert replica_counts(cluster)[4] == 0
    status, plan = http("POST", cluster.urls[2] + "/v1/cluster/rebalance", {"dry_run": True})
    assert status == 200 and plan["moves"], plan
    assert replica_counts(cluster)[4] == 0, "a dry run moves nothing"
    status, done = http("POST", cluster.urls[2] + "/v1/cluster/rebalance", {})
    assert status == 202, done
    wait_until(lambda: not moves(cluster), what="the rebalance to complete")
    counts = replica_counts(cluster)
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    # preferred leaders are elected once the moves are done
    wait_until(lambda: brokers(cluster)[4]["leaders"] > 0, what="broker 4 to lead some")
    # drain broker 1: everything leaves it
    status, drained = http("POST", cluster.urls[3] + "/v1/brokers/1/drain")
    assert status == 202, drained
    assert brokers(cluster)[1]["leaders"] == 0 or moves(cluster), "leaders first"
    wait_until(lambda: brokers(cluster)[1]["state"] == "drained", what="broker 1 drained")
    assert brokers(cluster)[1]["leaders"] == 0
    status, answer = http("DELETE", cluster.urls[2] + "/v1/brokers/1")
    assert (status, error_code(answer)) == (409, "BROKER_IN_USE"), "running: stop it first"
    assert cluster.processes[1].terminate() == 0
    wait_until(lambda: brokers(cluster)[1]["state"] == "drained" and brokers(cluster)[1]["fenced"])
    status, answer = http("DELETE", cluster.urls[2] + "/v1/brokers/1")
    assert status == 204, answer
    assert 1 not in brokers(cluster)
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 100, what="acks after the drain")
    producer.stop()
    assert_no_violations(check_partition(cluster, "load", producer.acked))


def test_removing_a_broker_that_holds_replicas_is_refused_unless_dead_and_forced(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "held")
    cluster.start_broker(4)
    status, body = http("DELETE", cluster.urls[1] + "/v1/brokers/3")
    assert (status, error_code(body)) == (409, "BROKER_IN_USE"), body
    status, body = http("DELETE", cluster.urls[1] + "/v1/brokers/3?force=true")
    assert (status, error_code(body)) == (409, "BROKER_IN_USE"), "alive: drain it instead"
    status, body = http("DELETE", cluster.urls[1] + "/v1/brokers/9")
    assert (status, error_code(body)) == (404, "BROKER_ID_NOT_REGISTERED"), body
    status, body = http("DELETE", cluster.urls[1] + "/v1/brokers/3?force=maybe")
    assert (status, error_code(body)) == (400, "INVALID_REQUEST"), body
    cluster.processes[3].kill()
    wait_until(lambda: brokers(cluster)[3]["state"] == "fenced", what="broker 3 fenced")
    status, body = http("DELETE", cluster.urls[1] + "/v1/brokers/3?force=true")
    assert status == 204, body
    wait_until(
        lambda: (
            settled(cluster, "held", partition_0(cluster, "held")["replicas"])
            and 3 not in partition_0(cluster, "held")["replicas"]
            and len(partition_0(cluster, "held")["replicas"]) == 3
        ),
        what="broker 3's replica re-created and in sync",
    )


def test_replication_factor_goes_down_and_up_again_under_load(cluster: Cluster) -> None:
    create_topic(cluster, "factor", **{"min.insync.replicas": 1})
    producer = Producer(cluster, "factor")
    producer.start()
    for factor in (2, 3, 1, 3):
        status, body = http(
            "PATCH", cluster.urls[2] + "/v1/topics/factor", {"replication_factor": factor}
        )
        assert status == 202, body
        wait_until(
            lambda factor=factor: (
                (p := partition_0(cluster, "factor"))
                and len(p["replicas"]) == factor
                and not p["adding_replicas"]
                and len(p["isr"]) == factor
            ),
            what=f"replication factor {factor}",
        )
        acked = len(producer.acked)
        wait_until(lambda acked=acked: len(producer.acked) >= acked + 50, what="acks")
    for body, code in [
        ({"replication_factor": 5}, "INVALID_REPLICATION_FACTOR"),
        ({"replication_factor": 0}, "INVALID_REPLICATION_FACTOR"),
        ({}, "INVALID_REQUEST"),
    ]:
        status, answer = http("PATCH", cluster.urls[1] + "/v1/topics/factor", body)
        assert (status, error_code(answer)) == (400, code), answer
    producer.stop()
    assert_no_violations(check_partition(cluster, "factor", producer.acked))


def test_a_dead_broker_is_replaced_by_self_healing(tmp_path: Path) -> None:
    """With broker.replacement.delay.ms = 2000, a broker dead for longer has its replicas
    re-created on the live brokers: every partition is back to 3 in-sync replicas."""
    running = Cluster(
        tmp_path,
        brokers=4,
        broker_config={"replica.lag.time.max.ms": 2000},
        controller_config={**FAST_SESSIONS, "broker.replacement.delay.ms": 2000},
    )
    running.start()
    try:
        create_many(running, "healed", 8)
        producer = Producer(running, "healed")
        producer.start()
        wait_until(lambda: len(producer.acked) >= 100, what="acks before the death")
        victim = 4
        running.processes[victim].kill()

        def healed() -> bool:
            topic = describe(running, "healed")
            return all(
                victim not in p["replicas"] and len(p["isr"]) == 3 and not p["adding_replicas"]
                for p in topic["partitions"]
            )

        wait_until(healed, timeout_s=60, what="every replica of broker 4 re-created")
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= acked + 100, what="acks after healing")
        producer.stop()
        assert brokers(running)[victim]["replicas"] == 0
        assert_no_violations(check_partition(running, "healed", producer.acked))
    finally:
        running.close()


def test_preferred_leader_election_on_demand(cluster: Cluster) -> None:
    before = create_topic(cluster, "elected")
    preferred = before["replicas"][0]
    reassign(cluster, "elected", [*before["replicas"][1:], preferred])  # a new preferred
    new_preferred = before["replicas"][1]
    wait_until(lambda: partition_0(cluster, "elected")["replicas"][0] == new_preferred, what="move")
    status, body = http(
        "POST",
        cluster.urls[2] + "/v1/elections",
        {"type": "preferred", "partitions": [{"topic": "elected", "partition": 0}]},
    )
    assert status == 200, body
    [election] = body["elections"]
    # (the periodic automatic election may have got there first)
    assert election["leader"] == new_preferred, election
    assert election.get("error_code") in {None, "ELECTION_NOT_NEEDED"}, election
    wait_until(lambda: partition_0(cluster, "elected")["leader"] == new_preferred, what="leader")
    status, body = http(
        "POST",
        cluster.urls[2] + "/v1/elections",
        {"partitions": [{"topic": "elected", "partition": 0}]},
    )
    assert body["elections"][0]["error_code"] == "ELECTION_NOT_NEEDED", body
    status, body = http("POST", cluster.urls[2] + "/v1/elections", {"type": "clean"})
    assert (status, error_code(body)) == (400, "INVALID_REQUEST"), body


def test_the_replication_throttle_holds_a_move_back_until_lifted(cluster: Cluster) -> None:
    """400 KiB to copy at 20 KiB/s takes 20 s: a second in, the new replica is still
    catching up; lifting the throttle at runtime lets the move finish."""
    status, body = http(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": "throttled", "partitions": 1, "replication_factor": 1},
    )
    assert status == 201, body
    leader = body["partitions"][0]["leader"]
    value = "x" * 1024
    for _ in range(4):
        status, body = http(
            "POST",
            cluster.urls[1] + "/v1/topics/throttled/partitions/0/records",
            {"records": [{"value": value}] * 100},
        )
        assert status == 200, body
    status, body = http(  # asked of the leader: it answers once it applied it
        "PUT",
        cluster.urls[leader] + f"/v1/brokers/{leader}/configs",
        {"configs": {"replication.throttled.rate": 20 * 1024}},
    )
    assert status == 200 and body["configs"] == {"replication.throttled.rate": "20480"}, body
    for bad in ({"replication.throttled.rate": 0}, {"nope": 1}, {}):
        status, body = http(
            "PUT", cluster.urls[2] + f"/v1/brokers/{leader}/configs", {"configs": bad}
        )
        assert (status, error_code(body)) == (400, "INVALID_CONFIG"), body
    follower = next(b for b in (1, 2, 3) if b != leader)
    reassign(cluster, "throttled", [leader, follower])
    time.sleep(1.0)  # a lower bound only: a slower machine copies no faster
    [moving] = moves(cluster)
    assert moving["adding"] == [follower] and follower not in moving["isr"], moving
    status, body = http(
        "PUT",
        cluster.urls[2] + f"/v1/brokers/{leader}/configs",
        {"configs": {"replication.throttled.rate": None}},
    )
    assert status == 200 and body["configs"] == {}, body
    wait_until(lambda: not moves(cluster), what="the move once unthrottled")
    assert sorted(partition_0(cluster, "throttled")["isr"]) == sorted([leader, follower])


def _preload(cluster: Cluster, topic: str, kib: int) -> None:
    value = "p" * 1024
    for _ in range(kib // 100):
        status, body = http(
            "POST",
            cluster.urls[1] + f"/v1/topics/{topic}/partitions/0/records",
            {"records": [{"value": value}] * 100},
        )
        assert status == 200, body


@pytest.mark.parametrize("fault", ["source_leader", "target_replica", "active_controller"])
def test_a_move_survives_kill_9_in_its_middle(cluster: Cluster, fault: str) -> None:
    """The leader's replica moves to broker 4 under acks=all load, held back by the
    replication throttle so the fault lands mid-move: kill -9 of the leaving leader, of the
    joining replica (restarted: it resumes), or of the active controller. The move
    completes, and nothing acknowledged is lost."""
    before = create_topic(cluster, "survivor", **{"min.insync.replicas": 2})
    _preload(cluster, "survivor", 300)
    leaving = before["leader"]
    target = [4, *(b for b in before["replicas"] if b != leaving)]
    cluster.start_broker(4)
    for broker_id in (1, 2, 3):  # asked of each broker: it answers once it applied it
        status, body = http(
            "PUT",
            cluster.urls[broker_id] + f"/v1/brokers/{broker_id}/configs",
            {"configs": {"replication.throttled.rate": 30 * 1024}},
        )
        assert status == 200, body
    producer = Producer(cluster, "survivor")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 50, what="acks before the move")
    reassign(cluster, "survivor", target)
    time.sleep(1.0)
    assert moves(cluster), "still moving when the fault lands"
    if fault == "source_leader":
        cluster.processes[leaving].kill()
    elif fault == "target_replica":
        cluster.processes[4].kill()
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= acked + 50, what="acks while it is down")
        assert moves(cluster), "the move waits for its target"
        cluster.start_broker(4)
    else:
        active = cluster.quorum.leader()
        cluster.quorum.processes[active].kill()
        cluster.quorum.leader(among=[n for n in cluster.quorum.processes if n != active])
        assert moves(cluster), "the new active controller knows the move"
    for broker_id in (1, 2, 3):  # lift the throttle: the move finishes
        if cluster.processes[broker_id].serving:
            http(
                "PUT",
                serving_urls(cluster)[0] + f"/v1/brokers/{broker_id}/configs",
                {"configs": {"replication.throttled.rate": None}},
            )
    if fault == "source_leader":
        cluster.processes[leaving].start()  # back, it deletes its copy once the move is done
    after = wait_until(lambda: settled(cluster, "survivor", target), timeout_s=60, what="move")
    assert after["leader"] in target
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 50, what="acks after the move")
    producer.stop()
    assert_no_violations(check_partition(cluster, "survivor", producer.acked))
