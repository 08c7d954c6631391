"""topic_hourly and group_hourly: what was sent per topic, and what each consumer group did with it, per hour.

An hour is the UTC hour of the event's `ts` (`hour`, a timestamp at the hour's start).
topic_hourly counts `sent` events (bytes: their `size`), `delayed` ones (sent with a
`delay_ms`, or scheduled: a `delay_scheduled` of the same message was read) and
`transactional` ones (`transaction_half`: a transaction's send). group_hourly counts
each group event, and the latencies of the messages first delivered (acked) in the hour:
from the send, or for a scheduled message from its due time, to the first delivery (the
first ack), p50/p95/p99 in milliseconds (percentile_approx); null when there were none.
A redelivery from the group's retry queue counts under the message's own topic.
`lag_end` and `oldest_unacked_age_ms` are the group's lag at the hour's end and the age
of its oldest waiting message (services.etl.lag says exactly which messages wait); an
hour with lag and no events has a row too, its counts 0.
"""

from __future__ import annotations

from datetime import date
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from services.etl.frames import conform, count_of, day_of, percentiles, schema
from services.etl.journey import GROUP_EVENTS, Journeys, own_topics
from services.etl.lag import hourly_lag

LATENCIES = (("delivery", "delivered_ts"), ("ack", "acked_ts"))
"""Each latency of group_hourly: its name, and the group_progress column of the moment it ends."""


def topic_hourly_schema() -> StructType:
    return schema("topic STRING, hour TIMESTAMP, sent BIGINT, bytes_sent BIGINT, delayed BIGINT, transactional BIGINT")


def group_hourly_schema() -> StructType:
    counts = ", ".join(f"{event} BIGINT" for event in GROUP_EVENTS)
    latencies = ", ".join(f"{kind}_{p}_ms BIGINT" for kind, _ in LATENCIES for p in ("p50", "p95", "p99"))
    lag = "lag_end BIGINT, oldest_unacked_age_ms BIGINT"
    return schema(f"group STRING, topic STRING, hour TIMESTAMP, {counts}, {latencies}, {lag}")


def topic_hourly(window: DataFrame) -> DataFrame:
    scheduled = window.where(F.col("event") == "delay_scheduled").select("message_id").distinct()
    scheduled = scheduled.withColumn("scheduled", F.lit(True))
    rows = window.where("in_day").where(F.col("event").isin("sent", "transaction_half"))
    rows = rows.join(scheduled, "message_id", "left")
    is_sent = F.col("event") == "sent"
    delayed = is_sent & (F.coalesce("scheduled", F.lit(False)) | (F.coalesce("delay_ms", F.lit(0)) > 0))
    hourly = rows.groupBy("topic", "hour").agg(
        count_of("sent"),
        F.sum(F.when(is_sent, F.coalesce("size", F.lit(0))).otherwise(0)).alias("bytes_sent"),
        F.sum(F.when(delayed, 1).otherwise(0)).alias("delayed"),
        count_of("transaction_half").alias("transactional"),
    )
    return conform(hourly.withColumn("dt", day_of("hour")), topic_hourly_schema())


def group_hourly(followed: Journeys, day: date, now_ms: int) -> DataFrame:
    """D's rows: the group events' counts, the latencies reached and the lag (up to `now_ms`'s hour), each key once."""
    rows = followed.window.where("in_day").where(F.col("event").isin(*GROUP_EVENTS) & F.col("group").isNotNull())
    counts = (
        own_topics(followed, rows).groupBy("group", "topic", "hour").agg(*(count_of(event) for event in GROUP_EVENTS))
    )
    parts = [counts, _latencies(followed, day), hourly_lag(followed, day, now_ms)]
    # Each part has a row per key at most: a union and one aggregation shuffle once, where full joins would thrice.
    stacked = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    measures = [name for name in group_hourly_schema().fieldNames() if name not in ("group", "topic", "hour", "dt")]
    hourly = stacked.groupBy("group", "topic", "hour").agg(*(F.max(name).alias(name) for name in measures))
    hourly = hourly.fillna(0, subset=[*GROUP_EVENTS, "lag_end"])
    return conform(hourly.withColumn("dt", day_of("hour")), group_hourly_schema())


def _latencies(followed: Journeys, day: date) -> DataFrame:
    """(group, topic, hour) -> p50/p95/p99 of first delivery - start and of first ack - start, in the hour reached."""
    start = followed.sends.select("message_id", F.coalesce("due_ts", "sent_ts").alias("start_ts"))
    progress = followed.progress.join(start, "message_id")
    reached = F.array(*(F.struct(F.lit(kind).alias("kind"), F.col(ts).alias("ts")) for kind, ts in LATENCIES))
    progress = progress.select("group", "group_topic", "start_ts", F.explode(reached).alias("reached"))
    progress = progress.where(F.col("reached.ts").isNotNull())
    progress = progress.withColumn("hour", F.date_trunc("hour", F.timestamp_millis("reached.ts")))
    progress = progress.where(F.to_date("hour") == F.lit(day))
    latency = F.col("reached.ts") - F.col("start_ts")
    grouped = progress.groupBy("group", F.col("group_topic").alias("topic"), "hour")
    return grouped.agg(
        *(p for kind, _ in LATENCIES for p in percentiles(F.when(F.col("reached.kind") == kind, latency), kind))
    )
