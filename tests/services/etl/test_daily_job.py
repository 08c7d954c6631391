"""The daily job on 2026-11-22's stories (tests.support.event_files): each table row for row as written, the late
send, the quarantine, an empty day (a rerun replacing exactly its day: test_cli.py, through `petrel etl daily`).

The nightly task's real run is here too: it submits the 22nd's job to a standalone cluster and its rows are
compared with the story's. The files of tests/services/etl run on one worker (tests.support.scheduling), so the
Spark session and the story's runs (session fixtures) are made once.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import redis
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual

from services.etl.delays import delay_daily_schema
from services.etl.events import read_event_log
from services.etl.frames import schema
from services.etl.job import DailyRun, run_daily, tables
from services.etl.journey import message_journey_schema
from services.etl.nightly import NIGHTLY_TASK, create_celery
from services.etl.quality import data_quality_schema
from services.etl.settings import EtlSettings
from services.etl.traffic import group_hourly_schema, topic_hourly_schema
from services.etl.transactions import transaction_daily_schema
from tests.support.clock import FakeClock
from tests.support.event_files import DAY, at
from tests.support.spark import spark_test_env
from tests.support.spark_standalone import standalone_cluster

D = DAY
NEXT_DAY = "2026-11-23"
HOUR = 3_600_000
REDIS_URL = "redis://127.0.0.1:6379/0"
FIVE_PAST_MIDNIGHT_ON_THE_23RD = datetime(2026, 11, 23, 0, 5, tzinfo=UTC).timestamp()


@pytest.fixture
def written(spark: SparkSession, warehouse: Path, story_runs: dict[str, DailyRun]) -> Written:
    return Written(spark, warehouse)


class Written:
    """D's rows of a table the job wrote, read back with the table's own schema."""

    def __init__(self, spark: SparkSession, warehouse: Path) -> None:
        self.spark, self.warehouse = spark, warehouse

    def table(self, name: str, schema: StructType) -> DataFrame:
        return self.spark.read.schema(schema).parquet(str(self.warehouse / name)).where(f"dt = '{D}'")


def t(clock: str, day: str = D) -> datetime:
    return datetime.fromisoformat(f"{day} {clock}")


def test_topic_hourly_counts_sends_bytes_delays_and_halves(spark: SparkSession, written: Written) -> None:
    expected = [
        ("payments", t("09:00"), 0, 0, 0, 2, D),
        ("orders", t("10:00"), 2, 150, 0, 0, D),
        ("orders", t("11:00"), 1, 30, 1, 0, D),
        ("orders", t("13:00"), 1, 20, 1, 0, D),
        ("orders", t("16:00"), 1, 60, 0, 0, D),
        ("orders", t("20:00"), 1, 40, 0, 0, D),
        ("orders", t("23:00"), 1, 10, 0, 0, D),
    ]
    actual = written.table("topic_hourly", topic_hourly_schema())
    assertDataFrameEqual(actual, spark.createDataFrame(expected, topic_hourly_schema()))


def test_group_hourly_counts_each_groups_events_and_latencies(spark: SparkSession, written: Written) -> None:
    n = None
    expected = [
        # group topic hour: delivered acked nacked retried dead_lettered redriven, delivery p50-p99, ack p50-p99,
        # lag_end oldest_unacked_age_ms
        ("g1", "payments", t("09:00"), 1, 1, 0, 0, 0, 0, 2000, 2000, 2000, 3000, 3000, 3000, 0, n, D),
        ("g3", "payments", t("09:00"), 1, 0, 0, 0, 0, 0, 120_000, 120_000, 120_000, n, n, n, 0, n, D),  # rolled back
        ("g1", "orders", t("10:00"), 3, 1, 1, 1, 1, 0, 1000, 2000, 2000, 3000, 3000, 3000, 0, n, D),
        ("g2", "orders", t("10:00"), 1, 1, 0, 0, 0, 0, 4000, 4000, 4000, 5000, 5000, 5000, 0, n, D),
        ("g1", "orders", t("12:00"), 1, 1, 0, 0, 0, 0, 1000, 1000, 1000, 2000, 2000, 2000, 0, n, D),
        ("g2", "orders", t("15:00"), 0, 1, 0, 0, 0, 0, n, n, n, n, n, n, 0, n, D),  # m7: no send, no latency
        ("g3", "orders", t("16:00"), 1, 0, 0, 0, 1, 0, 1000, 1000, 1000, n, n, n, 0, n, D),
        ("g3", "orders", t("17:00"), 0, 0, 0, 0, 0, 1, n, n, n, n, n, n, 1, HOUR * 2, D),  # m8 waits again
        ("g3", "orders", t("18:00"), 0, 0, 0, 0, 0, 0, n, n, n, n, n, n, 1, HOUR * 3, D),
        ("g3", "orders", t("19:00"), 0, 0, 0, 0, 0, 0, n, n, n, n, n, n, 1, HOUR * 4, D),
        ("g3", "orders", t("20:00"), 1, 0, 0, 0, 0, 0, 60_000, 60_000, 60_000, n, n, n, 2, HOUR * 5, D),  # m6 too
        ("g3", "orders", t("21:00"), 0, 0, 0, 0, 0, 0, n, n, n, n, n, n, 2, HOUR * 6, D),
        ("g3", "orders", t("22:00"), 0, 0, 0, 0, 0, 0, n, n, n, n, n, n, 2, HOUR * 7, D),
        ("g3", "orders", t("23:00"), 0, 0, 0, 0, 0, 0, n, n, n, n, n, n, 2, HOUR * 8, D),
        ("g1", "orders", t("23:00"), 0, 0, 0, 0, 0, 0, n, n, n, n, n, n, 1, 30_000, D),  # m4, sent 23:59:30
    ]
    actual = written.table("group_hourly", group_hourly_schema())
    assertDataFrameEqual(actual, spark.createDataFrame(expected, group_hourly_schema()))


def test_a_group_that_stalled_shows_its_lag_every_hour_of_the_next_day(
    spark: SparkSession, warehouse: Path, story_runs: dict[str, DailyRun]
) -> None:
    n = None
    stalled = [  # g3: m8 waits since 16:00 on the 22nd, m6 since 20:30; g1: m4 since 23:59:30, delivered at 00:00:10
        ("g3", "orders", t(f"{h:02}:00", NEXT_DAY), 0, 0, 0, 0, 0, 0, n, n, n, n, n, n, 2, HOUR * (9 + h), NEXT_DAY)
        for h in range(24)
    ] + [
        ("g1", "orders", t(f"{h:02}:00", NEXT_DAY), *([1] if h == 0 else [0]), 0, 0, 0, 0, 0)
        + ((40_000, 40_000, 40_000) if h == 0 else (n, n, n))
        + (n, n, n, 1, HOUR * (h + 1) + 30_000, NEXT_DAY)
        for h in range(24)
    ]
    table = spark.read.schema(group_hourly_schema()).parquet(str(warehouse / "group_hourly"))
    assertDataFrameEqual(table.where(f"dt = '{NEXT_DAY}'"), spark.createDataFrame(stalled, group_hourly_schema()))


def test_a_day_not_over_has_lag_only_up_to_the_hour_the_job_runs_in(
    spark: SparkSession, story_settings: EtlSettings
) -> None:
    event_log = read_event_log(spark, story_settings.events, date.fromisoformat(D), story_settings.lookback_days)
    at_half_past_six = tables(spark, event_log, now_ms=at(f"{D} 18:30"))["group_hourly"]()

    lagging = at_half_past_six.where("lag_end > 0").select("group", "hour", "lag_end", "oldest_unacked_age_ms")
    half_an_hour = HOUR // 2  # m8 has waited since 16:00: 2 h at 18:00, 2.5 h at 18:30
    assert sorted(lagging.collect()) == [
        ("g3", t("17:00"), 1, HOUR * 2),
        ("g3", t("18:00"), 1, HOUR * 2 + half_an_hour),
    ]
    event_log.release()


def test_message_journey_follows_each_message_per_group(spark: SparkSession, written: Written) -> None:
    expected = [
        ("m1", "orders", "g1", t("10:05"), None, t("10:05:01"), t("10:05:03"), None, 1, "acked", D),
        ("m2", "orders", "g1", t("10:10"), None, t("10:10:02"), None, t("10:20:01"), 2, "dead_lettered", D),
        ("m2", "orders", "g2", t("10:10"), None, t("10:10:04"), t("10:10:05"), None, 1, "acked", D),
        ("m3", "orders", "g1", t("11:30"), t("12:00"), t("12:00:01"), t("12:00:02"), None, 1, "acked", D),
        ("m4", "orders", "g1", t("23:59:30"), None, t("00:00:10", "2026-11-23"), None, None, 1, "in_flight", D),
        ("m5", "orders", None, t("13:00"), t("15:00"), None, None, None, 0, "not_delivered", D),
        ("m6", "orders", "g3", t("20:30"), None, t("20:31"), None, None, 1, "in_flight", D),
        ("m8", "orders", "g3", t("16:00"), None, t("16:00:01"), None, t("16:00:02"), 1, "redriven", D),
        ("t1", "payments", "g1", t("09:00"), None, t("09:00:02"), t("09:00:03"), None, 1, "acked", D),
        ("t2", "payments", "g3", t("09:30"), None, t("09:32"), None, None, 1, "in_flight", D),  # delivered anyway
    ]
    actual = written.table("message_journey", message_journey_schema())
    assertDataFrameEqual(actual, spark.createDataFrame(expected, message_journey_schema()))


def test_delay_daily_counts_what_became_of_scheduled_messages(spark: SparkSession, written: Written) -> None:
    expected = [
        ("orders", 2, 1, 1, 0, 0, 0, 500, 500, 500, D),
        (None, 0, 0, 0, 1, 0, 0, None, None, None, D),
    ]
    actual = written.table("delay_daily", delay_daily_schema())
    assertDataFrameEqual(actual, spark.createDataFrame(expected, delay_daily_schema()))


def test_transaction_daily_says_who_ended_each_transaction(spark: SparkSession, written: Written) -> None:
    expected = [("payments", 2, 1, 1, 1, 0, 0, 1, 0, 1, 40, 40, 40, D)]
    actual = written.table("transaction_daily", transaction_daily_schema())
    assertDataFrameEqual(actual, spark.createDataFrame(expected, transaction_daily_schema()))


def test_data_quality_counts_lines_events_late_ones_quarantine_reasons_and_broken_invariants(
    spark: SparkSession, written: Written
) -> None:
    expected = [
        ("lines_read", None, 39, D),
        ("events", None, 36, D),
        ("late_events", None, 1, D),
        ("quarantined", "malformed_json", 1, D),
        ("quarantined", "wrong_type", 1, D),
        ("quarantined", "unknown_event", 1, D),
        ("quarantined", "missing_field", 1, D),
        ("invariant", "rolled_back_delivered", 1, D),  # t2 to g3
        ("invariant", "ack_without_send", 1, D),  # m7 by g2
        ("invariant", "dlq_without_reason", 1, D),  # m8 by g3
    ]
    actual = written.table("data_quality", data_quality_schema())
    assertDataFrameEqual(actual, spark.createDataFrame(expected, data_quality_schema()))


def test_quarantine_keeps_each_bad_line_with_its_reason_and_file(written: Written) -> None:
    quarantine = written.table("quarantine", quarantine_schema())
    rows = quarantine.select("raw", "reason", "detail", "dt").collect()
    assert sorted(rows, key=lambda r: r.reason) == [
        Row(raw="{not json", reason="malformed_json", detail=None, dt=D),
        Row(raw=rows_raw(rows, "missing_field"), reason="missing_field", detail="missing message_id", dt=D),
        Row(raw=rows_raw(rows, "unknown_event"), reason="unknown_event", detail="event exploded", dt=D),
        Row(raw=rows_raw(rows, "wrong_type"), reason="wrong_type", detail=None, dt=D),
    ]
    files = {row.source_file for row in quarantine.select("source_file").collect()}
    assert [f.endswith(f"/dt={D}/hour=10/test-7.jsonl") for f in files] == [True]


def quarantine_schema() -> StructType:
    return schema("raw STRING, reason STRING, detail STRING, source_file STRING")


def rows_raw(rows: list[Row], reason: str) -> str:
    return str(next(row.raw for row in rows if row.reason == reason))


TABLES = ["topic_hourly", "group_hourly", "delay_daily", "transaction_daily", "message_journey", "data_quality"]


def test_the_late_send_counts_in_its_own_day_not_in_its_folders(
    spark: SparkSession, warehouse: Path, story_runs: dict[str, DailyRun]
) -> None:
    hours = spark.read.parquet(str(warehouse / "topic_hourly")).where("hour >= '2026-11-22 23:00'")
    dt_hour_sent = [(str(r.dt), r.hour.hour, r.sent) for r in hours.collect()]  # dt: read back as a date
    assert dt_hour_sent == [(DAY, 23, 1)]
    the_23rd = story_runs[NEXT_DAY]
    assert (the_23rd.lines_read, the_23rd.events) == (2, 1)  # the late send and m4's delivery; the delivery
    assert the_23rd.tables["topic_hourly"] == 0


def test_corrupt_lines_are_counted_in_the_summary(story_runs: dict[str, DailyRun]) -> None:
    run = story_runs[DAY]
    assert (run.lines_read, run.events, run.quarantined) == (39, 36, 4)
    assert run.tables["quarantine"] == 4


def test_an_empty_day_writes_empty_tables_and_deletes_what_a_run_before_left(
    spark: SparkSession, story_settings: EtlSettings, warehouse: Path, story_runs: dict[str, DailyRun]
) -> None:
    stale = warehouse / "topic_hourly" / "dt=2026-11-25"
    stale.mkdir()
    (stale / "part-0.parquet").write_bytes(b"")

    run = run_daily(spark, story_settings, date(2026, 11, 25))

    assert run.tables == dict.fromkeys(run.tables, 0) | {"data_quality": 10}
    assert (run.lines_read, run.events, run.quarantined) == (0, 0, 0)
    assert not stale.exists()
    assert (warehouse / "topic_hourly" / f"dt={DAY}").is_dir()


@pytest.mark.e2e
@pytest.mark.timeout(540)  # 1.5 min on an idle machine; the run's own time limit (420 s) stops it first
def test_the_nightly_task_submits_yesterdays_job_to_a_standalone_cluster_and_writes_the_same_rows_as_local(
    spark: SparkSession,
    story_settings: EtlSettings,
    warehouse: Path,
    story_runs: dict[str, DailyRun],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two promises in one Spark run (each JVM costs the suite a minute): the nightly Celery task runs `petrel etl
    daily` for yesterday in a process of its own and relays its summary, and a job submitted to a standalone
    master writes row for row what the local session wrote."""
    caplog.set_level(logging.INFO, logger="petrel.etl.nightly")
    on_cluster = tmp_path / "cluster-warehouse"
    client = redis.Redis.from_url(REDIS_URL)
    prefix = f"petrel-test:etl:{uuid.uuid4().hex[:12]}:"
    try:
        with standalone_cluster(tmp_path) as cluster:
            settings = story_settings.model_copy(
                update={
                    "data_dir": tmp_path,
                    "redis_url": REDIS_URL,
                    "redis_key_prefix": prefix,
                    "warehouse_uri": on_cluster.as_uri(),
                    "master": cluster.master_url,
                    "nightly_time_limit_seconds": 420,
                }
            )
            for name, value in {"SPARK_HOME": str(cluster.spark_home), **spark_test_env()}.items():
                monkeypatch.setenv(name, value)
            app = create_celery(settings, clock=FakeClock(FIVE_PAST_MIDNIGHT_ON_THE_23RD))
            status = app.tasks[NIGHTLY_TASK].apply().get()
            master_log = cluster.master_log()
    finally:
        keys = list(client.scan_iter(match=prefix + "*"))
        if keys:
            client.delete(*keys)
        client.close()

    assert status == 0, caplog.text[-6000:]
    job_lines = "\n".join(r.getMessage().removeprefix("| ") for r in caplog.records if r.getMessage().startswith("| "))
    assert f"petrel etl daily {D}: done in " in job_lines, "the job's summary is not in the nightly log"
    assert f"nightly run of {D} done" in caplog.text
    assert "Registering app petrel-etl" in master_log, "the job did not run on the standalone master"
    assert sorted(p.name for p in (on_cluster / "topic_hourly").iterdir() if p.is_dir()) == [f"dt={D}"]
    for table in [*TABLES, "quarantine"]:
        assertDataFrameEqual(
            spark.read.parquet(str(on_cluster / table)).where(f"dt = '{D}'"),
            spark.read.parquet(str(warehouse / table)).where(f"dt = '{D}'"),
        )
