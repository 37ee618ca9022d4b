"""The server's side of SCRAM (security/scram_exchange.py) against a client written from
RFC 5802 here, and against what an attacker would send."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from kraftlite.security import scram
from kraftlite.security.scram_exchange import ScramError, ScramExchange

SALT = b"0123456789abcdef"
USERS = {
    "alice": scram.make_credential("alice", "pencil", "SCRAM-SHA-256", SALT),
    "bob": scram.make_credential("bob", "pen", "SCRAM-SHA-512", SALT),
}


def exchange(mechanism: str = "SCRAM-SHA-256", nonce: str = "srv") -> ScramExchange:
    return ScramExchange(
        mechanism,
        lambda user: USERS[user] if user in USERS and USERS[user].mechanism == mechanism else None,
        nonce,
        b"fake-salt-key",
    )


def client_final(server_first: bytes, bare: str, password: str, digest: str) -> tuple[str, bytes]:
    attributes = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(
        digest, password.encode(), base64.b64decode(attributes["s"]), int(attributes["i"])
    )
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    without_proof = f"c=biws,r={attributes['r']}"
    auth_message = f"{bare},{server_first.decode()},{without_proof}"
    signature = hmac.new(stored_key, auth_message.encode(), digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = b"v=" + base64.b64encode(
        hmac.new(server_key, auth_message.encode(), digest).digest()
    )
    return f"{without_proof},p={base64.b64encode(proof).decode()}", expected


@pytest.mark.parametrize(
    ("mechanism", "user", "password", "digest"),
    [("SCRAM-SHA-256", "alice", "pencil", "sha256"), ("SCRAM-SHA-512", "bob", "pen", "sha512")],
)
def test_a_full_exchange_proves_the_password_both_ways(
    mechanism: str, user: str, password: str, digest: str
) -> None:
    server = exchange(mechanism)
    bare = f"n={user},r=cli"
    server_first = server.first(f"n,,{bare}".encode())
    assert server_first.startswith(b"r=clisrv,s=")
    final, expected = client_final(server_first, bare, password, digest)
    assert server.final(final.encode()) == expected  # the client can check the server too
    assert server.user == user


def test_a_wrong_password_or_a_replayed_nonce_fails() -> None:
    server = exchange()
    bare = "n=alice,r=cli"
    server_first = server.first(f"n,,{bare}".encode())
    final, _ = client_final(server_first, bare, "not-pencil", "sha256")
    with pytest.raises(ScramError, match="does not check"):
        server.final(final.encode())
    other = exchange(nonce="another")
    other.first(f"n,,{bare}".encode())
    good, _ = client_final(server_first, bare, "pencil", "sha256")
    with pytest.raises(ScramError, match="nonce"):
        other.final(good.encode())  # a proof for another exchange's nonce


def test_an_unknown_user_looks_like_a_known_one_until_the_proof() -> None:
    first = exchange().first(b"n,,n=mallory,r=cli")
    again = exchange().first(b"n,,n=mallory,r=cli")
    assert first == again and b",i=4096" in first  # a stable fake salt, the usual count
    server = exchange()
    server_first = server.first(b"n,,n=mallory,r=cli")
    final, _ = client_final(server_first, "n=mallory,r=cli", "guess", "sha256")
    with pytest.raises(ScramError):
        server.final(final.encode())


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"p=tls-unique,,n=alice,r=cli",
        b"n,a=bob,n=alice,r=cli",  # acting for another user
        b"n,,n=alice",  # no nonce
        b"n,,r=cli",  # no user
        b"n,,n=al=ice,r=cli",  # a bad escape
        b"n,,n=alice,r=cli,m=ext",  # a mandatory extension
        b"\xff\xfe",
        b"n,,n=alice,r=" + b"x" * 5000,
    ],
)
def test_malformed_client_first_messages_are_refused(message: bytes) -> None:
    with pytest.raises(ScramError):
        exchange().first(message)


def test_an_authzid_naming_the_same_user_binds_its_gs2_header() -> None:
    server = exchange()
    bare = "n=alice,r=cli"
    server_first = server.first(f"n,a=alice,{bare}".encode())
    final, _ = client_final(server_first, bare, "pencil", "sha256")
    with pytest.raises(ScramError, match="binding"):  # c=biws is "n,,", not "n,a=alice,"
        server.final(final.encode())
    server = exchange()
    server_first = server.first(f"n,a=alice,{bare}".encode())
    binding = base64.b64encode(b"n,a=alice,").decode()
    attributes = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", base64.b64decode(attributes["s"]), 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = f"c={binding},r={attributes['r']}"
    auth = f"{bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
    assert server.final(f"{without_proof},p={proof.decode()}".encode()).startswith(b"v=")


@pytest.mark.parametrize(
    "bare",
    ["n=alice,r=cli,r=other", "r=cli,n=alice", "n==3=2CD,r=cli", "n=a==2C3D,r=cli"],
)
def test_attributes_out_of_order_repeated_or_badly_escaped_are_refused(bare: str) -> None:
    with pytest.raises(ScramError):
        exchange().first(f"n,,{bare}".encode())


def test_a_fake_salt_is_as_long_as_a_real_one_the_cluster_makes() -> None:
    fake = exchange().first(b"n,,n=mallory,r=cli").decode()
    fake_salt = dict(p.split("=", 1) for p in fake.split(","))["s"]
    assert len(base64.b64decode(fake_salt)) == 32  # controller_app and node/ salt with 32
