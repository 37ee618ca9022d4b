"""The leader's side of the elastic cluster on real LMDB logs: the replication throttle
never holds back a replica that counts for the high watermark, and a draining broker does
not make every partition's ISR check run again on every metadata image."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftlite.broker.partition import Acks
from kraftlite.broker.replica_manager import ReplicaManager, ReplicationSettings
from kraftlite.metadata import records as r
from kraftlite.protocol import batch as fmt
from kraftlite.protocol.internal import NEW_SESSION, FetchPosition, ReplicaFetchRequest
from kraftlite.storage.log import LogStorage, StorageConfig
from tests.harness.metadata import live_brokers, play
from tests.integration.test_partition_replication import ManualClock

pytestmark = pytest.mark.integration


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[LogStorage]:
    opened = LogStorage(StorageConfig(path=tmp_path / "b1"))
    yield opened
    opened.close()


def manager_for(storage, clock, image, rate=None):
    m = ReplicaManager(
        ReplicationSettings(broker_id=1, throttled_rate=rate),
        storage,
        controllers=None,  # type: ignore[arg-type]
        session=None,  # type: ignore[arg-type]
        clock=clock,
        broker_epoch=lambda: 1,
    )
    m.apply_image(image)
    return m


def req(m, follower, session, epoch, offset, wait_ms=0):
    return ReplicaFetchRequest(
        follower,
        m.image.brokers[follower].broker_epoch,
        wait_ms,
        1 << 20,
        session,
        epoch,
        (FetchPosition("T", 0, 0, offset, -1),),
    )


async def produce(m, n_bytes):
    batch = fmt.encode_records([fmt.Record(value=b"x" * n_bytes)], now_ms=1_000)
    await m.partitions[("T", 0)].produce(batch, Acks.LEADER, 1)


async def test_a_pending_isr_member_is_not_throttled_and_the_hw_moves(storage) -> None:
    clock = ManualClock()
    image = play(live_brokers(1, 2, 4), r.TopicRecord(name="t", topic_id="T"))
    image = play(
        image, r.PartitionRecord(topic_id="T", partition=0, replicas=(1, 2), isr=(1, 2), leader=1)
    )
    # a reassignment adds 4
    image = play(
        image,
        r.PartitionChangeRecord(
            topic_id="T", partition=0, replicas=(1, 2, 4), adding_replicas=(4,)
        ),
    )
    m = manager_for(storage, clock, image, rate=1000)  # 1 kB/s
    p = m.partitions[("T", 0)]
    await produce(m, 10)
    # 2 and 4 fetch it, 4 reaches the HW at its next fetch: expansion proposed (pending)
    s2, _ = await m.serve_replica_fetch(req(m, 2, NEW_SESSION, 0, 0))
    s4, _ = await m.serve_replica_fetch(req(m, 4, NEW_SESSION, 0, 0))
    end = p.log.log_end_offset
    await m.serve_replica_fetch(req(m, 2, s2.session_id, 1, end))
    await m.serve_replica_fetch(req(m, 4, s4.session_id, 1, end))
    assert p.state.pending_isr == (1, 2, 4), p.state
    hw0 = p.log.high_watermark
    # burn the bucket (as many partitions catching up would) then write 5 kB more
    m._throttle_spent(1000, 50_000)
    await produce(m, 5_000)
    end2 = p.log.log_end_offset
    # in-sync 2 fetches everything and comes back at the end
    await m.serve_replica_fetch(req(m, 2, s2.session_id, 2, end))
    await m.serve_replica_fetch(req(m, 2, s2.session_id, 3, end2))
    # 4 (a pending member of the ISR, counted for the HW) is not throttled
    _a4, data4 = await m.serve_replica_fetch(req(m, 4, s4.session_id, 2, end, wait_ms=100))
    assert sum(len(d) for d in data4) > 5_000, "the pending member got it all at once"
    await m.serve_replica_fetch(req(m, 4, s4.session_id, 3, end2))
    assert p.log.high_watermark > hw0, (
        f"HW held at {p.log.high_watermark} (LEO {end2}) by a throttled pending ISR member; "
        f"4 got {sum(len(d) for d in data4)} bytes"
    )


async def test_a_draining_broker_does_not_reactivate_every_partition(storage) -> None:
    clock = ManualClock()
    image = play(live_brokers(1, 2, 3), r.TopicRecord(name="t", topic_id="T"))
    image = play(
        image,
        *(
            r.PartitionRecord(topic_id="T", partition=i, replicas=(1, 2, 3), isr=(1, 2), leader=1)
            for i in range(20)
        ),
    )
    image = play(image, r.BrokerDrainRecord(broker_id=3, draining=True))
    m = manager_for(storage, clock, image)
    m._active.clear()
    # an unrelated metadata change (a config on another topic, a heartbeat-driven change...)
    later = play(image, r.TopicRecord(name="u", topic_id="U"))
    m.apply_image(later)
    assert not m._active, (
        f"{len(m._active)} partitions re-examined: 3 counts as 'back' on every image"
    )
