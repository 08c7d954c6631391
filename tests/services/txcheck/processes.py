"""txcheck's Celery worker and beat as real processes, for tests that kill them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


class TxcheckProcess:
    """`python -m services.txcheck <role>` in its own session, its output in `<log_dir>/txcheck-<role>.log`."""

    def __init__(self, role: str, env: dict[str, str], log_dir: Path) -> None:
        self.role = role
        self.env = env
        self.log_path = log_dir / f"txcheck-{role}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "services.txcheck", self.role],
                env=os.environ | self.env | {"PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None, f"the {self.role} was not started"
        return self.process.pid

    def children(self) -> list[int]:
        """The pool processes of a prefork worker."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [int(pid) for pid in path.read_text().split()]

    def kill(self) -> None:
        """kill -9 of the process and everything it started."""
        assert self.process is not None
        os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        """kill -9 as well: a graceful stop takes seconds, and nothing a test needs is in flight by then."""
        if self.process is not None:
            self.kill()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
