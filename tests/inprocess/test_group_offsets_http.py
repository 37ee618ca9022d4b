"""`DELETE /v1/groups/{group}/offsets` (Kafka's OffsetDelete on the HTTP edge) in-process: the
broker's real aiohttp app (api/broker_app.py, with its authentication, permission and error
middlewares) over one in-process broker (tests/harness/inprocess.py), on a loopback test
server. The same coordinator call as the Kafka edge's (groups/coordinator.py rule 6); bad
bodies and refusals answer problem+json and change nothing."""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator, Iterator, MutableMapping
from typing import Any

import orjson
import pytest
import structlog
from aiohttp.test_utils import TestClient, TestServer

from kraftlite.api.broker_app import make_broker_app
from kraftlite.api.internal_auth import ClusterAuth
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.groups.offsets import CommittedOffset
from kraftlite.metadata.records import NO_LEADER, AccessControlEntryRecord, PartitionChangeRecord
from kraftlite.protocol.headers import NO_FORWARD
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.security import scram
from kraftlite.security.authenticator import AuthSettings
from tests.harness.inprocess import SECRET, InProcessBroker, topic_id_for

ALICE, PASSWORD = "alice", "alice-password"
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def audit() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as captured:
        yield captured


async def http_client(node: InProcessBroker) -> TestClient[Any, Any]:
    app = make_broker_app(node.service, ClusterAuth(SECRET, "broker-1", node.clock), node.gate)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def http(node: InProcessBroker) -> AsyncIterator[TestClient[Any, Any]]:
    node.create_topic("other")
    client = await http_client(node)
    yield client
    await client.close()


async def delete(
    client: TestClient[Any, Any], group: str, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    async with client.delete(
        f"/v1/groups/{group}/offsets", data=raw, headers={**JSON, **(headers or {})}
    ) as response:
        return response.status, orjson.loads(await response.read())


def partitions(*wanted: tuple[str, int]) -> dict[str, Any]:
    return {"partitions": [{"topic": t, "partition": p} for t, p in wanted]}


async def commit(node: InProcessBroker, group: str, *offsets: tuple[str, int, int]) -> None:
    wanted = [((t, p), CommittedOffset(o, "")) for t, p, o in offsets]
    await node.coordinator.commit(group, None, None, wanted)


async def test_each_partition_is_answered_as_the_kafka_edge_answers_it(
    node: InProcessBroker, http: TestClient[Any, Any]
) -> None:
    await commit(node, "g", ("orders", 0, 5), ("orders", 1, 6), ("other", 0, 7))
    await node.coordinator.join("g", "member-1", "client-1", ["other"], None)
    status, answer = await delete(
        http, "g", partitions(("orders", 0), ("other", 0), ("nope", 0), ("orders", 9))
    )
    assert status == 200, answer
    assert answer == {
        "group": "g",
        "partitions": [
            {"topic": "orders", "partition": 0},
            {
                "topic": "other",
                "partition": 0,
                "error_code": "GROUP_SUBSCRIBED_TO_TOPIC",
                "message": "the group's members consume the topic",
            },
            {
                "topic": "nope",
                "partition": 0,
                "error_code": "UNKNOWN_TOPIC_OR_PARTITION",
                "message": answer["partitions"][2]["message"],
            },
            {
                "topic": "orders",
                "partition": 9,
                "error_code": "UNKNOWN_TOPIC_OR_PARTITION",
                "message": answer["partitions"][3]["message"],
            },
        ],
    }
    assert node.coordinator.committed("g") == {
        ("orders", 1): CommittedOffset(6, ""),
        ("other", 0): CommittedOffset(7, ""),
    }
    # what one edge deleted the other no longer shows
    fetched = await node.connect().call(
        ApiKey.OFFSET_FETCH,
        9,
        {"groups": [{"group_id": "g", "topics": None}], "require_stable": False},
    )
    assert sorted(
        (t["name"], p["partition_index"])
        for t in fetched["groups"][0]["topics"]
        for p in t["partitions"]
    ) == [("orders", 1), ("other", 0)]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "INVALID_REQUEST"),
        ({"partitions": []}, "INVALID_REQUEST"),
        ({"partitions": "orders"}, "INVALID_REQUEST"),
        ({"partitions": [{"partition": 0}]}, "INVALID_REQUEST"),
        ({"partitions": [["orders", 0]]}, "INVALID_REQUEST"),
        ({"partitions": [{"topic": "orders"}]}, "INVALID_REQUEST"),
        ({"partitions": [{"topic": "orders", "partition": -1}]}, "INVALID_REQUEST"),
        ({"partitions": [{"topic": "orders", "partition": "0"}]}, "INVALID_REQUEST"),
        ({"partitions": [{"topic": "orders", "partition": True}]}, "INVALID_REQUEST"),
        ({"partitions": [{"topic": "orders", "partition": 0.5}]}, "INVALID_REQUEST"),
        ({"partitions": [{"topic": "a/b", "partition": 0}]}, "INVALID_TOPIC_EXCEPTION"),
        ({"partitions": [{"topic": OFFSETS_TOPIC, "partition": 0}]}, "INVALID_TOPIC_EXCEPTION"),
        (partitions(*[("orders", 0)] * 10_001), "INVALID_REQUEST"),
        (b"{not json", "INVALID_REQUEST"),
        (b"[]", "INVALID_REQUEST"),
    ],
)
async def test_bad_bodies_are_refused_whole_and_change_nothing(
    node: InProcessBroker, http: TestClient[Any, Any], body: Any, code: str
) -> None:
    await commit(node, "g", ("orders", 0, 5))
    status, answer = await delete(http, "g", body)
    assert (status, answer["error_code"]) == (400, code), answer
    assert node.coordinator.committed("g") == {("orders", 0): CommittedOffset(5, "")}


async def test_the_groups_refusals_are_the_whole_answer(
    node: InProcessBroker, http: TestClient[Any, Any]
) -> None:
    await commit(node, "g", ("orders", 0, 5))
    wanted = partitions(("orders", 0))
    status, answer = await delete(http, "nobody", wanted)
    assert (status, answer["error_code"]) == (404, "GROUP_ID_NOT_FOUND")
    status, answer = await delete(http, "x" * 250, wanted)  # no group may have that name
    assert (status, answer["error_code"]) == (400, "INVALID_REQUEST")
    # a classic group of members that are not consumers (Kafka Connect's, say)
    await commit(node, "connect", ("orders", 0, 5))
    kafka = node.connect()
    joined = await kafka.call(
        ApiKey.JOIN_GROUP,
        5,
        {
            "group_id": "connect",
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "connect",
            "protocols": [{"name": "sessioned", "metadata": b"worker"}],
        },
    )
    assert joined["error_code"] == 0, joined
    status, answer = await delete(http, "connect", wanted)
    assert (status, answer["error_code"]) == (409, "GROUP_NOT_EMPTY")
    assert node.coordinator.committed("connect") == {("orders", 0): CommittedOffset(5, "")}
    # a group this broker does not coordinate: 421 with X-Kraftlite-No-Forward (else relayed)
    index = node.coordinator.offsets_partition("g")
    offsets_topic = topic_id_for(OFFSETS_TOPIC)
    node.apply(PartitionChangeRecord(topic_id=offsets_topic, partition=index, leader=NO_LEADER))
    status, answer = await delete(http, "g", wanted, {NO_FORWARD: "1"})
    assert (status, answer["error_code"]) == (421, "NOT_COORDINATOR")
    node.apply(PartitionChangeRecord(topic_id=offsets_topic, partition=index, leader=1))
    assert node.coordinator.committed("g") == {("orders", 0): CommittedOffset(5, "")}


def allow(operation: str, kind: str, name: str) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=f"http-{operation}-{kind}-{name}",
        resource_type=kind,
        resource_name=name,
        pattern_type="LITERAL",
        principal=f"User:{ALICE}",
        host="*",
        operation=operation,
        permission_type="ALLOW",
    )


async def test_deleting_needs_delete_on_the_group_and_read_on_every_topic(
    audit: list[MutableMapping[str, Any]],
) -> None:
    async with InProcessBroker(auth=AuthSettings(required=True)) as node:
        node.create_topic("orders", partitions=2)
        node.create_topic("hidden")
        node.apply(
            scram.make_credential(ALICE, PASSWORD, scram.DEFAULT_MECHANISM, secrets.token_bytes(16))
        )
        await commit(node, "g", ("orders", 0, 5), ("hidden", 0, 1))
        client = await http_client(node)
        basic = base64.b64encode(f"{ALICE}:{PASSWORD}".encode()).decode()
        alice = {"Authorization": f"Basic {basic}"}
        wanted = partitions(("orders", 0), ("hidden", 0))
        try:
            status, answer = await delete(client, "g", wanted)  # no credentials
            assert (status, answer["error_code"]) == (401, "SASL_AUTHENTICATION_FAILED")
            node.apply(allow("READ", "GROUP", "g"), allow("READ", "TOPIC", "orders"))
            status, answer = await delete(client, "g", wanted, alice)
            assert (status, answer["error_code"]) == (403, "GROUP_AUTHORIZATION_FAILED")
            node.apply(allow("DELETE", "GROUP", "g"))
            # every topic named must be READ: one that is not refuses the whole request
            status, answer = await delete(client, "g", wanted, alice)
            assert (status, answer["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
            assert len(node.coordinator.committed("g")) == 2
            refusals = [line for line in audit if line["event"] == "authorization_denied"]
            assert [(r["operation"], r["resource_type"]) for r in refusals] == [
                ("DELETE", "GROUP"),
                ("READ", "TOPIC"),
            ]
            status, answer = await delete(client, "g", partitions(("orders", 0)), alice)
            assert status == 200, answer
            assert answer["partitions"] == [{"topic": "orders", "partition": 0}]
            assert node.coordinator.committed("g") == {("hidden", 0): CommittedOffset(1, "")}
        finally:
            await client.close()
