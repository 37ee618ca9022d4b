"""Kafka's transaction APIs (kafka/txn_apis.py, transactions/coordinator.py) in-process:
bad inputs and authorization answered with Kafka's codes and nothing half-applied
(docs/design/kafka-transactions.md §2, rule ids in the tests' words), and one whole
transaction through the requests a client sends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kraftlite.errors import ErrorCode
from kraftlite.metadata.records import AccessControlEntryRecord
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.security.authenticator import AuthSettings
from kraftlite.transactions.coordinator import TXN_TOPIC
from tests.harness.inprocess import InProcessBroker, KafkaConnection

ALICE = "User:alice"
E = ErrorCode


def acl(operation: str, kind: str, name: str) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=f"acl-{operation}-{kind}-{name}",
        resource_type=kind,
        resource_name=name,
        pattern_type="LITERAL",
        principal=ALICE,
        host="*",
        operation=operation,
        permission_type="ALLOW",
    )


@pytest.fixture
async def secured() -> AsyncIterator[InProcessBroker]:
    async with InProcessBroker(auth=AuthSettings(required=True)) as broker:
        broker.create_topic("orders", partitions=2)
        broker.create_topic("secret", partitions=1)
        broker.apply(
            acl("WRITE", "TOPIC", "orders"),
            acl("READ", "TOPIC", "orders"),
            acl("WRITE", "TRANSACTIONAL_ID", "tx"),
            acl("WRITE", "TRANSACTIONAL_ID", "tx2"),
            acl("READ", "GROUP", "g"),
        )
        # as the first FindCoordinator makes it
        transactions = broker.service.transactions
        broker.create_topic(TXN_TOPIC, partitions=transactions.settings.partitions)
        yield broker


async def init(kafka: KafkaConnection, tid: str | None, timeout_ms: int = 60_000, **kw: Any) -> Any:
    return await kafka.call(
        ApiKey.INIT_PRODUCER_ID,
        kw.pop("version", 4),
        {"transactional_id": tid, "transaction_timeout_ms": timeout_ms, **kw},
    )


async def add(
    kafka: KafkaConnection, tid: str, pid: int, epoch: int, parts: dict[str, list[int]], v: int = 3
) -> dict[tuple[str, int], int]:
    answer = await kafka.call(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        v,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": t, "partitions": p} for t, p in parts.items()],
        },
    )
    return {
        (t["name"], p["partition_index"]): p["partition_error_code"]
        for t in answer["results_by_topic_v3_and_below"]
        for p in t["results_by_partition"]
    }


async def end(
    kafka: KafkaConnection, tid: str, pid: int, epoch: int, commit: bool, v: int = 3
) -> int:
    answer = await kafka.call(
        ApiKey.END_TXN,
        v,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
    )
    return int(answer["error_code"])


async def produce(
    kafka: KafkaConnection, tid: str | None, records: bytes, partition: int = 0
) -> int:
    answer = await kafka.call(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": tid,
            "acks": -1,
            "timeout_ms": 2000,
            "topic_data": [
                {"name": "orders", "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    return int(answer["responses"][0]["partition_responses"][0]["error_code"])


def txn_records(node: InProcessBroker, pid: int, epoch: int, sequence: int) -> bytes:
    return kafka_records.encode_batch(
        [kafka_records.KafkaRecord(0, node.clock.now_ms(), b"k", b"v")],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )


async def test_init_producer_id_refusals(secured: InProcessBroker) -> None:
    kafka = secured.connect(certificate_principal=ALICE)
    assert (await init(kafka, "other"))["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert (await init(kafka, ""))["error_code"] == E.INVALID_REQUEST  # [I3]
    for timeout in (0, -5, 900_001):  # [C19]
        assert (await init(kafka, "tx", timeout))["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    answer = await init(kafka, "tx", producer_id=5, producer_epoch=-1)  # [I4]
    assert answer["error_code"] == E.INVALID_REQUEST
    first = await init(kafka, "tx")
    assert first["error_code"] == 0 and first["producer_epoch"] == 0
    again = await init(kafka, "tx")  # a new session of the same id: the next epoch [I7b]
    assert (again["producer_id"], again["producer_epoch"]) == (first["producer_id"], 1)
    # KIP-360 with an epoch that is not the current one: fenced, older clients told so
    stale = {"producer_id": first["producer_id"], "producer_epoch": 0}
    assert (await init(kafka, "tx", **stale))["error_code"] == E.PRODUCER_FENCED
    assert (await init(kafka, "tx", version=3, **stale))["error_code"] == E.INVALID_PRODUCER_EPOCH


async def test_add_partitions_adds_nothing_when_any_is_refused(secured: InProcessBroker) -> None:
    kafka = secured.connect(certificate_principal=ALICE)
    started = await init(kafka, "tx")
    pid, epoch = started["producer_id"], started["producer_epoch"]
    assert await add(kafka, "other", pid, epoch, {"orders": [0]}) == {
        ("orders", 0): E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    }
    answered = await add(
        kafka, "tx", pid, epoch, {"orders": [0, 7], "secret": [0], "__consumer_offsets": [0]}
    )
    assert answered == {  # [A1, A3]
        ("orders", 0): 55,  # OPERATION_NOT_ATTEMPTED
        ("orders", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("secret", 0): E.TOPIC_AUTHORIZATION_FAILED,
        ("__consumer_offsets", 0): E.TOPIC_AUTHORIZATION_FAILED,
    }
    described = secured.service.transactions.describe("tx")
    assert described.partitions == frozenset()  # nothing was added
    assert await add(kafka, "tx", pid + 1, epoch, {"orders": [0]}) == {
        ("orders", 0): E.INVALID_PRODUCER_ID_MAPPING
    }
    assert await add(kafka, "tx", pid, epoch + 1, {"orders": [0]}) == {
        ("orders", 0): E.PRODUCER_FENCED
    }
    assert await add(kafka, "tx", pid, epoch + 1, {"orders": [0]}, v=1) == {
        ("orders", 0): E.INVALID_PRODUCER_EPOCH  # [D1]
    }
    too_many = {"orders": [0, 0]}  # a partition named twice
    assert await add(kafka, "tx", pid, epoch, too_many) == {("orders", 0): E.INVALID_REQUEST}


async def test_produce_and_end_txn_refusals(secured: InProcessBroker) -> None:
    kafka = secured.connect(certificate_principal=ALICE)
    started = await init(kafka, "tx")
    pid, epoch = started["producer_id"], started["producer_epoch"]
    batch = txn_records(secured, pid, epoch, 0)
    # a transactional batch without its id, or an id the client may not write [P3]
    assert await produce(kafka, None, batch) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert await produce(kafka, "other", batch) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # a partition not added to the transaction [P9; D3: INVALID_TXN_STATE before v11]
    assert await produce(kafka, "tx", batch) == E.INVALID_TXN_STATE
    # ending a transaction that never began [E3], or one of an id never initialized [E2]
    assert await end(kafka, "tx", pid, epoch, commit=True) == E.INVALID_TXN_STATE
    assert await end(kafka, "tx", pid + 1, epoch, commit=True) == E.INVALID_PRODUCER_ID_MAPPING
    assert await end(kafka, "other", pid, epoch, commit=True) == (
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
    assert secured.partition("orders").log.log_end_offset == 0  # nothing was written
    # a marker from a client [P7]
    marker = bytearray(
        kafka_records.encode_batch(
            [kafka_records.KafkaRecord(0, 1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=-1,
            is_transactional=True,
        )
    )
    assert await produce(kafka, "tx", bytes(marker)) in (E.CORRUPT_MESSAGE, E.INVALID_RECORD)


async def test_a_transaction_through_the_requests_a_client_sends(secured: InProcessBroker) -> None:
    kafka = secured.connect(certificate_principal=ALICE)
    started = await init(kafka, "tx")
    pid, epoch = started["producer_id"], started["producer_epoch"]
    assert await add(kafka, "tx", pid, epoch, {"orders": [0, 1]}) == {
        ("orders", 0): 0,
        ("orders", 1): 0,
    }
    assert await produce(kafka, "tx", txn_records(secured, pid, epoch, 0), 0) == 0
    assert await produce(kafka, "tx", txn_records(secured, pid, epoch, 1), 0) == 0
    partition = secured.partition("orders", 0)
    assert partition.last_stable_offset() == 0  # open
    assert await end(kafka, "tx", pid, epoch, commit=True) == 0
    # the markers go out after the answer [C25]; partition 1 had no batch, gets one anyway
    for _ in range(100):
        if secured.service.transactions.describe("tx").state.name == "COMPLETE_COMMIT":
            break
        await asyncio.sleep(0.01)
    assert secured.service.transactions.describe("tx").state.name == "COMPLETE_COMMIT"
    assert partition.last_stable_offset() == 3  # two records and the marker
    assert secured.partition("orders", 1).log.log_end_offset == 1  # its marker
    assert await end(kafka, "tx", pid, epoch, commit=True) == 0  # a retry [E3]
    assert await end(kafka, "tx", pid, epoch, commit=False) == E.INVALID_TXN_STATE


async def test_no_one_writes_under_another_transactional_ids_producer(
    secured: InProcessBroker,
) -> None:
    """A caller that may write one transactional id cannot use another id's producer id
    (the ids are minted for their transactional id): its batch could raise the victim's
    epoch on the partition and wedge the victim's commit, or slip into its transaction."""
    kafka = secured.connect(certificate_principal=ALICE)
    victim = await init(kafka, "tx")
    pid, epoch = victim["producer_id"], victim["producer_epoch"]
    assert await add(kafka, "tx", pid, epoch, {"orders": [0]}) == {("orders", 0): 0}
    assert await produce(kafka, "tx", txn_records(secured, pid, epoch, 0)) == 0
    await init(kafka, "tx2")
    for forged in (txn_records(secured, pid, epoch + 1, 0), txn_records(secured, pid, epoch, 1)):
        assert await produce(kafka, "tx2", forged) == E.INVALID_PRODUCER_ID_MAPPING
    assert await end(kafka, "tx", pid, epoch, commit=True) == 0
    for _ in range(100):
        if secured.service.transactions.describe("tx").state.name == "COMPLETE_COMMIT":
            break
        await asyncio.sleep(0.01)
    assert secured.service.transactions.describe("tx").state.name == "COMPLETE_COMMIT"
    assert secured.partition("orders", 0).last_stable_offset() == 2
