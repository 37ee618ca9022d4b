"""A local Spark session for the data source tests (real Spark, local mode, on loopback)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.processes import Cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers: this venv's Python
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only
    from pyspark.sql import SparkSession  # noqa: PLC0415

    session = (
        SparkSession.builder.master("local[2]")
        .appName("kraftlite-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the Spark tests that do not break it (each uses its own topics)."""
    running = Cluster(
        tmp_path_factory.mktemp("spark"),
        broker_config={"log.retention.check.interval.ms": 200},
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()
