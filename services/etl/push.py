"""push_hourly: per group, topic, endpoint and hour, what the push service's webhook deliveries did.

The input is the push service's `push_attempt` events (one per attempt to deliver a
message to a subscription's endpoint: its HTTP `status`, null when there was no answer,
its `outcome` and `latency_ms`). An hour is the UTC hour of the attempt's `ts`; a late
attempt counts in the day of its `ts`, as every event does.

`attempts` counts every attempt, `messages` the distinct messages tried; one column per
outcome (`acked`, `deferred`, `failed`, `throttled`, `gone`, `lost`); `no_answer` the
attempts with a null status (a timeout, no connection, a lease lost before the call);
`status_2xx`, `status_4xx`, `status_5xx` the answers by class; `latency_p50_ms`.. the
percentiles (percentile_approx) of the attempts that had an answer, null when none had;
`max_delivery_attempt` the highest `delivery_attempt` seen (a throttled attempt does not
count against the message, so it repeats the number). A redelivery from the group's retry
queue counts under the message's own topic, as in group_hourly.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from services.etl.frames import PERCENTILES, conform, day_of, percentiles, schema
from services.etl.journey import Journeys, own_topics

OUTCOMES = ("acked", "deferred", "failed", "throttled", "gone", "lost")
"""The contract's outcomes of a push_attempt, each a column of push_hourly."""
STATUS_CLASSES = ("2xx", "4xx", "5xx")
"""The answers counted by class: `status_2xx` is 200..299, and so on."""


def push_hourly_schema() -> StructType:
    outcomes = ", ".join(f"{outcome} BIGINT" for outcome in OUTCOMES)
    statuses = ", ".join(f"status_{name} BIGINT" for name in STATUS_CLASSES)
    latencies = ", ".join(f"latency_{name}_ms BIGINT" for name, _ in PERCENTILES)
    return schema(
        "group STRING, topic STRING, endpoint STRING, hour TIMESTAMP, attempts BIGINT, messages BIGINT, "
        f"{outcomes}, no_answer BIGINT, {statuses}, {latencies}, max_delivery_attempt BIGINT"
    )


def push_hourly(followed: Journeys) -> DataFrame:
    """D's rows: one per (group, topic, endpoint, hour) with a push attempt."""
    rows = followed.window.where("in_day").where(F.col("event") == "push_attempt")
    answered = F.col("status").isNotNull()
    hourly = (
        own_topics(followed, rows)
        .groupBy("group", "topic", "endpoint", "hour")
        .agg(
            F.count(F.lit(1)).alias("attempts"),
            F.countDistinct("message_id").alias("messages"),
            *(_attempts_where(F.col("outcome") == outcome).alias(outcome) for outcome in OUTCOMES),
            _attempts_where(~answered).alias("no_answer"),
            *(_attempts_where(_in_class(name)).alias(f"status_{name}") for name in STATUS_CLASSES),
            *percentiles(F.when(answered, F.col("latency_ms")), "latency"),
            F.max("delivery_attempt").alias("max_delivery_attempt"),
        )
    )
    return conform(hourly.withColumn("dt", day_of("hour")), push_hourly_schema())


def _in_class(name: str) -> Column:
    """`2xx` -> 200 <= status <= 299."""
    low = int(name[0]) * 100
    return F.col("status").between(low, low + 99)


def _attempts_where(condition: Column) -> Column:
    return F.count(F.when(condition, True))  # count skips the nulls `when` leaves
