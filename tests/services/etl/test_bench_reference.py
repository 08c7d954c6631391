"""`petrel bench etl`'s reference computes the job's figures: DuckDB's tables equal ours on a generated day.

The bench compares the job's speed with DuckDB's on the same files; that is only
fair if both compute the same thing. One small generated day (bench.etl_events),
with the story set's edge cases, corrupt lines, push attempts (tests.support.push_events)
and audit events (tests.support.audit_events) on top, goes through the job and through
bench.etl_reference: every count, every hour's lag and oldest unacked age (the stalled
hours' rows too), every invariant, every journey, every push hour, every audit row (its
top lists too) and every quarantined line are the same (percentiles are two different
sketches' approximations: left out). Neither reads a CommitLog, as in the bench.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from bench.etl_events import DAY, cached_day
from bench.etl_reference import TABLES, connect, daily_figures
from services.etl.job import run_daily
from services.etl.journey import GROUP_EVENTS
from services.etl.quality import INVARIANTS
from services.etl.settings import EtlSettings
from tests.support.audit_events import write_audits_22nd
from tests.support.event_files import write_november_22
from tests.support.push_events import write_pushes_22nd

LINES = 3_000
PERCENTILE = re.compile(r"_p\d+_ms$")
"""Percentile columns: `delivery_p50_ms`, `lateness_p99_ms`, ..."""
COMPARED_APART = {"quarantine": ["source_file"]}
"""The job names a file by its URI, DuckDB by its path."""


@pytest.fixture(scope="module")
def both(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, dict[str, int], dict[str, int]]:
    generated = cached_day(tmp_path_factory.mktemp("bench-days"), LINES, seed=3)
    write_november_22(generated.events)
    write_pushes_22nd(generated.events)  # the generated day has none
    write_audits_22nd(generated.events)  # nor these
    ours = tmp_path_factory.mktemp("ours")
    settings = EtlSettings(
        events_uri=generated.events.as_uri(), warehouse_uri=ours.as_uri(), lookback_days=1, commitlog_uris=""
    )
    ours_rows = run_daily(spark, settings, DAY).tables
    theirs = tmp_path_factory.mktemp("duckdb") / "warehouse"
    theirs_rows = daily_figures(connect(threads=1), generated.events, theirs, DAY)
    return ours, theirs, ours_rows, theirs_rows


def _compared(spark: SparkSession, warehouse: Path, table: str) -> DataFrame:
    frame = spark.read.parquet(str(warehouse / table))
    kept = [c for c in frame.columns if not PERCENTILE.search(c) and c not in COMPARED_APART.get(table, [])]
    return frame.select(*kept)


def test_duckdb_writes_as_many_rows_to_each_table_as_the_job(
    both: tuple[Path, Path, dict[str, int], dict[str, int]],
) -> None:
    _, _, ours_rows, theirs_rows = both

    assert ours_rows == theirs_rows  # no commitlog_daily either: neither read a CommitLog
    assert theirs_rows["quarantine"] >= 4  # the story set's corrupt lines at least
    assert theirs_rows["push_hourly"] == 5  # tests.support.push_events' hours
    assert theirs_rows["audit_daily"] == 8  # tests.support.audit_events' rows


@pytest.mark.parametrize("table", TABLES)
def test_duckdb_computes_the_same_rows_as_the_job(
    spark: SparkSession, both: tuple[Path, Path, dict[str, int], dict[str, int]], table: str
) -> None:
    ours, theirs, _, _ = both

    assertDataFrameEqual(_compared(spark, theirs, table), _compared(spark, ours, table))


def test_the_day_compared_has_stalled_hours_and_broken_invariants(
    spark: SparkSession, both: tuple[Path, Path, dict[str, int], dict[str, int]]
) -> None:
    ours, _, _, _ = both
    no_events = " + ".join(GROUP_EVENTS) + " = 0"

    stalled = spark.read.parquet(str(ours / "group_hourly")).where(f"lag_end > 0 AND {no_events}")
    broken = spark.read.parquet(str(ours / "data_quality")).where("measure = 'invariant' AND count > 0")

    assert stalled.count() > 0  # hours with lag and no events: rows only the lag makes
    assert sorted(row["detail"] for row in broken.collect()) == sorted(INVARIANTS)
