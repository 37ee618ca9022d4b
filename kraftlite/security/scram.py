"""SCRAM credentials (RFC 5802, RFC 7677; Kafka's KIP-554): what the cluster keeps of a
password, and how a password is checked against it.

Rules:
1. The password itself is never stored or logged: only salt, iteration count, StoredKey =
   H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"),
   SaltedPassword = PBKDF2-HMAC(password, salt, iterations).
2. Checking a password recomputes StoredKey and compares in constant time.
3. Iterations are at least 4096 (RFC 7677's minimum, Kafka's default).

Pure: the salt is an argument.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Final

from kraftlite.metadata.records import UserScramCredentialRecord

MECHANISMS: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_MECHANISM: Final = "SCRAM-SHA-256"
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 100_000  # what a user may be created with (and a client will compute)
MAX_PASSWORD_BYTES: Final = 1024


def _salted(password: str, salt: bytes, iterations: int, digest: str) -> bytes:
    return hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)


def make_credential(
    name: str, password: str, mechanism: str, salt: bytes, iterations: int = MIN_ITERATIONS
) -> UserScramCredentialRecord:
    """The record that lets the cluster check `password` later (rule 1)."""
    digest = MECHANISMS[mechanism]
    salted = _salted(password, salt, iterations, digest)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return UserScramCredentialRecord(
        name=name,
        mechanism=mechanism,
        salt=base64.b64encode(salt).decode(),
        stored_key=base64.b64encode(hashlib.new(digest, client_key).digest()).decode(),
        server_key=base64.b64encode(hmac.new(salted, b"Server Key", digest).digest()).decode(),
        iterations=iterations,
    )


def check_password(credential: UserScramCredentialRecord, password: str) -> bool:
    """Rule 2."""
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        return False
    digest = MECHANISMS[credential.mechanism]
    salted = _salted(password, base64.b64decode(credential.salt), credential.iterations, digest)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored = hashlib.new(digest, client_key).digest()
    return hmac.compare_digest(stored, base64.b64decode(credential.stored_key))
