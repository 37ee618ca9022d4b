"""How a client proves who it is to a cluster with authentication on (docs/security.md):
a SCRAM user's password (HTTP Basic), a bearer token (POST /v1/tokens), or a TLS client
certificate; and which CA it trusts for https:// brokers."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Credentials:
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None  # trust this CA (PEM) for https:// brokers
    cert_file: str | None = None  # a client certificate (PEM): its subject is the principal
    key_file: str | None = None

    def __post_init__(self) -> None:
        if (self.user is None) != (self.password is None):
            raise ValueError("a user needs a password, and a password a user")
        if self.user is not None and self.token is not None:
            raise ValueError("give a user and password, or a token, not both")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs its key file, and the other way round")

    @classmethod
    def from_options(cls, options: Mapping[str, str | None], prefix: str = "") -> Credentials:
        """From `{prefix}user`, `password`, `token`, `ca.file`, `cert.file`, `key.file`."""

        def get(name: str) -> str | None:
            value = options.get(prefix + name)
            return value if value else None

        return cls(
            get("user"),
            get("password"),
            get("token"),
            get("ca.file"),
            get("cert.file"),
            get("key.file"),
        )

    def headers(self) -> dict[str, str]:
        if self.token is not None:
            return {"Authorization": f"Bearer {self.token}"}
        if self.user is not None and self.password is not None:
            basic = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {basic}"}
        return {}

    def ssl_context(self) -> ssl.SSLContext | None:
        """None: the platform's trust store and no client certificate."""
        if self.ca_file is None and self.cert_file is None:
            return None
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


NONE = Credentials()
