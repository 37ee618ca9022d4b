"""Spark batch reads from kraftlite, against the ceiling Spark itself sets, in the same run.

Starts a local cluster (`kraftlite dev`) unless --bootstrap points at one, writes --records
records of --size bytes over --partitions partitions (binary batches, acks=all), then on
one local[2] SparkSession times, interleaved over --runs rounds:

  kraftlite   spark.read.format("kraftlite") of the whole topic into the noop sink
  parquet     the same rows (same columns), read by the same Spark from a Parquet file
              written once from the kraftlite DataFrame: what Spark does with no source cost
  python      a Python data source that makes the same Arrow batches from one batch in
              memory, with no I/O: the ceiling of any Python data source on this Spark

The figures are medians over the rounds. The last line is one JSON object:
{"bench": "spark", "rows_per_s", "parquet_rows_per_s", "ratio", "python_source_rows_per_s"}.

Run: python scripts/bench_spark.py [--records 1000000] [--partitions 8] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import call, start_cluster
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kraftlite.protocol import batch as fmt
from kraftlite.spark.arrow import default_columns, to_record_batch
from kraftlite.spark.cluster import Cluster
from kraftlite.spark.datasource import spark_schema
from kraftlite.spark.local import local_spark

TOPIC = "bench-spark"


class InMemoryRows(InputPartition):
    def __init__(self, rows: int, batch: int, size: int) -> None:
        self.rows, self.batch, self.size = rows, batch, size


class InMemoryReader(DataSourceReader):
    """The `python` baseline: kraftlite's Arrow path over one encoded batch, no I/O."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InMemoryRows]:
        partitions, rows = int(self.options["partitions"]), int(self.options["rows"])
        batch, size = int(self.options["batch"]), int(self.options["size"])
        return [InMemoryRows(rows // partitions, batch, size) for _ in range(partitions)]

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, InMemoryRows)
        count = partition.batch
        data = memoryview(
            fmt.encode_batch(
                [b"x" * partition.size] * count,
                keys=[f"key-{i}".encode() for i in range(count)],
                timestamps=[0] * count,
            )
        )
        for first in range(0, partition.rows, count):
            yield to_record_batch(
                data,
                topic=TOPIC,
                partition=0,
                start=0,
                end=min(count, partition.rows - first),
                columns=default_columns(include_headers=False),
            )


class InMemorySource(DataSource):  # pickled by value from __main__: workers need no import
    @classmethod
    def name(cls) -> str:
        return "kraftlite-bench-memory"

    def schema(self) -> Any:
        return spark_schema(default_columns(include_headers=False))

    def reader(self, schema: Any) -> InMemoryReader:
        return InMemoryReader(self.options)


def load(bootstrap: str, records: int, partitions: int, size: int, batch: int) -> None:
    status, body = call(
        "POST",
        f"{bootstrap}/v1/topics",
        {"name": TOPIC, "partitions": partitions, "replication_factor": 3},
    )
    if status != 201:
        raise SystemExit(f"topic creation failed: {status} {body}")
    cluster = Cluster((bootstrap,))
    per_partition = records // partitions
    value = os.urandom(size // 2).hex().encode()[:size]
    now = int(time.time() * 1000)
    for partition in range(partitions):
        for first in range(0, per_partition, batch):
            count = min(batch, per_partition - first)
            body_bytes = fmt.encode_batch(
                [value] * count,
                keys=[f"key-{first + i}".encode() for i in range(count)],
                timestamps=[now] * count,
            )
            cluster.produce(TOPIC, partition, body_bytes)


def timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--batch", type=int, default=2000, help="records per produced batch")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--bootstrap", help="a running cluster (default: start one)")
    args = parser.parse_args()
    records = args.records // args.partitions * args.partitions

    root = Path(tempfile.mkdtemp(prefix="kraftlite-bench-spark-"))
    process = None
    try:
        bootstrap = args.bootstrap
        if bootstrap is None:
            process, bootstrap = start_cluster(root / "cluster")
        started = time.perf_counter()
        load(bootstrap, records, args.partitions, args.size, args.batch)
        print(f"loaded {records} records of {args.size} B in {time.perf_counter() - started:.1f} s")

        spark = local_spark("kraftlite-bench", cores=2)
        try:

            def kraftlite() -> Any:
                return (
                    spark.read.format("kraftlite")
                    .option("kraftlite.bootstrap", bootstrap)
                    .option("subscribe", TOPIC)
                    .load()
                )

            parquet = str(root / "rows.parquet")
            kraftlite().write.parquet(parquet)
            rows = spark.read.parquet(parquet).count()
            assert rows == records, f"parquet holds {rows} rows, not {records}"

            def read_kraftlite() -> None:
                kraftlite().write.format("noop").mode("overwrite").save()

            def read_parquet() -> None:
                spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

            spark.dataSource.register(InMemorySource)

            def read_memory() -> None:
                (
                    spark.read.format(InMemorySource.name())
                    .option("rows", str(records))
                    .option("partitions", str(args.partitions))
                    .option("batch", str(args.batch))
                    .option("size", str(args.size))
                    .load()
                    .write.format("noop")
                    .mode("overwrite")
                    .save()
                )

            for warm_up in (read_kraftlite, read_parquet, read_memory):
                warm_up()  # Python workers, JIT: outside the figures
            ours, theirs, python = [], [], []
            for run in range(args.runs):
                ours.append(timed(read_kraftlite))
                theirs.append(timed(read_parquet))
                python.append(timed(read_memory))
                print(
                    f"run {run + 1}: kraftlite {records / ours[-1]:,.0f} rows/s, "
                    f"parquet {records / theirs[-1]:,.0f} rows/s, "
                    f"python source {records / python[-1]:,.0f} rows/s"
                )
        finally:
            spark.stop()
    finally:
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)

    rows_per_s = records / statistics.median(ours)
    parquet_rows_per_s = records / statistics.median(theirs)
    python_rows_per_s = records / statistics.median(python)
    print(
        f"median of {args.runs}: kraftlite {rows_per_s:,.0f} rows/s, "
        f"parquet {parquet_rows_per_s:,.0f} rows/s, python source {python_rows_per_s:,.0f} "
        f"rows/s (local[2], {args.partitions} partitions, {records} x {args.size} B)"
    )
    print(
        json.dumps(
            {
                "bench": "spark",
                "rows_per_s": round(rows_per_s),
                "parquet_rows_per_s": round(parquet_rows_per_s),
                "ratio": round(rows_per_s / parquet_rows_per_s, 3),
                "python_source_rows_per_s": round(python_rows_per_s),
            }
        )
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
