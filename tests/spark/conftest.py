"""A local Spark session for the data source tests (real Spark, local mode, on loopback), and
one cluster for the tests that do not break it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.processes import Cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17 or newer, and there is no java on PATH")
    from kraftlite.spark.local import local_spark  # noqa: PLC0415

    session = local_spark("kraftlite-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Each test uses topics of its own. Every broker has a Kafka listener too
    (`kafka.bootstrap.servers` may name those)."""
    running = Cluster(
        tmp_path_factory.mktemp("spark"),
        broker_config={"log.retention.check.interval.ms": 200, "log.cleaner.backoff.ms": 200},
        kafka=True,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()
