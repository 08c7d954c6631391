"""A day's report drawn again from a `file://` warehouse, without Spark: the tables' Parquet files read with pyarrow.

`petrel etl report` on a local warehouse takes about a second this way, where starting a JVM
and a session took 15-40 s here for tables of a few hundred rows. The rows are those Spark's
reader gives (`services.etl.report.read_day`): each drawn table's columns in its schema's
order, null where a file lacks one, the hour of `hour` and the time of day of the other
timestamps in UTC (the job's session zone); tests hold the two pages equal. Other
warehouses (`hdfs://`, `s3a://`) are read by Spark, through Hadoop's FileSystem.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq  # type: ignore[import-untyped]
from pyspark.sql.types import StructType, TimestampType

from services.etl.report import DRAWN, REPORTS, report_uri
from services.etl.report_page import DayTables, report_page
from services.etl.writer import partition_uri

FILE_SCHEME = "file"


def is_local(warehouse: str) -> bool:
    return urlparse(warehouse).scheme == FILE_SCHEME


def write_report_from_files(warehouse: str, day: date) -> str:
    """Draw D's report from the tables written for D in a `file://` warehouse; its URI."""
    uri = report_uri(warehouse, day)
    target = _path(uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    written = target.with_name(f".{target.name}.tmp")
    written.write_bytes(report_page(read_day_from_files(warehouse, day)).encode())
    written.replace(target)  # a reader sees the old page or the new one, whole
    return uri


def read_day_from_files(warehouse: str, day: date) -> DayTables:
    drawn = {table: _rows(warehouse, table, day, schema()) for table, schema in DRAWN.items()}
    counts = {table: len(rows) for table, rows in drawn.items()}
    for table in _tables(warehouse):
        if table not in counts:
            folder = _path(partition_uri(warehouse, table, day))
            counts[table] = _row_count(folder) if _has_files(folder) else 0
    return DayTables(day=day, warehouse=warehouse, row_counts=dict(sorted(counts.items())), **drawn)


def _row_count(folder: Path) -> int:
    """The partition's rows from its Parquet files' footers (each file's metadata), no column read."""
    return sum(pq.ParquetFile(part).metadata.num_rows for part in sorted(folder.iterdir()) if part.suffix == ".parquet")


def _rows(warehouse: str, table: str, day: date, schema: StructType) -> list[dict[str, Any]]:
    folder = _path(partition_uri(warehouse, table, day))
    if not _has_files(folder):
        return []
    read = pq.read_table(folder)
    fields = [field for field in schema.fields if field.name != "dt"]
    columns = {
        field.name: read.column(field.name).to_pylist() if field.name in read.column_names else [None] * read.num_rows
        for field in fields
    }
    rows = []
    for index in range(read.num_rows):
        row = {}
        for field in fields:
            value = columns[field.name][index]
            if isinstance(field.dataType, TimestampType) and value is not None:
                value = _time_of_day(field.name, value)
            row[field.name] = value
        rows.append(row)
    return rows


def _time_of_day(name: str, value: datetime) -> int | str:
    """As Spark's `hour()` and `date_format(..., 'HH:mm:ss')` in UTC: Spark's Parquet timestamps are UTC instants,
    read naive (INT96) or with a zone."""
    utc = value if value.tzinfo is None else value.astimezone(UTC)
    return utc.hour if name == "hour" else utc.strftime("%H:%M:%S")


def _tables(warehouse: str) -> list[str]:
    """Every table of the warehouse: each folder but the reports'."""
    root = _path(warehouse)
    if not root.is_dir():
        return []
    return sorted(
        p.name for p in root.iterdir() if p.is_dir() and p.name != REPORTS and not p.name.startswith((".", "_"))
    )


def _has_files(folder: Path) -> bool:
    """A partition Spark would read: a folder with a Parquet file (its `_SUCCESS` and `.crc` files aside)."""
    return folder.is_dir() and any(p.suffix == ".parquet" for p in folder.iterdir())


def _path(uri: str) -> Path:
    return Path(unquote(urlparse(uri).path))
