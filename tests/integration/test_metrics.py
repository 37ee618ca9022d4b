"""Issue 17's metrics and request ids, on a real cluster: every node kind exports exactly the
families docs/metrics.md lists, request histograms move under load on both edges, group lag
matches the group's committed offsets, and a request's id follows it to the broker it was
forwarded to.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.processes import Cluster, http, http_retry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DOC = Path(__file__).parents[2] / "docs" / "metrics.md"
_ROW = re.compile(r"^\| `([a-z_]+)` \| (counter|gauge|histogram) \| ([a-z ]+) \|")


def documented() -> dict[str, set[str]]:
    """docs/metrics.md's table: node kind -> family names (as the parser names them)."""
    kinds: dict[str, set[str]] = {"broker": set(), "controller": set()}
    for line in DOC.read_text().splitlines():
        found = _ROW.match(line)
        if not found:
            continue
        name, kind, nodes = found.groups()
        family = name.removesuffix("_total") if kind == "counter" else name
        for node_kind in ("broker", "controller") if nodes == "every node" else (nodes,):
            kinds[node_kind].add(family)
    return kinds


def scrape(url: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """family -> [(sample name, labels, value)]."""
    with urllib.request.urlopen(url + "/metrics", timeout=20) as response:
        text = response.read().decode()
    return {
        f.name: [(s.name, s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


def value(
    families: dict[str, list[tuple[str, dict[str, str], float]]], sample: str, **labels: str
) -> float:
    family = re.sub(r"_(total|count|sum|bucket)$", "", sample)
    return sum(
        v
        for name, got, v in families.get(family, [])
        if name == sample and all(got.get(k) == want for k, want in labels.items())
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("metrics"), kafka=True, broker_config={"access.log.enabled": True}
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def create_topic(cluster: Cluster, name: str, partitions: int = 3) -> dict[int, int]:
    """The topic, every partition led; partition -> leader."""
    return cluster.create_topic(name, partitions)


def kafka_produce(cluster: Cluster, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=f"k{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0


def test_every_node_exports_the_documented_families_and_nothing_else(cluster: Cluster) -> None:
    create_topic(cluster, "families")
    http("POST", cluster.urls[1] + "/v1/topics/families/records", {"records": [{"value": "a"}]})
    kafka_produce(cluster, "families", 3)
    for url in cluster.urls.values():  # a fetch from every leader, and an error
        for partition in range(3):
            http("GET", url + f"/v1/topics/families/partitions/{partition}/records?offset=0")
        assert http("GET", url + "/v1/topics/no-such-topic")[0] == 404
    status, _ = http(
        "POST",
        cluster.urls[2] + "/v1/groups/families-g/offsets",
        {"offsets": [{"topic": "families", "partition": p, "offset": 0} for p in range(3)]},
    )
    assert status == 204
    expected = documented()
    assert len(expected["broker"]) > 30 and len(expected["controller"]) > 20
    for kind, urls in (("broker", cluster.urls), ("controller", cluster.quorum.urls)):
        for node_id, url in urls.items():
            exported = {
                name
                for name in scrape(url)
                if name.startswith(("kraftlite_", "process_"))
                # the active controller alone has the per-broker lag samples
                and not (
                    kind == "controller" and name == "kraftlite_controller_broker_metadata_lag"
                )
            }
            want = expected[kind] - {"kraftlite_controller_broker_metadata_lag"}
            assert exported == want, (kind, node_id, exported ^ want)


def test_request_histograms_and_errors_move_under_load_on_both_edges(cluster: Cluster) -> None:
    leaders = create_topic(cluster, "load")
    leader = leaders[0]
    url = cluster.urls[leader]
    route = "POST /v1/topics/{topic}/partitions/{partition}/records"
    before = scrape(url)
    for _ in range(20):
        status, _ = http(
            "POST", url + "/v1/topics/load/partitions/0/records", {"records": [{"value": "x"}]}
        )
        assert status == 200
    kafka_produce(cluster, "load", 30)  # 10 to each partition, one of them led here
    assert http("GET", url + "/v1/topics/load/partitions/7/records?offset=0")[0] == 404
    binary = urllib.request.Request(
        url + "/v1/topics/load/partitions/0/records?offset=0",
        headers={"Accept": "application/vnd.kraftlite.batch"},
    )
    with urllib.request.urlopen(binary, timeout=20) as response:
        assert response.status == 200 and response.read()
    status, fetched = http("GET", url + "/v1/topics/load/partitions/0/records?offset=25")
    assert status == 200 and len(fetched["records"]) == 5  # 20 over HTTP, 10 over Kafka
    after = scrape(url)

    def moved(sample: str, **labels: str) -> float:
        return value(after, sample, **labels) - value(before, sample, **labels)

    assert moved("kraftlite_requests_total", edge="http", request=route) == 20
    assert moved("kraftlite_request_duration_seconds_count", edge="http", request=route) == 20
    assert moved("kraftlite_request_duration_seconds_sum", edge="http", request=route) > 0
    assert moved("kraftlite_requests_total", edge="kafka", request="Produce") >= 1
    assert moved("kraftlite_request_duration_seconds_sum", edge="kafka", request="Produce") > 0
    fetch_route = "GET /v1/topics/{topic}/partitions/{partition}/records"
    assert (
        moved(
            "kraftlite_request_errors_total",
            edge="http",
            request=fetch_route,
            error="UNKNOWN_TOPIC_OR_PARTITION",
        )
        == 1
    )
    led_here = sum(1 for p in range(3) if leaders[p] == leader)  # 10 Kafka records each
    assert moved("kraftlite_produced_records_total", topic="load") == 20 + 10 * led_here
    # the binary fetch served every record of partition 0, the JSON fetch the 5 it returned
    assert moved("kraftlite_fetched_records_total", topic="load") == 30 + 5
    assert moved("kraftlite_event_loop_lag_seconds_count") > 0


def test_group_lag_matches_the_committed_offsets(cluster: Cluster) -> None:
    create_topic(cluster, "lagged")
    for partition, count in enumerate((10, 7, 4)):
        status, _ = http(
            "POST",
            cluster.urls[1] + f"/v1/topics/lagged/partitions/{partition}/records",
            {"records": [{"value": "v"}] * count},
        )
        assert status == 200
    committed = {0: 3, 1: 7, 2: 0}
    status, _ = http(
        "POST",
        cluster.urls[3] + "/v1/groups/lag-g/offsets",
        {
            "offsets": [
                {"topic": "lagged", "partition": p, "offset": o} for p, o in committed.items()
            ]
        },
    )
    assert status == 204
    status, answer = http("GET", cluster.urls[1] + "/v1/groups/lag-g/offsets")
    assert status == 200
    expected = {o["partition"]: o["lag"] for o in answer["offsets"]}
    assert expected == {0: 7, 1: 0, 2: 4}

    def exported() -> tuple[dict[int, list[float]], dict[int, float]]:
        lags: dict[int, list[float]] = {}
        committed_seen: dict[int, float] = {}
        for url in cluster.urls.values():
            families = scrape(url)
            for _, labels, v in families.get("kraftlite_consumergroup_lag", []):
                if labels["consumergroup"] == "lag-g":
                    assert labels["topic"] == "lagged"
                    lags.setdefault(int(labels["partition"]), []).append(v)
            for _, labels, v in families.get("kraftlite_consumergroup_committed_offset", []):
                if labels["consumergroup"] == "lag-g":
                    committed_seen[int(labels["partition"])] = v
        return lags, committed_seen

    deadline = time.monotonic() + 20
    while True:  # a leader that did not answer a scrape in time leaves its sample out
        lags, committed_seen = exported()
        if len(lags) == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # exactly one broker (the coordinator) exports each partition's lag
    assert lags == {p: [lag] for p, lag in expected.items()}
    assert committed_seen == committed


def test_a_request_id_follows_a_forwarded_request_into_both_brokers_logs(
    cluster: Cluster,
) -> None:
    leaders = create_topic(cluster, "traced", partitions=1)
    other = next(b for b in cluster.urls if b != leaders[0])
    request = urllib.request.Request(
        cluster.urls[other] + "/v1/topics/traced/partitions/0/records",
        data=b'{"records": [{"value": "x"}]}',
        method="POST",
        headers={"Content-Type": "application/json", "X-Request-Id": "trace-me-4711"},
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        assert response.status == 200
        assert response.headers["X-Request-Id"] == "trace-me-4711"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        holding = {
            broker_id
            for broker_id in cluster.urls
            if '"request_id": "trace-me-4711"' in _log(cluster, broker_id)
            or '"request_id":"trace-me-4711"' in _log(cluster, broker_id)
        }
        if holding == {other, leaders[0]}:
            break
        time.sleep(0.1)
    assert holding == {other, leaders[0]}
    # a request id that is not well formed is replaced, not logged as sent
    bad = urllib.request.Request(
        cluster.urls[other] + "/healthz", headers={"X-Request-Id": "x" * 65}
    )
    with urllib.request.urlopen(bad, timeout=20) as response:
        assert re.fullmatch(r"[0-9a-f]{16}", response.headers["X-Request-Id"])


def _log(cluster: Cluster, broker_id: int) -> str:
    return (cluster.root / f"broker-{broker_id}.log").read_text(errors="replace")


def test_the_controllers_export_their_raft_and_metadata_view(cluster: Cluster) -> None:
    create_topic(cluster, "controlled")
    leader = cluster.quorum.leader()
    views = {node_id: scrape(url) for node_id, url in cluster.quorum.urls.items()}
    active = {n for n, f in views.items() if value(f, "kraftlite_controller_active") == 1}
    assert active == {leader}
    mine = views[leader]
    assert value(mine, "kraftlite_controller_commit_latency_seconds_count") > 0
    assert value(mine, "kraftlite_controller_event_queue_time_seconds_count") > 0
    assert value(mine, "kraftlite_registered_brokers") == 3
    assert value(mine, "kraftlite_fenced_brokers") == 0
    assert value(mine, "kraftlite_offline_partitions") == 0
    lags = {labels["broker"] for _, labels, _ in mine["kraftlite_controller_broker_metadata_lag"]}
    assert lags == {"1", "2", "3"}
    terms = {value(f, "kraftlite_raft_term") for f in views.values()}
    assert len(terms) == 1 and terms.pop() >= 1
    assert value(mine, "kraftlite_partitions") >= 3
    # GET /v1/quorum: the leader knows how far each voter is behind; a follower does not
    status, described = http("GET", cluster.quorum.urls[leader] + "/v1/quorum")
    assert status == 200
    assert all(isinstance(v["lag"], int) and 0 <= v["lag"] < 100 for v in described["voters"])
    follower = next(n for n in cluster.quorum.urls if n != leader)
    status, described = http("GET", cluster.quorum.urls[follower] + "/v1/quorum")
    assert status == 200 and all(v["lag"] is None for v in described["voters"])


def test_a_deleted_topics_series_go_with_it(cluster: Cluster) -> None:
    leaders = create_topic(cluster, "doomed", partitions=1)
    url = cluster.urls[leaders[0]]
    status, _ = http("POST", url + "/v1/topics/doomed/records", {"records": [{"value": "x"}]})
    assert status == 200
    assert value(scrape(url), "kraftlite_produced_records_total", topic="doomed") == 1
    assert http_retry("DELETE", url + "/v1/topics/doomed")[0] == 204
    deadline = time.monotonic() + 20
    while True:
        left = [
            (broker_id, name)
            for broker_id, broker_url in cluster.urls.items()
            for name, samples in scrape(broker_url).items()
            if any(labels.get("topic") == "doomed" for _, labels, _ in samples)
        ]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == []
