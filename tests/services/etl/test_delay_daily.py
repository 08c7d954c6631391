"""delay_daily on what a live cluster writes when a group retries: the retry's backoff is not a scheduled message."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from services.etl.delays import delay_daily, delay_daily_schema

D = "2026-11-22"
WINDOW = "event STRING, topic STRING, lateness_ms BIGINT, dt STRING, in_day BOOLEAN"
"""The columns of an EventLog window delay_daily reads."""


def test_a_groups_retries_fired_from_its_retry_queue_are_not_counted_but_a_failed_one_is(spark: SparkSession) -> None:
    window = spark.createDataFrame(
        [
            ("delay_scheduled", "later", None, D, True),
            ("delay_fired", "later", 30, D, True),
            # the timer puts a nacked message back after its backoff, and once rolls a far one
            ("delay_fired", "%RETRY%billing", 40, D, True),
            ("delay_fired", "%RETRY%billing", 90, D, True),
            ("delay_rolled", "%RETRY%billing", None, D, True),
            ("delay_failed", "%RETRY%shipping", None, D, True),
            ("delay_rolled", None, None, D, True),  # the timer's own roll names no topic
        ],
        WINDOW,
    )
    expected = [
        ("later", 1, 1, 0, 0, 0, 0, 30, 30, 30, D),
        ("%RETRY%shipping", 0, 0, 0, 0, 1, 0, None, None, None, D),
        (None, 0, 0, 0, 1, 0, 0, None, None, None, D),
    ]
    assertDataFrameEqual(delay_daily(window), spark.createDataFrame(expected, delay_daily_schema()))
