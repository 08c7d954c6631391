"""`petrel etl daily` end to end on local[2] (in this process's shared session): its summary, its Parquet tables, a
rerun replacing exactly its day; the spark-submit command a cluster master gets."""

from __future__ import annotations

import subprocess
import sys
from datetime import date
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from deploy.cli import main
from services.etl import job as job_module
from services.etl.job import DailyRun
from services.etl.settings import EtlSettings
from services.etl.submit import submit_command
from tests.support.event_files import DAY

NEXT_DAY = "2026-11-23"  # story_runs' other day


TABLES = ["topic_hourly", "group_hourly", "delay_daily", "transaction_daily", "message_journey", "data_quality"]


def files(partition: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in partition.iterdir()}


def days(warehouse: Path) -> list[str]:
    return sorted(p.name for p in (warehouse / "data_quality").glob("dt=*"))


def test_petrel_etl_daily_reruns_a_day_in_place_and_sums_up(
    spark: SparkSession,
    story_settings: EtlSettings,
    warehouse: Path,
    story_runs: dict[str, DailyRun],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The 22nd again, into the story's warehouse (the 22nd and 23rd written by story_runs): the command's summary,
    the same rows, the other day's files untouched. (Was two tests, each running the 22nd once more: this one into
    a warehouse of its own, test_daily_job's rerun test by `run_daily`.)"""
    before = {table: spark.read.parquet(str(warehouse / table)).collect() for table in TABLES}
    next_day = files(warehouse / "data_quality" / f"dt={NEXT_DAY}")
    days_before = days(warehouse)  # the 22nd, the 23rd, and any day another test of this worker wrote
    monkeypatch.setenv("PETREL_ETL_SHUFFLE_PARTITIONS", "2")
    argv = ["etl", "daily", "--date", DAY, "--events", story_settings.events, "--warehouse", story_settings.warehouse]

    with pytest.raises(SystemExit) as exited:
        main([*argv, "--master", "local[2]", "--lookback-days", "1"])

    assert exited.value.code == 0
    summary = capsys.readouterr().out.splitlines()
    assert summary[0].startswith(f"petrel etl daily {DAY}: done in ")
    assert summary[1:] == [
        "  lines read           39",
        "  events in            36",
        "  quarantined           4",
        f"tables written under {story_settings.warehouse}:",
        "  topic_hourly                7 rows",
        "  group_hourly               15 rows",
        "  delay_daily                 2 rows",
        "  transaction_daily           1 rows",
        "  message_journey            10 rows",
        "  push_hourly                 0 rows",
        "  audit_daily                 0 rows",
        "  data_quality               10 rows",
        "  quarantine                  4 rows",
        f"report: {story_settings.warehouse}/reports/dt={DAY}/index.html",
    ]
    rows = {line.split()[0]: int(line.split()[1]) for line in summary[5:-1]}
    assert rows == story_runs[DAY].tables, "the rerun counted other rows than the first run"
    for table in ("topic_hourly", "group_hourly", "message_journey", "data_quality", "quarantine"):
        assert list((warehouse / table / f"dt={DAY}").glob("*.zstd.parquet")), f"no {table} Parquet for {DAY}"
    for table in TABLES:
        assertDataFrameEqual(spark.read.parquet(str(warehouse / table)), before[table])
    assert files(warehouse / "data_quality" / f"dt={NEXT_DAY}") == next_day
    assert days(warehouse) == days_before, "the rerun added or removed a day's partition"
    assert not spark.sparkContext._jsc.sc().isStopped(), "the job stopped a session it did not start"


def test_the_petrel_command_does_not_load_pyspark_until_a_job_runs() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from deploy.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['etl', 'daily', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyspark')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_a_cluster_master_runs_the_same_job_file_through_spark_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    settings = EtlSettings(
        master="spark://127.0.0.1:7077", events_uri="hdfs:///petrel/events", warehouse_uri="hdfs:///petrel/warehouse"
    )

    command = submit_command(settings, date(2026, 11, 22))

    assert command[0] == str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    assert command[1:5] == ["--master", "spark://127.0.0.1:7077", "--deploy-mode", "client"]
    assert "spark.sql.sources.partitionOverwriteMode=dynamic" in command
    assert f"spark.pyspark.driver.python={sys.executable}" in command
    job = command.index(str(Path(job_module.__file__)))
    assert command[job + 1 :] == [
        "--date",
        "2026-11-22",
        "--events",
        "hdfs:///petrel/events",
        "--warehouse",
        "hdfs:///petrel/warehouse",
        "--master",
        "spark://127.0.0.1:7077",
        "--lookback-days",
        "1",
    ]
