"""`python -m services.etl [worker | beat | now]`: the nightly run's processes, configured from the environment.

- `worker`: the Celery worker that runs `etl.nightly` (one run at a time; the job itself in
  a process of its own, see services.etl.nightly).
- `beat`: the Celery beat that starts it every day at `PETREL_ETL_NIGHTLY_AT` (UTC); its
  schedule file is under `<data_dir>/etl/`.
- `now`: the nightly run here, in the foreground: yesterday's date, the same lock as the
  worker's (it skips, exit 1, while a run holds it), the job's exit status.

`petrel up` starts the worker and beat (not with `--no-etl` or `PETREL_ETL_NIGHTLY=false`).
Run one beat per cluster.
"""

from __future__ import annotations

import os
import sys

import redis

from libs.celery_json import quiet_root_warning
from services.etl.logs import configure_logging
from services.etl.nightly import NIGHTLY_QUEUE, EtlNotInstalled, create_celery, run_nightly, state_dir
from services.etl.settings import EtlSettings


def main(argv: list[str]) -> int:
    role = argv[0] if argv else ""
    settings = EtlSettings()
    if role in {"worker", "beat"}:
        state_dir(settings).mkdir(parents=True, exist_ok=True)
        app = create_celery(settings)
        quiet_root_warning(app.conf.accept_content)  # JSON only: Celery's warning about root does not apply
        return int(app.start(celery_argv(role, settings, argv[1:])) or 0)
    if role == "now":
        return now(settings)
    print(f"usage: python -m services.etl [worker | beat | now]; not {role!r}", file=sys.stderr)
    return 2


def now(settings: EtlSettings) -> int:
    configure_logging()
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)
    try:
        status = run_nightly(settings, client)
    except EtlNotInstalled as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        client.close()
    return 1 if status is None else status


def celery_argv(role: str, settings: EtlSettings, extra: list[str]) -> list[str]:
    """The `celery` command line of the worker or beat (extra arguments are Celery's own, appended)."""
    level = ["--loglevel", settings.log_level.upper()]
    if role == "worker":
        return [
            "worker",
            *level,
            "--pool",
            "solo",
            "--queues",
            NIGHTLY_QUEUE,
            "--hostname",
            f"etl-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *extra,
        ]
    return ["beat", *level, "--schedule", str(state_dir(settings) / "beat-schedule"), *extra]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
