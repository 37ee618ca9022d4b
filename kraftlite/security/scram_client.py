"""The client's side of a SCRAM exchange (RFC 5802, RFC 7677), for kraftlite's own code that
logs in to a Kafka listener (the Spark source resolving Kafka addresses). The messages are
those of scram_exchange.py, the server's side.

Rules:
1. The server must extend our nonce, and show a salt and an iteration count between
   MIN_ITERATIONS and MAX_ITERATIONS (what a kraftlite user can be created with): a hostile
   server cannot make us spend unbounded CPU. Its first message is parsed strictly (r, s, i
   in that order, each once; the mandatory-extension attribute m is refused, RFC 5802).
2. The exchange succeeds only once the server's signature checks: a server that does not
   know the credential cannot pass for the cluster.
3. Anything else is `ScramError`, and says why without the password.
Pure: the client nonce is an argument.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from kraftlite.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from kraftlite.security.scram_exchange import ScramError, attributes


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    def __init__(self, user: str, password: str, mechanism: str, nonce: str) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"{mechanism} is not a SCRAM mechanism")
        self._digest = MECHANISMS[mechanism]
        self._password = password
        self._nonce = nonce
        self._first_bare = f"n={_escape(user)},r={nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        """Message 1: client-first (no channel binding)."""
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """Message 2 in, message 3 out (rule 1)."""
        text = _text(server_first)
        found = attributes(text, "rsi")
        if "m" in found:
            raise ScramError("the server asks for an extension we do not know")
        nonce, salt, count = found["r"], found["s"], found["i"]
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("the server did not extend our nonce")
        try:
            iterations = int(count or "")
            salt_bytes = base64.b64decode(salt, validate=True)
        except (ValueError, binascii.Error):
            raise ScramError("the server's salt or iteration count is malformed") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS or not salt_bytes:
            raise ScramError(f"the server asks for {iterations} iterations")
        salted = hashlib.pbkdf2_hmac(self._digest, self._password.encode(), salt_bytes, iterations)
        client_key = hmac.new(salted, b"Client Key", self._digest).digest()
        stored_key = hashlib.new(self._digest, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self._digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self._digest).digest()
        self._server_signature = hmac.new(server_key, auth_message, self._digest).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """Message 4 (rule 2): returns only if the server's signature checks."""
        text = _text(server_final)
        if text.startswith("e="):
            raise ScramError(f"the server refused: {text[2:66]}")
        try:
            signature = base64.b64decode(text.removeprefix("v="), validate=True)
        except (ValueError, binascii.Error):
            raise ScramError("the server's signature is malformed") from None
        if (
            not text.startswith("v=")
            or not self._server_signature
            or not hmac.compare_digest(signature, self._server_signature)
        ):
            raise ScramError("the server's signature does not check: not the cluster")


def _text(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("a SCRAM message is not UTF-8") from None
