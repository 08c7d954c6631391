"""message_journey: one row per message sent on D and consumer group, from its send to where it ended.

A message's start is its `sent` (or its transaction's `transaction_half`); a scheduled
message's latencies count from its due time (`delay_scheduled`'s `deliver_at`), not
from its send. The group's events are looked up in every folder read, so a message
sent late on D and delivered just after midnight still has its delivery. A message no
group received has one row with a null group. A redelivery from a group's retry queue
names that queue's topic (`%RETRY%<group>`): the message's own topic is the one kept.

final_state, first match wins: `acked`; `redriven` (dead-lettered, then sent back by
an operator); `dead_lettered`; `in_flight` (delivered, not settled); `rolled_back`
(its transaction was); `not_delivered`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from libs.names import RETRY_PREFIX
from services.etl.frames import conform, day_of, schema

GROUP_EVENTS = ("delivered", "acked", "nacked", "retried", "dead_lettered", "redriven")


def message_journey_schema() -> StructType:
    return schema(
        "message_id STRING, topic STRING, group STRING, sent_at TIMESTAMP, due_at TIMESTAMP, "
        "first_delivered_at TIMESTAMP, acked_at TIMESTAMP, dead_lettered_at TIMESTAMP, attempts INT, "
        "final_state STRING"
    )


@dataclass(frozen=True, slots=True)
class Journeys:
    """What the tables following messages read of one window: its `sends` and its `group_progress`.

    Made once a run (`journeys`) and cached: group_hourly (its counts, latencies and lag)
    and message_journey all read them.
    """

    window: DataFrame
    sends: DataFrame
    progress: DataFrame


def journeys(window: DataFrame, keep: Callable[[DataFrame], DataFrame] = lambda frame: frame) -> Journeys:
    """The window's Journeys; `keep` caches a frame (EventLog.keep: until the window is released)."""
    return Journeys(window, keep(sends(window)), keep(group_progress(window)))


def sends(window: DataFrame) -> DataFrame:
    """message_id -> topic, sent_ts, due_ts, committed_ts (ms), rolled_back: every message whose send was read."""
    sent = (
        window.where(F.col("event").isin("sent", "transaction_half"))
        .groupBy("message_id")
        .agg(F.first("topic", ignorenulls=True).alias("topic"), F.min("ts").alias("sent_ts"))
    )
    due = (
        window.where(F.col("event") == "delay_scheduled").groupBy("message_id").agg(F.max("deliver_at").alias("due_ts"))
    )
    ends = window.where(F.col("event").isin("transaction_commit", "transaction_rollback"))
    ended = ends.groupBy("message_id").agg(
        F.min(F.when(F.col("event") == "transaction_commit", F.col("ts"))).alias("committed_ts"),
        F.max(F.col("event") == "transaction_rollback").alias("rolled_back"),
    )
    joined = sent.join(due, "message_id", "left").join(ended, "message_id", "left")
    return joined.withColumn("rolled_back", F.coalesce("rolled_back", F.lit(False)))


def group_progress(window: DataFrame) -> DataFrame:
    """(message_id, group) -> topic and the ms of its first delivery, first ack, last dead-lettering and redrive."""

    def ts_of(event: str) -> Column:
        return F.when(F.col("event") == event, F.col("ts"))

    rows = window.where(F.col("event").isin(*GROUP_EVENTS) & F.col("group").isNotNull())
    return rows.groupBy("message_id", "group").agg(
        F.first(F.when(~F.col("topic").startswith(RETRY_PREFIX), F.col("topic")), ignorenulls=True).alias(
            "group_topic"
        ),
        F.min(ts_of("delivered")).alias("delivered_ts"),
        F.min(ts_of("acked")).alias("acked_ts"),
        F.max(ts_of("dead_lettered")).alias("dead_lettered_ts"),
        F.max(ts_of("redriven")).alias("redriven_ts"),
        F.max(F.when(F.col("event") == "delivered", F.col("delivery_attempt"))).alias("attempts"),
    )


def own_topics(followed: Journeys, rows: DataFrame) -> DataFrame:
    """`rows` with a retry queue's topic (a redelivery's `delivered`, `acked`, `nacked`) replaced by the message's."""
    sent = followed.sends.select("message_id", F.col("topic").alias("sent_topic"))
    retried = F.col("topic").startswith(RETRY_PREFIX)
    own = F.when(retried, F.coalesce("sent_topic", "topic")).otherwise(F.col("topic"))
    return rows.join(sent, "message_id", "left").withColumn("topic", own).drop("sent_topic")


def message_journey(followed: Journeys) -> DataFrame:
    """The journeys of the messages sent on the window's day (its `in_day` rows)."""
    day = followed.window.where("in_day").select("dt").distinct()
    sent = followed.sends.withColumn("dt", day_of(F.timestamp_millis("sent_ts"))).join(day, "dt")
    joined = sent.join(followed.progress, "message_id", "left")
    journey = joined.select(
        "message_id",
        F.coalesce("topic", "group_topic").alias("topic"),
        "group",
        F.timestamp_millis("sent_ts").alias("sent_at"),
        F.timestamp_millis("due_ts").alias("due_at"),
        F.timestamp_millis("delivered_ts").alias("first_delivered_at"),
        F.timestamp_millis("acked_ts").alias("acked_at"),
        F.timestamp_millis("dead_lettered_ts").alias("dead_lettered_at"),
        F.coalesce("attempts", F.lit(0)).alias("attempts"),
        _final_state().alias("final_state"),
        "dt",
    )
    return conform(journey, message_journey_schema())


def _final_state() -> Column:
    dead = F.col("dead_lettered_ts").isNotNull()
    return (
        F.when(F.col("acked_ts").isNotNull(), "acked")
        .when(dead & (F.col("redriven_ts") >= F.col("dead_lettered_ts")), "redriven")
        .when(dead, "dead_lettered")
        .when(F.col("delivered_ts").isNotNull(), "in_flight")
        .when(F.col("rolled_back"), "rolled_back")
        .otherwise("not_delivered")
    )
