"""The options of `format("kraftlite")`, pure (no Spark, no network): what each path takes,
Spark's Kafka options mapped onto kraftlite's, and the refusals. Checked on the driver before
anything runs (docs/spark.md has the table).

Rules:
1. Names are case-insensitive: Spark lower-cases them before a Python source sees them.
2. Every option is known to the path it is given to (batch read, streaming read, batch or
   streaming write), or it is refused, naming it and listing the known ones. A Kafka job's
   option that kraftlite does not understand is never dropped silently: that is how a job
   with `endingTimestamp` once read to the end without a word.
3. Spark's Kafka options mean here what they mean there. Those that only tune a Kafka
   client kraftlite does not have are accepted and ignored (IGNORED, each with its reason);
   Kafka settings kraftlite cannot honour are refused with the reason (REFUSED).
4. Two names for one setting (`kraftlite.bootstrap` and `kafka.bootstrap.servers`,
   `kraftlite.auth.user` and the JAAS login's username, ...) must agree when both are given.
5. A password never appears in an error message.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kraftlite.client.credentials import Credentials


class OptionError(ValueError):
    """A bad option: the message names it."""


class Options(dict[str, str]):
    """Spark's option names are case-insensitive (it hands them over lower-cased)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__({k.lower(): v for k, v in options.items()})

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


class Mode(Enum):
    BATCH_READ = "spark.read"
    STREAM_READ = "spark.readStream"
    BATCH_WRITE = "df.write"
    STREAM_WRITE = "df.writeStream"


BOOTSTRAP = "kraftlite.bootstrap"
KAFKA_BOOTSTRAP = "kafka.bootstrap.servers"
AUTH = "kraftlite.auth."
SECURITY_PROTOCOL = "kafka.security.protocol"
SASL_MECHANISM = "kafka.sasl.mechanism"
JAAS_CONFIG = "kafka.sasl.jaas.config"
TRUSTSTORE = "kafka.ssl.truststore.location"
TRUSTSTORE_TYPE = "kafka.ssl.truststore.type"
KEYSTORE = "kafka.ssl.keystore.location"
KEYSTORE_TYPE = "kafka.ssl.keystore.type"
ENDPOINT_IDENTIFICATION = "kafka.ssl.endpoint.identification.algorithm"

CONNECTION = frozenset(
    {
        BOOTSTRAP,
        KAFKA_BOOTSTRAP,
        *(AUTH + n for n in ("user", "password", "token", "ca.file", "cert.file", "key.file")),
        SECURITY_PROTOCOL,
        SASL_MECHANISM,
        JAAS_CONFIG,
        TRUSTSTORE,
        TRUSTSTORE_TYPE,
        KEYSTORE,
        KEYSTORE_TYPE,
        ENDPOINT_IDENTIFICATION,
        "kafka.client.id",  # ignored: see IGNORED
    }
)
READ = frozenset(
    {
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "failOnDataLoss",
        "includeHeaders",
        "minPartitions",
        "maxRecordsPerPartition",
        "fetchMaxBytes",
        "kafka.fetch.max.bytes",
        "kafka.max.partition.fetch.bytes",
        "requestTimeoutMs",
        "kafka.request.timeout.ms",
        "kafka.isolation.level",
        "kafka.max.poll.records",
        "kafka.group.id",
        "groupIdPrefix",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
    }
)
BATCH_ONLY = frozenset(
    {"endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp", "latestPerKey"}
)
STREAM_ONLY = frozenset(
    {"maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "commitToGroup"}
)
WRITE = frozenset(
    {
        "topic",
        "batchMaxBytes",
        "requestTimeoutMs",
        "kafka.request.timeout.ms",
        "kafka.acks",
        "deliveryGuarantee",
        "transactionalIdPrefix",
        "transactionTimeoutMs",
        "kafka.transaction.timeout.ms",
    }
)
SPARK_STREAM_WRITE = frozenset({"checkpointLocation", "queryName"})  # Spark passes these itself
KNOWN: dict[Mode, frozenset[str]] = {
    Mode.BATCH_READ: CONNECTION | READ | BATCH_ONLY,
    Mode.STREAM_READ: CONNECTION | READ | STREAM_ONLY,
    Mode.BATCH_WRITE: CONNECTION | WRITE,
    Mode.STREAM_WRITE: CONNECTION | WRITE | SPARK_STREAM_WRITE,
}

# Rule 3: accepted, and why they change nothing here.
IGNORED: dict[str, str] = {
    "kafka.client.id": "requests carry no client id",
    "kafka.max.poll.records": "there is no poll loop: a task fetches its range page by page",
    "kafka.group.id": "the source uses no consumer group (commitToGroup shows progress)",
    "groupIdPrefix": "the source uses no consumer group",
    "kafkaConsumer.pollTimeoutMs": "requestTimeoutMs bounds each fetch",
    "fetchOffset.numRetries": "offsets are asked again, with backoff, on their own",
    "fetchOffset.retryIntervalMs": "offsets are asked again, with backoff, on their own",
}

# Rule 3: Kafka settings a job may carry that kraftlite refuses, with the reason.
REFUSED: dict[str, str] = {
    "path": "kraftlite takes no path: call load(), save() or start() without one (topics come "
    "from subscribe, subscribePattern, assign or topic)",
    "kafka.auto.offset.reset": "use startingOffsets (as Spark's Kafka source says)",
    "kafka.enable.auto.commit": "the source commits no offsets; commitToGroup does, per batch",
    "kafka.key.deserializer": "keys are binary columns: cast or decode them in the query",
    "kafka.value.deserializer": "values are binary columns: cast or decode them in the query",
    "kafka.key.serializer": "give the key as a binary or string column",
    "kafka.value.serializer": "give the value as a binary or string column",
    "kafka.interceptor.classes": "kraftlite runs no Kafka client to intercept",
    "kafka.transactional.id": "the sink names a transactional id per query and task itself: "
    "set transactionalIdPrefix",
    "kafka.ssl.key.password": "encrypted keys are not read: give an unencrypted PEM key",
    "kafka.ssl.keystore.password": "kraftlite reads PEM files, which have no store password",
    "kafka.ssl.truststore.password": "kraftlite reads PEM files, which have no store password",
}

READ_MODES = {Mode.BATCH_READ, Mode.STREAM_READ}
_CANONICAL = {name.lower(): name for names in KNOWN.values() for name in names} | {
    name.lower(): name for name in REFUSED
}


def check_known(options: Mapping[str, str], mode: Mode) -> None:
    """Rule 2: refuse any option this path does not take, saying why."""
    known = {name.lower() for name in KNOWN[mode]}
    for given in sorted(options):
        name = given.lower()
        if name in known:
            continue
        canonical = _CANONICAL.get(name, given)
        where = f"{mode.value}.format('kraftlite')"
        if name in REFUSED:
            raise OptionError(f"option {canonical} is not supported by {where}: {REFUSED[name]}")
        if canonical in BATCH_ONLY and mode is Mode.STREAM_READ:
            raise OptionError(f"{canonical} is for batch reads only (spark.read)")
        if canonical in STREAM_ONLY and mode is Mode.BATCH_READ:
            raise OptionError(f"{canonical} is for streaming reads only (spark.readStream)")
        if canonical in READ | BATCH_ONLY | STREAM_ONLY and mode not in READ_MODES:
            raise OptionError(f"{canonical} is a read option; {where} does not take it")
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        hint = f" (did you mean {_CANONICAL[close[0]]}?)" if close else ""
        raise OptionError(
            f"unknown option {canonical!r} for {where}{hint}; it takes: "
            f"{', '.join(sorted(KNOWN[mode], key=str.lower))} (docs/spark.md)"
        )


# ------------------------------------------------------------------------ values


def isolation_option(options: Mapping[str, str]) -> bool:
    """`kafka.isolation.level`: True for read_committed (the default here), False for
    read_uncommitted."""
    value = options.get("kafka.isolation.level", "read_committed").strip().lower()
    if value not in {"read_committed", "read_uncommitted"}:
        raise OptionError(
            f"kafka.isolation.level must be read_committed or read_uncommitted, not {value!r}"
        )
    return value == "read_committed"


def flag_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.lower() not in {"true", "false"}:
        raise OptionError(f"{name} must be true or false, not {value!r}")
    return value.lower() == "true"


def positive_option(options: Mapping[str, str], name: str, default: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit() or int(raw) < 1:
        raise OptionError(f"{name} must be a positive integer, not {raw!r}")
    return int(raw)


def same_option(options: Mapping[str, str], names: Iterable[str], default: int) -> int:
    """Rule 4 for integer settings with two names: the value, or a refusal if they differ."""
    given = {name: positive_option(options, name, 0) for name in names if name in options}
    if len(set(given.values())) > 1:
        raise OptionError(f"{' and '.join(given)} differ ({given}): give one")
    return next(iter(given.values()), default)


def smallest_option(options: Mapping[str, str], names: Iterable[str], default: int) -> int:
    """The tightest of several bounds on one thing (`fetchMaxBytes`, Kafka's
    `fetch.max.bytes` and `max.partition.fetch.bytes`: a fetch here reads one partition)."""
    given = [positive_option(options, name, 0) for name in names if name in options]
    return min(given, default=default)


def json_option(options: Mapping[str, str], name: str) -> Any:
    try:
        return json.loads(options[name])
    except ValueError as exc:
        raise OptionError(f"{name} is not valid JSON: {exc}") from None


def timestamp_option(options: Mapping[str, str], name: str) -> int | None:
    """`startingTimestamp` / `endingTimestamp`: unix milliseconds, for every partition."""
    raw = options.get(name)
    if raw is None:
        return None
    if not raw.strip().isdigit():
        raise OptionError(f"{name} must be unix milliseconds, not {raw!r}")
    return int(raw)


def timestamps_option(options: Mapping[str, str], name: str) -> dict[str, dict[str, int]] | None:
    """`startingOffsetsByTimestamp` / `endingOffsetsByTimestamp`: JSON
    `{"topic": {"0": ms}}`."""
    if options.get(name) is None:
        return None
    parsed = json_option(options, name)
    if not isinstance(parsed, dict) or not all(
        isinstance(v, dict)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in v.values())
        for v in parsed.values()
    ):
        raise OptionError(f'{name} must be JSON like {{"t": {{"0": 1700000000000}}}} (unix ms)')
    return parsed


def timestamp_strategy(options: Mapping[str, str]) -> str:
    """`startingOffsetsByTimestampStrategy`: what a start by timestamp does when no record
    is at or after it: `error` (Kafka's default) fails, `latest` starts at the end."""
    value = str(options.get("startingOffsetsByTimestampStrategy", "error")).lower()
    if value not in {"error", "latest"}:
        raise OptionError(
            f"startingOffsetsByTimestampStrategy must be error or latest, not {value!r}"
        )
    return value


_DURATION = re.compile(r"(\d+)\s*(us|ms|s|m|min|h|d)?")
_UNIT_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000}
_UNIT_MS |= {"h": 3_600_000, "d": 86_400_000}


def duration_ms(options: Mapping[str, str], name: str, default: str) -> int:
    """A duration as Spark writes them (`maxTriggerDelay`: "15m", "30s", "500ms"; a bare
    number is milliseconds): Spark's `Utils.timeStringAsMs`."""
    raw = str(options.get(name, default)).strip().lower()
    found = _DURATION.fullmatch(raw)
    if found is None:
        raise OptionError(f"{name} must be a duration like 15m, 30s or 500ms, not {raw!r}")
    return int(int(found[1]) * _UNIT_MS[found[2]])


# ------------------------------------------------------------------------ bootstrap


_HOST_PORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")
_URL = re.compile(r"(https?)://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?")


def bootstrap_entries(options: Mapping[str, str]) -> tuple[str, ...]:
    """The brokers to start from (rule 4): `kraftlite.bootstrap` and/or
    `kafka.bootstrap.servers`, each comma-separated `http(s)://host:port` URLs or bare
    `host:port` addresses (resolve.py finds out which protocol a bare one speaks)."""
    given: dict[str, tuple[str, ...]] = {}
    for name in (BOOTSTRAP, KAFKA_BOOTSTRAP):
        entries = tuple(
            e.strip().rstrip("/") for e in str(options.get(name, "")).split(",") if e.strip()
        )
        if entries:
            given[name] = entries
    if not given:
        raise OptionError(
            f"{KAFKA_BOOTSTRAP} (or {BOOTSTRAP}) is required: brokers, comma-separated, as "
            "http(s)://host:port URLs or host:port addresses"
        )
    if len(given) == 2 and set(given[BOOTSTRAP]) != set(given[KAFKA_BOOTSTRAP]):
        raise OptionError(
            f"{BOOTSTRAP} and {KAFKA_BOOTSTRAP} name different brokers "
            f"({','.join(given[BOOTSTRAP])} / {','.join(given[KAFKA_BOOTSTRAP])}): give one"
        )
    entries = next(iter(given.values()))
    for entry in entries:
        url = _URL.fullmatch(entry)
        if (url is None or (url[3] is not None and not 0 < int(url[3]) < 65536)) and (
            not (bare := _HOST_PORT.fullmatch(entry)) or not 0 < int(bare[2]) < 65536
        ):
            raise OptionError(
                f"bootstrap entry {entry!r} is neither an http(s)://host:port URL nor host:port"
            )
    return tuple(dict.fromkeys(entries))


def split_host_port(entry: str) -> tuple[str, int]:
    """A bare `host:port` (checked by bootstrap_entries)."""
    host, _, port = entry.rpartition(":")
    return host.strip("[]"), int(port)


# ------------------------------------------------------------------------ security


PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
MECHANISMS = {"PLAIN": "plain.PlainLoginModule", "SCRAM-SHA-256": "scram.ScramLoginModule"}
MECHANISMS["SCRAM-SHA-512"] = MECHANISMS["SCRAM-SHA-256"]
_JAAS = re.compile(
    r"\s*(?P<module>[A-Za-z_$][\w.$]*)\s+(?P<flag>required|requisite|sufficient|optional)"
    r"(?P<options>(?:\s+[\w.-]+\s*=\s*(?:\"(?:[^\"\\]|\\.)*\"|[^\s\";]+))*)\s*;\s*",
    re.DOTALL,
)
_JAAS_OPTION = re.compile(r"([\w.-]+)\s*=\s*(?:\"((?:[^\"\\]|\\.)*)\"|([^\s\";]+))", re.DOTALL)


@dataclass(frozen=True)
class JaasLogin:
    module: str
    options: dict[str, str]


def parse_jaas(config: str) -> JaasLogin:
    """One JAAS login module as Kafka's `sasl.jaas.config` holds it:
    `<module> required username="alice" password="secret";` (values quoted, with `\\"` and
    `\\\\` escapes, or bare words). Never echoes the text (rule 5)."""
    found = _JAAS.fullmatch(config)
    if found is None:
        raise OptionError(
            f"{JAAS_CONFIG} is not one JAAS login like "
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="..." password="...";'
        )
    options = {
        m[1]: re.sub(r"\\(.)", r"\1", m[2]) if m[2] is not None else m[3]
        for m in _JAAS_OPTION.finditer(found["options"])
    }
    return JaasLogin(found["module"], options)


@dataclass(frozen=True)
class Security:
    """How to reach the brokers: credentials and CA for HTTP, and whether TLS is wanted (a
    bare host:port is then tried as https://, and what it resolves to must be https://)."""

    credentials: Credentials
    tls: bool
    mechanism: str | None = None  # the SASL mechanism a Kafka job names (resolve.py rule 4)


def security_of(options: Mapping[str, str]) -> Security:
    """kraftlite's own `kraftlite.auth.*` options, and Kafka's security options mapped onto
    them: the SASL login's username and password become a kraftlite user's (kraftlite checks
    them against the user's SCRAM credentials, over TLS with `SASL_SSL`), a PEM truststore
    the CA file, a PEM keystore the client certificate and key."""

    def get(name: str) -> str | None:
        value = options.get(name)
        return value.strip() if value is not None and value.strip() else None

    protocol = get(SECURITY_PROTOCOL)
    if protocol is not None:
        protocol = protocol.upper()
        if protocol not in PROTOCOLS:
            raise OptionError(
                f"{SECURITY_PROTOCOL} must be one of {', '.join(sorted(PROTOCOLS))}, "
                f"not {protocol!r}"
            )
    user, password = get(AUTH + "user"), options.get(AUTH + "password") or None
    mechanism = get(SASL_MECHANISM)
    jaas = options.get(JAAS_CONFIG)
    sasl = protocol is not None and protocol.startswith("SASL_")
    if mechanism is not None and jaas is None:
        raise OptionError(f"{SASL_MECHANISM} needs {JAAS_CONFIG} (the login to use)")
    if jaas is not None:
        if not sasl:
            raise OptionError(
                f"{JAAS_CONFIG} needs {SECURITY_PROTOCOL} SASL_PLAINTEXT or SASL_SSL "
                f"(it is {protocol or 'unset, PLAINTEXT'})"
            )
        unset = mechanism is None
        mechanism = (mechanism or "GSSAPI").upper()
        if mechanism not in MECHANISMS:
            default = " (Kafka's default when it is unset)" if unset else ""
            raise OptionError(
                f"{SASL_MECHANISM} {mechanism}{default} is not supported: kraftlite takes a "
                f"user and password ({', '.join(sorted(MECHANISMS))}), or a token in "
                f"{AUTH}token"
            )
        login = parse_jaas(jaas)
        if not login.module.endswith("." + MECHANISMS[mechanism]):
            raise OptionError(
                f"{JAAS_CONFIG} names {login.module}, but {SASL_MECHANISM} {mechanism} "
                f"takes the {MECHANISMS[mechanism].split('.')[1]}"
            )
        jaas_user, jaas_password = login.options.get("username"), login.options.get("password")
        if not jaas_user or not jaas_password:
            raise OptionError(f'{JAAS_CONFIG} needs username="..." and password="..."')
        if (user is not None and user != jaas_user) or (
            password is not None and password != jaas_password
        ):
            raise OptionError(
                f"{AUTH}user/password and the login in {JAAS_CONFIG} differ: give one"
            )
        user, password = jaas_user, jaas_password
    token, cert = get(AUTH + "token"), get(AUTH + "cert.file")
    if sasl and user is None and token is None:
        raise OptionError(
            f"{SECURITY_PROTOCOL} {protocol} needs {JAAS_CONFIG} (or {AUTH}user and "
            f"{AUTH}password, or {AUTH}token)"
        )
    ca_file = _pem_store(options, TRUSTSTORE, TRUSTSTORE_TYPE, get(AUTH + "ca.file"), "ca.file")
    keystore = _pem_store(options, KEYSTORE, KEYSTORE_TYPE, cert, "cert.file")
    key_file = get(AUTH + "key.file")
    if keystore is not None and cert is None:  # one PEM file: key and certificate chain
        cert, key_file = keystore, key_file or keystore
    algorithm = options.get(ENDPOINT_IDENTIFICATION)
    if algorithm is not None and algorithm.strip().lower() != "https":
        raise OptionError(
            f"{ENDPOINT_IDENTIFICATION} must be https: kraftlite always checks the broker's "
            "host name against its certificate"
        )
    kafka_tls = [n for n in (TRUSTSTORE, KEYSTORE) if get(n) is not None]
    if protocol in {"PLAINTEXT", "SASL_PLAINTEXT"} and kafka_tls:
        raise OptionError(f"{', '.join(kafka_tls)} needs {SECURITY_PROTOCOL} SSL or SASL_SSL")
    if protocol is None:
        tls = ca_file is not None or cert is not None
    else:
        tls = protocol in {"SSL", "SASL_SSL"}
    try:
        credentials = Credentials(user, password, token, ca_file, cert, key_file)
    except ValueError as exc:
        raise OptionError(f"{AUTH}*: {exc}") from None
    return Security(credentials, tls, mechanism if jaas is not None else None)


def _pem_store(
    options: Mapping[str, str], location: str, kind: str, own: str | None, own_name: str
) -> str | None:
    """A Kafka truststore or keystore, if it is a PEM file: kraftlite's `own` option's
    value, which it must agree with (rule 4)."""
    path = (options.get(location) or "").strip() or None
    if path is None:
        return own
    store_type = str(options.get(kind, "JKS")).strip().upper()
    if store_type != "PEM":
        raise OptionError(
            f"{location}: kraftlite reads PEM files only; set {kind}=PEM with a PEM file "
            f"(or {AUTH}{own_name}); {store_type} stores convert with keytool/openssl"
        )
    if own is not None and own != path:
        raise OptionError(f"{location} and {AUTH}{own_name} differ: give one")
    return path


def check_scheme(entries: Iterable[str], options: Mapping[str, str], tls: bool) -> None:
    """An explicit URL must agree with an explicit `kafka.security.protocol`."""
    if options.get(SECURITY_PROTOCOL) is None:
        return
    wanted = "https" if tls else "http"
    for entry in entries:
        scheme = entry.split("://", 1)[0] if "://" in entry else None
        if scheme is not None and scheme != wanted:
            raise OptionError(
                f"bootstrap entry {entry} is {scheme}://, but {SECURITY_PROTOCOL} "
                f"{options[SECURITY_PROTOCOL]} asks for {wanted}://"
            )
