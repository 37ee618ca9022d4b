"""What a web page may make a visitor's browser do to a node (the console made browsers
clients): nothing but what the node's own pages do.

Rules:
1. A request that changes something (any method but GET, HEAD, OPTIONS) from a page of
   another origin is refused: the browser says so in `Sec-Fetch-Site` (cross-site,
   same-site) or, where it sends no such header, in an `Origin` that is not the node's
   own. Programs (curl, clients, other nodes) send neither and are not affected. With
   listener.py rule 4 (bodies must be JSON or batches, which a page can only send after
   a CORS preflight that no node answers), a page can neither drain a broker with an
   empty form post nor produce with a text one.
2. Without client authentication (a loopback `kraftlite dev` cluster), a node answers only
   requests that name it by an IP address, `localhost`, the host of its own URL, or a
   name in `http.allowed.hosts`: a page on a domain the attacker points at 127.0.0.1 (DNS
   rebinding) is then same-origin with the node and rule 1 cannot see it, so its `Host`
   is what tells it apart. With authentication on, a page has no credentials to send
   (a browser keeps them per origin), so any name is answered.

Pure decisions (`refusal`) apart from the middleware.
"""

from __future__ import annotations

import functools
import ipaddress
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from kraftlite.api.auth import AUTH
from kraftlite.errors import ErrorCode, KraftliteError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _host_name(authority: str) -> str:
    """The host of a `Host` header or an origin's authority, lower case, no port."""
    if authority.startswith("["):  # [v6]:port
        return authority[1 : authority.find("]")].lower()
    return authority.rsplit(":", 1)[0].lower() if authority.count(":") == 1 else authority.lower()


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=256)
def _answered_without_authentication(host: str, names: frozenset[str]) -> bool:
    """Rule 2 for one `Host` value (a node is named a handful of ways: cached)."""
    name = _host_name(host)
    return _is_ip(name) or name == "localhost" or name in names


def refusal(
    method: str,
    headers: Mapping[str, str],
    *,
    authenticated: bool,
    names: frozenset[str],
) -> str | None:
    """Why the request must be refused (rules 1 and 2), or None. `authenticated`: clients
    must authenticate on this node; `names`: the host names it answers to without."""
    host = headers.get("Host", "")
    if not authenticated and host and not _answered_without_authentication(host, names):
        return (
            f"this node answers unauthenticated requests only by IP address, localhost "
            f"or a name in http.allowed.hosts, not {_host_name(host)[:100]!r}"
        )
    if method in SAFE_METHODS:
        return None
    site = headers.get("Sec-Fetch-Site")
    if site is not None:
        return None if site in {"same-origin", "none"} else f"a {site} request from a web page"
    origin = headers.get("Origin")
    if origin is None:
        return None
    parts = urllib.parse.urlsplit(origin)
    if origin == "null" or parts.netloc.lower() != host.lower():
        return f"a request from a page of another origin ({origin[:100]!r})"
    return None


@web.middleware
async def cross_site_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    settings = request.app[AUTH].settings
    why = refusal(
        request.method,
        request.headers,
        authenticated=settings.required,
        names=settings.host_names,
    )
    if why is not None:
        raise KraftliteError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"refused: {why}")
    return await handler(request)
