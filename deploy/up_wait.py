"""`petrel up --wait`: the cluster started in the background, the command returning once it is up (for scripts).

The same `petrel up`, without --wait, runs in a session of its own with its output in
<data>/logs/up.log; this waits for its banner ("Petrel is up."), prints it, and exits 0. When
the cluster stops before it is up, or is not up within --wait-timeout, it says so, with the log's
tail, and exits 1 (the cluster started so far is stopped). Stop a waited-for cluster with
`kill $(jq .supervisor_pid <data>/run/cluster.json)` (SIGTERM: it stops every process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

READY = "Petrel is up."
POLL_SECONDS = 0.2


def up_and_wait(argv: list[str], data_dir: Path, timeout: float) -> int:
    log = data_dir / "logs" / "up.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "deploy", *(a for a in argv if a != "--wait")]
    with log.open("w") as output:
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if READY in text:
            print(text[text.index(READY) - 1 :].strip("\n"))
            print(f"(running in the background, pid {child.pid}; its output: {log})")
            return 0
        if child.poll() is not None:
            stopped = f"petrel up stopped before it was up (exit {child.returncode}); {log}:"
            print(f"{stopped}\n{_tail(text)}", file=sys.stderr)
            return 1
        time.sleep(POLL_SECONDS)
    os.killpg(child.pid, signal.SIGTERM)
    print(f"petrel up was not up within {timeout:.0f} s; stopped it. {log}:\n{_tail(log.read_text())}", file=sys.stderr)
    return 1


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.splitlines()[-lines:])
