"""Fault scenarios on a real cluster of processes, each followed by the checker
(tests/harness/checker.py): lost = 0, dense offsets, ISR replicas identical below the HW,
one writer per leader epoch. Network faults go through the fault-injecting proxy
(tests/harness/network.py, docs/design/fault-injection.md).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.protocol.headers import NO_FORWARD
from kraftlite.protocol.partitioner import partition_for_key
from tests.harness.checker import assert_no_violations, group_offsets_monotone, reads_not_stale
from tests.harness.nemesis import chaos_run
from tests.harness.observe import (
    HighWatermarkReader,
    Producer,
    check_partition,
    create,
    describe,
    error_code,
    partition_0,
    wait_for_full_isr,
    wait_until,
)
from tests.harness.processes import FAST_SESSIONS, Cluster, http, http_retry
from tests.harness.txn_chaos import txn_chaos_run

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(120)]
MIN_ISR_2 = {"min.insync.replicas": 2}
READ_0 = "/v1/topics/{}/partitions/0/records?offset=0&max_records=1"
DIRECT = {NO_FORWARD: "1"}  # answer here, or refuse: never forward to the leader


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path,
        broker_config={"replica.lag.time.max.ms": 2000},
        controller_config=FAST_SESSIONS,
        faults=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.close()


def others(cluster: Cluster, *excluded: int) -> list[int]:
    return [b for b in cluster.processes if b not in excluded]


def test_a_leader_cut_off_from_the_controllers_stops_acknowledging(cluster: Cluster) -> None:
    """It can no longer shrink its ISR, so once its followers move to the new leader its
    acks=all writes stall: none of them may be acknowledged and then lost."""
    leader = create(cluster, "cutoff", **MIN_ISR_2)["partitions"][0]["leader"]
    rest = others(cluster, leader)
    direct = Producer(cluster, "cutoff", target=lambda: cluster.urls[leader], no_forward=True)
    routed = Producer(cluster, "cutoff", target=lambda: cluster.urls[rest[0]])
    reader = HighWatermarkReader(cluster.urls[leader], "cutoff")
    for thread in (direct, routed, reader):
        thread.start()
    wait_until(lambda: len(direct.acked) >= 100, what="acks before the cut")
    cluster.cut_from_controllers(leader, mode="hang")  # like dropped packets: calls time out
    new = wait_until(
        lambda: (
            partition_0(cluster, "cutoff", among=rest)["leader"] in rest
            and partition_0(cluster, "cutoff", among=rest)
        ),
        what="a new leader",
    )
    acked = len(routed.acked)
    wait_until(lambda: len(routed.acked) >= acked + 100, what="acks from the new leader")
    # From here the followers fetch from the new leader (it acknowledged writes with an ISR
    # of at least 2 without the old one): the old leader's HW cannot move.
    settled = time.monotonic()
    wait_until(
        lambda: any(a.sent_at >= settled and a.status != 200 for a in direct.answers),
        what="the cut-off leader to refuse or time out",
    )
    assert not direct.acks_after(settled), "the cut-off leader acknowledged after the failover"
    # Nor does it answer reads from its old state (broker/lease.py): its lease lapsed before
    # the controllers could fence it.
    status, body = http("GET", cluster.urls[leader] + READ_0.format("cutoff"), headers=DIRECT)
    assert (status, error_code(body)) == (421, "NOT_LEADER_OR_FOLLOWER"), body
    reader.stop()
    # No read from it, at any moment, missed a write the new leader had acknowledged: its
    # lease ran out before the controllers could fence it (tighter than the check above).
    acks = [(a.done_at, a.last_offset) for a in routed.answers + direct.answers if a.status == 200]
    assert_no_violations(reads_not_stale(reader.reads, acks))
    assert reader.reads, "the old leader never answered a read, even before the cut"
    cluster.heal()
    wait_for_full_isr(cluster, "cutoff")
    direct.stop()
    routed.stop()
    assert partition_0(cluster, "cutoff")["leader_epoch"] >= new["leader_epoch"]
    assert_no_violations(check_partition(cluster, "cutoff", direct.acked, routed.acked))


def test_a_leader_paused_past_its_session_answers_nothing_queued_from_its_old_state(
    cluster: Cluster,
) -> None:
    """The lease is asked when a request is served, not by a timer: a read that waited in
    the socket while the leader was stopped gets NOT_LEADER_OR_FOLLOWER on resume, not the
    records and high watermark of a partition that has moved on. The leader is also cut
    off from the controllers, so no metadata can reach it first and make it refuse anyway."""
    leader = create(cluster, "paused", **MIN_ISR_2)["partitions"][0]["leader"]
    rest = others(cluster, leader)
    producer = Producer(cluster, "paused", target=lambda: cluster.urls[rest[0]])
    producer.start()
    wait_until(lambda: len(producer.acked) >= 50, what="acks before the pause")
    cluster.cut_from_controllers(leader, mode="hang")
    cluster.processes[leader].pause()
    answers: list[tuple[int, Any]] = []
    reader = threading.Thread(
        target=lambda: answers.append(
            http("GET", cluster.urls[leader] + READ_0.format("paused"), headers=DIRECT, timeout=90)
        )
    )
    reader.start()
    wait_until(
        lambda: partition_0(cluster, "paused", among=rest)["leader"] in rest, what="a new leader"
    )
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 50, what="acks from the new leader")
    cluster.processes[leader].resume()
    reader.join(90)
    [(status, body)] = answers
    assert (status, error_code(body)) == (421, "NOT_LEADER_OR_FOLLOWER"), body
    cluster.heal()
    wait_for_full_isr(cluster, "paused")
    producer.stop()
    assert_no_violations(check_partition(cluster, "paused", producer.acked))


def test_a_follower_cut_off_from_the_leader_leaves_the_isr_and_rejoins(cluster: Cluster) -> None:
    created = create(cluster, "split", **MIN_ISR_2)["partitions"][0]
    leader = created["leader"]
    follower = next(b for b in created["replicas"] if b != leader)
    producer = Producer(cluster, "split", target=lambda: cluster.urls[leader])
    producer.start()
    wait_until(lambda: len(producer.acked) >= 100, what="acks before the cut")
    assert cluster.network is not None  # the follower fetches through the proxy
    assert cluster.network.accepted.get((f"broker-{follower}", f"broker-{leader}"), 0) > 0
    cluster.cut_between_brokers(leader, follower)
    wait_until(
        lambda: follower not in partition_0(cluster, "split")["isr"],
        what="the cut-off follower to leave the ISR",
    )
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 100, what="writes with an ISR of 2")
    assert partition_0(cluster, "split")["leader"] == leader
    cluster.heal()
    wait_until(
        lambda: follower in partition_0(cluster, "split")["isr"],
        what="the follower back in the ISR",
    )
    producer.stop()
    assert_no_violations(check_partition(cluster, "split", producer.acked))


def test_two_brokers_down_with_min_isr_2_refuses_writes_and_recovers(cluster: Cluster) -> None:
    created = create(cluster, "minisr", **MIN_ISR_2)["partitions"][0]
    leader = created["leader"]
    survivor, follower = (b for b in created["replicas"] if b != leader)
    producer = Producer(cluster, "minisr", target=lambda: cluster.urls[survivor])
    producer.start()
    wait_until(lambda: len(producer.acked) >= 100, what="acks before the kills")
    cluster.processes[leader].kill()
    cluster.processes[follower].kill()
    wait_until(
        lambda: partition_0(cluster, "minisr")["isr"] == [survivor],
        what="the ISR down to the survivor",
    )
    shrunk = time.monotonic()
    wait_until(
        lambda: any(
            a.sent_at >= shrunk and a.error_code == "NOT_ENOUGH_REPLICAS" and a.status == 503
            for a in producer.answers
        ),
        what="NOT_ENOUGH_REPLICAS",
    )
    assert not producer.acks_after(shrunk), "acknowledged with an ISR of 1 and min ISR 2"
    assert producer.refused, "no write was refused before the append"
    cluster.processes[follower].start()
    wait_until(
        lambda: sorted(partition_0(cluster, "minisr")["isr"]) == sorted([survivor, follower]),
        timeout_s=60,
        what="the restarted broker back in the ISR",
    )
    back = time.monotonic()
    wait_until(lambda: len(producer.acks_after(back)) >= 20, what="writes accepted again")
    cluster.processes[leader].start()
    wait_for_full_isr(cluster, "minisr", timeout_s=60)
    producer.stop()
    assert_no_violations(
        check_partition(cluster, "minisr", producer.acked, refused=producer.refused)
    )


class TopicCreator(threading.Thread):
    """Creates topics one after another through a broker, retrying retriable answers, and
    records what each create finally answered."""

    def __init__(self, cluster: Cluster, count: int, hold_after: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.count, self.hold_after = cluster, count, hold_after
        self.outcomes: dict[str, tuple[int, Any]] = {}
        self.finished_at: dict[str, float] = {}
        self.holding = threading.Event()  # `hold_after` topics are done: the test acts
        self.go_on = threading.Event()

    def run(self) -> None:
        for i in range(self.count):
            if i == self.hold_after:  # creating 16 topics takes less time than a poll
                self.holding.set()
                self.go_on.wait(timeout=60)
            name = f"t{i}"
            body = {"name": name, "partitions": 3, "replication_factor": 3}
            try:
                status, answer = http_retry(
                    "POST", self.cluster.urls[1] + "/v1/topics", body, timeout_s=30
                )
            except OSError as exc:  # timed out: the outcome is unknown
                status, answer = 0, repr(exc)
            self.outcomes[name] = (status, answer)
            self.finished_at[name] = time.monotonic()


def test_the_active_controller_killed_during_topic_creation(cluster: Cluster) -> None:
    """Each topic is created whole or not at all, every controller agrees on which, and
    every created partition gets a leader and takes acks=all writes."""
    killed = cluster.quorum.leader()
    creator = TopicCreator(cluster, 16, hold_after=2)
    creator.start()
    assert creator.holding.wait(timeout=60), "the first topics were not created"
    killed_at = time.monotonic()
    creator.go_on.set()  # the next creation is likely in flight when the controller dies
    cluster.quorum.processes[killed].kill()
    creator.join(timeout=90)
    assert not creator.is_alive()
    assert sum(at > killed_at for at in creator.finished_at.values()) >= 3  # spans the kill
    cluster.quorum.leader(among=[n for n in cluster.quorum.processes if n != killed])
    outcomes = creator.outcomes
    # 201, or 409 when a retry finds its own earlier attempt committed; unknown outcomes
    # (timeouts, 5xx) are allowed only around the kill, and are resolved below.
    assert all(status in {201, 409, 0} or status >= 500 for status, _ in outcomes.values())
    assert sum(status == 201 for status, _ in outcomes.values()) >= 8, outcomes
    cluster.processes[1].kill()
    cluster.processes[1].start()
    cluster.quorum.processes[killed].start()
    cluster.wait_ready()

    def topics_on(url: str) -> set[str] | None:
        try:
            status, body = http("GET", url + "/v1/topics", timeout=5)
        except OSError:
            return None
        return {t["name"] for t in body["topics"]} if status == 200 else None

    def agreed() -> set[str] | None:
        views = [topics_on(url) for url in _all_urls(cluster)]
        first = views[0]
        return first if first is not None and all(v == first for v in views) else None

    expected = {name for name, (status, _) in outcomes.items() if status in {201, 409}}
    topics = wait_until(agreed, what="every controller and broker to agree on the topics")
    assert expected <= topics, (expected, topics)
    for name in sorted(topics):
        wait_until(
            lambda name=name: all(
                p["leader"] >= 0 and len(p["isr"]) == 3
                for p in describe(cluster, name)["partitions"]
            ),
            what=f"leaders and full ISRs for {name}",
        )
        for index in range(3):
            status, body = http(
                "POST",
                cluster.urls[1] + f"/v1/topics/{name}/partitions/{index}/records?acks=all",
                {"records": [{"value": f"{name}-{index}"}]},
            )
            assert status == 200, body
            assert body["offsets"][0]["offset"] == 0, body


def _all_urls(cluster: Cluster) -> list[str]:
    return [*cluster.quorum.urls.values(), *cluster.urls.values()]


@pytest.mark.parametrize("mode", ["reset", "hang"])
def test_the_active_controller_cut_off_from_the_others_steps_down_and_nothing_is_lost(
    cluster: Cluster, mode: str
) -> None:
    """Raft links cut through the proxy: the other two elect a new active controller, the
    brokers follow it and metadata changes go on; the old one commits nothing alone, stops
    answering as active, fences no broker, and catches up once healed."""
    create(cluster, "raftcut", **MIN_ISR_2)
    producer = Producer(cluster, "raftcut")
    producer.start()
    wait_until(lambda: len(producer.acked) >= 100, what="acks before the cut")
    assert cluster.network is not None
    assert any(
        src.startswith("controller-") and dst.startswith("controller-")
        for src, dst in cluster.network.accepted
    ), "Raft does not go through the proxy"
    old = cluster.quorum.leader()
    rest = [n for n in cluster.quorum.processes if n != old]
    cluster.cut_from_other_controllers(old, mode)
    assert cluster.quorum.leader(among=rest) in rest
    create(cluster, "made-without-it")
    acked = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= acked + 100, what="acks after the cut")
    wait_until(
        lambda: http("GET", cluster.quorum.urls[old] + "/v1/quorum")[1]["leader_id"] != old,
        what="the cut-off controller to step down",
    )
    status, _ = http("GET", cluster.quorum.urls[old] + "/v1/topics/made-without-it")
    assert status == 404, "the cut-off controller saw a change it could not have replicated"
    cluster.heal()
    cluster.quorum.leader()  # all three agree again
    wait_until(
        lambda: http("GET", cluster.quorum.urls[old] + "/v1/topics/made-without-it")[0] == 200,
        what="the old controller to catch up",
    )
    producer.stop()
    for node_id in cluster.quorum.processes:
        log = cluster.quorum.processes[node_id].log_path.read_text()
        assert "brokers_fenced" not in log, f"controller {node_id} fenced a healthy broker"
    assert_no_violations(check_partition(cluster, "raftcut", producer.acked))


@pytest.mark.parametrize("unclean", [False, True], ids=["unclean-off", "unclean-on"])
def test_the_last_isr_member_dies_with_unclean_election_off_and_on(
    cluster: Cluster, unclean: bool
) -> None:
    """Followers cut off from the leader leave the ISR; the leader alone acknowledges
    acks=all writes (min.insync.replicas=1) and then dies. Off: the partition stays offline
    until it returns, and nothing is lost. On: a live follower outside the ISR takes over;
    acknowledged writes are lost, only ones past what the full ISR acknowledged, and every
    other invariant holds (Kafka's trade, stated)."""
    created = create(
        cluster, "unclean", **{"unclean.leader.election.enable": str(unclean).lower()}
    )["partitions"][0]
    leader = created["leader"]
    followers = others(cluster, leader)
    producer = Producer(cluster, "unclean", target=lambda: cluster.urls[leader], no_forward=True)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 50, what="acks with the full ISR")
    replicated_below = max(producer.acked) + 1  # acknowledged by an ISR of 3
    for follower in followers:
        cluster.cut_between_brokers(leader, follower)
    wait_until(lambda: partition_0(cluster, "unclean")["isr"] == [leader], what="the ISR down to 1")
    alone = len(producer.acked)
    wait_until(lambda: len(producer.acked) >= alone + 50, what="acks by the lone leader")
    cluster.processes[leader].kill()
    producer.stop()
    cluster.heal()
    if not unclean:
        wait_until(
            lambda: partition_0(cluster, "unclean", among=followers)["leader"] == -1,
            what="the partition offline",
        )
        status, body = http(
            "POST",
            cluster.urls[followers[0]] + "/v1/topics/unclean/partitions/0/records",
            {"records": [{"value": "refused"}]},
        )
        assert status >= 400, body
        cluster.processes[leader].start()
        wait_until(
            lambda: partition_0(cluster, "unclean")["leader"] == leader,
            what="the old leader back as leader",
        )
        wait_for_full_isr(cluster, "unclean")
        assert_no_violations(check_partition(cluster, "unclean", producer.acked))
        return
    wait_until(
        lambda: partition_0(cluster, "unclean", among=followers)["leader"] in followers,
        what="an unclean leader",
    )
    after = Producer(cluster, "unclean", target=lambda: cluster.urls[followers[0]])
    after.start()
    cluster.processes[leader].start()
    wait_for_full_isr(cluster, "unclean")
    wait_until(
        lambda: (partition_0(cluster, "unclean")["high_watermark"] or 0) > max(producer.acked),
        what="new writes past the old leader's acknowledgements",
    )
    after.stop()
    violations = check_partition(cluster, "unclean", producer.acked, after.acked)
    lost = [v for v in violations if v.invariant == "lost"]
    assert lost, "unclean election lost nothing: the lone leader's acks were not exercised"
    assert [v for v in violations if v.invariant != "lost"] == []
    lost_offsets = [int(v.detail.split()[1]) for v in lost]
    assert min(lost_offsets) >= replicated_below, "lost a write acknowledged by an ISR of 3"


class Committer(threading.Thread):
    """Commits offsets 1, 2, 3, ... for one partition through random serving brokers and,
    after each acknowledged commit, reads the group's offsets back: the observations."""

    def __init__(self, cluster: Cluster, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.group, self.topic = cluster, group, topic
        self.acked = 0
        self.observed: list[tuple[tuple[str, str, int], int]] = []
        self.stop_flag = threading.Event()
        self.rng = random.Random(3)

    def url(self) -> str:
        serving = [u for b, u in self.cluster.urls.items() if self.cluster.processes[b].serving]
        return self.rng.choice(serving)

    def run(self) -> None:
        offset = self.acked + 1
        while not self.stop_flag.is_set():
            try:
                status, _ = http(
                    "POST",
                    self.url() + f"/v1/groups/{self.group}/offsets",
                    {"offsets": [{"topic": self.topic, "partition": 0, "offset": offset}]},
                    timeout=10,
                )
                if status == 204:
                    self.acked, offset = offset, offset + 1
                status, body = http("GET", self.url() + f"/v1/groups/{self.group}/offsets")
            except (OSError, IndexError):
                status, body = 0, None
            if status == 200:
                self.observed += [
                    ((self.group, o["topic"], o["partition"]), o["offset"]) for o in body["offsets"]
                ]
            else:
                time.sleep(0.05)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join()


def test_committed_group_offsets_survive_the_coordinator_and_never_go_back(
    cluster: Cluster,
) -> None:
    """Commits and reads under kill -9 of the coordinator's broker, then the new
    coordinator cut off from the controllers: no acknowledged commit is lost, and the
    committed offset as read never goes backwards."""
    create(cluster, "grp")
    for _ in range(4):  # commits must stay within the log (offsets 1, 2, ... up to 20,000)
        status, answer = http(
            "POST",
            cluster.urls[1] + "/v1/topics/grp/partitions/0/records",
            {"records": [{"value": "x"}] * 5000},
        )
        assert status == 200, answer
    committer = Committer(cluster, "g", "grp")
    committer.start()
    wait_until(lambda: committer.acked >= 30, what="commits")
    index = partition_for_key(b"g", 10)
    coordinator = describe(cluster, OFFSETS_TOPIC)["partitions"][index]["leader"]
    cluster.processes[coordinator].kill()
    acked = committer.acked
    wait_until(lambda: committer.acked >= acked + 30, what="commits to a new coordinator")
    cluster.processes[coordinator].start()
    cluster.wait_ready()
    successor = wait_until(
        lambda: describe(cluster, OFFSETS_TOPIC)["partitions"][index]["leader"],
        what="a coordinator",
    )
    cluster.cut_from_controllers(successor)
    rest = others(cluster, successor)
    wait_until(
        lambda: (
            describe(cluster, OFFSETS_TOPIC, among=rest)["partitions"][index]["leader"]
            not in (successor, -1)
        ),
        what="the coordinator to move away from the cut-off broker",
    )
    acked = committer.acked
    wait_until(
        lambda: committer.acked >= acked + 30, timeout_s=90, what="commits to the third coordinator"
    )
    cluster.heal()
    acked = committer.acked
    wait_until(lambda: committer.acked >= acked + 30, what="commits after the heal")
    committer.stop()
    status, body = http("GET", cluster.urls[1] + "/v1/groups/g/offsets")
    assert status == 200, body
    assert body["offsets"][0]["offset"] >= committer.acked, "an acknowledged commit was lost"
    assert committer.observed
    assert_no_violations(group_offsets_monotone(committer.observed))


@pytest.mark.randomized
@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", [7])
def test_random_faults_under_acks_all_load_lose_nothing(tmp_path: Path, seed: int) -> None:
    """The short randomized run (scripts/chaos.py runs long ones): one random fault at a
    time for 30 s (kill -9, pause, cuts of every kind, controller kill and pause), then
    heal, wait for the full ISR, and check every invariant."""
    result = chaos_run(tmp_path, seconds=30, seed=seed, log=lambda _: None)
    assert result.faults, "no fault was injected"
    assert result.acked > 0
    assert_no_violations(result.violations)


@pytest.mark.randomized
@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", [11])
def test_random_faults_while_replicas_move_lose_nothing(tmp_path: Path, seed: int) -> None:
    """The same with the topic's replicas moving all along (replication factor 3 -> 2 ->
    3 ..., each change a reassignment: a replica deleted, one copied back), then back to 3
    and every invariant checked (issue 14)."""
    result = chaos_run(tmp_path, seconds=30, seed=seed, log=lambda _: None, moves=True)
    assert any("replication factor" in f for f in result.faults), "nothing moved"
    assert result.acked > 0
    assert_no_violations(result.violations)


@pytest.mark.randomized
@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", [26])
def test_random_faults_on_a_compacted_topic_lose_no_key(tmp_path: Path, seed: int) -> None:
    """The same on a compacted topic that every replica's cleaner compacts all along, with
    keyed producers (issue 26): every key's latest acknowledged record survives (or a later
    one of its key), replicas cleaned apart agree on every key, and consumers read every
    record the cleaner keeps."""
    result = chaos_run(tmp_path, seconds=30, seed=seed, log=lambda _: None, compacted=True)
    assert result.faults, "no fault was injected"
    assert 0 < result.readable < result.acked / 4, "the cleaner hardly ran"
    assert_no_violations(result.violations)


@pytest.mark.randomized
@pytest.mark.timeout(420)
@pytest.mark.parametrize("seed", [27])
def test_random_faults_under_a_transactional_job_commit_each_input_once(
    tmp_path: Path, seed: int
) -> None:
    """The transactional workload (issue 27; tests/harness/txn_chaos.py): a
    consume-transform-produce job of librdkafka clients with exactly-once processing under
    random faults for 30 s, of brokers (partition leaders, the transaction and group
    coordinators) and controllers; a read_committed reader of its output sees no aborted
    record, every transaction whole, every committed one, and each input's output once."""
    result = txn_chaos_run(tmp_path, seconds=30, seed=seed, log=lambda _: None)
    assert result.faults, "no fault was injected"
    assert result.ledger.committed, "nothing was committed"
    assert_no_violations(result.violations)
