"""The cluster credential on the HTTP edges (kraftlite/security/cluster_auth.py says how
it works): a client-session middleware that signs every call a node makes, and a server
middleware that says who each request is from.

Rules:
1. `/v1/internal/*` answers only calls signed by a node acting for itself; anything else
   gets 403 CLUSTER_AUTHORIZATION_FAILED, before its body is parsed.
2. The headers only nodes may send (forwarded, metadata version, principal) are refused
   without a valid signature, never silently believed.
3. A request is from a client principal (its own, or the one a signing node forwarded it
   for) or from the cluster itself; handlers ask `caller(request)`. A client's request
   forwarded by a node stays the client's: forwarding never lends a node's rights.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import ClientHandlerType, ClientRequest, ClientResponse, web

from kraftlite.api.listener import read_body, settle_reserved
from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.observability import passed_on
from kraftlite.protocol.headers import FORWARDED, METADATA_VERSION
from kraftlite.security import cluster_auth
from kraftlite.security.cluster_auth import CLIENT_HOST_HEADER, HEADER, PRINCIPAL_HEADER
from kraftlite.security.principal import ANONYMOUS, CLUSTER, Caller

_NODE_ONLY_HEADERS = (FORWARDED, METADATA_VERSION, PRINCIPAL_HEADER, CLIENT_HOST_HEADER)
_MAX_PRINCIPAL = 256


def steering(headers: Mapping[str, str]) -> str:
    """The node-only headers that change what a call does, for the MAC."""
    forwarded, version = headers.get(FORWARDED), headers.get(METADATA_VERSION)
    return "" if forwarded is None and version is None else f"{forwarded or ''}\n{version or ''}"


def acting_for(principal: str, host: str) -> str:
    """What the MAC covers of the client a node acts for (empty: the node itself)."""
    return f"{principal}\n{host}" if principal else ""


class ClusterAuth:
    """A node's cluster credential: signs its calls, checks the calls it receives."""

    def __init__(self, secret: str, node: str, clock: Clock) -> None:
        if len(secret) < cluster_auth.MIN_SECRET_LENGTH:
            raise ValueError(
                f"the cluster secret must be at least {cluster_auth.MIN_SECRET_LENGTH} characters"
            )
        self._key = cluster_auth.derive_key(secret, "internal http")
        self._signer = cluster_auth.Signer(self._key, node)
        self._replays = cluster_auth.ReplayCache()
        self._clock = clock

    def sign(
        self, method: str, path_qs: str, body: bytes, principal: str = "", extra: str = ""
    ) -> str:
        return self._signer.header(
            method,
            path_qs,
            body,
            now_ms=self._clock.now_ms(),
            nonce=secrets.token_hex(12),
            principal=principal,
            extra=extra,
        )

    def check_head(  # noqa: PLR0917 - the request's parts
        self, header: str, method: str, path_qs: str, principal: str, extra: str, length: int
    ) -> cluster_auth.Verified | None:
        """The head's claims, before the body is read; None for a bad or stale one."""
        return cluster_auth.verify_head(
            self._key, header, method, path_qs, principal, extra, length, self._clock.now_ms()
        )

    def check_body(self, verified: cluster_auth.Verified, body: bytes) -> bool:
        """The body is the signed one, and the nonce is used for the first time."""
        return cluster_auth.verify_body(self._key, verified, body) and self._replays.first_use(
            verified.nonce, verified.timestamp_ms, self._clock.now_ms()
        )

    def client_middleware(
        self,
    ) -> Callable[[ClientRequest, ClientHandlerType], Awaitable[ClientResponse]]:
        """For the node's aiohttp client sessions: every call they make is signed."""

        async def sign(request: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
            body = request.body
            data = b"" if body == b"" else await body.as_bytes()
            principal = acting_for(
                request.headers.get(PRINCIPAL_HEADER, ""),
                request.headers.get(CLIENT_HOST_HEADER, ""),
            )
            request.headers[HEADER] = self.sign(
                request.method, request.url.raw_path_qs, data, principal, steering(request.headers)
            )
            return await handler(request)

        return sign


CLUSTER_AUTH = web.AppKey("cluster_auth", ClusterAuth)
_CALLER = web.RequestKey("kraftlite.caller", Caller)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _refused(why: str) -> KraftliteError:
    return KraftliteError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, why)


@web.middleware
async def cluster_auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Rules 1-3: who the request is from, or 403 before anything else is done for it.
    Every request also settles its connection's reserved slot, if it is in one
    (listener.py rule 1): only a node's call for itself keeps it."""
    internal = request.path.startswith("/v1/internal/")
    header = request.headers.get(HEADER)
    if header is None:
        settle_reserved(request, from_node=False)
        if internal:
            raise _refused("internal endpoints answer only the cluster's nodes")
        if any(name in request.headers for name in _NODE_ONLY_HEADERS):
            raise _refused("forwarding headers are for the cluster's nodes only")
        request[_CALLER] = Caller(ANONYMOUS, request.remote or "")
        return await handler(request)
    try:
        caller = await _signed_caller(request, header)
    except Exception:
        settle_reserved(request, from_node=False)  # whatever refused it: not a node's call
        raise
    if internal and not caller.is_cluster:
        raise _refused("internal endpoints answer only the cluster's nodes")
    request[_CALLER] = caller
    return await handler(request)


async def _signed_caller(request: web.Request, header: str) -> Caller:
    """Who a signed request is from (rules 2 and 3), or 403."""
    principal = request.headers.get(PRINCIPAL_HEADER, "")
    host = request.headers.get(CLIENT_HOST_HEADER, "")
    for value in (principal, host):
        if len(value) > _MAX_PRINCIPAL or not value.isprintable():
            raise _refused("malformed principal or client host")
    declared = request.content_length or 0
    if request.body_exists and request.content_length is None:
        raise _refused("a signed call states its body's length")
    auth = request.app[CLUSTER_AUTH]
    verified = auth.check_head(
        header,
        request.method,
        request.raw_path,
        acting_for(principal, host),
        steering(request.headers),
        declared,
    )
    if verified is None:  # refused before a byte of the body is read
        raise _refused("bad or expired cluster signature")
    # A node's call for itself keeps a reserved slot from here: its body may wait for the
    # request budget without the slot being taken from it meanwhile. A call a node passes
    # on for a client is the client's, and takes no slot from the reserve.
    settle_reserved(request, from_node=not principal)
    body = await read_body(request)
    if len(body) != declared or not auth.check_body(verified, body):
        raise _refused("bad or replayed cluster signature")
    if principal:
        return Caller(principal, host, node=verified.node)
    return Caller(CLUSTER, request.remote or "", True, verified.node)


def caller(request: web.Request) -> Caller:
    """Who `request` acts for (set by cluster_auth_middleware)."""
    found = request.get(_CALLER)
    assert isinstance(found, Caller), "cluster_auth_middleware did not run"
    return found


def set_caller(request: web.Request, who: Caller) -> None:
    """The client authenticated (kraftlite/api/auth.py): the request acts for it."""
    request[_CALLER] = who


def forwarded_for(request: web.Request) -> dict[str, str]:
    """Headers that make a node's onward call act for this request's client (rule 3), and
    carry its request id (observability.py)."""
    who = caller(request)
    if who.is_cluster:
        return passed_on(request)
    return {PRINCIPAL_HEADER: who.principal, CLIENT_HOST_HEADER: who.host, **passed_on(request)}
