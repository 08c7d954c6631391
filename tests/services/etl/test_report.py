"""The HTML report of a day: written by the daily job beside its tables, one self-contained file whose charts
are PNGs inside it and whose tables hold the story's numbers; a day without rows reads "no data"."""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

from matplotlib.image import imread
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from services.etl import plots
from services.etl.job import DailyRun
from services.etl.report import DRAWN, write_report
from tests.support.event_files import DAY
from tests.support.report_pages import IMAGE, tables_of


def test_the_daily_run_writes_one_self_contained_page_beside_the_tables(
    warehouse: Path, story_runs: dict[str, DailyRun]
) -> None:
    page_file = warehouse / "reports" / f"dt={DAY}" / "index.html"
    assert story_runs[DAY].report == f"{warehouse.as_uri()}/reports/dt={DAY}/index.html"
    assert story_runs[DAY].summary().splitlines()[-1] == f"report: {story_runs[DAY].report}"
    page = page_file.read_text()

    assert re.findall(r'(?:src|href)="(?!data:)[^"]*"', page) == [], "the page loads something from elsewhere"
    assert "<script" not in page
    assert "<link" not in page
    images = [imread(io.BytesIO(base64.b64decode(data)), format="png") for data in IMAGE.findall(page)]
    assert len(images) == 4, "one chart each: throughput, latencies, retries and dead letters, lateness"
    assert all(image.shape[0] > 100 and image.shape[1] > 600 for image in images)
    assert "no data" not in page


def test_the_reports_tables_hold_the_storys_numbers(warehouse: Path, story_runs: dict[str, DailyRun]) -> None:
    page = (warehouse / "reports" / f"dt={DAY}" / "index.html").read_text()

    assert re.findall(r"<b>([\d,]+)</b><span>([a-z ]+)</span>", page) == [
        ("39", "lines read"),
        ("36", "events in"),
        ("1", "late events"),
        ("4", "quarantined"),
        ("3", "checks failed"),
    ]
    counts, reasons, checks, throughput, latencies, failures, delays = tables_of(page)
    assert counts[1:] == [[table, str(rows)] for table, rows in sorted(story_runs[DAY].tables.items())]
    assert reasons[1:] == [["malformed_json", "1"], ["missing_field", "1"], ["unknown_event", "1"], ["wrong_type", "1"]]
    assert checks[1:] == [
        ["invariant: ack_without_send", "1"],
        ["invariant: dlq_without_reason", "1"],
        ["invariant: rolled_back_delivered", "1"],
    ]
    assert throughput == [
        ["topic", "sent", "bytes sent", "delayed", "transactional", "busiest hour"],
        ["orders", "7", "310", "2", "0", "10:00"],
        ["payments", "0", "0", "0", "2", "-"],
    ]
    assert latencies[1:] == [
        ["g1", "orders", "10:00", "1,000", "2,000", "2,000", "3,000", "3,000", "3,000"],
        ["g1", "orders", "12:00", "1,000", "1,000", "1,000", "2,000", "2,000", "2,000"],
        ["g1", "payments", "09:00", "2,000", "2,000", "2,000", "3,000", "3,000", "3,000"],
        ["g2", "orders", "10:00", "4,000", "4,000", "4,000", "5,000", "5,000", "5,000"],
        ["g3", "orders", "16:00", "1,000", "1,000", "1,000", "-", "-", "-"],
        ["g3", "orders", "20:00", "60,000", "60,000", "60,000", "-", "-", "-"],
        ["g3", "payments", "09:00", "120,000", "120,000", "120,000", "-", "-", "-"],
    ]
    assert failures == [
        ["group", "topic", "delivered", "acked", "nacked", "retried", "dead lettered", "redriven"],
        ["g1", "orders", "4", "2", "1", "1", "1", "0"],
        ["g1", "payments", "1", "1", "0", "0", "0", "0"],
        ["g2", "orders", "1", "2", "0", "0", "0", "0"],
        ["g3", "orders", "2", "0", "0", "0", "1", "1"],
        ["g3", "payments", "1", "0", "0", "0", "0", "0"],
    ]
    assert delays[1:] == [
        ["(timer)", "0", "0", "0", "1", "0", "0", "-", "-", "-"],
        ["orders", "2", "1", "1", "0", "0", "0", "500", "500", "500"],
    ]


def test_a_day_without_rows_reads_no_data_in_every_section(
    spark: SparkSession, warehouse: Path, story_runs: dict[str, DailyRun]
) -> None:
    uri = write_report(spark, warehouse.as_uri(), date(2026, 12, 1))

    page = Path(uri.removeprefix("file://")).read_text()
    assert page.count('<div class="no-data">no data: no rows for 2026-12-01</div>') == 4
    assert IMAGE.findall(page) == []
    assert re.findall(r"<b>([\d,]+)</b><span>([a-z ]+)</span>", page)[0] == ("0", "lines read")
    assert tables_of(page)[0][1:] == [[table, "0"] for table in sorted(story_runs[DAY].tables)]


def test_petrel_etl_report_draws_a_day_again_from_its_tables_as_the_job_drew_it_without_a_jvm(
    warehouse: Path, story_runs: dict[str, DailyRun]
) -> None:
    # A file:// warehouse is read with pyarrow (services.etl.report_files), the job's own page through Spark. In a
    # process of its own: this one's shared session would hide a call that needs a JVM.
    page_file = warehouse / "reports" / f"dt={DAY}" / "index.html"
    drawn_by_the_job = page_file.read_text()
    page_file.unlink()

    command = [sys.executable, "-m", "deploy", "etl", "report", "--date", DAY, "--warehouse", warehouse.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"report: {story_runs[DAY].report}"]
    assert "SparkContext" not in done.stderr
    assert page_file.read_text() == drawn_by_the_job


def test_the_tables_schemas_read_without_the_jvm_are_those_sparks_parser_makes(spark: SparkSession) -> None:
    for table, make in DRAWN.items():
        made = make()
        ddl = ", ".join(f"`{field.name}` {field.dataType.simpleString()}" for field in made.fields)
        assert made == StructType.fromDDL(ddl), table


def test_a_day_of_many_groups_and_topics_draws_the_busiest_topics_and_the_slowest_pairs() -> None:
    # 10 topics x 8 groups: a legend of 80 lines would squash the chart to nothing (matplotlib warns, tests fail).
    topics, groups = [f"topic-{n}" for n in range(10)], [f"group-{n}" for n in range(8)]
    sent = [{"topic": t, "hour": h, "sent": 100 * (n + 1)} for n, t in enumerate(topics) for h in (9, 10)]
    latency = [
        {"group": g, "topic": t, "hour": 10}
        | {f"{kind}_{p}_ms": 10 * (i + 1) for kind in ("delivery", "ack") for p in ("p50", "p95", "p99")}
        for i, (g, t) in enumerate((g, t) for g in groups for t in topics)
    ]

    charts = [
        imread(io.BytesIO(plots.throughput(sent)), format="png"),
        imread(io.BytesIO(plots.latencies(latency)), format="png"),
    ]

    assert all(chart.shape[0] > 100 and chart.shape[1] > 600 for chart in charts)
