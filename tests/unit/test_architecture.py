"""Import rules: pure modules touch no I/O library, clock or thread (style.md, habit 3).
Which package may import which is import-linter's (the contracts in pyproject.toml, run by
scripts/test)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kraftlite"
PURE = [
    "protocol/batch.py",
    "errors.py",
    "config.py",
    "metadata/image.py",
    "metadata/records.py",
    "metadata/placement.py",
    "metadata/rebalance.py",
    "metadata/topics.py",
    "metadata/views.py",
    "metadata/local_changes.py",
    "controller/decisions.py",
    "controller/reassignments.py",
    "controller/elastic.py",
    "controller/heartbeats.py",
    "broker/replica_state.py",
    "broker/rates.py",
    "groups/assignor.py",
    "groups/group.py",
    "protocol/partitioner.py",
    "protocol/kafka/wire.py",
    "protocol/kafka/messages.py",
    "protocol/kafka/records.py",
    "spark/options.py",
]
FORBIDDEN = {"lmdb", "aiohttp", "pysyncobj", "pyspark", "asyncio", "threading", "socket", "time"}


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_io(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN, f"{module} imports {imported & FORBIDDEN}"


def test_only_the_storage_adapter_imports_lmdb() -> None:
    users = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "import lmdb" in path.read_text()
    )
    assert users == ["storage/log.py"]


def test_only_the_raft_adapter_imports_pysyncobj() -> None:
    """The log adapter and its transport (which subclasses pysyncobj's to bound the port)."""
    users = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "import pysyncobj" in path.read_text() or "from pysyncobj" in path.read_text()
    )
    assert users == ["raft/pysyncobj_log.py", "raft/transport.py"]


def test_only_the_spark_package_imports_pyspark() -> None:
    """The core installs and runs without the spark extra."""
    users = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "import pyspark" in path.read_text() or "from pyspark" in path.read_text()
    )
    assert users and all(user.startswith("spark/") for user in users), users
