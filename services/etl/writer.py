"""The warehouse: each table as zstd Parquet under `<warehouse>/<table>/dt=D/`, replacing exactly D's partition.

The session's `partitionOverwriteMode=dynamic` makes an overwrite replace only the
partitions the frame has rows for; a table with no rows for D has no D partition
to write, so one left by an earlier run of D is deleted instead. Quarantined lines
are the `quarantine` table, `<warehouse>/quarantine/dt=D/`, with their raw text.
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import DataFrame, SparkSession

from services.etl.storage import delete


def table_uri(warehouse: str, table: str) -> str:
    return f"{warehouse.rstrip('/')}/{table}"


def partition_uri(warehouse: str, table: str, day: date) -> str:
    return f"{table_uri(warehouse, table)}/dt={day.isoformat()}"


def write_table(spark: SparkSession, frame: DataFrame, warehouse: str, table: str, day: date) -> int:
    """Write D's rows of a table (partitioned by `dt`); how many there were."""
    cached_here = not frame.is_cached
    frame = frame.cache()
    rows = frame.count()
    if rows == 0:
        delete(spark, partition_uri(warehouse, table, day))
    frame.write.mode("overwrite").partitionBy("dt").option("compression", "zstd").parquet(table_uri(warehouse, table))
    if cached_here:
        frame.unpersist()
    return rows
