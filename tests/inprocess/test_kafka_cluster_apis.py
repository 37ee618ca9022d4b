"""Kafka's cluster admin APIs (kraftlite/kafka/cluster_apis.py) in-process: the legacy
AlterConfigs, DescribeLogDirs, ElectLeaders, Alter/ListPartitionReassignments and
DescribeQuorum, encoded as a client encodes them, over one in-process broker whose
controller calls the ControllerTwin answers with the controllers' own decisions
(tests/harness/inprocess.py). Each API: what it does, its bad inputs, and a principal
without the ACL getting Kafka's code with nothing changed and no controller call."""

from __future__ import annotations

import collections
import itertools
import uuid
from collections.abc import AsyncIterator, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.kafka import cluster_apis
from kraftlite.metadata import records as r
from kraftlite.metadata.records import NO_LEADER
from kraftlite.metadata.topics import TOPIC_CONFIGS
from kraftlite.protocol import admin
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.security.authenticator import AuthSettings
from tests.harness.inprocess import (
    BROKER_ID,
    ControllerTwin,
    InProcessBroker,
    KafkaConnection,
    kafka_batch,
    topic_id_for,
)

ALICE = "User:alice"
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
REQUEST_TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)
INVALID_TOPIC_EXCEPTION = int(ErrorCode.INVALID_TOPIC_EXCEPTION)
TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
CLUSTER_AUTHORIZATION_FAILED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
INVALID_REPLICA_ASSIGNMENT = int(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
INVALID_CONFIG = int(ErrorCode.INVALID_CONFIG)
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
NOT_CONTROLLER = int(ErrorCode.NOT_CONTROLLER)
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8  # Kafka's config resource types
PREFERRED, UNCLEAN = 0, 1
_acl_ids = itertools.count()
NO_DIRECTORY = uuid.UUID(int=0)


def grant(
    operation: str, kind: str = "CLUSTER", name: str = "kraftlite-cluster"
) -> r.MetadataRecord:
    return r.AccessControlEntryRecord(
        id=f"cluster-acl-{next(_acl_ids)}",
        resource_type=kind,
        resource_name=name,
        pattern_type="LITERAL",
        principal=ALICE,
        host="*",
        operation=operation,
        permission_type="ALLOW",
    )


def place(
    node: InProcessBroker, name: str, *layout: tuple[tuple[int, ...], tuple[int, ...], int]
) -> None:
    """A topic whose partition i has (replicas, isr, leader) = layout[i]."""
    topic_id = topic_id_for(name)
    node.apply(
        r.TopicRecord(name=name, topic_id=topic_id),
        *(
            r.PartitionRecord(topic_id=topic_id, partition=i, replicas=rs, isr=isr, leader=leader)
            for i, (rs, isr, leader) in enumerate(layout)
        ),
    )


def partition_of(node: InProcessBroker, topic: str, index: int = 0) -> Any:
    found = node.image.topic(topic)
    assert found is not None
    return found.partitions[index]


def twin_of(node: InProcessBroker) -> ControllerTwin:
    twin = ControllerTwin(node)
    node.broker.controllers = twin  # type: ignore[assignment]
    return twin


@pytest.fixture
async def secured() -> AsyncIterator[InProcessBroker]:
    """A broker whose clients must authenticate, with a topic `orders`."""
    async with InProcessBroker(auth=AuthSettings(required=True)) as broker:
        broker.create_topic("orders")
        yield broker


@pytest.fixture
def audit() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as captured:
        yield captured


def denied(audit: list[MutableMapping[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (line["operation"], line["resource_type"], line["api"])
        for line in audit
        if line["event"] == "authorization_denied"
    ]


async def test_api_versions_lists_the_cluster_apis(node: InProcessBroker) -> None:
    answer = await node.connect().call(ApiKey.API_VERSIONS, 3, {})
    served = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert {key: served[key] for key in cluster_apis.APIS} == {
        ApiKey.ALTER_CONFIGS: (0, 2),
        ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
        ApiKey.ELECT_LEADERS: (0, 2),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.DESCRIBE_QUORUM: (0, 2),
    }


# -- AlterConfigs (legacy) -----------------------------------------------------------------------


def resource(kind: int, name: str, **configs: str | None) -> dict[str, Any]:
    return {
        "resource_type": kind,
        "resource_name": name,
        "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()],
    }


async def alter_configs(
    kafka: KafkaConnection,
    *resources: dict[str, Any],
    validate_only: bool = False,
    version: int = 2,
) -> list[tuple[str, int]]:
    answer = await kafka.call(
        ApiKey.ALTER_CONFIGS,
        version,
        {"resources": list(resources), "validate_only": validate_only},
    )
    return [(a["resource_name"], a["error_code"]) for a in answer["responses"]]


async def test_alter_configs_replaces_a_topics_configs(node: InProcessBroker) -> None:
    """Unlike IncrementalAlterConfigs, the configs not named go back to their defaults, in
    one controller call naming every topic config (those not named null)."""
    twin = twin_of(node)
    node.create_topic("legacy", configs={"retention.ms": "1000", "max.message.bytes": "2048"})
    kafka = node.connect()
    assert await alter_configs(kafka, resource(TOPIC, "legacy", retention_bytes="4096")) == [
        ("legacy", NONE)
    ]
    assert node.image.topic("legacy").configs == {"retention.bytes": "4096"}  # type: ignore[union-attr]
    ((method, path, body, _),) = twin.calls
    assert (method, path) == ("PUT", "/v1/topics/legacy/configs")
    assert body["configs"] == {
        **dict.fromkeys(TOPIC_CONFIGS),
        "retention.bytes": "4096",
    }
    # v0 and v1 are the same request: an empty list resets every config
    assert await alter_configs(kafka, resource(TOPIC, "legacy"), version=0) == [("legacy", NONE)]
    assert node.image.topic("legacy").configs == {}  # type: ignore[union-attr]


async def test_incremental_alter_configs_appends_to_and_subtracts_from_a_list(
    node: InProcessBroker,
) -> None:
    """APPEND and SUBTRACT of cleanup.policy (librdkafka's 0011 turns compaction on so),
    from the topic's current value or its default, each item once, as Kafka's."""
    twin_of(node)
    node.create_topic("listed")
    kafka = node.connect()

    async def change(*configs: tuple[str, int, str | None]) -> int:
        answer = await kafka.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            {
                "resources": [
                    {
                        "resource_type": TOPIC,
                        "resource_name": "listed",
                        "configs": [
                            {"name": n, "config_operation": op, "value": v} for n, op, v in configs
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
        ((result),) = answer["responses"]
        return int(result["error_code"])

    def policy() -> str | None:
        return node.image.topic("listed").configs.get("cleanup.policy")  # type: ignore[union-attr]

    append, subtract = 2, 3
    assert await change(("cleanup.policy", append, "compact")) == NONE
    assert policy() == "delete,compact"  # appended to the default
    assert await change(("cleanup.policy", append, "compact,delete")) == NONE
    assert policy() == "delete,compact"  # each item once
    assert await change(("cleanup.policy", subtract, "delete")) == NONE
    assert policy() == "compact"
    for refused, code in (
        ((("retention.ms", append, "5"),), INVALID_CONFIG),  # not a list
        ((("cleanup.policy", 4, "compact"),), INVALID_REQUEST),  # no such operation
        ((("cleanup.policy", 0, "compact"), ("cleanup.policy", 1, None)), INVALID_REQUEST),
    ):
        assert await change(*refused) == code, refused
    assert policy() == "compact"
    assert await change(("cleanup.policy", subtract, "compact")) == NONE
    assert policy() == ""  # neither: Kafka takes an empty list, and keeps records for ever


async def test_alter_configs_replaces_a_brokers_dynamic_configs(node: InProcessBroker) -> None:
    twin_of(node)
    kafka = node.connect()
    named = resource(BROKER, str(BROKER_ID), replication_throttled_rate="1048576")
    assert await alter_configs(kafka, named) == [("1", NONE)]
    assert node.image.broker_configs[BROKER_ID] == {"replication.throttled.rate": "1048576"}
    assert await alter_configs(kafka, resource(BROKER, "1")) == [("1", NONE)]
    assert BROKER_ID not in node.image.broker_configs
    assert await alter_configs(kafka, resource(BROKER, "7")) == [
        ("7", int(ErrorCode.BROKER_ID_NOT_REGISTERED))
    ]


async def test_alter_configs_validate_only_checks_with_the_controllers_decision(
    node: InProcessBroker,
) -> None:
    """validate_only answers what the change would answer and changes nothing, asking no
    controller."""
    twin = twin_of(node)
    node.create_topic("kept", configs={"retention.ms": "1000"})
    kafka = node.connect()
    answers = await alter_configs(
        kafka,
        resource(TOPIC, "kept", retention_bytes="10"),
        resource(TOPIC, "nope", retention_bytes="10"),
        resource(TOPIC, "orders", min_insync_replicas="0"),
        resource(TOPIC, "orders-2", compression_type="zstd"),
        resource(BROKER, "1", replication_throttled_rate="fast"),
        validate_only=True,
    )
    assert answers == [
        ("kept", NONE),
        ("nope", UNKNOWN_TOPIC_OR_PARTITION),
        ("orders", INVALID_CONFIG),
        ("orders-2", UNKNOWN_TOPIC_OR_PARTITION),
        ("1", INVALID_CONFIG),
    ]
    assert twin.calls == []
    assert node.image.topic("kept").configs == {"retention.ms": "1000"}  # type: ignore[union-attr]


async def test_alter_configs_bad_inputs_change_nothing(node: InProcessBroker) -> None:
    """Kafka's preprocessing (a resource or a config named twice, null values, other
    resource types), names, unknown configs and the bound on resources: each resource its
    own INVALID_* code, nothing changed."""
    twin = twin_of(node)
    node.create_topic("kept", configs={"retention.ms": "1000"})
    node.create_topic("other")
    kafka = node.connect()
    twice_config = resource(TOPIC, "kept")
    twice_config["configs"] = [{"name": "retention.ms", "value": "1"}] * 2
    answers = await alter_configs(
        kafka,
        resource(TOPIC, "kept", retention_ms="5"),
        resource(TOPIC, "kept", retention_ms="6"),
        twice_config | {"resource_name": "kept-too"},
        resource(TOPIC, "orders", retention_ms=None),
        resource(BROKER_LOGGER, "1", kafka="DEBUG"),
        resource(TOPIC, "a/b", retention_ms="5"),
        resource(BROKER, "broker-1", replication_throttled_rate="5"),
        resource(TOPIC, "other", no_such_config="5"),
    )
    assert answers == [
        ("kept", INVALID_REQUEST),
        ("kept", INVALID_REQUEST),
        ("kept-too", INVALID_REQUEST),
        ("orders", INVALID_REQUEST),
        ("1", INVALID_REQUEST),
        ("a/b", INVALID_TOPIC_EXCEPTION),
        ("broker-1", INVALID_REQUEST),
        ("other", INVALID_CONFIG),
    ]
    assert [path for _, path, _, _ in twin.calls] == ["/v1/topics/other/configs"]
    assert node.image.topic("kept").configs == {"retention.ms": "1000"}  # type: ignore[union-attr]
    assert node.image.topic("orders").configs == {}  # type: ignore[union-attr]
    many = [resource(TOPIC, f"t{i}") for i in range(cluster_apis.MAX_CONFIG_RESOURCES + 2)]
    codes = [code for _, code in await alter_configs(kafka, *many, validate_only=True)]
    assert codes[-2:] == [INVALID_REQUEST, INVALID_REQUEST]
    assert set(codes[:-2]) == {UNKNOWN_TOPIC_OR_PARTITION}


async def test_alter_configs_needs_alter_configs_on_the_topic_or_the_cluster(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    twin = twin_of(secured)
    alice = secured.connect(certificate_principal=ALICE)
    wanted = (
        resource(TOPIC, "orders", retention_ms="5"),
        resource(BROKER, "1", replication_throttled_rate="5"),
        resource(TOPIC, "__consumer_offsets", retention_ms="5"),
    )
    assert await alter_configs(alice, *wanted) == [
        ("orders", TOPIC_AUTHORIZATION_FAILED),
        ("1", CLUSTER_AUTHORIZATION_FAILED),
        ("__consumer_offsets", TOPIC_AUTHORIZATION_FAILED),
    ]
    assert twin.calls == [] and secured.image.topic("orders").configs == {}  # type: ignore[union-attr]
    assert BROKER_ID not in secured.image.broker_configs
    assert denied(audit) == [("ALTER_CONFIGS", "TOPIC", "AlterConfigs")]  # one line, counted
    secured.apply(grant("ALTER_CONFIGS", "TOPIC", "orders"), grant("ALTER_CONFIGS"))
    assert await alter_configs(alice, *wanted[:2]) == [("orders", NONE), ("1", NONE)]
    assert secured.image.topic("orders").configs == {"retention.ms": "5"}  # type: ignore[union-attr]
    # the controllers are asked as the client, who they authorize again
    assert all(headers is not None and ALICE in headers.values() for *_, headers in twin.calls)


# -- DescribeLogDirs -----------------------------------------------------------------------------


async def describe_log_dirs(
    kafka: KafkaConnection, topics: list[dict[str, Any]] | None, version: int = 4
) -> dict[str, Any]:
    return await kafka.call(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": topics})


async def test_describe_log_dirs_lists_this_brokers_logs(node: InProcessBroker) -> None:
    kafka = node.connect()
    sizes = []
    for _ in range(2):
        await kafka.call(
            ApiKey.PRODUCE,
            9,
            {
                "acks": -1,
                "timeout_ms": 1000,
                "topic_data": [
                    {
                        "name": "orders",
                        "partition_data": [
                            {"index": 0, "records": kafka_batch([b"x" * 100], timestamp=1)}
                        ],
                    }
                ],
            },
        )
        sizes.append(node.partition("orders", 0).log.size_bytes)
    answer = await describe_log_dirs(kafka, None)
    assert answer["error_code"] == NONE
    ((result),) = answer["results"]
    assert (result["error_code"], result["log_dir"]) == (NONE, ":memory:")
    assert (result["total_bytes"], result["usable_bytes"]) == (-1, -1)  # no disk here
    assert result["topics"] == [  # never __consumer_offsets
        {
            "name": "orders",
            "partitions": [
                {
                    "partition_index": 0,
                    "partition_size": sizes[-1],
                    "offset_lag": 0,
                    "is_future_key": False,
                },
                {
                    "partition_index": 1,
                    "partition_size": 0,
                    "offset_lag": 0,
                    "is_future_key": False,
                },
            ],
        }
    ]
    assert sizes[-1] > sizes[0] > 0
    # named: those hosted here (unknown ones, other brokers' and internal ones left out)
    node.register_broker(2)
    node.create_topic("elsewhere", leader=2)
    named = [
        {"topic": "orders", "partitions": [1, 7]},
        {"topic": "nope", "partitions": [0]},
        {"topic": "elsewhere", "partitions": [0]},
        {"topic": "__consumer_offsets", "partitions": [0]},
    ]
    ((result),) = (await describe_log_dirs(kafka, named, version=1))["results"]
    assert result["total_bytes"] == -1  # v4's field: decoded as its default
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in result["topics"]
    ] == [("orders", [1])]


async def test_describe_log_dirs_needs_describe_on_the_cluster(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    """v3+: CLUSTER_AUTHORIZATION_FAILED at the top; v1-2 have no field for it: no
    results, as Kafka answers."""
    alice = secured.connect(certificate_principal=ALICE)
    assert await describe_log_dirs(alice, None, version=3) == {
        "throttle_time_ms": 0,
        "error_code": CLUSTER_AUTHORIZATION_FAILED,
        "results": [],
    }
    assert (await describe_log_dirs(alice, None, version=1))["results"] == []
    assert denied(audit) == [("DESCRIBE", "CLUSTER", "DescribeLogDirs")] * 2
    secured.apply(grant("DESCRIBE"))
    answer = await describe_log_dirs(alice, None)
    assert [t["name"] for t in answer["results"][0]["topics"]] == ["orders"]


async def test_describe_log_dirs_reads_the_disk_of_a_real_data_directory(tmp_path: Path) -> None:
    total, usable = await cluster_apis._disk_usage(tmp_path)
    assert total > 0 and 0 <= usable <= total
    assert await cluster_apis._disk_usage(tmp_path / "gone") == (-1, -1)
    assert cluster_apis.log_dir_name(Path("run/broker-1")) == str(Path.cwd() / "run/broker-1")


# -- ElectLeaders --------------------------------------------------------------------------------


def election_body(
    partitions: dict[str, Sequence[int]] | None, kind: int = PREFERRED, timeout_ms: int = 5000
) -> dict[str, Any]:
    return {
        "election_type": kind,
        "topic_partitions": None
        if partitions is None
        else [{"topic": t, "partitions": list(ps)} for t, ps in partitions.items()],
        "timeout_ms": timeout_ms,
    }


def elected(answer: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (topic["topic"], p["partition_id"]): p["error_code"]
        for topic in answer["replica_election_results"]
        for p in topic["partition_result"]
    }


@pytest.fixture
def brokers(node: InProcessBroker) -> InProcessBroker:
    """Brokers 2 and 3 registered and live besides broker 1."""
    node.register_broker(2)
    node.register_broker(3)
    return node


async def test_preferred_elections_move_leaders_to_the_first_replica(
    brokers: InProcessBroker,
) -> None:
    node = brokers
    twin = twin_of(node)
    place(
        node,
        "elected",
        ((2, 1), (1, 2), 1),  # preferred 2 is in sync: it leads after
        ((1, 2), (1, 2), 1),  # the preferred already leads
        ((3, 1), (1,), 1),  # the preferred is not in sync
    )
    kafka = node.connect()
    wanted = {"elected": [0, 1, 2, 9], "nope": [0], "__consumer_offsets": [0]}
    answer = await kafka.call(ApiKey.ELECT_LEADERS, 2, election_body(wanted))
    assert answer["error_code"] == NONE
    assert elected(answer) == {
        ("elected", 0): NONE,
        ("elected", 1): ELECTION_NOT_NEEDED,
        ("elected", 2): PREFERRED_LEADER_NOT_AVAILABLE,
        ("elected", 9): UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION,
        ("__consumer_offsets", 0): UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert [partition_of(node, "elected", i).leader for i in range(3)] == [2, 1, 1]
    ((_, path, body, _),) = twin.calls  # one call, with the partitions that exist only
    assert path == "/v1/elections" and body["type"] == "preferred"
    assert body["partitions"] == [{"topic": "elected", "partition": i} for i in range(3)]
    # null: every partition that needs one (internal ones never), and only those answered
    # (Kafka's rule); v0 has no election type (preferred)
    place(node, "more", ((2, 1), (1, 2), 1), ((1,), (1,), 1))
    offsets = topic_id_for("__consumer_offsets")
    node.apply(r.PartitionChangeRecord(topic_id=offsets, partition=0, replicas=(2, 1), isr=(1, 2)))
    twin.calls.clear()
    answer = await kafka.call(ApiKey.ELECT_LEADERS, 0, election_body(None, kind=UNCLEAN))
    assert elected(answer) == {("elected", 2): PREFERRED_LEADER_NOT_AVAILABLE, ("more", 0): NONE}
    assert partition_of(node, "more").leader == 2
    assert partition_of(node, "__consumer_offsets").leader == 1
    ((_, _, body, _),) = twin.calls
    assert body["partitions"] == [
        {"topic": "elected", "partition": 2},
        {"topic": "more", "partition": 0},
    ]


async def test_unclean_elections_give_leaderless_partitions_a_live_replica(
    brokers: InProcessBroker,
) -> None:
    """UNCLEAN: a live replica outside the ISR leads when no in-sync one is live, whatever
    the topic's unclean.leader.election.enable (off here); one with a leader needs none,
    one with no live replica gets ELIGIBLE_LEADERS_NOT_AVAILABLE."""
    node = brokers
    twin_of(node)
    place(
        node,
        "lost",
        ((3, 2), (3,), 3),  # its only in-sync replica is about to die
        ((3,), (3,), 3),  # its only replica too
        ((1, 2), (1, 2), 1),
    )
    node.apply(r.FenceBrokerRecord(broker_id=3, broker_epoch=node.image.brokers[3].broker_epoch))
    topic_id = topic_id_for("lost")
    node.apply(
        *(
            r.PartitionChangeRecord(topic_id=topic_id, partition=i, leader=NO_LEADER, isr=(3,))
            for i in (0, 1)
        )
    )
    assert partition_of(node, "lost", 0).leader == NO_LEADER
    kafka = node.connect()
    answer = await kafka.call(
        ApiKey.ELECT_LEADERS, 1, election_body({"lost": [0, 1, 2]}, kind=UNCLEAN)
    )
    assert (answer["error_code"], elected(answer)) == (
        NONE,
        {
            ("lost", 0): NONE,
            ("lost", 1): ELIGIBLE_LEADERS_NOT_AVAILABLE,
            ("lost", 2): ELECTION_NOT_NEEDED,
        },
    )
    after = partition_of(node, "lost", 0)
    assert (after.leader, after.isr) == (2, (2,))
    # null: the leaderless partitions only
    answer = await kafka.call(ApiKey.ELECT_LEADERS, 2, election_body(None, kind=UNCLEAN))
    assert elected(answer) == {("lost", 1): ELIGIBLE_LEADERS_NOT_AVAILABLE}


async def test_elect_leaders_bad_inputs_and_controller_failures(
    brokers: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = brokers
    twin = twin_of(node)
    place(node, "elected", ((2, 1), (1, 2), 1), ((2, 1), (1, 2), 1), ((2, 1), (1, 2), 1))
    kafka = node.connect()
    # an election type Kafka does not define: INVALID_REQUEST at the top and for each
    answer = await kafka.call(ApiKey.ELECT_LEADERS, 1, election_body({"elected": [0]}, kind=2))
    assert (answer["error_code"], elected(answer)) == (
        INVALID_REQUEST,
        {("elected", 0): INVALID_REQUEST},
    )
    assert twin.calls == []
    # past the bound, distinct partitions are INVALID_REQUEST; a repeated one is one
    monkeypatch.setattr(admin, "MAX_PARTITIONS", 2)
    answer = await kafka.call(ApiKey.ELECT_LEADERS, 2, election_body({"elected": [0, 0, 1, 2]}))
    assert elected(answer) == {
        ("elected", 0): NONE,
        ("elected", 1): NONE,
        ("elected", 2): INVALID_REQUEST,
    }
    assert partition_of(node, "elected", 2).leader == 1
    # many partitions: planned off the event loop, each answered
    answer = await kafka.call(
        ApiKey.ELECT_LEADERS, 2, election_body({"elected": [2], "many": range(2_000)})
    )
    assert len(elected(answer)) == 2_001
    assert collections.Counter(elected(answer).values()) == {
        NONE: 1,
        UNKNOWN_TOPIC_OR_PARTITION: 2_000,
    }
    # the controllers do not answer in time: the top and every partition sent say so
    node.broker.controllers = ControllerTwin(  # type: ignore[assignment]
        node, KraftliteError(ErrorCode.REQUEST_TIMED_OUT, "the request's timeout_ms passed")
    )
    answer = await kafka.call(ApiKey.ELECT_LEADERS, 2, election_body({"elected": [2], "no": [0]}))
    assert (answer["error_code"], elected(answer)) == (
        REQUEST_TIMED_OUT,
        {("elected", 2): REQUEST_TIMED_OUT, ("no", 0): UNKNOWN_TOPIC_OR_PARTITION},
    )
    place(node, "stale", ((2, 1), (1, 2), 1))
    answer = await kafka.call(ApiKey.ELECT_LEADERS, 2, election_body(None))
    assert (answer["error_code"], answer["replica_election_results"]) == (REQUEST_TIMED_OUT, [])
    # (nothing needing an election: nothing asked of the controllers)
    node.apply(r.PartitionChangeRecord(topic_id=topic_id_for("stale"), partition=0, leader=2))
    answer = await kafka.call(ApiKey.ELECT_LEADERS, 2, election_body(None))
    assert (answer["error_code"], answer["replica_election_results"]) == (NONE, [])


async def test_elect_leaders_needs_alter_on_the_cluster(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    twin = twin_of(secured)
    secured.register_broker(2)
    place(secured, "elected", ((2, 1), (1, 2), 1))
    alice = secured.connect(certificate_principal=ALICE)
    answer = await alice.call(ApiKey.ELECT_LEADERS, 2, election_body({"elected": [0]}))
    assert (answer["error_code"], elected(answer)) == (
        CLUSTER_AUTHORIZATION_FAILED,
        {("elected", 0): CLUSTER_AUTHORIZATION_FAILED},
    )
    answer = await alice.call(ApiKey.ELECT_LEADERS, 2, election_body(None))
    assert (answer["error_code"], answer["replica_election_results"]) == (
        CLUSTER_AUTHORIZATION_FAILED,
        [],
    )
    assert twin.calls == [] and partition_of(secured, "elected").leader == 1
    assert denied(audit) == [("ALTER", "CLUSTER", "ElectLeaders")] * 2
    secured.apply(grant("ALTER"))
    answer = await alice.call(ApiKey.ELECT_LEADERS, 2, election_body({"elected": [0]}))
    assert elected(answer) == {("elected", 0): NONE}
    assert partition_of(secured, "elected").leader == 2


# -- AlterPartitionReassignments, ListPartitionReassignments -------------------------------------


def reassignment_body(moves: dict[str, dict[int, list[int] | None]]) -> dict[str, Any]:
    return {
        "timeout_ms": 5000,
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": i, "replicas": rs} for i, rs in parts.items()],
            }
            for topic, parts in moves.items()
        ],
    }


def reassigned(answer: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [
        (topic["name"], p["partition_index"], p["error_code"])
        for topic in answer["responses"]
        for p in topic["partitions"]
    ]


async def list_reassignments(
    kafka: KafkaConnection, topics: dict[str, list[int]] | None = None
) -> dict[str, Any]:
    named = (
        None
        if topics is None
        else [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
    )
    return await kafka.call(
        ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 5000, "topics": named}
    )


async def test_reassignments_are_answered_per_partition(brokers: InProcessBroker) -> None:
    """Each partition its own outcome, as Kafka's controller answers (the HTTP route
    refuses a whole request for one bad item): the good ones move, in one call."""
    node = brokers
    twin = twin_of(node)
    place(node, "moved", ((1,), (1,), 1), ((1,), (1,), 1), ((1,), (1,), 1))
    kafka = node.connect()
    answer = await kafka.call(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        reassignment_body(
            {
                "moved": {0: [1, 2], 1: [1, 9], 2: None, 7: [1]},
                "nope": {0: [1]},
                "__consumer_offsets": {0: [1, 2]},
            }
        ),
    )
    assert (answer["error_code"], answer["error_message"]) == (NONE, None)
    assert reassigned(answer) == [
        ("moved", 0, NONE),
        ("moved", 1, INVALID_REPLICA_ASSIGNMENT),  # broker 9 is not registered
        ("moved", 2, NO_REASSIGNMENT_IN_PROGRESS),
        ("moved", 7, UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", 0, UNKNOWN_TOPIC_OR_PARTITION),
        ("__consumer_offsets", 0, UNKNOWN_TOPIC_OR_PARTITION),
    ]
    ((method, path, body, _),) = twin.calls
    assert (method, path, body) == (
        "POST",
        "/v1/reassignments",
        {"partitions": [{"topic": "moved", "partition": 0, "replicas": [1, 2]}]},
    )
    moving = partition_of(node, "moved", 0)
    assert (moving.replicas, moving.adding) == ((1, 2), (2,))
    listed = await list_reassignments(kafka)
    assert (listed["error_code"], listed["topics"]) == (
        NONE,
        [
            {
                "name": "moved",
                "partitions": [
                    {
                        "partition_index": 0,
                        "replicas": [1, 2],
                        "adding_replicas": [2],
                        "removing_replicas": [],
                    }
                ],
            }
        ],
    )
    assert (await list_reassignments(kafka, {"moved": [1, 2], "nope": [0]}))["topics"] == []
    assert len((await list_reassignments(kafka, {"moved": [0]}))["topics"]) == 1
    # cancelled (replicas null): back to the original replicas
    answer = await kafka.call(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, reassignment_body({"moved": {0: None}})
    )
    assert reassigned(answer) == [("moved", 0, NONE)]
    assert partition_of(node, "moved", 0).replicas == (1,)
    assert (await list_reassignments(kafka))["topics"] == []


async def test_reassignment_bad_inputs_change_nothing(brokers: InProcessBroker) -> None:
    node = brokers
    twin = twin_of(node)
    place(node, "kept", ((1,), (1,), 1), ((1,), (1,), 1))
    kafka = node.connect()
    body = reassignment_body({"kept": {0: [], 1: [2, 2]}})
    body["topics"].append({"name": "kept", "partitions": [{"partition_index": 0, "replicas": [2]}]})
    body["topics"].append(
        {"name": "kept", "partitions": [{"partition_index": -1, "replicas": [2]}]}
    )
    answer = await kafka.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
    assert reassigned(answer) == [
        ("kept", 0, INVALID_REQUEST),  # named twice
        ("kept", 1, INVALID_REPLICA_ASSIGNMENT),  # a broker twice
        ("kept", 0, INVALID_REQUEST),
        ("kept", -1, UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert twin.calls == []
    assert [partition_of(node, "kept", i).replicas for i in (0, 1)] == [(1,), (1,)]
    # many items: planned off the event loop, each answered
    many = reassignment_body({"kept": {i: [1, 2] for i in range(2, 2_002)}})
    answer = await kafka.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, many)
    assert {code for *_, code in reassigned(answer)} == {UNKNOWN_TOPIC_OR_PARTITION}
    assert len(reassigned(answer)) == 2_000 and twin.calls == []


class RefusingOnce(ControllerTwin):
    """The controllers' metadata is ahead of the broker's: they refuse the first
    reassignment request whole, naming `refused`'s item, as POST /v1/reassignments does."""

    def __init__(self, node: InProcessBroker, refused: KraftliteError) -> None:
        super().__init__(node)
        self.refused: KraftliteError | None = refused

    async def call_with_headers(
        self, method: str, path: str, body: Any = None, **options: Any
    ) -> tuple[int, Any, dict[str, str]]:
        refused, self.refused = self.refused, None
        if refused is not None:
            self.calls.append((method, path, None, options.get("headers")))
            raise refused
        return await super().call_with_headers(method, path, body, **options)


async def test_a_whole_refusal_naming_one_item_sends_the_others_again(
    brokers: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = brokers
    place(node, "moved", ((1,), (1,), 1), ((1,), (1,), 1), ((1,), (1,), 1))
    kafka = node.connect()
    refusal = KraftliteError(
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "moved-1: brokers [2] are not live",
        topic="moved",
        partition=1,
    )
    node.broker.controllers = twin = RefusingOnce(node, refusal)  # type: ignore[assignment]
    moves = reassignment_body({"moved": {0: [1, 2], 1: [1, 2]}})
    answer = await kafka.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, moves)
    assert reassigned(answer) == [("moved", 0, NONE), ("moved", 1, INVALID_REPLICA_ASSIGNMENT)]
    assert len(twin.calls) == 2
    assert [partition_of(node, "moved", i).replicas for i in (0, 1)] == [(1, 2), (1,)]
    # a refusal about no item (no controller): every item says so, none moved
    node.broker.controllers = RefusingOnce(  # type: ignore[assignment]
        node, KraftliteError(ErrorCode.NOT_CONTROLLER, "no active controller")
    )
    answer = await kafka.call(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        reassignment_body({"moved": {1: [1, 2], 2: [1, 3]}}),
    )
    assert reassigned(answer) == [("moved", 1, NOT_CONTROLLER), ("moved", 2, NOT_CONTROLLER)]
    assert [partition_of(node, "moved", i).replicas for i in (1, 2)] == [(1,), (1,)]
    # more items than one controller request holds: several calls, each one commit
    monkeypatch.setattr(cluster_apis, "MAX_REASSIGNMENTS_PER_REQUEST", 1)
    node.broker.controllers = twin = twin_of(node)  # type: ignore[assignment]
    answer = await kafka.call(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        reassignment_body({"moved": {1: [1, 2], 2: [1, 3]}}),
    )
    assert reassigned(answer) == [("moved", 1, NONE), ("moved", 2, NONE)]
    assert len(twin.calls) == 2


async def test_reassignments_need_alter_and_describe_on_the_cluster(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    twin = twin_of(secured)
    secured.register_broker(2)
    alice = secured.connect(certificate_principal=ALICE)
    answer = await alice.call(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, reassignment_body({"orders": {0: [1, 2]}})
    )
    assert answer["error_code"] == CLUSTER_AUTHORIZATION_FAILED
    assert reassigned(answer) == [("orders", 0, CLUSTER_AUTHORIZATION_FAILED)]
    listed = await list_reassignments(alice, {"orders": [0]})
    assert listed["error_code"] == CLUSTER_AUTHORIZATION_FAILED
    assert listed["topics"] == [
        {
            "name": "orders",
            "partitions": [
                {
                    "partition_index": 0,
                    "replicas": [],
                    "adding_replicas": [],
                    "removing_replicas": [],
                }
            ],
        }
    ]
    assert twin.calls == [] and partition_of(secured, "orders").replicas == (1,)
    assert denied(audit) == [
        ("ALTER", "CLUSTER", "AlterPartitionReassignments"),
        ("DESCRIBE", "CLUSTER", "ListPartitionReassignments"),
    ]
    secured.apply(grant("ALTER"), grant("DESCRIBE"))
    answer = await alice.call(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, reassignment_body({"orders": {0: [1, 2]}})
    )
    assert reassigned(answer) == [("orders", 0, NONE)]
    assert [t["name"] for t in (await list_reassignments(alice))["topics"]] == ["orders"]


async def test_list_reassignments_when_the_controllers_fail(node: InProcessBroker) -> None:
    node.broker.controllers = ControllerTwin(  # type: ignore[assignment]
        node, KraftliteError(ErrorCode.REQUEST_TIMED_OUT, "the request's timeout_ms passed")
    )
    listed = await list_reassignments(node.connect(), {"orders": [0, 1]})
    assert listed["error_code"] == REQUEST_TIMED_OUT
    assert [p["partition_index"] for p in listed["topics"][0]["partitions"]] == [0, 1]


# -- DescribeQuorum ------------------------------------------------------------------------------

METADATA_PARTITION = {
    "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
}


async def test_describe_quorum_is_the_metadata_partition_as_the_active_controller_sees_it(
    node: InProcessBroker,
) -> None:
    """Leader, term, commit index as the high watermark; voters' log end offsets from
    their lags; the brokers as observers, behind by the metadata batches they lack."""
    twin = twin_of(node)
    node.apply(
        r.RegisterControllerRecord(node_id=1, url="http://127.0.0.1:9401"),
        r.RegisterControllerRecord(node_id=2, url="https://c2.example:9402"),
    )  # voter 3 has announced no address: v2's nodes leave it out
    kafka = node.connect()
    answer = await kafka.call(ApiKey.DESCRIBE_QUORUM, 2, METADATA_PARTITION)
    ((method, path, _, _),) = twin.calls
    assert (method, path) == ("GET", "/v1/quorum?leader=true")
    assert answer["error_code"] == NONE
    ((topic),) = answer["topics"]
    ((partition),) = topic["partitions"]
    now = node.clock.now_ms()
    assert topic["topic_name"] == "__cluster_metadata"
    assert {
        k: partition[k]
        for k in ("partition_index", "error_code", "leader_id", "leader_epoch", "high_watermark")
    } == {
        "partition_index": 0,
        "error_code": NONE,
        "leader_id": 1,
        "leader_epoch": 3,
        "high_watermark": 120,
    }
    assert partition["current_voters"] == [
        {
            "replica_id": 1,
            "replica_directory_id": NO_DIRECTORY,
            "log_end_offset": 120,
            "last_fetch_timestamp": now,
            "last_caught_up_timestamp": now,
        },
        {
            "replica_id": 2,
            "replica_directory_id": NO_DIRECTORY,
            "log_end_offset": 100,
            "last_fetch_timestamp": -1,
            "last_caught_up_timestamp": -1,
        },
        {
            "replica_id": 3,
            "replica_directory_id": NO_DIRECTORY,
            "log_end_offset": -1,
            "last_fetch_timestamp": -1,
            "last_caught_up_timestamp": -1,
        },
    ]
    assert partition["observers"] == [
        {
            "replica_id": BROKER_ID,
            "replica_directory_id": NO_DIRECTORY,
            "log_end_offset": 118,
            "last_fetch_timestamp": -1,
            "last_caught_up_timestamp": -1,
        }
    ]
    assert answer["nodes"] == [
        {"node_id": 1, "listeners": [{"name": "HTTP", "host": "127.0.0.1", "port": 9401}]},
        {"node_id": 2, "listeners": [{"name": "HTTPS", "host": "c2.example", "port": 9402}]},
    ]
    assert (answer["error_message"], partition["error_message"]) == (None, None)
    v0 = await kafka.call(ApiKey.DESCRIBE_QUORUM, 0, METADATA_PARTITION)
    assert v0["topics"][0]["partitions"][0]["current_voters"][0] == {
        "replica_id": 1,
        "replica_directory_id": NO_DIRECTORY,
        "log_end_offset": 120,
        "last_fetch_timestamp": -1,  # v1's fields: not sent, decoded as their defaults
        "last_caught_up_timestamp": -1,
    }
    # no leader known (an election under way)
    twin.quorum = {
        "leader_id": None,
        "term": 4,
        "commit_index": 120,
        "metadata_offset": 1,
        "voters": [],
    }  # type: ignore[attr-defined]
    answer = await kafka.call(ApiKey.DESCRIBE_QUORUM, 1, METADATA_PARTITION)
    assert answer["topics"][0]["partitions"][0]["leader_id"] == -1


async def test_describe_quorum_bad_inputs_and_failures(node: InProcessBroker) -> None:
    twin = twin_of(node)
    kafka = node.connect()
    for wrong in (
        [{"topic_name": "orders", "partitions": [{"partition_index": 0}]}],
        [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 1}]}],
        [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}] * 2}],
        [],
    ):
        answer = await kafka.call(ApiKey.DESCRIBE_QUORUM, 1, {"topics": wrong})
        assert answer["error_code"] == NONE
        assert [p["error_code"] for t in answer["topics"] for p in t["partitions"]] == [
            UNKNOWN_TOPIC_OR_PARTITION
        ] * sum(len(t["partitions"]) for t in wrong)
    assert twin.calls == []
    node.broker.controllers = ControllerTwin(  # type: ignore[assignment]
        node, KraftliteError(ErrorCode.NOT_CONTROLLER, "no active controller")
    )
    answer = await kafka.call(ApiKey.DESCRIBE_QUORUM, 1, METADATA_PARTITION)
    assert (answer["error_code"], answer["topics"]) == (NOT_CONTROLLER, [])


async def test_describe_quorum_needs_describe_on_the_cluster(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    twin = twin_of(secured)
    alice = secured.connect(certificate_principal=ALICE)
    answer = await alice.call(ApiKey.DESCRIBE_QUORUM, 1, METADATA_PARTITION)
    assert (answer["error_code"], answer["topics"]) == (CLUSTER_AUTHORIZATION_FAILED, [])
    assert twin.calls == []
    assert denied(audit) == [("DESCRIBE", "CLUSTER", "DescribeQuorum")]
    secured.apply(grant("DESCRIBE"))
    answer = await alice.call(ApiKey.DESCRIBE_QUORUM, 1, METADATA_PARTITION)
    assert answer["error_code"] == NONE and answer["topics"][0]["partitions"][0]["leader_id"] == 1


# -- IncludeAuthorizedOperations (Metadata, DescribeCluster) ----------------------------------

# Kafka's operation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12
NOT_ASKED = -(2**31)


def bits(*codes: int) -> int:
    return sum(1 << code for code in codes)


async def metadata_operations(kafka: KafkaConnection, version: int, **asked: bool) -> Any:
    body = {
        "topics": [{"name": "orders", "topic_id": uuid.UUID(int=0)}],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": asked.get("cluster", False),
        "include_topic_authorized_operations": asked.get("topic", False),
    }
    answer = await kafka.call(ApiKey.METADATA, version, body)
    (topic,) = answer["topics"]
    return topic.get("topic_authorized_operations"), answer.get("cluster_authorized_operations")


async def test_authorized_operations_are_what_the_acls_grant_and_asking_audits_nothing(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    alice = secured.connect(certificate_principal=ALICE)
    secured.apply(grant("DESCRIBE", "TOPIC", "orders"), grant("READ", "TOPIC", "orders"))
    assert await metadata_operations(alice, 10) == (NOT_ASKED, NOT_ASKED)
    assert await metadata_operations(alice, 10, topic=True, cluster=True) == (bits(3, 8), 0)
    # v11 dropped the cluster's field (DescribeCluster answers it): decoded as its default
    assert await metadata_operations(alice, 12, topic=True, cluster=True) == (
        bits(3, 8),
        NOT_ASKED,
    )
    secured.apply(grant("ALL", "TOPIC", "orders"), grant("ALTER"), grant("IDEMPOTENT_WRITE"))
    assert await metadata_operations(alice, 10, topic=True, cluster=True) == (
        bits(3, 4, 5, 6, 7, 8, 10, 11),  # ALL: every operation a topic has
        bits(7, 8, 12),  # ALTER implies DESCRIBE, as Kafka's
    )
    cluster = await alice.call(
        ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True}
    )
    assert (cluster["error_code"], cluster["cluster_authorized_operations"]) == (
        NONE,
        bits(7, 8, 12),
    )
    cluster = await alice.call(
        ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False}
    )
    assert cluster["cluster_authorized_operations"] == NOT_ASKED
    assert denied(audit) == []  # what a client may not do is answered, not refused


# -- CreatePartitions: assignments and validate_only -----------------------------------------


async def create_partitions(
    kafka: KafkaConnection, count: int, assignments: list[list[int]] | None, validate_only: bool
) -> tuple[int, str | None]:
    answer = await kafka.call(
        ApiKey.CREATE_PARTITIONS,
        3,
        {
            "topics": [
                {
                    "name": "orders",
                    "count": count,
                    "assignments": None
                    if assignments is None
                    else [{"broker_ids": ids} for ids in assignments],
                }
            ],
            "timeout_ms": 5000,
            "validate_only": validate_only,
        },
    )
    (result,) = answer["results"]
    return result["error_code"], result["error_message"]


async def test_create_partitions_validate_only_and_bad_assignments_call_no_controller(
    brokers: InProcessBroker,
) -> None:
    """validate_only is the controllers' decision run on this broker's metadata (so an
    older controller that does not know the field cannot make it a change); an empty
    assignment or a negative broker id is INVALID_REPLICA_ASSIGNMENT at the edge, as
    Kafka's, whether validating or not."""
    twin = twin_of(brokers)
    kafka = brokers.connect()
    assert len(brokers.image.topics[topic_id_for("orders")].partitions) == 2
    assert await create_partitions(kafka, 4, [[2], [3]], validate_only=True) == (NONE, None)
    assert await create_partitions(kafka, 3, None, validate_only=True) == (NONE, None)
    for count, assignments in [
        (4, [[2]]),  # two added, one assigned
        (3, [[2, 3]]),  # the topic's factor is 1
        (3, [[9]]),  # not registered
    ]:
        code, _ = await create_partitions(kafka, count, assignments, validate_only=True)
        assert code == INVALID_REPLICA_ASSIGNMENT, assignments
    for assignments in ([[]], [[-1]]):
        for validate_only in (True, False):
            code, _ = await create_partitions(kafka, 3, assignments, validate_only)
            assert code == INVALID_REPLICA_ASSIGNMENT, assignments
    code, message = await create_partitions(kafka, 2, None, validate_only=True)
    assert code == int(ErrorCode.INVALID_PARTITIONS) and message and "3-" in message
    assert twin.calls == []
    assert len(brokers.image.topics[topic_id_for("orders")].partitions) == 2  # nothing added
