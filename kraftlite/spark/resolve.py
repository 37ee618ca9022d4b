"""Bootstrap entries to the brokers' HTTP URLs, once, on the driver. kraftlite's data path is
HTTP, but a Kafka job names its brokers as Kafka listener addresses
(`kafka.bootstrap.servers`); every kraftlite broker has a Kafka listener that can say where its
HTTP side is.

Rules:
1. An http(s):// URL is taken as it is.
2. A bare host:port is asked first as a kraftlite HTTP address: GET /readyz (https:// when
   TLS is wanted) answering with a broker id, 200 or 503 (a broker still starting is one).
3. Otherwise it is taken as a Kafka listener and asked over Kafka's protocol with kraftlite's
   own codec (kraftlite/protocol/kafka/messages.py): ApiVersions; Metadata v12 for no topic, whose
   broker list gives this broker's node id; DescribeConfigs v1 for that broker, whose
   `kraftlite.http.url` is its HTTP URL. A listener whose advertised address is not the one
   dialed (a proxy, a NAT) is asked for each broker it lists until one answers.
4. The Kafka exchange uses the job's security: TLS when it is wanted (the listener's
   certificate checked as any https:// one's), and with a user and password a SASL login
   first, with the job's `kafka.sasl.mechanism` (SCRAM-SHA-256 when none is named; never
   PLAIN unless named). Only TLS authenticates the cluster: without it the answers (the
   login's included) can be forged on the way, as can the HTTP side's, and a password then
   travels as HTTP Basic to whatever URL was learnt, so a password over http:// is warned
   about. With TLS wanted the URL learnt must be https://. A token cannot log in to a Kafka
   listener (no OAUTHBEARER): name such a cluster's brokers by their HTTP addresses.
   The exchange is bounded: one deadline for all of it, answers of at most MAX_FRAME bytes,
   at most MAX_CANDIDATES brokers asked, and a server's text quoted at most 100 characters.
5. Entries that resolve to nothing are left out with a warning, as a Kafka client skips a
   bootstrap server that is down; none resolving is an error that gives each entry's reason.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import secrets
import socket
import ssl
import struct
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from kraftlite.client.credentials import Credentials
from kraftlite.clock import SystemClock
from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.protocol.kafka.wire import WireError
from kraftlite.security.scram import DEFAULT_MECHANISM
from kraftlite.security.scram_client import ScramClient
from kraftlite.security.scram_exchange import ScramError
from kraftlite.spark.cluster import LOG
from kraftlite.spark.options import OptionError, Security, split_host_port

PROBE_TIMEOUT_S = 5.0
CLIENT_ID = "kraftlite-spark"
HTTP_URL_CONFIG = "kraftlite.http.url"
BROKER_RESOURCE = 4  # Kafka's ConfigResource.Type.BROKER
METADATA_VERSION = 12
DESCRIBE_CONFIGS_VERSION = 1
SASL_AUTHENTICATE_VERSION = 1
MAX_FRAME = 1 << 20  # an answer to these requests is a few hundred bytes
MAX_CANDIDATES = 16  # brokers a Metadata answer lists that are asked for their HTTP URL
MAX_READYZ = 64 << 10
_SIZE = struct.Struct(">i")
_CLOCK = SystemClock()


class ResolveError(Exception):
    """One entry could not be resolved: the message says why."""


def resolve(
    entries: Iterable[str], security: Security, timeout_s: float = PROBE_TIMEOUT_S
) -> tuple[str, ...]:
    """Rules 1 and 5: the HTTP URLs of the bootstrap entries, in their order."""
    urls: list[str] = []
    failures: dict[str, str] = {}
    for entry in entries:
        if "://" in entry:
            urls.append(entry)
            continue
        try:
            urls.append(resolve_address(entry, security, timeout_s))
        except ResolveError as exc:
            failures[entry] = str(exc)
    if not urls:
        reasons = "; ".join(f"{entry}: {why}" for entry, why in failures.items())
        raise OptionError(f"no bootstrap entry leads to a kraftlite broker ({reasons})")
    for entry, why in failures.items():
        LOG.warning("bootstrap entry %s left out: %s", entry, why)
    if security.credentials.password is not None and any(u.startswith("http://") for u in urls):
        LOG.warning(
            "the password goes to the brokers as HTTP Basic over plain http://: anyone on the "
            "path can read it (use TLS: kafka.security.protocol SASL_SSL, https:// URLs)"
        )
    return tuple(dict.fromkeys(urls))


def resolve_address(entry: str, security: Security, timeout_s: float) -> str:
    """Rules 2-4 for one bare host:port."""
    url = f"{'https' if security.tls else 'http'}://{entry}"
    as_http = probe_http(url, security.credentials, timeout_s)
    if as_http is None:
        return url
    host, port = split_host_port(entry)
    try:
        found = kafka_http_url(host, port, timeout_s, security)
    except (OSError, WireError, ResolveError, ScramError) as exc:
        as_kafka = _reason(exc)
    else:
        if security.tls and not found.startswith("https://"):
            raise ResolveError(
                f"its Kafka listener names the HTTP address {found}, but TLS is asked for "
                "(kafka.security.protocol SSL/SASL_SSL or a CA file): give an https:// URL"
            )
        return found.rstrip("/")
    raise ResolveError(f"not a kraftlite HTTP address ({as_http}); as a Kafka listener: {as_kafka}")


def _quote(text: str) -> str:
    """A server's text in an error: at most 100 characters, quoted."""
    return repr(text[:100])


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        return _reason(exc.reason) if isinstance(exc.reason, BaseException) else str(exc.reason)
    if isinstance(exc, socket.timeout | TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__


def probe_http(url: str, credentials: Credentials, timeout_s: float) -> str | None:
    """Rule 2: None if `url` is a kraftlite broker's HTTP side, else why not."""
    try:
        # S310: a bootstrap address from the options, with a scheme we chose (http or https)
        with urllib.request.urlopen(  # noqa: S310
            url + "/readyz", timeout=timeout_s, context=credentials.ssl_context()
        ) as response:
            raw = response.read(MAX_READYZ)
    except urllib.error.HTTPError as error:
        raw = error.read(MAX_READYZ)
        error.close()
        if error.code != 503:  # a broker still starting answers 503, with its id
            return f"HTTP {error.code} to /readyz"
    except (OSError, http.client.HTTPException) as exc:
        return _reason(exc)
    return readyz_verdict(raw)


def readyz_verdict(raw: bytes) -> str | None:
    """None if `raw` is a kraftlite broker's /readyz answer, else what it is instead."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("broker_id"), int):
        return None
    if isinstance(body, dict) and "leader_id" in body:
        return "a kraftlite controller answers there, not a broker"
    return "its /readyz answer is not a kraftlite broker's"


# ---------------------------------------------------------------------- the Kafka exchange


def kafka_http_url(host: str, port: int, timeout_s: float, security: Security) -> str:
    """Rules 3-4: the HTTP URL a kraftlite broker's Kafka listener at host:port names."""
    deadline = _CLOCK.monotonic_ms() / 1000 + timeout_s
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout_s))
        if security.tls:
            context = security.credentials.ssl_context() or ssl.create_default_context()
            sock.settimeout(max(deadline - _CLOCK.monotonic_ms() / 1000, 0.001))
            sock = stack.enter_context(context.wrap_socket(sock, server_hostname=host))
        connection = _KafkaConnection(sock, deadline)
        versions = connection.call(ApiKey.API_VERSIONS, 0, {})
        if versions["error_code"]:
            raise ResolveError(f"ApiVersions answered error {versions['error_code']}")
        credentials = security.credentials
        if credentials.user is not None and credentials.password is not None:
            login(connection, credentials.user, credentials.password, security)
        missing = missing_apis(versions["api_keys"])
        if missing:
            raise ResolveError(
                f"it speaks Kafka's protocol but does not serve {missing}, which a kraftlite "
                "broker's Kafka listener serves to say where its HTTP side is"
            )
        brokers = connection.call(ApiKey.METADATA, METADATA_VERSION, {"topics": []})["brokers"]
        peer = sock.getpeername()[0]
        why = "its Metadata answer lists no broker"
        for node_id in candidates(brokers, host, port, peer)[:MAX_CANDIDATES]:
            answer = connection.call(
                ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, describe_configs(node_id)
            )
            url, why = http_url_of(answer)
            if url is not None:
                return url
        raise ResolveError(why)


def login(connection: _KafkaConnection, user: str, password: str, security: Security) -> None:
    """Rule 4: SaslHandshake, then SaslAuthenticate rounds; raises unless logged in."""
    mechanism = security.mechanism or DEFAULT_MECHANISM
    shake = connection.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if shake["error_code"]:
        offered = ", ".join(shake["mechanisms"] or [])
        raise ResolveError(f"its Kafka listener takes SASL {_quote(offered)}, not {mechanism}")
    try:
        secret = password.encode()
    except UnicodeEncodeError:
        raise ResolveError("the password is not valid Unicode text") from None
    if mechanism == "PLAIN":
        _authenticate(connection, b"\0" + user.encode("utf-8", "replace") + b"\0" + secret)
        return
    client = ScramClient(user, password, mechanism, nonce=secrets.token_urlsafe(24))
    server_first = _authenticate(connection, client.first())
    client.verify(_authenticate(connection, client.final(server_first)))


def _authenticate(connection: _KafkaConnection, token: bytes) -> bytes:
    answer = connection.call(
        ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION, {"auth_bytes": token}
    )
    if answer["error_code"]:
        raise ResolveError(
            f"SASL_AUTHENTICATION_FAILED ({answer['error_code']}) logging in to its Kafka "
            "listener: check the user, the password and kafka.sasl.mechanism"
        )
    return bytes(answer["auth_bytes"])


def missing_apis(api_keys: Iterable[Mapping[str, Any]]) -> str | None:
    """Which of Metadata v12 and DescribeConfigs v1 an ApiVersions answer lacks, if any."""
    served = {k["api_key"]: (k["min_version"], k["max_version"]) for k in api_keys}
    lacking = [
        f"{name} v{version}"
        for key, version, name in (
            (ApiKey.METADATA, METADATA_VERSION, "Metadata"),
            (ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, "DescribeConfigs"),
        )
        if not served.get(key, (1, 0))[0] <= version <= served.get(key, (1, 0))[1]
    ]
    return " and ".join(lacking) or None


def candidates(brokers: Iterable[Mapping[str, Any]], host: str, port: int, peer: str) -> list[int]:
    """The node ids of a Metadata answer's brokers, the one dialed first (by its advertised
    host and port, or the address actually reached), then those on the same port."""

    def rank(broker: Mapping[str, Any]) -> int:
        same_port = broker["port"] == port
        if same_port and str(broker["host"]).lower() in {host.lower(), peer}:
            return 0
        return 1 if same_port else 2

    return [b["node_id"] for b in sorted(brokers, key=lambda b: (rank(b), b["node_id"]))]


def describe_configs(node_id: int) -> dict[str, Any]:
    """A DescribeConfigs request body for one broker's `kraftlite.http.url`."""
    return {
        "resources": [
            {
                "resource_type": BROKER_RESOURCE,
                "resource_name": str(node_id),
                "configuration_keys": [HTTP_URL_CONFIG],
            }
        ],
        "include_synonyms": False,
    }


def http_url_of(answer: Mapping[str, Any]) -> tuple[str | None, str]:
    """The `kraftlite.http.url` a DescribeConfigs answer holds, or None and why not."""
    results = answer.get("results") or []
    if not results:
        return None, "DescribeConfigs answered no result"
    result = results[0]
    if result["error_code"]:
        message = result.get("error_message") or ""
        return None, f"DescribeConfigs answered error {result['error_code']} {_quote(message)}"
    for config in result["configs"]:
        if config["name"] == HTTP_URL_CONFIG and config["value"]:
            value = str(config["value"])
            if value.startswith(("http://", "https://")):
                return value, ""
            return None, f"its {HTTP_URL_CONFIG} is not an http(s) URL: {_quote(value)}"
    return None, f"it answers Kafka's protocol but names no {HTTP_URL_CONFIG}: not kraftlite"


class _KafkaConnection:
    """Requests one at a time, each frame a 4-byte big-endian size and the message."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline  # for the whole exchange, not each read
        self.correlation_id = 0

    def call(self, api_key: ApiKey, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        self.correlation_id += 1
        frame = messages.encode_request(api_key, version, self.correlation_id, CLIENT_ID, body)
        self.sock.sendall(_SIZE.pack(len(frame)) + frame)
        size = _SIZE.unpack(self._read(_SIZE.size, api_key))[0]
        if not 0 < size <= MAX_FRAME:
            raise ResolveError(f"an answer of {size} bytes is not Kafka's")
        response = messages.decode_response(api_key, version, self._read(size, api_key))
        if response.correlation_id != self.correlation_id:
            raise ResolveError("an answer to another request came back")
        return response.body

    def _read(self, count: int, api_key: ApiKey) -> bytes:
        data = bytearray()
        while len(data) < count:
            remaining = self.deadline - _CLOCK.monotonic_ms() / 1000
            if remaining <= 0:
                raise ResolveError(f"no answer to {api_key.name} in time")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(count - len(data))
            except TimeoutError:
                raise ResolveError(f"no answer to {api_key.name} in time") from None
            if not chunk:
                raise ResolveError(
                    f"the connection was closed on {api_key.name} (a kraftlite cluster that "
                    "requires authentication answers only Kafka clients that log in: give a "
                    "user and password, or its brokers' HTTP URLs)"
                )
            data += chunk
        return bytes(data)
