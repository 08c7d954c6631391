"""The wall-clock step nemesis: one process's system clock jumps by an hour, and back when healed.

Every broker and nameserver of the nemesis cluster runs under Debian's `faketime` library
(libfaketime, LD_PRELOAD: what Jepsen uses for clock skew), reading its offset from a file of
its own, `<data_dir>/clock/<process>` (FAKETIME_TIMESTAMP_FILE), at every call
(FAKETIME_NO_CACHE; about 10 µs a call to time.time()). The file holds "+0" until a step writes
"+3600" or "-3600" in it, and "+0" again at the heal. Only the wall clock moves
(CLOCK_REALTIME: time.time(), datetime.now()); the monotonic clocks the leases, timeouts and
asyncio's loop count on stay true (FAKETIME_DONT_FAKE_MONOTONIC). A controller or lease timed
by the wall clock would fail a master over; due times, retention and born timestamps read it.

libfaketime 0.9.10 (Debian 12) with FAKETIME_DONT_FAKE_MONOTONIC makes Python's time.sleep fail
with EINVAL (its clock_nanosleep on the monotonic clock), even at "+0"; asyncio's timers, thread
events and queue timeouts work. No Petrel process calls time.sleep; the stalled-disk wrapper,
which runs under it too, waits on an Event (a time.sleep there made the store read-only).
"""

from __future__ import annotations

import glob
from collections.abc import Iterable
from pathlib import Path

PACKAGE = "faketime"
LIBRARY_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"
"""Where Debian's libfaketime puts its library (the multiarch directory differs by machine)."""
STEP_SECONDS = 3600


class FaketimeNotAvailable(RuntimeError):
    pass


def library() -> str:
    """libfaketime's path, or FaketimeNotAvailable naming the package to install."""
    found = sorted(glob.glob(LIBRARY_GLOB))
    if not found:
        raise FaketimeNotAvailable(
            f"libfaketime is not installed (no {LIBRARY_GLOB}): install Debian's {PACKAGE} "
            f"(`apt-get install -y {PACKAGE}`; `make test` does it when run as root)"
        )
    return found[0]


def clock_file(data_dir: Path, process: str) -> Path:
    return data_dir / "clock" / process


def clock_env(data_dir: Path, process: str) -> dict[str, str]:
    """What a process needs in its environment to run on its own steppable wall clock (its file made, at "+0")."""
    path = clock_file(data_dir, process)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("+0\n")
    return {
        "LD_PRELOAD": library(),
        "FAKETIME_TIMESTAMP_FILE": str(path),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def steppable(data_dir: Path, specs: Iterable[tuple[str, dict[str, str]]]) -> None:
    """Each (process name, its environment) given runs on a steppable clock from its next start."""
    for name, env in specs:
        env.update(clock_env(data_dir, name))


def set_offset(data_dir: Path, process: str, seconds: int) -> None:
    """The process's wall clock is `seconds` off the true one from its next reading on (0: true again)."""
    path = clock_file(data_dir, process)
    temporary = path.with_suffix(".next")
    temporary.write_text(f"{seconds:+d}\n")
    temporary.replace(path)  # never a half-written file: libfaketime reads it at any moment


def offset_of(data_dir: Path, process: str) -> int:
    return int(clock_file(data_dir, process).read_text().strip() or 0)
