"""Producer ids for idempotent producers (issue 24): unguessable, bound to the principal
that obtained them, and checked by any broker with no state of its own.

Kafka's brokers take producer ids from blocks the controller hands out, so ids are
sequential and anyone may write under anyone's id. kraftlite's leaders keep producer state
per id (broker/producer_state.py), so a second principal writing under a first one's id
could make the first one's next batches "duplicates" (acknowledged, never written) or
fence it. Here an id says whose it is.

Rules:
1. An id is a positive int64: NONCE_BITS random bits, then a MAC_BITS-bit tag of (the
   principal, the nonce) under a key every node derives from the cluster secret
   (cluster_auth.derive_key). Any broker, the leader a batch lands on included, checks
   that tag for the principal a produce request acts for; it needs no record of the ids
   it or any other broker gave out.
2. A batch naming an id whose tag does not match its writer's principal is refused with
   UNKNOWN_PRODUCER_ID, as an id never given out is, and its text says nothing more: no
   epoch, no sequence, no principal.
3. Collisions: two ids of one principal are equal only if their 40-bit nonces are, so 10,000
   producers of one principal alive at once share an id with odds of about 5 in 100,000;
   two principals' ids never collide unless their tags do too.
4. Forging: a principal that learns another's id (batch headers show it to readers) cannot
   write under it: its own tag for that nonce matches with odds of 2**-MAC_BITS, and it
   cannot try again with another principal it does not hold.
5. Granting (KIP-679's rule, the callers ask the gate): IDEMPOTENT_WRITE on the cluster, or
   WRITE on some topic.

Pure: the key and the randomness are arguments.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

NONCE_BITS: Final = 40
MAC_BITS: Final = 23  # NONCE_BITS + MAC_BITS = 63: a positive int64, as Kafka's ids are
_MAC_MASK: Final = (1 << MAC_BITS) - 1
_NONCE_MASK: Final = (1 << NONCE_BITS) - 1


def _tag(key: bytes, principal: str, nonce: int) -> int:
    digest = hmac.new(key, nonce.to_bytes(8, "big") + principal.encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:4], "big") & _MAC_MASK


def mint(key: bytes, principal: str, nonce: int) -> int:
    """Rule 1: the id of `principal` for `nonce` (NONCE_BITS random bits)."""
    nonce &= _NONCE_MASK
    return (nonce << MAC_BITS) | _tag(key, principal, nonce)


def belongs_to(key: bytes, producer_id: int, principal: str) -> bool:
    """Rule 2: whether `producer_id` was given to `principal`."""
    if not 0 <= producer_id < 1 << (NONCE_BITS + MAC_BITS):
        return False
    nonce = producer_id >> MAC_BITS
    return hmac.compare_digest(
        (producer_id & _MAC_MASK).to_bytes(4, "big"),
        _tag(key, principal, nonce).to_bytes(4, "big"),
    )
