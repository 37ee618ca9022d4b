"""The elastic cluster's command-line tools (`brokers`, `cluster rebalance`, `reassignments`,
`topics alter`, `leaders elect`, `quorum describe`), run as real processes against one
real cluster per module: four brokers, three started; the fourth joins mid-module.

The tests share the cluster, each on topics of its own, and run in file order: broker 4
joins in test_a_plan_moves_partitions_onto_a_broker_started_later, and later tests take
into account that it may hold replicas.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftlite.cli import moves
from kraftlite.errors import ErrorCode, KraftliteError
from tests.harness.observe import wait_until
from tests.harness.processes import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("elastic-cli"),
        brokers=4,
        # no automatic preferred elections: test_leaders_elect makes leaders unpreferred
        controller_config={"leader.imbalance.check.interval.ms": 3_600_000},
    )
    running.start([1, 2, 3])
    try:
        yield running
    finally:
        running.close()


def kraftlite(cluster: Cluster | None, *args: str) -> subprocess.CompletedProcess[str]:
    bootstrap = [] if cluster is None else ["--bootstrap", cluster.urls[1]]
    return subprocess.run(
        [sys.executable, "-m", "kraftlite", *args, *bootstrap],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(cluster: Cluster, *args: str) -> Any:
    """The command's JSON output (`--output json`), asserting it exits 0."""
    result = kraftlite(cluster, *args, "--output", "json")
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return json.loads(result.stdout)


def create_topic(cluster: Cluster, name: str, partitions: int, factor: int) -> dict[str, Any]:
    ok(cluster, "topics", "create", name, "--partitions", str(partitions),
       "--replication-factor", str(factor))  # fmt: skip
    return wait_until(lambda: in_sync(cluster, name), what=f"{name}'s replicas in sync")


def in_sync(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The topic once every partition has a leader and every replica in the ISR."""
    topic: dict[str, Any] = ok(cluster, "topics", "describe", name)
    settled = all(
        p["leader"] in p["replicas"]
        and sorted(p["isr"]) == sorted(p["replicas"])
        and not p["adding_replicas"]
        and not p["removing_replicas"]
        for p in topic["partitions"]
    )
    return topic if settled else None


def test_brokers_list_shows_states_and_counts(cluster: Cluster) -> None:
    topic = create_topic(cluster, "counted", partitions=3, factor=2)
    replicas = {b: 0 for b in (1, 2, 3)}
    leaders = dict(replicas)
    for p in topic["partitions"]:
        for b in p["replicas"]:
            replicas[b] += 1
        leaders[p["leader"]] += 1
    listed = ok(cluster, "brokers", "list")
    by_id = {b["id"]: b for b in listed}
    assert sorted(by_id) == [1, 2, 3]  # broker 4 has not registered yet
    assert {b["state"] for b in listed} == {"active"}
    # "counted" is the only topic so far (no group has created __consumer_offsets)
    assert {b: by_id[b]["replicas"] for b in by_id} == replicas
    assert {b: by_id[b]["leaders"] for b in by_id} == leaders
    assert ok(cluster, "brokers", "describe", "2") == by_id[2]
    table = kraftlite(cluster, "brokers", "list")
    assert table.returncode == 0 and "active" in table.stdout, table.stderr
    missing = kraftlite(cluster, "brokers", "describe", "99")
    assert missing.returncode == 1 and "BROKER_ID_NOT_REGISTERED" in missing.stderr


def test_topics_alter_needs_an_option() -> None:
    result = kraftlite(None, "topics", "alter", "anything")
    assert result.returncode == 2
    assert "--replication-factor" in result.stderr
    assert "Traceback" not in result.stderr


def test_topics_alter_replication_factor(cluster: Cluster) -> None:
    create_topic(cluster, "grown", partitions=2, factor=1)
    altered = ok(cluster, "topics", "alter", "grown", "--replication-factor", "2", "--wait",
                 "--config", "retention.ms=3600000")  # fmt: skip
    assert len(altered["moves"]) == 2
    assert all(len(m["from"]) == 1 and len(m["to"]) == 2 for m in altered["moves"])
    assert altered["configs"]["retention.ms"] == "3600000"
    settled = wait_until(lambda: in_sync(cluster, "grown"), what="RF 2 settled")
    assert [len(p["replicas"]) for p in settled["partitions"]] == [2, 2]
    assert ok(cluster, "reassignments", "list") == []
    listed = {t["name"]: t for t in ok(cluster, "topics", "list")}
    assert listed["grown"]["replication_factor"] == 2


def test_a_plan_moves_partitions_onto_a_broker_started_later(
    cluster: Cluster, tmp_path: Path
) -> None:
    before = create_topic(cluster, "moved", partitions=2, factor=2)
    produced = subprocess.run(
        [sys.executable, "-m", "kraftlite", "produce", "moved", "--bootstrap", cluster.urls[1]],
        input="".join(f"record-{i}\n" for i in range(200)),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    cluster.start_broker(4)
    wait_until(
        lambda: {b["id"]: b["state"] for b in ok(cluster, "brokers", "list")}.get(4) == "active",
        what="broker 4 active",
    )
    # each partition's first replica leaves; broker 4 takes its place
    targets = {p["partition"]: [4, *p["replicas"][1:]] for p in before["partitions"]}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": [
        {"topic": "moved", "partition": i, "replicas": r} for i, r in targets.items()
    ]}))  # fmt: skip
    result = kraftlite(cluster, "reassignments", "execute", "--file", str(plan), "--wait",
                       "--timeout-s", "60", "--output", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    started = json.loads(result.stdout)
    assert [a["adding"] for a in started] == [[4], [4]], started
    assert "2 partitions moved" in result.stderr
    assert ok(cluster, "reassignments", "list") == []
    empty = kraftlite(cluster, "reassignments", "list")
    assert empty.returncode == 0 and "no reassignment in progress" in empty.stderr
    after = wait_until(lambda: in_sync(cluster, "moved"), what="the moves settled")
    assert {p["partition"]: p["replicas"] for p in after["partitions"]} == targets
    # a cancel of partitions no longer moving changes nothing and says so
    cancelled = kraftlite(cluster, "reassignments", "cancel", "moved:0", "--file", str(plan))
    assert cancelled.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in cancelled.stderr


def test_rebalance_dry_run_prints_moves_and_changes_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster, "lopsided", partitions=4, factor=1)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": [
        {"topic": "lopsided", "partition": i, "replicas": [1]} for i in range(4)
    ]}))  # fmt: skip
    ok(cluster, "reassignments", "execute", "--file", str(plan), "--wait")
    before = ok(cluster, "brokers", "list")
    topic_before = ok(cluster, "topics", "describe", "lopsided")
    moves = ok(cluster, "cluster", "rebalance", "--dry-run")
    assert moves, "four partitions on one broker of four: something to move"
    assert all({"topic", "partition", "from", "to"} <= m.keys() for m in moves)
    assert ok(cluster, "reassignments", "list") == []
    assert ok(cluster, "brokers", "list") == before
    after = ok(cluster, "topics", "describe", "lopsided")
    assert [p["replicas"] for p in after["partitions"]] == [[1]] * 4
    assert after["partitions"] == topic_before["partitions"]
    table = kraftlite(cluster, "cluster", "rebalance", "--dry-run")
    assert table.returncode == 0 and "nothing changed" in table.stderr, table.stderr
    assert f"moves planned (dry run): {len(moves)}" in table.stdout  # the same plan
    both = kraftlite(cluster, "cluster", "rebalance", "--dry-run", "--wait")
    assert both.returncode == 2


def test_leaders_elect(cluster: Cluster, tmp_path: Path) -> None:
    before = create_topic(cluster, "led", partitions=2, factor=2)
    # the same replicas in the other order: the leader stays, and is no longer preferred
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": [
        {"topic": "led", "partition": p["partition"], "replicas": p["replicas"][::-1]}
        for p in before["partitions"]
    ]}))  # fmt: skip
    ok(cluster, "reassignments", "execute", "--file", str(plan))
    reordered = ok(cluster, "topics", "describe", "led")
    assert all(p["leader"] != p["replicas"][0] for p in reordered["partitions"]), reordered
    elections = ok(cluster, "leaders", "elect", "--topic", "led", "--partition", "0")
    assert elections == [
        {"topic": "led", "partition": 0, "leader": reordered["partitions"][0]["replicas"][0]}
    ]
    # every partition (no --topic): only those not led by their preferred replica
    everywhere = {(e["topic"], e["partition"]): e for e in ok(cluster, "leaders", "elect")}
    assert ("led", 0) not in everywhere  # led by its preferred replica already
    assert "error_code" not in everywhere[("led", 1)], everywhere
    led = wait_until(
        lambda: (
            (t := ok(cluster, "topics", "describe", "led"))
            and all(p["leader"] == p["replicas"][0] for p in t["partitions"])
            and t
        ),
        what="preferred leaders",
    )
    assert led["partitions"][1]["leader"] == everywhere[("led", 1)]["leader"]
    again = kraftlite(cluster, "leaders", "elect", "--topic", "led")
    assert again.returncode == 0 and "ELECTION_NOT_NEEDED" in again.stdout, again.stderr
    usage = kraftlite(cluster, "leaders", "elect", "--partition", "0")
    assert usage.returncode == 2
    # unclean: only partitions with no leader, and every one here has one
    unclean = kraftlite(cluster, "leaders", "elect", "--topic", "led", "--unclean")
    assert unclean.returncode == 0 and "ELECTION_NOT_NEEDED" in unclean.stdout, unclean.stderr


def test_removing_a_broker_that_holds_replicas_is_refused(cluster: Cluster) -> None:
    create_topic(cluster, "everywhere", partitions=1, factor=3)
    holder = ok(cluster, "topics", "describe", "everywhere")["partitions"][0]["replicas"][0]
    result = kraftlite(cluster, "brokers", "remove", str(holder))
    assert result.returncode == 1
    assert "BROKER_IN_USE" in result.stderr
    assert "Traceback" not in result.stderr
    states = {b["id"]: b["state"] for b in ok(cluster, "brokers", "list")}
    assert states[holder] == "active"


def test_drain_then_remove_a_broker(cluster: Cluster) -> None:
    drained = kraftlite(cluster, "brokers", "drain", "4", "--wait", "--timeout-s", "60")
    assert drained.returncode == 0, drained.stderr
    assert "broker 4 is drained" in drained.stderr
    assert ok(cluster, "brokers", "describe", "4")["replicas"] == 0
    cluster.processes[4].terminate()  # drained, stopped, then unregistered
    removed = kraftlite(cluster, "brokers", "remove", "4")
    assert removed.returncode == 0, removed.stderr
    assert 4 not in {b["id"] for b in ok(cluster, "brokers", "list")}


def test_quorum_describe(cluster: Cluster) -> None:
    controller = next(iter(cluster.quorum.urls.values()))
    result = kraftlite(None, "quorum", "describe", "--output", "json", "--bootstrap", controller)
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    assert [v["id"] for v in described["voters"]] == [1, 2, 3]
    assert described["leader_id"] in {1, 2, 3}
    states = {v["id"]: v["state"] for v in described["voters"]}
    assert states[described["leader_id"]] == "leader"
    assert described["term"] >= 1 and described["metadata_offset"] > 0
    table = kraftlite(None, "quorum", "describe", "--bootstrap", controller)
    assert table.returncode == 0 and "leader" in table.stdout, table.stderr


class _Reassignments:
    """`SyncAdmin.list_reassignments` answering from a script (the last answer repeats)."""

    def __init__(self, *answers: list[dict[str, Any]] | KraftliteError) -> None:
        self.answers = list(answers)

    def list_reassignments(self) -> list[dict[str, Any]]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, KraftliteError):
            raise answer
        return answer


def test_waiting_follows_the_moves_and_gives_up_at_the_timeout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(moves, "POLL_INTERVAL_S", 0.01)
    wait: Any = moves.await_moves  # takes any object with list_reassignments
    both = [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]
    other = [{"topic": "other", "partition": 0}]  # someone else's move: not waited for
    retriable = KraftliteError(ErrorCode.NOT_CONTROLLER)
    wait(_Reassignments(both, retriable, both[1:], other), [("t", 0), ("t", 1)], timeout_s=10)
    assert "2 partitions moved" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        wait(_Reassignments(both[:1]), [("t", 0)], timeout_s=0.1)
    assert exited.value.code == 1
    assert "timed out after 0.1 s: 1 of 1 partitions still moving" in capsys.readouterr().err
    refused = KraftliteError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    with pytest.raises(KraftliteError):
        wait(_Reassignments(refused), [("t", 0)], timeout_s=10)


def test_broker_configs_and_undrain(cluster: Cluster) -> None:
    """`brokers configs` sets and resets the throttle; `brokers undrain` of a broker that is
    not draining changes nothing; a bad config exits 1 with its error code."""
    answer = ok(cluster, "brokers", "configs", "1", "--set", "replication.throttled.rate=4096")
    assert answer == {"id": 1, "configs": {"replication.throttled.rate": "4096"}}
    assert ok(cluster, "brokers", "configs", "1")["configs"] == {
        "replication.throttled.rate": "4096"
    }
    answer = ok(cluster, "brokers", "configs", "1", "--delete", "replication.throttled.rate")
    assert answer["configs"] == {}
    bad = kraftlite(cluster, "brokers", "configs", "1", "--set", "replication.throttled.rate=0")
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr, bad.stderr
    undrained = kraftlite(cluster, "brokers", "undrain", "1")
    assert undrained.returncode == 0, undrained.stderr
    assert ok(cluster, "brokers", "describe", "1")["state"] == "active"
