"""Replica fetch sessions on a leader (broker/fetch_sessions.py), on real LMDB logs: a
follower names every partition once, then only what moved; a round with nothing new
answers nothing, idle partitions are not looked at, and an idle ISR member is not shrunk
out when writes resume.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kraftlite.broker.partition import Acks
from kraftlite.broker.replica_manager import ReplicaManager, ReplicationSettings
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata import records as r
from kraftlite.protocol import batch as fmt
from kraftlite.protocol.internal import NEW_SESSION, FetchPosition, ReplicaFetchRequest
from kraftlite.storage.log import LogStorage, StorageConfig
from tests.harness.metadata import live_brokers, play
from tests.integration.test_partition_replication import ManualClock

pytestmark = pytest.mark.integration
PARTITIONS = 50


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[LogStorage]:
    opened = LogStorage(StorageConfig(path=tmp_path / "b1"))
    yield opened
    opened.close()


def leader_of_everything(
    storage: LogStorage,
    clock: ManualClock,
    partitions: int = PARTITIONS,
    lease_valid: Callable[[], bool] = lambda: True,
) -> ReplicaManager:
    """Broker 1 leading `partitions` partitions with replicas (1, 2, 3), every ISR full."""
    image = play(live_brokers(1, 2, 3), r.TopicRecord(name="t", topic_id="T"))
    image = play(
        image,
        *(
            r.PartitionRecord(
                topic_id="T", partition=i, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1
            )
            for i in range(partitions)
        ),
    )
    manager = ReplicaManager(
        ReplicationSettings(broker_id=1),
        storage,
        controllers=None,  # type: ignore[arg-type]
        session=None,  # type: ignore[arg-type]
        clock=clock,
        broker_epoch=lambda: 1,
        lease_valid=lease_valid,
    )
    manager.apply_image(image)
    return manager


def positions(offsets: dict[int, int], epoch: int = -1) -> tuple[FetchPosition, ...]:
    return tuple(FetchPosition("T", i, 0, offset, epoch) for i, offset in offsets.items())


def fetch(
    manager: ReplicaManager, follower: int, session: int, epoch: int, moved=(), wait_ms=0, **kw
) -> ReplicaFetchRequest:
    return ReplicaFetchRequest(
        follower,
        manager.image.brokers[follower].broker_epoch,
        wait_ms,
        1 << 20,
        session,
        epoch,
        moved,
        **kw,
    )


async def produce(manager: ReplicaManager, index: int, value: bytes) -> None:
    batch = fmt.encode_records([fmt.Record(value=value)], now_ms=1_000)
    await manager.partitions[("T", index)].produce(batch, Acks.LEADER, 1)


async def test_a_session_answers_only_news_and_an_idle_round_costs_nothing(
    storage: LogStorage,
) -> None:
    clock = ManualClock()
    manager = leader_of_everything(storage, clock)
    everything = positions(dict.fromkeys(range(PARTITIONS), 0))
    answer, _ = await manager.serve_replica_fetch(fetch(manager, 2, NEW_SESSION, 0, everything))
    session = answer.session_id
    assert session != NEW_SESSION
    assert len(answer.partitions) == PARTITIONS  # the first answer tells every HW
    assert all(p.high_watermark == 0 and p.error_code is None for p in answer.partitions)

    # nothing new: the round waits, then answers nothing, without looking at a partition
    looked = []
    original = manager._replica_fetch_one
    manager._replica_fetch_one = lambda *a: looked.append(a) or original(*a)  # type: ignore[method-assign]
    answer, _ = await manager.serve_replica_fetch(fetch(manager, 2, session, 1, wait_ms=50))
    assert answer.partitions == () and looked == []

    # a record on one partition wakes the waiting round with that partition alone
    waiting = asyncio.create_task(
        manager.serve_replica_fetch(fetch(manager, 2, session, 2, wait_ms=5_000))
    )
    await asyncio.sleep(0.01)
    await produce(manager, 7, b"x")
    answer, segments = await asyncio.wait_for(waiting, 2)
    assert [p.partition for p in answer.partitions] == [7]
    assert [x.value for b in fmt.decode_stream(bytes(segments[0])) for x in b.records()] == [b"x"]
    assert len(looked) == 1

    # the follower appended it: its next position moves the HW (with 3 also there) ...
    manager.fetch_sessions  # noqa: B018 - the leader's sessions, one per follower
    await manager.serve_replica_fetch(fetch(manager, 3, NEW_SESSION, 0, positions({7: 1})))
    answer, _ = await manager.serve_replica_fetch(fetch(manager, 2, session, 3, positions({7: 1})))
    # ... and the new HW is news for this session: answered now or in the next round
    if not answer.partitions:
        answer, _ = await manager.serve_replica_fetch(fetch(manager, 2, session, 4))
    assert [(p.partition, p.high_watermark) for p in answer.partitions] == [(7, 1)]


async def test_a_new_high_watermark_alone_wakes_no_follower_and_rides_the_next_answer(
    storage: LogStorage,
) -> None:
    """Rule 4: the HW an acknowledged write moves costs no round of its own. The fetch
    that moves it is not answered for it, nor is another follower's waiting fetch; the HW
    goes with the next answer sent for another reason (here records), or when the
    long-poll ends."""
    clock = ManualClock()
    manager = leader_of_everything(storage, clock, partitions=2)
    s2, _ = await manager.serve_replica_fetch(
        fetch(manager, 2, NEW_SESSION, 0, positions({0: 0, 1: 0}))
    )
    s3, _ = await manager.serve_replica_fetch(
        fetch(manager, 3, NEW_SESSION, 0, positions({0: 0, 1: 0}))
    )
    await produce(manager, 0, b"a")
    answer, _ = await manager.serve_replica_fetch(fetch(manager, 3, s3.session_id, 1, wait_ms=0))
    assert [(p.partition, p.high_watermark) for p in answer.partitions] == [(0, 0)]  # records
    # 3 holds the record and is waiting; 2's fetch saying it holds it too moves the HW to 1
    waiting = asyncio.create_task(
        manager.serve_replica_fetch(
            fetch(manager, 3, s3.session_id, 2, positions({0: 1}), wait_ms=5_000)
        )
    )
    await asyncio.sleep(0.05)
    assert not waiting.done()  # its own position alone: nothing to say yet
    moving = asyncio.create_task(
        manager.serve_replica_fetch(
            fetch(manager, 2, s2.session_id, 1, positions({0: 1}), wait_ms=5_000)
        )
    )
    await asyncio.sleep(0.05)
    assert manager.partitions[("T", 0)].log.high_watermark == 1
    assert not moving.done() and not waiting.done()  # the new HW woke neither
    # records on the other partition: both answers go, each telling the new HW as well
    await produce(manager, 1, b"b")
    for task in (waiting, moving):
        answer, _ = await asyncio.wait_for(task, 2)
        told = {p.partition: p.high_watermark for p in answer.partitions}
        assert told == {0: 1, 1: 0}, told
    # with nothing else to say, a HW is told when the long-poll ends
    await manager.serve_replica_fetch(fetch(manager, 2, s2.session_id, 2, positions({1: 1})))
    answer, _ = await manager.serve_replica_fetch(
        fetch(manager, 3, s3.session_id, 3, positions({1: 1}), wait_ms=50)
    )
    assert [(p.partition, p.high_watermark) for p in answer.partitions] == [(1, 1)]


async def test_a_high_watermark_is_told_only_for_a_position_the_leader_checked(
    storage: LogStorage,
) -> None:
    """Rule 4 (from the review of issue 15): a position refused in this round (here an old
    leader epoch) is answered with its error alone, not with a HW beside it; the HW goes
    once a fetch of that partition passes the leader's checks."""
    clock = ManualClock()
    m = leader_of_everything(storage, clock, partitions=2)
    s2, _ = await m.serve_replica_fetch(fetch(m, 2, NEW_SESSION, 0, positions({0: 0, 1: 0})))
    s3, _ = await m.serve_replica_fetch(fetch(m, 3, NEW_SESSION, 0, positions({0: 0, 1: 0})))
    await produce(m, 0, b"a")
    await m.serve_replica_fetch(fetch(m, 2, s2.session_id, 1, positions({0: 1})))
    await m.serve_replica_fetch(fetch(m, 3, s3.session_id, 1, positions({0: 1})))
    assert m.partitions[("T", 0)].log.high_watermark == 1  # news for both sessions
    stale = (FetchPosition("T", 0, -1, 1, 0),)
    answer, _ = await m.serve_replica_fetch(fetch(m, 2, s2.session_id, 2, stale))
    assert [(p.partition, p.error_code) for p in answer.partitions] == [(0, "FENCED_LEADER_EPOCH")]
    answer, _ = await m.serve_replica_fetch(fetch(m, 2, s2.session_id, 3, positions({0: 1}, 0)))
    assert [(p.partition, p.error_code, p.high_watermark) for p in answer.partitions] == [
        (0, None, 1)
    ]


async def test_a_stale_session_or_epoch_is_refused_whole_and_forgotten_partitions_go(
    storage: LogStorage,
) -> None:
    clock = ManualClock()
    manager = leader_of_everything(storage, clock)
    first, _ = await manager.serve_replica_fetch(
        fetch(manager, 2, NEW_SESSION, 0, positions({0: 0, 1: 0}))
    )
    session = first.session_id
    for wrong, code in [
        (fetch(manager, 2, session + 1, 1), ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        (fetch(manager, 2, session, 5), ErrorCode.INVALID_FETCH_SESSION_EPOCH),
        (fetch(manager, 3, session, 1), ErrorCode.FETCH_SESSION_ID_NOT_FOUND),  # not 3's
    ]:
        with pytest.raises(KraftliteError) as caught:
            await manager.serve_replica_fetch(wrong)
        assert caught.value.code is code
    # a replayed request (its answer lost) is refused too: the follower starts over
    await manager.serve_replica_fetch(fetch(manager, 2, session, 1, forgotten=(("T", 1),)))
    with pytest.raises(KraftliteError) as caught:
        await manager.serve_replica_fetch(fetch(manager, 2, session, 1))
    assert caught.value.code is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # partition 1 was forgotten: a record there is not news for this session
    await produce(manager, 1, b"y")
    answer, _ = await manager.serve_replica_fetch(fetch(manager, 2, session, 2))
    assert answer.partitions == ()
    await produce(manager, 0, b"z")
    answer, _ = await manager.serve_replica_fetch(fetch(manager, 2, session, 3))
    assert [p.partition for p in answer.partitions] == [0]
    # a new full fetch replaces the session
    again, _ = await manager.serve_replica_fetch(
        fetch(manager, 2, NEW_SESSION, 0, positions({1: 0}))
    )
    assert again.session_id != session
    with pytest.raises(KraftliteError):
        await manager.serve_replica_fetch(fetch(manager, 2, session, 4))


async def test_an_idle_caught_up_follower_stays_in_the_isr_when_writes_resume(
    storage: LogStorage,
) -> None:
    """Idle partitions are not fetched by name, so the leader credits a caught-up
    follower with its session's last round (replica_state rule 5); a follower whose
    session stopped is shrunk out as before."""
    clock = ManualClock()
    manager = leader_of_everything(storage, clock)
    lag = manager.settings.replica_lag_time_max_ms
    for follower in (2, 3):
        await manager.serve_replica_fetch(
            fetch(manager, follower, NEW_SESSION, 0, positions({0: 0}))
        )
    partition = manager.partitions[("T", 0)]
    await manager._check_isrs()
    assert partition.isr_settled()  # both at the leader's end: nothing to check
    session_2 = manager.fetch_sessions._by_follower[2]
    for _ in range(3):  # a long idle time; only 2 keeps its session going
        clock.ms += lag
        session_2 = manager.fetch_sessions._by_follower[2]
        await manager.serve_replica_fetch(
            fetch(manager, 2, session_2.session_id, session_2.next_epoch)
        )
    await produce(manager, 0, b"resume")
    await manager._check_isrs()
    assert partition.state is not None
    assert partition.state.pending_isr == (1, 2)  # 3 stopped fetching long ago: out


async def test_a_lease_lapse_on_an_idle_partition_gives_no_dead_follower_a_fresh_allowance(
    tmp_path: Path,
) -> None:
    """From the review: a lapse noticed on a settled partition must be seen by the ISR check
    when it ends, not at the next change hours later (when resume_after_lapse would give a
    long-dead follower a fresh replica.lag.time.max.ms)."""
    storage = LogStorage(StorageConfig(path=tmp_path / "b1"))
    try:
        clock = ManualClock()
        lease = {"valid": True}
        manager = leader_of_everything(storage, clock, 1, lambda: lease["valid"])
        lag = manager.settings.replica_lag_time_max_ms
        for follower in (2, 3):
            await manager.serve_replica_fetch(
                fetch(manager, follower, NEW_SESSION, 0, positions({0: 0}))
            )
        partition = manager.partitions[("T", 0)]
        await manager._check_isrs()
        assert partition.isr_settled()
        # a short lease lapse (a controller failover); one produce is refused meanwhile
        lease["valid"] = False
        with contextlib.suppress(KraftliteError):
            await produce(manager, 0, b"refused")
        lease["valid"] = True
        await manager._check_isrs()  # the partition is not active: the lapse is not resumed
        # follower 3 dies now; 2 keeps fetching; a long idle time
        for _ in range(3):
            clock.ms += lag
            s2 = manager.fetch_sessions._by_follower[2]
            await manager.serve_replica_fetch(fetch(manager, 2, s2.session_id, s2.next_epoch))
        await produce(manager, 0, b"resume")
        await manager._check_isrs()
        assert partition.state is not None
        # without the lapse this is (1, 2) at once (the repo's own test); here 3 gets a
        # fresh replica.lag.time.max.ms from the stale lapse and holds acks=all that long
        assert partition.state.pending_isr == (1, 2), (
            f"3, silent for {3 * lag} ms, kept: pending {partition.state.pending_isr}"
        )
    finally:
        storage.close()
