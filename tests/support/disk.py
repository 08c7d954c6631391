"""A CommitLog disk that stops confirming writes: fdatasync hangs until released.

For tests of SYNC_FLUSH timeouts on in-process brokers: the records are written
(mmap) but their sync does not return, as with a stalled or failing disk, so
the broker's `sync_flush_timeout_ms` expires for real.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from libs.store.commitlog import SEGMENT
from libs.store.mapped_file_queue import MappedFileQueue

LONGEST_HANG = 30.0


@contextmanager
def stalled_disk(monkeypatch: pytest.MonkeyPatch, broker_name: str | None = None) -> Iterator[threading.Event]:
    """CommitLog syncs (of the broker named `broker_name`, or of all) hang until the yielded event is set.

    What hangs is the sync of the CommitLog's segments (a plain MappedFileQueue): CommitLog itself may be compiled
    (libs.compiled), and a compiled class's methods cannot be replaced.
    """
    release = threading.Event()
    real_sync = MappedFileQueue.sync

    def sync(self: MappedFileQueue, start: int = 0, upto: int | None = None) -> None:
        if self.what == SEGMENT and (broker_name is None or broker_name in self.directory.parts):
            release.wait(LONGEST_HANG)
        real_sync(self, start, upto)

    monkeypatch.setattr(MappedFileQueue, "sync", sync)
    try:
        yield release
    finally:
        release.set()
