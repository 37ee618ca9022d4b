"""The group coordinator (kraftlite/groups/coordinator.py) in-process: members join, commit
offsets into `__consumer_offsets` partitions this broker leads (acks=all, ISR [1]) and fetch
them back, directly and through the Kafka edge (KIP-848's ConsumerGroupHeartbeat and the
classic JoinGroup/SyncGroup), over the memory log (tests/harness/inprocess.py)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest

from kraftlite.broker.partition import Acks
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.groups.coordinator import (
    INLINE_LOAD_BYTES,
    OFFSETS_TOPIC,
    GroupSettings,
    parse_offset_record,
)
from kraftlite.groups.offsets import CommittedOffset
from kraftlite.metadata.records import NO_LEADER, PartitionChangeRecord
from kraftlite.protocol import batch as fmt
from kraftlite.protocol.kafka.messages import ApiKey
from tests.harness.inprocess import BROKER_ID, InProcessBroker, KafkaConnection, topic_id_for


async def write(node: InProcessBroker, topic: str, partition: int, count: int) -> None:
    """`count` records in the partition."""
    now = node.clock.now_ms()
    records = fmt.encode_batch([b"r"] * count, timestamps=[now] * count)
    await node.service.produce(topic, partition, records, Acks.ALL, 1.0, principal="User:writer")


def commit_records(node: InProcessBroker, group: str) -> list[tuple[Any, ...]]:
    """The commit records of the group's offsets partition, parsed, in log order."""
    index = node.coordinator.offsets_partition(group)
    log = node.partition(OFFSETS_TOPIC, index).log
    return [
        parsed
        for b in fmt.decode_stream(log.read(log.log_start_offset, 1 << 20))
        for record in b.records()
        if (parsed := parse_offset_record(record.key, record.value)) is not None
    ]


async def test_a_member_joins_commits_and_fetches_its_offsets_back(node: InProcessBroker) -> None:
    await write(node, "orders", 0, 5)
    coordinator = node.coordinator
    joined = await coordinator.join("g", "member-1", "client-1", ["orders"], None)
    assert joined["assignment"] == [{"topic": "orders", "partitions": [0, 1]}]
    epoch = joined["member_epoch"]
    await coordinator.commit("g", "member-1", epoch, [(("orders", 0), CommittedOffset(3, "m"))])
    assert coordinator.committed("g") == {("orders", 0): CommittedOffset(3, "m")}
    # the commit is a record in the group's partition of __consumer_offsets (rule 2)
    assert commit_records(node, "g") == [("g", ("orders", 0), CommittedOffset(3, "m"))]


async def test_refused_commits_write_nothing(node: InProcessBroker) -> None:
    await write(node, "orders", 0, 5)
    coordinator = node.coordinator
    epoch = (await coordinator.join("g", "member-1", "c", ["orders"], None))["member_epoch"]
    for member, member_epoch, offset, code in (
        ("member-1", epoch, 2**63, ErrorCode.OFFSET_OUT_OF_RANGE),  # past int64
        ("stranger", epoch, 1, ErrorCode.UNKNOWN_MEMBER_ID),
        ("member-1", epoch + 1, 1, ErrorCode.FENCED_MEMBER_EPOCH),  # from the future
        (None, None, 1, ErrorCode.UNKNOWN_MEMBER_ID),  # no member: only for an empty group
    ):
        wanted = [(("orders", 0), CommittedOffset(offset, ""))]
        with pytest.raises(KraftliteError) as info:
            await coordinator.commit("g", member, member_epoch, wanted)
        assert info.value.code is code, (member, member_epoch, offset)
    assert coordinator.committed("g") == {}
    assert commit_records(node, "g") == []


async def test_a_new_leader_epoch_replays_the_offsets_from_the_log(node: InProcessBroker) -> None:
    await write(node, "orders", 1, 4)
    coordinator = node.coordinator
    epoch = (await coordinator.join("g", "member-1", "c", ["orders"], None))["member_epoch"]
    await coordinator.commit("g", "member-1", epoch, [(("orders", 1), CommittedOffset(4, "x"))])
    assert [m["member_id"] for m in coordinator.describe("g")["members"]] == ["member-1"]
    # leadership of the group's offsets partition lost and won back: a new leader epoch
    topic_id, index = topic_id_for(OFFSETS_TOPIC), coordinator.offsets_partition("g")
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=NO_LEADER))
    with pytest.raises(KraftliteError) as info:
        coordinator.committed("g")
    assert info.value.code is ErrorCode.NOT_COORDINATOR
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=BROKER_ID))
    assert node.partition(OFFSETS_TOPIC, index).leader_epoch == 2
    # membership was soft state (members join again); the offsets come back from the log
    assert coordinator.describe("g")["members"] == []
    assert coordinator.committed("g") == {("orders", 1): CommittedOffset(4, "x")}


# -- through the Kafka edge ----------------------------------------------------------------------


async def offset_fetch(kafka: KafkaConnection, group: str, version: int = 9) -> dict[str, Any]:
    answer = await kafka.call(
        ApiKey.OFFSET_FETCH,
        version,
        {"groups": [{"group_id": group, "topics": None}], "require_stable": False},
    )
    (group_answer,) = answer["groups"]
    return dict(group_answer)


async def offset_commit(
    kafka: KafkaConnection,
    group: str,
    member: str,
    epoch: int,
    offset: int,
    version: int = 9,
    leader_epoch: int = -1,
) -> int:
    """OffsetCommit of orders-0; its error code."""
    answer = await kafka.call(
        ApiKey.OFFSET_COMMIT,
        version,
        {
            "group_id": group,
            "generation_id_or_member_epoch": epoch,
            "member_id": member,
            "group_instance_id": None,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": leader_epoch,
                            "committed_metadata": f"by {member}",
                        }
                    ],
                }
            ],
        },
    )
    (topic,) = answer["topics"]
    (partition,) = topic["partitions"]
    return int(partition["error_code"])


async def test_a_kip848_member_commits_and_fetches_over_kafka(node: InProcessBroker) -> None:
    await write(node, "orders", 0, 3)
    kafka = node.connect()
    found = await kafka.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
    (coordinator,) = found["coordinators"]
    assert (coordinator["error_code"], coordinator["node_id"], coordinator["port"]) == (
        0,
        BROKER_ID,
        9092,
    )
    joined = await kafka.call(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        {
            "group_id": "g",
            "member_id": "member-1",
            "member_epoch": 0,
            "rebalance_timeout_ms": 30_000,
            "subscribed_topic_names": ["orders"],
            "topic_partitions": [],
        },
    )
    assert joined["error_code"] == 0, joined
    epoch = joined["member_epoch"]
    assert epoch > 0
    assert [
        (t["topic_id"].hex, t["partitions"]) for t in joined["assignment"]["topic_partitions"]
    ] == [(topic_id_for("orders"), [0, 1])]
    assert await offset_commit(kafka, "g", "member-1", epoch, 2) == 0
    fetched = await offset_fetch(kafka, "g")
    assert fetched["error_code"] == 0
    assert [
        (t["name"], p["partition_index"], p["committed_offset"], p["metadata"])
        for t in fetched["topics"]
        for p in t["partitions"]
    ] == [("orders", 0, 2, "by member-1")]
    # an epoch the member was never given is fenced, and changes nothing
    assert await offset_commit(kafka, "g", "member-1", epoch + 1, 3) == int(
        ErrorCode.FENCED_MEMBER_EPOCH
    )
    assert node.coordinator.committed("g") == {("orders", 0): CommittedOffset(2, "by member-1")}
    # epoch -1 commits outside the membership, whatever member id it names (a KIP-848
    # client names its own before it joins): refused while the group has members ...
    assert await offset_commit(kafka, "g", "not-joined", -1, 4) == int(ErrorCode.UNKNOWN_MEMBER_ID)
    # ... taken for a group that has none, as Kafka's (librdkafka's 0099 with the consumer
    # protocol commits so without ever subscribing)
    assert await offset_commit(kafka, "empty", "not-joined", -1, 4) == 0
    assert node.coordinator.committed("empty") == {
        ("orders", 0): CommittedOffset(4, "by not-joined")
    }


async def test_a_classic_member_commits_and_fetches_over_kafka(node: InProcessBroker) -> None:
    await write(node, "orders", 0, 3)
    kafka = node.connect()
    joined = await kafka.call(
        ApiKey.JOIN_GROUP,
        5,
        {
            "group_id": "classic",
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"subscription"}],
        },
    )
    assert joined["error_code"] == 0, joined
    member, generation = joined["member_id"], joined["generation_id"]
    assert (joined["leader"], generation, joined["protocol_name"]) == (member, 1, "range")
    assert [(m["member_id"], m["metadata"]) for m in joined["members"]] == [
        (member, b"subscription")
    ]
    synced = await kafka.call(
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": "classic",
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": None,
            "assignments": [{"member_id": member, "assignment": b"orders-0"}],
        },
    )
    assert (synced["error_code"], synced["assignment"]) == (0, b"orders-0")
    assert await offset_commit(kafka, "classic", member, generation, 1, version=8) == 0
    stale = await offset_commit(kafka, "classic", member, generation - 1, 2, version=8)
    assert stale == int(ErrorCode.ILLEGAL_GENERATION)
    fetched = await offset_fetch(kafka, "classic", version=8)
    assert [
        (p["partition_index"], p["committed_offset"])
        for t in fetched["topics"]
        for p in t["partitions"]
    ] == [(0, 1)]
    assert commit_records(node, "classic") == [
        ("classic", ("orders", 0), CommittedOffset(1, f"by {member}"))
    ]


async def test_a_commit_above_the_high_watermark_is_taken_as_kafka_takes_it(
    node: InProcessBroker,
) -> None:
    """Issue 25: librdkafka's tests 0099 and 0140 commit past the high watermark; Kafka
    takes any offset (a consumer resuming past the log's end resets at its fetch)."""
    await write(node, "orders", 0, 2)
    coordinator = node.coordinator
    epoch = (await coordinator.join("g", "member-1", "c", ["orders"], None))["member_epoch"]
    await coordinator.commit("g", "member-1", epoch, [(("orders", 0), CommittedOffset(500, ""))])
    assert coordinator.committed("g") == {("orders", 0): CommittedOffset(500, "")}


async def list_groups(kafka: KafkaConnection, states: list[str], types: list[str]) -> list[Any]:
    answer = await kafka.call(
        ApiKey.LIST_GROUPS, 5, {"states_filter": states, "types_filter": types}
    )
    assert answer["error_code"] == 0
    return sorted((g["group_id"], g["group_state"], g["group_type"]) for g in answer["groups"])


async def test_committed_offsets_keep_their_leader_epoch_and_their_groups_kind(
    node: InProcessBroker,
) -> None:
    """OffsetCommit v6+'s leader epoch is answered by OffsetFetch; a group with offsets and
    no members lists as Kafka lists it: "simple" (committed outside any membership over
    Kafka's protocol) is an Empty classic group, "native" (kraftlite's own commits) an
    Empty consumer group; ListGroups v4/v5 filter by state and type in any case and
    spacing. Both survive a coordinator move: they are in the commit records."""
    await write(node, "orders", 0, 5)
    kafka = node.connect()
    assert await offset_commit(kafka, "simple", "", -1, 4, leader_epoch=3) == 0
    await node.coordinator.commit("native", None, None, [(("orders", 0), CommittedOffset(2, ""))])

    async def check() -> None:
        fetched = await offset_fetch(kafka, "simple")
        assert [
            (p["committed_offset"], p["committed_leader_epoch"])
            for t in fetched["topics"]
            for p in t["partitions"]
        ] == [(4, 3)]
        assert await list_groups(kafka, [], []) == [
            ("native", "Empty", "consumer"),
            ("simple", "Empty", "classic"),
        ]
        assert await list_groups(kafka, [" EMPTY"], ["Classic "]) == [
            ("simple", "Empty", "classic")
        ]
        assert await list_groups(kafka, ["Stable"], []) == []
        assert await list_groups(kafka, [], ["consumer"]) == [("native", "Empty", "consumer")]

    await check()
    topic_id, index = topic_id_for(OFFSETS_TOPIC), node.coordinator.offsets_partition("simple")
    others = {node.coordinator.offsets_partition("native")} - {index}
    for moved in [index, *others]:  # leadership of their offsets partitions lost and won back
        node.apply(PartitionChangeRecord(topic_id=topic_id, partition=moved, leader=NO_LEADER))
        node.apply(PartitionChangeRecord(topic_id=topic_id, partition=moved, leader=BROKER_ID))
    await check()


# -- expiry and loading (coordinator.py rules 3 and 8, offsets.py rule 8) -----------------------

RETENTION_MS = 3_600_000


def advance(node: InProcessBroker, ms: int) -> None:
    """Time passes; the broker kept heartbeating meanwhile (its leadership lease holds)."""
    node.clock.advance(ms)
    node.heartbeat()


@pytest.fixture
async def expiring() -> Any:
    settings = GroupSettings(
        offsets_partitions=3, initial_rebalance_delay_ms=0, offsets_retention_ms=RETENTION_MS
    )
    async with InProcessBroker(groups=settings) as broker:
        broker.create_topic("orders", partitions=2)
        yield broker


def tombstoned(node: InProcessBroker, group: str) -> list[Any]:
    return [tp for g, tp, committed in commit_records(node, group) if committed is None]


async def test_offsets_of_a_group_without_members_expire_one_retention_after_their_commit(
    expiring: InProcessBroker,
) -> None:
    node, coordinator = expiring, expiring.coordinator
    await write(node, "orders", 0, 5)
    await coordinator.commit("simple", None, None, [(("orders", 0), CommittedOffset(2, ""))])
    advance(node, RETENTION_MS // 2)
    await coordinator.commit("simple", None, None, [(("orders", 1), CommittedOffset(0, ""))])
    advance(node, RETENTION_MS // 2 - 1)
    assert await coordinator.expire_offsets() == 0  # not yet a retention old
    advance(node, 1)
    assert await coordinator.expire_offsets() == 1  # the first commit only
    assert coordinator.committed("simple") == {("orders", 1): CommittedOffset(0, "")}
    assert tombstoned(node, "simple") == [("orders", 0)]
    advance(node, RETENTION_MS // 2)
    assert await coordinator.expire_offsets() == 1
    # its offsets gone, the group is gone (rule 4)
    with pytest.raises(KraftliteError) as info:
        coordinator.describe("simple")
    assert info.value.code is ErrorCode.GROUP_ID_NOT_FOUND
    assert tombstoned(node, "simple") == [("orders", 0), ("orders", 1)]


async def test_a_group_keeps_its_offsets_while_it_has_members_and_a_retention_after(
    expiring: InProcessBroker,
) -> None:
    node, coordinator = expiring, expiring.coordinator
    await write(node, "orders", 0, 5)
    epoch = (await coordinator.join("g", "m", "c", ["orders"], None))["member_epoch"]
    await coordinator.commit("g", "m", epoch, [(("orders", 0), CommittedOffset(3, ""))])
    for _ in range(2 * RETENTION_MS // 5_000):  # two retentions of heartbeats, no commit
        advance(node, 5_000)
        epoch = (await coordinator.heartbeat("g", "m", epoch))["member_epoch"]
    assert await coordinator.expire_offsets() == 0  # a member: nothing expires
    await coordinator.leave("g", "m")
    advance(node, RETENTION_MS - 1)
    assert await coordinator.expire_offsets() == 0  # empty for less than a retention
    advance(node, 1)
    assert await coordinator.expire_offsets() == 1
    assert coordinator.committed("g") == {}


async def test_a_member_that_went_silent_counts_from_its_session_end(
    expiring: InProcessBroker,
) -> None:
    """No leave: the member's session runs out (the sweep drops it), and the group has
    been empty only since this coordinator saw it so."""
    node, coordinator = expiring, expiring.coordinator
    await write(node, "orders", 0, 5)
    epoch = (await coordinator.join("g", "m", "c", ["orders"], None))["member_epoch"]
    await coordinator.commit("g", "m", epoch, [(("orders", 0), CommittedOffset(3, ""))])
    advance(node, RETENTION_MS)  # the session ended long ago; nobody looked
    assert await coordinator.expire_offsets() == 0  # it was a member until this sweep
    advance(node, RETENTION_MS)
    assert await coordinator.expire_offsets() == 1


async def test_a_coordinator_move_delays_expiry_and_never_hastens_it(
    expiring: InProcessBroker,
) -> None:
    node, coordinator = expiring, expiring.coordinator
    await write(node, "orders", 0, 5)
    await coordinator.commit("simple", None, None, [(("orders", 0), CommittedOffset(1, ""))])
    advance(node, RETENTION_MS - 10)
    topic_id, index = topic_id_for(OFFSETS_TOPIC), coordinator.offsets_partition("simple")
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=NO_LEADER))
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=BROKER_ID))
    advance(node, 10)  # a retention after the commit, but just after the load
    assert await coordinator.expire_offsets() == 0
    assert coordinator.committed("simple") == {("orders", 0): CommittedOffset(1, "")}
    advance(node, RETENTION_MS)
    assert await coordinator.expire_offsets() == 1
    # the commit time came back from the log: a new commit restarts its count
    await coordinator.commit("simple", None, None, [(("orders", 0), CommittedOffset(2, ""))])
    advance(node, RETENTION_MS - 1)
    assert await coordinator.expire_offsets() == 0


async def test_a_group_takes_no_member_while_its_expired_offsets_are_deleted(
    expiring: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 8: while the tombstones of a group's expiry wait for their acknowledgement, a
    join (kraftlite's, KIP-848's or a classic JoinGroup) is refused, retriable, so no member
    sees offsets the log has deleted; a classic group that came and went meanwhile counts
    as having had a member now, and keeps its offsets."""
    node, coordinator = expiring, expiring.coordinator
    await write(node, "orders", 0, 5)
    for group in ("a", "c"):
        await coordinator.commit(group, None, None, [(("orders", 0), CommittedOffset(1, ""))])
    advance(node, RETENTION_MS)
    appending, release = asyncio.Event(), asyncio.Event()
    real_append = coordinator._append

    async def held_append(partition: Any, records: Any, now: int, what: str, instead: str) -> None:
        if what == "the expiry":
            appending.set()
            await release.wait()
        await real_append(partition, records, now, what, instead)

    monkeypatch.setattr(coordinator, "_append", held_append)
    expiry = asyncio.create_task(coordinator.expire_offsets())
    await asyncio.wait_for(appending.wait(), 5)
    expiring_group = next(iter(coordinator._expiring))
    with pytest.raises(KraftliteError) as info:
        await coordinator.join(expiring_group, "m", "c", ["orders"], None)
    assert info.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and info.value.retriable
    with pytest.raises(KraftliteError) as info:
        await coordinator.classic_for_join(expiring_group, 10_000)
    assert info.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    other = "c" if expiring_group == "a" else "a"
    await coordinator.classic_for_join(other, 10_000)  # a classic group of the other, now
    release.set()
    assert await expiry == 1  # the first group's offsets; the other had a member just now
    assert coordinator.committed(expiring_group) == {}
    assert coordinator.committed(other) == {("orders", 0): CommittedOffset(1, "")}
    await coordinator.join(expiring_group, "m", "c", ["orders"], None)  # done: it joins


async def test_a_large_offsets_partition_loads_off_the_event_loop(node: InProcessBroker) -> None:
    """Rule 3: past INLINE_LOAD_BYTES the new leader answers COORDINATOR_LOAD_IN_PROGRESS
    (retriable) until its loader has replayed the partition, then the offsets are there."""
    coordinator = node.coordinator
    await write(node, "orders", 0, 1000)
    metadata = "m" * 1000
    index = coordinator.offsets_partition("g")
    while node.partition(OFFSETS_TOPIC, index).log.size_bytes <= INLINE_LOAD_BYTES:
        for offset in range(0, 1000, 50):
            wanted = [(("orders", 0), CommittedOffset(offset, metadata))]
            await coordinator.commit("g", None, None, wanted)
    topic_id = topic_id_for(OFFSETS_TOPIC)
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=NO_LEADER))
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=BROKER_ID))
    with pytest.raises(KraftliteError) as info:
        coordinator.committed("g")
    assert info.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and info.value.retriable
    assert "g" not in coordinator.coordinated_offsets()  # listed once loaded
    # the Kafka edge answers as Kafka's coordinator does while it loads
    kafka = node.connect()
    synced = await kafka.call(
        ApiKey.SYNC_GROUP,
        5,
        {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
         "protocol_type": "consumer", "protocol_name": "range", "assignments": []},
    )  # fmt: skip
    assert synced["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS  # not 14: old clients
    beat = await kafka.call(
        ApiKey.HEARTBEAT,
        4,
        {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None},
    )
    assert beat["error_code"] == 0  # answered blindly, as Kafka does
    listed = await kafka.call(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    assert listed["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert await offset_commit(kafka, "g", "m", -1, 1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for _ in range(500):
        await asyncio.sleep(0.01)
        with contextlib.suppress(KraftliteError):
            assert coordinator.committed("g") == {("orders", 0): CommittedOffset(950, metadata)}
            break
    else:
        pytest.fail("the load did not finish")


async def test_a_load_for_a_leadership_lost_meanwhile_is_dropped(
    node: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 3: a replay for a leadership lost while it runs stops, installs nothing and
    leaves no load behind; a later leadership loads afresh."""
    from kraftlite.groups import coordinator as module  # noqa: PLC0415

    coordinator = node.coordinator
    await write(node, "orders", 0, 10)
    index = coordinator.offsets_partition("g")
    while node.partition(OFFSETS_TOPIC, index).log.size_bytes <= INLINE_LOAD_BYTES:
        await coordinator.commit("g", None, None, [(("orders", 0), CommittedOffset(1, "m" * 4000))])
    started, go_on = threading.Event(), threading.Event()
    stopped: list[bool] = []
    real_replay = module.replay

    def slow_replay(log: Any, stopping: Any) -> Any:
        started.set()
        go_on.wait(5)
        stopped.append(stopping())
        return real_replay(log, stopping)

    monkeypatch.setattr(module, "replay", slow_replay)
    topic_id = topic_id_for(OFFSETS_TOPIC)
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=NO_LEADER))
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=BROKER_ID))
    coordinator.load_led()  # the load starts
    assert await asyncio.to_thread(started.wait, 5)
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=NO_LEADER))
    go_on.set()
    for _ in range(200):
        if not coordinator._loading:
            break
        await asyncio.sleep(0.01)
    assert stopped == [True] and not coordinator._loading  # it stopped, and left no load
    assert index not in coordinator._shards
    monkeypatch.setattr(module, "replay", real_replay)
    node.apply(PartitionChangeRecord(topic_id=topic_id, partition=index, leader=BROKER_ID))
    coordinator.load_led()
    for _ in range(500):
        await asyncio.sleep(0.01)
        with contextlib.suppress(KraftliteError):
            assert coordinator.committed("g") == {("orders", 0): CommittedOffset(1, "m" * 4000)}
            break
    else:
        pytest.fail("the new leadership's load did not finish")


async def test_an_expiry_whose_tombstones_may_be_written_forgets_the_offsets(
    expiring: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 8: tombstones appended but not acknowledged in time may still commit; the view
    forgets the offsets as the expiry meant (a member never reads what the log deletes)."""
    node, coordinator = expiring, expiring.coordinator
    await write(node, "orders", 0, 5)
    await coordinator.commit("g", None, None, [(("orders", 0), CommittedOffset(1, ""))])
    advance(node, RETENTION_MS)
    real_append = coordinator._append

    async def timed_out(partition: Any, records: Any, now: int, what: str, instead: str) -> None:
        await real_append(partition, records, now, what, instead)
        if what == "the expiry":
            raise KraftliteError(ErrorCode.REQUEST_TIMED_OUT, "no acknowledgement in time")

    monkeypatch.setattr(coordinator, "_append", timed_out)
    assert await coordinator.expire_offsets() == 0  # not acknowledged: not counted
    assert coordinator.committed("g") == {}
    assert tombstoned(node, "g") == [("orders", 0)]


async def test_transactional_commits_are_checked_as_a_kip848_members_are(
    node: InProcessBroker,
) -> None:
    """Rule 9 [T5]: a transactional commit naming a KIP-848 member must come from it, at an
    epoch it has had, for partitions it owns; one naming no member is refused while the
    group has members. Checked before anything is written."""
    coordinator = node.coordinator
    epoch = (await coordinator.join("g", "member-1", "c", ["orders"], None))["member_epoch"]
    _, shard = coordinator._shard("g")
    wanted = [("orders", 0)]
    coordinator._check_transactional_member(shard, "g", "member-1", epoch, None, wanted)
    for member, generation, code in (
        ("stranger", epoch, ErrorCode.UNKNOWN_MEMBER_ID),
        ("member-1", epoch + 1, ErrorCode.FENCED_MEMBER_EPOCH),
        (None, -1, ErrorCode.UNKNOWN_MEMBER_ID),  # no member, while the group has one
    ):
        with pytest.raises(KraftliteError) as info:
            coordinator._check_transactional_member(shard, "g", member, generation, None, wanted)
        assert info.value.code is code, (member, generation)


def test_a_commit_acknowledged_after_its_transactions_marker_is_settled_at_once() -> None:
    """Rule 9: the coordinator's abort (a timeout) can land between a transactional commit's
    append and its acknowledgement; the commit then never becomes pending (it would be
    held forever, or applied by the producer's next commit)."""
    from kraftlite.groups.coordinator import Shard  # noqa: PLC0415

    for commit in (False, True):
        shard = Shard(leader_epoch=0, frozen_until_ms=0)
        offsets = {("g", ("orders", 0)): CommittedOffset(7, "")}
        shard.end_transaction(5, commit, offset=12)  # its marker, at 12
        shard.add_pending(5, 10, offsets)  # its commit, appended at 10
        assert shard.pending_txns == {}
        assert shard.offsets == ({"g": {("orders", 0): CommittedOffset(7, "")}} if commit else {})
        shard.add_pending(5, 20, offsets)  # the next transaction's commit: pending
        assert shard.unstable("g", ("orders", 0))
