"""The client's side of SCRAM (kraftlite/security/scram_client.py) against the server's side
(scram_exchange.py): a right password logs in and the server is checked in turn; a wrong
one, a server without the credential, or a hostile server's first message all fail."""

from __future__ import annotations

import base64

import pytest

from kraftlite.security.scram import make_credential
from kraftlite.security.scram_client import MAX_ITERATIONS, ScramClient
from kraftlite.security.scram_exchange import ScramError, ScramExchange

SALT = b"0123456789abcdef"


def server(mechanism: str, password: str = "pw, =good") -> ScramExchange:
    credential = make_credential("a,l=ce", password, mechanism, SALT)
    return ScramExchange(
        mechanism, {"a,l=ce": credential}.get, server_nonce="srvnonce", fake_salt_key=b"k" * 32
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_right_password_logs_in_and_the_server_proves_it_knows_the_credential(
    mechanism: str,
) -> None:
    client = ScramClient("a,l=ce", "pw, =good", mechanism, nonce="clinonce")
    exchange = server(mechanism)
    client.verify(exchange.final(client.final(exchange.first(client.first()))))
    assert exchange.user == "a,l=ce"  # the escaped name arrived whole


def test_a_wrong_password_is_refused_by_the_server() -> None:
    client = ScramClient("a,l=ce", "guess", "SCRAM-SHA-256", nonce="clinonce")
    exchange = server("SCRAM-SHA-256")
    with pytest.raises(ScramError):
        exchange.final(client.final(exchange.first(client.first())))


def test_a_server_that_does_not_know_the_credential_is_not_believed() -> None:
    client = ScramClient("a,l=ce", "pw, =good", "SCRAM-SHA-256", nonce="clinonce")
    honest = server("SCRAM-SHA-256")
    client.final(honest.first(client.first()))
    forged = base64.b64encode(b"x" * 32)
    for answer in [b"v=" + forged, b"e=invalid-proof", b"v=***", b"", b"\xff"]:
        with pytest.raises(ScramError):
            client.verify(answer)


def test_verify_before_the_exchange_fails() -> None:
    with pytest.raises(ScramError):
        ScramClient("u", "p", "SCRAM-SHA-256", nonce="n").verify(b"v=" + base64.b64encode(b""))


@pytest.mark.parametrize(
    "server_first",
    [
        b"r=othernonce,s=c2FsdA==,i=4096",  # does not extend ours
        b"r=clinonce,s=c2FsdA==,i=4096",  # extends it by nothing
        b"r=clinonceX,s=c2FsdA==,i=1",  # too few iterations
        b"r=clinonceX,s=c2FsdA==,i=" + str(MAX_ITERATIONS + 1).encode(),  # too costly
        b"r=clinonceX,s=***,i=4096",
        b"r=clinonceX,s=,i=4096",
        b"r=clinonceX,s=c2FsdA==",
        b"r=clinonceX,s=c2FsdA==,i=many",
        b"m=ext,r=clinonceX,s=c2FsdA==,i=4096",  # a mandatory extension we do not know
        b"r=clinonceX,s=c2FsdA==,i=4096,m=ext",
        b"r=clinonceX,r=clinonceY,s=c2FsdA==,i=4096",  # an attribute twice
        b"s=c2FsdA==,r=clinonceX,i=4096",  # out of order
        b"\xff\xfe",
    ],
)
def test_a_hostile_server_first_message_is_refused(server_first: bytes) -> None:
    client = ScramClient("u", "p", "SCRAM-SHA-256", nonce="clinonce")
    client.first()
    with pytest.raises(ScramError):
        client.final(server_first)


def test_only_scram_mechanisms() -> None:
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        ScramClient("u", "p", "PLAIN", nonce="n")
