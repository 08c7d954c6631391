"""The stalled-disk nemesis: the master's CommitLog syncs hang while a file exists, as on a stalled disk.

`python -m bench.nemesis.disk` runs a broker as `python -m services.broker` does, with
CommitLog.sync made to wait while the file named by NEMESIS_DISK_STALL_FILE exists (what
tests/support/disk.py does to an in-process broker): the records are written (mmap) but their
sync does not return. It is the nemesis cluster's way of starting its brokers, a test-side
wrapper, never a setting of the broker. The nemesis brokers run SYNC_FLUSH with a flush timeout
shorter than the stall (`BROKER_ENV`), so a stall answers the sends under way 503 flush-timeout
with `maybe_stored` (stored, not durable yet); the writers send them again with the same
Idempotency-Key, which must answer the copy already stored, never store a second.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

STALL_FILE_ENV = "NEMESIS_DISK_STALL_FILE"
"""Not PETREL_: no setting of the broker's."""
MODULE = "bench.nemesis.disk"
LONGEST_STALL_S = 60.0
"""A stall left behind by a run that died ends by itself after this."""
POLL_S = 0.02
BROKER_ENV = {"PETREL_BROKER_FLUSH_MODE": "SYNC_FLUSH", "PETREL_BROKER_SYNC_FLUSH_TIMEOUT_MS": "2000"}


def stall_file(data_dir: Path, process: str) -> Path:
    return data_dir / "disk" / f"{process}.stalled"


def stallable(data_dir: Path, brokers: Iterable[tuple[str, dict[str, str]]]) -> str:
    """Each (broker process name, its environment) given gets its stall file's name and SYNC_FLUSH; the module
    to run them with instead of services.broker."""
    for name, env in brokers:
        path = stall_file(data_dir, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        env.update(BROKER_ENV | {STALL_FILE_ENV: str(path)})
    return MODULE


def stall(data_dir: Path, process: str) -> None:
    stall_file(data_dir, process).touch()


def release(data_dir: Path, process: str) -> None:
    stall_file(data_dir, process).unlink(missing_ok=True)


def main() -> None:
    from libs.store.commitlog import CommitLog
    from services.broker.__main__ import main as broker_main

    stalled = Path(os.environ[STALL_FILE_ENV])
    real_sync = CommitLog.sync
    never = threading.Event()

    def sync(self: CommitLog, upto: int) -> None:
        given_up = time.monotonic() + LONGEST_STALL_S
        while stalled.exists() and time.monotonic() < given_up:
            never.wait(POLL_S)  # not time.sleep: under libfaketime (bench.nemesis.clock) it fails with EINVAL
        real_sync(self, upto)

    CommitLog.sync = sync  # type: ignore[method-assign]
    broker_main()


if __name__ == "__main__":
    main()
