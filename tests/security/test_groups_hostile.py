"""Issue 12, consumer groups: the review's attacks replayed with plain HTTP against real
broker processes, each refused, and the group they aimed at unharmed afterwards.

What these checks cannot stop is someone who presents a live member's id and epoch (which
describe shows): that is an authenticated principal's business, for the ACLs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlite.client.sync import SyncAdmin, SyncConsumer, SyncProducer
from kraftlite.groups.group import DEFAULT_MAX_SIZE
from kraftlite.groups.offsets import MAX_OFFSETS_PER_COMMIT
from tests.harness.processes import FAST_SESSIONS, Cluster, http

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("hostile-groups"), brokers=2, controller_config=FAST_SESSIONS
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def bootstrap(cluster: Cluster) -> str:
    return ",".join(cluster.urls.values())


def error(answer: tuple[int, Any]) -> tuple[int, str | None]:
    status, body = answer
    return status, body.get("error_code") if isinstance(body, dict) else None


def listed_groups(cluster: Cluster) -> set[str]:
    status, listed = http("GET", cluster.urls[1] + "/v1/groups")
    assert status == 200
    return {g["group"] for g in listed["groups"]}


def test_nobody_commits_for_a_member_or_past_the_log_end(cluster: Cluster) -> None:
    """A commit ignored the member epoch; 2^64-1 was accepted and stalled the consumer;
    8 MiB of metadata was accepted. The real member's offsets must not move.
    """
    with SyncAdmin(bootstrap(cluster)) as admin:
        admin.create_topic("victim-topic", partitions=2, replication_factor=2)
    with SyncProducer(bootstrap(cluster)) as producer:
        for i in range(10):
            producer.send("victim-topic", f"r{i}".encode(), partition=i % 2)
        producer.flush()
    victim = SyncConsumer(
        bootstrap(cluster),
        group_id="victim",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        victim.subscribe(["victim-topic"])
        got = 0
        deadline = time.monotonic() + 30
        while got < 10 and time.monotonic() < deadline:
            got += len(victim.poll(200))
        assert got == 10
        victim.commit()
        honest = victim.committed()
        assert honest == {("victim-topic", 0): 5, ("victim-topic", 1): 5}
        status, described = http("GET", cluster.urls[2] + "/v1/groups/victim")
        assert status == 200
        (member,) = described["members"]  # what an outsider learns: id and epoch
        me, epoch = member["member_id"], member["member_epoch"]

        def commit(offset: int, partition: int = 0, **fields: Any) -> tuple[int, str | None]:
            entry = {"topic": "victim-topic", "partition": partition, "offset": offset}
            body = {"offsets": [{**entry, **fields.pop("entry", {})}], **fields}
            results = {
                error(http("POST", url + "/v1/groups/victim/offsets", body))
                for url in cluster.urls.values()  # the coordinator and a forwarding broker
            }
            assert len(results) == 1, results
            return results.pop()

        attacks = {
            "no member id, live group": (commit(0), (404, "UNKNOWN_MEMBER_ID")),
            "a made-up member": (
                commit(0, member_id="x" * 32, member_epoch=1),
                (404, "UNKNOWN_MEMBER_ID"),
            ),
            "a future epoch": (
                commit(0, member_id=me, member_epoch=epoch + 1),
                (409, "FENCED_MEMBER_EPOCH"),
            ),
            "epoch 0": (commit(0, member_id=me, member_epoch=0), (409, "STALE_MEMBER_EPOCH")),
            "epoch -1": (commit(0, member_id=me, member_epoch=-1), (409, "STALE_MEMBER_EPOCH")),
            "no epoch": (commit(0, member_id=me), (400, "INVALID_REQUEST")),
            "2^64-1": (
                commit(2**64 - 1, member_id=me, member_epoch=epoch),
                (416, "OFFSET_OUT_OF_RANGE"),
            ),
            "past int64": (
                commit(2**63, member_id=me, member_epoch=epoch),
                (416, "OFFSET_OUT_OF_RANGE"),
            ),
            "a negative offset": (
                commit(-1, member_id=me, member_epoch=epoch),
                (400, "INVALID_REQUEST"),
            ),
            "a partition that does not exist": (
                commit(0, 2**31, member_id=me, member_epoch=epoch),
                (404, "UNKNOWN_TOPIC_OR_PARTITION"),
            ),
            "4097 bytes of metadata": (
                commit(0, member_id=me, member_epoch=epoch, entry={"metadata": "m" * 4097}),
                (413, "OFFSET_METADATA_TOO_LARGE"),
            ),
        }
        failed = {name: got for name, (got, wanted) in attacks.items() if got != wanted}
        assert not failed, failed
        # 8 MiB: refused by the request size limit if it is lower, else by ours.
        huge = commit(0, member_id=me, member_epoch=epoch, entry={"metadata": "m" * (8 << 20)})
        assert huge in {(413, "OFFSET_METADATA_TOO_LARGE"), (413, "RECORD_LIST_TOO_LARGE")}
        many = {
            "member_id": me,
            "member_epoch": epoch,
            "offsets": [{"topic": "victim-topic", "partition": 0, "offset": 0}]
            * (MAX_OFFSETS_PER_COMMIT + 1),
        }
        assert error(http("POST", cluster.urls[1] + "/v1/groups/victim/offsets", many)) == (
            400,
            "INVALID_REQUEST",
        )
        # Unharmed: the offsets are the member's, it is still the member, it goes on.
        assert victim.committed() == honest
        status, described = http("GET", cluster.urls[1] + "/v1/groups/victim")
        assert status == 200 and [m["member_id"] for m in described["members"]] == [me]
        with SyncProducer(bootstrap(cluster)) as producer:
            producer.send("victim-topic", b"later", partition=0)
            producer.flush()
        later: list[Any] = []
        deadline = time.monotonic() + 30
        while not later and time.monotonic() < deadline:
            later = victim.poll(200)
        assert [r.value for r in later] == [b"later"]
        victim.commit()
        assert victim.committed() == {("victim-topic", 0): 6, ("victim-topic", 1): 5}
    finally:
        victim.close()


def test_reads_and_refused_requests_create_no_group(cluster: Cluster) -> None:
    """`GET /v1/groups/{any}` created a group forever."""
    before = listed_groups(cluster)
    for i in range(20):
        group = f"probe-{i}"
        for url in cluster.urls.values():
            assert error(http("GET", f"{url}/v1/groups/{group}")) == (404, "GROUP_ID_NOT_FOUND")
            status, answer = http("GET", f"{url}/v1/groups/{group}/offsets")
            assert (status, answer["offsets"]) == (200, [])
            member = f"{url}/v1/groups/{group}/members/m"
            heartbeat = http("POST", member + "/heartbeat", {"member_epoch": 1})
            assert error(heartbeat) == (404, "UNKNOWN_MEMBER_ID")
            assert error(http("DELETE", member)) == (404, "UNKNOWN_MEMBER_ID")
            refused = {
                "member_id": "m",
                "member_epoch": 1,
                "offsets": [{"topic": "nope", "partition": 0, "offset": 0}],
            }
            status, _ = http("POST", f"{url}/v1/groups/{group}/offsets", refused)
            assert status == 404
            joined = http("POST", f"{url}/v1/groups/{group}/members", {"topics": ["__x"]})
            assert error(joined)[0] == 400
    assert listed_groups(cluster) == before


def test_a_group_holds_a_bounded_number_of_members_with_bounded_names(cluster: Cluster) -> None:
    """Unbounded `client_id` and members per group."""
    with SyncAdmin(bootstrap(cluster)) as admin:
        admin.create_topic("crowded", partitions=1, replication_factor=2)
    url = cluster.urls[1] + "/v1/groups/crowd/members"
    bad = {
        "a 256-character client_id": {"topics": ["crowded"], "client_id": "c" * 256},
        "a control character in client_id": {"topics": ["crowded"], "client_id": "a\nb"},
        "1001 topics": {"topics": [f"t{i}" for i in range(1001)]},
        "a 65-character member id": {"topics": ["crowded"], "member_id": "m" * 65},
    }
    for name, body in bad.items():
        assert error(http("POST", url, body)) == (400, "INVALID_REQUEST"), name
    huge = {"topics": ["crowded"], "client_id": "c" * (8 << 20)}  # request limit, or ours
    assert error(http("POST", url, huge)) in {
        (400, "INVALID_REQUEST"),
        (413, "RECORD_LIST_TOO_LARGE"),
    }
    assert "crowd" not in listed_groups(cluster)
    members = []
    try:
        for i in range(DEFAULT_MAX_SIZE):
            body = {"topics": ["crowded"], "member_id": f"m{i}", "session_timeout_ms": 30_000}
            status, joined = http("POST", url, body)
            assert status == 200, joined
            members.append(joined["member_id"])
        extra = {"topics": ["crowded"], "member_id": "one-too-many"}
        for broker in cluster.urls.values():
            status, answer = http("POST", broker + "/v1/groups/crowd/members", extra)
            assert (status, answer["error_code"]) == (409, "GROUP_MAX_SIZE_REACHED")
        again = {"topics": ["crowded"], "member_id": "m0", "session_timeout_ms": 30_000}
        assert http("POST", url, again)[0] == 200  # a retried join is not a new member
        status, described = http("GET", cluster.urls[2] + "/v1/groups/crowd")
        assert status == 200 and len(described["members"]) == DEFAULT_MAX_SIZE
    finally:
        for member in members:
            http("DELETE", f"{url}/{member}")
    assert error(http("GET", cluster.urls[1] + "/v1/groups/crowd")) == (404, "GROUP_ID_NOT_FOUND")
