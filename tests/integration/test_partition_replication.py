"""Leader and follower replicas of one partition on real LMDB logs, driven by hand: the
interleavings a live cluster produces only now and then (regression tests for the review of
the broker data plane).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from kraftlite.broker.partition import Acks, IsrProposal, Partition, Role
from kraftlite.broker.replica_manager import ReplicaManager, ReplicationSettings
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import PartitionRegistration
from kraftlite.protocol import batch as fmt
from kraftlite.protocol.internal import ReplicaFetchRequest
from kraftlite.storage.log import LogStorage, StorageConfig

pytestmark = pytest.mark.integration


class ManualClock:
    def __init__(self) -> None:
        self.ms = 1_000

    def now_ms(self) -> int:
        return self.ms

    def monotonic_ms(self) -> int:
        return self.ms


@pytest.fixture
def storages(tmp_path: Path) -> Iterator[dict[int, LogStorage]]:
    opened = {b: LogStorage(StorageConfig(path=tmp_path / f"b{b}")) for b in (1, 2, 3)}
    yield opened
    for storage in opened.values():
        storage.close()


def replica(storages: dict[int, LogStorage], broker: int, clock: ManualClock) -> Partition:
    return Partition("T", "t", 0, storages[broker].open_partition("T-0"), clock, broker)  # type: ignore[arg-type]


def registration(
    leader: int, epoch: int, isr: tuple[int, ...], partition_epoch: int = 0
) -> PartitionRegistration:
    return PartitionRegistration((1, 3, 2), isr, leader, epoch, partition_epoch)


def batch(*values: str) -> bytes:
    return fmt.encode_records([fmt.Record(value=v.encode()) for v in values], now_ms=0)


def values(partition: Partition) -> list[bytes | None]:
    data = partition.log.read(partition.log.log_start_offset, 1 << 30)
    return [r.value for b in fmt.decode_stream(data) for r in b.records()]


def sync(follower: Partition, leader: Partition, follower_id: int) -> IsrProposal | None:
    """One follower fetch round trip, handled as FollowerFetcher does; the ISR expansion
    the fetch qualified the follower for, if any."""
    try:
        result = leader.replica_fetch(
            follower_id,
            follower.leader_epoch,
            follower.log.log_end_offset,
            follower.log.latest_epoch,
            1 << 20,
            follower.log.log_start_offset,
        )
    except KraftliteError as exc:
        assert exc.code is ErrorCode.OFFSET_OUT_OF_RANGE, exc
        follower.reset_to_leader_start(exc.details["log_start_offset"], follower.leader_epoch)
        return None
    follower.append_from_leader(result, follower.leader_epoch)
    # then the leader's log start (FollowerFetcher does it on a worker thread)
    follower._follow_log_start(result.log_start_offset)
    return result.isr_proposal


async def test_an_isr_expansion_with_an_unknown_outcome_keeps_counting_the_new_member(
    storages: dict[int, LogStorage],
) -> None:
    """Review finding 1: the controller may have committed ISR {1,3,2} although its answer
    timed out; until the outcome is known, 3 must hold the HW back, or 3 (first in replica
    order) could be elected without records the leader acknowledged.
    """
    clock = ManualClock()
    leader, two, three = (replica(storages, b, clock) for b in (1, 2, 3))
    leader.apply_registration(registration(1, 0, (1, 2)))
    two.apply_registration(registration(1, 0, (1, 2)))
    three.apply_registration(registration(1, 0, (1, 2)))
    await leader.produce(batch("a", "b"), Acks.LEADER, 1)
    sync(two, leader, 2)
    sync(two, leader, 2)  # the HW is 2
    assert sync(three, leader, 3) is None  # 3 asks for 0, below the HW
    proposal = sync(three, leader, 3)  # 3 asks for the leader's end: it may join
    assert proposal == IsrProposal(0, 0, (1, 3, 2))
    # the AlterPartition answer never comes; the leader takes more writes
    await leader.produce(batch("c"), Acks.LEADER, 1)
    sync(two, leader, 2)
    sync(two, leader, 2)
    assert leader.log.high_watermark == 2  # 3 has not fetched "c": the HW waits for it
    assert leader.is_pending(proposal)
    # a stale answer for another proposal changes nothing; the real one commits it
    leader.isr_change_refused(IsrProposal(0, 0, (1, 2)))
    assert leader.is_pending(proposal)
    leader.isr_change_committed(proposal, registration(1, 0, (1, 3, 2), partition_epoch=1))
    assert leader.state is not None and leader.state.isr == (1, 3, 2)
    assert leader.state.pending_isr is None


async def test_the_replica_manager_resends_a_proposal_until_its_outcome_is_known(
    storages: dict[int, LogStorage],
) -> None:
    clock = ManualClock()
    leader = replica(storages, 1, clock)
    leader.apply_registration(registration(1, 0, (1, 2, 3)))
    answers: list[Any] = [
        KraftliteError(ErrorCode.REQUEST_TIMED_OUT, "slow quorum"),
        KraftliteError(ErrorCode.NOT_CONTROLLER, "election"),
        {"v": 1, "partitions": []},  # an answer that leaves it out: still unknown
        {
            "v": 1,
            "partitions": [
                {
                    "topic_id": "T",
                    "partition": 0,
                    "replicas": [1, 3, 2],
                    "isr": [1],
                    "leader": 1,
                    "leader_epoch": 0,
                    "partition_epoch": 1,
                }
            ],
        },
    ]
    sent: list[dict[str, Any]] = []

    class Controllers:
        async def call(self, method: str, path: str, body: Any, **_: Any) -> tuple[int, Any]:
            sent.append(orjson.loads(body))  # an encoded message (protocol/internal.py)
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return 200, orjson.dumps(answer)  # asked raw: the bytes, decoded by the caller

    manager = ReplicaManager(
        ReplicationSettings(broker_id=1),
        storages[1],
        controllers=Controllers(),  # type: ignore[arg-type]
        session=None,  # type: ignore[arg-type]
        clock=clock,
        broker_epoch=lambda: 7,
    )
    clock.ms += 60_000  # 2 and 3 never fetched: shrink to the leader alone
    proposal = leader.maybe_change_isr(30_000)
    assert proposal is not None and proposal.isr == (1,)
    sender = asyncio.create_task(manager._send_isr_changes())
    manager._send_alter_partition(leader, proposal)
    try:
        async with asyncio.timeout(10):
            while leader.is_pending(proposal):  # noqa: ASYNC110 - the partition has no event for it
                await asyncio.sleep(0.01)
    finally:
        sender.cancel()
    assert len(sent) == 4 and all(body == sent[0] for body in sent)  # the same proposal
    (change,) = sent[0]["partitions"]
    assert change["partition_epoch"] == 0 and change["new_isr"] == [1]
    assert sent[0]["broker_id"] == 1 and sent[0]["broker_epoch"] == 7
    assert leader.state is not None and leader.state.isr == (1,)


async def test_a_follower_rejoins_an_isr_of_the_leader_alone_under_steady_writes(
    storages: dict[int, LogStorage],
) -> None:
    """Found by the chaos suite: with the ISR the leader alone (HW = its LEO) and writes
    landing between every fetch and the periodic ISR check, the check never saw the
    follower at the HW and it stayed out of the ISR. The fetch that reaches the HW must
    propose the expansion itself."""
    clock = ManualClock()
    leader, two = replica(storages, 1, clock), replica(storages, 2, clock)
    leader.apply_registration(registration(1, 0, (1,)))
    two.apply_registration(registration(1, 0, (1,)))
    await leader.produce(batch("v"), Acks.ALL, 1)  # ISR of 1: acknowledged at once
    sync(two, leader, 2)  # fetches what there is
    proposal = sync(two, leader, 2)  # asks for the leader's end: it reached the HW
    await leader.produce(batch("w"), Acks.LEADER, 1)  # the next write, before any check
    assert leader.maybe_change_isr(30_000) is None  # a later check would not qualify it
    assert proposal == IsrProposal(0, 0, (1, 2))
    assert leader.state is not None and leader.state.pending_isr == (1, 2)
    assert leader.log.high_watermark == 1  # the pending member holds the HW: w waits for 2


async def test_a_follower_drops_a_divergent_suffix_below_the_leaders_log_start(
    storages: dict[int, LogStorage],
) -> None:
    """Review finding 3: the old leader holds uncommitted epoch-0 records; the new leader's
    retention moved its log start past them (its epoch cache forgot epoch 0), so the epoch
    check alone would leave them in place.
    """
    clock = ManualClock()
    old, new = replica(storages, 1, clock), replica(storages, 3, clock)
    old.apply_registration(registration(1, 0, (1, 3)))
    new.apply_registration(registration(1, 0, (1, 3)))
    await old.produce(batch("c0", "c1"), Acks.LEADER, 1)
    sync(new, old, 3)
    for i in range(0, 6, 2):  # never fetched by 3
        await old.produce(batch(f"uncommitted-{i}", f"uncommitted-{i + 1}"), Acks.LEADER, 1)
    new.apply_registration(registration(3, 1, (3,), 1))  # 1 died; 3 leads at epoch 1
    for i in range(3):
        await new.produce(batch(f"new-{i}", f"new-{i}b"), Acks.LEADER, 1)
    assert new.log.apply_retention(0, -1, 4) > 0  # keep ~the last batch: the start moves
    assert new.log.log_start_offset >= 4 and new.log.epochs() == [(1, new.log.log_start_offset)]
    old.apply_registration(registration(3, 1, (3,), 1))  # 1 is back as a follower
    for _ in range(5):
        sync(old, new, 1)
    assert b"uncommitted-0" not in values(old)
    assert values(old) == values(new)
    assert old.log.log_start_offset == new.log.log_start_offset


async def test_consumers_at_an_offset_between_hw_and_leo_get_nothing_not_an_error(
    storages: dict[int, LogStorage],
) -> None:
    """Review finding 4: right after a failover the new leader's HW can sit below offsets the
    old leader handed out; that is "no records yet", not OFFSET_OUT_OF_RANGE.
    """
    clock = ManualClock()
    leader = replica(storages, 1, clock)
    leader.apply_registration(registration(1, 0, (1, 2)))
    await leader.produce(batch("a", "b", "c"), Acks.LEADER, 1)
    assert leader.log.high_watermark == 0  # 2 has not fetched
    assert leader.read(2, 1 << 20) == b""
    assert leader.read(3, 1 << 20) == b""
    with pytest.raises(KraftliteError) as caught:
        leader.read(4, 1 << 20)
    assert caught.value.code is ErrorCode.OFFSET_OUT_OF_RANGE


async def test_a_leader_without_an_epoch_cache_does_not_livelock_its_followers(
    storages: dict[int, LogStorage],
) -> None:
    """Review finding 5: a leader whose log was emptied (no epochs) answered a divergence at
    the follower's own end offset forever; now it serves the fetch and the follower adopts
    its log start.
    """
    clock = ManualClock()
    leader, follower = replica(storages, 1, clock), replica(storages, 2, clock)
    follower.apply_registration(registration(3, 0, (3, 2)))
    follower.log.append(batch("x", "y"), 0)  # history from an old leader
    leader.log.truncate_fully_and_start_at(5)
    leader.apply_registration(registration(1, 1, (1, 2), 1))
    follower.apply_registration(registration(1, 1, (1, 2), 1))
    sync(follower, leader, 2)
    result = leader.replica_fetch(2, 1, follower.log.log_end_offset, follower.log.latest_epoch, 1)
    assert result.diverging_epoch is None
    assert follower.log.log_start_offset == follower.log.log_end_offset == 5
    await leader.produce(batch("z"), Acks.LEADER, 1)
    sync(follower, leader, 2)
    assert values(follower) == [b"z"]


async def test_a_replica_fetch_from_a_stale_broker_epoch_is_refused(
    storages: dict[int, LogStorage],
) -> None:
    """Review finding 12: only the registered incarnation's fetches count as its progress."""
    from kraftlite.metadata.image import BrokerRegistration, MetadataImage  # noqa: PLC0415

    clock = ManualClock()
    manager = ReplicaManager(
        ReplicationSettings(broker_id=1),
        storages[1],
        controllers=None,  # type: ignore[arg-type]
        session=None,  # type: ignore[arg-type]
        clock=clock,
        broker_epoch=lambda: 1,
    )
    manager.image = MetadataImage(
        9, {2: BrokerRegistration(2, "inc", 8, "http://b2", None, False)}, {}, {}, {}
    )
    request = ReplicaFetchRequest(replica_id=2, broker_epoch=5, max_wait_ms=0, max_bytes=1024)
    with pytest.raises(KraftliteError) as caught:
        await manager.serve_replica_fetch(request)
    assert caught.value.code is ErrorCode.STALE_BROKER_EPOCH
    answer, _ = await manager.serve_replica_fetch(msgspec.structs.replace(request, broker_epoch=8))
    assert answer.partitions == ()


async def test_a_waiting_acks_all_produce_fails_when_leadership_moves(
    storages: dict[int, LogStorage],
) -> None:
    clock = ManualClock()
    leader = replica(storages, 1, clock)
    leader.apply_registration(registration(1, 0, (1, 2)))
    waiting = asyncio.create_task(leader.produce(batch("a"), Acks.ALL, 5))
    await asyncio.sleep(0.01)
    leader.apply_registration(registration(2, 1, (2,), 1))
    with pytest.raises(KraftliteError) as caught:
        await waiting
    assert caught.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.role is Role.FOLLOWER


async def test_a_refused_expansion_releases_the_high_watermark_without_another_fetch(
    storages: dict[int, LogStorage],
) -> None:
    """Found by bench_scale.py: a broker shutting down fetched once more after being fenced,
    qualified for the ISR, and the pending expansion held the HW on its stale log end. With
    fetch sessions no idle follower fetch comes to move the HW, so the refusal must."""
    clock = ManualClock()
    leader = replica(storages, 1, clock)
    two, three = replica(storages, 2, clock), replica(storages, 3, clock)
    for r in (leader, two, three):
        r.apply_registration(registration(1, 0, (1, 2)))
    proposal = sync(three, leader, 3)  # 3 reaches the HW: an expansion is proposed
    assert proposal is not None and proposal.isr == (1, 3, 2)
    waiting = asyncio.create_task(leader.produce(batch("a"), Acks.ALL, 5))
    await asyncio.sleep(0)
    sync(two, leader, 2)
    sync(two, leader, 2)  # 2 has "a"; 3 (pending) does not: the HW waits for 3
    assert not waiting.done()
    leader.isr_change_refused(proposal)  # the controller: 3 is fenced
    await asyncio.wait_for(waiting, 1)  # released at once, not at the produce timeout
    assert leader.log.high_watermark == 1


async def test_a_fenced_replica_is_not_proposed_for_the_isr(
    storages: dict[int, LogStorage],
) -> None:
    clock = ManualClock()
    leader, three = replica(storages, 1, clock), replica(storages, 3, clock)
    leader.apply_registration(registration(1, 0, (1, 2)))
    three.apply_registration(registration(1, 0, (1, 2)))
    leader.is_eligible = lambda broker: broker != 3  # 3 is fenced in our metadata
    assert sync(three, leader, 3) is None  # caught up, yet not proposed at the fetch
    assert leader.maybe_change_isr(30_000) is None  # nor by the periodic check
    leader.is_eligible = lambda broker: True  # unfenced
    assert leader.maybe_change_isr(30_000) == IsrProposal(0, 0, (1, 3, 2))
