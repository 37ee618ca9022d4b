"""The console at scale (issue 17): with 10,000 topics the topic list renders in under a
second, and so does the page of a topic with 1,000 partitions, because the server pages and
filters (one broker, each topic created in batches of 1,000)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.browser.conftest import Watched
from tests.harness.processes import Cluster, http, http_retry

pytestmark = [pytest.mark.browser, pytest.mark.scale, pytest.mark.timeout(240)]
TOPICS = 10_000
BUDGET_S = 1.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("console-scale"), brokers=1)
    running.start()
    try:
        url = running.urls[1]
        for first in range(0, TOPICS, 1000):
            batch = [
                {"name": f"topic-{i:05d}", "partitions": 1, "replication_factor": 1}
                for i in range(first, first + 1000)
            ]
            status, answer = http_retry(
                "POST", url + "/v1/topics", {"topics": batch}, timeout_s=120
            )
            assert status == 200, answer
        wide = {"name": "wide", "partitions": 1000, "replication_factor": 1}
        status, answer = http_retry("POST", url + "/v1/topics", wide, timeout_s=120)
        assert status == 201, answer
        yield running
    finally:
        running.stop()


def timed(watched: Watched, hash_: str, selector: str) -> float:
    page = watched.page
    started = time.monotonic()
    page.evaluate(f"location.hash = {hash_!r}")
    page.wait_for_selector(selector)
    return time.monotonic() - started


def test_ten_thousand_topics_and_a_thousand_partitions_render_fast(
    cluster: Cluster, watched: Watched
) -> None:
    url = cluster.urls[1]
    assert http("GET", url + "/v1/topics?limit=1")[1]["total"] == TOPICS + 1
    page = watched.page
    page.goto(url + "/ui/#/")
    page.wait_for_selector('tr[data-broker="1"]')
    assert timed(watched, "#/topics", 'tr[data-topic="topic-00049"]') < BUDGET_S
    assert page.locator("tr[data-topic]").count() == 50  # one page, not 10,000 rows
    assert page.locator("#topic-total").inner_text().startswith("10,001")
    started = time.monotonic()
    page.fill("#topic-filter", "09999")
    page.wait_for_selector('tr[data-topic="topic-09999"]')
    assert time.monotonic() - started < BUDGET_S + 0.25  # + the filter's 250 ms debounce
    assert timed(watched, "#/topics/wide", 'tr[data-partition="99"]') < BUDGET_S
    assert page.locator("tr[data-partition]").count() == 100  # a page, paged on the server
    assert page.locator("#partition-range").inner_text() == "0\u201399 of 1,000"
    page.click("#partitions-next")
    page.wait_for_selector('tr[data-partition="199"]')
    assert page.locator("tr[data-partition]").count() == 100
