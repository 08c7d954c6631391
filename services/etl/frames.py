"""What every table module shares: the explicit output schema a table is conformed to, percentiles."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, LongType, StringType, StructField, StructType, TimestampType

PERCENTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


PLAIN_TYPES: dict[str, DataType] = {
    "STRING": StringType(),
    "BIGINT": LongType(),
    "TIMESTAMP": TimestampType(),
    "ARRAY<STRING>": ArrayType(StringType()),
}
"""The column types the tables use, read here: Spark's own DDL parser runs in the JVM, and `petrel etl report` on a
file:// warehouse starts none (services.etl.report_files)."""


def schema(ddl: str) -> StructType:
    """A table's schema from its DDL (`topic STRING, hour TIMESTAMP, ...`); `dt` ends every one. Columns of
    PLAIN_TYPES are read here, as Spark's parser reads them (nullable); any other DDL goes to Spark's parser."""
    columns = [column.strip().partition(" ") for column in f"{ddl}, dt STRING".split(",")]
    if all(kind.strip().upper() in PLAIN_TYPES for _, _, kind in columns):
        return StructType([StructField(name, PLAIN_TYPES[kind.strip().upper()]) for name, _, kind in columns])
    return StructType.fromDDL(f"{ddl}, dt STRING")  # type: ignore[return-value]  # fromDDL says DataType


def conform(frame: DataFrame, to: StructType) -> DataFrame:
    """Exactly the schema's columns, in its order and of its types."""
    return frame.select(*(F.col(field.name).cast(field.dataType).alias(field.name) for field in to.fields))


def percentiles(value: Column | str, prefix: str) -> list[Column]:
    """p50/p95/p99 of `value` (percentile_approx), named `<prefix>_p50_ms`, ..."""
    return [F.percentile_approx(value, q).alias(f"{prefix}_{name}_ms") for name, q in PERCENTILES]


def count_of(event: str) -> Column:
    """How many rows are this event."""
    return F.sum(F.when(F.col("event") == event, 1).otherwise(0)).alias(event)


def day_of(timestamp: Column | str) -> Column:
    return F.date_format(timestamp, "yyyy-MM-dd")
