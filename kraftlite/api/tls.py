"""TLS for every node's HTTP listener and for the calls nodes make to each other.

Rules:
1. `tls.cert.file` + `tls.key.file` turn TLS on (TLS 1.2 or newer); the node's URLs are
   then https://. `tls.ca.file` is the CA that signs the cluster's certificates: nodes
   verify each other against it (host names included), and with `tls.client.auth =
   requested|required` clients' certificates too (a verified certificate's subject is the
   client's principal: api/auth.py).
2. A node presents its own certificate when it calls another node, so `required` works on
   every listener.
"""

from __future__ import annotations

import ssl

from kraftlite.config import BrokerConfig, ConfigError, ControllerConfig

_Config = BrokerConfig | ControllerConfig

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def enabled(config: _Config) -> bool:
    return config.tls_cert_file is not None


def check(config: _Config) -> None:
    """ConfigError for settings that cannot work together."""
    if (config.tls_cert_file is None) != (config.tls_key_file is None):
        raise ConfigError("tls.cert.file and tls.key.file go together")
    if config.tls_client_auth != "none" and config.tls_ca_file is None:
        raise ConfigError(f"tls.client.auth = {config.tls_client_auth} needs tls.ca.file")
    if config.tls_client_auth != "none" and config.tls_cert_file is None:
        raise ConfigError("tls.client.auth needs TLS on (tls.cert.file, tls.key.file)")


def server_context(config: _Config) -> ssl.SSLContext | None:
    if config.tls_cert_file is None or config.tls_key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    if config.tls_ca_file is not None:
        context.load_verify_locations(config.tls_ca_file)
    context.verify_mode = _VERIFY[config.tls_client_auth]
    return context


def client_context(config: _Config) -> ssl.SSLContext | None:
    """For calls to other nodes: trust the cluster CA, present our certificate."""
    if config.tls_cert_file is None or config.tls_key_file is None:
        return None
    context = ssl.create_default_context(
        cafile=None if config.tls_ca_file is None else str(config.tls_ca_file)
    )
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    return context
