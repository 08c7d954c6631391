"""The daily job: read D's events, compute every table, write them, say what was done.

`run_daily` runs in any session (the CLI's local one, the tests' shared one, or the
driver spark-submit started: it runs this file, `main`).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from functools import cache

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from services.etl.arguments import add_daily_arguments, settings_from
from services.etl.audit import audit_daily
from services.etl.delays import delay_daily
from services.etl.events import EventLog, read_event_log
from services.etl.journey import journeys, message_journey
from services.etl.logs import configure_logging
from services.etl.push import push_hourly
from services.etl.quality import data_quality
from services.etl.reconciliation import commitlog_daily, mismatches, reconcile
from services.etl.report import write_report
from services.etl.session import build_session
from services.etl.settings import EtlSettings
from services.etl.traffic import group_hourly, topic_hourly
from services.etl.transactions import transaction_daily
from services.etl.writer import write_table

log = logging.getLogger("petrel.etl")


@dataclass(frozen=True, slots=True)
class DailyRun:
    day: date
    warehouse: str
    lines_read: int
    events: int
    quarantined: int
    tables: dict[str, int] = field(default_factory=dict)
    """table -> rows written for D"""
    seconds: float = 0.0
    report: str = ""
    """the report's URI"""

    def summary(self) -> str:
        width = max(len(name) for name in self.tables) if self.tables else 0
        rows = [f"  {name:<{width}}  {count:>10,} rows" for name, count in self.tables.items()]
        return "\n".join(
            [
                f"petrel etl daily {self.day.isoformat()}: done in {self.seconds:.1f} s",
                f"  lines read   {self.lines_read:>10,}",
                f"  events in    {self.events:>10,}",
                f"  quarantined  {self.quarantined:>10,}",
                f"tables written under {self.warehouse}:",
                *rows,
                f"report: {self.report}",
            ]
        )


def tables(
    spark: SparkSession, event_log: EventLog, commitlogs: Sequence[str] = (), now_ms: int | None = None
) -> dict[str, Callable[[], DataFrame]]:
    """Every table of the job, by name, each computed when asked; commitlog_daily when there are CommitLogs.

    `now_ms` (default: now) ends the lag's hours of a day that is not over.
    """
    window = event_log.window
    now = int(time.time() * 1000) if now_ms is None else now_ms
    reconciled = cache(lambda: reconcile(spark, commitlogs, window, event_log.day))
    followed = cache(lambda: journeys(window, event_log.keep))
    checked = {"commitlog_daily": lambda: commitlog_daily(spark, reconciled())} if commitlogs else {}
    return {
        "topic_hourly": lambda: topic_hourly(window),
        "group_hourly": lambda: group_hourly(followed(), event_log.day, now),
        "delay_daily": lambda: delay_daily(window),
        "transaction_daily": lambda: transaction_daily(window),
        "message_journey": lambda: message_journey(followed()),
        "push_hourly": lambda: push_hourly(followed()),
        "audit_daily": lambda: audit_daily(window),
        **checked,
        "data_quality": lambda: data_quality(spark, event_log, mismatches(reconciled()) if commitlogs else []),
        "quarantine": lambda: event_log.quarantine,
    }


def run_daily(spark: SparkSession, settings: EtlSettings, day: date) -> DailyRun:
    started = time.monotonic()
    log.info("reading the events of %s from %s (%d day(s) either side)", day, settings.events, settings.lookback_days)
    event_log = read_event_log(spark, settings.events, day, settings.lookback_days)
    try:
        written: dict[str, int] = {}
        for name, compute in tables(spark, event_log, settings.commitlogs).items():
            log.info("writing %s", name)
            written[name] = write_table(spark, compute(), settings.warehouse, name, day)
        report = write_report(spark, settings.warehouse, day)
        return DailyRun(
            day=day,
            warehouse=settings.warehouse,
            lines_read=event_log.lines.count(),
            events=event_log.events.count(),
            quarantined=written["quarantine"],
            tables=written,
            seconds=time.monotonic() - started,
            report=report,
        )
    finally:
        event_log.release()


def run_local(settings: EtlSettings, day: date) -> DailyRun:
    """In this process, on the settings' local master (or in the session already running here, which stays)."""
    with local_session(settings) as spark:
        return run_daily(spark, settings, day)


def report_local(settings: EtlSettings, day: date) -> str:
    """D's report drawn again from the tables written, in this process; its URI."""
    with local_session(settings) as spark:
        return write_report(spark, settings.warehouse, day)


@contextmanager
def local_session(settings: EtlSettings) -> Iterator[SparkSession]:
    """The settings' local session, stopped after unless it was already running here (it then stays)."""
    running = SparkContext._active_spark_context  # process-wide; getActiveSession() is only this thread's
    spark = build_session(settings)
    try:
        yield spark
    finally:
        if running is None:
            spark.stop()


def main(argv: list[str] | None = None) -> None:  # the driver spark-submit runs
    configure_logging()
    p = argparse.ArgumentParser(prog="services/etl/job.py", description="one day's tables (under spark-submit)")
    add_daily_arguments(p)
    args = p.parse_args(argv)
    settings = settings_from(args)
    spark = build_session(settings, submitted=True)
    try:
        print(run_daily(spark, settings, args.date).summary(), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
