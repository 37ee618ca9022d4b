"""A streaming query for tests/spark/test_spark_exactly_once.py: copies topic `eos-in` into
`eos-out` with the kraftlite sink (exactly-once, its default), reading read_committed (the
source's default), a few records per micro-batch, each row's value turned through a Python
UDF that pauses (so a kill lands in the middle of a micro-batch). It runs until killed.

Usage: eos_copy.py BOOTSTRAP CHECKPOINT DELAY_S
"""

import sys
import time

from pyspark.sql.functions import udf

from kraftlite.spark import register
from kraftlite.spark.local import local_spark

bootstrap, checkpoint, delay_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
# local[2,4]: a task whose Python worker was killed is tried again, as on a cluster
spark = local_spark("eos-copy", shuffle_partitions=2, max_failures=4)
register(spark)  # not left to Spark's lookup of Python data sources at start


@udf("binary")
def slowly(value: bytes) -> bytes:
    time.sleep(delay_s)
    return b"copied-" + value


frame = (
    spark.readStream.format("kraftlite")
    .option("kraftlite.bootstrap", bootstrap)
    .option("subscribe", "eos-in")
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "90")
    .load()
)
query = (
    frame.select("key", slowly("value").alias("value"))
    .writeStream.format("kraftlite")
    .option("kraftlite.bootstrap", bootstrap)
    .option("topic", "eos-out")
    .option("batchMaxBytes", "256")  # several batches per task, a UDF pause apart
    .option("transactionTimeoutMs", "20000")
    .option("checkpointLocation", checkpoint)
    .trigger(processingTime="100 milliseconds")
    .start()
)
print("RUNNING", query.id, flush=True)
query.awaitTermination()
