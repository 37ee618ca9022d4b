"""What a web page may make a browser do to a node (api/browsers.py), table-tested."""

from __future__ import annotations

import pytest

from kraftlite.api.browsers import refusal

NAMES = frozenset({"broker-1.example", "kraftlite.lb.example"})


@pytest.mark.parametrize(
    ("method", "headers", "refused"),
    [
        # programs send neither Sec-Fetch-Site nor Origin
        ("POST", {"Host": "127.0.0.1:9092"}, False),
        ("DELETE", {"Host": "127.0.0.1:9092"}, False),
        # the console, from the node's own origin
        ("POST", {"Host": "127.0.0.1:9092", "Sec-Fetch-Site": "same-origin"}, False),
        ("POST", {"Host": "127.0.0.1:9092", "Origin": "http://127.0.0.1:9092"}, False),
        ("POST", {"Host": "localhost:9092", "Sec-Fetch-Site": "none"}, False),  # typed URL
        # another page: another site, or another port of the same host (same-site)
        ("POST", {"Host": "127.0.0.1:9092", "Sec-Fetch-Site": "cross-site"}, True),
        ("POST", {"Host": "127.0.0.1:9092", "Sec-Fetch-Site": "same-site"}, True),
        ("PUT", {"Host": "127.0.0.1:9092", "Origin": "https://evil.example"}, True),
        ("POST", {"Host": "127.0.0.1:9092", "Origin": "http://127.0.0.1:9093"}, True),
        ("POST", {"Host": "127.0.0.1:9092", "Origin": "null"}, True),  # a sandboxed frame
        # reading is for the same-origin policy to stop, not us
        ("GET", {"Host": "127.0.0.1:9092", "Sec-Fetch-Site": "cross-site"}, False),
        ("HEAD", {"Host": "127.0.0.1:9092", "Origin": "https://evil.example"}, False),
    ],
)
def test_pages_of_other_origins_change_nothing(
    method: str, headers: dict[str, str], refused: bool
) -> None:
    for authenticated in (True, False):
        why = refusal(method, headers, authenticated=authenticated, names=NAMES)
        assert (why is not None) == refused, (method, headers, why)


@pytest.mark.parametrize(
    ("host", "answered"),
    [
        ("127.0.0.1:9092", True),
        ("10.1.2.3:9092", True),
        ("[::1]:9092", True),
        ("localhost:9092", True),
        ("LOCALHOST", True),
        ("broker-1.example:9092", True),  # its own URL's host
        ("kraftlite.lb.example", True),  # http.allowed.hosts
        ("attacker.example:9092", False),  # DNS rebinding: a name that points at us
        ("127.0.0.1.attacker.example", False),
        ("", True),  # HTTP/1.0 without Host: no browser sends that
    ],
)
def test_without_authentication_only_known_names_are_answered(host: str, answered: bool) -> None:
    headers = {"Host": host} if host else {}
    why = refusal("GET", headers, authenticated=False, names=NAMES)
    assert (why is None) == answered, (host, why)
    # with authentication on, a page has no credentials: any name is answered
    assert refusal("GET", headers, authenticated=True, names=NAMES) is None
