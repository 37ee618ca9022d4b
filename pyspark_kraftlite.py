"""Found by Spark on its own (it imports every top-level `pyspark_*` module at the first data
source lookup), so `spark.read.format("kraftlite")` needs no register call."""

from kraftlite.spark.datasource import KraftliteDataSource as DefaultSource

__all__ = ["DefaultSource"]
