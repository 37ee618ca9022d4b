"""Who a client is (authentication) and what it may do (authorization), for both edges.

Rules:
1. A client proves who it is with a SCRAM user's password (HTTP Basic, Kafka SASL PLAIN),
   a bearer token from `POST /v1/tokens`, a SCRAM exchange (the Kafka listener,
   scram_exchange.py), or a TLS client certificate (its subject, as Kafka's default
   principal mapping gives it). Principals are `User:<name>`.
2. With `auth.required` every action is checked against the ACLs (acls.py); without it,
   anyone is User:ANONYMOUS and may do anything but act as a node (Kafka without an
   authorizer). A node acting for itself may do everything; a node acting for a client is
   that client.
3. One authorizer per node, indexed per caller: the ACLs that name a caller's principal
   and host are picked once per ACL change and kept (at most `_INDEXES` callers, least
   recently used first out), so a request naming 200,000 topics costs 200,000 lookups in
   that caller's few ACLs, not 200,000 scans of the cluster's (acls.CallerAcls answers
   exactly as acls.authorize).
4. Password checks cost a PBKDF2 (4096+ rounds): they run off the event loop, a few at a
   time, and a good check is remembered (keyed by a keyed hash of the credentials) until
   the user's credentials change. A user that does not exist costs the same as a wrong
   password, at the iteration count a user of that name would most likely have (the
   default), so the time of a refusal tells nothing about who exists.
5. A wrong guess costs its client: each address has a budget of PBKDF2 iterations for
   checks that fail (`FAILED_ITERATIONS_PER_S`, a burst of `FAILED_ITERATIONS_BURST`), and
   the checks of an address that spent it are refused at once, with no PBKDF2, until it
   refills. Without it a stranger naming a user created with 100,000 iterations made the
   node run 25 default-strength PBKDF2s per guess, as fast as it could send guesses.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.records import AccessControlEntryRecord
from kraftlite.security import acls, scram, tokens
from kraftlite.security.acls import Action, Operation, ResourceType
from kraftlite.security.cluster_auth import derive_key
from kraftlite.security.principal import Caller

_CACHE_SIZE = 10_000  # remembered good password checks
_INDEXES = 10_000  # callers whose ACL index is kept (rule 3)
_PASSWORD_CHECKS = 2  # PBKDF2s in flight at once; more wait
_MAX_WAITING_CHECKS = 64  # past this many waiting, answer THROTTLING_QUOTA_EXCEEDED at once
# Rule 5: what failed checks from one address may cost, in PBKDF2 iterations: about 25
# wrong default-strength (4,096) guesses a second, a burst of 250
FAILED_ITERATIONS_PER_S = 100_000
FAILED_ITERATIONS_BURST = 1_000_000
_FAILURE_ADDRESSES = 10_000  # addresses whose budget is remembered


@dataclass(frozen=True, slots=True)
class AuthSettings:
    required: bool = False  # auth.required
    super_users: frozenset[str] = frozenset()  # super.users
    token_lifetime_ms: int = 3_600_000  # auth.token.lifetime.ms
    access_log: bool = False  # access.log.enabled
    # Host names the node answers to without authentication (api/browsers.py rule 2): its
    # own URL's host and http.allowed.hosts
    host_names: frozenset[str] = frozenset()


def unauthenticated(message: str, **fields: str) -> KraftliteError:
    return KraftliteError(ErrorCode.SASL_AUTHENTICATION_FAILED, message, **fields)


class Authenticator:
    """Rules 1-4 for one node; `image` is the node's latest metadata."""

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
        # rule 5: address -> (iterations left, when last updated, monotonic ms)
        self._failures: collections.OrderedDict[str, tuple[float, int]] = collections.OrderedDict()
        # rule 3: (principal, host) -> its index, built from `_indexed` (the cluster's ACLs
        # when the first was built: when they change, every index goes, none keeps old ACLs)
        self._indexes: collections.OrderedDict[tuple[str, str], acls.CallerAcls] = (
            collections.OrderedDict()
        )
        self._indexed: Mapping[str, AccessControlEntryRecord] | None = None

    @property
    def image(self) -> MetadataImage:
        return self._image()

    async def check_password(self, user: str, password: str, host: str) -> tuple[str, int]:
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
        if self._failure_budget(host) < 0:  # rule 5: this address guessed too much
            raise KraftliteError(
                ErrorCode.THROTTLING_QUOTA_EXCEEDED, "too many failed logins from this address"
            )
        # rule 4: an unknown user costs the same PBKDF2 as a wrong password
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
            if image.users:  # a node that knows no users yet (starting) blames no one
                self._charge_failure(host, credential.iterations)
            raise unauthenticated("unknown user or wrong password", user=user)
        self._good[key] = (user, version)
        while len(self._good) > _CACHE_SIZE:
            self._good.popitem(last=False)
        return f"User:{user}", version

    def _failure_budget(self, host: str) -> float:
        """Rule 5: the iterations `host` may still spend on failed checks, refilled."""
        kept = self._failures.get(host)
        if kept is None:
            return FAILED_ITERATIONS_BURST
        left, updated = kept
        elapsed_s = max(self._clock.monotonic_ms() - updated, 0) / 1000
        return min(FAILED_ITERATIONS_BURST, left + elapsed_s * FAILED_ITERATIONS_PER_S)

    def _charge_failure(self, host: str, iterations: int) -> None:
        self._failures[host] = (
            self._failure_budget(host) - iterations,
            self._clock.monotonic_ms(),
        )
        self._failures.move_to_end(host)
        while len(self._failures) > _FAILURE_ADDRESSES:
            self._failures.popitem(last=False)

    def bearer(self, value: str) -> str:
        """The principal a bearer token names, or SASL_AUTHENTICATION_FAILED."""
        claims = tokens.verify(self.token_key, value, self._clock.now_ms())
        if (
            claims is None
            or self.image.user_versions.get(claims.user) != (claims.credential_version)
            or claims.user not in self.image.users
        ):
            raise unauthenticated("invalid or expired token")
        return f"User:{claims.user}"

    def issue_token(self, user: str) -> tuple[str, int]:
        """A token for `user` (a SCRAM user): (token, expires at, unix ms)."""
        now = self._clock.now_ms()
        expires = now + self.settings.token_lifetime_ms
        version = self.image.user_versions[user]
        claims = tokens.TokenClaims(user, version, now, expires, secrets.token_hex(8))
        return tokens.issue(self.token_key, claims), expires

    def allowed(self, who: Caller, action: Action) -> bool:
        """Rule 2, through the caller's index (rule 3)."""
        if who.is_cluster or not self.settings.required:
            return True
        return self._index(who).allows(action)

    def checker(self, who: Caller) -> Callable[[Action], bool]:
        """`allowed` for many actions of one caller."""
        if who.is_cluster or not self.settings.required:
            return lambda _: True
        return self._index(who).allows

    def allows_some(self, who: Caller, operation: Operation, kind: ResourceType) -> bool:
        """Whether the caller may do `operation` on some resource of `kind` (Kafka's
        authorizeByResourceType: InitProducerId asks for WRITE on some topic)."""
        if who.is_cluster or not self.settings.required:
            return True
        return self._index(who).allows_some(operation, kind)

    def _index(self, who: Caller) -> acls.CallerAcls:
        """Rule 3: the caller's ACLs, picked again only when the cluster's ACLs changed (an
        image keeps the same ACL mapping until an ACL record replaces it)."""
        current = self.image.acls
        if current is not self._indexed:
            self._indexes.clear()
            self._indexed = current
        key = (who.principal, who.host)
        kept = self._indexes.get(key)
        if kept is not None:
            self._indexes.move_to_end(key)
            return kept
        index = acls.CallerAcls(current.values(), self.settings.super_users, *key)
        self._indexes[key] = index
        self._indexes.move_to_end(key)
        while len(self._indexes) > _INDEXES:
            self._indexes.popitem(last=False)
        return index
