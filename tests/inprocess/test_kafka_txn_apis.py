"""Kafka's transaction APIs (kafka/txn_apis.py, transactions/coordinator.py) in-process:
bad inputs and authorization answered with Kafka's codes and nothing half-applied
(docs/design/kafka-transactions.md §2, rule ids in the tests' words), and one whole
transaction through the requests a client sends."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kraftlite.errors import ErrorCode
from kraftlite.kafka import txn_apis
from kraftlite.metadata.records import NO_LEADER, AccessControlEntryRecord, PartitionChangeRecord
from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.security.authenticator import AuthSettings
from kraftlite.transactions import coordinator as coordinator_module
from kraftlite.transactions.coordinator import TXN_TOPIC
from kraftlite.transactions.metadata import TopicPartition, TxnState
from tests.harness.inprocess import InProcessBroker, KafkaConnection, topic_id_for

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


# -- DescribeTransactions and ListTransactions [X1, X2] -----------------------------------


async def describe(kafka: KafkaConnection, *transactional_ids: str) -> list[dict[str, Any]]:
    answer = await kafka.call(
        ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": list(transactional_ids)}
    )
    return list(answer["transaction_states"])


async def listed(kafka: KafkaConnection, version: int = 1, **filters: Any) -> dict[str, Any]:
    return await kafka.call(ApiKey.LIST_TRANSACTIONS, version, filters)


def rows(answer: dict[str, Any]) -> set[tuple[str, int, str]]:
    assert answer["error_code"] == 0, answer
    return {
        (s["transactional_id"], s["producer_id"], s["transaction_state"])
        for s in answer["transaction_states"]
    }


async def open_transaction(
    node: InProcessBroker, kafka: KafkaConnection, tid: str, timeout_ms: int = 60_000
) -> tuple[int, int]:
    """An Ongoing transaction of `tid` on orders-0 and orders-1, begun now."""
    started = await init(kafka, tid, timeout_ms)
    pid, epoch = started["producer_id"], started["producer_epoch"]
    assert await add(kafka, tid, pid, epoch, {"orders": [1, 0]}) == {
        ("orders", 0): 0,
        ("orders", 1): 0,
    }
    return pid, epoch


async def test_describe_transactions_answers_each_id_as_kafka_does(
    secured: InProcessBroker,
) -> None:
    kafka = secured.connect(certificate_principal=ALICE)
    transactions = secured.service.transactions
    secured.apply(acl("DESCRIBE", "TRANSACTIONAL_ID", "ghost"))  # may describe, never used
    began = secured.clock.now_ms()
    pid, epoch = await open_transaction(secured, kafka, "tx", timeout_ms=45_000)
    secured.clock.advance(1_000)
    # a partition of a topic alice may not describe, added by a client that may write it
    await transactions.add_partitions("tx", pid, epoch, [TopicPartition("secret", 0)])
    # an id alice may not describe (its producer id and state are not hers to see)
    other_pid, _ = await transactions.init_producer_id("other", 60_000, None)
    described = await describe(kafka, "tx", "ghost", "other", "", "x" * 1025, "tx")
    assert described[0] == {
        "error_code": 0,
        "transactional_id": "tx",
        "transaction_state": "Ongoing",
        "transaction_timeout_ms": 45_000,
        "transaction_start_time_ms": began,  # when it began, not its last change
        "producer_id": pid,
        "producer_epoch": epoch,
        "topics": [{"topic": "orders", "partitions": [0, 1]}],  # "secret" left out
    }
    assert described[5] == described[0]  # named twice, answered twice
    assert [(d["transactional_id"], d["error_code"]) for d in described[1:5]] == [
        ("ghost", 105),  # TRANSACTIONAL_ID_NOT_FOUND
        ("other", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("", E.INVALID_REQUEST),
        ("x" * 1025, E.INVALID_REQUEST),  # no id may have that name
    ]
    assert described[2]["producer_id"] == 0 != other_pid  # nothing of "other" told
    assert described[2]["transaction_state"] == ""
    assert transactions.describe("other").state is TxnState.EMPTY  # it does exist
    # once committed: CompleteCommit, with no partitions left in the transaction
    assert await end(kafka, "tx", pid, epoch, commit=True) == 0
    for _ in range(100):
        if transactions.describe("tx").state is TxnState.COMPLETE_COMMIT:
            break
        await asyncio.sleep(0.01)
    (done,) = await describe(kafka, "tx")
    assert (done["transaction_state"], done["topics"]) == ("CompleteCommit", [])


async def test_describe_transactions_bounds(
    secured: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_DESCRIBED_IDS ids, or MAX_DESCRIBED_PARTITIONS partitions after the first id
    with any, an id is answered INVALID_REQUEST (shrunk here to 3 and 3)."""
    monkeypatch.setattr(txn_apis, "MAX_DESCRIBED_IDS", 3)
    monkeypatch.setattr(txn_apis, "MAX_DESCRIBED_PARTITIONS", 3)
    kafka = secured.connect(certificate_principal=ALICE)
    await open_transaction(secured, kafka, "tx")  # two partitions
    await init(kafka, "tx2")  # none
    described = await describe(kafka, "tx2", "tx", "tx", "tx2")
    assert [(d["transactional_id"], d["error_code"], len(d["topics"])) for d in described] == [
        ("tx2", 0, 0),
        ("tx", 0, 1),  # the first with partitions: answered whatever its size
        ("tx", E.INVALID_REQUEST, 0),  # 2 + 2 > 3
        ("tx2", E.INVALID_REQUEST, 0),  # the fourth id
    ]


async def test_a_transactional_id_coordinated_elsewhere_or_loading(
    secured: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOT_COORDINATOR for an id whose state partition another broker leads, and no
    listing of it here; COORDINATOR_LOAD_IN_PROGRESS for it, and for the whole listing,
    while this broker loads the partition again once it leads it; then as before."""
    kafka = secured.connect(certificate_principal=ALICE)
    transactions = secured.service.transactions
    pid, _ = await open_transaction(secured, kafka, "tx")
    moved = await init(kafka, "tx2")
    index = transactions.state_partition("tx2")
    assert index != transactions.state_partition("tx")
    state_topic = topic_id_for(TXN_TOPIC)
    secured.apply(PartitionChangeRecord(topic_id=state_topic, partition=index, leader=NO_LEADER))
    (answer,) = await describe(kafka, "tx2")
    assert answer["error_code"] == E.NOT_COORDINATOR
    assert rows(await listed(kafka)) == {("tx", pid, "Ongoing")}
    # led here again, at a new epoch: replayed off the event loop, however small
    monkeypatch.setattr(coordinator_module, "INLINE_LOAD_BYTES", -1)
    secured.apply(PartitionChangeRecord(topic_id=state_topic, partition=index, leader=1))
    (answer,) = await describe(kafka, "tx2")
    assert answer["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    answer = await listed(kafka)
    assert (answer["error_code"], answer["transaction_states"]) == (
        E.COORDINATOR_LOAD_IN_PROGRESS,
        [],
    )
    for _ in range(200):
        if (await listed(kafka))["error_code"] == 0:
            break
        await asyncio.sleep(0.01)
    (answer,) = await describe(kafka, "tx2")
    assert (answer["error_code"], answer["producer_id"]) == (0, moved["producer_id"])
    assert rows(await listed(kafka)) == {
        ("tx", pid, "Ongoing"),
        ("tx2", moved["producer_id"], "Empty"),
    }


async def test_list_transactions_filters_by_state_and_producer_id(
    secured: InProcessBroker,
) -> None:
    kafka = secured.connect(certificate_principal=ALICE)
    transactions = secured.service.transactions
    ongoing, _ = await open_transaction(secured, kafka, "tx")
    empty = (await init(kafka, "tx2"))["producer_id"]
    hidden, hidden_epoch = await transactions.init_producer_id("other", 60_000, None)
    await transactions.add_partitions("other", hidden, hidden_epoch, [TopicPartition("orders", 0)])
    assert {t.transactional_id for t in transactions.listing()} == {"tx", "tx2", "other"}
    everything = await listed(kafka)
    # "other" is left out: alice may not describe it (silently: no unknown, no error)
    assert rows(everything) == {("tx", ongoing, "Ongoing"), ("tx2", empty, "Empty")}
    assert everything["unknown_state_filters"] == []
    assert rows(await listed(kafka, state_filters=["Ongoing"])) == {("tx", ongoing, "Ongoing")}
    answer = await listed(kafka, state_filters=["Empty", "Bogus", "ongoing", "Bogus"])
    assert rows(answer) == {("tx2", empty, "Empty")}
    assert answer["unknown_state_filters"] == ["Bogus", "ongoing"]  # names are exact
    answer = await listed(kafka, state_filters=["Bogus"])  # only unknown names: nothing
    assert (rows(answer), answer["unknown_state_filters"]) == (set(), ["Bogus"])
    assert rows(await listed(kafka, producer_id_filters=[empty, 12345])) == {
        ("tx2", empty, "Empty")
    }
    assert rows(await listed(kafka, producer_id_filters=[hidden])) == set()
    both: dict[str, Any] = {"state_filters": ["Ongoing"], "producer_id_filters": [empty]}
    assert rows(await listed(kafka, **both)) == set()  # both filters hold
    assert rows(await listed(kafka, version=0, state_filters=["Empty", "Ongoing"])) == {
        ("tx", ongoing, "Ongoing"),
        ("tx2", empty, "Empty"),
    }
    # a caller who may describe every id sees "other" too
    secured.apply(acl("DESCRIBE", "TRANSACTIONAL_ID", "other"))
    assert rows(await listed(kafka, state_filters=["Ongoing"])) == {
        ("tx", ongoing, "Ongoing"),
        ("other", hidden, "Ongoing"),
    }


async def test_list_transactions_duration_filter(secured: InProcessBroker) -> None:
    """v1's DurationFilter keeps transactions running longer than it (Kafka: now - start >
    duration); an id whose transaction never began (start -1) passes, as in Kafka."""
    kafka = secured.connect(certificate_principal=ALICE)
    ongoing, _ = await open_transaction(secured, kafka, "tx")
    empty = (await init(kafka, "tx2"))["producer_id"]
    secured.clock.advance(5_000)
    secured.heartbeat()  # the leadership lease, on the same clock
    both = {("tx", ongoing, "Ongoing"), ("tx2", empty, "Empty")}
    assert rows(await listed(kafka, duration_filter=4_999)) == both
    assert rows(await listed(kafka, duration_filter=5_000)) == {("tx2", empty, "Empty")}
    assert rows(await listed(kafka, duration_filter=-1)) == both  # none
    assert rows(await listed(kafka, duration_filter=0, state_filters=["Ongoing"])) == {
        ("tx", ongoing, "Ongoing")
    }
    # v0 has no DurationFilter: whatever the body says, it is not sent
    assert rows(await listed(kafka, version=0, duration_filter=10**9)) == both


async def test_the_transaction_apis_are_advertised(secured: InProcessBroker) -> None:
    kafka = secured.connect(certificate_principal=ALICE)
    answer = await kafka.call(ApiKey.API_VERSIONS, 3, {})
    versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert (versions[65], versions[66]) == ((0, 0), (0, 1))
    # v2 (TransactionalIdPattern) is not served: such a request closes the connection
    v1 = messages.encode_request(66, 1, 9, "c", {})
    with pytest.raises(messages.UnsupportedVersion):
        messages.decode_request(v1[:2] + (2).to_bytes(2, "big") + v1[4:])


@pytest.mark.filterwarnings("ignore:(read_text|open_text) is deprecated:DeprecationWarning")
async def test_kafka_pythons_admin_reads_the_answers(secured: InProcessBroker) -> None:
    """kafka-python 3.0.12's admin (describe_transactions, list_transactions): its own
    request encoding, and its own reading of the answers into its result types."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import errors  # noqa: PLC0415 - a test-only client
        from kafka.admin._transactions import (  # noqa: PLC0415
            TransactionDescription,
            TransactionListing,
            TransactionsAdminMixin,
            TransactionState,
        )
        from kafka.protocol.admin.transactions import (  # noqa: PLC0415
            DescribeTransactionsResponse,
            ListTransactionsResponse,
        )
        from kafka.structs import TopicPartition as KafkaTopicPartition  # noqa: PLC0415
    kafka = secured.connect(certificate_principal=ALICE)
    began = secured.clock.now_ms()
    pid, epoch = await open_transaction(secured, kafka, "tx")
    await init(kafka, "tx2")
    secured.clock.advance(1_000)
    secured.heartbeat()

    async def exchange(request: Any, version: int, response: Any) -> Any:
        request.with_header(correlation_id=7, client_id="kafka-python")
        frame = bytes(request.encode(version=version, header=True))
        answer = await kafka.session.handle(messages.decode_request(frame))
        return response.decode(answer, version=version, header=True)

    admin = TransactionsAdminMixin
    request = admin._describe_transactions_request(["tx"])
    response = await exchange(request, 0, DescribeTransactionsResponse)
    assert admin._describe_transactions_process_response(response, 1) == {
        "tx": TransactionDescription(
            coordinator_id=1,
            state=TransactionState.ONGOING,
            producer_id=pid,
            producer_epoch=epoch,
            transaction_timeout_ms=60_000,
            transaction_start_time_ms=began,
            topic_partitions={KafkaTopicPartition("orders", 0), KafkaTopicPartition("orders", 1)},
        )
    }
    secured.apply(acl("DESCRIBE", "TRANSACTIONAL_ID", "ghost"))
    request = admin._describe_transactions_request(["ghost"])
    response = await exchange(request, 0, DescribeTransactionsResponse)
    with pytest.raises(errors.TransactionalIdNotFoundError):
        admin._describe_transactions_process_response(response, 1)
    request = admin._describe_transactions_request(["other"])
    response = await exchange(request, 0, DescribeTransactionsResponse)
    with pytest.raises(errors.TransactionalIdAuthorizationFailedError):
        admin._describe_transactions_process_response(response, 1)
    request = admin._list_transactions_request(state_filters=["Ongoing"], duration_filter_ms=500)
    response = await exchange(request, 1, ListTransactionsResponse)
    assert admin._list_transactions_process_response(response) == [
        TransactionListing("tx", pid, TransactionState.ONGOING)
    ]
