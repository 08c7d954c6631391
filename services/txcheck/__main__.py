"""`python -m services.txcheck [serve | worker | beat]`: one of txcheck's processes, configured from the environment.

- `serve` (the default): the health process, /healthz and /readyz (ready when Redis answers).
- `worker`: a Celery worker running scans and checks (prefork, `worker_concurrency` processes).
- `beat`: the Celery beat that starts a scan every `scan_interval_seconds`; its schedule file
  is under `<data_dir>/txcheck/`.

`petrel up` starts all three, each with its own log. Run one beat per cluster (a second one
only makes scans that find their brokers locked) and as many workers as needed.
"""

from __future__ import annotations

import os
import sys

from libs.celery_json import quiet_root_warning
from services.txcheck.celery_app import QUEUES, create_celery
from services.txcheck.settings import TxcheckSettings

ROLES = ("serve", "worker", "beat")
"""txcheck's processes, in the order `petrel up` and `petrel serve txcheck` start them."""


def main(argv: list[str]) -> int:
    role = argv[0] if argv else "serve"
    settings = TxcheckSettings()
    if role == "serve":
        # Imported here: the worker and the beat, which serve no HTTP, never load the web stack (memory for life).
        from libs.http.serve import serve  # noqa: PLC0415
        from services.txcheck.app import create_app  # noqa: PLC0415

        serve(create_app(settings), settings)
        return 0
    if role in {"worker", "beat"}:
        settings.cluster_token()  # a token file that cannot be used stops the worker here, not at its first task
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        if role == "worker":
            import services.txcheck.runtime  # noqa: F401, PLC0415  (before the pool forks: its children share it)
        app = create_celery(settings)
        quiet_root_warning(app.conf.accept_content)  # JSON only: Celery's warning about root does not apply
        return int(app.start(celery_argv(role, settings, argv[1:])) or 0)
    print(f"usage: python -m services.txcheck [serve | worker | beat]; not {role!r}", file=sys.stderr)
    return 2


def celery_argv(role: str, settings: TxcheckSettings, extra: list[str]) -> list[str]:
    """The `celery` command line of a worker or beat (extra arguments are Celery's own, appended)."""
    level = ["--loglevel", settings.log_level.upper()]
    if role == "worker":
        return [
            "worker",
            *level,
            "--pool",
            "prefork",
            "--concurrency",
            str(settings.concurrency),
            "--queues",
            ",".join(QUEUES),
            "--hostname",
            f"txcheck-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *extra,
        ]
    return ["beat", *level, "--schedule", str(settings.state_dir / "beat-schedule"), *extra]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
