"""The data directory's recorded format (kraftlite/storage/data_format.py): a node refuses
a directory it cannot read, before opening it, and records the format of one it can."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kraftlite import __version__
from kraftlite.cli import main
from kraftlite.protocol import batch as fmt
from kraftlite.protocol import stored
from kraftlite.protocol.kafka import records
from kraftlite.storage.data_format import (
    FORMAT_FILE,
    DataFormat,
    DataFormatError,
    check_data_dir,
    current,
    decide,
    raise_record_format,
)
from kraftlite.storage.log import LogStorage, StorageConfig


def test_a_new_directory_gets_the_current_format(tmp_path: Path) -> None:
    recorded = check_data_dir(tmp_path / "broker-1", "broker")
    assert recorded == current("broker")
    written = json.loads((tmp_path / "broker-1" / FORMAT_FILE).read_text())
    assert written == {
        "kind": "broker",
        "storage_format": 1,
        "record_format": 2,
        "written_by": __version__,
    }
    assert not list((tmp_path / "broker-1").glob(".*.tmp"))


def test_a_directory_from_before_formats_were_recorded_is_format_1(tmp_path: Path) -> None:
    (tmp_path / "data.mdb").write_bytes(b"\0" * 64)  # an older release's partition logs
    assert check_data_dir(tmp_path, "broker").storage_format == 1
    assert (tmp_path / FORMAT_FILE).exists()


def test_newer_formats_and_other_kinds_are_refused_naming_both_versions(tmp_path: Path) -> None:
    newer = DataFormat("broker", 2, 2, "9.0.0")
    with pytest.raises(DataFormatError, match=r"storage format 2 \(written by kraftlite 9.0.0\)"):
        decide("broker", newer, tmp_path)
    with pytest.raises(DataFormatError, match="record format 4"):
        decide("broker", DataFormat("broker", 1, 4, "9.0.0"), tmp_path)
    with pytest.raises(DataFormatError, match="controller's data, not a broker's"):
        decide("broker", current("controller"), tmp_path)
    older = DataFormat("broker", 1, 1, "0.0.1")  # magic 1 only: ours reads it
    assert decide("broker", older, tmp_path) == current("broker")


def test_a_refused_directory_is_left_as_it_was(tmp_path: Path) -> None:
    text = json.dumps({"kind": "broker", "storage_format": 7, "record_format": 2})
    (tmp_path / FORMAT_FILE).write_text(text)
    with pytest.raises(DataFormatError, match="storage format 7"):
        check_data_dir(tmp_path, "broker")
    assert (tmp_path / FORMAT_FILE).read_text() == text
    (tmp_path / FORMAT_FILE).write_text("{not json")
    with pytest.raises(DataFormatError, match="not a kraftlite format file"):
        check_data_dir(tmp_path, "broker")


@pytest.mark.parametrize("kind", ["broker", "controller"])
def test_a_node_refuses_to_start_on_a_newer_format_with_a_clear_error(
    tmp_path: Path, kind: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / FORMAT_FILE).write_text(
        json.dumps({"kind": kind, "storage_format": 5, "record_format": 9, "written_by": "3.1.0"})
    )
    args = (
        ["broker", "--broker-id", "1", "--controllers", "http://127.0.0.1:1"]
        if kind == "broker"
        else ["controller", "--node-id", "1", "--raft", "127.0.0.1:1", "--quorum", "1@127.0.0.1:1"]
    )
    done = CliRunner(env={"KRAFTLITE_CLUSTER_SECRET": "s" * 32}).invoke(
        main, [*args, "--data-dir", str(data)]
    )
    assert done.exit_code == 2, done.output
    assert "storage format 5 (written by kraftlite 3.1.0)" in done.output
    assert "reads storage formats up to 1" in done.output


def test_a_broker_directory_records_format_3_only_once_it_may_hold_it(tmp_path: Path) -> None:
    """Rule 5: a directory an upgraded broker opened still opens on the kraftlite before
    (record format 2), until the broker first stores a format 3 batch (a Kafka batch kept
    as sent); then it says 3, and stays 3, and an older kraftlite refuses it."""
    assert check_data_dir(tmp_path, "broker").record_format == 2
    raise_record_format(tmp_path, "broker", 3)
    assert json.loads((tmp_path / FORMAT_FILE).read_text())["record_format"] == 3
    assert check_data_dir(tmp_path, "broker").record_format == 3  # a restart keeps it
    raise_record_format(tmp_path, "broker", 2)  # never lowered
    assert check_data_dir(tmp_path, "broker").record_format == 3
    older = DataFormat("broker", 1, 3, "9.0.0")
    assert decide("broker", older, tmp_path).record_format == 3


def test_the_log_raises_the_record_format_before_its_first_kept_kafka_batch(
    tmp_path: Path,
) -> None:
    check_data_dir(tmp_path, "broker")
    storage = LogStorage(StorageConfig(path=tmp_path, map_size_bytes=1 << 20))
    try:
        log = storage.open_partition("t-0")
        log.append(fmt.encode_batch([b"columnar"], timestamps=[1]), leader_epoch=0)
        assert json.loads((tmp_path / FORMAT_FILE).read_text())["record_format"] == 2
        sent = records.encode_batch([records.KafkaRecord(0, 1, None, b"kept")])
        kept = stored.kafka_form(sent, records.decode_batches(sent)[0], None)
        assert kept is not None
        log.append(kept, leader_epoch=0)
        assert json.loads((tmp_path / FORMAT_FILE).read_text())["record_format"] == 3
    finally:
        storage.close()
