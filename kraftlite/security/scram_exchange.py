"""The server's side of a SCRAM exchange (RFC 5802, RFC 7677; Kafka's SASL/SCRAM), for
clients that authenticate over Kafka's protocol: the password never crosses the wire and
the server keeps only what scram.py stores (salt, iterations, StoredKey, ServerKey).

Messages, as bytes (UTF-8):
1. client-first  `n,,n=<user>,r=<client nonce>` (no channel binding; `a=` authzid refused
   unless it names the same user)
2. server-first  `r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>`
3. client-final  `c=biws,r=<nonce>,p=<base64 proof>`
4. server-final  `v=<base64 server signature>`

Rules:
1. The proof is checked as RFC 5802 says: ClientSignature = HMAC(StoredKey, AuthMessage),
   ClientKey = proof XOR ClientSignature, and H(ClientKey) must equal StoredKey (compared
   in constant time).
2. An unknown user gets a server-first built from a fake salt derived from the user name
   and a secret (as long as a real one) at the default iteration count, and fails only at
   the proof, so the answers do not tell which users exist; a user created with another
   iteration count than the default shows that count, as any SCRAM server does.
3. Any malformed message, a nonce that does not extend ours, or a proof that does not check
   is `ScramError`: the exchange is over.
Pure: the server nonce and the fake-salt key are arguments.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable

from kraftlite.metadata.records import UserScramCredentialRecord
from kraftlite.security.scram import MECHANISMS, MIN_ITERATIONS

_MAX_MESSAGE = 4096


class ScramError(ValueError):
    """The exchange failed (rule 3); the message says why, for the server's log only."""


def attributes(message: str, order: str) -> dict[str, str]:
    """The attributes, which must start with those named in `order`, in that order, and
    appear once each."""
    found: dict[str, str] = {}
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1 or name in found:
            raise ScramError(f"malformed attribute {part[:32]!r}")
        found[name] = value
    if "".join(found)[: len(order)] != order:
        raise ScramError(f"attributes must start with {', '.join(order)}")
    return found


def _unescape(name: str) -> str:
    """RFC 5802's saslname: "=2C" is ",", "=3D" is "=", any other "=" is malformed."""
    out, i = [], 0
    while i < len(name):
        if name[i] != "=":
            out.append(name[i])
            i += 1
        elif name[i : i + 3] in {"=2C", "=3D"}:
            out.append("," if name[i : i + 3] == "=2C" else "=")
            i += 3
        else:
            raise ScramError("malformed user name")
    return "".join(out)


class ScramExchange:
    def __init__(
        self,
        mechanism: str,
        credential_of: Callable[[str], UserScramCredentialRecord | None],
        server_nonce: str,
        fake_salt_key: bytes,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ScramError(f"unknown mechanism {mechanism}")
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self._credential_of = credential_of
        self._server_nonce = server_nonce
        self._fake_salt_key = fake_salt_key
        self.user: str | None = None
        self._credential: UserScramCredentialRecord | None = None
        self._client_first_bare = ""
        self._gs2_header = ""
        self._server_first = ""
        self._nonce = ""

    def first(self, client_first: bytes) -> bytes:
        """Message 1 in, message 2 out."""
        text = self._text(client_first)
        gs2, sep, bare = text.partition(",")
        authzid, sep2, bare = bare.partition(",")
        # 'y': the client could bind, but we offer no -PLUS mechanism (RFC 5802 section 6)
        if (
            not sep
            or not sep2
            or gs2 not in {"n", "y"}
            or (authzid and not authzid.startswith("a="))
        ):
            raise ScramError("no channel binding is served (gs2 header 'n' or 'y')")
        self._gs2_header = f"{gs2},{authzid},"
        found = attributes(bare, "nr")
        user, nonce = _unescape(found.get("n", "")), found.get("r", "")
        if not user or not nonce or "m" in found:
            raise ScramError("client-first needs a user and a nonce")
        if authzid and _unescape(authzid[2:]) != user:
            raise ScramError("acting for another user is not served")
        self.user = user
        self._credential = self._credential_of(user)
        if self._credential is not None:
            salt, iterations = self._credential.salt, self._credential.iterations
        else:  # rule 2: as long as a real salt (32 bytes), at the default count
            fake = hmac.new(self._fake_salt_key, user.encode(), "sha256").digest()
            salt, iterations = base64.b64encode(fake).decode(), MIN_ITERATIONS
        self._nonce = nonce + self._server_nonce
        self._client_first_bare = bare
        self._server_first = f"r={self._nonce},s={salt},i={iterations}"
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        """Message 3 in, message 4 out; the exchange succeeded if this returns."""
        text = self._text(client_final)
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final has no proof")
        found = attributes(without_proof, "cr")
        binding = base64.b64encode(self._gs2_header.encode()).decode()
        if found["c"] != binding or found["r"] != self._nonce:
            raise ScramError("channel binding or nonce does not match")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except (binascii.Error, ValueError):
            raise ScramError("the proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}"
        credential = self._credential_of(self.user or "")  # as it is now, not at the start
        if credential is None or credential.mechanism != self.mechanism:
            raise ScramError(f"no {self.mechanism} credential for this user")
        stored_key = base64.b64decode(credential.stored_key)
        signature = hmac.new(stored_key, auth_message.encode(), self.digest).digest()
        if len(proof) != len(signature):
            raise ScramError("the proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), stored_key):
            raise ScramError("the proof does not check")
        server_key = base64.b64decode(credential.server_key)
        verifier = hmac.new(server_key, auth_message.encode(), self.digest).digest()
        return b"v=" + base64.b64encode(verifier)

    @staticmethod
    def _text(message: bytes) -> str:
        if len(message) > _MAX_MESSAGE:
            raise ScramError("the message is too long")
        try:
            return message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("the message is not UTF-8") from None
