"""Supervisor: starts the cluster's processes, watches them, and stops them all.

- Children start in plan order; each must answer `/healthz` before the next
  starts, so brokers find their nameservers and the gateway finds brokers
  (a child without a port, as txcheck's Celery worker and beat, only has to start).
  Processes that share a port (the gateway's workers, SO_REUSEPORT) are probed
  on it alike, whichever of them the kernel hands a probe to: each is up when
  `/healthz` answers with its own name (`worker`).
- Each child runs in its own session (Ctrl-C reaches only the supervisor, which
  then stops children in reverse order: SIGTERM, then SIGKILL after a grace
  period) and, on Linux, is sent SIGTERM if the supervisor itself dies.
- The etcd members a replicated cluster's processes wait for start together
  (`start_together`: none is healthy before a majority runs).
- A child that exits is reported with the tail of its log, never hidden, and
  not restarted, but for those planned with `restart` (etcd members): those are
  started again on their data, at most once a second, while the others serve.
- `<data>/run/cluster.json` lists the live processes for tools and tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from deploy.plan import ProcessSpec

GRACE_SECONDS = 10.0
RESTART_SECONDS = 1.0
"""A child planned with `restart` is started again no sooner than this after its last start (no busy loop)."""
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Health probes go straight to the child: an HTTP_PROXY in the environment is not asked to reach 127.0.0.1."""


class StartupFailed(RuntimeError):
    pass


@dataclass(slots=True)
class Child:
    spec: ProcessSpec
    process: subprocess.Popen[bytes]
    log_path: Path
    reported: bool = False
    started_at: float = 0.0


def die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _worker(health: bytes) -> object:
    """The worker a /healthz answer names (None when it names none)."""
    try:
        answer = json.loads(health)
    except ValueError:
        return None
    return answer.get("worker") if isinstance(answer, dict) else None


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text[-lines:])


class Supervisor:
    def __init__(self, data_dir: Path, say: Callable[[str], None] = print) -> None:
        self.data_dir = data_dir
        self.log_dir = data_dir / "logs"
        self.state_file = data_dir / "run" / "cluster.json"
        self.children: list[Child] = []
        self.say = say
        self.stopping = threading.Event()

    def check_ports(self, specs: list[ProcessSpec]) -> None:
        ports: dict[tuple[str, int], str] = {}
        for spec in specs:
            for port in (spec.port, *spec.other_ports):
                if port:
                    ports.setdefault((spec.host, port), spec.name)  # a shared port is named by its first process
        busy = [f"{name} :{port}" for (host, port), name in ports.items() if port_in_use(host, port)]
        if busy:
            raise StartupFailed(
                "ports already in use: " + ", ".join(busy) + " (is another `petrel up` running? see --help for ports)"
            )

    def start(self, spec: ProcessSpec) -> Child:
        """Start `spec` and wait until it is up (its health path answers)."""
        child = self._launch(spec)
        self._wait_ready(child, spec.health_path)
        return child

    def start_together(self, specs: list[ProcessSpec]) -> list[Child]:
        """Start every one of `specs`, then wait until each is up: members of one etcd, none healthy alone."""
        children = [self._launch(spec) for spec in specs]
        for child in children:
            self._wait_ready(child, child.spec.health_path)
        return children

    def _launch(self, spec: ProcessSpec) -> Child:
        child = Child(spec, self._popen(spec), self.log_dir / f"{spec.name}.log", started_at=time.monotonic())
        self.children.append(child)
        self._write_state()
        return child

    def _popen(self, spec: ProcessSpec) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_file: IO[bytes] = (self.log_dir / f"{spec.name}.log").open("ab")
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not (spec.dropped_env_prefix and k.startswith(spec.dropped_env_prefix))
        }
        env = inherited | spec.env | {"PYTHONUNBUFFERED": "1"}
        argv = list(spec.command) or [sys.executable, "-m", spec.module, *spec.args]
        try:
            return subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - the supervisor starts children from one thread
            )
        finally:
            log_file.close()

    def _wait_ready(self, child: Child, health_path: str | None, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping.is_set():
            if child.process.poll() is not None:
                child.reported = True
                raise StartupFailed(
                    f"{child.spec.name} exited with code {child.process.returncode} while starting; "
                    f"its log ({child.log_path}):\n{log_tail(child.log_path)}"
                )
            if self._answers(child.spec, health_path):
                return
            time.sleep(0.1)
        if self.stopping.is_set():
            raise StartupFailed("stopped while starting")
        raise StartupFailed(f"{child.spec.name} did not become healthy in {timeout:.0f} s; see {child.log_path}")

    @staticmethod
    def _answers(spec: ProcessSpec, health_path: str | None) -> bool:
        if not spec.port:
            return True  # serves nothing: started is all that can be known (a later death is reported)
        if health_path is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", spec.port), timeout=0.2):
                return True
            return False
        try:
            with DIRECT.open(f"http://127.0.0.1:{spec.port}{health_path}", timeout=1) as response:
                return bool(response.status == 200) and (not spec.shares_port or _worker(response.read()) == spec.name)
        except (OSError, http.client.HTTPException):
            # HTTPException: not an HTTP answer, e.g. the probe's own request read back when, with nothing listening
            # yet on a port of the ephemeral range, Linux connected the probe to itself (a TCP self-connect)
            return False

    def watch(self, poll_seconds: float = 0.5) -> None:
        """Until `stopping` is set: report any child that exits, and start again those planned with `restart`."""
        while not self.stopping.wait(poll_seconds):
            for child in self.children:
                if not child.reported and child.process.poll() is not None:
                    child.reported = True
                    again = " (started again on its data)" if child.spec.restart else ""
                    self._write_state()  # first: whoever reads the report then finds cluster.json saying so
                    self.say(
                        f"[petrel] {child.spec.name} (pid {child.process.pid}) exited with code "
                        f"{child.process.returncode}{again}; last lines of {child.log_path}:\n"
                        f"{log_tail(child.log_path)}"
                    )
                if child.reported and child.spec.restart and time.monotonic() - child.started_at >= RESTART_SECONDS:
                    self._restart(child)
            if self.children and all(c.process.poll() is not None for c in self.children):
                self.say("[petrel] every process has exited; stopping")
                return

    def _restart(self, child: Child) -> None:
        child.process = self._popen(child.spec)
        child.started_at = time.monotonic()
        child.reported = False
        self.say(f"[petrel] {child.spec.name} started again (pid {child.process.pid})")
        self._write_state()

    def stop_all(self) -> None:
        for child in reversed(self.children):
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
                self._wait_gone(child)
        self.children.clear()
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    def _wait_gone(self, child: Child) -> None:
        try:
            child.process.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self.say(f"[petrel] {child.spec.name} did not stop in {GRACE_SECONDS:.0f} s; killing it")
            child.process.kill()
            child.process.wait()

    def _write_state(self) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "supervisor_pid": os.getpid(),
            "processes": [
                {
                    "name": c.spec.name,
                    "pid": c.process.pid,
                    "url": c.spec.url,
                    "other_ports": list(c.spec.other_ports),
                    "log": str(c.log_path),
                    "running": c.process.poll() is None,
                }
                for c in self.children
            ],
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_file)
