"""deploy/etl/: the cron line runs yesterday's job under a flock and appends its output; spark-submit.sh is
the very command line `petrel etl daily --master spark://...` submits (services/etl/submit.py)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from services.etl.settings import EtlSettings
from services.etl.submit import submit_command

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "etl"


def cron_command(checkout: Path) -> str:
    """The crontab's one job, as cron hands it to sh: `\\%` is a literal %, the checkout is `checkout`."""
    jobs = [line for line in (DEPLOY / "crontab").read_text().splitlines() if line[:1].isdigit()]
    assert len(jobs) == 1, jobs
    command = jobs[0].split(maxsplit=5)[5]
    assert "%" not in command.replace("\\%", ""), "an unescaped % is a newline to cron"
    return command.replace("\\%", "%").replace("cd /srv/petrel", f"cd {checkout}")


def fake_petrel(checkout: Path) -> None:
    """`.venv/bin/petrel` that only says how it was called."""
    petrel = checkout / ".venv" / "bin" / "petrel"
    petrel.parent.mkdir(parents=True)
    petrel.write_text('#!/bin/sh\necho "petrel $*"\n')
    petrel.chmod(0o755)
    (checkout / "data" / "logs").mkdir(parents=True)


def yesterdays() -> set[str]:
    """Yesterday (UTC) of now and of a minute ago: the runs just made may straddle a midnight."""
    now = datetime.now(UTC)
    return {(moment.date() - timedelta(days=1)).isoformat() for moment in (now - timedelta(minutes=1), now)}


def test_the_cron_line_runs_yesterdays_job_at_0230_utc_and_appends_its_output(tmp_path: Path) -> None:
    fake_petrel(tmp_path)
    crontab = (DEPLOY / "crontab").read_text()
    assert "CRON_TZ=UTC\n30 2 * * * " in crontab

    for _ in range(2):
        subprocess.run(["sh", "-c", cron_command(tmp_path)], check=True, timeout=10)

    lines = (tmp_path / "data" / "logs" / "etl-nightly.log").read_text().splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == lines[1], lines
    assert lines[0].removeprefix("petrel etl daily --date ") in yesterdays(), lines[0]


def test_the_cron_line_does_nothing_while_a_run_holds_the_lock(tmp_path: Path) -> None:
    fake_petrel(tmp_path)
    with (tmp_path / "data" / "etl-nightly.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the run still going
        held = subprocess.run(["sh", "-c", cron_command(tmp_path)], check=False, timeout=10)

    assert held.returncode == 1
    assert (tmp_path / "data" / "logs" / "etl-nightly.log").read_text() == ""


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {
            "PETREL_ETL_LOOKBACK_DAYS": "3",
            "PETREL_ETL_SHUFFLE_PARTITIONS": "64",
            "PETREL_ETL_UI_ENABLED": "true",
            "PETREL_ETL_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1 -Xss512k",
            "PETREL_ETL_SPARK_OPTIONS": "spark.executor.memory=4g, spark.sql.adaptive.enabled = false,",
        },
    ],
    ids=["defaults", "settings"],
)
def test_spark_submit_sh_is_the_command_petrel_etl_daily_submits(
    extra: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark_home = tmp_path / "spark"
    (spark_home / "bin").mkdir(parents=True)
    (spark_home / "bin" / "spark-submit").write_text('#!/bin/sh\nprintf "%s\\0" "$0" "$@"\n')
    (spark_home / "bin" / "spark-submit").chmod(0o755)
    given = {
        "PETREL_ETL_MASTER": "spark://spark-master:7077",
        "PETREL_ETL_EVENTS_URI": "hdfs:///petrel/events",
        "PETREL_ETL_WAREHOUSE_URI": "hdfs:///petrel/warehouse",
        **extra,
    }
    env = {"PATH": os.environ["PATH"], "SPARK_HOME": str(spark_home), "PETREL_PYTHON": sys.executable, **given}

    run = subprocess.run(
        [str(DEPLOY / "spark-submit.sh"), "2026-11-22"], env=env, capture_output=True, timeout=30, check=True
    )

    for name in [n for n in os.environ if n.startswith("PETREL_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert run.stdout.decode().split("\0")[:-1] == submit_command(EtlSettings(), date(2026, 11, 22))


def test_spark_submit_sh_names_the_setting_it_lacks(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "PETREL_PYTHON": sys.executable}

    run = subprocess.run(
        [str(DEPLOY / "spark-submit.sh"), "2026-11-22"], env=env, capture_output=True, timeout=10, check=False
    )

    assert run.returncode == 1
    assert "set PETREL_ETL_MASTER: spark://host:7077, yarn or k8s://..." in run.stderr.decode()


def test_docs_etl_md_shows_the_crontab_as_it_is() -> None:
    page = (DEPLOY.parents[1] / "docs" / "etl.md").read_text()
    shown = page.split("```crontab\n", 1)[1].split("```", 1)[0]
    assert shown in (DEPLOY / "crontab").read_text()
