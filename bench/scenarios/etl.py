"""The nightly ETL (issue 12): one generated day through `run_daily` on `local[2]`, beside DuckDB on the same files.

Ten million lines of a generated day (`bench.etl_events`; `BENCH_ETL_EVENTS` asks
for another size, `--quick` for 200,000) are made once and kept under
`data/bench/etl/`. Ours is the job itself, `services.etl.job.run_daily`, in the
job's own session (`build_session`, the job's settings) on `local[2]` with a 4 GiB
driver (spark-submit's `--driver-memory`, through PYSPARK_SUBMIT_ARGS): read, every
table, every write, timed end to end. The reference is what a single-machine user
would run instead: DuckDB computing the same tables from the same files
(`bench.etl_reference`), given the same two threads and 4 GiB, in a process of its
own so its memory is its own. The two alternate, three times each (once with
`--quick`, `BENCH_ETL_RUNS` times if set); each figure is the median.

Memory: the local driver is this process's JVM child (its VmHWM, the peak resident
set, after the runs) plus this Python process (its ru_maxrss); DuckDB's is its
process's ru_maxrss.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from bench.figures import BenchOptions, Figure

EVENTS_ENV = "BENCH_ETL_EVENTS"
RUNS_ENV = "BENCH_ETL_RUNS"
FULL_EVENTS = 10_000_000
QUICK_EVENTS = 200_000
SEED = 12
DRIVER_MEMORY = "4g"
"""Enough for ten million events on local[2]: the job caches the parsed fields the tables read, and sends/progress."""
DUCKDB_MEMORY = "4GB"
DATA = Path("data/bench/etl")
WAREHOUSE_BYTES_PER_LINE = 600
"""Room for both warehouses and Spark's spill, per line read (the check before the runs)."""
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Timed:
    seconds: float
    rows: dict[str, int]


def etl(options: BenchOptions) -> list[Figure]:
    count = int(os.environ.get(EVENTS_ENV) or (QUICK_EVENTS if options.quick else FULL_EVENTS))
    runs = int(os.environ.get(RUNS_ENV) or (1 if options.quick else 3))
    day = _generated(count)
    events, lines = Path(day["events"]), int(day["lines"])
    from bench.etl_events import DAY, refuse_if_short_of_disk

    refuse_if_short_of_disk(DATA, lines * WAREHOUSE_BYTES_PER_LINE)
    spark, settings = _session(events)
    ours: list[Timed] = []
    theirs: list[dict[str, Any]] = []
    try:
        for _ in range(runs):
            ours.append(_ours(spark, settings, DAY))
            theirs.append(_duckdb(events, DAY))
            print(f"  ours {ours[-1].seconds:.1f} s, DuckDB {theirs[-1]['seconds']:.1f} s", flush=True)
        jvm_peak = _jvm_peak(spark)
    finally:
        spark.stop()
    _compare_rows(ours[-1].rows, theirs[-1]["rows"])
    return _figures(lines, runs, ours, theirs, jvm_peak)


def _generated(count: int) -> dict[str, Any]:
    """The cached day, generated first if need be (in a process of its own: its buffers are not the driver's)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.etl_events", str(DATA / "events"), str(count), str(SEED)],
        check=True,
        capture_output=True,
        text=True,
    )
    day: dict[str, Any] = json.loads(out.stdout)
    made = f"generated in {day['seconds']:.0f} s" if day["seconds"] else "cached"
    print(f"  {day['lines']:,} lines ({made}) under {day['events']}", flush=True)
    return day


def _session(events: Path) -> tuple[Any, Any]:
    from services.etl.session import build_session
    from services.etl.settings import EtlSettings

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # spark-submit's own flags for the driver pyspark starts: its heap, and no progress bars over the table
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS",
        f"--driver-memory {DRIVER_MEMORY} --conf spark.ui.showConsoleProgress=false pyspark-shell",
    )
    # No CommitLog, as DuckDB reads none: not the local brokers' that a local master would find under data/.
    settings = EtlSettings(
        master="local[2]",
        events_uri=events.resolve().as_uri(),
        warehouse_uri=(DATA / "warehouse").resolve().as_uri(),
        commitlog_uris="",
    )
    return build_session(settings), settings


def _ours(spark: Any, settings: Any, day: date) -> Timed:
    from services.etl.job import run_daily

    shutil.rmtree(DATA / "warehouse", ignore_errors=True)
    started = time.perf_counter()
    run = run_daily(spark, settings, day)
    return Timed(time.perf_counter() - started, dict(run.tables))


def _duckdb(events: Path, day: date) -> dict[str, Any]:
    out = DATA / "duckdb-warehouse"
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "bench.etl_reference", str(events), str(out), day.isoformat()]
    done = subprocess.run([*command, "--memory-limit", DUCKDB_MEMORY], check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _jvm_peak(spark: Any) -> int:
    """The driver JVM's peak resident set (VmHWM), in bytes."""
    pid = spark.sparkContext._gateway.proc.pid  # the launcher execs java: this is the JVM's pid
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def _compare_rows(ours: dict[str, int], theirs: dict[str, int]) -> None:
    """The same rows per table, or say where not: a quick check the two computed the same day."""
    differ = {t: (ours.get(t), n) for t, n in theirs.items() if ours.get(t) != n}
    if differ:
        print(f"  rows per table differ (ours, DuckDB): {differ}", flush=True)
    else:
        print(f"  rows per table equal: {theirs}", flush=True)


def _figures(lines: int, runs: int, ours: list[Timed], theirs: list[dict[str, Any]], jvm_peak: int) -> list[Figure]:
    ours_s = statistics.median(t.seconds for t in ours)
    theirs_s = statistics.median(t["seconds"] for t in theirs)
    python_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    duckdb_peak = max(t["max_rss_bytes"] for t in theirs)
    of = f"{lines / 1e6:.1f}M events" if lines >= 1e6 else f"{lines:,} events"
    return [
        Figure(
            f"ETL day, {of}, local[2] (median of {runs})", lines / ours_s, "DuckDB, 2 threads", lines / theirs_s, "ev/s"
        ),
        Figure("ETL day, end to end", ours_s, "DuckDB, same tables", theirs_s, "s", higher_is_better=False),
        Figure(
            "peak RSS, driver JVM (4g heap)",
            jvm_peak / MIB,
            "DuckDB process",
            duckdb_peak / MIB,
            "MiB",
            higher_is_better=False,
        ),
        Figure("peak RSS, Python driver", python_peak / MIB, "-", 0, "MiB"),
    ]
