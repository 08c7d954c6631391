"""data_quality: how much of D's input was read and kept, and why the rest was quarantined.

One row per measure: `lines_read` (non-blank lines in D's folder), `events` (good
events of D, from any folder read), `late_events` (of those, the ones found in another
day's folder) and `quarantined` once per reason (every reason, 0 included, so a chart
of a reason has no gaps).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from services.etl.events import QUARANTINE_REASONS, EventLog
from services.etl.frames import conform, schema


def data_quality_schema() -> StructType:
    return schema("measure STRING, detail STRING, count BIGINT")


def data_quality(spark: SparkSession, log: EventLog) -> DataFrame:
    events = log.events.agg(F.count("*").alias("events"), F.sum(F.col("late").cast("long")).alias("late")).first()
    by_reason = {row["reason"]: row["count"] for row in log.quarantine.groupBy("reason").count().collect()}
    rows = [
        ("lines_read", None, log.lines.count()),
        ("events", None, events["events"] if events else 0),
        ("late_events", None, (events["late"] if events else None) or 0),
        *(("quarantined", reason, by_reason.get(reason, 0)) for reason in QUARANTINE_REASONS),
    ]
    frame = spark.createDataFrame(rows, "measure STRING, detail STRING, count BIGINT")
    return conform(frame.withColumn("dt", F.lit(log.day.isoformat())), data_quality_schema())
