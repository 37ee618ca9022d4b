"""A job for tests/spark/test_spark_cluster.py, run with spark-submit against a Spark
standalone master: `format("kraftlite")` with no register call (Spark's own lookup finds it),
a batch read, a streaming read to its end (Trigger.AvailableNow) into the kraftlite sink, and
a batch write with the sink. It writes what it saw to RESULT (JSON): the master, the rows of
the batch read and the rows of each micro-batch.

Usage: spark-submit --master spark://HOST:PORT cluster_app.py BOOTSTRAP SOURCE STREAMED
    WRITTEN CHECKPOINT RESULT
"""

import json
import sys

from kraftlite.spark.local import spark_session

bootstrap, source, streamed, written, checkpoint, result = sys.argv[1:7]
spark = spark_session("kraftlite-cluster-test")  # spark-submit's session: its master


def text(data: bytes | bytearray | None) -> str | None:
    return None if data is None else bytes(data).decode()


batch = (
    spark.read.format("kraftlite")
    .option("kraftlite.bootstrap", bootstrap)
    .option("subscribe", source)
    .load()
)
rows = [
    [r.partition, r.offset, text(r.key), text(r.value)]
    for r in batch.select("partition", "offset", "key", "value").collect()
]

query = (
    spark.readStream.format("kraftlite")
    .option("kraftlite.bootstrap", bootstrap)
    .option("subscribe", source)
    .option("startingOffsets", "earliest")
    .option("includeHeaders", "true")
    .option("maxOffsetsPerTrigger", "25")
    .load()
    .select("key", "value", "headers")
    .writeStream.format("kraftlite")
    .option("kraftlite.bootstrap", bootstrap)
    .option("topic", streamed)
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
try:
    assert query.awaitTermination(120), "the stream did not finish"
    micro_batches = [progress["numInputRows"] for progress in query.recentProgress]
finally:
    query.stop()

(
    batch.selectExpr("key", "concat('w-', CAST(value AS STRING)) AS value")
    .write.format("kraftlite")
    .option("kraftlite.bootstrap", bootstrap)
    .option("topic", written)
    .mode("append")
    .save()
)

context = spark.sparkContext
with open(result, "w") as out:
    json.dump(
        {
            "master": context.master,
            "app_id": context.applicationId,
            "rows": rows,
            "micro_batches": micro_batches,
        },
        out,
    )
spark.stop()
