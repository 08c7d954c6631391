"""data_quality: how much of D's input was read and kept, why the rest was quarantined, what does not add up.

One row per measure: `lines_read` (non-blank lines in D's folder, a batch line once per
event it holds), `events` (good events of D, from any folder read), `late_events` (of
those, the ones found in another day's folder), `quarantined` once per reason, and
`invariant` once per invariant, its count the events of D that break it:

- `rolled_back_delivered`: a `delivered` of a message whose transaction was rolled back;
- `ack_without_send`: an `acked` of a message with no send (`sent`, `transaction_half`)
  in the window read (D and its lookback days);
- `dlq_without_reason`: a `dead_lettered` whose reason is null or blank.

Every reason and invariant has its row, 0 included, so a chart of one has no gaps. With
the CommitLog read (services.etl.reconciliation), a `reconciliation` row per topic whose
stored messages and events disagree, `detail` the topic, `count` the difference.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from services.etl.events import QUARANTINE_REASONS, EventLog
from services.etl.frames import conform, schema

INVARIANTS = ("rolled_back_delivered", "ack_without_send", "dlq_without_reason")
Row = tuple[str, str | None, int]


def data_quality_schema() -> StructType:
    return schema("measure STRING, detail STRING, count BIGINT")


def data_quality(spark: SparkSession, log: EventLog, mismatches: list[Row] | None = None) -> DataFrame:
    """D's measures; `mismatches`: the reconciliation's rows, when the CommitLog was read."""
    events = log.events.agg(F.count("*").alias("events"), F.sum(F.col("late").cast("long")).alias("late")).first()
    by_reason = {row["reason"]: row["count"] for row in log.quarantine.groupBy("reason").count().collect()}
    broken = invariant_breaches(log.window)
    rows: list[Row] = [
        ("lines_read", None, log.lines.count()),
        ("events", None, events["events"] if events else 0),
        ("late_events", None, (events["late"] if events else None) or 0),
        *(("quarantined", reason, by_reason.get(reason, 0)) for reason in QUARANTINE_REASONS),
        *(("invariant", name, broken[name]) for name in INVARIANTS),
        *(mismatches or []),
    ]
    frame = spark.createDataFrame(rows, "measure STRING, detail STRING, count BIGINT")
    return conform(frame.withColumn("dt", F.lit(log.day.isoformat())), data_quality_schema())


def invariant_breaches(window: DataFrame) -> dict[str, int]:
    """invariant -> how many of D's events break it (see the module docstring)."""
    marks = window.groupBy("message_id").agg(
        F.max(F.col("event") == "transaction_rollback").alias("rolled_back"),
        F.max(F.col("event").isin("sent", "transaction_half")).alias("was_sent"),
    )
    checked = window.where("in_day").where(F.col("event").isin("delivered", "acked", "dead_lettered"))
    checked = checked.join(marks, "message_id", "left")
    counts = checked.agg(
        _count_where((F.col("event") == "delivered") & F.coalesce("rolled_back", F.lit(False))).alias(INVARIANTS[0]),
        _count_where((F.col("event") == "acked") & ~F.coalesce("was_sent", F.lit(False))).alias(INVARIANTS[1]),
        _count_where((F.col("event") == "dead_lettered") & (F.coalesce(F.trim("reason"), F.lit("")) == "")).alias(
            INVARIANTS[2]
        ),
    ).first()
    return {name: (counts[name] if counts else None) or 0 for name in INVARIANTS}


def _count_where(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))
