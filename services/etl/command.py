"""`petrel etl daily`: its arguments, and where it runs (here on a local master, else through spark-submit);
`petrel etl report`: a day's report drawn again.

Nothing here imports pyspark: `petrel --help` and the other commands stay light.
"""

from __future__ import annotations

import argparse
import logging
import sys
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


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO is every gateway call


def daily(args: argparse.Namespace) -> int:
    """Run one day's job; its exit status."""
    configure_logging()
    settings = settings_from(args)
    if settings.runs_locally:
        from services.etl.job import run_local  # noqa: PLC0415  # pyspark is loaded only when a job runs

        print(run_local(settings, args.date).summary(), flush=True)
        return 0
    from services.etl.submit import SparkSubmitNotFound, submit  # noqa: PLC0415  # idem

    try:
        return submit(settings, args.date)
    except SparkSubmitNotFound as exc:
        print(f"petrel etl daily: {exc}", file=sys.stderr)
        return 1


def report(args: argparse.Namespace) -> int:
    """Draw one day's report again from the tables written (in this process, on a local master)."""
    configure_logging()
    from services.etl.job import report_local  # noqa: PLC0415  # pyspark is loaded only when a job runs

    settings = settings_from(args).model_copy(update={"master": "local[*]"})  # small tables: no cluster needed
    print(f"report: {report_local(settings, args.date)}", flush=True)
    return 0
