"""The cluster credential: how brokers and controllers prove that a call comes from a node.

Kafka keeps its inter-broker and controller traffic on listeners that demand a credential
only the cluster's nodes hold (SASL or mTLS); kraftlite's nodes share one secret and sign
every call they make to each other with it.

Rules:
1. Every node holds the cluster secret (`cluster.secret` or KRAFTLITE_CLUSTER_SECRET). It
   never travels: keys are derived from it per purpose (HMAC-SHA256 with a label), one to
   sign internal HTTP calls and one that is the Raft transport's password.
2. A signed call carries `X-Kraftlite-Cluster-Auth: v2 NODE TS NONCE HEAD BODY`. HEAD is
   an HMAC of the method, the raw path and query, the timestamp, the nonce, the node's
   name, the principal (and address) the call acts for (empty: the node itself), the
   headers that steer it (content type, forwarded, metadata version) and the body's
   length; BODY an HMAC of HEAD and the body's SHA-256. The receiver checks HEAD before it
   reads the body, so a stranger's body is never buffered, and BODY once it has it.
   Nothing of a captured call can be reused in another.
3. The receiver accepts a MAC only within MAX_SKEW_MS of its own wall clock, and each nonce
   only once while it could still be accepted (ReplayCache), so a captured call cannot be
   replayed. Node clocks must agree within that skew (NTP).
4. Every node of the cluster holds the same secret, so a node may claim any node's name;
   the name is for logs. What the credential separates is nodes from everyone else.

Pure: time and nonces are arguments.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
from dataclasses import dataclass

HEADER = "X-Kraftlite-Cluster-Auth"
# The principal a node's call acts for (a client's request forwarded or passed on) and the
# address that client called from; covered by the MAC, believed only on a signed call.
PRINCIPAL_HEADER = "X-Kraftlite-Principal"
CLIENT_HOST_HEADER = "X-Kraftlite-Client-Host"
VERSION = "v2"
MAX_SKEW_MS = 30_000
MIN_SECRET_LENGTH = 16
_MAX_FIELD = 128


def derive_key(secret: str, purpose: str) -> bytes:
    """A key for one purpose (rule 1): HMAC-SHA256(secret, "kraftlite " + purpose)."""
    return hmac.new(secret.encode(), b"kraftlite " + purpose.encode(), hashlib.sha256).digest()


def raft_password(secret: str) -> str:
    """The Raft transport's password, derived from the cluster secret."""
    return derive_key(secret, "raft password").hex()


def _head_mac(  # noqa: PLR0917 - the canonical request's fields, in order
    key: bytes,
    method: str,
    path_qs: str,
    timestamp_ms: int,
    nonce: str,
    node: str,
    principal: str,
    extra: str,
    body_length: int,
) -> str:
    canonical = "\n".join(
        (
            VERSION,
            method.upper(),
            path_qs,
            str(timestamp_ms),
            nonce,
            node,
            principal,
            extra,
            str(body_length),
        )
    )
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


def _body_mac(key: bytes, head_mac: str, body: bytes) -> str:
    digest = hashlib.sha256(body).hexdigest()
    return hmac.new(key, f"{head_mac}\n{digest}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Signer:
    """Signs a node's calls (rule 2)."""

    key: bytes
    node: str

    def header(
        self,
        method: str,
        path_qs: str,
        body: bytes,
        *,
        now_ms: int,
        nonce: str,
        principal: str = "",
        extra: str = "",
    ) -> str:
        head = _head_mac(
            self.key, method, path_qs, now_ms, nonce, self.node, principal, extra, len(body)
        )
        return f"{VERSION} {self.node} {now_ms} {nonce} {head} {_body_mac(self.key, head, body)}"


@dataclass(frozen=True, slots=True)
class Verified:
    """A call whose head (everything but the body) verified; `body_mac` checks the body."""

    node: str
    nonce: str
    timestamp_ms: int
    head_mac: str
    body_mac: str


def _hex64(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def verify_head(  # noqa: PLR0917 - the request's parts
    key: bytes,
    header: str,
    method: str,
    path_qs: str,
    principal: str,
    extra: str,
    body_length: int,
    now_ms: int,
) -> Verified | None:
    """Rule 2's first half, before a byte of the body is read: a well-formed, fresh header
    whose head MAC covers this request and its declared body length; else None. So a
    stranger costs a header parse and one HMAC, never a body buffered."""
    parts = header.split(" ")
    if len(parts) != 6 or parts[0] != VERSION:
        return None
    _, node, timestamp, nonce, head, body = parts
    for field in (node, nonce):
        if not (0 < len(field) <= _MAX_FIELD and field.isascii() and field.isprintable()):
            return None
    if not (_hex64(head) and _hex64(body)):
        return None
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 15:
        return None
    timestamp_ms = int(timestamp)
    if abs(now_ms - timestamp_ms) > MAX_SKEW_MS:
        return None
    expected = _head_mac(
        key, method, path_qs, timestamp_ms, nonce, node, principal, extra, body_length
    )
    if not hmac.compare_digest(expected, head):
        return None
    return Verified(node, nonce, timestamp_ms, head, body)


def verify_body(key: bytes, verified: Verified, body: bytes) -> bool:
    """Rule 2's second half: the body is the one the head was signed with."""
    return hmac.compare_digest(_body_mac(key, verified.head_mac, body), verified.body_mac)


def verify(  # noqa: PLR0917 - the request's parts
    key: bytes,
    header: str,
    method: str,
    path_qs: str,
    body: bytes,
    principal: str,
    now_ms: int,
    extra: str = "",
) -> Verified | None:
    """Both halves at once (for callers that hold the whole request)."""
    verified = verify_head(key, header, method, path_qs, principal, extra, len(body), now_ms)
    return verified if verified is not None and verify_body(key, verified, body) else None


class ReplayCache:
    """Nonces seen while their calls could still be accepted (rule 3).

    Only verified calls reach it, so its size is bounded by the nodes' own call rate times
    the acceptance window. One mutation entry point: `first_use`.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._expiry: collections.deque[tuple[int, str]] = collections.deque()

    def __len__(self) -> int:
        return len(self._seen)

    def first_use(self, nonce: str, timestamp_ms: int, now_ms: int) -> bool:
        """True the first time `nonce` is used; False for a replay."""
        while self._expiry and self._expiry[0][0] < now_ms:
            self._seen.discard(self._expiry.popleft()[1])
        if nonce in self._seen:
            return False
        self._seen.add(nonce)
        # kept until no clock within the skew could accept its timestamp again
        self._expiry.append((max(timestamp_ms, now_ms) + MAX_SKEW_MS, nonce))
        return True
