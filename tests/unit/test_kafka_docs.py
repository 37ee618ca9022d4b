"""docs/kafka.md lists exactly the APIs and versions the Kafka listener serves."""

from __future__ import annotations

import re
from pathlib import Path

from kraftlite.kafka.handlers import _api_keys
from kraftlite.protocol.kafka.messages import ApiKey

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka.md"
ROW = re.compile(r"^\| ([A-Z_]+) \((\d+)\) \| (\d+)-(\d+) \|", re.MULTILINE)


def test_the_served_table_matches_api_versions() -> None:
    documented = {
        int(key): (name, int(low), int(high))
        for name, key, low, high in ROW.findall(DOC.read_text())
    }
    served = {
        k["api_key"]: (ApiKey(k["api_key"]).name, k["min_version"], k["max_version"])
        for k in _api_keys()
    }
    assert documented == served
