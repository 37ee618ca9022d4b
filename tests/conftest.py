from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftlite.storage.log import LogStorage, StorageConfig


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[LogStorage]:
    store = LogStorage(StorageConfig(path=tmp_path / "log"))
    yield store
    store.close()
