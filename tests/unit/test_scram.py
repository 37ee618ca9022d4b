"""SCRAM credentials (security/scram.py), checked against RFC 7677's example exchange."""

from __future__ import annotations

import base64
import hashlib
import hmac

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.security.scram import check_password, make_credential

# RFC 7677 section 3: user "user", password "pencil"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
AUTH_MESSAGE = (
    b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
)
CLIENT_PROOF = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_SIGNATURE = base64.b64decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_the_stored_keys_verify_rfc_7677s_exchange() -> None:
    credential = make_credential("user", "pencil", "SCRAM-SHA-256", SALT, 4096)
    stored_key = base64.b64decode(credential.stored_key)
    server_key = base64.b64decode(credential.server_key)
    assert hmac.new(server_key, AUTH_MESSAGE, "sha256").digest() == SERVER_SIGNATURE
    client_signature = hmac.new(stored_key, AUTH_MESSAGE, "sha256").digest()
    client_key = bytes(a ^ b for a, b in zip(CLIENT_PROOF, client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == stored_key


def test_passwords_check_only_against_their_own_credential() -> None:
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        credential = make_credential("alice", "s3cret", mechanism, b"salt" * 8)
        assert check_password(credential, "s3cret")
        assert not check_password(credential, "s3cret ")
        assert not check_password(credential, "")
        assert not check_password(credential, "x" * 5000)
        assert "s3cret" not in repr(credential)


@settings(max_examples=20, deadline=None)
@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_only_the_password_checks(password: str, other: str) -> None:
    credential = make_credential("u", password, "SCRAM-SHA-256", b"0123456789abcdef")
    assert check_password(credential, password)
    assert check_password(credential, other) is (other == password)
