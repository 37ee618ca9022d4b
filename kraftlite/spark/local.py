"""A local SparkSession for examples, benchmarks and tests: Spark in this process's venv, on
loopback only, sized for a small machine; or, for a driver that spark-submit started, the
session spark-submit configured (its master: a cluster's, docs/spark.md: On a cluster).
"""

from __future__ import annotations

import os
import sys
from typing import Any


def local_spark(
    app_name: str, cores: int = 2, shuffle_partitions: int = 4, max_failures: int = 1
) -> Any:
    """`max_failures`: how often a task may fail before its job does (local mode's default
    1 never retries one; a cluster's is 4)."""
    # Workers must run this venv's Python (they import kraftlite and pyarrow), and Spark
    # otherwise binds to the machine's outside address.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession  # noqa: PLC0415 - after the environment is set

    session = (
        SparkSession.builder.master(
            f"local[{cores}]" if max_failures == 1 else f"local[{cores},{max_failures}]"
        )
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", "1g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def submitted() -> bool:
    """Whether Spark's launcher chose this driver's master: spark-submit starts the driver's
    JVM first and passes it in PYSPARK_GATEWAY_PORT; a plain `python` driver starts its JVM
    with PYSPARK_SUBMIT_ARGS, which may name one (`--master URL`, `--conf spark.master=URL`)."""
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "").split()
    return "PYSPARK_GATEWAY_PORT" in os.environ or any(
        arg == "--master" or arg.startswith(("--master=", "spark.master=")) for arg in args
    )


def spark_session(app_name: str, **local: Any) -> Any:
    """The session spark-submit configured (`--master`, `--name`, `--conf`: none of them
    overridden here) when it started this driver, else `local_spark(app_name, **local)`."""
    if not submitted():
        return local_spark(app_name, **local)
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark is heavy

    return SparkSession.builder.getOrCreate()
