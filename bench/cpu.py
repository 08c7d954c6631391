"""CPU time, from the kernel: a process's so far (/proc/PID/stat), and what the load processes a step ran used.

Sizing divides both by the messages a load moved: the servers' (each Petrel
process, the FastAPI no-op) by reading their /proc before and after, and the
load generator's, a child of the bench that has exited by then, by the
kernel's count of the CPU of waited-for children (getrusage RUSAGE_CHILDREN:
wrk, a Python load process, and the processes it started and waited for).
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def process_cpu_seconds(pid: int) -> float | None:
    """The process's CPU seconds so far (user + system); None when it is gone or not ours to read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


@dataclass(slots=True)
class Spent:
    """CPU seconds, known once the block that measures them has ended."""

    seconds: float = 0.0


@contextlib.contextmanager
def children_cpu() -> Iterator[Spent]:
    """The CPU that the child processes which ended (and were waited for) inside the block used."""
    spent = Spent()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        yield spent
    finally:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent.seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
