"""Consumer lag: per group, topic and hour of D, the messages waiting for the group at the hour's end.

Which messages: those the group delivers or has delivered, as the events know it: a
(message, group) pair with at least one group event (delivered, acked, nacked, retried,
dead_lettered, redriven) anywhere in the window read. The events name a group only
through its own events, so a message no group has touched yet is in no group's lag.

A pair waits from the message's availability: its send (`sent`), or for a scheduled
message its due time, or for a transaction's message its commit; a rolled-back message
never waits. Without a send in the window, its first group event stands for it. It
waits until the group's first ack or its dead-lettering; a redrive after the
dead-lettering makes it wait again, from the redrive until an ack (repeated cycles are
judged by the last dead-lettering and the last redrive).

`lag_end`: the pairs waiting at the hour's end (available before it, not settled before
it); `oldest_unacked_age_ms`: the hour's end minus the earliest availability among them
(null when none wait). An hour has a lag row when something waits at its end, events or
not: a group that stalls shows its lag every hour of D until the end of the day, and a
day with no events of its own still shows what waits from the days before it. A day run
before it is over (today) has lag rows up to the hour the job runs in, as the events so
far have it (that hour's age measured at the run's time, not its end), none for the hours
to come. Only the days read are known (D and `lookback_days` either side): a message whose
events all lie further back is in no lag.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from services.etl.journey import Journeys

HOUR_MS = 3_600_000


def hourly_lag(followed: Journeys, day: date, now_ms: int) -> DataFrame:
    """(group, topic, hour of D) -> lag_end, oldest_unacked_age_ms, for every hour ending with a pair waiting.

    D is given, not found in the window: a day with no events of its own still has the lag left from the days before.
    Its hours go up to the one holding `now_ms` (the run's time): a day not over has no lag yet for hours to come.
    """
    day_ms = int(datetime.combine(day, time(), tzinfo=UTC).timestamp() * 1000)
    last_hour_end = min(day_ms + 24 * HOUR_MS, (now_ms // HOUR_MS + 1) * HOUR_MS)
    waiting = _waiting_spans(followed)
    first_end = F.greatest(_hour_of("from_ts") + HOUR_MS, F.lit(day_ms + HOUR_MS))
    last_end = F.least(F.coalesce(_hour_of("until_ts"), F.lit(2**62)), F.lit(last_hour_end))
    ends = F.sequence(first_end, last_end, F.lit(HOUR_MS))
    at_ends = waiting.where(first_end <= last_end).withColumn("end_ms", F.explode(ends))
    at_ends = at_ends.withColumn("hour", F.timestamp_millis(F.col("end_ms") - HOUR_MS))
    # A pair's spans never share an hour end: counting rows counts messages.
    return at_ends.groupBy("group", "topic", "hour").agg(
        F.count(F.lit(1)).alias("lag_end"),
        (F.least(F.max("end_ms"), F.lit(now_ms)) - F.min("available_ts")).alias("oldest_unacked_age_ms"),
    )


def _hour_of(ms: str) -> Column:
    """The ms of the start of the hour holding `ms`."""
    return F.floor(F.col(ms) / HOUR_MS) * HOUR_MS


def _waiting_spans(followed: Journeys) -> DataFrame:
    """message_id, group, topic, available_ts, and a span [from_ts, until_ts) it waits (until_ts null: still)."""
    pairs = followed.progress.join(followed.sends, "message_id", "left")
    pairs = pairs.where(~F.coalesce("rolled_back", F.lit(False)))
    first_seen = F.least("delivered_ts", "acked_ts", "dead_lettered_ts", "redriven_ts")
    available = F.coalesce("due_ts", "committed_ts", "sent_ts", first_seen)
    pairs = pairs.select(
        "message_id",
        "group",
        F.coalesce("topic", "group_topic").alias("topic"),
        available.alias("available_ts"),
        "acked_ts",
        "dead_lettered_ts",
        "redriven_ts",
    )
    first = F.struct(F.col("available_ts").alias("from_ts"), _settled().alias("until_ts"))
    redriven = F.col("redriven_ts") >= F.coalesce("dead_lettered_ts", F.lit(0))
    reopens = redriven & (F.col("redriven_ts") < F.coalesce("acked_ts", F.lit(2**62)))
    again = F.when(reopens, F.struct(F.col("redriven_ts").alias("from_ts"), F.col("acked_ts").alias("until_ts")))
    spans = F.filter(F.array(first, again), lambda span: span.isNotNull())
    pairs = pairs.select("message_id", "group", "topic", "available_ts", F.explode(spans).alias("span"))
    return pairs.select("message_id", "group", "topic", "available_ts", "span.from_ts", "span.until_ts")


def _settled() -> Column:
    """The first ack, or the dead-lettering when it came first: the end of the first wait."""
    return F.least("acked_ts", "dead_lettered_ts")
