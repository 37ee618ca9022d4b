"""The broker service (kraftlite/service.py) in-process: what a produce, a fetch and an
offset lookup do on the leader, whatever edge they came in by, over the memory log and a
ManualClock (tests/harness/inprocess.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest

from kraftlite.broker.partition import Acks
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from kraftlite.metadata import records as r
from kraftlite.protocol import batch as fmt
from tests.harness.inprocess import BROKER_ID, InProcessBroker, NetworkCallError, topic_id_for

ALICE = "User:alice"
BOB = "User:bob"


def batch(
    node: InProcessBroker,
    *values: bytes,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    now = node.clock.now_ms()
    return fmt.encode_batch(
        list(values),
        timestamps=[now] * len(values),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def values(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for b in fmt.decode_stream(data) for r in b.records()]


async def refused(call: Awaitable[object]) -> KraftliteError:
    with pytest.raises(KraftliteError) as info:
        await call
    return info.value


async def test_produce_then_fetch_round_trip(node: InProcessBroker) -> None:
    service = node.service
    assert service.leader("orders", 1).leader_epoch == node.partition("orders", 1).leader_epoch
    first = await service.produce(
        "orders", 1, batch(node, b"a", b"b"), Acks.ALL, 1.0, principal=ALICE
    )
    second = await service.produce("orders", 1, batch(node, b"c"), Acks.ALL, 1.0, principal=ALICE)
    assert (first.first_offset, first.last_offset, second.first_offset) == (0, 1, 2)
    fetched = await service.fetch("orders", 1, 0, 1 << 20, max_wait_ms=0)
    assert values(fetched.data) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert (fetched.high_watermark, fetched.log_start_offset) == (3, 0)
    assert values((await service.fetch("orders", 1, 2, 1 << 20, 0)).data) == [(2, b"c")]
    # partition 0 saw none of it, and the offsets lookups agree with the log
    assert (await service.fetch("orders", 0, 0, 1 << 20, 0)).data == b""
    assert await service.list_offset("orders", 1, "earliest") == (0, None)
    assert await service.list_offset("orders", 1, "latest") == (3, None)
    assert await service.list_offset("orders", 1, node.clock.now_ms()) == (0, node.clock.now_ms())


async def test_a_waiting_fetch_is_woken_by_the_produce(node: InProcessBroker) -> None:
    service = node.service
    waiting = asyncio.create_task(service.fetch("orders", 0, 0, 1 << 20, max_wait_ms=10_000))
    await asyncio.sleep(0)
    assert not waiting.done()  # caught up: it long-polls
    await service.produce("orders", 0, batch(node, b"x"), Acks.LEADER, 1.0, principal=ALICE)
    fetched = await asyncio.wait_for(waiting, 1.0)
    assert values(fetched.data) == [(0, b"x")]


async def test_acks(node: InProcessBroker) -> None:
    service = node.service
    partition = node.partition("orders", 0)
    none = await service.produce("orders", 0, batch(node, b"0"), Acks.NONE, 1.0, principal=ALICE)
    assert (none.first_offset, none.last_offset) == (None, None)  # not waited on...
    assert partition.log.log_end_offset == 1  # ...but appended before the answer
    leader = await service.produce(
        "orders", 0, batch(node, b"1"), Acks.LEADER, 1.0, principal=ALICE
    )
    assert (leader.first_offset, leader.last_offset) == (1, 1)
    every = await service.produce("orders", 0, batch(node, b"2"), Acks.ALL, 1.0, principal=ALICE)
    assert (every.first_offset, partition.high_watermark()) == (2, 3)  # the ISR is [1]
    # acks=all needs min.insync.replicas in the ISR; nothing is appended without them
    node.create_topic("strict", configs={"min.insync.replicas": "2"})
    strict = node.partition("strict", 0)
    error = await refused(
        service.produce("strict", 0, batch(node, b"s"), Acks.ALL, 1.0, principal=ALICE)
    )
    assert error.code is ErrorCode.NOT_ENOUGH_REPLICAS
    assert (error.details["isr"], error.details["appended"]) == ([BROKER_ID], False)
    assert strict.log.log_end_offset == 0
    await service.produce("strict", 0, batch(node, b"s"), Acks.LEADER, 1.0, principal=ALICE)
    assert strict.log.log_end_offset == 1


async def test_a_producer_id_is_only_its_principals(node: InProcessBroker) -> None:
    service = node.service
    partition = node.partition("orders", 0)
    alices = service.new_producer_id(ALICE)
    idempotent = {"producer_id": alices, "producer_epoch": 0}
    produced = await service.produce(
        "orders",
        0,
        batch(node, b"a", base_sequence=0, **idempotent),
        Acks.ALL,
        1.0,
        principal=ALICE,
    )
    assert produced.first_offset == 0
    # Bob names Alice's id, or one never minted: both UNKNOWN_PRODUCER_ID, nothing appended
    for principal, producer_id in ((BOB, alices), (ALICE, alices ^ 1)):
        forged = batch(node, b"f", producer_id=producer_id, producer_epoch=0, base_sequence=1)
        error = await refused(
            service.produce("orders", 0, forged, Acks.ALL, 1.0, principal=principal)
        )
        assert error.code is ErrorCode.UNKNOWN_PRODUCER_ID
        assert error.message == "unknown producer id"  # nothing more (producer_ids.py rule 2)
    assert partition.log.log_end_offset == 1
    # Alice's retry of her batch is a duplicate: answered with its first offsets, not appended
    retry = await service.produce(
        "orders",
        0,
        batch(node, b"a", base_sequence=0, **idempotent),
        Acks.ALL,
        1.0,
        principal=ALICE,
    )
    assert (retry.first_offset, partition.log.log_end_offset) == (0, 1)


async def test_clients_never_write_internal_topics(node: InProcessBroker) -> None:
    service = node.service
    offsets = node.partition(OFFSETS_TOPIC, 0)  # led here: the coordinator writes it
    error = await refused(
        service.produce(OFFSETS_TOPIC, 0, batch(node, b"x"), Acks.ALL, 1.0, principal=ALICE)
    )
    assert error.code is ErrorCode.INVALID_REQUEST
    assert OFFSETS_TOPIC in error.message
    assert offsets.log.log_end_offset == 0


async def test_a_partition_led_elsewhere_is_not_leader_naming_the_leader(
    node: InProcessBroker,
) -> None:
    node.register_broker(2)
    node.create_topic("remote", leader=2)
    with pytest.raises(KraftliteError) as info:
        node.service.leader("remote", 0)
    assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert info.value.details["leader_id"] == 2
    assert info.value.details["leader_url"] == "http://broker-2.invalid:9100"
    for topic, index in (("nope", 0), ("orders", 2), ("orders", -1)):
        with pytest.raises(KraftliteError) as info:
            node.service.leader(topic, index)
        assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_lapsed_leadership_lease_serves_nothing_until_renewed(
    node: InProcessBroker,
) -> None:
    service = node.service
    await service.produce("orders", 0, batch(node, b"a"), Acks.ALL, 1.0, principal=ALICE)
    node.clock.advance(9_000)  # a session without an answered heartbeat
    late = service.produce("orders", 0, batch(node, b"b"), Acks.ALL, 1.0, principal=ALICE)
    error = await refused(late)
    assert error.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KraftliteError):
        service.leader("orders", 0)
    node.heartbeat()
    fetched = await service.fetch("orders", 0, 0, 1 << 20, 0)
    assert values(fetched.data) == [(0, b"a")]


async def test_nothing_reaches_for_another_node(node: InProcessBroker) -> None:
    """The harness's promise: what would call the controllers fails at once, no socket."""
    with pytest.raises(NetworkCallError, match=r"controller\.invalid"):
        await node.service.admin("GET", "/v1/topics")


async def test_leader_epochs_are_checked_here_for_both_edges(node: InProcessBroker) -> None:
    """KIP-320 in the service (rule 2): an edge gets a Leadership value, and a client's
    stale or future leader epoch is refused by the service, not by each edge."""
    service = node.service
    topic_id = topic_id_for("orders")
    node.apply(r.PartitionChangeRecord(topic_id=topic_id, partition=0, leader=-1))
    node.apply(r.PartitionChangeRecord(topic_id=topic_id, partition=0, leader=BROKER_ID))
    leadership = service.leader("orders", 0)
    assert leadership.topic == "orders" and leadership.partition == 0
    epoch = leadership.leader_epoch
    assert epoch == 2  # offline, then led again: two leader changes
    service.check_leader_epoch("orders", 0, epoch)
    service.check_leader_epoch("orders", 0, -1)  # a client that names none
    for asked, code in (
        (epoch - 1, ErrorCode.FENCED_LEADER_EPOCH),
        (epoch + 1, ErrorCode.UNKNOWN_LEADER_EPOCH),
    ):
        with pytest.raises(KraftliteError) as info:
            service.check_leader_epoch("orders", 0, asked)
        assert info.value.code is code
        with pytest.raises(KraftliteError):
            await service.list_offset("orders", 0, "latest", current_leader_epoch=asked)
        with pytest.raises(KraftliteError):
            service.end_offset_for("orders", 0, epoch, current_leader_epoch=asked)
    await service.produce("orders", 0, batch(node, b"a", b"b"), Acks.ALL, 1.0, principal=ALICE)
    # the current epoch ends at the log's end, capped at the high watermark
    assert service.end_offset_for("orders", 0, epoch, current_leader_epoch=epoch) == (epoch, 2)


async def test_a_compacted_topic_reads_as_a_table_through_the_key_index(
    node: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Service rule 8: a key's latest committed value, from the index caught up with the
    high watermark the read began at; None for a deleted or unknown key; a topic that is
    not compacted has no table; an index far behind answers OFFSET_NOT_AVAILABLE."""
    from kraftlite import service as service_module  # noqa: PLC0415

    node.create_topic("table", configs={"cleanup.policy": "compact"})
    service = node.service
    now = node.clock.now_ms()

    async def put(key: bytes, value: bytes | None) -> None:
        record = fmt.encode_batch([value], keys=[key], timestamps=[now])
        await service.produce("table", 0, record, Acks.ALL, 1.0, principal=ALICE)

    await put(b"a", b"1")
    await put(b"b", b"1")
    await put(b"a", b"2")
    await put(b"b", None)  # deleted
    found = await service.latest_of_key("table", b"a", 0)
    assert found is not None and (found[0], found[1].offset, found[1].value) == (0, 2, b"2")
    assert await service.latest_of_key("table", b"b", 0) is None
    assert await service.latest_of_key("table", b"nobody", 0) is None
    assert node.partition("table").log.indexed_offset == 4  # caught up with the HW first
    error = await refused(service.latest_of_key("orders", b"a", 0))
    assert error.code is ErrorCode.INVALID_REQUEST
    # an index far behind is the background's to catch up: the read does not wait for it
    await put(b"a", b"3")
    monkeypatch.setattr(service_module, "KEY_INDEX_MAX_BEHIND", 0)
    error = await refused(service.latest_of_key("table", b"a", 0))
    assert error.code is ErrorCode.OFFSET_NOT_AVAILABLE and error.retriable


async def test_a_compacted_partitions_table_pages_by_cursor_within_its_bounds(
    node: InProcessBroker,
) -> None:
    """Service rule 8's pages: live keys in index order after a cursor, each with its latest
    record; at most `limit` rows and about `max_bytes` (one row at least); a cursor while
    the index has more; deleted keys and keys whose records went are not rows."""
    from kraftlite.storage.keys import index_key  # noqa: PLC0415

    node.create_topic("table", configs={"cleanup.policy": "compact"})
    service = node.service
    now = node.clock.now_ms()
    for key, value in [(b"c", b"1"), (b"a", b"1"), (b"d", b"1"), (b"b", b"1"), (b"a", b"22")]:
        record = fmt.encode_batch([value], keys=[key], timestamps=[now])
        await service.produce("table", 0, record, Acks.ALL, 1.0, principal=ALICE)
    tombstone = fmt.encode_batch([None], keys=[b"c"], timestamps=[now])
    await service.produce("table", 0, tombstone, Acks.ALL, 1.0, principal=ALICE)

    def rows(page: Any) -> list[tuple[bytes | None, bytes | None, int]]:
        return [(r.key, r.value, r.offset) for _, r in page.rows]

    whole = await service.table_page("table", 0, None, 100, 1 << 20)
    assert rows(whole) == [(b"a", b"22", 4), (b"b", b"1", 3), (b"d", b"1", 2)]
    assert whole.next_after is None  # the index has no more
    first = await service.table_page("table", 0, None, 2, 1 << 20)
    assert rows(first) == rows(whole)[:2] and first.next_after == index_key(b"b")
    rest = await service.table_page("table", 0, first.next_after, 2, 1 << 20)
    assert rows(rest) == rows(whole)[2:] and rest.next_after is None
    # about max_bytes: one row at least, and a cursor after the last one shown
    small = await service.table_page("table", 0, None, 100, 1)
    assert rows(small) == rows(whole)[:1] and small.next_after == index_key(b"a")
    error = await refused(service.table_page("orders", 0, None, 10, 1 << 20))
    assert error.code is ErrorCode.INVALID_REQUEST


async def test_a_table_page_reads_what_its_bounds_allow_and_steps_over_cleaned_records(
    node: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Service rule 8: a page reads a batch only when its entry is reached and stops at
    max_bytes (one row at least); an entry whose record the cleaner took after the index
    caught up is read again after another catch-up (the key's newer record), and one gone
    twice at the same offset is deleted (a tombstone the cleaner took before the index saw
    it)."""
    from kraftlite import service as service_module  # noqa: PLC0415
    from kraftlite.broker import cleaner  # noqa: PLC0415
    from kraftlite.storage.compaction import CleanPolicy  # noqa: PLC0415

    node.create_topic("big", configs={"cleanup.policy": "compact"})
    service = node.service
    now = node.clock.now_ms()

    async def put(topic: str, key: bytes, value: bytes | None) -> None:
        record = fmt.encode_batch([value], keys=[key], timestamps=[now])
        await service.produce(topic, 0, record, Acks.ALL, 1.0, principal=ALICE)

    for k in range(20):
        await put("big", b"k%02d" % k, b"v" * 10_000)
    reads: list[int] = []
    real_batch_at = service_module._batch_at

    def counted(partition: Any, offset: int, high_watermark: int) -> Any:
        reads.append(offset)
        return real_batch_at(partition, offset, high_watermark)

    monkeypatch.setattr(service_module, "_batch_at", counted)
    page = await service.table_page("big", 0, None, 20, 1)
    assert [r.key for _, r in page.rows] == [b"k00"] and len(reads) == 1
    reads.clear()
    page = await service.table_page("big", 0, None, 20, 25_000)
    assert [r.key for _, r in page.rows] == [b"k00", b"k01", b"k02"] and len(reads) == 3

    node.create_topic("moving", configs={"cleanup.policy": "compact"})
    await put("moving", b"a", b"1")
    await put("moving", b"b", b"1")
    await put("moving", b"gone", b"1")
    await service.table_page("moving", 0, None, 10, 1 << 20)  # the index caught up: 3 keys
    await put("moving", b"a", b"2")  # a newer "a", and "gone" deleted
    await put("moving", b"gone", None)
    await put("moving", b"tail", b"1")  # the newest batch, which the cleaner leaves alone
    log = node.partition("moving").log
    cleaner.clean(log, now + 1, CleanPolicy(delete_retention_ms=0), force=True)
    assert log.indexed_offset == 3  # the index still names a@0 and gone@2, both cleaned,
    # and the tombstone went too: the index will never see it
    assert next(fmt.decode_stream(log.read(2, 1))).header.base_offset == 3
    assert next(fmt.decode_stream(log.read(4, 1))).header.base_offset == 5
    reads.clear()
    page = await service.table_page("moving", 0, None, 10, 1 << 20)
    assert [(r.key, r.value, r.offset) for _, r in page.rows] == [
        (b"a", b"2", 3),
        (b"b", b"1", 1),
        (b"tail", b"1", 5),
    ]
