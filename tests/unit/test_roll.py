"""`kraftlite cluster roll`'s decisions (kraftlite/cli/roll.py): the order, when the cluster
is whole, and the operator's restart command."""

from __future__ import annotations

from typing import Any

import pytest

from kraftlite.cli.roll import (
    MAX_VOTER_LAG,
    RollError,
    Target,
    plan,
    problems,
    restart_command,
)

QUORUM: dict[str, Any] = {
    "leader_id": 2,
    "voters": [
        {"id": 1, "state": "follower", "lag": 0, "url": "https://c1:8090"},
        {"id": 2, "state": "leader", "lag": 0, "url": "https://c2:8090"},
        {"id": 3, "state": "follower", "lag": 3, "url": "https://c3:8090"},
    ],
}
CLUSTER: dict[str, Any] = {
    "brokers": [
        {"id": 3, "url": "https://b3:8080", "fenced": False, "in_controlled_shutdown": False},
        {"id": 1, "url": "https://b1:8080", "fenced": False, "in_controlled_shutdown": False},
        {"id": 2, "url": "https://b2:8080", "fenced": False, "in_controlled_shutdown": False},
    ]
}
WHOLE = {"under_replicated_partitions": 0, "offline_partitions": 0}


def test_controllers_go_first_the_active_one_last_then_brokers_by_id() -> None:
    order = [t.name for t in plan(QUORUM, CLUSTER, ("controller", "broker"))]
    assert order == [
        "controller-1",
        "controller-3",
        "controller-2",
        "broker-1",
        "broker-2",
        "broker-3",
    ]
    assert [t.name for t in plan(QUORUM, CLUSTER, ("broker",))] == [
        "broker-1",
        "broker-2",
        "broker-3",
    ]


def test_a_voter_without_a_url_stops_the_plan() -> None:
    voters = [*QUORUM["voters"][:2], {"id": 3, "state": "follower", "lag": 0, "url": None}]
    with pytest.raises(ValueError, match="controller 3"):
        plan({**QUORUM, "voters": voters}, CLUSTER, ("controller",))


def test_a_whole_cluster_has_no_problems() -> None:
    assert problems(QUORUM, CLUSTER, WHOLE) == []


@pytest.mark.parametrize(
    ("quorum", "cluster", "stats", "expected"),
    [
        ({**QUORUM, "leader_id": None}, CLUSTER, WHOLE, "the controller quorum has no leader"),
        (
            {**QUORUM, "voters": [{"id": 3, "state": "unreachable", "lag": None}]},
            CLUSTER,
            WHOLE,
            "controller 3 is unreachable",
        ),
        (
            {**QUORUM, "voters": [{"id": 3, "state": "follower", "lag": None}]},
            CLUSTER,
            WHOLE,
            "controller 3's lag is not known yet",  # the leader has not heard from it
        ),
        (
            {**QUORUM, "voters": [{"id": 3, "state": "follower", "lag": MAX_VOTER_LAG + 1}]},
            CLUSTER,
            WHOLE,
            f"controller 3 lags {MAX_VOTER_LAG + 1} entries",
        ),
        (QUORUM, {"brokers": [{"id": 2, "fenced": True}]}, WHOLE, "broker 2 is fenced"),
        (
            QUORUM,
            {"brokers": [{"id": 2, "fenced": False, "in_controlled_shutdown": True}]},
            WHOLE,
            "broker 2 is shutting down",
        ),
        (QUORUM, CLUSTER, {**WHOLE, "under_replicated_partitions": 4}, "4 partitions under"),
        (QUORUM, CLUSTER, {**WHOLE, "offline_partitions": 1}, "1 partitions offline"),
    ],
)
def test_what_keeps_a_cluster_from_being_whole(
    quorum: dict[str, Any], cluster: dict[str, Any], stats: dict[str, Any], expected: str
) -> None:
    found = problems(quorum, cluster, stats)
    assert any(p.startswith(expected) for p in found), found


def test_the_operators_command_is_filled_in_and_split_as_a_shell_would() -> None:
    target = Target("broker", 2, "https://10.88.5.2:8080")
    argv = restart_command("ssh {host} 'sudo systemctl restart kraftlite-{kind}@{id}'", target)
    assert argv == ["ssh", "10.88.5.2", "sudo systemctl restart kraftlite-broker@2"]
    # what the cluster reports is data, never syntax: a URL with spaces or quotes stays
    # one word, and a value that would be an option is refused
    odd = Target("broker", 2, "https://h:1/a b';rm -rf /")
    assert restart_command("echo {url}", odd) == ["echo", "https://h:1/a b';rm -rf /"]
    with pytest.raises(RollError, match="looks like an option"):
        restart_command("ssh {host} true", Target("broker", 2, "https://-oProxyCommand=x:1"))
