"""Bearer tokens (security/tokens.py): signed, expiring, bound to a credential version."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kraftlite.security.cluster_auth import derive_key
from kraftlite.security.tokens import TokenClaims, issue, verify

KEY = derive_key("a-cluster-secret-of-some-length", "tokens")
CLAIMS = TokenClaims("alice", 7, 1_000, 61_000, "id-1")


def test_a_token_verifies_until_it_expires() -> None:
    token = issue(KEY, CLAIMS)
    assert verify(KEY, token, 1_000) == CLAIMS
    assert verify(KEY, token, 60_999) == CLAIMS
    assert verify(KEY, token, 61_000) is None


def test_tampered_or_foreign_tokens_do_not_verify() -> None:
    token = issue(KEY, CLAIMS)
    prefix, body, mac = token.split(".")
    other = issue(KEY, TokenClaims("mallory", 7, 1_000, 61_000, "id-2")).split(".")[1]
    assert verify(KEY, f"{prefix}.{other}.{mac}", 2_000) is None  # another body, same MAC
    assert verify(KEY, f"{prefix}.{body}.{mac[:-2]}AA", 2_000) is None
    assert verify(derive_key("another-secret-entirely!", "tokens"), token, 2_000) is None
    assert verify(KEY, "kl2" + token[3:], 2_000) is None
    assert verify(KEY, token + ".x", 2_000) is None


@given(st.text(max_size=300))
def test_no_text_crashes_verify(text: str) -> None:
    assert verify(KEY, text, 2_000) is None
