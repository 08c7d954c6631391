"""`petrel etl daily`: where the job runs (here on a local master, else through spark-submit);
`petrel etl report`: a day's report drawn again. Their arguments are `services.etl.arguments`.

Nothing here imports pyspark at import time: `petrel --help` and the other commands stay light.
"""

from __future__ import annotations

import argparse
import sys

from services.etl.arguments import settings_from
from services.etl.logs import configure_logging
from services.etl.submit import SparkSubmitNotFound, submit


def daily(args: argparse.Namespace) -> int:
    """Run one day's job; its exit status."""
    configure_logging()
    settings = settings_from(args)
    if settings.runs_locally:
        from services.etl.job import run_local  # noqa: PLC0415  # pyspark is loaded only when a job runs

        print(run_local(settings, args.date).summary(), flush=True)
        return 0
    try:
        return submit(settings, args.date)
    except SparkSubmitNotFound as exc:
        print(f"petrel etl daily: {exc}", file=sys.stderr)
        return 1


def report(args: argparse.Namespace) -> int:
    """Draw one day's report again from the tables written: a `file://` warehouse's with pyarrow, another's in this
    process on a local Spark master."""
    configure_logging()
    settings = settings_from(args).model_copy(update={"master": "local[*]"})  # small tables: no cluster needed
    from services.etl.report_files import is_local, write_report_from_files  # noqa: PLC0415  # needs the etl extra

    if is_local(settings.warehouse):  # read with pyarrow: no JVM to start
        print(f"report: {write_report_from_files(settings.warehouse, args.date)}", flush=True)
        return 0
    from services.etl.job import report_local  # noqa: PLC0415  # pyspark is loaded only when a job runs

    print(f"report: {report_local(settings, args.date)}", flush=True)
    return 0
