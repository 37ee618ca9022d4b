"""Who a request acts for, on either edge: a principal, the client's address, and how it
proved who it is. Edge-neutral: the HTTP edge and the Kafka listener build a `Caller` each
from their own credentials, and the gate (gate.py) decides with it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Final

from cryptography import x509

ANONYMOUS: Final = "User:ANONYMOUS"  # Kafka's principal for an unauthenticated client
CLUSTER: Final = "cluster"  # the principal of a node acting for itself


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request acts for, and from which address (the client's, also when a node
    passed its request on). `node` is the signing node's name when a node sent it."""

    principal: str
    host: str
    is_cluster: bool = False
    node: str | None = None
    # how a client proved it: basic, bearer, certificate (HTTP); scram, plain (Kafka)
    login: str | None = None


def certificate_principal(ssl_object: object) -> str | None:
    """A verified TLS client certificate's subject, RFC 4514 (Kafka's DEFAULT mapping);
    None without TLS or without a certificate. Both edges use it."""
    if not isinstance(ssl_object, ssl.SSLObject):
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()
