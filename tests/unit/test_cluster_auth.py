"""The cluster credential (kraftlite/security/cluster_auth.py) and node URL rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.protocol.urls import node_url_problem
from kraftlite.security.cluster_auth import (
    MAX_SKEW_MS,
    ReplayCache,
    Signer,
    derive_key,
    raft_password,
    verify,
    verify_body,
    verify_head,
)

KEY = derive_key("a-cluster-secret-of-some-length", "internal http")
NOW = 1_700_000_000_000
SIGNER = Signer(KEY, "broker-1")
REQUEST = ("POST", "/v1/internal/alter-partition?x=1", b'{"new_isr": [1]}')


def _header(**changes: object) -> str:
    method, path, body = REQUEST
    kwargs: dict[str, object] = {"now_ms": NOW, "nonce": "n1", "principal": ""}
    kwargs.update(changes)
    return SIGNER.header(method, path, body, **kwargs)  # type: ignore[arg-type]


def test_a_signed_request_verifies_and_names_its_node() -> None:
    verified = verify(KEY, _header(), *REQUEST, "", NOW + 5)
    assert verified is not None
    assert (verified.node, verified.nonce, verified.timestamp_ms) == ("broker-1", "n1", NOW)


@pytest.mark.parametrize(
    ("method", "path", "body", "principal"),
    [
        ("PUT", REQUEST[1], REQUEST[2], ""),  # another method
        ("POST", "/v1/internal/alter-partition?x=2", REQUEST[2], ""),  # another query
        ("POST", "/v1/internal/brokers", REQUEST[2], ""),  # another path
        ("POST", REQUEST[1], b'{"new_isr": [2]}', ""),  # another body
        ("POST", REQUEST[1], REQUEST[2], "User:mallory"),  # another principal
    ],
)
def test_nothing_of_a_signed_request_can_be_changed(
    method: str, path: str, body: bytes, principal: str
) -> None:
    assert verify(KEY, _header(), method, path, body, principal, NOW) is None


def test_another_secret_or_purpose_does_not_verify() -> None:
    other = derive_key("another-cluster-secret-entirely", "internal http")
    assert verify(other, _header(), *REQUEST, "", NOW) is None
    assert derive_key("a-cluster-secret-of-some-length", "raft password") != KEY
    assert raft_password("a-cluster-secret-of-some-length") == raft_password(
        "a-cluster-secret-of-some-length"
    )


def test_timestamps_outside_the_skew_are_refused() -> None:
    assert verify(KEY, _header(), *REQUEST, "", NOW + MAX_SKEW_MS) is not None
    assert verify(KEY, _header(), *REQUEST, "", NOW + MAX_SKEW_MS + 1) is None
    assert verify(KEY, _header(), *REQUEST, "", NOW - MAX_SKEW_MS - 1) is None


_M = "0" * 64


@pytest.mark.parametrize(
    "header",
    [
        "",
        "v2",
        f"v1 broker-1 1 n1 {_M}",  # the old version
        f"v3 broker-1 1 n1 {_M} {_M}",
        f"v2 broker-1 notanumber n1 {_M} {_M}",
        f"v2 broker-1 -5 n1 {_M} {_M}",
        f"v2 broker-1 1 n1 short {_M}",
        f"v2 broker-1 1 n1 {_M} {'g' * 64}",  # not hex
        f"v2 broker-1 1 n1 {'é' * 64} {_M}",  # not ASCII: refused, never a TypeError
        f"v2 bröker 1 n1 {_M} {_M}",
        f"v2  1 n1 {_M} {_M}",
        f"v2 broker-1 1 n1 {_M} {_M} extra",
        f"v2 broker-1 1{'0' * 100} n1 {_M} {_M}",
    ],
)
def test_malformed_headers_are_refused(header: str) -> None:
    assert verify(KEY, header, *REQUEST, "", NOW) is None


def test_the_head_verifies_before_the_body_is_read() -> None:
    method, path, body = REQUEST
    header = _header()
    head = verify_head(KEY, header, method, path, "", "", len(body), NOW)
    assert head is not None and verify_body(KEY, head, body)
    assert not verify_body(KEY, head, body + b" ")  # another body of any length
    assert verify_head(KEY, header, method, path, "", "", len(body) + 1, NOW) is None
    assert verify_head(KEY, header, method, path, "", "1\n", len(body), NOW) is None  # steering


@given(st.text(max_size=200))
def test_no_header_text_crashes_verify(header: str) -> None:
    assert verify(KEY, header, *REQUEST, "", NOW) is None


def test_a_nonce_is_accepted_once_while_it_could_verify() -> None:
    cache = ReplayCache()
    assert cache.first_use("n1", NOW, NOW)
    assert not cache.first_use("n1", NOW, NOW + 1)
    assert not cache.first_use("n1", NOW, NOW + MAX_SKEW_MS)  # still acceptable: still refused
    assert cache.first_use("n2", NOW, NOW + 2)
    # once no clock within the skew could accept the timestamp, the nonce is forgotten
    cache.first_use("n3", NOW + 3 * MAX_SKEW_MS, NOW + 3 * MAX_SKEW_MS)
    assert len(cache) == 1


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9092", "https://broker-1.example:9443", "http://[::1]:9092", "http://h:1/"],
)
def test_node_urls_that_are_accepted(url: str) -> None:
    assert node_url_problem(url) is None


@pytest.mark.parametrize(
    "url",
    [
        None,
        "",
        "127.0.0.1:9092",
        "ftp://127.0.0.1:9092",
        "http://127.0.0.1",  # no port
        "http://127.0.0.1:0",
        "http://127.0.0.1:70000",
        "http://127.0.0.1:9092/v1/topics",  # a path
        "http://127.0.0.1:9092?x=1",
        "http://127.0.0.1:9092#frag",
        "http://user:pw@127.0.0.1:9092",
        "http://user@127.0.0.1:9092",
        "http://:9092",
        "http://127.0.0.1:9092 ",
        "http://exa mple:9092",
        "http://\u00e9xample:9092",
        "http://127.0.0.1:9092\r\nX-Evil: 1",
        "http://" + "a" * 600 + ":9092",
        "http://[::1:9092",
    ],
)
def test_node_urls_that_are_refused(url: object) -> None:
    assert node_url_problem(url) is not None
