"""Each table of 2026-11-22's stories (tests.support.event_files), row for row."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from services.etl.delays import delay_daily, delay_daily_schema
from services.etl.events import EventLog
from services.etl.journey import message_journey, message_journey_schema
from services.etl.quality import data_quality, data_quality_schema
from services.etl.traffic import group_hourly, group_hourly_schema, topic_hourly, topic_hourly_schema
from services.etl.transactions import transaction_daily, transaction_daily_schema

D = "2026-11-22"


def t(clock: str, day: str = D) -> datetime:
    return datetime.fromisoformat(f"{day} {clock}")


def test_topic_hourly_counts_sends_bytes_delays_and_halves(spark: SparkSession, story_log: EventLog) -> None:
    expected = [
        ("payments", t("09:00"), 0, 0, 0, 2, D),
        ("orders", t("10:00"), 2, 150, 0, 0, D),
        ("orders", t("11:00"), 1, 30, 1, 0, D),
        ("orders", t("13:00"), 1, 20, 1, 0, D),
        ("orders", t("23:00"), 1, 10, 0, 0, D),
    ]
    actual = topic_hourly(story_log.window)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, topic_hourly_schema()))


def test_group_hourly_counts_each_groups_events_and_latencies(spark: SparkSession, story_log: EventLog) -> None:
    expected = [
        # group topic hour: delivered acked nacked retried dead_lettered redriven, delivery p50-p99, ack p50-p99
        ("g1", "payments", t("09:00"), 1, 1, 0, 0, 0, 0, 2000, 2000, 2000, 3000, 3000, 3000, D),
        ("g1", "orders", t("10:00"), 3, 1, 1, 1, 1, 0, 1000, 2000, 2000, 3000, 3000, 3000, D),
        ("g2", "orders", t("10:00"), 1, 1, 0, 0, 0, 0, 4000, 4000, 4000, 5000, 5000, 5000, D),
        ("g1", "orders", t("12:00"), 1, 1, 0, 0, 0, 0, 1000, 1000, 1000, 2000, 2000, 2000, D),
    ]
    actual = group_hourly(story_log.window)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, group_hourly_schema()))


def test_message_journey_follows_each_message_per_group(spark: SparkSession, story_log: EventLog) -> None:
    expected = [
        ("m1", "orders", "g1", t("10:05"), None, t("10:05:01"), t("10:05:03"), None, 1, "acked", D),
        ("m2", "orders", "g1", t("10:10"), None, t("10:10:02"), None, t("10:20:01"), 2, "dead_lettered", D),
        ("m2", "orders", "g2", t("10:10"), None, t("10:10:04"), t("10:10:05"), None, 1, "acked", D),
        ("m3", "orders", "g1", t("11:30"), t("12:00"), t("12:00:01"), t("12:00:02"), None, 1, "acked", D),
        ("m4", "orders", "g1", t("23:59:30"), None, t("00:00:10", "2026-11-23"), None, None, 1, "in_flight", D),
        ("m5", "orders", None, t("13:00"), t("15:00"), None, None, None, 0, "not_delivered", D),
        ("t1", "payments", "g1", t("09:00"), None, t("09:00:02"), t("09:00:03"), None, 1, "acked", D),
        ("t2", "payments", None, t("09:30"), None, None, None, None, 0, "rolled_back", D),
    ]
    actual = message_journey(story_log.window)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, message_journey_schema()))


def test_delay_daily_counts_what_became_of_scheduled_messages(spark: SparkSession, story_log: EventLog) -> None:
    expected = [
        ("orders", 2, 1, 1, 0, 0, 0, 500, 500, 500, D),
        (None, 0, 0, 0, 1, 0, 0, None, None, None, D),
    ]
    actual = delay_daily(story_log.window)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, delay_daily_schema()))


def test_transaction_daily_says_who_ended_each_transaction(spark: SparkSession, story_log: EventLog) -> None:
    expected = [("payments", 2, 1, 1, 1, 0, 0, 1, 0, 1, 40, 40, 40, D)]
    actual = transaction_daily(story_log.window)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, transaction_daily_schema()))


def test_data_quality_counts_lines_events_late_ones_and_each_quarantine_reason(
    spark: SparkSession, story_log: EventLog
) -> None:
    expected = [
        ("lines_read", None, 31, D),
        ("events", None, 28, D),
        ("late_events", None, 1, D),
        ("quarantined", "malformed_json", 1, D),
        ("quarantined", "wrong_type", 1, D),
        ("quarantined", "unknown_event", 1, D),
        ("quarantined", "missing_field", 1, D),
    ]
    actual = data_quality(spark, story_log)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, data_quality_schema()))


def test_quarantine_keeps_each_bad_line_with_its_reason_and_file(story_log: EventLog) -> None:
    rows = story_log.quarantine.select("raw", "reason", "detail", "dt").collect()
    assert sorted(rows, key=lambda r: r.reason) == [
        Row(raw="{not json", reason="malformed_json", detail=None, dt=D),
        Row(raw=rows_raw(rows, "missing_field"), reason="missing_field", detail="missing message_id", dt=D),
        Row(raw=rows_raw(rows, "unknown_event"), reason="unknown_event", detail="event exploded", dt=D),
        Row(raw=rows_raw(rows, "wrong_type"), reason="wrong_type", detail=None, dt=D),
    ]
    files = {row.source_file for row in story_log.quarantine.select("source_file").collect()}
    assert [f.endswith(f"/dt={D}/hour=10/test-7.jsonl") for f in files] == [True]


def rows_raw(rows: list[Row], reason: str) -> str:
    return str(next(row.raw for row in rows if row.reason == reason))
