"""The brokers' internal transaction routes in-process: `POST /v1/internal/txn-markers` (a
coordinator's markers, written by the partition's leader) and `POST /v1/internal/txn-verify`
(a leader asks the coordinator whether a partition is in a transaction), on the broker's
real aiohttp app (api/broker_app.py, its whole middleware chain) over one in-process broker
(tests/harness/inprocess.py), with an open transaction on `orders-0`.

Only the cluster's nodes are answered (api/permissions.py NODES, api/internal_auth.py
rule 1): a client, a super user among them, or a node's call made for a client, is refused
403 CLUSTER_AUTHORIZATION_FAILED whatever its body. A node's malformed body is a 400
INVALID_REQUEST problem, never a 500, and writes nothing."""

from __future__ import annotations

import base64
import io
import secrets
from collections.abc import AsyncIterator, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import structlog
from aiohttp.test_utils import TestClient, TestServer

from kraftlite.api.broker_app import make_broker_app
from kraftlite.api.internal_auth import ClusterAuth, acting_for
from kraftlite.protocol import internal
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.security import scram
from kraftlite.security.authenticator import AuthSettings
from kraftlite.security.cluster_auth import CLIENT_HOST_HEADER, HEADER, PRINCIPAL_HEADER
from kraftlite.transactions.coordinator import TXN_TOPIC
from kraftlite.transactions.metadata import TopicPartition, TxnMetadata
from tests.harness.inprocess import SECRET, InProcessBroker

MARKERS, VERIFY = "/v1/internal/txn-markers", "/v1/internal/txn-verify"
ROOT, ALICE, PASSWORD = "root", "alice", "a-password-of-some-length"
JSON = {"Content-Type": "application/json"}


@dataclass
class Setup:
    node: InProcessBroker
    http: TestClient[Any, Any]
    producer_id: int
    producer_epoch: int

    def markers(self, **changes: Any) -> dict[str, Any]:
        """A well-formed markers request for the open transaction, with `changes`."""
        return {
            "v": internal.VERSION,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "commit": True,
            "coordinator_epoch": 0,
            "partitions": [{"topic": "orders", "partition": 0}],
            **changes,
        }

    def verify(self, **changes: Any) -> dict[str, Any]:
        return {
            "v": internal.VERSION,
            "transactional_id": "tx",
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "topic": "orders",
            "partition": 0,
            **changes,
        }

    def state(self) -> tuple[int, int, int, TxnMetadata]:
        """What a refused call must leave as it was: orders-0's and orders-1's log ends,
        orders-0's last stable offset (held by the open transaction) and the coordinator's
        view of the transaction."""
        first, second = self.node.partition("orders", 0), self.node.partition("orders", 1)
        return (
            first.log.log_end_offset,
            second.log.log_end_offset,
            first.last_stable_offset(),
            self.node.service.transactions.describe("tx"),
        )


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as captured:
        yield captured


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    async with InProcessBroker(
        auth=AuthSettings(required=True, super_users=frozenset({f"User:{ROOT}"}))
    ) as node:
        node.create_topic("orders", partitions=2)
        transactions = node.service.transactions
        node.create_topic(TXN_TOPIC, partitions=transactions.settings.partitions)
        for user in (ROOT, ALICE):
            node.apply(
                scram.make_credential(
                    user, PASSWORD, scram.DEFAULT_MECHANISM, secrets.token_bytes(16)
                )
            )
        # a transaction open on orders-0: one record written, not yet ended
        pid, epoch = await transactions.init_producer_id("tx", 60_000, None)
        await transactions.add_partitions("tx", pid, epoch, [TopicPartition("orders", 0)])
        kafka = node.connect(certificate_principal=f"User:{ROOT}")
        produced = await kafka.call(
            ApiKey.PRODUCE,
            9,
            {
                "transactional_id": "tx",
                "acks": -1,
                "timeout_ms": 2000,
                "topic_data": [
                    {
                        "name": "orders",
                        "partition_data": [
                            {
                                "index": 0,
                                "records": kafka_records.encode_batch(
                                    [kafka_records.KafkaRecord(0, node.clock.now_ms(), b"k", b"v")],
                                    producer_id=pid,
                                    producer_epoch=epoch,
                                    base_sequence=0,
                                    is_transactional=True,
                                ),
                            }
                        ],
                    }
                ],
            },
        )
        assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0, produced
        assert node.partition("orders", 0).last_stable_offset() == 0  # open
        app = make_broker_app(node.service, ClusterAuth(SECRET, "broker-1", node.clock), node.gate)
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        try:
            yield Setup(node, client, pid, epoch)
        finally:
            await client.close()


def basic(user: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def signed(setup: Setup, path: str, body: bytes, principal: str = "") -> dict[str, str]:
    """Broker 2's signature (the cluster secret) on the call, for itself or, with
    `principal`, as a call it makes for that client."""
    signer = ClusterAuth(SECRET, "broker-2", setup.node.clock)
    headers = {HEADER: signer.sign("POST", path, body, acting_for(principal, "10.0.0.9"))}
    if principal:
        headers |= {PRINCIPAL_HEADER: principal, CLIENT_HOST_HEADER: "10.0.0.9"}
    return headers


async def post(
    setup: Setup, path: str, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    # a file, not bytes: aiohttp warns of bodies over 1 MiB given as bytes (it still says
    # the length, which a signed call needs)
    async with setup.http.post(
        path, data=io.BytesIO(raw), headers={**JSON, **(headers or {})}
    ) as response:
        return response.status, await response.read()


def problem(status: int, raw: bytes) -> tuple[int, str]:
    answer = orjson.loads(raw)
    assert "Traceback" not in raw.decode(), raw
    return status, answer["error_code"]


async def test_clients_are_refused_even_super_users(setup: Setup) -> None:
    before = setup.state()
    for path, body in ((MARKERS, setup.markers()), (VERIFY, setup.verify())):
        raw = orjson.dumps(body)
        callers = {
            "anonymous": {},
            "an authenticated user": basic(ALICE),
            "a super user": basic(ROOT),
            "a node's call for a super user": signed(setup, path, raw, f"User:{ROOT}"),
            "a signature for another path": signed(
                setup, VERIFY if path == MARKERS else MARKERS, raw
            ),
        }
        for who, headers in callers.items():
            status, answer = await post(setup, path, raw, headers)
            assert problem(status, answer) == (403, "CLUSTER_AUTHORIZATION_FAILED"), (who, path)
    assert setup.state() == before  # no marker: the transaction is still open


async def test_a_nodes_well_formed_calls_are_answered(setup: Setup) -> None:
    """What the refusals are measured against: the same bodies, signed by a node."""
    raw = orjson.dumps(setup.verify())
    status, answer = await post(setup, VERIFY, raw, signed(setup, VERIFY, raw))
    assert (status, orjson.loads(answer)) == (200, {"v": 1, "error_code": 0})
    first = setup.node.partition("orders", 0)
    end = first.log.log_end_offset
    raw = orjson.dumps(setup.markers())
    status, answer = await post(setup, MARKERS, raw, signed(setup, MARKERS, raw))
    assert (status, orjson.loads(answer)) == (
        200,
        {"v": 1, "results": [{"topic": "orders", "partition": 0, "error_code": 0}]},
    )
    assert first.log.log_end_offset == end + 1  # the marker
    assert first.last_stable_offset() == end + 1  # the transaction ended there


def _markers_bodies(setup: Setup) -> dict[str, bytes]:
    good = setup.markers()
    encoded = orjson.dumps(good)
    bodies: dict[str, Any] = {
        "empty": b"",
        "garbage": b"\x00\xff\xfe garbage \x81",
        "truncated": encoded[: len(encoded) // 2],
        "not an object": b"[1, 2, 3]",
        "null": b"null",
        "no version": {k: v for k, v in good.items() if k != "v"},
        "another version": {**good, "v": 0},
        "no partitions": {k: v for k, v in good.items() if k != "partitions"},
        "producer id as a string": setup.markers(producer_id=str(setup.producer_id)),
        "producer id negative": setup.markers(producer_id=-1),
        "producer id past int64": setup.markers(producer_id=2**63),
        "epoch past int16": setup.markers(producer_epoch=2**15),
        "commit as a string": setup.markers(commit="yes"),
        "commit as a number": setup.markers(commit=1),
        "coordinator epoch past int32": setup.markers(coordinator_epoch=2**31),
        "partitions as an object": setup.markers(partitions={"orders": 0}),
        "partition as a pair": setup.markers(partitions=[["orders", 0]]),
        "partition index a string": setup.markers(
            partitions=[{"topic": "orders", "partition": "0"}]
        ),
        "partition index negative": setup.markers(
            partitions=[{"topic": "orders", "partition": -1}]
        ),
        "partition index a float": setup.markers(
            partitions=[{"topic": "orders", "partition": 0.5}]
        ),
        "topic not a name": setup.markers(partitions=[{"topic": "a/../b", "partition": 0}]),
        "topic too long": setup.markers(partitions=[{"topic": "t" * 10_000, "partition": 0}]),
        "a partition named twice": setup.markers(
            partitions=[{"topic": "orders", "partition": 0}] * 2
        ),
        "absurdly many partitions": setup.markers(
            partitions=[{"topic": "orders", "partition": 1}] * (internal.MAX_ITEMS + 1)
        ),
        # an unknown field is skipped, but not past msgspec's depth
        "nested too deep": encoded[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    }
    return {
        why: body if isinstance(body, bytes) else orjson.dumps(body) for why, body in bodies.items()
    }


def _verify_bodies(setup: Setup) -> dict[str, bytes]:
    good = setup.verify()
    encoded = orjson.dumps(good)
    bodies: dict[str, Any] = {
        "empty": b"",
        "garbage": b"\xde\xad\xbe\xef",
        "truncated": encoded[:-3],
        "not an object": b'"tx"',
        "no version": {k: v for k, v in good.items() if k != "v"},
        "no transactional id": {k: v for k, v in good.items() if k != "transactional_id"},
        "empty transactional id": setup.verify(transactional_id=""),
        "transactional id too long": setup.verify(transactional_id="x" * 100_000),
        "transactional id a number": setup.verify(transactional_id=7),
        "producer id null": setup.verify(producer_id=None),
        "producer id negative": setup.verify(producer_id=-5),
        "epoch negative": setup.verify(producer_epoch=-1),
        "epoch a bool": setup.verify(producer_epoch=True),
        "partition past int32": setup.verify(partition=2**31),
        "topic not a name": setup.verify(topic="orders\n"),
        "topic a list": setup.verify(topic=["orders"]),
    }
    return {
        why: body if isinstance(body, bytes) else orjson.dumps(body) for why, body in bodies.items()
    }


@pytest.mark.parametrize("route", [MARKERS, VERIFY])
async def test_a_nodes_malformed_bodies_are_refused_and_write_nothing(
    setup: Setup, logs: list[MutableMapping[str, Any]], route: str
) -> None:
    before = setup.state()
    bodies = _markers_bodies(setup) if route == MARKERS else _verify_bodies(setup)
    for why, raw in bodies.items():
        status, answer = await post(setup, route, raw, signed(setup, route, raw))
        assert problem(status, answer) == (400, "INVALID_REQUEST"), (why, answer[:300])
    assert setup.state() == before  # no marker, nothing in the coordinator changed
    assert not [line for line in logs if line.get("log_level") in {"error", "critical"}]
