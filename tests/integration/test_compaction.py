"""Log compaction on a real cluster (issue 26): topics created and altered with
`cleanup.policy=compact` on both edges, each replica's cleaner keeps the last record of
every key at the offset it was written at, drops deleted keys after `delete.retention.ms`,
and readers on both edges step over the gaps it leaves (a fetch from a cleaned offset gets
the next record after it, as in Kafka); records without a key are refused on produce.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kraftlite.client import Admin
from kraftlite.client import Consumer as PythonConsumer
from kraftlite.protocol.partitioner import partition_for_key
from tests.harness.observe import gauge
from tests.harness.processes import FAST_SESSIONS, Cluster, http, http_retry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CLEANS_EAGERLY = {  # a pass as soon as anything is dirty
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("compaction"),
        controller_config=FAST_SESSIONS,
        broker_config={"log.cleaner.backoff.ms": 200},
        kafka=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def create_topic(cluster: Cluster, name: str, configs: dict[str, str]) -> None:
    status, answer = http_retry(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": name, "partitions": 1, "replication_factor": 3, "configs": configs},
    )
    assert status == 201, answer
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status, described = http("GET", cluster.urls[2] + f"/v1/topics/{name}")
        if status == 200 and all(p["high_watermark"] is not None for p in described["partitions"]):
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} has no leader")


def produce_rounds(
    cluster: Cluster, topic: str, rounds: list[list[tuple[bytes, bytes | None]]]
) -> list[tuple[int, bytes, bytes | None]]:
    """Each round as one batch (flushed before the next); (offset, key, value) of each."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    written: list[tuple[int, bytes, bytes | None]] = []

    def delivered(error: KafkaError | None, message: Any) -> None:
        assert error is None, error
        written.append((message.offset(), message.key(), message.value()))

    for records in rounds:
        for key, value in records:
            producer.produce(topic, key=key, value=value, on_delivery=delivered)
        assert producer.flush(30) == 0
    return sorted(written)


def read_all(cluster: Cluster, topic: str, *, via: int = 1) -> list[tuple[int, str, str | None]]:
    """Every record of partition 0 over HTTP, (offset, key, value), following next_offset."""
    offset, records = 0, []
    while True:
        status, answer = http_retry(
            "GET", cluster.urls[via] + f"/v1/topics/{topic}/partitions/0/records?offset={offset}"
        )
        assert status == 200, answer
        records += [(r["offset"], r["key"], r["value"]) for r in answer["records"]]
        if answer["next_offset"] >= answer["high_watermark"]:
            return records
        assert answer["next_offset"] > offset, answer  # a gap is stepped over, never a loop
        offset = answer["next_offset"]


def cleaner_passes(cluster: Cluster) -> dict[int, float]:
    passes = {}
    for broker_id, url in cluster.urls.items():
        if not cluster.processes[broker_id].alive:
            continue
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        found = re.search(r"^kraftlite_log_cleaner_passes_total ([0-9.e+]+)$", text, re.M)
        passes[broker_id] = float(found.group(1)) if found else 0.0
    return passes


async def python_consumer_reads(
    cluster: Cluster, topic: str, count: int
) -> list[tuple[int, str, str | None]]:
    """What kraftlite's own consumer reads of partition 0 from its start."""
    bootstrap = ",".join(cluster.urls.values())
    async with PythonConsumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        got: list[tuple[int, str, str | None]] = []
        for _ in range(30):
            got += [
                (r.offset, r.key.decode(), None if r.value is None else r.value.decode())
                for r in await consumer.poll(timeout_ms=500)
            ]
            if len(got) >= count:
                break
        return got


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def expected_after_cleaning(
    written: list[tuple[int, bytes, bytes | None]],
) -> list[tuple[int, str, str | None]]:
    """The last record of each key, its tombstone gone, and the newest batch whole (here
    the last record, alone in its round)."""
    last: dict[bytes, tuple[int, bytes, bytes | None]] = {}
    for record in written:
        last[record[1]] = record
    kept = [r for r in last.values() if r[2] is not None or r == written[-1]]
    return sorted(
        (offset, key.decode(), None if value is None else value.decode())
        for offset, key, value in kept
    )


def test_every_replica_keeps_the_last_record_of_each_key_at_its_offset(cluster: Cluster) -> None:
    topic = "compacted-state"
    create_topic(cluster, topic, CLEANS_EAGERLY)
    keys = [f"k{i}".encode() for i in range(10)]
    rounds = [[(key, f"v{n}-{key.decode()}".encode()) for key in keys] for n in range(20)]
    rounds.append([(b"k3", None)])  # a tombstone: k3 is deleted
    rounds.append([(b"tail", b"last")])  # the newest batch, which no pass touches
    written = produce_rounds(cluster, topic, rounds)
    assert [offset for offset, _, _ in written] == list(range(len(written)))
    expected = expected_after_cleaning(written)
    assert len(expected) == 10  # nine keys and the tail

    wait_for(lambda: read_all(cluster, topic) == expected, 30, "the leader's log compacted")
    wait_for(lambda: min(cleaner_passes(cluster).values()) > 0, 30, "every replica cleaned")

    # a Kafka consumer from the beginning sees the same records at the same offsets
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "compacted-readers"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[tuple[int, str, str | None]] = []
        deadline = time.monotonic() + 30
        while len(seen) < len(expected):
            assert time.monotonic() < deadline, seen
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            value = message.value()
            seen.append(
                (
                    message.offset(),
                    message.key().decode(),
                    None if value is None else value.decode(),
                )
            )
        assert seen == expected
        # from an offset the cleaner removed: the next record after it, on both edges
        removed = expected[0][0] - 1
        consumer.assign([TopicPartition(topic, 0, removed)])
        message = None
        while message is None:
            assert time.monotonic() < deadline
            message = consumer.poll(0.5)
        assert message.error() is None and message.offset() == expected[0][0]
    finally:
        consumer.close()
    status, answer = http(
        "GET", cluster.urls[3] + f"/v1/topics/{topic}/partitions/0/records?offset={removed}"
    )
    assert status == 200 and answer["records"][0]["offset"] == expected[0][0], answer
    assert asyncio.run(python_consumer_reads(cluster, topic, len(expected))) == expected

    # each replica cleaned its own log: whoever leads next serves the same compacted log
    leader = http("GET", cluster.urls[1] + f"/v1/topics/{topic}")[1]["partitions"][0]["leader"]
    cluster.processes[leader].kill()
    try:
        other = next(b for b in cluster.urls if b != leader)
        wait_for(
            lambda: (
                http("GET", cluster.urls[other] + f"/v1/topics/{topic}")[1]["partitions"][0][
                    "leader"
                ]
                not in {leader, None, -1}
            ),
            30,
            "a new leader",
        )
        # its own cleaner may not have taken the tombstone yet (it cleans by its own high
        # watermark, which a new leader catches up first), but every key reads the same
        served = read_all(cluster, topic, via=other)
        assert {key: value for _, key, value in served} | {"k3": None} == {
            key: value for _, key, value in expected
        } | {"k3": None}
        assert set(expected) <= set(served)
        wait_for(lambda: read_all(cluster, topic, via=other) == expected, 30, "cleaned alike")
    finally:
        cluster.start_broker(leader)


def test_records_without_a_key_are_refused_on_both_edges(cluster: Cluster) -> None:
    topic = "compacted-keys-only"
    create_topic(cluster, topic, CLEANS_EAGERLY)
    status, answer = http(
        "POST",
        cluster.urls[1] + f"/v1/topics/{topic}/partitions/0/records",
        {"records": [{"key": "a", "value": "1"}, {"value": "no key"}]},
    )
    assert status == 400 and answer["error_code"] == "INVALID_RECORD", answer
    assert "without key" in answer["message"], answer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    errors: list[KafkaError] = []
    producer.produce(topic, value=b"no key", on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0
    producer.produce(topic, key=b"k", value=b"keyed", on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0
    assert [e.code() if e else None for e in errors] == [KafkaError.INVALID_RECORD, None]
    assert [r[1:] for r in read_all(cluster, topic)] == [("k", "keyed")]  # nothing else written


def test_a_topic_altered_to_compact_is_cleaned_and_its_keyless_records_dropped(
    cluster: Cluster,
) -> None:
    """IncrementalAlterConfigs (librdkafka's admin client) turns compaction on; the records
    written without keys before it are dropped, as Kafka's cleaner drops them."""
    topic = "becomes-compacted"
    create_topic(cluster, topic, {})
    written = produce_rounds(
        cluster,
        topic,
        [[(b"a", b"1"), (b"b", b"1")], [(None, b"keyless")], [(b"a", b"2")], [(b"z", b"tail")]],  # type: ignore[list-item]
    )
    assert len(read_all(cluster, topic)) == len(written)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in CLEANS_EAGERLY.items()
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(30)
    wait_for(
        lambda: (
            [r[1:] for r in read_all(cluster, topic)] == [("b", "1"), ("a", "2"), ("z", "tail")]
        ),
        30,
        "the old records cleaned",
    )
    # and it is compacted now: no more records without a key
    status, answer = http(
        "POST",
        cluster.urls[2] + f"/v1/topics/{topic}/records",
        {"records": [{"value": "no key"}]},
    )
    assert status == 400 and answer["error_code"] == "INVALID_RECORD", answer


def test_compaction_configs_are_checked_on_both_edges(cluster: Cluster) -> None:
    status, answer = http(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": "bad-compaction", "partitions": 1, "configs": {"cleanup.policy": "compress"}},
    )
    assert status == 400 and answer["error_code"] == "INVALID_CONFIG", answer
    status, answer = http(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {
            "name": "bad-compaction",
            "partitions": 1,
            "configs": {"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "99"},
        },
    )
    assert status == 400 and answer["error_code"] == "INVALID_CONFIG", answer
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    from confluent_kafka.admin import NewTopic  # noqa: PLC0415

    futures = admin.create_topics(
        [
            NewTopic("bad-ratio", 1, 1, config={"min.cleanable.dirty.ratio": "2"}),
            NewTopic("good-compact", 1, 1, config={"cleanup.policy": "compact,delete"}),
        ]
    )
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        futures["bad-ratio"].result(30)
    futures["good-compact"].result(30)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "good-compact")])
    [configs] = [f.result(30) for f in described.values()]
    assert configs["cleanup.policy"].value == "compact,delete"
    assert configs["min.cleanable.dirty.ratio"].value == "0.5"


def test_a_compacted_topic_reads_as_a_table_from_any_broker(cluster: Cluster) -> None:
    """GET /v1/topics/{t}/keys/{key} (issue 26): each key's latest value from the key index
    of its partition's leader, relayed there from any broker; 404 for a key never written or
    deleted by a tombstone; any bytes as a key with key_encoding=base64."""
    topic = "profiles"
    status, answer = http_retry(
        "POST",
        cluster.urls[1] + "/v1/topics",
        {"name": topic, "partitions": 3, "replication_factor": 3, "configs": CLEANS_EAGERLY},
    )
    assert status == 201, answer
    rounds: list[list[tuple[bytes, bytes | None]]] = [
        [(b"user-%d" % k, b"v%d" % n) for k in range(12)] for n in range(3)
    ]
    rounds.append([(b"user-5", None), (b"\xff\x00binary", b"raw")])
    producer = Producer(  # Kafka's (Java's) default partitioner, which the table follows
        {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "partitioner": "murmur2_random"}
    )
    for records in rounds:
        for key, value in records:
            producer.produce(topic, key=key, value=value)
        assert producer.flush(30) == 0

    def get(key: str, via: int, query: str = "") -> tuple[int, Any]:
        return http("GET", cluster.urls[via] + f"/v1/topics/{topic}/keys/{key}{query}")

    for k in range(12):
        for via in cluster.urls:  # every broker answers: the leader itself, or relayed
            status, answer = get(f"user-{k}", via)
            if k == 5:
                assert (status, answer["error_code"]) == (404, "RESOURCE_NOT_FOUND"), answer
            else:
                assert status == 200, answer
                assert (answer["key"], answer["value"]) == (f"user-{k}", "v2"), answer
    status, answer = get("user-99", 2)
    assert (status, answer["error_code"]) == (404, "RESOURCE_NOT_FOUND"), answer
    binary = b"\xff\x00binary"
    encoded = base64.urlsafe_b64encode(binary).decode()
    status, answer = get(encoded, 3, "?key_encoding=base64")  # base64url: no "/" in a path
    assert status == 200 and answer["value"] == "raw", answer
    status, answer = get(encoded.rstrip("="), 2, "?key_encoding=base64")  # unpadded, as usual
    assert status == 200 and answer["value"] == "raw", answer
    status, answer = get("not*base64", 1, "?key_encoding=base64")
    assert (status, answer["error_code"]) == (400, "INVALID_REQUEST"), answer
    status, answer = http("GET", cluster.urls[1] + "/v1/topics/no-such-topic/keys/a")
    assert (status, answer["error_code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION"), answer
    create_topic(cluster, "not-compacted", {})
    status, answer = http("GET", cluster.urls[1] + "/v1/topics/not-compacted/keys/a")
    assert (status, answer["error_code"]) == (400, "INVALID_REQUEST"), answer

    # the Python client and the CLI
    async def through_the_client() -> list[dict[str, Any] | None]:
        async with Admin(",".join(cluster.urls.values())) as admin:
            return [await admin.latest_value(topic, k) for k in (b"user-3", b"user-5", binary)]

    user_3, user_5, raw = asyncio.run(through_the_client())
    assert user_3 is not None and (user_3["key"], user_3["value"]) == (b"user-3", b"v2")
    assert user_5 is None and raw is not None and raw["value"] == b"raw"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "kraftlite", "topics", "get", *args]
        return subprocess.run(
            [*command, "--bootstrap", cluster.urls[2]],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    got = cli(topic, "user-7")
    assert (got.returncode, got.stdout) == (0, "v2\n"), got.stderr
    got = cli(topic, "user-5")
    assert got.returncode == 1 and "no value" in got.stderr, got

    # the table, a page at a time, its three partitions merged in key order, from any broker
    live = {f"user-{k}": "v2" for k in range(12) if k != 5}
    for via in cluster.urls:
        rows: list[dict[str, Any]] = []
        after = None
        for _ in range(20):
            query = "?limit=4" + (f"&after={after}" if after else "")
            status, page = http("GET", cluster.urls[via] + f"/v1/topics/{topic}/table{query}")
            assert status == 200, page
            assert len(page["rows"]) <= 4
            rows += page["rows"]
            after = page["next"]
            if after is None:
                break
        utf8 = [(r["key"], r["value"]) for r in rows if "key_encoding" not in r]
        assert utf8 == sorted(live.items()), utf8  # each live key once, in order, no deleted one
        [binary_row] = [r for r in rows if "key_encoding" in r]  # not UTF-8: base64
        assert base64.b64decode(binary_row["key"]) == binary
    by_partition = []
    for index in range(3):
        status, page = http(
            "GET", cluster.urls[1] + f"/v1/topics/{topic}/partitions/{index}/table?limit=1000"
        )
        assert status == 200 and page["next"] is None, page
        assert {r["partition"] for r in page["rows"]} <= {index}
        by_partition += page["rows"]
    assert sorted(r["key"] for r in by_partition) == sorted(r["key"] for r in rows)
    for bad in ("?limit=0", "?limit=1001", "?after=bad*cursor", "?after=AmFiYw"):
        status, answer = http("GET", cluster.urls[2] + f"/v1/topics/{topic}/table{bad}")
        assert (status, answer["error_code"]) == (400, "INVALID_REQUEST"), (bad, answer)
    status, answer = http("GET", cluster.urls[1] + "/v1/topics/not-compacted/table")
    assert (status, answer["error_code"]) == (400, "INVALID_REQUEST"), answer

    async def the_client_table() -> list[tuple[bytes, bytes]]:
        async with Admin(",".join(cluster.urls.values())) as admin:
            return [(r["key"], r["value"]) async for r in admin.table(topic, page_size=3)]

    table = asyncio.run(the_client_table())
    assert table == sorted([(k.encode(), v.encode()) for k, v in live.items()] + [(binary, b"raw")])
    listed = subprocess.run(
        [sys.executable, "-m", "kraftlite", "topics", "table", topic, "--limit", "3",
         "--bootstrap", cluster.urls[3]],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [f"{k}\t{v}" for k, v in sorted(live.items())[:3]]


def test_the_offsets_topic_is_compacted_and_a_new_coordinator_loads_live_offsets_only(
    cluster: Cluster,
) -> None:
    """Issue 26: `__consumer_offsets` is compacted, each replica's cleaner drops superseded
    commits (its per-partition metrics show it), and the coordinator that takes the group
    over replays what is left, not every commit ever made."""
    create_topic(cluster, "committed-src", {})
    commits = 300
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "compacting",
            "enable.auto.commit": False,
        }
    )
    try:
        for offset in range(commits):
            consumer.commit(
                offsets=[TopicPartition("committed-src", 0, offset)], asynchronous=False
            )
    finally:
        consumer.close()
    # (only brokers see the topic itself: its cleaner's metrics show it compacted)
    index = partition_for_key(b"compacting", 10)
    at = {"topic": "__consumer_offsets", "partition": str(index)}
    holders = [b for b, p in cluster.processes.items() if p.alive]

    def replicated() -> bool:
        """Every replica holds every commit below its high watermark (what it may clean)."""
        ends = {
            (
                gauge(cluster.urls[b], "kraftlite_log_end_offset", labels=at),
                gauge(cluster.urls[b], "kraftlite_high_watermark", labels=at),
            )
            for b in holders
        }
        return len(ends) == 1 and None not in (end := ends.pop()) and end[0] == end[1] >= commits

    wait_for(replicated, 30, "every replica has every commit below its high watermark")
    ready = time.time()

    def cleaned_on_every_replica() -> bool:
        """Each replica's cleaner began a round since then (so its figures are fresh), has
        made a pass, and leaves under half of the cleanable range dirty."""
        for broker_id in holders:
            asked = time.time()
            url = cluster.urls[broker_id]
            round_ = gauge(url, "kraftlite_log_cleaner_seconds_since_last_round")
            since = gauge(url, "kraftlite_log_cleaner_seconds_since_last_pass", labels=at)
            ratio = gauge(url, "kraftlite_log_cleaner_dirty_ratio", labels=at)
            if round_ is None or asked - round_ <= ready:
                return False
            if since is None or ratio is None or ratio >= 0.5:
                return False
        return True

    wait_for(cleaned_on_every_replica, 60, "every replica's cleaner compacted the offsets")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    [description] = admin.describe_consumer_groups(["compacting"]).values()
    coordinator = description.result(timeout=10).coordinator.id
    others = [b for b in holders if b != coordinator]
    seen = {b: cluster.processes[b].log_path.stat().st_size for b in others}
    cluster.processes[coordinator].terminate()  # a controlled shutdown moves the leadership
    try:

        def new_coordinator_loaded() -> list[int]:
            """The records replayed by a load of the group's partition since then."""
            records = []
            for b in others:
                with cluster.processes[b].log_path.open("rb") as log:
                    log.seek(seen[b])
                    for line in log:
                        with contextlib.suppress(ValueError):
                            event = json.loads(line)
                            if (event.get("event"), event.get("partition")) == (
                                "group_offsets_loaded",
                                index,
                            ):
                                records.append(int(event["records"]))
            return records

        wait_for(new_coordinator_loaded, 60, "another broker took the group over")
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "compacting"})
        try:
            [committed] = consumer.committed([TopicPartition("committed-src", 0)], timeout=30)
        finally:
            consumer.close()
        assert committed.offset == commits - 1
        # the last commit, the old coordinator's marker (groups are recorded: issue 28), and at
        # most the newest batch the cleaner leaves alone
        assert max(new_coordinator_loaded()) <= 3 < commits
    finally:
        cluster.start_broker(coordinator)
        cluster.wait_ready([coordinator])
