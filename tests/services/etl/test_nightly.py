"""The nightly run (services.etl.nightly) on the real Redis: yesterday's date from the clock, the lock that makes
a second run skip, the beat schedule from the settings, the job's exit status and time limit. Its one real run of
`petrel etl daily` in a process of its own is test_daily_job.py's, submitted to a standalone cluster there (one
Spark run for both), and `python -m services.etl now` in docs/etl.md runs one on a local master."""

from __future__ import annotations

import logging
import os
import signal
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pydantic
import pytest
import redis
from celery.schedules import crontab

from services.etl import nightly
from services.etl.nightly import (
    NIGHTLY_TASK,
    EtlNotInstalled,
    JobRunner,
    celery_config,
    create_celery,
    run_job,
    run_nightly,
    yesterday,
)
from services.etl.settings import EtlSettings
from tests.support.clock import FakeClock
from tests.support.waiting import wait_until

REDIS_URL = "redis://127.0.0.1:6379/0"
FIVE_PAST_MIDNIGHT_ON_THE_23RD = datetime(2026, 11, 23, 0, 5, tzinfo=UTC).timestamp()


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(REDIS_URL)
    yield connection
    connection.close()


@pytest.fixture
def settings(client: redis.Redis, tmp_path: Path) -> Iterator[EtlSettings]:
    prefix = f"petrel-test:etl:{uuid.uuid4().hex[:12]}:"
    yield EtlSettings(
        data_dir=tmp_path,
        redis_url=REDIS_URL,
        redis_key_prefix=prefix,
        events_uri=(tmp_path / "events").as_uri(),
        warehouse_uri=(tmp_path / "warehouse").as_uri(),
        master="local[2]",
    )
    keys = list(client.scan_iter(match=prefix + "*"))
    if keys:
        client.delete(*keys)


@pytest.fixture
def nightly_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="petrel.etl.nightly")
    return caplog


class RecordedJob:
    """A job that only notes its command lines and answers `status`."""

    def __init__(self, status: int = 0) -> None:
        self.status = status
        self.commands: list[list[str]] = []

    def __call__(self, command: list[str], time_limit: float) -> int:
        self.commands.append(command)
        return self.status


def test_yesterday_is_the_utc_day_before_the_clocks() -> None:
    assert yesterday(FakeClock(FIVE_PAST_MIDNIGHT_ON_THE_23RD)).isoformat() == "2026-11-22"
    assert yesterday(FakeClock(datetime(2026, 3, 1, 23, 59, tzinfo=UTC).timestamp())).isoformat() == "2026-02-28"


def test_a_run_at_five_past_midnight_on_the_23rd_runs_petrel_etl_daily_for_the_22nd(
    settings: EtlSettings, client: redis.Redis
) -> None:
    clock, job = FakeClock(FIVE_PAST_MIDNIGHT_ON_THE_23RD), RecordedJob()

    assert run_nightly(settings, client, clock, job) == 0
    clock.advance(86400)
    assert run_nightly(settings, client, clock, job) == 0

    assert job.commands[0] == [
        sys.executable,
        "-m",
        "deploy",
        "etl",
        "daily",
        "--date",
        "2026-11-22",
        "--events",
        settings.events,
        "--warehouse",
        settings.warehouse,
        "--master",
        "local[2]",
        "--lookback-days",
        "1",
    ]
    assert job.commands[1][6] == "2026-11-23", "the date is taken when the run starts"


def test_a_second_run_while_the_first_holds_the_lock_skips(
    settings: EtlSettings, client: redis.Redis, nightly_log: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(FIVE_PAST_MIDNIGHT_ON_THE_23RD)
    started, finish = threading.Event(), threading.Event()
    results: list[int | None] = []

    def long_job(command: list[str], time_limit: float) -> int:
        started.set()
        assert finish.wait(10), "the test never let the first run end"
        return 0

    first = threading.Thread(target=lambda: results.append(run_nightly(settings, client, clock, long_job)))
    first.start()
    try:
        assert started.wait(10), "the first run did not start its job"
        second = RecordedJob()
        assert run_nightly(settings, client, clock, second) is None
        assert second.commands == [], "the second run started a job beside the first"
    finally:
        finish.set()
        first.join(10)

    assert results == [0]
    assert "nightly run of 2026-11-22 skipped: a run holds the lock" in nightly_log.text
    assert run_nightly(settings, client, clock, RecordedJob()) == 0, "the lock was not released"


def test_a_failed_job_is_the_runs_exit_status_and_frees_the_lock(
    settings: EtlSettings, client: redis.Redis, nightly_log: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(FIVE_PAST_MIDNIGHT_ON_THE_23RD)

    assert run_nightly(settings, client, clock, RecordedJob(status=3)) == 3

    assert "nightly run of 2026-11-22 failed: the job exited with 3" in nightly_log.text
    assert client.exists(f"{settings.key_prefix}nightly.lock") == 0


def test_now_runs_here_and_skips_while_the_clusters_run_holds_the_lock(client: redis.Redis, tmp_path: Path) -> None:
    cluster = EtlSettings(data_dir=tmp_path, redis_url=REDIS_URL)  # the prefix petrel up gives its worker
    client.set(f"{cluster.key_prefix}nightly.lock", "the worker's run", ex=60)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETREL_")}
    try:
        now = subprocess.run(
            [sys.executable, "-m", "services.etl", "now"],
            env=env | {"PETREL_DATA_DIR": str(tmp_path), "PETREL_REDIS_URL": REDIS_URL},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        client.delete(f"{cluster.key_prefix}nightly.lock")

    assert now.returncode == 1, now.stderr
    assert "skipped: a run holds the lock" in now.stderr


def test_without_pyspark_the_task_fails_saying_so(settings: EtlSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nightly, "find_spec", lambda name: None)  # a venv without the etl extra
    app = create_celery(settings, clock=FakeClock(FIVE_PAST_MIDNIGHT_ON_THE_23RD))

    result = app.tasks[NIGHTLY_TASK].apply()

    assert result.failed()
    assert isinstance(result.result, EtlNotInstalled)
    assert str(result.result) == "the nightly ETL cannot run: pyspark is not installed (pip install -e '.[etl]')"


def test_the_queue_over_rediss_verifies_the_servers_certificate() -> None:
    config = celery_config(EtlSettings(redis_url="rediss://:pw@redis.internal:6380/0"))
    assert config["broker_use_ssl"] == {"ssl_cert_reqs": ssl.CERT_REQUIRED}  # kombu's own default verifies nothing
    assert "broker_use_ssl" not in celery_config(EtlSettings(redis_url="redis://:pw@127.0.0.1:6379/0"))


def test_beat_runs_the_task_daily_at_the_settings_utc_time_and_its_message_expires_at_midnight() -> None:
    config = celery_config(EtlSettings(nightly_at="03:15", redis_key_prefix="petrel:etl:abc:"))

    assert config["beat_schedule"] == {
        "nightly": {
            "task": NIGHTLY_TASK,
            "schedule": crontab(hour=3, minute=15),
            "options": {"expires": 20 * 3600 + 45 * 60},
        }
    }
    assert (config["timezone"], config["enable_utc"]) == ("UTC", True)
    assert config["broker_transport_options"]["global_keyprefix"] == "petrel:etl:abc:"
    assert EtlSettings().nightly_at == "02:30"
    assert celery_config(EtlSettings(nightly=False))["beat_schedule"] == {}


@pytest.mark.parametrize("written", ["2:30", "24:00", "02:60", "0230", "02:30 "])
def test_a_nightly_time_that_is_not_hh_mm_is_refused(written: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=f"nightly_at '{written}' is not a UTC time HH:MM"):
        EtlSettings(nightly_at=written)


SPAWNER = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import signal; signal.pause()'])\n"
    "print('child', child.pid, flush=True)\n"
    "child.wait()\n"
)
"""A job that starts a process of its own (as Spark's JVM is) and waits for it."""


def spawned_child(log: pytest.LogCaptureFixture) -> int | None:
    lines = [r.getMessage() for r in log.records if r.getMessage().startswith("| child ")]
    return int(lines[0].split()[2]) if lines else None


def test_a_job_past_its_time_limit_is_stopped_with_every_process_it_started(
    nightly_log: pytest.LogCaptureFixture,
) -> None:
    status = run_job([sys.executable, "-c", SPAWNER], time_limit=1.0)

    assert status == -signal.SIGTERM
    assert "the job ran past its time limit of 1 s; stopping it" in nightly_log.text
    child = spawned_child(nightly_log)
    assert child is not None, nightly_log.text
    wait_until(lambda: not running(child), "the job's own child stopped with it")


def test_a_stopping_worker_stops_the_running_job_with_every_process_it_started(
    nightly_log: pytest.LogCaptureFixture,
) -> None:
    runner, statuses = JobRunner(), []
    run = threading.Thread(target=lambda: statuses.append(runner.run([sys.executable, "-c", SPAWNER], 600)))
    run.start()
    wait_until(lambda: spawned_child(nightly_log) is not None, "the job started its child", 30)

    runner.stop()
    run.join(30)

    assert statuses == [-signal.SIGTERM]
    child = spawned_child(nightly_log)
    assert child is not None
    wait_until(lambda: not running(child), "the job's own child stopped with it")
    runner.stop()  # nothing running: nothing to do


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text().lower()
