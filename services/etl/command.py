"""`petrel etl daily`: its arguments, and where it runs (here on a local master, else through spark-submit).

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


def settings_from(args: argparse.Namespace) -> EtlSettings:
    """The environment's settings, with what the command line gives instead."""
    given = {
        "events_uri": args.events,
        "warehouse_uri": args.warehouse,
        "master": args.master,
        "lookback_days": args.lookback_days,
        "commitlog_uris": args.commitlog,
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
