"""`format("kraftlite")`: the one DataSource Spark sees, for batch and streaming reads and
writes. It checks the options and schema on the driver and hands the work to `source.py`
(batch reads), `stream.py` (streaming reads) and `sink.py` (writes).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kraftlite.spark.arrow import Columns, columns_of, default_columns
from kraftlite.spark.options import Mode, OptionError, Options, check_known, flag_option
from kraftlite.spark.sink import KraftliteStreamWriter, KraftliteWriter, SinkSettings
from kraftlite.spark.source import KraftliteBatchReader, ReadSettings
from kraftlite.spark.stream import KraftliteStreamReader

# Spark types, not a DDL string: in DDL a bare `timestamp` follows spark.sql.timestampType
SPARK_TYPES: dict[str, DataType] = {
    "key": BinaryType(),
    "value": BinaryType(),
    "topic": StringType(),
    "partition": IntegerType(),
    "offset": LongType(),
    "timestamp": TimestampType(),
    "timestampType": IntegerType(),
    "headers": ArrayType(
        StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    ),
}


def spark_schema(columns: Columns) -> StructType:
    return StructType(
        [StructField(name, SPARK_TYPES[name], nullable) for name, nullable in columns]
    )


class KraftliteDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kraftlite"

    def schema(self) -> StructType:
        return spark_schema(
            default_columns(flag_option(Options(self.options), "includeHeaders", False))
        )

    def _read_settings(self, schema: StructType, mode: Mode) -> tuple[Options, ReadSettings]:
        options = Options(self.options)
        check_known(options, mode)
        columns: Columns
        try:
            columns = columns_of(
                [(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields]
            )
        except ValueError as exc:
            raise OptionError(str(exc)) from None
        return options, ReadSettings.of(options, columns)

    def reader(self, schema: StructType) -> KraftliteBatchReader:
        return KraftliteBatchReader(*self._read_settings(schema, Mode.BATCH_READ))

    def streamReader(self, schema: StructType) -> KraftliteStreamReader:
        return KraftliteStreamReader(*self._read_settings(schema, Mode.STREAM_READ))

    def _sink_settings(self, schema: StructType, mode: Mode) -> SinkSettings:
        options = Options(self.options)
        check_known(options, mode)
        fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        return SinkSettings.of(options, fields)

    def writer(self, schema: StructType, overwrite: bool) -> KraftliteWriter:
        if overwrite:
            raise OptionError("a kraftlite topic is append-only: use mode('append')")
        return KraftliteWriter(self._sink_settings(schema, Mode.BATCH_WRITE))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KraftliteStreamWriter:
        if overwrite:
            raise OptionError("a kraftlite topic is append-only: use outputMode('append')")
        return KraftliteStreamWriter(self._sink_settings(schema, Mode.STREAM_WRITE))
