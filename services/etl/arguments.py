"""The daily job's command line, both ways: the arguments `petrel etl daily` and the spark-submit driver
(`job.main`) parse into settings (`settings_from`), and the settings written back as arguments for a run
elsewhere (`daily_arguments`: spark-submit's driver, the nightly run's `petrel etl daily`).

Below the commands that use it (`command`, `job`, `submit`, `nightly`), importing none of them nor pyspark.
"""

from __future__ import annotations

import argparse
from datetime import date

from services.etl.settings import EtlSettings


def add_daily_arguments(p: argparse.ArgumentParser) -> None:
    """The job's arguments: `petrel etl daily`'s, and those spark-submit's driver (`job.py`) is given."""
    p.add_argument("--date", required=True, type=date.fromisoformat, help="the UTC day, YYYY-MM-DD")
    p.add_argument("--events", help="the events' URI (default: file://<data_dir>/export/events)")
    p.add_argument("--warehouse", help="the tables' URI (default: file://<data_dir>/warehouse)")
    p.add_argument("--master", help="local[*] (default), local[N], spark://host:port, yarn, k8s://...")
    p.add_argument("--lookback-days", type=int, help="days' folders either side of the date also read (default: 1)")
    p.add_argument(
        "--commitlog",
        help="brokers' CommitLog dirs to reconcile with the events, comma separated "
        "(default on a local master: every <data_dir>/brokers/*/commitlog there is)",
    )


def daily_arguments(settings: EtlSettings, day: date) -> list[str]:
    """The job's arguments that run `day` with these settings (settings_from's inverse)."""
    return [
        "--date",
        day.isoformat(),
        "--events",
        settings.events,
        "--warehouse",
        settings.warehouse,
        "--master",
        settings.master,
        "--lookback-days",
        str(settings.lookback_days),
        *(["--commitlog", ",".join(settings.commitlogs)] if settings.commitlogs else []),
    ]


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    """`petrel etl report`'s: the day whose tables are drawn again, and their warehouse."""
    p.add_argument("--date", required=True, type=date.fromisoformat, help="the UTC day, YYYY-MM-DD")
    p.add_argument("--warehouse", help="the tables' URI (default: file://<data_dir>/warehouse)")


def settings_from(args: argparse.Namespace) -> EtlSettings:
    """The environment's settings, with what the command line gives instead."""
    given = {
        "events_uri": getattr(args, "events", None),
        "warehouse_uri": args.warehouse,
        "master": getattr(args, "master", None),
        "lookback_days": getattr(args, "lookback_days", None),
        "commitlog_uris": getattr(args, "commitlog", None),
    }
    return EtlSettings(**{name: value for name, value in given.items() if value is not None})
