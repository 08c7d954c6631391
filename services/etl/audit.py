"""audit_daily: per key, action, operation and status, the gateway's security-relevant calls of D.

The input is the gateway's `audit` events (libs.events.contract): one per key created or
revoked, admin call, and call refused with 401 (`unauthorized`), 403 (`forbidden`) or 429
(`rate_limited`). `key_id` and `key_name` are the caller's key, null when no valid key was
given; `status` is the HTTP status answered.

A row is a (key_id, key_name, action, operation, status) of D, never a path or a client:
a storm of forged keys against thousands of topics from hundreds of addresses is one row
per operation it hit. What tells the calls apart stays, cheaply: `calls`, `remotes` (the
distinct client addresses), `first_at` and `last_at`, and the `TOP` most frequent values
of the row's calls as lists, most frequent first (a tie by value): `top_paths` ("METHOD
/path"), `top_resources` (the topic, group or key the call was about), `top_remotes`,
`top_reasons`. A field an event leaves out is null in its row's keys (an event of
`petrel keys create` has no key, operation nor remote) and absent from its lists.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from services.etl.frames import conform, schema

AUDIT_KEYS = ("key_id", "key_name", "action", "operation", "status")
"""A row of audit_daily is one of these (and its day)."""
TOP = 5
"""The top_* lists hold at most this many values."""
TOP_LISTS = {"request": "top_paths", "resource": "top_resources", "remote": "top_remotes", "reason": "top_reasons"}
"""field of a call -> the list of its most frequent values (`request` is "METHOD /path")."""
DENIALS = ("unauthorized", "forbidden", "rate_limited")
"""The contract's actions of a refused call (401, 403, 429)."""
KEY_CHANGES = ("key_created", "key_revoked")


def audit_daily_schema() -> StructType:
    lists = ", ".join(f"{column} ARRAY<STRING>" for column in TOP_LISTS.values())
    return schema(
        "key_id STRING, key_name STRING, action STRING, operation STRING, status BIGINT, calls BIGINT, "
        f"remotes BIGINT, first_at TIMESTAMP, last_at TIMESTAMP, {lists}"
    )


def audit_daily(window: DataFrame) -> DataFrame:
    """D's rows: one per (key_id, key_name, action, operation, status) with an audit event."""
    rows = window.where("in_day").where(F.col("event") == "audit")
    rows = rows.withColumn("request", F.when(F.col("path").isNotNull(), F.concat_ws(" ", "method", "path")))
    grain = [*AUDIT_KEYS, "dt"]
    for field in TOP_LISTS:  # a window partition, unlike a join, takes a null key as a key
        rows = rows.withColumn(f"{field}_calls", F.count(F.lit(1)).over(Window.partitionBy(*grain, field)))
    daily = rows.groupBy(*grain).agg(
        F.count(F.lit(1)).alias("calls"),
        F.countDistinct("remote").alias("remotes"),
        F.timestamp_millis(F.min("ts")).alias("first_at"),
        F.timestamp_millis(F.max("ts")).alias("last_at"),
        *(_most_frequent(field).alias(column) for field, column in TOP_LISTS.items()),
    )
    return conform(daily, audit_daily_schema())


def _most_frequent(field: str) -> Column:
    """The TOP values of `field` most called in the group, most first, a tie by value; nulls left out."""
    ranked = F.struct((-F.col(f"{field}_calls")).alias("rank"), F.col(field).alias("value"))
    values = F.array_sort(F.collect_set(F.when(F.col(field).isNotNull(), ranked)))  # collect_set skips nulls
    return F.transform(F.slice(values, 1, TOP), lambda entry: entry["value"])
