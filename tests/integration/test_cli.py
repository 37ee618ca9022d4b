"""The `kraftlite` console script, run as a real process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kraftlite import __version__
from kraftlite.dev import free_base_port
from kraftlite.protocol import batch as fmt
from kraftlite.storage.log import LogStorage, StorageConfig
from tests.harness.processes import http

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


def _start_dev(data_dir: Path, base_port: int) -> tuple[subprocess.Popen[str], list[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "kraftlite", "dev", "--data-dir", str(data_dir),
         "--base-port", str(base_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("Ctrl-C"):
            return process, lines
    raise AssertionError("".join(lines))


def _stop_dev(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=60) == 0
    finally:
        assert process.stdout is not None
        process.stdout.close()


@pytest.mark.timeout(120)
def test_dev_runs_a_cluster_stops_cleanly_and_comes_back_with_its_data(tmp_path: Path) -> None:
    base = free_base_port()
    broker = f"http://127.0.0.1:{base}"
    process, lines = _start_dev(tmp_path / "dev", base)
    try:
        assert sum("broker-" in line for line in lines) == 3
        assert sum("controller-" in line for line in lines) == 3
        status, _ = http("POST", broker + "/v1/topics", {"name": "kept", "replication_factor": 3})
        assert status == 201
        status, body = http(
            "POST", broker + "/v1/topics/kept/records", {"records": [{"value": "v"}]}
        )
        assert status == 200, body
        _client_tools(broker)
    finally:
        _stop_dev(process)
    process, _ = _start_dev(tmp_path / "dev", base)
    try:
        deadline = time.monotonic() + 30
        while True:
            status, body = http("GET", broker + "/v1/topics/kept/partitions/0/records?offset=0")
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status == 200 and [r["value"] for r in body["records"]] == ["v"], body
    finally:
        _stop_dev(process)


def _client_tools(broker: str) -> None:
    """The admin and data tools against the running `kraftlite dev` cluster."""

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kraftlite", *args, "--bootstrap", broker],
            input=stdin, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    created = run("topics", "create", "tools", "--partitions", "2", "--output", "json")
    assert created.returncode == 0, created.stderr
    assert len(json.loads(created.stdout)["partitions"]) == 2
    produced = run("produce", "tools", "--key-separator", ":", stdin="a:one\nb:two\na:three\n")
    assert produced.returncode == 0 and "produced 3 records" in produced.stderr, produced.stderr
    consumed = run(
        "consume", "tools", "--from-beginning", "--max-messages", "3", "--output", "json"
    )
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    a_values = [r["value"] for r in records if r["key"] == "a"]
    assert sorted(r["value"] for r in records) == ["one", "three", "two"]
    assert a_values == ["one", "three"]  # one key, one partition, in order
    listed = run("topics", "list", "--output", "json")
    assert {t["name"] for t in json.loads(listed.stdout)} == {"kept", "tools"}
    status = json.loads(run("cluster", "status", "--output", "json").stdout)
    assert [b["id"] for b in status["brokers"]] == [1, 2, 3]  # GET /v1/cluster's, as before
    assert [b["state"] for b in status["registered_brokers"]] == ["active"] * 3
    assert all(b["kafka"] for b in status["registered_brokers"])  # `kraftlite dev`'s ports
    assert len(status["quorum"]["voters"]) == 3
    assert status["stats"]["offline_partitions"] == 0
    figures = {b["id"]: b for b in status["stats"]["brokers"]}
    assert sum(b["leaders"] for b in figures.values()) >= 1 + 2  # kept, tools (+ internal)
    screen = run("cluster", "status")
    assert screen.returncode == 0, screen.stderr
    for shown in ("quorum: leader", "under-replicated 0", "offline 0", "active", "brokers: 3"):
        assert shown in screen.stdout, screen.stdout
    grouped = run("consume", "tools", "--group", "cli", "--from-beginning", "--max-messages", "2")
    assert grouped.returncode == 0 and len(grouped.stdout.splitlines()) == 2, grouped.stderr
    described = json.loads(run("groups", "describe", "cli", "--output", "json").stdout)
    assert sum(o["offset"] for o in described["offsets"]) == 2  # exactly what was printed
    assert sum(o["lag"] for o in described["offsets"]) == 1
    rest = run("consume", "tools", "--group", "cli", "--timeout-ms", "1000")
    assert len(rest.stdout.splitlines()) == 1  # the group goes on where it stopped
    assert "cli" in run("groups", "list").stdout
    # --transactional-id: every line in one transaction, across partitions (compressed:
    # zstd Kafka batches, kept as sent)
    lines = "".join(f"k{i}:t{i}\n" for i in range(6))
    atomic = run(
        "produce", "tools", "--key-separator", ":", "--transactional-id", "cli-tx",
        "--compression", "zstd", stdin=lines,
    )  # fmt: skip
    assert atomic.returncode == 0 and "committed 6 records" in atomic.stderr, atomic.stderr
    committed = run(
        "consume", "tools", "--from-beginning", "--timeout-ms", "1500",
        "--isolation-level", "read_committed", "--output", "json",
    )  # fmt: skip
    values = sorted(json.loads(line)["value"] for line in committed.stdout.splitlines())
    assert values == sorted(["one", "two", "three", *(f"t{i}" for i in range(6))]), values
    missing = run("topics", "describe", "nope")
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    assert run("topics", "delete", "tools").returncode == 0
