"""Static group membership (KIP-345; `group.instance.id`) with real Kafka clients against a
real cluster (issue 25; librdkafka's integration test 0102 "static group rebalance"): a
static member that is closed (it sends no LeaveGroup) and started again with the same
instance id within its session timeout gets its partitions back and the other member is
never revoked, in a classic group (librdkafka and kafka-python) and in a KIP-848 one
(`group.protocol=consumer`, where closing is a leave with epoch -2). A static member that
stays away loses its partitions once its session times out, and only then; a second
consumer with an instance id in use fences the first (classic: FENCED_INSTANCE_ID) or is
refused (KIP-848: UNRELEASED_INSTANCE_ID).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from tests.harness.processes import FAST_SESSIONS, Cluster, http

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # kafka-python 3.0.12 reads its schemas with a deprecated importlib call
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

PARTITIONS = 4
CLASSIC_SESSION_MS = 6_000  # group.min.session.timeout.ms: the shortest a classic member may ask
KIP848_SESSION_MS = 10_000  # the coordinator's session for KIP-848 members (GroupSettings)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("static"), controller_config=FAST_SESSIONS, kafka=True
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def make_topic(cluster: Cluster, name: str) -> None:
    cluster.create_topic(name, partitions=PARTITIONS, replication_factor=3)
    values = [f"{name}-{i}" for i in range(40)]
    status, answer = http(
        "POST",
        cluster.urls[1] + f"/v1/topics/{name}/records",
        {"records": [{"key": v, "value": v} for v in values]},
    )
    assert status == 200 and "errors" not in answer, answer


@dataclass
class Member:
    """A librdkafka consumer and what its rebalance callbacks were told, in order."""

    consumer: Consumer
    events: list[tuple[str, frozenset[int]]] = field(default_factory=list)
    closed: bool = False

    def close(self) -> None:
        """Close it (once; a consumer a fatal error stopped may refuse to close cleanly)."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(KafkaException):
                self.consumer.close()

    def poll(self) -> KafkaError | None:
        """One poll; the error it returned, if any (records are fine and dropped)."""
        message = self.consumer.poll(0.05)
        if message is not None and message.error() is not None:
            return message.error()  # type: ignore[no-any-return]
        return None

    def owned(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.consumer.assignment())

    def revoked(self) -> list[frozenset[int]]:
        return [parts for kind, parts in self.events if kind == "revoke" and parts]


def rdkafka_member(
    cluster: Cluster, group: str, topic: str, instance: str, **settings: Any
) -> Member:
    config = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": group,
        "group.instance.id": instance,
        "client.id": f"{group}-{instance}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **settings,
    }
    member = Member(Consumer(config))

    def on_assign(_: Consumer, partitions: list[Any]) -> None:
        member.events.append(("assign", frozenset(p.partition for p in partitions)))

    def on_revoke(_: Consumer, partitions: list[Any]) -> None:
        member.events.append(("revoke", frozenset(p.partition for p in partitions)))

    member.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    return member


def poll_until(
    members: list[Member], done: Callable[[], bool], timeout_s: float, what: str
) -> float:
    """Poll every member until `done`; the seconds it took. Any error a poll returns
    fails the test."""
    started = time.monotonic()
    while not done():
        for member in members:
            error = member.poll()
            assert error is None, error
        assert time.monotonic() - started < timeout_s, what
    return time.monotonic() - started


def poll_for(members: list[Member], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for member in members:
            error = member.poll()
            assert error is None, error


def shared_out(members: list[Member]) -> bool:
    """Every member holds some partitions and every partition is held once."""
    owned = [m.owned() for m in members]
    return all(owned) and sorted(p for o in owned for p in o) == list(range(PARTITIONS))


def classic_settings() -> dict[str, Any]:
    return {"session.timeout.ms": CLASSIC_SESSION_MS, "heartbeat.interval.ms": 500}


def test_librdkafka_classic_static_restart_keeps_the_other_members_partitions(
    cluster: Cluster,
) -> None:
    """librdkafka's 0102 "consumer restart", then "session.timeout.ms member eviction"."""
    group, topic = "g-static-classic", "static-classic"
    make_topic(cluster, topic)
    a = rdkafka_member(cluster, group, topic, "a", **classic_settings())
    # a alone first, so a leads: a restarting leader rebalances (classic.py rule 8)
    poll_until([a], lambda: a.owned() == frozenset(range(PARTITIONS)), 60, "a alone")
    b = rdkafka_member(cluster, group, topic, "b", **classic_settings())
    restarted: Member | None = None
    try:
        poll_until([a, b], lambda: shared_out([a, b]), 60, "a first generation with both")
        a_owned, b_owned = a.owned(), b.owned()
        settled = len(a.events)
        # DescribeGroups names each member's group.instance.id
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(30).members
        assert sorted(m.group_instance_id for m in described) == ["a", "b"]

        b.close()  # a static member sends no LeaveGroup: a restart
        restarted = rdkafka_member(cluster, group, topic, "b", **classic_settings())
        took = poll_until(
            [a, restarted], lambda: bool(restarted.owned()), 30, "the restarted member's share"
        )
        assert took < CLASSIC_SESSION_MS / 1000  # not by a session timeout and a rebalance
        assert restarted.owned() == b_owned
        poll_for([a, restarted], 3)  # nothing follows either
        assert a.events[settled:] == [] and a.owned() == a_owned
        assert [kind for kind, _ in restarted.events] == ["assign"]

        restarted.close()  # away for good: its session ends, then the group rebalances
        took = poll_until([a], lambda: a.owned() == frozenset(range(PARTITIONS)), 30, "eviction")
        assert took > CLASSIC_SESSION_MS / 1000 - 2.5, took  # not at once: no LeaveGroup
        assert [kind for kind, _ in a.events[settled:]] == ["revoke", "assign"]
        assert a.revoked()[-1] == a_owned  # one rebalance, after the session
    finally:
        for member in (a, b, restarted):
            if member is not None:
                member.close()


def test_librdkafka_classic_duplicate_instance_fences_the_older_member(
    cluster: Cluster,
) -> None:
    """librdkafka's 0102 do_test_fenced_member_classic: the newer consumer with an instance
    id takes the older one's place; the older one's next request is FENCED_INSTANCE_ID, a
    fatal error for it; the third member goes on."""
    group, topic = "g-static-fence", "static-fence"
    make_topic(cluster, topic)
    one = rdkafka_member(cluster, group, topic, "one", **classic_settings())
    older = rdkafka_member(cluster, group, topic, "two", **classic_settings())
    newer: Member | None = None
    try:
        poll_until([one, older], lambda: shared_out([one, older]), 60, "both assigned")
        older_owned = older.owned()
        newer = rdkafka_member(cluster, group, topic, "two", **classic_settings())
        deadline = time.monotonic() + 30
        fatal = None
        while fatal is None or not newer.owned():
            for member in (one, newer):
                error = member.poll()
                assert error is None, error
            error = older.poll() if fatal is None else None
            if error is not None:
                assert error.code() == KafkaError._FATAL, error
                fatal = error
            assert time.monotonic() < deadline, (fatal, newer.owned())
        # librdkafka's text for FENCED_INSTANCE_ID (82)
        assert "fenced by other consumer with same group.instance.id" in fatal.str(), fatal
        assert newer.owned() == older_owned
    finally:
        for member in (one, older, newer):
            if member is not None:
                member.close()


def test_librdkafka_kip848_static_restart_takes_its_assignment_back(cluster: Cluster) -> None:
    """group.protocol=consumer: closing is a ConsumerGroupHeartbeat with epoch -2, which
    keeps the member's assignment for its session; a new consumer with its instance id takes
    it over and the other member holds on to its partitions. A second consumer with an
    instance id that an active member holds is refused: UNRELEASED_INSTANCE_ID (fatal)."""
    group, topic = "g-static-848", "static-848"
    make_topic(cluster, topic)
    settings = {"group.protocol": "consumer"}
    a = rdkafka_member(cluster, group, topic, "a", **settings)
    b = rdkafka_member(cluster, group, topic, "b", **settings)
    restarted: Member | None = None
    intruder: Member | None = None
    try:
        poll_until([a, b], lambda: shared_out([a, b]), 60, "both assigned")
        poll_for([a, b], 2)  # every revocation of the first round done
        a_owned, b_owned = a.owned(), b.owned()
        settled = len(a.revoked())
        b.close()  # a leave with epoch -2
        poll_for([a], 2.5)  # a few of a's heartbeats: b's partitions stay b's meanwhile
        assert a.owned() == a_owned
        restarted = rdkafka_member(cluster, group, topic, "b", **settings)
        poll_until(
            [a, restarted], lambda: bool(restarted.owned()), 30, "the restarted member's share"
        )
        assert restarted.owned() == b_owned
        poll_for([a, restarted], 3)
        assert a.revoked()[settled:] == [] and a.owned() == a_owned

        intruder = rdkafka_member(cluster, group, topic, "a", **settings)
        deadline = time.monotonic() + 30
        while True:
            poll_for([a, restarted], 0.1)
            error = intruder.poll()
            if error is not None:
                assert error.code() == KafkaError._FATAL, error
                # librdkafka's text for UNRELEASED_INSTANCE_ID (111)
                assert "instance ID is still used by another member" in error.str(), error
                break
            assert time.monotonic() < deadline, "the intruder was never refused"
        poll_for([a, restarted], 2)
        assert a.revoked()[settled:] == []
        assert (a.owned(), restarted.owned()) == (a_owned, b_owned)

        restarted.close()  # epoch -2 again, and no one comes back: its session (10 s) ends
        took = poll_until([a], lambda: a.owned() == frozenset(range(PARTITIONS)), 30, "eviction")
        assert took > KIP848_SESSION_MS / 1000 - 2.5, took
        assert a.revoked()[settled:] == []  # (it only gained)
    finally:
        for member in (a, b, restarted, intruder):
            if member is not None:
                member.close()


def test_kafka_python_static_restart_keeps_the_other_members_partitions(
    cluster: Cluster,
) -> None:
    """kafka-python 3.0.12 (JoinGroup v7 with group_instance_id, no LeaveGroup on close)."""
    from kafka import ConsumerRebalanceListener, KafkaConsumer  # noqa: PLC0415

    group, topic = "g-static-kp", "static-kp"
    make_topic(cluster, topic)

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.events: list[tuple[str, frozenset[int]]] = []

        def on_partitions_revoked(self, revoked: Any) -> None:
            self.events.append(("revoke", frozenset(tp.partition for tp in revoked)))

        def on_partitions_assigned(self, assigned: Any) -> None:
            self.events.append(("assign", frozenset(tp.partition for tp in assigned)))

    def start(instance: str) -> tuple[KafkaConsumer, Listener]:
        consumer = KafkaConsumer(
            bootstrap_servers=cluster.bootstrap.split(","),
            group_id=group,
            group_instance_id=instance,
            client_id=f"kp-{instance}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=CLASSIC_SESSION_MS,
            heartbeat_interval_ms=500,
        )
        listener = Listener()
        consumer.subscribe([topic], listener=listener)
        return consumer, listener

    def owned(consumer: KafkaConsumer) -> frozenset[int]:
        return frozenset(tp.partition for tp in consumer.assignment())

    def poll_all(
        consumers: list[KafkaConsumer], done: Callable[[], bool], timeout_s: float
    ) -> float:
        """Poll every consumer, each from a thread of its own and with a long timeout, until
        `done()`; how long it took. kafka-python 3.0.12 drops a JoinGroup answer that arrives
        while no poll waits for it (join_group_async starts a new join when the last one is
        done), and a leader's new join rebalances a Stable group again, as in Kafka: polled
        in turn from one thread with short timeouts, the two members kept the group
        rebalancing until the test timed out."""
        stop = threading.Event()

        def keep_polling(consumer: KafkaConsumer) -> None:
            while not stop.is_set():
                consumer.poll(timeout_ms=500)

        with ThreadPoolExecutor(len(consumers)) as pool:
            polling = [pool.submit(keep_polling, consumer) for consumer in consumers]
            started = time.monotonic()
            try:
                while not done():
                    assert time.monotonic() - started < timeout_s, [
                        owned(consumer) for consumer in consumers
                    ]
                    time.sleep(0.02)
                return time.monotonic() - started
            finally:
                stop.set()
                for future in polling:
                    future.result()

    a, a_listener = start("a")
    # a alone first, so a leads: a restarting leader rebalances (classic.py rule 8)
    poll_all([a], lambda: len(owned(a)) == PARTITIONS, 60)
    b, _ = start("b")
    try:
        poll_all(
            [a, b],
            # kafka-python 3 updates assignment() before it calls the listener (asynchronously),
            # so the rebalance has settled once a's listener has heard of what a owns
            lambda: (
                bool(owned(a))
                and bool(owned(b))
                and len(owned(a) | owned(b)) == PARTITIONS
                and a_listener.events[-1:] == [("assign", owned(a))]
            ),
            60,
        )
        a_owned, b_owned = owned(a), owned(b)
        settled = len(a_listener.events)
        b.close()
        b, _ = start("b")
        took = poll_all([a, b], lambda: bool(owned(b)), 30)
        assert took < CLASSIC_SESSION_MS / 1000
        assert owned(b) == b_owned
        quiet_until = time.monotonic() + 3
        poll_all([a, b], lambda: time.monotonic() > quiet_until, 10)
        assert a_listener.events[settled:] == [] and owned(a) == a_owned
    finally:
        a.close()
        b.close()
