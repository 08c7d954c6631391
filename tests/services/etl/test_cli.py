"""`petrel etl daily` end to end on local[2]: its summary, and the Parquet tables it leaves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.event_files import DAY, write_november_22


def test_petrel_etl_daily_writes_the_tables_and_sums_up(tmp_path: Path) -> None:
    events, warehouse = tmp_path / "events", tmp_path / "warehouse"
    write_november_22(events)
    petrel = Path(sys.executable).with_name("petrel")
    command = [str(petrel), "etl", "daily", "--date", DAY, "--events", events.as_uri()]
    command += ["--warehouse", warehouse.as_uri(), "--master", "local[2]"]
    env = {**os.environ, "PETREL_ETL_SHUFFLE_PARTITIONS": "2"}

    done = subprocess.run(command, capture_output=True, text=True, timeout=110, check=False, env=env)

    assert done.returncode == 0, done.stderr[-3000:]
    summary = done.stdout.splitlines()
    assert summary[0].startswith(f"petrel etl daily {DAY}: done in ")
    assert summary[1:5] == [
        "  lines read           31",
        "  events in            28",
        "  quarantined           4",
        f"tables written under {warehouse.as_uri()}:",
    ]
    assert "  topic_hourly                5 rows" in summary
    assert "  message_journey             8 rows" in summary
    for table in ("topic_hourly", "group_hourly", "message_journey", "data_quality", "quarantine"):
        assert list((warehouse / table / f"dt={DAY}").glob("*.zstd.parquet")), f"no {table} Parquet for {DAY}"
    assert "reading the events of 2026-11-22" in done.stderr


def test_the_petrel_command_does_not_load_pyspark_until_a_job_runs() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from deploy.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['etl', 'daily', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyspark')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
