"""commitlog_daily: the messages the brokers' CommitLogs stored on D per topic, next to what the events say was sent.

What counts as stored: each message (its id, `UNIQ_KEY`) once, under its own topic, on
the day of its first record in the CommitLogs read (by `store_timestamp`, UTC). A
message is stored more than once, and only the first copy counts:

- a scheduled message is first stored under `SCHEDULE_TOPIC_XXXX` or the timer's topic
  and again under its own when it is due: it counts when it was scheduled, under its
  `REAL_TOPIC`, as its `sent` event does;
- a transaction's half message is stored under `RMQ_SYS_TRANS_HALF_TOPIC` (again at each
  check-back) and, committed, under its own topic: it counts when its half was stored,
  under its `REAL_TOPIC`, as its `transaction_half` event does, rolled back or not;
- retries (`%RETRY%<group>`), dead letters (`%DLQ%<group>`) and a redrive are copies of a
  message already counted; the transactions' op and check-limit topics hold no messages
  of a user.

`stored`, `bytes_stored`: those messages and the sum of their body sizes. `sent_events`:
topic_hourly's `sent` + `transactional` summed over D; `bytes_sent_events`: its
`bytes_sent`, the sends' `size`, which is the whole encoded record (header, topic,
properties and body), so it is larger than `bytes_stored` and not compared. `matches`:
stored == sent_events. A topic that does not match is also a data_quality row
(`reconciliation`, the topic, |stored - sent_events|).

Both sides must cover the same ground: give every broker's CommitLog (a topic spread
over two brokers read from one shows half its messages), and a CommitLog whose
retention deleted D's segments has nothing of D left to count.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from libs.message import Prop
from libs.names import DLQ_PREFIX, RETRY_PREFIX, SCHEDULE_TOPICS, SYSTEM_TOPICS, TRANS_HALF_TOPIC
from services.etl.commitlog_source import SHORT_NAME, register_commitlog_source
from services.etl.frames import conform, schema
from services.etl.traffic import topic_hourly

Reconciled = tuple[dt.date, str, int, int, int, int, bool]
"""A row of commitlog_daily, collected: dt, topic, stored, bytes_stored, sent_events, bytes_sent_events, matches."""


def commitlog_daily_schema() -> StructType:
    return schema(
        "topic STRING, stored BIGINT, bytes_stored BIGINT, sent_events BIGINT, bytes_sent_events BIGINT, "
        "matches BOOLEAN"
    )


def reconcile(spark: SparkSession, commitlogs: Sequence[str], window: DataFrame, day: dt.date) -> list[Reconciled]:
    """commitlog_daily's rows for D, collected once (a row a topic): the table and data_quality both use them."""
    stored = first_stored(spark, commitlogs).where(F.to_date("stored_at") == F.lit(day))
    stored = stored.groupBy("topic").agg(
        F.count(F.lit(1)).alias("stored"), F.sum("body_size").cast("bigint").alias("bytes_stored")
    )
    sent = (
        topic_hourly(window)
        .groupBy("topic")
        .agg(
            (F.sum("sent") + F.sum("transactional")).alias("sent_events"),
            F.sum("bytes_sent").alias("bytes_sent_events"),
        )
    )
    both = stored.join(sent, "topic", "full").fillna(0, ["stored", "bytes_stored", "sent_events", "bytes_sent_events"])
    both = both.withColumn("matches", F.col("stored") == F.col("sent_events"))
    rows = both.orderBy("topic").collect()
    return [(day, r.topic, r.stored, r.bytes_stored, r.sent_events, r.bytes_sent_events, r.matches) for r in rows]


def commitlog_daily(spark: SparkSession, rows: list[Reconciled]) -> DataFrame:
    frame = spark.createDataFrame([(*row[1:], row[0].isoformat()) for row in rows], commitlog_daily_schema())
    return conform(frame, commitlog_daily_schema())


def mismatches(rows: list[Reconciled]) -> list[tuple[str, str | None, int]]:
    """data_quality's `reconciliation` rows: each topic whose counts differ, by how many."""
    return [("reconciliation", topic, abs(stored - sent)) for _, topic, stored, _, sent, _, ok in rows if not ok]


def first_stored(spark: SparkSession, commitlogs: Sequence[str]) -> DataFrame:
    """message_id -> topic (its own), stored_at, body_size of its first record in the CommitLogs (see above)."""
    register_commitlog_source(spark)
    logs = [spark.read.format(SHORT_NAME).load(uri) for uri in commitlogs]
    records = reduce(DataFrame.unionByName, logs).where(F.col("message_id").isNotNull())
    records = records.select("message_id", _own_topic().alias("topic"), "store_timestamp", "body_size")
    records = records.where(F.col("topic").isNotNull())
    first = F.min_by(F.struct("topic", "store_timestamp", "body_size"), "store_timestamp")
    earliest = records.groupBy("message_id").agg(first.alias("first"))
    return earliest.select(
        "message_id", "first.topic", F.col("first.store_timestamp").alias("stored_at"), "first.body_size"
    )


def _own_topic() -> Column:
    """The user topic a record is a copy of a message of; null for copies that do not count (see above)."""
    topic = F.col("topic")
    kept_for_later = topic.isin(*SCHEDULE_TOPICS, TRANS_HALF_TOPIC)
    not_counted = topic.isin(*SYSTEM_TOPICS) | topic.startswith(RETRY_PREFIX) | topic.startswith(DLQ_PREFIX)
    return F.when(kept_for_later, F.col("properties").getItem(Prop.REAL_TOPIC)).when(~not_counted, topic)
