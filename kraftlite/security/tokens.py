"""Bearer tokens (`POST /v1/tokens`): a signed, expiring statement "this is user U".

Rules:
1. A token is `kl1.<claims>.<mac>`: base64url JSON claims (user, the version of the user's
   credentials when it was issued, issue and expiry times, a random id) and an
   HMAC-SHA256 over `kl1.<claims>` with a key derived from the cluster secret, so any node
   checks any token with no shared state.
2. A token is good until it expires, and only while the user's credentials are the ones it
   was issued under: deleting the user or changing the password ends every token issued
   before (the caller compares `credential_version` with the image).

Pure: time and ids are arguments.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

import orjson

PREFIX = "kl1"
MAX_TOKEN_LENGTH = 1024


@dataclass(frozen=True, slots=True)
class TokenClaims:
    user: str
    credential_version: int
    issued_at_ms: int
    expires_at_ms: int
    token_id: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue(key: bytes, claims: TokenClaims) -> str:
    body = _b64(
        orjson.dumps(
            {
                "u": claims.user,
                "v": claims.credential_version,
                "iat": claims.issued_at_ms,
                "exp": claims.expires_at_ms,
                "jti": claims.token_id,
            }
        )
    )
    signed = f"{PREFIX}.{body}"
    return f"{signed}.{_b64(hmac.new(key, signed.encode(), hashlib.sha256).digest())}"


def verify(key: bytes, token: str, now_ms: int) -> TokenClaims | None:
    """The claims of a well-signed, unexpired token; None otherwise (rule 1)."""
    if len(token) > MAX_TOKEN_LENGTH or not token.isascii():
        return None
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    expected = hmac.new(key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    try:
        if not hmac.compare_digest(expected, _unb64(parts[2])):
            return None
        data = orjson.loads(_unb64(parts[1]))
        claims = TokenClaims(
            str(data["u"]), int(data["v"]), int(data["iat"]), int(data["exp"]), str(data["jti"])
        )
    except (ValueError, KeyError, TypeError):  # binascii.Error and JSONDecodeError too
        return None
    return claims if now_ms < claims.expires_at_ms else None
