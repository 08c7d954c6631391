"""`petrel etl daily` end to end on local[2] (in this process's shared session): its summary, its Parquet tables;
the spark-submit command a cluster master gets."""

from __future__ import annotations

import subprocess
import sys
from datetime import date
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from deploy.cli import main
from services.etl import job as job_module
from services.etl.settings import EtlSettings
from services.etl.submit import submit_command
from tests.support.event_files import DAY, write_november_22


def test_petrel_etl_daily_writes_the_tables_and_sums_up(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    events, warehouse = tmp_path / "events", tmp_path / "warehouse"
    write_november_22(events)
    monkeypatch.setenv("PETREL_ETL_SHUFFLE_PARTITIONS", "2")
    argv = ["etl", "daily", "--date", DAY, "--events", events.as_uri(), "--warehouse", warehouse.as_uri()]

    with pytest.raises(SystemExit) as exited:
        main([*argv, "--master", "local[2]"])

    assert exited.value.code == 0
    summary = capsys.readouterr().out.splitlines()
    assert summary[0].startswith(f"petrel etl daily {DAY}: done in ")
    assert summary[1:] == [
        "  lines read           39",
        "  events in            36",
        "  quarantined           4",
        f"tables written under {warehouse.as_uri()}:",
        "  topic_hourly                7 rows",
        "  group_hourly               15 rows",
        "  delay_daily                 2 rows",
        "  transaction_daily           1 rows",
        "  message_journey            10 rows",
        "  push_hourly                 0 rows",
        "  audit_daily                 0 rows",
        "  data_quality               10 rows",
        "  quarantine                  4 rows",
        f"report: {warehouse.as_uri()}/reports/dt={DAY}/index.html",
    ]
    for table in ("topic_hourly", "group_hourly", "message_journey", "data_quality", "quarantine"):
        assert list((warehouse / table / f"dt={DAY}").glob("*.zstd.parquet")), f"no {table} Parquet for {DAY}"
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
