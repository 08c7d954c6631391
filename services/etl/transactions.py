"""transaction_daily: per topic, the transactions of D: half messages, how they ended and who ended them.

A commit or rollback says who ended it in `by`: `producer` (the sender's own call),
`checkback` (the producer's answer to a check-back) or `operator`; `commits` and
`rollbacks` count them all. `checks` are the check-backs asked on D, with their
latency (p50/p95/p99 ms, percentile_approx of `transaction_check`'s `latency_ms`);
`abandoned` half messages passed the check limit unanswered.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from services.etl.frames import conform, count_of, percentiles, schema

TRANSACTION_EVENTS = (
    "transaction_half",
    "transaction_commit",
    "transaction_rollback",
    "transaction_check",
    "transaction_abandoned",
)
ENDERS = ("producer", "checkback")


def transaction_daily_schema() -> StructType:
    by = ", ".join(f"{end}s_by_{who} BIGINT" for end in ("commit", "rollback") for who in ENDERS)
    return schema(
        f"topic STRING, halves BIGINT, commits BIGINT, rollbacks BIGINT, {by}, abandoned BIGINT, checks BIGINT, "
        "check_latency_p50_ms BIGINT, check_latency_p95_ms BIGINT, check_latency_p99_ms BIGINT"
    )


def transaction_daily(window: DataFrame) -> DataFrame:
    rows = window.where("in_day").where(F.col("event").isin(*TRANSACTION_EVENTS))
    check_latency = F.when(F.col("event") == "transaction_check", F.col("latency_ms"))
    daily = rows.groupBy("topic", "dt").agg(
        count_of("transaction_half").alias("halves"),
        count_of("transaction_commit").alias("commits"),
        count_of("transaction_rollback").alias("rollbacks"),
        *(_ended(end, who) for end in ("commit", "rollback") for who in ENDERS),
        count_of("transaction_abandoned").alias("abandoned"),
        count_of("transaction_check").alias("checks"),
        *percentiles(check_latency, "check_latency"),
    )
    return conform(daily, transaction_daily_schema())


def _ended(end: str, who: str) -> Column:
    ended = (F.col("event") == f"transaction_{end}") & (F.col("by") == who)
    return F.sum(F.when(ended, 1).otherwise(0)).alias(f"{end}s_by_{who}")
