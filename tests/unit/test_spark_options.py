"""The Spark source's and sink's options (kraftlite/spark/options.py), pure: what each path
takes, Kafka's names mapped onto kraftlite's, and every refusal naming what is wrong.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kraftlite.client.credentials import Credentials
from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.spark import resolve
from kraftlite.spark.arrow import default_columns
from kraftlite.spark.options import (
    IGNORED,
    KNOWN,
    REFUSED,
    Mode,
    OptionError,
    Options,
    bootstrap_entries,
    check_known,
    check_scheme,
    duration_ms,
    parse_jaas,
    security_of,
    timestamp_strategy,
    timestamps_option,
)
from kraftlite.spark.sink import SinkSettings
from kraftlite.spark.source import OffsetRange, ReadSettings, split

URL = "http://127.0.0.1:9092"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_the_options_module_is_pure() -> None:
    source = Path(__file__).resolve().parents[2] / "kraftlite/spark/options.py"
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"pyspark", "socket", "urllib", "http", "time", "threading"}


# ------------------------------------------------------------------------ known options


@pytest.mark.parametrize("mode", list(Mode))
def test_an_unknown_option_is_refused_naming_it_and_the_known_ones(mode: Mode) -> None:
    with pytest.raises(OptionError) as refused:
        check_known(Options({"kafka.bootstrap.servers": URL, "colour": "blue"}), mode)
    message = str(refused.value)
    assert "unknown option 'colour'" in message
    assert "kafka.bootstrap.servers" in message and "kraftlite.auth.user" in message
    assert ("subscribe" in message) == (mode in {Mode.BATCH_READ, Mode.STREAM_READ})
    assert bool(re.search(r"\btopic\b", message)) == (mode in {Mode.BATCH_WRITE, Mode.STREAM_WRITE})


def test_known_options_pass_whatever_their_case() -> None:
    for mode, names in KNOWN.items():
        check_known(Options({name.upper(): "x" for name in names}), mode)
    for name in IGNORED:  # accepted and ignored, on every read path
        check_known(Options({name: "1"}), Mode.BATCH_READ)
        check_known(Options({name: "1"}), Mode.STREAM_READ)


@pytest.mark.parametrize(
    ("mode", "option", "message"),
    [
        (Mode.STREAM_READ, "endingTimestamp", "endingTimestamp is for batch reads only"),
        (Mode.STREAM_READ, "endingOffsetsByTimestamp", "for batch reads only"),
        (Mode.STREAM_READ, "latestPerKey", "for batch reads only"),
        (Mode.BATCH_READ, "maxOffsetsPerTrigger", "for streaming reads only"),
        (Mode.BATCH_READ, "minOffsetsPerTrigger", "for streaming reads only"),
        (Mode.BATCH_WRITE, "subscribe", "subscribe is a read option"),
        (Mode.BATCH_WRITE, "checkpointLocation", "unknown option 'checkpointLocation'"),
        (Mode.BATCH_READ, "path", "kraftlite takes no path"),
        (Mode.STREAM_WRITE, "path", "kraftlite takes no path"),
        (Mode.BATCH_READ, "kafka.auto.offset.reset", "use startingOffsets"),
        (Mode.BATCH_WRITE, "kafka.value.serializer", "value as a binary or string column"),
        (Mode.BATCH_READ, "startingOffset", "did you mean startingOffsets?"),
        (Mode.STREAM_READ, "kafka.linger.ms", "unknown option 'kafka.linger.ms'"),
    ],
)
def test_refusals_say_why(mode: Mode, option: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        check_known(Options({option: "x"}), mode)


def test_spark_s_own_stream_writer_options_pass() -> None:
    """What Spark 4.3 hands a stream writer itself (seen: checkpointLocation, queryName)."""
    check_known(Options({"checkpointlocation": "/c", "queryname": "q"}), Mode.STREAM_WRITE)


def test_refused_and_known_never_overlap() -> None:
    every = {n.lower() for names in KNOWN.values() for n in names}
    assert not every & {n.lower() for n in REFUSED}
    assert set(IGNORED) <= {n for names in KNOWN.values() for n in names}


# ------------------------------------------------------------------------ bootstrap


def test_either_bootstrap_option_and_both_only_if_they_agree() -> None:
    assert bootstrap_entries({"kraftlite.bootstrap": f"{URL}/, {URL}"}) == (URL,)
    assert bootstrap_entries({"kafka.bootstrap.servers": "a:9092,b:9093"}) == ("a:9092", "b:9093")
    same = {"kraftlite.bootstrap": "a:1,b:2", "kafka.bootstrap.servers": "b:2, a:1"}
    assert bootstrap_entries(same) == ("a:1", "b:2")
    with pytest.raises(OptionError, match="name different brokers"):
        bootstrap_entries({"kraftlite.bootstrap": "a:1", "kafka.bootstrap.servers": "a:2"})
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers \(or kraftlite"):
        bootstrap_entries({"kafka.bootstrap.servers": " , "})


@pytest.mark.parametrize(
    "entry", ["https://broker.example:443", "http://[::1]:9092", "[::1]:9192", "h_1.x:1"]
)
def test_bootstrap_entries_take_urls_and_host_port(entry: str) -> None:
    assert bootstrap_entries({"kafka.bootstrap.servers": entry}) == (entry,)


@pytest.mark.parametrize(
    "entry", ["localhost", "ftp://h:1", "h:99999", "http://h:1/v1", "h:0", "h:port"]
)
def test_bootstrap_entries_refuse_anything_else(entry: str) -> None:
    with pytest.raises(OptionError, match="neither an http"):
        bootstrap_entries({"kafka.bootstrap.servers": entry})


# ------------------------------------------------------------------------ security


def _sasl(mechanism: str, module: str, **extra: str) -> dict[str, str]:
    return {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.jaas.config": f'{module} required username="alice" password="s3cr=t;x";',
        **extra,
    }


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [("SCRAM-SHA-512", SCRAM), ("scram-sha-256", SCRAM), ("PLAIN", PLAIN)],
)
def test_a_jaas_login_becomes_a_kraftlite_user(mechanism: str, module: str) -> None:
    security = security_of(_sasl(mechanism, module))
    assert security.credentials == Credentials("alice", "s3cr=t;x")
    assert security.tls


def test_jaas_values_may_be_escaped_bare_or_shaded() -> None:
    login = parse_jaas(f'{SCRAM} required\n  username=bob password="a\\"b\\\\c" tokenauth=false;')
    assert login.options == {"username": "bob", "password": 'a"b\\c', "tokenauth": "false"}
    shaded = "kafkashaded.org.apache.kafka.common.security.plain.PlainLoginModule"
    assert security_of(_sasl("PLAIN", shaded)).credentials.user == "alice"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (_sasl("PLAIN", SCRAM), "takes the PlainLoginModule"),
        (_sasl("SCRAM-SHA-256", PLAIN), "takes the ScramLoginModule"),
        (_sasl("GSSAPI", SCRAM), "GSSAPI is not supported"),
        ({**_sasl("PLAIN", PLAIN), "kafka.sasl.mechanism": ""}, r"GSSAPI \(Kafka's default"),
        ({**_sasl("PLAIN", PLAIN), "kafka.security.protocol": "SSL"}, "needs kafka.security"),
        ({**_sasl("PLAIN", PLAIN), "kafka.security.protocol": "TLS"}, "must be one of"),
        ({"kafka.security.protocol": "SASL_PLAINTEXT"}, "needs kafka.sasl.jaas.config"),
        ({"kafka.sasl.mechanism": "PLAIN"}, "needs kafka.sasl.jaas.config"),
        (_sasl("PLAIN", PLAIN, **{"kraftlite.auth.user": "bob"}), "differ"),
        (_sasl("PLAIN", PLAIN, **{"kraftlite.auth.token": "t"}), "not both"),
        (
            {**_sasl("PLAIN", PLAIN), "kafka.sasl.jaas.config": f"{PLAIN} required user=a;"},
            'needs username="..." and password',
        ),
        (
            {**_sasl("PLAIN", PLAIN), "kafka.sasl.jaas.config": f'{PLAIN} username="a";'},
            "is not one JAAS login",
        ),
        (
            {**_sasl("PLAIN", PLAIN), "kafka.sasl.jaas.config": f'{PLAIN} required a="1"; X'},
            "is not one JAAS login",
        ),
    ],
)
def test_security_refusals_never_show_the_password(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message) as refused:
        security_of(options)
    assert "s3cr" not in str(refused.value)


def test_kraftlite_auth_options_agree_with_the_login() -> None:
    same = _sasl(
        "PLAIN", PLAIN, **{"kraftlite.auth.user": "alice", "kraftlite.auth.password": "s3cr=t;x"}
    )
    assert security_of(same).credentials.user == "alice"
    token = security_of({"kafka.security.protocol": "SASL_PLAINTEXT", "kraftlite.auth.token": "t"})
    assert token.credentials.token == "t" and not token.tls


def test_pem_stores_map_to_the_ca_and_the_client_certificate() -> None:
    options = {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": "/ca.pem",
        "kafka.ssl.truststore.type": "pem",
        "kafka.ssl.keystore.location": "/me.pem",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.endpoint.identification.algorithm": "https",
    }
    credentials = security_of(options).credentials
    assert (credentials.ca_file, credentials.cert_file, credentials.key_file) == (
        "/ca.pem",
        "/me.pem",
        "/me.pem",
    )
    assert security_of({"kraftlite.auth.ca.file": "/ca.pem"}).tls  # a CA means TLS
    assert not security_of({}).tls
    for wrong, message in [
        ({"kafka.ssl.truststore.type": "JKS"}, "PEM files only"),
        ({"kafka.ssl.truststore.type": None}, "PEM files only"),  # Kafka's default is JKS
        ({"kraftlite.auth.ca.file": "/other.pem"}, "differ"),
        ({"kafka.security.protocol": "PLAINTEXT"}, "needs kafka.security.protocol SSL"),
        ({"kafka.ssl.endpoint.identification.algorithm": ""}, "must be https"),
    ]:
        changed = {k: v for k, v in {**options, **wrong}.items() if v is not None}
        with pytest.raises(OptionError, match=message):
            security_of(changed)


def test_explicit_urls_agree_with_an_explicit_security_protocol() -> None:
    check_scheme(["https://a:1", "b:2"], {"kafka.security.protocol": "SSL"}, tls=True)
    check_scheme(["http://a:1"], {}, tls=True)  # no protocol given: the URL says
    with pytest.raises(OptionError, match="asks for https://"):
        check_scheme(["http://a:1"], {"kafka.security.protocol": "SASL_SSL"}, tls=True)
    with pytest.raises(OptionError, match="asks for http://"):
        check_scheme(["https://a:1"], {"kafka.security.protocol": "PLAINTEXT"}, tls=False)


# ------------------------------------------------------------------------ values


def test_durations_as_spark_writes_them() -> None:
    assert duration_ms({}, "maxTriggerDelay", "15m") == 900_000
    cases = {"30s": 30_000, "500ms": 500, "250": 250, "2min": 120_000, "1h": 3_600_000}
    for raw, expected in cases.items():
        assert duration_ms({"maxTriggerDelay": raw}, "maxTriggerDelay", "15m") == expected
    with pytest.raises(OptionError, match="must be a duration like 15m"):
        duration_ms({"maxTriggerDelay": "soon"}, "maxTriggerDelay", "15m")


def test_timestamp_options() -> None:
    assert timestamps_option({"t": '{"a": {"0": 5}}'}, "t") == {"a": {"0": 5}}
    for bad in ['{"a": {"0": -1}}', '{"a": [5]}', '{"a": {"0": true}}', "[]"]:
        with pytest.raises(OptionError, match=r"must be JSON like \{"):
            timestamps_option({"t": bad}, "t")
    assert timestamp_strategy({}) == "error"
    assert timestamp_strategy({"startingOffsetsByTimestampStrategy": "LATEST"}) == "latest"
    with pytest.raises(OptionError, match="must be error or latest"):
        timestamp_strategy({"startingOffsetsByTimestampStrategy": "earliest"})


def test_read_settings_map_kafka_s_client_options() -> None:
    options = Options(
        {
            "kafka.bootstrap.servers": URL,
            "kafka.fetch.max.bytes": "52428800",
            "kafka.max.partition.fetch.bytes": "1048576",
            "kafka.request.timeout.ms": "5000",
            "maxRecordsPerPartition": "10",
        }
    )
    settings = ReadSettings.of(options, default_columns(False))
    assert settings.fetch_max_bytes == 1 << 20  # one partition per fetch: the tighter bound
    assert settings.bootstrap.timeout_ms == 5000 and settings.bootstrap.urls == (URL,)
    assert settings.max_records_per_partition == 10
    with pytest.raises(OptionError, match="differ"):
        ReadSettings.of(Options({**options, "requestTimeoutMs": "6000"}), default_columns(False))


def test_sink_settings_map_kafka_s_producer_options() -> None:
    options = Options({"kafka.bootstrap.servers": URL, "topic": "t", "kafka.acks": "all"})
    settings = SinkSettings.of(
        Options({**options, "kafka.request.timeout.ms": "7000"}), [("value", "binary")]
    )
    assert settings.request_timeout_ms == 7000
    with pytest.raises(OptionError, match="always writes with acks=all"):
        SinkSettings.of(Options({**options, "kafka.acks": "1"}), [("value", "binary")])


def test_max_records_per_partition_then_min_partitions() -> None:
    def ranges(*bounds: tuple[int, int]) -> list[OffsetRange]:
        return [OffsetRange(None, "t", p, s, e, (), True, 1) for p, (s, e) in enumerate(bounds)]  # type: ignore[arg-type]

    def shape(split_ranges: list[OffsetRange]) -> list[tuple[int, int, int]]:
        return [(r.partition, r.start, r.end) for r in split_ranges]

    assert shape(split(ranges((0, 25), (5, 9)), 0, 10)) == [
        (0, 0, 8), (0, 8, 16), (0, 16, 25), (1, 5, 9),
    ]  # fmt: skip
    assert shape(split(ranges((0, 25), (5, 9)), 6, 10)) == [
        (0, 0, 4), (0, 4, 8), (0, 8, 16), (0, 16, 20), (0, 20, 25), (1, 5, 9),
    ]  # fmt: skip
    assert shape(split(ranges((0, 3)), 0, 0)) == [(0, 0, 3)]


# ------------------------------------------------------------------------ resolution


def test_a_readyz_answer_tells_a_broker_from_anything_else() -> None:
    assert resolve.readyz_verdict(b'{"ready": false, "broker_id": 2, "fenced": true}') is None
    assert "controller" in str(resolve.readyz_verdict(b'{"ready": true, "leader_id": 1}'))
    assert "not a kraftlite broker" in str(resolve.readyz_verdict(b"<html>"))


def test_the_broker_dialed_is_asked_first() -> None:
    brokers = [
        {"node_id": 3, "host": "10.0.0.3", "port": 9192},
        {"node_id": 1, "host": "10.0.0.1", "port": 9192},
        {"node_id": 2, "host": "LOCALHOST", "port": 9193},
        {"node_id": 4, "host": "127.0.0.1", "port": 9193},
    ]
    assert resolve.candidates(brokers, "localhost", 9193, "127.0.0.1") == [2, 4, 1, 3]
    assert resolve.candidates(brokers, "proxy", 19192, "10.9.9.9") == [1, 2, 3, 4]


def test_the_kafka_requests_encode_and_the_answers_decode_with_kraftlite_s_codec() -> None:
    request = messages.encode_request(
        ApiKey.DESCRIBE_CONFIGS, 1, 7, "kraftlite-spark", resolve.describe_configs(2)
    )
    decoded = messages.decode_request(request)
    assert decoded.body["resources"] == [
        {"resource_type": 4, "resource_name": "2", "configuration_keys": ["kraftlite.http.url"]}
    ]

    def answer(result: dict) -> dict:
        frame = messages.encode_response(ApiKey.DESCRIBE_CONFIGS, 1, 7, {"results": [result]})
        return messages.decode_response(ApiKey.DESCRIBE_CONFIGS, 1, frame).body

    url = {"name": "kraftlite.http.url", "value": "https://b2:9093"}
    other = {"name": "log.dirs", "value": "/x"}
    assert resolve.http_url_of(answer({"configs": [other, url]})) == ("https://b2:9093", "")
    assert resolve.http_url_of(answer({"configs": [other]}))[1].endswith("not kraftlite")
    failed = answer({"error_code": 42, "error_message": "not this broker", "configs": []})
    assert resolve.http_url_of(failed) == (
        None,
        "DescribeConfigs answered error 42 'not this broker'",
    )
    long = answer({"error_code": 42, "error_message": "x" * 5000, "configs": []})
    assert len(resolve.http_url_of(long)[1]) < 150  # a server's text is quoted, bounded
    assert (
        "not an http(s) URL"
        in resolve.http_url_of(
            answer({"configs": [{"name": "kraftlite.http.url", "value": "b2:9093"}]})
        )[1]
    )


def test_an_api_versions_answer_must_serve_metadata_and_describe_configs() -> None:
    served = [
        {"api_key": 3, "min_version": 0, "max_version": 12},
        {"api_key": 32, "min_version": 1, "max_version": 4},
    ]
    assert resolve.missing_apis(served) is None
    assert resolve.missing_apis(served[:1]) == "DescribeConfigs v1"
    assert resolve.missing_apis([{"api_key": 3, "min_version": 0, "max_version": 9}]) == (
        "Metadata v12 and DescribeConfigs v1"
    )


def test_urls_need_no_resolution() -> None:
    security = security_of({})
    assert resolve.resolve([URL, "https://b:1", URL], security) == (URL, "https://b:1")
