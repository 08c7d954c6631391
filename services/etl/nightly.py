"""The nightly run: Celery beat starts `etl.nightly` every day at `nightly_at` (UTC); the task runs
`petrel etl daily` for the day before, in a process of its own, under a Redis lock.

- `create_celery(settings)` builds the Celery app; nothing is built at import time. Redis is
  the broker (no result backend); the task's queue and the lock are under `redis_key_prefix`,
  by default derived from the data directory (as `petrel up` does), so clusters sharing a
  Redis stay apart and `python -m services.etl now` next to a cluster takes its lock.
- The task takes the day before from the clock when it runs, not when beat sent it: a message
  beat sent expires at the next UTC midnight, so a run that waited never takes the wrong day.
- It takes the lock without waiting; a run that finds it held logs "skipped: a run holds the
  lock" and returns. The lock outlives the run's time limit by a minute, so a worker killed
  mid-run cannot let a second run start beside the one it left running.
- The job is `python -m deploy etl daily --date D ...` (the `petrel` command): Spark's JVM and
  its memory go when the run ends, and a crash of Spark never takes the worker down. Its
  output goes line by line into the worker's log; its exit status is the task's result.
  Past `nightly_time_limit_seconds` it is stopped, with every process it started; so it is
  when the worker is told to stop (a new night runs it again, or `python -m services.etl now`).
- The worker runs one task at a time (solo pool): nothing else ever waits behind a run.

pyspark is not imported here: a worker without it starts, and its runs fail saying so.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.schedules import crontab
from celery.signals import worker_shutting_down
from redis.exceptions import LockError

from libs.celery_json import JSON_ONLY
from libs.redis_url import celery_tls
from services.etl.arguments import daily_arguments
from services.etl.settings import EtlSettings
from services.etl.submit import SparkSubmitNotFound, spark_submit

log = logging.getLogger("petrel.etl.nightly")

NIGHTLY_TASK = "etl.nightly"
NIGHTLY_QUEUE = "etl.nightly"
LOCK_MARGIN_SECONDS = 60
STOP_GRACE_SECONDS = 10.0

Clock = Callable[[], float]
"""Seconds since the epoch (time.time)."""
Job = Callable[[list[str], float], int]
"""Runs a command line within a time limit (seconds); its exit status."""


class EtlNotInstalled(RuntimeError):
    """The job cannot run here: pyspark (or spark-submit) is missing."""


def state_dir(settings: EtlSettings) -> Path:
    """Beat's schedule file."""
    return settings.data_dir / "etl"


def lock_key(settings: EtlSettings) -> str:
    return f"{settings.key_prefix}nightly.lock"


def yesterday(clock: Clock) -> date:
    """The UTC day before the clock's."""
    return datetime.fromtimestamp(clock(), UTC).date() - timedelta(days=1)


def job_command(settings: EtlSettings, day: date) -> list[str]:
    """`petrel etl daily` for `day`, with these settings' events, warehouse, master and lookback."""
    return [sys.executable, "-m", "deploy", "etl", "daily", *daily_arguments(settings, day)]


def check_installed(settings: EtlSettings) -> None:
    """Raise EtlNotInstalled when the job cannot start: no pyspark (local master) or no spark-submit."""
    if settings.runs_locally:
        if find_spec("pyspark") is None:
            raise EtlNotInstalled("the nightly ETL cannot run: pyspark is not installed (pip install -e '.[etl]')")
        return
    try:
        spark_submit()
    except SparkSubmitNotFound as exc:
        raise EtlNotInstalled(f"the nightly ETL cannot run: {exc}") from exc


class JobRunner:
    """Runs the job in a session of its own, its output into this log, and stops it (with every process it
    started: Spark's JVM, Python workers) past its time limit, when its run fails, or when `stop` is called
    (the worker is shutting down: no job outlives the worker that started it)."""

    def __init__(self) -> None:
        self._running: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def run(self, command: list[str], time_limit: float) -> int:
        log.info("running %s", shlex.join(command))
        with subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,  # its JVM and Python workers share its process group: stopped together
        ) as job:
            watchdog = threading.Timer(time_limit, _past_time_limit, args=(job, time_limit))
            watchdog.daemon = True
            with self._lock:
                self._running = job
            watchdog.start()
            try:
                assert job.stdout is not None
                for line in job.stdout:
                    log.info("| %s", line.rstrip("\n"))
                return job.wait()
            finally:
                watchdog.cancel()
                _stop(job)
                with self._lock:
                    self._running = None

    def stop(self) -> None:
        """Stop the job running now, if any (its run then ends with the job's exit status)."""
        with self._lock:
            job = self._running
        if job is not None:
            log.warning("stopping the running job (pid %d)", job.pid)
            _stop(job)


def run_job(command: list[str], time_limit: float) -> int:
    """The job, run once by a runner of its own (as `python -m services.etl now` does)."""
    return JobRunner().run(command, time_limit)


def _past_time_limit(job: subprocess.Popen[str], time_limit: float) -> None:
    log.error("the job ran past its time limit of %.0f s; stopping it", time_limit)
    _stop(job)


def _stop(job: subprocess.Popen[str]) -> None:
    if job.poll() is not None:
        return
    try:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    except ProcessLookupError:
        pass


def run_nightly(settings: EtlSettings, client: redis.Redis, clock: Clock = time.time, job: Job = run_job) -> int | None:
    """Yesterday's job under the lock: its exit status, or None when another run holds the lock."""
    day = yesterday(clock)
    check_installed(settings)
    limit = settings.nightly_time_limit_seconds
    lock = client.lock(lock_key(settings), timeout=limit + LOCK_MARGIN_SECONDS, blocking=False)
    if not lock.acquire():
        log.warning("nightly run of %s skipped: a run holds the lock (%s)", day, lock_key(settings))
        return None
    try:
        log.info("nightly run of %s", day)
        status = job(job_command(settings, day), limit)
    finally:
        try:
            lock.release()
        except LockError:
            log.warning("the lock %s had expired before the run ended", lock_key(settings))
    if status == 0:
        log.info("nightly run of %s done", day)
    else:
        log.error("nightly run of %s failed: the job exited with %d", day, status)
    return status


def seconds_to_midnight(hour: int, minute: int) -> int:
    """From hour:minute to the end of that UTC day: how long a message beat sent then stays runnable."""
    return 86400 - (hour * 3600 + minute * 60)


def celery_config(settings: EtlSettings) -> dict[str, Any]:
    hour, minute = settings.nightly_hour_minute
    schedule = {
        "nightly": {
            "task": NIGHTLY_TASK,
            "schedule": crontab(hour=hour, minute=minute),
            "options": {"expires": seconds_to_midnight(hour, minute)},
        }
    }
    return {
        "broker_url": settings.redis_url,
        **celery_tls(settings.redis_url),
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "global_keyprefix": settings.key_prefix,
            "socket_timeout": 10,
            "socket_connect_timeout": 5,
        },
        **JSON_ONLY,
        "result_backend": None,
        "task_ignore_result": True,
        "task_default_queue": NIGHTLY_QUEUE,
        "worker_prefetch_multiplier": 1,
        "worker_enable_remote_control": False,
        "worker_send_task_events": False,
        "beat_schedule": schedule if settings.nightly else {},
        "beat_schedule_filename": str(state_dir(settings) / "beat-schedule"),
        "timezone": "UTC",
        "enable_utc": True,
    }


def create_celery(settings: EtlSettings, clock: Clock = time.time) -> Celery:
    app = Celery("etl", set_as_current=False)
    app.conf.update(celery_config(settings))
    runner = JobRunner()

    # acknowledged on receipt: a run a dead worker left is not run again by another (the lock would
    # refuse it anyway); a missed night is rerun with `python -m services.etl now` or `petrel etl daily`
    @app.task(name=NIGHTLY_TASK, shared=False, acks_late=False)
    def nightly() -> int | None:
        """Run the job for yesterday (UTC), unless a run holds the lock."""
        client = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)
        try:
            return run_nightly(settings, client, clock, runner.run)
        finally:
            client.close()

    # SIGTERM (petrel up stopping): a warm shutdown would wait for the run, and the supervisor kills a worker
    # that takes more than 10 s, leaving its job behind; the job is stopped instead, the run ends failed
    worker_shutting_down.connect(lambda **_: runner.stop(), weak=False)
    return app
