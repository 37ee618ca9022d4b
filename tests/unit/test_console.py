"""The console's server side without a browser: the files and their security headers
(kraftlite/console), the 401 challenge a console call gets, and the topic list paged and
filtered on the server (api/topic_pages.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from kraftlite.api.errors import problem_middleware
from kraftlite.api.topic_pages import MAX_PAGE, partitions_answer, topics_answer
from kraftlite.console import CONTENT_SECURITY_POLICY, add_console, load_static
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import PartitionRegistration, TopicImage

STATIC = Path(__file__).resolve().parents[2] / "kraftlite" / "console" / "static"


async def _client(role: str = "broker") -> TestClient[web.Request, web.Application]:
    app = web.Application(middlewares=[problem_middleware])
    add_console(app, role)  # type: ignore[arg-type]

    async def refused(request: web.Request) -> web.Response:
        return web.Response(
            status=401, headers={"WWW-Authenticate": 'Basic realm="kraftlite", Bearer realm="x"'}
        )

    app.router.add_get("/v1/cluster", refused)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.mark.parametrize(
    "path",
    ["/ui/", "/ui/static/app.js", "/ui/static/style.css", "/ui/node.json", "/ui/static/nope.js"],
)
async def test_every_console_answer_has_the_security_headers(path: str) -> None:
    client = await _client()
    try:
        response = await client.get(path)
        headers = response.headers
        assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
        assert "unsafe-inline" not in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["X-Frame-Options"] == "DENY"
        assert response.status == (404 if path.endswith("nope.js") else 200)
    finally:
        await client.close()


async def test_files_are_served_with_their_types_and_revalidated() -> None:
    client = await _client()
    try:
        index = await client.get("/ui/")
        assert index.content_type == "text/html"
        assert "static/app.js" in await index.text()
        script = await client.get("/ui/static/app.js")
        assert script.content_type == "text/javascript"  # modules need a JS type (nosniff)
        again = await client.get(
            "/ui/static/app.js", headers={"If-None-Match": script.headers["ETag"]}
        )
        assert again.status == 304
        moved = await client.get("/ui", allow_redirects=False)
        assert moved.status == 302 and moved.headers["Location"] == "/ui/"
        for sneaky in (
            "/ui/static/..%2Fconsole%2F__init__.py",
            "/ui/static/.hidden",
        ):
            assert (await client.get(sneaky)).status == 404, sneaky
    finally:
        await client.close()


@pytest.mark.parametrize("role", ["broker", "controller"])
async def test_the_node_says_what_it_is_and_nothing_more(role: str) -> None:
    client = await _client(role)
    try:
        assert await (await client.get("/ui/node.json")).json() == {"role": role}
    finally:
        await client.close()


async def test_a_console_call_is_challenged_with_bearer_only() -> None:
    client = await _client()
    try:
        plain = await client.get("/v1/cluster")
        assert "Basic" in plain.headers["WWW-Authenticate"]  # other clients: both schemes
        console = await client.get("/v1/cluster", headers={"X-Kraftlite-Console": "1"})
        assert console.status == 401
        assert console.headers["WWW-Authenticate"] == 'Bearer realm="kraftlite"'
    finally:
        await client.close()


def test_the_package_ships_every_file_the_pages_load() -> None:
    files = load_static()
    index = files["index.html"].body.decode()
    wanted = set(re.findall(r'(?:src|href)="static/([^"]+)"', index))
    for name, found in files.items():
        if name.endswith(".js"):
            wanted |= set(re.findall(r'from "\./([^"]+)"', found.body.decode()))
    assert wanted and wanted <= set(files), wanted - set(files)
    assert {p.name for p in STATIC.iterdir()} == set(files)


def test_no_script_writes_html() -> None:
    """Record keys and values are attacker-controlled: pages build DOM nodes and text."""
    for path in STATIC.glob("*.js"):
        source = path.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in source, (path.name, sink)
    assert "<script>" not in (STATIC / "index.html").read_text()  # no inline script
    assert "style=" not in (STATIC / "index.html").read_text()  # no inline style


# ---------------------------------------------------------------------------- topic pages


def _topics(*names: str) -> list[TopicImage]:
    one = {0: PartitionRegistration((1,), (1,), 1, 0, 0)}
    return [TopicImage(f"id-{n}", n, one, {"retention.ms": "1"} if n == "b" else {}) for n in names]


def _answer(query: str, topics: list[TopicImage], visible=lambda name: True):  # type: ignore[no-untyped-def]
    return topics_answer(make_mocked_request("GET", "/v1/topics" + query), topics, visible)


def test_without_a_query_the_answer_is_the_contracts() -> None:
    answer = _answer("", _topics("c", "a", "b"))
    assert answer == {
        "topics": [{"name": n, "partitions": 1, "replication_factor": 1} for n in ("a", "b", "c")]
    }


def test_pages_follow_the_cursor_to_the_end() -> None:
    topics = _topics(*(f"t{i:03d}" for i in range(250)))
    seen, after, pages = [], None, 0
    while True:
        query = "?limit=100" + (f"&after={after}" if after else "")
        answer = _answer(query, topics)
        assert answer["total"] == 250
        seen += [t["name"] for t in answer["topics"]]
        pages += 1
        after = answer["next"]
        if after is None:
            break
    assert pages == 3 and seen == sorted(t.name for t in topics)


def test_filter_is_any_case_and_counts_only_visible_topics() -> None:
    topics = _topics("Orders", "orders-eu", "payments", "b")
    answer = _answer("?contains=ORDER", topics, visible=lambda name: name != "orders-eu")
    assert [t["name"] for t in answer["topics"]] == ["Orders"]
    assert answer["total"] == 1 and answer["next"] is None
    assert _answer("?limit=5", topics)["topics"][1]["configs"] == {"retention.ms": "1"}


@pytest.mark.parametrize(
    "query",
    [
        "?limit=0",
        f"?limit={MAX_PAGE + 1}",
        "?limit=-1",
        "?limit=x",
        "?limit=",
        "?after=",
        "?contains=",
        "?contains=a%00b",
        "?after=" + "x" * 250,
    ],
)
def test_bad_paging_is_invalid_request(query: str) -> None:
    with pytest.raises(KraftliteError) as raised:
        _answer(query, _topics("a"))
    assert raised.value.code is ErrorCode.INVALID_REQUEST


def _wide(count: int) -> TopicImage:
    partitions = {
        i: PartitionRegistration((1, 2), (1,) if i % 10 == 3 else (1, 2), -1 if i == 7 else 1, 0, 0)
        for i in range(count)
    }
    return TopicImage("id-wide", "wide", partitions, {"retention.ms": "5"})


def _partitions(query: str, topic: TopicImage) -> dict[str, Any]:
    request = make_mocked_request("GET", "/v1/topics/wide/partitions" + query)
    return partitions_answer(request, topic)


def test_a_topics_partitions_come_a_page_at_a_time() -> None:
    topic = _wide(250)
    first = _partitions("", topic)
    assert [p["partition"] for p in first["partitions"]] == list(range(100))
    assert (first["total"], first["next"], first["partition_count"]) == (250, 99, 250)
    assert (first["under_replicated"], first["offline"]) == (25, 1)
    assert first["configs"] == {"retention.ms": "5"} and first["replication_factor"] == 2
    last = _partitions("?limit=100&after=199", topic)
    assert [p["partition"] for p in last["partitions"]] == list(range(200, 250))
    assert last["next"] is None
    under = _partitions("?under_replicated=true&limit=3&after=3", topic)
    assert [p["partition"] for p in under["partitions"]] == [13, 23, 33]
    assert (under["total"], under["next"]) == (25, 33)


@pytest.mark.parametrize(
    "query",
    [
        "?limit=0",
        "?limit=1001",
        "?limit=x",
        "?after=-1",
        "?after=2147483648",
        "?after=",
        "?under_replicated=yes",
    ],
)
def test_bad_partition_paging_is_invalid_request(query: str) -> None:
    with pytest.raises(KraftliteError) as raised:
        _partitions(query, _wide(3))
    assert raised.value.code is ErrorCode.INVALID_REQUEST
