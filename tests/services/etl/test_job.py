"""The daily job into a warehouse: reruns replace exactly their day, late events, the quarantine, an empty day."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from services.etl.job import DailyRun, run_daily
from services.etl.settings import EtlSettings
from tests.support.event_files import DAY

TABLES = ["topic_hourly", "group_hourly", "delay_daily", "transaction_daily", "message_journey", "data_quality"]
D = date.fromisoformat(DAY)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def settings(story_events: Path, warehouse: Path) -> EtlSettings:
    return EtlSettings(events_uri=story_events.as_uri(), warehouse_uri=warehouse.as_uri(), lookback_days=1)


@pytest.fixture(scope="module")
def first_runs(spark: SparkSession, settings: EtlSettings) -> dict[str, DailyRun]:
    """The 21st, then the 22nd."""
    return {day: run_daily(spark, settings, date.fromisoformat(day)) for day in ("2026-11-21", DAY)}


def files(partition: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in partition.iterdir()}


def test_a_rerun_writes_the_same_rows_and_leaves_other_days_alone(
    spark: SparkSession, settings: EtlSettings, warehouse: Path, first_runs: dict[str, DailyRun]
) -> None:
    before = {table: spark.read.parquet(str(warehouse / table)).collect() for table in TABLES}
    the_21st = files(warehouse / "topic_hourly" / "dt=2026-11-21")

    again = run_daily(spark, settings, D)

    assert again.tables == first_runs[DAY].tables
    for table in TABLES:
        assertDataFrameEqual(spark.read.parquet(str(warehouse / table)), before[table])
    assert files(warehouse / "topic_hourly" / "dt=2026-11-21") == the_21st
    assert sorted(p.name for p in (warehouse / "topic_hourly").glob("dt=*")) == ["dt=2026-11-21", f"dt={DAY}"]


def test_the_late_send_counts_in_its_own_day_not_in_the_folders(
    spark: SparkSession, settings: EtlSettings, warehouse: Path, first_runs: dict[str, DailyRun]
) -> None:
    the_23rd = run_daily(spark, settings, date(2026, 11, 23))

    hours = spark.read.parquet(str(warehouse / "topic_hourly")).where("hour >= '2026-11-22 23:00'")
    assert [(str(r.dt), r.hour.hour, r.sent) for r in hours.collect()] == [(DAY, 23, 1)]  # dt: read back as a date
    assert (the_23rd.lines_read, the_23rd.events) == (2, 1)  # the late send and m4's delivery; the delivery


def test_corrupt_lines_are_quarantined_with_their_text_and_counted(
    spark: SparkSession, warehouse: Path, first_runs: dict[str, DailyRun]
) -> None:
    quarantine = spark.read.parquet(str(warehouse / "quarantine" / f"dt={DAY}"))
    assert sorted(r.reason for r in quarantine.collect()) == [
        "malformed_json",
        "missing_field",
        "unknown_event",
        "wrong_type",
    ]
    run = first_runs[DAY]
    assert (run.lines_read, run.events, run.quarantined) == (31, 28, 4)


def test_an_empty_day_writes_empty_tables_and_deletes_what_a_run_before_left(
    spark: SparkSession, settings: EtlSettings, warehouse: Path, first_runs: dict[str, DailyRun]
) -> None:
    stale = warehouse / "topic_hourly" / "dt=2026-11-25"
    stale.mkdir()
    (stale / "part-0.parquet").write_bytes(b"")

    run = run_daily(spark, settings, date(2026, 11, 25))

    assert run.tables == dict.fromkeys(run.tables, 0) | {"data_quality": 7}
    assert (run.lines_read, run.events, run.quarantined) == (0, 0, 0)
    assert not stale.exists()
    assert (warehouse / "topic_hourly" / f"dt={DAY}").is_dir()
