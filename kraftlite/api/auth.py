"""Clients on the HTTP edges: who they are (authentication) and what they may do
(authorization), plus the audit and access logs.

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
5. Password checks cost a PBKDF2 (4096+ rounds): they run off the event loop, a few at a
   time, and a good check is remembered (keyed by a keyed hash of the credentials) until
   the user's credentials change.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import hmac
import secrets
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
import structlog
from aiohttp import web
from cryptography import x509

from kraftlite.api.internal_auth import Caller, caller, set_caller
from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.topics import is_internal_topic
from kraftlite.security import acls, scram, tokens
from kraftlite.security.acls import Action, Operation, ResourceType
from kraftlite.security.cluster_auth import derive_key

audit = structlog.get_logger("kraftlite.audit")
access = structlog.get_logger("kraftlite.access")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_CACHE_SIZE = 10_000
_PASSWORD_CHECKS = 2  # PBKDF2s in flight at once; more wait
_MAX_WAITING_CHECKS = 64  # past this many waiting, answer 429 at once
_DENIED_CODE = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
}


@dataclass(frozen=True, slots=True)
class AuthSettings:
    required: bool = False  # auth.required
    super_users: frozenset[str] = frozenset()  # super.users
    token_lifetime_ms: int = 3_600_000  # auth.token.lifetime.ms
    access_log: bool = False  # access.log.enabled
    # Host names the node answers to without authentication (api/browsers.py rule 2): its
    # own URL's host and http.allowed.hosts
    host_names: frozenset[str] = frozenset()


class Authenticator:
    """Rule 1 and 5 for one node; `image` is the node's latest metadata."""

    def __init__(
        self,
        settings: AuthSettings,
        secret: str,
        image: Callable[[], MetadataImage],
        clock: Clock,
    ) -> None:
        self.settings = settings
        self.token_key = derive_key(secret, "tokens")
        self._image = image
        self._clock = clock
        self._pepper = secrets.token_bytes(32)  # keys the cache: no password hash in memory
        self._good: collections.OrderedDict[bytes, tuple[str, int]] = collections.OrderedDict()
        self._checks = asyncio.Semaphore(_PASSWORD_CHECKS)
        self._waiting = 0
        self._decoy = scram.make_credential(
            "decoy", secrets.token_hex(16), scram.DEFAULT_MECHANISM, secrets.token_bytes(32)
        )

    @property
    def image(self) -> MetadataImage:
        return self._image()

    async def principal(self, request: web.Request) -> tuple[str, str] | None:
        """(principal, how it logged in) from the client's credentials; None for none."""
        header = request.headers.get("Authorization")
        if header is not None:
            scheme, _, value = header.partition(" ")
            if scheme.lower() == "basic":
                return await self._basic(value.strip()), "basic"
            if scheme.lower() == "bearer":
                return self._bearer(value.strip()), "bearer"
            raise _unauthenticated("unsupported Authorization scheme (Basic or Bearer)")
        found = _certificate_principal(request)
        return None if found is None else (found, "certificate")

    async def _basic(self, value: str) -> str:
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):  # binascii.Error is a ValueError
            raise _unauthenticated("malformed Basic credentials") from None
        if not sep:
            raise _unauthenticated("malformed Basic credentials")
        principal, _ = await self.check_password(user, password)
        return principal

    async def check_password(self, user: str, password: str) -> tuple[str, int]:
        """(principal, credential version) of a SCRAM user who gave their password (HTTP
        Basic, Kafka's SASL PLAIN), checked against the stored credential off the event loop;
        or SASL_AUTHENTICATION_FAILED, at the same cost for an unknown user. The version is
        the one the password was checked against, whatever changed while it was: a caller
        that keeps a login compares it with the metadata's to end it when it changes."""
        image = self.image
        version = image.user_versions.get(user)
        credentials = image.users.get(user)
        key = hmac.new(self._pepper, f"{user}\0{password}".encode(), hashlib.sha256).digest()
        if credentials and version is not None and self._good.get(key) == (user, version):
            self._good.move_to_end(key)
            return f"User:{user}", version
        if self._waiting >= _MAX_WAITING_CHECKS:  # a flood of guesses: fail fast
            raise KraftliteError(
                ErrorCode.THROTTLING_QUOTA_EXCEEDED, "too many password checks in progress"
            )
        # an unknown user costs the same PBKDF2 as a wrong password: no user enumeration
        credential = (
            (credentials.get(scram.DEFAULT_MECHANISM) or next(iter(credentials.values())))
            if credentials
            else self._decoy
        )
        self._waiting += 1
        try:
            async with self._checks:
                ok = await asyncio.to_thread(scram.check_password, credential, password)
        finally:
            self._waiting -= 1
        if not ok or not credentials or version is None:
            raise _unauthenticated("unknown user or wrong password", user=user)
        self._good[key] = (user, version)
        while len(self._good) > _CACHE_SIZE:
            self._good.popitem(last=False)
        return f"User:{user}", version

    def _bearer(self, value: str) -> str:
        claims = tokens.verify(self.token_key, value, self._clock.now_ms())
        if (
            claims is None
            or self.image.user_versions.get(claims.user) != (claims.credential_version)
            or claims.user not in self.image.users
        ):
            raise _unauthenticated("invalid or expired token")
        return f"User:{claims.user}"

    def issue_token(self, user: str) -> tuple[str, int]:
        """A token for `user` (a SCRAM user): (token, expires at, unix ms)."""
        now = self._clock.now_ms()
        expires = now + self.settings.token_lifetime_ms
        version = self.image.user_versions[user]
        claims = tokens.TokenClaims(user, version, now, expires, secrets.token_hex(8))
        return tokens.issue(self.token_key, claims), expires

    def allowed(self, who: Caller, action: Action) -> bool:
        """Rules 2 and 3."""
        if who.is_cluster or not self.settings.required:
            return True
        return acls.authorize(
            self.image.acls.values(), self.settings.super_users, who.principal, who.host, action
        )

    def checker(self, who: Caller) -> Callable[[Action], bool]:
        """`allowed` for many actions of one caller."""
        if who.is_cluster or not self.settings.required:
            return lambda _: True
        return acls.CallerAcls(
            self.image.acls.values(), self.settings.super_users, who.principal, who.host
        ).allows


def _unauthenticated(message: str, **fields: str) -> KraftliteError:
    return KraftliteError(ErrorCode.SASL_AUTHENTICATION_FAILED, message, **fields)


def _certificate_principal(request: web.Request) -> str | None:
    transport = request.transport
    return certificate_principal(
        None if transport is None else transport.get_extra_info("ssl_object")
    )


def certificate_principal(ssl_object: object) -> str | None:
    """A verified TLS client certificate's subject, RFC 4514 (Kafka's DEFAULT mapping);
    None without TLS or without a certificate. Both edges use it."""
    if not isinstance(ssl_object, ssl.SSLObject):
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()


AUTH = web.AppKey("auth", Authenticator)


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
                found = await authenticator.principal(request)
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
                raise _unauthenticated(
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
    authenticator = request.app[AUTH]
    who = caller(request)
    for action in actions:
        if not authenticator.allowed(who, action):
            audit.warning(
                "authorization_denied",
                principal=who.principal,
                host=who.host,
                operation=action.operation.value,
                resource_type=action.resource_type.value,
                resource_name=action.resource_name,
                path=request.path,
            )
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
        raise _unauthenticated("tokens are issued to SCRAM users who log in with Basic")
    token, expires_at = authenticator.issue_token(user)
    audit_change(request, "token_issued", user=user, expires_at=expires_at)
    return web.Response(
        status=201,
        body=orjson.dumps({"token": token, "expires_at": expires_at, "principal": who.principal}),
        content_type="application/json",
    )
