"""push_hourly on the push attempts of 2026-11-22 (tests.support.push_events): each row as the job writes it,
the late attempt in its own day, a retry queue's attempt under its message's topic; the report's push section."""

from __future__ import annotations

import base64
import io
import re
from datetime import date, datetime
from pathlib import Path

import pytest
from matplotlib.image import imread
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from services.etl.job import DailyRun, run_daily
from services.etl.push import push_hourly_schema
from services.etl.report import write_report
from services.etl.settings import EtlSettings
from tests.support.event_files import DAY
from tests.support.push_events import AUDIT, AUDIT_PAYMENTS, BILLING, write_pushes_22nd
from tests.support.report_pages import IMAGE, tables_of

D = DAY
SECTION = re.compile(r"<section><h2>Push deliveries</h2>(.*?)</section>")


@pytest.fixture(scope="module")
def pushed(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DailyRun]:
    """The 22nd run over its pushes (and the 23rd's folder, which holds the late one); its warehouse."""
    events, warehouse = tmp_path_factory.mktemp("push-events"), tmp_path_factory.mktemp("push-warehouse")
    write_pushes_22nd(events)
    settings = EtlSettings(events_uri=events.as_uri(), warehouse_uri=warehouse.as_uri(), lookback_days=1)
    return warehouse, run_daily(spark, settings, date.fromisoformat(D))


def t(clock: str) -> datetime:
    return datetime.fromisoformat(f"{D} {clock}")


def test_push_hourly_counts_each_endpoints_attempts_by_outcome_status_and_latency(
    spark: SparkSession, pushed: tuple[Path, DailyRun]
) -> None:
    warehouse, run = pushed
    expected = [
        # group topic endpoint hour: attempts messages, acked deferred failed throttled gone lost, no_answer,
        # status 2xx 4xx 5xx, latency p50 p95 p99 (answered attempts only), max_delivery_attempt
        ("billing", "orders", BILLING, t("10:00"), 5, 3, 2, 1, 0, 2, 0, 0, 1, 3, 0, 1, 30, 60, 60, 1, D),
        ("audit", "orders", AUDIT, t("10:00"), 3, 1, 0, 0, 2, 0, 1, 0, 0, 0, 2, 1, 12, 15, 15, 3, D),  # retry queue's
        ("audit", "payments", AUDIT_PAYMENTS, t("10:00"), 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 7, 7, 7, 1, D),
        (
            "billing",
            "orders",
            BILLING,
            t("11:00"),
            2,
            2,
            0,
            0,
            0,
            1,
            0,
            1,
            1,
            0,
            1,
            0,
            8,
            8,
            8,
            2,
            D,
        ),  # lost: no answer
        ("billing", "orders", BILLING, t("23:00"), 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 100, 100, 100, 1, D),  # late
    ]
    actual = spark.read.schema(push_hourly_schema()).parquet(str(warehouse / "push_hourly"))

    assertDataFrameEqual(actual, spark.createDataFrame(expected, push_hourly_schema()))  # the 23rd's p7: no row
    assert run.tables["push_hourly"] == len(expected)


def test_the_report_draws_push_attempts_by_outcome_and_the_endpoints_in_trouble(
    pushed: tuple[Path, DailyRun],
) -> None:
    warehouse, run = pushed
    page = (warehouse / "reports" / f"dt={D}" / "index.html").read_text()

    section = SECTION.findall(page)
    assert len(section) == 1
    charts = [imread(io.BytesIO(base64.b64decode(data)), format="png") for data in IMAGE.findall(section[0])]
    assert [chart.shape[1] > 600 for chart in charts] == [True]
    assert tables_of(section[0]) == [
        [
            ["endpoint", "attempts", "failed", "throttled", "gone", "no answer"],
            [BILLING, "8", "0", "3", "0", "2"],
            [AUDIT, "3", "2", "0", "1", "0"],
        ]
    ]
    assert run.report.endswith(f"/reports/dt={D}/index.html")


def test_a_day_without_push_attempts_says_so_in_one_line(spark: SparkSession, pushed: tuple[Path, DailyRun]) -> None:
    warehouse, _ = pushed

    uri = write_report(spark, warehouse.as_uri(), date(2026, 11, 21))

    page = Path(uri.removeprefix("file://")).read_text()
    assert SECTION.findall(page) == ['<p class="sub">no push attempts on 2026-11-21</p>']
