"""PySpark data source for kraftlite (install with the `spark` extra).

`spark.read.format("kraftlite")` works without any call once kraftlite is installed (Spark
finds the top-level `pyspark_kraftlite` module); `register(spark)` is the explicit path.
"""

from __future__ import annotations

from typing import Any

from kraftlite.spark.datasource import KraftliteDataSource


def register(spark: Any) -> None:
    """Register the `kraftlite` format on a SparkSession."""
    spark.dataSource.register(KraftliteDataSource)


__all__ = ["KraftliteDataSource", "register"]
