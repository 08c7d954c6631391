"""audit_daily on the audit events of 2026-11-22 (tests.support.audit_events): each row as the job writes it, a
forged-key storm one row, an event without optional fields a row of nulls, broken lines quarantined, the late
revocation in its own day; the report's security section."""

from __future__ import annotations

import re
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from services.etl.audit import TOP_LISTS, audit_daily_schema
from services.etl.job import DailyRun, run_daily
from services.etl.report import write_report
from services.etl.settings import EtlSettings
from tests.support.audit_events import NO_KEY_REMOTE, STORM_REMOTES, write_audits_22nd
from tests.support.event_files import DAY
from tests.support.report_pages import IMAGE, tables_of

D = DAY
SECTION = re.compile(r"<section><h2>Security</h2>(.*?)</section>")


@pytest.fixture(scope="module")
def audited(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DailyRun]:
    """The 22nd run over its audit events (and the 23rd's folder, which holds the late one); its warehouse."""
    events, warehouse = tmp_path_factory.mktemp("audit-events"), tmp_path_factory.mktemp("audit-warehouse")
    write_audits_22nd(events)
    settings = EtlSettings(events_uri=events.as_uri(), warehouse_uri=warehouse.as_uri(), lookback_days=1)
    return warehouse, run_daily(spark, settings, date.fromisoformat(D))


def t(clock: str) -> datetime:
    return datetime.fromisoformat(f"{D} {clock}")


def sends(*topics: str) -> list[str]:
    return [f"POST /v1/topics/{topic}/messages" for topic in topics]


NO_KEY, CI, OPS = (None, None), ("k1", "ci-publisher"), ("k9", "ops")


def row(
    key: tuple[str | None, str | None],
    action: str,
    operation: str | None,
    status: int,
    calls: int,
    remotes: int,
    between: tuple[str, str],
    **top: list[str],
) -> tuple[Any, ...]:
    """An audit_daily row of D: `top` holds its non-empty top_* lists."""
    lists = [top.pop(column, []) for column in TOP_LISTS.values()]
    assert not top, f"no such list: {sorted(top)}"
    return (*key, action, operation, status, calls, remotes, t(between[0]), t(between[1]), *lists, D)


def test_audit_daily_has_a_row_per_key_action_operation_and_status(
    spark: SparkSession, audited: tuple[Path, DailyRun]
) -> None:
    warehouse, run = audited
    expected = [
        # 1,200 forged keys on seven topics from three addresses, and two calls without a key: one row
        row(
            NO_KEY, "unauthorized", "send_message", 401, 1202, 4, ("03:00", "09:01"),
            top_paths=sends("t0", "t1", "t2", "t3", "t4"),  # 172 calls each to t0-t2, 171 to t3-t6: a tie by path
            top_remotes=[*STORM_REMOTES, NO_KEY_REMOTE],
            top_reasons=["unknown key", "no bearer key"],
        ),
        row(
            CI, "forbidden", "send_message", 403, 2, 1, ("10:00", "10:05"),
            top_paths=sends("payments"), top_resources=["topic:payments"], top_remotes=["10.0.0.5"],
            top_reasons=["publish not allowed"],
        ),
        row(
            CI, "forbidden", "delete_topic", 403, 1, 1, ("10:10", "10:10"),
            top_paths=["DELETE /v1/topics/orders"], top_resources=["topic:orders"], top_remotes=["10.0.0.5"],
            top_reasons=["admin required"],
        ),
        row(
            CI, "rate_limited", "send_message", 429, 3, 2, ("11:00:00", "11:00:02"),
            top_paths=sends("orders"), top_resources=["topic:orders"], top_remotes=["10.0.0.5", "10.0.0.6"],
            top_reasons=["over 100 requests/s"],
        ),
        row(NO_KEY, "key_created", None, 201, 1, 0, ("07:00", "07:00"), top_resources=["key:k9"]),  # the CLI's
        row(
            OPS, "key_created", "create_key", 201, 1, 1, ("08:00", "08:00"),
            top_paths=["POST /v1/keys"], top_resources=["key:k1"], top_remotes=["10.0.0.2"],
        ),
        row(
            OPS, "admin_call", "delete_topic", 204, 2, 1, ("12:00", "12:30"),
            top_paths=["DELETE /v1/topics/old-a", "DELETE /v1/topics/old-b"],
            top_resources=["topic:old-a", "topic:old-b"], top_remotes=["10.0.0.2"],
        ),
        row(
            OPS, "key_revoked", "revoke_key", 204, 2, 1, ("18:00", "23:59:50"),  # the late revocation counts on D
            top_paths=["DELETE /v1/keys/k7", "DELETE /v1/keys/k8"], top_resources=["key:k7", "key:k8"],
            top_remotes=["10.0.0.2"],
        ),
    ]  # fmt: skip
    actual = spark.read.schema(audit_daily_schema()).parquet(str(warehouse / "audit_daily"))

    assertDataFrameEqual(actual, spark.createDataFrame(expected, audit_daily_schema()))  # the 23rd's: no row
    assert run.tables["audit_daily"] == len(expected)


def test_broken_audit_lines_are_quarantined_not_counted(spark: SparkSession, audited: tuple[Path, DailyRun]) -> None:
    warehouse, run = audited

    quarantined = spark.read.parquet(str(warehouse / "quarantine")).select("reason", "detail").collect()

    assert sorted((row["reason"], row["detail"]) for row in quarantined) == [
        ("missing_field", "missing status"),
        ("wrong_type", None),
    ]
    assert run.quarantined == 2


def test_the_report_shows_refusals_the_keys_refused_most_and_key_changes(audited: tuple[Path, DailyRun]) -> None:
    warehouse, _ = audited
    page = (warehouse / "reports" / f"dt={D}" / "index.html").read_text()

    section = SECTION.findall(page)
    assert len(section) == 1
    assert "; 2 admin calls</p>" in section[0]
    assert IMAGE.findall(section[0]) == []
    assert tables_of(section[0]) == [
        [
            ["refused", "calls", "with a key", "without a key", "keys"],
            ["unauthorized", "1,202", "0", "1,202", "0"],
            ["forbidden", "3", "3", "0", "1"],
            ["rate limited", "3", "3", "0", "1"],
        ],
        [
            ["key", "key id", "unauthorized", "forbidden", "rate limited", "last refused"],
            ["ci-publisher", "k1", "0", "3", "3", "11:00:02"],
        ],
        [
            ["key change", "by", "keys", "calls", "first", "last"],
            ["key created", "(no key)", "key:k9", "1", "07:00:00", "07:00:00"],
            ["key created", "ops", "key:k1", "1", "08:00:00", "08:00:00"],
            ["key revoked", "ops", "key:k7, key:k8", "2", "18:00:00", "23:59:50"],
        ],
    ]


def test_a_day_without_audit_events_says_so_in_one_line(spark: SparkSession, audited: tuple[Path, DailyRun]) -> None:
    warehouse, _ = audited

    uri = write_report(spark, warehouse.as_uri(), date(2026, 11, 21))

    page = Path(uri.removeprefix("file://")).read_text()
    assert SECTION.findall(page) == ['<p class="sub">no audit events on 2026-11-21</p>']
