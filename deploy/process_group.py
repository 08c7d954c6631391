"""ProcessGroup: processes that make one service and live and die together, in the foreground.

`petrel serve txcheck` is three processes, as under `petrel up`: the health app, a Celery
worker and beat. Under systemd they are one unit, so they must stand or fall as one:

- Each starts in its own session (Ctrl-C reaches only this process, which stops them in
  order) and, on Linux, is sent SIGTERM if this process dies.
- Their output is this process's own (the journal, under systemd).
- SIGTERM or SIGINT here stops them all, last started first (SIGTERM, then SIGKILL after
  a grace period); the exit status is then 0 (130 after Ctrl-C, as a shell expects).
- One that exits by itself, with whatever status, stops the others: the exit status is
  its own (128 + the signal's number if one killed it), or 1 if that was 0 (a part of a
  service never ends by itself), so that `Restart=on-failure` starts the whole service again.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from types import FrameType

from deploy.supervisor import GRACE_SECONDS, die_with_parent

POLL_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    argv: list[str]


class ProcessGroup:
    def __init__(self, members: list[Member], grace_seconds: float = GRACE_SECONDS) -> None:
        self.members = members
        self.grace_seconds = grace_seconds
        self.stopping = threading.Event()
        self.stopped_by: int | None = None
        self.running: list[tuple[Member, subprocess.Popen[bytes]]] = []

    def run(self) -> int:
        """Start every member, wait until a signal or a member's exit, stop the rest; the exit status."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        try:
            for member in self.members:
                if self.stopping.is_set():
                    break
                self.running.append((member, self._start(member)))
            ended = self._wait()
            if ended is None:
                return 130 if self.stopped_by == signal.SIGINT else 0
            member, status = ended
            how = f"was killed by signal {-status}" if status < 0 else f"exited with code {status}"
            self._say(f"{member.name} {how}; stopping the others")
            return 128 - status if status < 0 else status or 1
        finally:
            self.stop()

    def stop(self) -> None:
        for member, process in reversed(self.running):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(self.grace_seconds)
                except subprocess.TimeoutExpired:
                    self._say(f"{member.name} did not stop in {self.grace_seconds:.0f} s; killing it")
                    process.kill()
                    process.wait()
        self.running.clear()

    def _start(self, member: Member) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            member.argv,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - started from the main thread only
        )

    def _wait(self) -> tuple[Member, int] | None:
        """The first member to exit and its status; None when a signal came first."""
        while not self.stopping.wait(POLL_SECONDS):
            for member, process in self.running:
                status = process.poll()
                if status is not None:
                    return member, status
        return None

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stopped_by = signum
        self.stopping.set()

    @staticmethod
    def _say(text: str) -> None:
        with contextlib.suppress(OSError):
            print(f"[petrel] {text}", file=sys.stderr, flush=True)
