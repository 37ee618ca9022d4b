"""Configuration loading: Kafka names, validation with one-line errors naming key and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftlite.config import BrokerConfig, ConfigError, ControllerConfig

REPO = Path(__file__).resolve().parents[2]


def test_the_example_files_load() -> None:
    broker = BrokerConfig.load(REPO / "config" / "broker.toml")
    assert broker.broker_id == 1
    assert broker.controllers[0] == "http://127.0.0.1:9401"
    assert broker.log_flush_interval_ms == 1000
    assert broker.log_format == "auto"
    controller = ControllerConfig.load(REPO / "config" / "controller.toml")
    assert controller.quorum == ("1@127.0.0.1:9301", "2@127.0.0.1:9302", "3@127.0.0.1:9303")


def test_nested_tables_and_quoted_keys_are_the_same_name(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text(
        '"broker.id" = 2\ncontrollers = "http://a:1,http://b:2"\n'
        "[log]\ndir = '/data'\nflush.interval.ms = 0\n"
    )
    config = BrokerConfig.load(path)
    assert config.log_dir == Path("/data")
    assert config.log_flush_interval_ms == 0
    assert config.controllers == ("http://a:1", "http://b:2")


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text('"broker.id" = 2\ncontrollers = ["http://a:1"]\n"log.dir" = "/d"\n')
    config = BrokerConfig.load(path, {"broker.id": 7, "listen": None})
    assert (config.broker_id, config.listen) == (7, "127.0.0.1:9092")
    with pytest.raises(ConfigError, match=r"^command line: broker.id = -3 must be >= 0$"):
        BrokerConfig.load(path, {"broker.id": -3})


def test_plain_can_be_turned_off(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text('"broker.id" = 1\ncontrollers = ["http://a:1"]\n"log.dir" = "/d"\n')
    assert "PLAIN" in BrokerConfig.load(path).sasl_enabled_mechanisms
    path.write_text(path.read_text() + '"sasl.enabled.mechanisms" = ["SCRAM-SHA-512"]\n')
    assert BrokerConfig.load(path).sasl_enabled_mechanisms == ("SCRAM-SHA-512",)


def test_advertised_url_defaults_to_the_listen_address(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text('"broker.id" = 1\ncontrollers = ["http://a:1"]\n"log.dir" = "/d"\n')
    assert BrokerConfig.load(path, {"listen": "127.0.0.1:9100"}).url == "http://127.0.0.1:9100"
    path.write_text(path.read_text() + '"advertised.url" = "http://127.0.0.1:9200/"\n')
    config = BrokerConfig.load(path, {"listen": "127.0.0.1:9100"})
    assert (config.listen, config.url) == ("127.0.0.1:9100", "http://127.0.0.1:9200")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('"broker.id" = 1\nbogus = 3', "unknown key 'bogus'"),
        ('"broker.id" = "one"', "broker.id = 'one' must be of type int"),
        ('"broker.id" = true', "broker.id = True must be of type int"),
        ('"broker.id" = 1\ncontrollers = ["x"]', "controllers = ['x'] must be a non-empty"),
        ('"broker.id" = 1\nlisten = "localhost"', "listen = 'localhost' must be HOST:PORT"),
        ('"broker.id" = 1\n"log.flush.interval.ms" = -1', "must be >= 0"),
        ('"broker.id" = 1\n"advertised.url" = "127.0.0.1:9"', "must be an http://HOST:PORT URL"),
        ('"broker.id" = 1\n"advertised.url" = "http://h"', "must be an http://HOST:PORT URL"),
        ('"broker.id" = 1\n[logging]\nlevel = "loud"', "logging.level = 'loud' must be one of"),
        ('"broker.id" = 1', "missing required key 'log.dir'"),
        ("broker.id = = 1", "not valid TOML"),
        (
            '"broker.id" = 1\n"sasl.enabled.mechanisms" = ["GSSAPI"]',
            "must list one or more of SCRAM-SHA-256, SCRAM-SHA-512, PLAIN",
        ),
        ('"broker.id" = 1\n"sasl.enabled.mechanisms" = []', "must list one or more of"),
        ('"broker.id" = 1\n"max.connections.per.ip.overrides" = ["10.0.0.1:²"]', "ADDRESS:COUNT"),
    ],
)
def test_bad_files_give_one_line_naming_key_and_file(tmp_path: Path, body, message) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ")
    assert message in text
    assert "\n" not in text


def test_quorum_voters_are_checked(tmp_path: Path) -> None:
    base = {"node.id": 1, "raft": "127.0.0.1:9301", "metadata.log.dir": "/m"}
    for quorum, message in [
        (["1@127.0.0.1:9301", "1@127.0.0.1:9302"], "unique"),
        (["one@127.0.0.1:9301"], "ID@HOST:PORT"),
        ([], "must list the voters"),
    ]:
        with pytest.raises(ConfigError, match=message):
            ControllerConfig.from_mapping({**base, "quorum": quorum}, "c.toml")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        BrokerConfig.load(tmp_path / "absent.toml")
