"""Serving an ASGI app on a loopback port in a child process, for scenarios."""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


LOWEST_RUN_PORT = 10_000


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports free now (a broker name's master and its slaves: `petrel up` puts
    the slaves on the ports after the masters'). Below the kernel's ephemeral range: a port there is never handed
    to an outgoing connection or a bind to port 0 (a run from `free_port` was: a suite's `petrel up` found its
    second broker's port taken between the check and its start)."""
    ephemeral_low = _ephemeral_range()[0]
    picker = random.SystemRandom()
    for _ in range(100):
        first = picker.randrange(LOWEST_RUN_PORT, ephemeral_low - count)
        if all(_free(first + n) for n in range(count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999  # Linux's default


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for_port(port: int, timeout: float = 20.0, alive: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"the server for port {port} exited with code {alive.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


@dataclass(frozen=True, slots=True)
class Served:
    """A server in a child process: the loopback port it listens on and its pid (whose CPU sizing reads)."""

    port: int
    pid: int


@contextlib.contextmanager
def served(factory_path: str) -> Iterator[int]:
    """Run `module:factory()` under uvicorn (uvloop, httptools) in a child process; yield its port."""
    with served_process(factory_path) as server:
        yield server.port


@contextlib.contextmanager
def served_process(factory_path: str) -> Iterator[Served]:
    """`served`, yielding the port and the server's pid."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", factory_path, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--log-level", "warning", "--no-access-log", "--loop", "uvloop", "--http", "httptools"]
    with _running(command, port) as server:
        yield server


@contextlib.contextmanager
def served_module(module: str) -> Iterator[int]:
    """Run `python -m module PORT` (a server that takes the port it listens on) in a child process; yield the port."""
    with served_module_process(module) as server:
        yield server.port


@contextlib.contextmanager
def served_module_process(module: str) -> Iterator[Served]:
    """`served_module`, yielding the port and the server's pid."""
    port = free_port()
    with _running([sys.executable, "-m", module, str(port)], port) as server:
        yield server


@contextlib.contextmanager
def _running(command: list[str], port: int) -> Iterator[Served]:
    proc = subprocess.Popen(command)
    try:
        wait_for_port(port, alive=proc)
        yield Served(port, proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)
