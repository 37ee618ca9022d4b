"""The `kraftlite` console script, run as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraftlite import __version__
from kraftlite.protocol import batch as fmt
from kraftlite.storage.log import LogStorage, StorageConfig

pytestmark = pytest.mark.integration


def kraftlite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraftlite", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_version_and_help() -> None:
    assert kraftlite("--version").stdout.strip() == f"kraftlite, version {__version__}"
    result = kraftlite("--help")
    assert result.returncode == 0
    assert "config" in result.stdout and "log" in result.stdout


def test_config_check_prints_the_effective_config(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text('"broker.id" = 4\ncontrollers = ["http://127.0.0.1:9401"]\n"log.dir" = "d"\n')
    result = kraftlite("config", "check", str(path), "--role", "broker")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["broker.id"] == 4


def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text('"broker.id" = 4\n"log.flush.interval.ms" = "soon"\n')
    result = kraftlite("config", "check", str(path), "--role", "broker")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"kraftlite: {path}: log.flush.interval.ms = 'soon' must be of type int"
    )
    assert "Traceback" not in result.stderr


def test_log_dump(tmp_path: Path) -> None:
    storage = LogStorage(StorageConfig(path=tmp_path / "log"))
    log = storage.open_partition("orders-0")
    log.append(fmt.encode_batch([b"hello", None], keys=[b"k", None], timestamps=[7, 8]), 2)
    log.set_high_watermark(2)
    storage.close()
    result = kraftlite("log", "dump", str(tmp_path / "log"), "--records", "--output", "json")
    assert result.returncode == 0, result.stderr
    (summary,) = json.loads(result.stdout)["partitions"]
    assert summary["log_end_offset"] == 2
    assert summary["high_watermark"] == 2
    assert summary["epochs"] == [[2, 0]]
    assert summary["records"] == [
        {"offset": 0, "timestamp": 7, "key": "k", "value": "hello"},
        {"offset": 1, "timestamp": 8, "key": None, "value": None},
    ]
    table = kraftlite("log", "dump", str(tmp_path / "log"))
    assert "orders-0" in table.stdout
