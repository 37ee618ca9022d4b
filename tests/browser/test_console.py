"""The web console in a real browser against a real cluster (3 controllers, 3 brokers with
Kafka listeners, each its own process): every page loads without a console error and shows
the cluster, its topics and partitions, a produced message (an HTML-looking one as text),
a group's lag; creating a topic through the UI takes effect; a controller's console shows
what a controller knows and sends the rest to the brokers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Watched
from tests.harness.observe import wait_for_brokers_metadata
from tests.harness.processes import Cluster, http, http_retry

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
XSS = '<img src=x onerror="window.__pwned=1">'
JSON_VALUE = '{"order": 7, "items": ["tea", "cake"]}'


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("console"), kafka=True)
    running.start()
    try:
        url = running.urls[1]
        status, answer = http_retry("POST", url + "/v1/topics", {"name": "orders", "partitions": 3})
        assert status == 201, answer
        records = [
            {"key": "k-json", "value": JSON_VALUE, "partition": 0},
            {"key": "k-xss", "value": XSS, "headers": {"source": "test"}, "partition": 0},
            {"key": "k-text", "value": "plain text", "partition": 0},
        ]
        status, answer = http("POST", url + "/v1/topics/orders/records", {"records": records})
        assert status == 200 and "errors" not in answer, answer
        commit = {"offsets": [{"topic": "orders", "partition": 0, "offset": 1}]}
        status, answer = http("POST", url + "/v1/groups/billing/offsets", commit)
        assert status == 204, answer
        yield running
    finally:
        running.stop()


def open_page(watched: Watched, url: str, hash_: str = "#/") -> Any:
    page = watched.page
    page.goto(f"{url}/ui/{hash_}")
    return page


def test_overview_shows_the_cluster_and_every_broker(cluster: Cluster, watched: Watched) -> None:
    page = open_page(watched, cluster.urls[2])  # any broker serves it
    for broker_id, kafka in cluster.kafka_addresses.items():
        row = page.locator(f'tr[data-broker="{broker_id}"]')
        row.wait_for()
        assert kafka in row.locator("td.kafka").inner_text()
        assert cluster.urls[broker_id] in row.inner_text()
    page.locator('[data-stat="cluster-id"] .stat-value').wait_for()
    assert page.locator('[data-stat="cluster-id"] .stat-value').inner_text() != "—"
    assert page.locator('[data-stat="under-replicated"] .stat-value').inner_text() == "0"
    assert page.locator("#node").inner_text() == "broker"
    assert page.get_by_text("Controller quorum").is_visible()


def test_topics_page_lists_the_topic_with_its_figures(cluster: Cluster, watched: Watched) -> None:
    page = open_page(watched, cluster.urls[1], "#/topics")
    row = page.locator('tr[data-topic="orders"]')
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    assert cells[:3] == ["orders", "3", "3"]
    page.wait_for_function(
        "() => !document.querySelector('tr[data-topic=\"orders\"] td:nth-child(4)')"
        ".textContent.includes('—')"
    )  # its size, from the brokers' figures
    page.fill("#topic-filter", "no-such")
    page.get_by_text("No topic matches.").wait_for()


def test_topic_page_shows_the_partition_table(cluster: Cluster, watched: Watched) -> None:
    page = open_page(watched, cluster.urls[3], "#/topics/orders")
    page.locator('tr[data-partition="2"]').wait_for()
    assert page.locator("tr[data-partition]").count() == 3
    first = page.locator('tr[data-partition="0"] td').all_inner_texts()
    assert first[0] == "0"
    assert sorted(first[2].split(", ")) == ["1", "2", "3"]  # replicas
    assert first[5] == "3"  # the high watermark: three records
    page.wait_for_function(
        "() => document.querySelector('tr[data-partition=\"0\"] td:nth-child(7)')"
        ".textContent.endsWith('B')"
    )  # its size
    assert page.locator("svg.spark").count() == 2


def test_a_compacted_topics_page_shows_its_cleaner(cluster: Cluster, watched: Watched) -> None:
    """Issue 26: the cleanup policy, and each partition's compaction state from its
    leader's cleaner (the dirty share, and when it last cleaned)."""
    body = {"name": "profiles", "partitions": 2, "configs": {"cleanup.policy": "compact"}}
    status, answer = http_retry("POST", cluster.urls[1] + "/v1/topics", body)
    assert status == 201, answer
    records = [{"key": f"user-{k % 3}", "value": str(k), "partition": k % 2} for k in range(6)]
    status, answer = http(
        "POST", cluster.urls[1] + "/v1/topics/profiles/records", {"records": records}
    )
    assert status == 200 and "errors" not in answer, answer
    wait_for_brokers_metadata(cluster)  # a page that asked before broker 2 knew would 404
    page = open_page(watched, cluster.urls[2], "#/topics/profiles")
    page.locator('tr[data-partition="1"]').wait_for()
    assert "compact" in page.locator("[data-stat=topic-cleanup]").inner_text()
    page.wait_for_function(
        "() => [...document.querySelectorAll('tr[data-partition] td.compaction')]"
        ".every((cell) => cell.textContent.includes('% dirty'))"
    )  # from each partition's leader, whichever broker it is
    orders = open_page(watched, cluster.urls[3], "#/topics/orders")
    orders.locator('tr[data-partition="2"]').wait_for()
    assert orders.locator("td.compaction").count() == 0  # a delete topic has no such column
    assert "delete" in orders.locator("[data-stat=topic-cleanup]").inner_text()


def test_messages_show_records_and_never_run_their_html(cluster: Cluster, watched: Watched) -> None:
    page = open_page(watched, cluster.urls[2], "#/messages/orders/0")
    page.locator('tr[data-offset="1"]').wait_for()
    xss_row = page.locator('tr[data-offset="1"]')
    assert XSS in xss_row.locator("td.value").inner_text()  # shown as text
    assert "source" in xss_row.inner_text()
    assert page.locator("#messages img").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    # and the browser itself refuses HTML from a string on the console (Trusted Types)
    watched.allowed.append("TrustedHTML")
    refused = page.evaluate(
        "() => { try { document.body.insertAdjacentHTML('beforeend', '<b>x</b>');"
        " return false } catch (e) { return e instanceof TypeError } }"
    )
    assert refused is True
    pretty = page.locator('tr[data-offset="0"] pre.json').inner_text()
    assert '"order": 7' in pretty and "\n" in pretty  # JSON, pretty-printed
    # newest first by default
    offsets = page.locator("tr[data-offset]").evaluate_all(
        "rows => rows.map(r => r.dataset.offset)"
    )
    assert offsets == ["2", "1", "0"]
    page.fill("#search", "plain")
    page.wait_for_function("() => document.querySelectorAll('tr[data-offset]').length === 1")
    assert page.locator('tr[data-offset="2"]').is_visible()


def test_group_page_shows_its_lag(cluster: Cluster, watched: Watched) -> None:
    page = open_page(watched, cluster.urls[1], "#/groups")
    page.locator('tr[data-group="billing"]').wait_for()
    page.click('tr[data-group="billing"] a')
    page.locator('tr[data-lag="orders/0"]').wait_for()
    assert page.locator('tr[data-lag="orders/0"] td.lag').inner_text() == "2"
    assert page.locator('[data-stat="total-lag"] .stat-value').inner_text() == "2"


def test_creating_a_topic_through_the_ui_takes_effect(cluster: Cluster, watched: Watched) -> None:
    page = open_page(watched, cluster.urls[1], "#/topics")
    page.locator('tr[data-topic="orders"]').wait_for()
    page.fill("#create-name", "made-in-ui")
    page.fill("#create-partitions", "2")
    page.click("#create-topic button[type=submit]")
    dialog = page.locator("dialog#confirm")
    dialog.wait_for()
    assert "made-in-ui" in page.locator("#confirm-text").inner_text()
    page.click("#confirm-ok")
    page.locator('tr[data-topic="made-in-ui"]').wait_for()
    deadline = time.monotonic() + 10
    while True:
        status, answer = http("GET", cluster.urls[3] + "/v1/topics")
        names = {t["name"]: t["partitions"] for t in answer["topics"]}
        if names.get("made-in-ui") == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 200 and names.get("made-in-ui") == 2, answer


def test_a_controller_shows_the_metadata_and_links_to_brokers(
    cluster: Cluster, watched: Watched
) -> None:
    controller = next(iter(cluster.quorum.urls.values()))
    page = open_page(watched, controller)
    page.locator('tr[data-broker="3"]').wait_for()
    assert page.locator("#node").inner_text() == "controller"
    for kafka in cluster.kafka_addresses.values():
        assert page.get_by_text(kafka).is_visible()
    page.goto(f"{controller}/ui/#/messages/orders/0")
    links = page.locator("#broker-links a")
    links.first.wait_for()
    hrefs = links.evaluate_all("links => links.map(a => a.href)")
    assert f"{cluster.urls[1]}/ui/#/messages/orders/0" in hrefs
    page.goto(f"{controller}/ui/#/topics/orders")
    page.locator('tr[data-partition="2"]').wait_for()  # partitions, from its metadata


def test_producing_a_test_message_through_the_ui(cluster: Cluster, watched: Watched) -> None:
    page = open_page(watched, cluster.urls[3], "#/messages/orders/1")
    page.locator("#messages-info").wait_for()
    page.fill("#produce-key", "from-ui")
    page.fill("#produce-value", '{"made": "in the console"}')
    page.fill("#produce-headers", "origin=console")
    page.click("#produce button[type=submit]")
    assert "partition 1" in page.locator("#confirm-text").inner_text()
    page.click("#confirm-ok")
    row = page.locator("tr[data-offset]", has_text="from-ui")
    row.wait_for()
    assert '"made": "in the console"' in row.locator("pre.json").inner_text()
    status, answer = http(
        "GET", cluster.urls[1] + "/v1/topics/orders/partitions/1/records?offset=0"
    )
    assert status == 200 and [r["key"] for r in answer["records"]] == ["from-ui"], answer


def test_growing_a_topic_through_the_ui(cluster: Cluster, watched: Watched) -> None:
    status, answer = http_retry("POST", cluster.urls[1] + "/v1/topics", {"name": "growing"})
    assert status == 201, answer
    page = open_page(watched, cluster.urls[2], "#/topics/growing")
    page.locator('tr[data-partition="0"]').wait_for()
    page.fill("#new-count", "3")
    page.locator("#new-count").press("Enter")
    page.click("#confirm-ok")
    page.locator('tr[data-partition="2"]').wait_for()
    status, answer = http("GET", cluster.urls[3] + "/v1/topics/growing")
    assert status == 200 and len(answer["partitions"]) == 3, answer
