"""A partition's side of transactions (issue 27; broker/partition.py rule 4), in-process:
transactional batches and the markers that end them, as Kafka's read_committed and
read_uncommitted consumers see them through Fetch and ListOffsets (docs/design/
kafka-transactions.md [P14-P21]), and as kraftlite's own readers skip the markers.

The coordinator that decides transactions comes later; here the test writes each batch
and marker through the partition, as the coordinator and a verified produce will."""

from __future__ import annotations

from typing import Any

import pytest

from kraftlite.broker.partition import Acks, Partition
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata import records as r
from kraftlite.protocol import batch as fmt
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.service import Fetched, FetchWanted
from tests.harness.inprocess import (
    BROKER_ID,
    InProcessBroker,
    KafkaConnection,
    kafka_batch,
    topic_id_for,
)

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


async def produce_txn(partition: Partition, batch: bytes) -> None:
    """A transactional batch, verified as the service verifies it (its producer's token)."""
    header = fmt.read_header(batch)
    token = await partition.begin_verification(header.producer_id)
    await partition.produce(batch, Acks.ALL, 1, verification=token)


def txn_batch(pid: int, sequence: int, *values: bytes, epoch: int = 0) -> bytes:
    return fmt.encode_batch(
        list(values),
        keys=list(values),
        timestamps=[1] * len(values),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        transactional=True,
    )


async def fetch(kafka: KafkaConnection, offset: int, isolation: int) -> dict[str, Any]:
    answer = await kafka.call(
        ApiKey.FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": isolation,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "orders",
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    return answer["responses"][0]["partitions"][0]


async def latest(kafka: KafkaConnection, isolation: int) -> int:
    answer = await kafka.call(
        ApiKey.LIST_OFFSETS,
        6,
        {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    return int(answer["topics"][0]["partitions"][0]["offset"])


async def produce_plain(kafka: KafkaConnection, value: bytes) -> None:
    now = kafka.session.service.broker.clock.now_ms()
    answer = await kafka.call(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {
                    "name": "orders",
                    "partition_data": [
                        {"index": 0, "records": kafka_batch([value], timestamp=now, keys=[value])}
                    ],
                }
            ],
        },
    )
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0


def consumed(partition_answer: dict[str, Any]) -> list[bytes | None]:
    """What a read_committed Kafka consumer returns from a fetch answer [P20]: it skips
    the batches of the aborted transactions listed, and every control batch."""
    aborted = sorted(
        (t["first_offset"], t["producer_id"])
        for t in partition_answer["aborted_transactions"] or []
    )
    skipping: set[int] = set()
    values: list[bytes | None] = []
    for batch in kafka_records.decode_batches(partition_answer["records"]):
        while aborted and aborted[0][0] <= batch.last_offset:
            skipping.add(aborted.pop(0)[1])
        if batch.is_control:
            skipping.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in skipping:
            continue
        values += [record.value for record in batch.records]
    return values


async def test_read_committed_sees_committed_transactions_whole_and_never_aborted_ones(
    node: InProcessBroker,
) -> None:
    kafka = node.connect()
    partition = node.partition("orders")
    await produce_plain(kafka, b"before")  # 0
    await produce_txn(partition, txn_batch(7, 0, b"a1", b"a2"))  # 1-2, to abort
    await produce_txn(partition, txn_batch(8, 0, b"c1"))  # 3, to commit
    await produce_plain(kafka, b"plain")  # 4: behind both open transactions
    # open transactions pin the last stable offset at the first one's first offset [P16]
    assert partition.log.high_watermark == 5
    assert partition.last_stable_offset() == 1
    assert await latest(kafka, READ_COMMITTED) == 1
    assert await latest(kafka, READ_UNCOMMITTED) == 5
    early = await fetch(kafka, 0, READ_COMMITTED)
    assert early["last_stable_offset"] == 1 and early["high_watermark"] == 5
    assert consumed(early) == [b"before"]
    assert early["aborted_transactions"] == []
    uncommitted = await fetch(kafka, 0, READ_UNCOMMITTED)
    assert uncommitted["aborted_transactions"] is None  # null for read_uncommitted [P19]
    assert len(kafka_records.decode_batches(uncommitted["records"])) == 4

    assert await partition.write_marker(7, 0, False, 0, 1) == 5  # abort producer 7
    assert partition.last_stable_offset() == 3  # producer 8's transaction is still open
    assert await partition.write_marker(8, 0, True, 0, 1) == 6  # commit producer 8
    assert partition.last_stable_offset() == 7 == await latest(kafka, READ_COMMITTED)
    answer = await fetch(kafka, 0, READ_COMMITTED)
    assert answer["aborted_transactions"] == [{"producer_id": 7, "first_offset": 1}]
    assert consumed(answer) == [b"before", b"c1", b"plain"]
    batches = kafka_records.decode_batches(answer["records"])
    markers = [(b.base_offset, b.producer_id) for b in batches if b.is_control]
    assert markers == [(5, 7), (6, 8)]  # Kafka's control batches, with their producers
    assert all(b.is_transactional for b in batches if b.producer_id in (7, 8))
    # a fetch from past the aborted transaction's marker lists nothing [P19]
    assert (await fetch(kafka, 6, READ_COMMITTED))["aborted_transactions"] == []


async def test_a_new_leader_epoch_rebuilds_the_transactions_from_its_log(
    node: InProcessBroker,
) -> None:
    partition = node.partition("orders")
    await produce_txn(partition, txn_batch(7, 0, b"x"))  # 0
    await produce_txn(partition, txn_batch(9, 0, b"y"))  # 1
    await partition.write_marker(7, 0, False, 3, 1)  # 2
    await produce_txn(partition, txn_batch(7, 1, b"z"))  # 3: 7's next transaction
    before = (await partition.transactions()).aborted(0, 10)
    topic_id = topic_id_for("orders")  # the same broker leads again, in a new epoch
    node.apply(r.PartitionChangeRecord(topic_id=topic_id, partition=0, leader=-1))
    node.apply(r.PartitionChangeRecord(topic_id=topic_id, partition=0, leader=BROKER_ID))
    states = await partition.transactions()
    assert states.aborted(0, 10) == before
    assert partition.last_stable_offset() == 1  # producer 9's transaction, still open
    # DescribeProducers' view [X3]: open transactions and the last markers' epochs
    listed = {p.producer_id: p for p in await node.service.active_producers("orders", 0)}
    assert (listed[7].coordinator_epoch, listed[7].txn_start_offset) == (3, 3)
    assert (listed[9].coordinator_epoch, listed[9].txn_start_offset) == (-1, 1)
    # the marker's coordinator epoch came back from the log: an older coordinator is fenced
    with pytest.raises(KraftliteError) as caught:
        await partition.write_marker(7, 0, True, 2, 1)
    assert caught.value.code is ErrorCode.TRANSACTION_COORDINATOR_FENCED
    with pytest.raises(KraftliteError) as caught:  # inside its transaction: not plain
        await partition.produce(
            fmt.encode_batch(
                [b"p"], timestamps=[1], producer_id=7, producer_epoch=0, base_sequence=2
            ),
            Acks.ALL,
            1,
        )
    assert caught.value.code is ErrorCode.INVALID_TXN_STATE


async def test_clients_cannot_write_markers_or_transactional_batches_directly(
    node: InProcessBroker,
) -> None:
    marker = fmt.encode_marker(7, 0, True, 0, node.clock.now_ms())
    for batch in (marker, txn_batch(7, 0, b"x")):
        with pytest.raises(KraftliteError) as caught:
            await node.service.produce("orders", 0, batch, Acks.ALL, 1, principal="User:a")
        assert caught.value.code is ErrorCode.INVALID_RECORD
    with pytest.raises(KraftliteError) as caught:
        await node.partition("orders").produce(marker, Acks.ALL, 1)
    assert caught.value.code is ErrorCode.INVALID_RECORD
    assert node.partition("orders").log.log_end_offset == 0


async def test_readers_skip_markers_and_move_past_them(node: InProcessBroker) -> None:
    """kraftlite's own readers never return a marker as a record (Kafka's do not either):
    the service's read_committed fetch stops below the open transaction, and past the
    marker its position moves on."""
    partition = node.partition("orders")
    await produce_txn(partition, txn_batch(7, 0, b"t"))
    wanted = [FetchWanted("orders", 0, 0, 1 << 20)]
    (found,) = await node.service.fetch_many(wanted, 1, 1 << 20, 0, committed=True)
    assert isinstance(found, Fetched) and found.data == b"" and found.aborted == ()
    await partition.write_marker(7, 0, True, 0, 1)
    (found,) = await node.service.fetch_many(wanted, 1, 1 << 20, 0, committed=True)
    assert isinstance(found, Fetched) and found.last_stable_offset == 2
    assert fmt.next_offset_after(found.data) == 2
    from kraftlite.client.consumer import _records  # noqa: PLC0415

    got, _ = _records(("orders", 0), found.data, 0, 1 << 20)
    assert [r.value for r in got] == [b"t"]


async def test_a_compacted_topic_reads_as_a_read_committed_consumer_sees_it(
    node: InProcessBroker,
) -> None:
    """The key index takes decided records only (storage/txn_headers.py): an aborted
    transaction's value is never a key's latest, an open one's not yet; and the cleaner
    removing the aborted batch leaves the committed value readable."""
    node.create_topic("table", configs={"cleanup.policy": "compact"})
    partition = node.partition("table")
    plain = fmt.encode_batch([b"committed"], keys=[b"k"], timestamps=[node.clock.now_ms()])
    await partition.produce(plain, Acks.ALL, 1)  # 0
    await produce_txn(partition, txn_batch(7, 0, b"k"))  # 1: k = "k" in an aborted txn
    await partition.write_marker(7, 0, False, 0, 1)  # 2
    open_batch = fmt.encode_batch(
        [b"open"],
        keys=[b"j"],
        timestamps=[1],
        producer_id=8,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    await produce_txn(partition, open_batch)  # 3: still open

    async def value_of(key: bytes) -> bytes | None:
        found = await node.service.latest_of_key("table", key, 0)
        return None if found is None else found[1].value

    assert await value_of(b"k") == b"committed"
    assert await value_of(b"j") is None  # not decided yet
    await partition.write_marker(8, 0, True, 0, 1)  # 4
    assert await value_of(b"j") == b"open"
