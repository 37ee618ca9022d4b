"""Clients on the HTTP edges: who they are (authentication) and what they may do
(authorization), plus the audit and access logs: the HTTP side of the node's one gate
(security/gate.py, security/authenticator.py), which the Kafka listener shares.

Rules:
1. A client proves who it is with `Authorization: Basic` (a SCRAM user's password, checked
   against the stored credential), `Authorization: Bearer` (a token from POST /v1/tokens), or
   a TLS client certificate (its subject, as Kafka's default principal mapping gives it).
   Principals are `User:<name>`. Credentials that do not check out get 401
   SASL_AUTHENTICATION_FAILED with `WWW-Authenticate`, whatever `auth.required` says.
2. With `auth.required`, a request without credentials gets 401, and every action is checked
   against the ACLs (security/acls.py) before the handler runs (permissions.py says which
   actions each route asks for); without it, anyone is User:ANONYMOUS and may do anything
   but act as a node (Kafka without an authorizer).
3. A node acting for itself (internal_auth.py) is authorized for everything; a node acting
   for a client is that client, checked again here.
4. Every admin write, ACL and user change, refused authorization and failed
   authentication is written to the audit log (logger `kraftlite.audit`); every request to
   the access log when `access.log.enabled`.
5. Password checks are the authenticator's (security/authenticator.py rule 4).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable

import orjson
import structlog
from aiohttp import web

from kraftlite.api.internal_auth import caller, set_caller
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.topics import is_internal_topic
from kraftlite.security.acls import Action, Operation, ResourceType
from kraftlite.security.authenticator import Authenticator, unauthenticated
from kraftlite.security.gate import Gate
from kraftlite.security.principal import Caller, certificate_principal

audit = structlog.get_logger("kraftlite.audit")
access = structlog.get_logger("kraftlite.access")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_DENIED_CODE = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


async def _request_principal(
    authenticator: Authenticator, request: web.Request
) -> tuple[str, str] | None:
    """(principal, how it logged in) from the client's credentials; None for none."""
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "basic":
            return await _basic(authenticator, value.strip(), caller(request).host), "basic"
        if scheme.lower() == "bearer":
            return authenticator.bearer(value.strip()), "bearer"
        raise unauthenticated("unsupported Authorization scheme (Basic or Bearer)")
    found = _certificate_principal(request)
    return None if found is None else (found, "certificate")


async def _basic(authenticator: Authenticator, value: str, host: str) -> str:
    try:
        user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):  # binascii.Error is a ValueError
        raise unauthenticated("malformed Basic credentials") from None
    if not sep:
        raise unauthenticated("malformed Basic credentials")
    principal, _ = await authenticator.check_password(user, password, host)
    return principal


def _certificate_principal(request: web.Request) -> str | None:
    transport = request.transport
    return certificate_principal(
        None if transport is None else transport.get_extra_info("ssl_object")
    )


AUTH = web.AppKey("auth", Authenticator)
GATE = web.AppKey("gate", Gate)


@web.middleware
async def authenticate_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Rules 1, 2 and 4 (the access log): runs after cluster_auth_middleware."""
    started = time.perf_counter()
    authenticator = request.app[AUTH]
    who = caller(request)
    status = 500
    try:
        if who.node is None and not _public(request):  # a client calling us directly
            try:
                found = await _request_principal(authenticator, request)
            except KraftliteError as exc:
                audit.warning(
                    "authentication_failed",
                    host=who.host,
                    path=request.path,
                    reason=exc.message,
                    user=exc.details.pop("user", None),
                )
                raise
            if found is None and authenticator.settings.required:
                raise unauthenticated(
                    "authentication required (Basic, Bearer or a client certificate)"
                )
            if found is not None:
                who = Caller(found[0], who.host, login=found[1])
                set_caller(request, who)
        response = await handler(request)
    except KraftliteError as exc:
        status = exc.http_status
        raise
    else:
        status = response.status
        return response
    finally:
        if authenticator.settings.access_log:
            access.info(
                "request",
                method=request.method,
                path=request.path,
                status=status,
                principal=who.principal,
                host=who.host,
                node=who.node,
                ms=round((time.perf_counter() - started) * 1000, 2),
            )


_PUBLIC_ROUTES = frozenset(
    {"/healthz", "/readyz", "/v1/openapi.json"}  # operations
    | {"/ui", "/ui/", "/ui/node.json", "/ui/static/{name}"}  # the console's files: no data
)


def _public(request: web.Request) -> bool:
    """The routes anyone may call, by the route the request matched (never a path prefix:
    `/ui/../v1/topics` is not public)."""
    resource = request.match_info.route.resource
    return resource is not None and resource.canonical in _PUBLIC_ROUTES


def authorize(request: web.Request, *actions: Action) -> None:
    """403 with the resource type's error code unless every action is allowed (rule 2)."""
    gate = request.app[GATE]
    who = caller(request)
    for action in actions:
        if not gate.allowed(who, action):
            gate.audit_refused(who, [action], edge="http", path=request.path)
            raise KraftliteError(
                _DENIED_CODE[action.resource_type],
                f"{who.principal} may not {action.operation.value} "
                f"{action.resource_type.value} {action.resource_name}",
            )


def may(request: web.Request, action: Action) -> bool:
    """Whether the caller may do `action` (for filtering lists, with no audit line)."""
    return request.app[AUTH].allowed(caller(request), action)


def may_many(request: web.Request) -> Callable[[Action], bool]:
    """`may`, for many actions of this request's caller (filtering long lists): the
    caller's ACLs are picked and indexed once (acls.CallerAcls)."""
    return request.app[AUTH].checker(caller(request))


def audit_change(request: web.Request, event: str, **fields: object) -> None:
    """Rule 4: an admin change made for the caller."""
    who = caller(request)
    audit.info(event, principal=who.principal, host=who.host, node=who.node, **fields)


def brokers_only(request: web.Request, topic: str) -> None:
    """Internal topics (`__consumer_offsets`: every group's offsets) are the brokers' own:
    no client reads, changes or even describes them, whatever its ACLs."""
    if is_internal_topic(topic) and not caller(request).is_cluster:
        raise KraftliteError(
            ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{topic} is internal: only brokers use it"
        )


def describe_topic_action(topic: str) -> Action:
    return Action(Operation.DESCRIBE, ResourceType.TOPIC, topic)


async def issue_token(request: web.Request) -> web.Response:
    """`POST /v1/tokens`: a bearer token for the authenticated SCRAM user (any node)."""
    authenticator = request.app[AUTH]
    who = caller(request)
    user = who.principal.removeprefix("User:")
    if who.login != "basic" or user not in authenticator.image.users:
        # not to a token's holder: a token must not renew itself past its expiry
        raise unauthenticated("tokens are issued to SCRAM users who log in with Basic")
    token, expires_at = authenticator.issue_token(user)
    audit_change(request, "token_issued", user=user, expires_at=expires_at)
    return web.Response(
        status=201,
        body=orjson.dumps({"token": token, "expires_at": expires_at, "principal": who.principal}),
        content_type="application/json",
    )
