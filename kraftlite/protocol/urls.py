"""Node URLs as the cluster accepts them: `http(s)://HOST:PORT`, nothing more; and the paths
of the resources a node asks another for by name.

A broker URL is where other nodes send partition traffic and forwarded client requests, so
a registered URL with a path, a query, credentials or another scheme could point a broker's
requests anywhere. A name in a path is one segment, percent-quoted, whatever it holds, so it
can never reach another resource. Pure: no I/O.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

MAX_URL_LENGTH = 512


def node_url_problem(url: object) -> str | None:
    """Why `url` is not an acceptable node URL, or None when it is."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        return f"must be a string of 1-{MAX_URL_LENGTH} characters"
    if not url.isascii() or not url.isprintable() or any(c.isspace() for c in url):
        return "must be printable ASCII without spaces"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"is not a URL: {exc}"
    if parts.scheme not in {"http", "https"}:
        return "must start with http:// or https://"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials"
    if parts.path not in {"", "/"} or parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must be http(s)://HOST:PORT with no path, query or fragment"
    if not parts.hostname:
        return "must name a host"
    if port is None or not 0 < port < 65536:
        return "must name a port in 1-65535"
    return None


def port_address_problem(address: object) -> str | None:
    """Why `address` is not a HOST:PORT (a Raft address), or None when it is."""
    if not isinstance(address, str) or not 0 < len(address) <= MAX_URL_LENGTH:
        return f"must be a string of 1-{MAX_URL_LENGTH} characters"
    if not address.isascii() or not address.isprintable() or any(c.isspace() for c in address):
        return "must be printable ASCII without spaces"
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return "must be HOST:PORT with a port in 1-65535"
    return None


def topic_path(name: str, *rest: str) -> str:
    """`/v1/topics/{name}[/rest...]`, the name one percent-quoted segment. ValueError for a
    name no segment can be: "", "." or ".." (URLs resolve those to another path)."""
    if name in {"", ".", ".."}:
        raise ValueError(f"{name!r} is not a topic name")
    return "/".join(("/v1/topics", quote(name, safe=""), *rest))
