"""delay_daily: per topic, what became of scheduled messages on D, and how late the fired ones were.

`lateness_p50_ms`.. are percentile_approx of `delay_fired`'s `lateness_ms` (how long
after its due time a message reached its topic). The timer's own rolls name no topic:
they are counted on a row with a null topic.

A consumer group's retry waits its backoff in the timer too, and is fired to the group's
retry queue (`%RETRY%<group>`) with no `delay_scheduled` before it: those firings and
rolls are group_hourly's `retried`, not scheduled messages, and are not counted here. A
retry the timer failed to deliver or lost is (on its retry queue's row): it is a loss.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from libs.names import RETRY_PREFIX
from services.etl.frames import conform, count_of, percentiles, schema

DELAY_EVENTS = {
    "delay_scheduled": "scheduled",
    "delay_fired": "fired",
    "delay_cancelled": "cancelled",
    "delay_rolled": "rolled",
    "delay_failed": "failed",
    "delay_lost": "lost",
}


def delay_daily_schema() -> StructType:
    counts = ", ".join(f"{column} BIGINT" for column in DELAY_EVENTS.values())
    return schema(f"topic STRING, {counts}, lateness_p50_ms BIGINT, lateness_p95_ms BIGINT, lateness_p99_ms BIGINT")


def delay_daily(window: DataFrame) -> DataFrame:
    rows = window.where("in_day").where(F.col("event").isin(*DELAY_EVENTS))
    backoff = F.col("event").isin("delay_fired", "delay_rolled") & F.col("topic").startswith(RETRY_PREFIX)
    rows = rows.where(~F.coalesce(backoff, F.lit(False)))
    fired_lateness = F.when(F.col("event") == "delay_fired", F.col("lateness_ms"))
    daily = rows.groupBy("topic", "dt").agg(
        *(count_of(event).alias(column) for event, column in DELAY_EVENTS.items()),
        *percentiles(fired_lateness, "lateness"),
    )
    return conform(daily, delay_daily_schema())
