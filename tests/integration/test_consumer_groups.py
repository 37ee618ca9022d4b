"""Consumer groups on a real cluster: rebalances without two owners, session expiry, commit
fencing, and committed offsets surviving the loss of the coordinator's broker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from kraftlite.client import Admin, Consumer, Producer
from kraftlite.groups.coordinator import OFFSETS_TOPIC
from tests.harness.processes import FAST_SESSIONS, Cluster, http

NO_FORWARD = {"X-Kraftlite-No-Forward": "1"}

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
GROUPS = {
    "group.consumer.max.session.timeout.ms": 4000,
    "group.consumer.heartbeat.interval.ms": 200,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("groups"), broker_config=GROUPS, controller_config=FAST_SESSIONS
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def bootstrap(cluster: Cluster) -> str:
    return ",".join(url for b, url in cluster.urls.items() if cluster.processes[b].serving)


async def topic_with_records(cluster: Cluster, name: str, partitions: int, count: int) -> None:
    async with Admin(bootstrap(cluster)) as admin:
        await admin.create_topic(name, partitions=partitions, replication_factor=3)
    async with Producer(bootstrap(cluster)) as producer:
        for i in range(count):
            await producer.send(name, f"{name}-{i}".encode(), partition=i % partitions)
        await producer.flush()


def consumer(cluster: Cluster, group: str) -> Consumer:
    return Consumer(
        bootstrap(cluster),
        group_id=group,
        auto_offset_reset="earliest",
        session_timeout_ms=2000,
        auto_commit_interval_ms=200,
    )


def coordinator_of(cluster: Cluster, group: str) -> int:
    """The group's coordinator's broker id (`__consumer_offsets` is for brokers only: ask a
    broker not to forward, and its 421 names the coordinator).
    """
    url = cluster.urls[1]
    status, answer = http("GET", f"{url}/v1/groups/{group}/offsets", headers=NO_FORWARD)
    if status == 200:
        return 1
    assert status == 421 and answer["error_code"] == "NOT_COORDINATOR", answer
    return int(answer["leader_id"])


async def until(condition, timeout_s: float = 30, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_two_members_split_partitions_and_never_share_one(cluster: Cluster) -> None:
    await topic_with_records(cluster, "work", 6, 600)
    seen: set[tuple[int, int]] = set()
    one, two = consumer(cluster, "g1"), consumer(cluster, "g1")
    overlaps = []

    async def drive(member: Consumer, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for record in await member.poll(timeout_ms=100):
                seen.add((record.partition, record.offset))
            mine, theirs = set(one.assignment()), set(two.assignment())
            if mine & theirs:
                overlaps.append(mine & theirs)

    stop = asyncio.Event()
    try:
        await one.subscribe(["work"])
        task_one = asyncio.create_task(drive(one, stop))
        await until(lambda: len(one.assignment()) == 6, what="the first member to own all six")
        await two.subscribe(["work"])
        task_two = asyncio.create_task(drive(two, stop))
        await until(
            lambda: len(one.assignment()) == 3 and len(two.assignment()) == 3,
            what="an even split",
        )
        await until(lambda: len(seen) == 600, what="every record consumed")
        await two.close()  # leaves: its partitions go back to the first member
        await until(lambda: len(one.assignment()) == 6, what="the partitions back")
        stop.set()
        await asyncio.gather(task_one, task_two)
        assert not overlaps
        await one.commit()
        committed = await one.committed()
        assert committed == {("work", p): 100 for p in range(6)}
        status, body = http("GET", cluster.urls[2] + "/v1/groups/g1/offsets")
        assert status == 200 and all(o["lag"] == 0 for o in body["offsets"])
        status, described = http("GET", cluster.urls[3] + "/v1/groups/g1")
        assert status == 200 and len(described["members"]) == 1
        status, listed = http("GET", cluster.urls[1] + "/v1/groups")
        assert "g1" in [g["group"] for g in listed["groups"]]
    finally:
        stop.set()
        await one.close()
        await two.close()


async def test_a_silent_member_expires_and_its_partitions_move(cluster: Cluster) -> None:
    await topic_with_records(cluster, "expiry", 4, 40)
    one, two = consumer(cluster, "g2"), consumer(cluster, "g2")
    try:
        await one.subscribe(["expiry"])
        await two.subscribe(["expiry"])
        for _ in range(200):
            await asyncio.gather(one.poll(50), two.poll(50))
            if len(one.assignment()) == 2 and len(two.assignment()) == 2:
                break
        assert len(two.assignment()) == 2
        assert two._membership is not None
        two._membership.cancel()  # it crashes: no heartbeat, no leave
        started = time.monotonic()
        while len(one.assignment()) < 4:  # a new assignment is taken inside poll()
            await one.poll(50)
            assert time.monotonic() - started < 30, "the dead member's partitions never came"
        assert time.monotonic() - started >= 1.5  # only after its 2 s session
    finally:
        await one.close()
        two.member_id = None  # it is gone; do not leave on its behalf
        await two.close()


async def test_commits_are_fenced_by_member_epoch(cluster: Cluster) -> None:
    await topic_with_records(cluster, "fence", 2, 2)
    one, two = consumer(cluster, "g3"), consumer(cluster, "g3")
    try:
        await one.subscribe(["fence"])
        await until(lambda: len(one.assignment()) == 2, what="both partitions")
        stale_epoch = one.member_epoch
        await two.subscribe(["fence"])
        for _ in range(200):
            await asyncio.gather(one.poll(50), two.poll(50))
            if len(one.assignment()) == 1 and len(two.assignment()) == 1:
                break
        await asyncio.sleep(0.5)  # the first member confirms its release
        (lost,) = set(two.assignment())
        status, body = http(
            "POST",
            cluster.urls[1] + "/v1/groups/g3/offsets",
            {
                "member_id": one.member_id,
                "member_epoch": stale_epoch,
                "offsets": [{"topic": lost[0], "partition": lost[1], "offset": 1}],
            },
        )
        assert (status, body["error_code"]) == (409, "FENCED_MEMBER_EPOCH")
        status, body = http(
            "POST", cluster.urls[1] + "/v1/groups/g3/offsets",
            {"member_id": "nobody", "offsets": [{"topic": "fence", "partition": 0, "offset": 1}]},
        )  # fmt: skip
        assert (status, body["error_code"]) == (404, "UNKNOWN_MEMBER_ID")
        status, body = http("POST", cluster.urls[1] + "/v1/groups/g3/members", {"topics": []})
        assert (status, body["error_code"]) == (400, "INVALID_REQUEST")
    finally:
        await one.close()
        await two.close()


async def test_committed_offsets_survive_the_coordinators_broker(cluster: Cluster) -> None:
    await topic_with_records(cluster, "durable-offsets", 3, 30)
    status, _ = http(
        "POST",
        cluster.urls[1] + "/v1/groups/g4/offsets",
        {
            "offsets": [
                {"topic": "durable-offsets", "partition": p, "offset": 7 + p} for p in range(3)
            ]
        },
    )
    assert status == 204
    coordinator = coordinator_of(cluster, "g4")
    cluster.processes[coordinator].kill()
    try:
        other = next(b for b in cluster.urls if b != coordinator)
        deadline = time.monotonic() + 30
        while True:
            status, body = http("GET", cluster.urls[other] + "/v1/groups/g4/offsets")
            if status == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert status == 200, body
        assert {(o["partition"], o["offset"]) for o in body["offsets"]} == {(0, 7), (1, 8), (2, 9)}
        member = consumer(cluster, "g4")
        try:  # a member of the new coordinator starts where the commits say
            await member.subscribe(["durable-offsets"])
            got = []
            for _ in range(200):
                got += await member.poll(100)
                if len(got) >= 3 * 10 - (7 + 8 + 9):
                    break
            assert sorted((r.partition, r.offset) for r in got)[0] == (0, 7)
            assert len(got) == 30 - 24
        finally:
            await member.close()
    finally:
        cluster.processes[coordinator].start()
        cluster.wait_ready()


async def test_records_fetched_while_a_partition_is_taken_away_are_neither_lost_nor_committed(
    cluster: Cluster,
) -> None:
    """The group takes partition 0 away while a poll is in flight (its fetch done, another
    partition's long-poll still waiting): those records are not delivered, and the offset
    committed on the way out is where the application really stopped, so the next owner
    reads them. (Before the fix the position ran ahead: at-most-once for those records.)
    """
    await topic_with_records(cluster, "inflight", 2, 0)
    async with Producer(bootstrap(cluster)) as producer:
        for i in range(50):
            await producer.send("inflight", f"r{i}".encode(), partition=0)
        await producer.flush()
    member = consumer(cluster, "g5")
    try:
        await member.subscribe(["inflight"])
        await until(lambda: len(member.assignment()) == 2, what="both partitions")
        assert member._membership is not None
        member._membership.cancel()  # drive the membership by hand from here
        member.seek(("inflight", 0), 0)
        member.seek(("inflight", 1), 0)
        polling = asyncio.create_task(member.poll(timeout_ms=1500))  # partition 1 waits
        await asyncio.sleep(0.5)  # partition 0's fetch has answered by now
        await member._apply(
            {
                "member_epoch": member.member_epoch + 1,
                "heartbeat_interval_ms": 200,
                "assignment": [{"topic": "inflight", "partitions": [1]}],
            }
        )
        assert await polling == []
        committed = await member.committed()
        assert committed.get(("inflight", 0), 0) == 0
    finally:
        member.member_id = None  # its membership was cancelled; it just goes
        await member.close()


class MemberProcess:
    """tests/harness/group_member.py in a subprocess; its assignment read from its stdout."""

    def __init__(self, cluster: Cluster, group: str, topic: str) -> None:
        import subprocess  # noqa: PLC0415
        import sys  # noqa: PLC0415

        self.assignment: list[int] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.group_member", bootstrap(cluster), group, topic],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader = asyncio.get_running_loop().run_in_executor(None, self._read)

    def _read(self) -> None:
        import json  # noqa: PLC0415

        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.assignment = json.loads(line)["assignment"]

    async def stop(self, sig: int) -> None:
        self.process.send_signal(sig)
        self.process.wait(timeout=30)
        await self._reader
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.mark.parametrize("how", ["leaves", "dies"])
async def test_a_member_in_another_process_hands_over_when_it_leaves_or_dies(
    cluster: Cluster, how: str
) -> None:
    import signal  # noqa: PLC0415

    topic = f"handover-{how}"
    await topic_with_records(cluster, topic, 6, 60)
    other = MemberProcess(cluster, f"g6-{how}", topic)
    here = consumer(cluster, f"g6-{how}")
    try:
        await until(lambda: len(other.assignment) == 6, what="the other process to own all")
        await here.subscribe([topic])
        overlaps = []
        for _ in range(400):
            await here.poll(50)
            mine = {p for _, p in here.assignment()}
            if mine & set(other.assignment):
                overlaps.append(mine & set(other.assignment))
            if len(mine) == 3 and len(other.assignment) == 3:
                break
        assert len(here.assignment()) == 3 and not overlaps
        started = time.monotonic()
        await other.stop(signal.SIGTERM if how == "leaves" else signal.SIGKILL)
        while len(here.assignment()) < 6:
            await here.poll(50)
            assert time.monotonic() - started < 20
        took = time.monotonic() - started
        if how == "dies":
            assert took >= 3.0  # only once its 4 s session ran out
        else:
            assert took < 3.0  # a clean leave hands over at once
    finally:
        if other.process.poll() is None:
            await other.stop(signal.SIGKILL)
        await here.close()


async def test_bad_group_requests_change_nothing(cluster: Cluster) -> None:
    """No request can plant a record that breaks the offsets replay (review finding)."""
    url = cluster.urls[1]
    await topic_with_records(cluster, "plain", 1, 1)

    def commit(topic: str, partition: int) -> dict:
        return {"offsets": [{"topic": topic, "partition": partition, "offset": 1}]}

    offsets = f"/v1/topics/{OFFSETS_TOPIC}"
    cases = [
        ("POST", "/v1/groups/a%00b/offsets", commit("plain", 0), 400),
        ("POST", "/v1/groups/g7/offsets", commit("a\x00b", 0), 400),
        ("POST", "/v1/groups/g7/offsets", commit("plain", -1), 400),
        ("POST", "/v1/groups/g7/offsets", {"offsets": []}, 400),
        ("POST", "/v1/groups/g7/members", {"topics": ["plain"], "member_id": "x" * 65}, 400),
        ("POST", f"{offsets}/records", {"records": [{"value": "x"}]}, 400),
        ("POST", f"{offsets}/partitions/0/records", {"records": [{"value": "x"}]}, 400),
        ("DELETE", offsets, None, 403),  # internal topics: only brokers change them
    ]  # fmt: skip
    for method, path, body, code in cases:
        status, answer = http(method, url + path, body)
        assert status == code, (path, answer)
    status, answer = http("GET", url + "/v1/groups/g7/offsets")  # the offsets topic serves
    assert (status, answer["offsets"]) == (200, [])  # and no bad commit landed


async def test_a_member_that_cannot_reach_its_coordinator_stops_consuming(
    cluster: Cluster,
) -> None:
    """The client-side half of "never two owners": without contact for most of its session,
    a member drops its partitions before the coordinator could give them to someone else.
    """
    await topic_with_records(cluster, "lapse", 2, 10)
    member = consumer(cluster, "g8")
    try:
        await member.subscribe(["lapse"])
        await until(lambda: len(member.assignment()) == 2, what="both partitions")
        assert member._membership is not None
        member._membership.cancel()  # its heartbeats stop getting through
        member._last_contact -= 2.0  # ...for as long as its whole session
        assert await member.poll(timeout_ms=50) == []
        assert member.assignment() == []
    finally:
        member.member_id = None
        await member.close()


async def test_partitions_are_taken_away_only_when_the_application_polls_again(
    cluster: Cluster,
) -> None:
    """Kafka's contract: while the application works on what poll() gave it, its partitions
    stay its own; the rebalance completes at its next poll (then it commits and releases).
    """
    await topic_with_records(cluster, "busy", 2, 20)
    one, two = consumer(cluster, "g9"), consumer(cluster, "g9")
    try:
        await one.subscribe(["busy"])
        assert len(await one.poll(1000)) > 0 and len(one.assignment()) == 2
        await two.subscribe(["busy"])
        for _ in range(20):  # one is "busy": no poll for two seconds
            await two.poll(100)
        assert len(one.assignment()) == 2 and two.assignment() == []
        started = time.monotonic()
        while not (len(one.assignment()) == 1 and len(two.assignment()) == 1):
            await asyncio.gather(one.poll(50), two.poll(50))
            assert time.monotonic() - started < 15, "the rebalance never completed"
        assert not set(one.assignment()) & set(two.assignment())
    finally:
        await one.close()
        await two.close()


async def test_commits_are_checked_against_member_epoch_and_the_log_end(
    cluster: Cluster,
) -> None:
    """KIP-848's commit rules and the bounds of an offset (issues 12 and 25), through a
    broker that is not the coordinator as well as the coordinator itself.
    """
    await topic_with_records(cluster, "checked", 2, 10)  # five records per partition
    member = consumer(cluster, "g10")
    member.enable_auto_commit = False
    try:
        await member.subscribe(["checked"])
        await until(lambda: len(member.assignment()) == 2, what="both partitions")
        got = 0
        for _ in range(100):
            got += len(await member.poll(200))
            if got == 10:
                break
        await member.commit()
        assert await member.committed() == {("checked", 0): 5, ("checked", 1): 5}
        epoch = member.member_epoch

        def commit(offset: int, **fields: object) -> tuple[int, str | None]:
            body = {"offsets": [{"topic": "checked", "partition": 0, "offset": offset}], **fields}
            status, answer = http("POST", cluster.urls[2] + "/v1/groups/g10/offsets", body)
            return status, None if answer is None else answer["error_code"]

        me = {"member_id": member.member_id}
        assert commit(1, **me, member_epoch=epoch + 1) == (409, "FENCED_MEMBER_EPOCH")
        assert commit(1, **me, member_epoch=0) == (409, "STALE_MEMBER_EPOCH")
        assert commit(1, **me) == (400, "INVALID_REQUEST")
        assert commit(1) == (404, "UNKNOWN_MEMBER_ID")  # no member id: the group is not empty
        assert commit(1, member_id="ghost", member_epoch=epoch) == (404, "UNKNOWN_MEMBER_ID")
        assert commit(2**63, **me, member_epoch=epoch) == (416, "OFFSET_OUT_OF_RANGE")
        assert commit(2**64 - 1, **me, member_epoch=epoch) == (416, "OFFSET_OUT_OF_RANGE")
        status, answer = http(
            "POST",
            cluster.urls[1] + "/v1/groups/g10/offsets",
            {
                **me,
                "member_epoch": epoch,
                "offsets": [
                    {"topic": "checked", "partition": 1, "offset": 3, "metadata": "x" * 4097}
                ],
            },
        )
        assert (status, answer["error_code"]) == (413, "OFFSET_METADATA_TOO_LARGE")
        assert await member.committed() == {("checked", 0): 5, ("checked", 1): 5}
        assert commit(5, **me, member_epoch=epoch) == (204, None)  # at the high watermark
        assert commit(0, **me, member_epoch=epoch) == (204, None)  # a seek back is legal
        assert (await member.committed())[("checked", 0)] == 0
        # above the high watermark, as Kafka takes it (issue 25): a consumer resuming there
        # gets OFFSET_OUT_OF_RANGE at its fetch and resets by its auto.offset.reset
        assert commit(1000, **me, member_epoch=epoch) == (204, None)
        assert (await member.committed())[("checked", 0)] == 1000
    finally:
        await member.close()
    status, answer = http(
        "POST",
        cluster.urls[3] + "/v1/groups/g10/offsets",
        {"offsets": [{"topic": "nope", "partition": 0, "offset": 0}]},
    )
    assert (status, answer["error_code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    status, _ = http(
        "POST",
        cluster.urls[3] + "/v1/groups/g10/offsets",
        {"offsets": [{"topic": "checked", "partition": 1, "offset": 5, "metadata": "€" * 1365}]},
    )
    assert status == 204  # an empty group takes an admin commit (4095 bytes of metadata)


async def test_reads_create_no_group_and_an_emptied_group_goes(cluster: Cluster) -> None:
    for url in cluster.urls.values():
        status, answer = http("GET", url + "/v1/groups/never-made")
        assert (status, answer["error_code"]) == (404, "GROUP_ID_NOT_FOUND")
        status, answer = http("GET", url + "/v1/groups/never-made/offsets")
        assert (status, answer["offsets"]) == (200, [])
        path = "/v1/groups/never-made/members/m1"
        status, answer = http("POST", url + path + "/heartbeat", {"member_epoch": 1})
        assert (status, answer["error_code"]) == (404, "UNKNOWN_MEMBER_ID")
        status, answer = http("DELETE", url + path)
        assert (status, answer["error_code"]) == (404, "UNKNOWN_MEMBER_ID")
    await topic_with_records(cluster, "passing", 1, 0)
    status, joined = http(
        "POST",
        cluster.urls[1] + "/v1/groups/passing-by/members",
        {"topics": ["passing"], "session_timeout_ms": 2000},
    )
    assert status == 200, joined
    status, described = http("GET", cluster.urls[2] + "/v1/groups/passing-by")
    assert status == 200 and len(described["members"]) == 1
    member = joined["member_id"]
    status, _ = http("DELETE", cluster.urls[3] + f"/v1/groups/passing-by/members/{member}")
    assert status == 204
    status, answer = http("GET", cluster.urls[1] + "/v1/groups/passing-by")
    assert (status, answer["error_code"]) == (404, "GROUP_ID_NOT_FOUND")  # nothing committed
    status, listed = http("GET", cluster.urls[1] + "/v1/groups")
    names = {g["group"] for g in listed["groups"]}
    assert "never-made" not in names and "passing-by" not in names
