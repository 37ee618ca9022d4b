"""The Python client against a real cluster: admin, batching producer, assign-only consumer,
the synchronous facade, and a producer riding out the loss of a partition leader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlite.client import (
    Admin,
    Consumer,
    ErrorCode,
    KraftliteError,
    Producer,
    SyncAdmin,
    SyncConsumer,
    SyncProducer,
)
from kraftlite.client.transport import Transport
from kraftlite.protocol.partitioner import partition_for_key
from tests.harness.processes import FAST_SESSIONS, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("client"), controller_config=FAST_SESSIONS)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def bootstrap(cluster: Cluster) -> str:
    return ",".join(cluster.urls.values())


async def wait_for_leaders(admin: Admin, topic: str) -> None:
    for _ in range(200):
        try:
            described = await admin.describe_topic(topic)
        except KraftliteError as exc:  # not on this broker yet
            assert exc.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            if all(p["high_watermark"] is not None for p in described["partitions"]):
                return
        await asyncio.sleep(0.05)
    raise AssertionError("no leaders")


async def test_admin_calls(cluster: Cluster) -> None:
    async with Admin(bootstrap(cluster)) as admin:
        created = await admin.create_topic("adm", partitions=2, configs={"retention.ms": 60000})
        assert [p["partition"] for p in created["partitions"]] == [0, 1]
        assert "adm" in [t["name"] for t in await admin.list_topics()]
        grown = await admin.create_partitions("adm", 4)
        assert len(grown["partitions"]) == 4
        altered = await admin.alter_configs("adm", {"retention.ms": 1000})
        assert altered["configs"]["retention.ms"] == "1000"
        with pytest.raises(KraftliteError) as caught:
            await admin.create_topic("adm")
        assert caught.value.code is ErrorCode.TOPIC_ALREADY_EXISTS and not caught.value.retriable
        await admin.delete_topic("adm")
        assert "adm" not in [t["name"] for t in await admin.list_topics()]
        assert sorted(b["id"] for b in (await admin.cluster())["brokers"]) == [1, 2, 3]


async def test_produce_batched_and_consume_everything_in_order(cluster: Cluster) -> None:
    async with Admin(bootstrap(cluster)) as admin:
        await admin.create_topic("flow", partitions=3, replication_factor=3)
        await wait_for_leaders(admin, "flow")
    async with Producer(bootstrap(cluster), linger_ms=2, max_batch_bytes=16_384) as producer:
        futures = [
            await producer.send(
                "flow",
                f"value-{i}".encode(),
                key=f"user-{i % 13}".encode(),
                headers=(("n", str(i).encode()),),
            )
            for i in range(3000)
        ]
        await producer.flush()
        acked = [f.result() for f in futures]
    for i, meta in enumerate(acked):
        assert meta.partition == partition_for_key(f"user-{i % 13}".encode(), 3)
    for partition in range(3):  # per partition: dense offsets in send order
        offsets = [m.offset for m in acked if m.partition == partition]
        assert offsets == list(range(len(offsets)))
    async with Consumer(bootstrap(cluster), auto_offset_reset="earliest") as consumer:
        await consumer.assign_topic("flow")
        got = []
        while len(got) < 3000:
            batch = await consumer.poll(timeout_ms=2000)
            assert batch, "no progress"
            got += batch
        assert len(got) == 3000
        by_value = {r.value: r for r in got}
        for i, meta in enumerate(acked):
            record = by_value[f"value-{i}".encode()]
            assert (record.partition, record.offset) == (meta.partition, meta.offset)
            assert record.key == f"user-{i % 13}".encode()
            assert record.headers == (("n", str(i).encode()),)
        assert await consumer.poll(timeout_ms=200) == []  # nothing more
        await consumer.seek_to_beginning(("flow", 0))
        again = await consumer.poll(timeout_ms=1000)
        assert again and again[0].offset == 0


async def test_consumer_positions_latest_by_default_and_by_time(cluster: Cluster) -> None:
    async with Admin(bootstrap(cluster)) as admin:
        await admin.create_topic("times2", partitions=1, replication_factor=3)
        await wait_for_leaders(admin, "times2")
    async with Producer(bootstrap(cluster)) as producer:
        for i in range(5):
            await producer.send("times2", b"old", timestamp=1_000 + i)
        await producer.flush()
        async with Consumer(bootstrap(cluster)) as consumer:
            consumer.assign([("times2", 0)])
            assert await consumer.position(("times2", 0)) == 5  # latest
            assert await consumer.offsets_for_times({("times2", 0): 1_002}) == {("times2", 0): 2}
            future = await producer.send("times2", b"new")
            await producer.flush()
            assert future.result().offset == 5
            records = await consumer.poll(timeout_ms=2000)
            assert [r.value for r in records] == [b"new"]


def test_sync_facade(cluster: Cluster) -> None:
    with SyncAdmin(bootstrap(cluster)) as admin:
        admin.create_topic("sync", partitions=1, replication_factor=2)
    with SyncProducer(bootstrap(cluster), acks="1") as producer:
        futures = [producer.send("sync", f"m{i}".encode()) for i in range(50)]
        producer.flush()
        assert [f.result(timeout=10).offset for f in futures] == list(range(50))
    with SyncConsumer(bootstrap(cluster), auto_offset_reset="earliest") as consumer:
        consumer.assign([("sync", 0)])
        records = []
        while len(records) < 50:
            records += consumer.poll(2000)
        assert [r.value for r in records] == [f"m{i}".encode() for i in range(50)]


async def test_producer_retries_through_a_leader_failure(cluster: Cluster) -> None:
    """kill -9 the partition's leader mid-stream: every send resolves, none is lost."""
    async with Admin(bootstrap(cluster)) as admin:
        created = await admin.create_topic(
            "survive", partitions=1, replication_factor=3, configs={"min.insync.replicas": 2}
        )
        await wait_for_leaders(admin, "survive")
    leader = created["partitions"][0]["leader"]
    async with Producer(bootstrap(cluster), linger_ms=1, retries=30) as producer:
        futures = []
        for i in range(400):
            futures.append(await producer.send("survive", f"v{i}".encode()))
            if i == 100:
                await producer.flush()
                cluster.processes[leader].kill()
            if i % 20 == 0:
                await asyncio.sleep(0.01)
        await producer.flush()
        acked = {f.result().offset: i for i, f in enumerate(futures)}
    cluster.processes[leader].start()
    assert len(acked) == 400  # distinct offsets: none acknowledged twice at one offset
    async with Consumer(bootstrap(cluster), auto_offset_reset="earliest") as consumer:
        consumer.assign([("survive", 0)])
        stored = {}
        for _ in range(50):
            for record in await consumer.poll(timeout_ms=1000):
                stored[record.offset] = record.value
            if len(stored) >= len(acked):
                break
    for offset, i in acked.items():
        assert stored.get(offset) == f"v{i}".encode()
    cluster.wait_ready()


class _LosesFirstAnswers(Transport):
    """A transport whose first answer to each produce is lost after the broker acted on
    it: what a client sees when the link drops as the answer comes back."""

    def __init__(self, bootstrap: str, lost: int) -> None:
        super().__init__(bootstrap)
        self.lost = lost

    async def request(
        self, base_url: str, method: str, path: str, *args: Any, **kwargs: Any
    ) -> Any:
        answer = await super().request(base_url, method, path, *args, **kwargs)
        if method == "POST" and path.endswith("/records") and self.lost > 0:
            self.lost -= 1
            raise TimeoutError("the answer was lost")
        return answer


@pytest.mark.parametrize("idempotent", [True, False])
async def test_a_retried_send_is_written_once_by_an_idempotent_producer(
    cluster: Cluster, idempotent: bool
) -> None:
    topic = f"retried-{idempotent}".lower()
    async with Admin(bootstrap(cluster)) as admin:
        await admin.create_topic(topic, partitions=1, replication_factor=3)
        await wait_for_leaders(admin, topic)
    transport = _LosesFirstAnswers(bootstrap(cluster), lost=3)
    async with Producer(
        bootstrap(cluster), linger_ms=1, transport=transport, enable_idempotence=idempotent
    ) as producer:
        futures = []
        for i in range(10):
            futures.append(await producer.send(topic, f"v{i}".encode()))
            await producer.flush()  # one batch each: the first three lose their answers
        offsets = [f.result().offset for f in futures]
    async with Consumer(bootstrap(cluster), auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        stored = []
        for _ in range(20):
            stored += [r.value for r in await consumer.poll(timeout_ms=500)]
    if idempotent:
        assert stored == [f"v{i}".encode() for i in range(10)]
        assert offsets == list(range(10))
    else:  # the test can fail: without idempotence the retries are written again
        assert len(stored) == 13
