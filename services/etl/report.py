"""The report of a day: the tables the job wrote for D, read back and drawn, as one HTML file in the warehouse.

`<warehouse>/reports/dt=D/index.html` (`report_uri`) holds everything it shows: its
charts are PNGs inside it (data: URIs), its style is inline, it loads nothing, so it
reads offline and can be mailed. It is written through Hadoop's FileSystem like the
tables (file://, hdfs://, s3a://), by the driver. The tables are small aggregates:
their rows for D are collected here; a table with no partition for D has no rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType, TimestampType

from services.etl.audit import audit_daily_schema
from services.etl.delays import delay_daily_schema
from services.etl.push import push_hourly_schema
from services.etl.quality import data_quality_schema
from services.etl.report_page import DayTables, report_page
from services.etl.storage import exists, list_folders, write_bytes
from services.etl.traffic import group_hourly_schema, topic_hourly_schema
from services.etl.writer import partition_uri

log = logging.getLogger("petrel.etl")

DRAWN: dict[str, Callable[[], StructType]] = {
    "topic_hourly": topic_hourly_schema,
    "group_hourly": group_hourly_schema,
    "delay_daily": delay_daily_schema,
    "data_quality": data_quality_schema,
    "push_hourly": push_hourly_schema,
    "audit_daily": audit_daily_schema,
}
"""The tables whose rows the report draws (the others: only counted), with their schemas."""

REPORTS = "reports"
"""The warehouse's folder of reports, beside the tables."""


def report_uri(warehouse: str, day: date) -> str:
    return f"{partition_uri(warehouse, REPORTS, day)}/index.html"


def write_report(spark: SparkSession, warehouse: str, day: date) -> str:
    """Draw D's report from the tables written for D; its URI."""
    uri = report_uri(warehouse, day)
    log.info("writing the report %s", uri)
    write_bytes(spark, uri, report_page(read_day(spark, warehouse, day)).encode())
    return uri


def read_day(spark: SparkSession, warehouse: str, day: date) -> DayTables:
    drawn = {table: _rows(spark, warehouse, table, day, schema()) for table, schema in DRAWN.items()}
    counts = {table: len(rows) for table, rows in drawn.items()}
    for table in _tables(spark, warehouse):
        if table not in counts:
            frame = _partition(spark, warehouse, table, day, None)
            counts[table] = 0 if frame is None else frame.count()
    return DayTables(day=day, warehouse=warehouse, row_counts=dict(sorted(counts.items())), **drawn)


def _rows(spark: SparkSession, warehouse: str, table: str, day: date, schema: StructType) -> list[dict[str, Any]]:
    frame = _partition(spark, warehouse, table, day, schema)
    if frame is None:
        return []
    for field in schema.fields:  # times of day in the session's zone (UTC), not the driver's
        if field.name == "hour":
            frame = frame.withColumn("hour", F.hour("hour"))
        elif isinstance(field.dataType, TimestampType):
            frame = frame.withColumn(field.name, F.date_format(field.name, "HH:mm:ss"))
    return [row.asDict() for row in frame.collect()]


def _tables(spark: SparkSession, warehouse: str) -> list[str]:
    """Every table of the warehouse: each folder but the reports'."""
    if not exists(spark, warehouse):
        return []
    return [name for name in list_folders(spark, warehouse) if name != REPORTS and not name.startswith((".", "_"))]


def _partition(
    spark: SparkSession, warehouse: str, table: str, day: date, schema: StructType | None
) -> DataFrame | None:
    """D's partition of a table (without its `dt` column), if there is one."""
    uri = partition_uri(warehouse, table, day)
    if not exists(spark, uri):
        return None
    reader = spark.read
    if schema is not None:
        reader = reader.schema(StructType([field for field in schema.fields if field.name != "dt"]))
    return reader.parquet(uri)
