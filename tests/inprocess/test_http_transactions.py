"""Transactions over HTTP (api/txn_handlers.py) on the broker's real aiohttp app and its whole
middleware chain, over one in-process broker: a producer's whole life (init, add partitions,
transactional produce, commit or abort, describe with the commit's tag), read back at both
isolation levels; fencing across the two edges; and every call's bad inputs and refusals,
answered with Kafka's codes and nothing half-applied."""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from kraftlite.api.broker_app import make_broker_app
from kraftlite.api.internal_auth import ClusterAuth
from kraftlite.metadata.records import NO_LEADER, AccessControlEntryRecord, PartitionChangeRecord
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol.headers import BATCH_TYPE, NO_FORWARD, TRANSACTIONAL_ID
from kraftlite.security import scram
from kraftlite.security.authenticator import AuthSettings
from kraftlite.transactions.coordinator import TXN_TOPIC
from kraftlite.transactions.metadata import TxnState
from tests.harness.inprocess import SECRET, InProcessBroker

ALICE, ROOT, PASSWORD = "alice", "root", "a-password-of-some-length"


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


def basic(user: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def eventually(check: Any, timeout_s: float = 10) -> None:
    """Markers are written after EndTxn is answered: wait for what they make true."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "never came true"
        await asyncio.sleep(0.01)


def settled(node: InProcessBroker, topic: str, partition: int) -> bool:
    found = node.partition(topic, partition)
    return found.last_stable_offset() == found.log.high_watermark


@dataclass
class Api:
    node: InProcessBroker
    http: TestClient[Any, Any]
    user: str = ALICE

    async def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
        async with self.http.request(
            method,
            path,
            data=data,
            headers={"Content-Type": "application/json", **basic(self.user), **(headers or {})},
        ) as response:
            raw = await response.read()
            assert b"Traceback" not in raw, raw
            return response.status, orjson.loads(raw) if raw else None

    async def init(self, tid: str = "tx", **body: Any) -> tuple[int, int]:
        status, answer = await self.call("POST", f"/v1/transactions/{tid}/producer", body)
        assert status == 200, answer
        return answer["producer_id"], answer["producer_epoch"]

    async def add(self, tid: str, producer: tuple[int, int], *parts: tuple[str, int]) -> Any:
        return await self.call(
            "POST",
            f"/v1/transactions/{tid}/partitions",
            {
                "producer_id": producer[0],
                "producer_epoch": producer[1],
                "partitions": [{"topic": t, "partition": p} for t, p in parts],
            },
        )

    async def produce(
        self,
        tid: str,
        producer: tuple[int, int],
        topic: str,
        partition: int,
        values: list[bytes],
        sequence: int = 0,
    ) -> tuple[int, Any]:
        batch = batch_format.encode_batch(
            values,
            timestamps=[self.node.clock.now_ms()] * len(values),
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=sequence,
            transactional=True,
        )
        return await self.call(
            "POST",
            f"/v1/topics/{topic}/partitions/{partition}/records",
            batch,
            {"Content-Type": BATCH_TYPE, TRANSACTIONAL_ID: tid},
        )

    async def end(
        self, tid: str, producer: tuple[int, int], commit: bool, **extra: Any
    ) -> tuple[int, Any]:
        body = {"producer_id": producer[0], "producer_epoch": producer[1], "commit": commit}
        return await self.call("POST", f"/v1/transactions/{tid}/end", body | extra)

    async def values(self, topic: str, partition: int, isolation: str) -> list[str]:
        status, answer = await self.call(
            "GET",
            f"/v1/topics/{topic}/partitions/{partition}/records?offset=0&isolation={isolation}",
        )
        assert status == 200, answer
        return [r["value"] for r in answer["records"]]


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with InProcessBroker(
        auth=AuthSettings(required=True, super_users=frozenset({f"User:{ROOT}"}))
    ) as node:
        node.create_topic("orders", partitions=2)
        node.create_topic("secret", partitions=1)
        node.create_topic(TXN_TOPIC, partitions=node.service.transactions.settings.partitions)
        for user in (ALICE, ROOT):
            node.apply(
                scram.make_credential(
                    user, PASSWORD, scram.DEFAULT_MECHANISM, secrets.token_bytes(16)
                )
            )
        node.apply(
            allow("WRITE", "TOPIC", "orders"),
            allow("READ", "TOPIC", "orders"),
            allow("DESCRIBE", "TOPIC", "orders"),
            allow("WRITE", "TRANSACTIONAL_ID", "tx"),
            allow("DESCRIBE", "TRANSACTIONAL_ID", "seen"),
        )
        app = make_broker_app(node.service, ClusterAuth(SECRET, "broker-1", node.clock), node.gate)
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        try:
            yield Api(node, client)
        finally:
            await client.close()


async def test_a_transaction_over_http_commits_whole_and_an_aborted_one_is_never_read(
    api: Api,
) -> None:
    producer = await api.init(transaction_timeout_ms=30_000)
    assert await api.add("tx", producer, ("orders", 0), ("orders", 1)) == (204, None)
    assert (await api.produce("tx", producer, "orders", 0, [b"a", b"b"]))[0] == 200
    assert (await api.produce("tx", producer, "orders", 1, [b"c"]))[0] == 200
    status, found = await api.call("GET", "/v1/transactions/tx")
    assert status == 200
    assert found | {"start_ms": None} == {
        "transactional_id": "tx",
        "state": "Ongoing",
        "producer_id": producer[0],
        "producer_epoch": producer[1],
        "transaction_timeout_ms": 30_000,
        "start_ms": None,
        "partitions": [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 1}],
        "commit_tag": None,
    }
    assert await api.values("orders", 0, "read_committed") == []  # open: held back
    assert await api.values("orders", 0, "read_uncommitted") == ["a", "b"]

    assert await api.end("tx", producer, True, tag="batch-7") == (204, None)
    assert await api.end("tx", producer, True, tag="batch-7") == (204, None)  # a retry
    for partition, expected in ((0, ["a", "b"]), (1, ["c"])):
        await eventually(lambda p=partition: settled(api.node, "orders", p))
        assert await api.values("orders", partition, "read_committed") == expected

    # the next transaction is aborted: never read committed; the tag stays the last commit's
    assert (await api.add("tx", producer, ("orders", 0)))[0] == 204
    assert (await api.produce("tx", producer, "orders", 0, [b"gone"], sequence=2))[0] == 200
    assert await api.end("tx", producer, False) == (204, None)
    status, found = await api.call("GET", "/v1/transactions/tx")
    assert (found["state"], found["commit_tag"]) in {
        ("PrepareAbort", "batch-7"),
        ("CompleteAbort", "batch-7"),
    }
    await eventually(lambda: settled(api.node, "orders", 0))
    assert await api.values("orders", 0, "read_committed") == ["a", "b"]
    assert await api.values("orders", 0, "read_uncommitted") == ["a", "b", "gone"]


async def test_a_new_producer_fences_the_old_one_and_aborts_what_it_left_open(api: Api) -> None:
    old = await api.init()
    assert (await api.add("tx", old, ("orders", 0)))[0] == 204
    assert (await api.produce("tx", old, "orders", 0, [b"zombie"]))[0] == 200
    # the new instance: CONCURRENT_TRANSACTIONS (retriable) while the old one is aborted
    while True:
        status, answer = await api.call("POST", "/v1/transactions/tx/producer", {})
        if status == 200:
            break
        assert (status, answer["error_code"], answer["retriable"]) == (
            409,
            "CONCURRENT_TRANSACTIONS",
            True,
        )
    new = (answer["producer_id"], answer["producer_epoch"])
    assert new[1] > old[1]
    for call in (
        api.add("tx", old, ("orders", 1)),
        api.end("tx", old, True),
        api.produce("tx", old, "orders", 0, [b"late"], sequence=1),
    ):
        status, answer = await call
        assert answer["error_code"] in {"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"}, answer
    await eventually(lambda: settled(api.node, "orders", 0))
    assert await api.values("orders", 0, "read_committed") == []


async def test_refusals_carry_kafkas_codes_and_change_nothing(api: Api) -> None:
    producer = await api.init()

    async def code(method: str, path: str, body: Any = None, **headers: str) -> tuple[int, str]:
        status, answer = await api.call(method, path, body, headers)
        return status, answer["error_code"]

    good = {"producer_id": producer[0], "producer_epoch": producer[1]}
    # authorization: the id (WRITE to use, DESCRIBE to see), each topic added
    assert await code("POST", "/v1/transactions/other/producer", {}) == (
        403,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    )
    assert await code("POST", "/v1/transactions/other/end", good | {"commit": True}) == (
        403,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    )
    assert await code("GET", "/v1/transactions/other") == (
        403,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    )
    assert await code("GET", "/v1/transactions/seen") == (404, "TRANSACTIONAL_ID_NOT_FOUND")
    secret = good | {"partitions": [{"topic": "secret", "partition": 0}]}
    assert await code("POST", "/v1/transactions/tx/partitions", secret) == (
        403,
        "TOPIC_AUTHORIZATION_FAILED",
    )
    api.user = ROOT  # internal topics: never, whoever asks
    internal = good | {"partitions": [{"topic": TXN_TOPIC, "partition": 0}]}
    assert await code("POST", "/v1/transactions/tx/partitions", internal) == (
        403,
        "TOPIC_AUTHORIZATION_FAILED",
    )
    api.user = ALICE
    # a transactional produce needs WRITE on the id it names
    batch = batch_format.encode_batch(
        [b"x"],
        timestamps=[api.node.clock.now_ms()],
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=0,
        transactional=True,
    )
    assert await code(
        "POST",
        "/v1/topics/orders/partitions/0/records",
        batch,
        **{"Content-Type": BATCH_TYPE, TRANSACTIONAL_ID: "other"},
    ) == (403, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    # bad bodies and names
    bad: list[tuple[str, str, Any]] = [
        ("POST", "/v1/transactions/tx/producer", {"transaction_timeout_ms": 0}),
        ("POST", "/v1/transactions/tx/producer", {"transaction_timeout_ms": "60000"}),
        ("POST", "/v1/transactions/tx/producer", {"producer_id": 5}),  # without its epoch
        ("POST", "/v1/transactions/tx/producer", b"{not json"),
        ("POST", "/v1/transactions/tx/producer", b"[1, 2]"),
        ("POST", "/v1/transactions/tx/partitions", good),  # no partitions
        ("POST", "/v1/transactions/tx/partitions", good | {"partitions": []}),
        ("POST", "/v1/transactions/tx/partitions", good | {"partitions": [{"topic": "orders"}]}),
        (
            "POST",
            "/v1/transactions/tx/partitions",
            good | {"partitions": [{"topic": "orders", "partition": 0}] * 2},
        ),
        (
            "POST",
            "/v1/transactions/tx/partitions",
            good | {"partitions": [{"topic": "orders", "partition": -1}]},
        ),
        (
            "POST",
            "/v1/transactions/tx/partitions",
            good | {"partitions": [{"topic": "orders", "partition": i} for i in range(10_001)]},
        ),
        ("POST", "/v1/transactions/tx/end", good),  # no commit
        ("POST", "/v1/transactions/tx/end", good | {"commit": "yes"}),
        ("POST", "/v1/transactions/tx/end", good | {"commit": False, "tag": "t"}),
        ("POST", "/v1/transactions/tx/end", good | {"commit": True, "tag": "x" * 257}),
        ("POST", "/v1/transactions/tx/end", good | {"commit": True, "tag": "a\nb"}),
        ("POST", "/v1/transactions/tx/end", {"producer_id": -1, "producer_epoch": 0, "commit": 1}),
        ("POST", f"/v1/transactions/{'x' * 1025}/producer", {}),
    ]
    for method, path, body in bad:
        assert await code(method, path, body) == (400, "INVALID_REQUEST"), (path, body)
    # a transactional produce: binary only, to a partition only
    assert (
        await code(
            "POST",
            "/v1/topics/orders/partitions/0/records",
            {"records": [{"value": "x"}]},
            **{TRANSACTIONAL_ID: "tx"},
        )
    ) == (415, "UNSUPPORTED_MEDIA_TYPE")
    assert (
        await code(
            "POST",
            "/v1/topics/orders/records",
            {"records": [{"value": "x"}]},
            **{TRANSACTIONAL_ID: "tx"},
        )
    ) == (400, "INVALID_REQUEST")
    for acks in ("1", "0"):  # a transaction commits acknowledged writes only
        assert await code(
            "POST",
            f"/v1/topics/orders/partitions/0/records?acks={acks}",
            batch,
            **{"Content-Type": BATCH_TYPE, TRANSACTIONAL_ID: "tx"},
        ) == (400, "INVALID_REQUEST")
    # the state the calls do not fit
    assert await code("POST", "/v1/transactions/tx/end", good | {"commit": True}) == (
        409,
        "INVALID_TXN_STATE",
    )  # nothing added: no transaction to end
    _, answer = await api.produce("tx", producer, "orders", 0, [b"unadded"])
    assert answer["error_code"] in {"INVALID_TXN_STATE", "TRANSACTION_ABORTABLE"}, answer
    wrong = {"producer_id": producer[0] + 1, "producer_epoch": producer[1], "commit": True}
    assert await code("POST", "/v1/transactions/tx/end", wrong) == (
        409,
        "INVALID_PRODUCER_ID_MAPPING",
    )
    assert await code(
        "POST",
        "/v1/transactions/tx/partitions",
        good
        | {
            "partitions": [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 9}]
        },
    ) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    # nothing of it was applied: no transaction open, no record written
    _status, found = await api.call("GET", "/v1/transactions/tx")
    assert (found["state"], found["partitions"]) == ("Empty", [])
    assert api.node.partition("orders", 0).log.high_watermark == 0


async def test_a_broker_that_does_not_coordinate_the_id_says_which_does(api: Api) -> None:
    transactions = api.node.service.transactions
    index = transactions.state_partition("tx")
    topic_id = api.node.service.broker.replicas.image.topic(TXN_TOPIC).topic_id
    api.node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=NO_LEADER))
    status, answer = await api.call("POST", "/v1/transactions/tx/producer", {}, {NO_FORWARD: "1"})
    assert (status, answer["error_code"]) == (421, "NOT_COORDINATOR")


async def test_offsets_committed_in_a_transaction_are_the_groups_with_its_commit_only(
    api: Api,
) -> None:
    api.node.apply(allow("READ", "GROUP", "g"))
    producer = await api.init()
    pid, epoch = producer
    txn = {TRANSACTIONAL_ID: "tx"}

    async def commit_offsets(offset: int, **extra: Any) -> tuple[int, Any]:
        body = {
            "producer_id": pid,
            "producer_epoch": epoch,
            "offsets": [{"topic": "orders", "partition": 0, "offset": offset}],
        }
        return await api.call("POST", "/v1/groups/g/offsets", body | extra, txn)

    async def committed() -> list[Any]:
        status, answer = await api.call("GET", "/v1/groups/g/offsets")
        assert status == 200, answer
        return [(o["topic"], o["partition"], o["offset"]) for o in answer["offsets"]]

    # the group's offsets partition must be in the transaction first (Kafka's [T4])
    status, answer = await commit_offsets(5)
    assert answer["error_code"] in {"INVALID_TXN_STATE", "TRANSACTION_ABORTABLE"}, answer
    group = {"producer_id": pid, "producer_epoch": epoch, "group": "g"}
    assert await api.call("POST", "/v1/transactions/tx/groups", group) == (204, None)
    assert await commit_offsets(5) == (204, None)
    assert await committed() == []  # pending until the commit
    assert await api.end("tx", producer, True) == (204, None)
    await eventually(lambda: api.node.service.coordinator.committed("g") != {})
    assert await committed() == [("orders", 0, 5)]

    # an aborted transaction's offsets never become the group's
    assert (await api.call("POST", "/v1/transactions/tx/groups", group))[0] == 204
    assert await commit_offsets(9) == (204, None)
    assert await api.end("tx", producer, False) == (204, None)
    await eventually(
        lambda: api.node.service.transactions.describe("tx").state is TxnState.COMPLETE_ABORT
    )
    assert await committed() == [("orders", 0, 5)]

    # refusals: the group (READ), the id (WRITE), a producer that is not the id's
    for body, headers, expected in (
        (group | {"group": "other"}, {}, (403, "GROUP_AUTHORIZATION_FAILED")),
        (group | {"group": "a\nb"}, {}, (403, "GROUP_AUTHORIZATION_FAILED")),
    ):
        status, answer = await api.call("POST", "/v1/transactions/tx/groups", body, headers)
        assert (status, answer["error_code"]) == expected, body
    status, answer = await api.call(
        "POST",
        "/v1/groups/g/offsets",
        {
            "producer_id": pid,
            "producer_epoch": epoch,
            "offsets": [{"topic": "orders", "partition": 0, "offset": 1}],
        },
        {TRANSACTIONAL_ID: "other"},
    )
    assert (status, answer["error_code"]) == (403, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    status, answer = await commit_offsets(1, producer_id=pid + 1)
    assert (status, answer["error_code"]) == (409, "INVALID_PRODUCER_ID_MAPPING")
    status, answer = await commit_offsets(1, producer_epoch="x")
    assert (status, answer["error_code"]) == (400, "INVALID_REQUEST")
    assert await committed() == [("orders", 0, 5)]
