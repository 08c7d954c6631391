"""Recovery: bring the CommitLog, ConsumeQueues and IndexFile back to one consistent state.

- Clean stop (no `abort` file, a valid checkpoint): the log ends where the
  checkpoint says; nothing is scanned.
- Crash (an `abort` file, or no valid checkpoint): every record from the
  checkpoint's dispatch offset on is validated (magic, length, CRC) and
  dispatched again to its ConsumeQueue and the index; the log ends before the
  first record that fails, and everything from there is zeroed or deleted.
  ConsumeQueue tails whose records are gone are dropped when a queue is opened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from libs.store.checkpoint import Checkpoint
from libs.store.commitlog import CommitLog, ScannedRecord
from libs.store.config import StoreConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    clean: bool
    commitlog_end: int
    scanned_from: int
    records_dispatched: int
    bytes_after_end: int
    """Bytes of the last segment past the end of the log, zeroed where they were not already."""
    seconds: float


def recover(config: StoreConfig, commitlog: CommitLog, dispatch: Callable[[ScannedRecord], None]) -> RecoveryReport:
    started = time.monotonic()
    checkpoint = Checkpoint.read(config.checkpoint_path)
    crashed = config.abort_path.exists() or checkpoint is None
    commitlog.load()
    if not commitlog.segments:
        return RecoveryReport(True, 0, 0, 0, 0, time.monotonic() - started)
    if not crashed and checkpoint is not None:
        commitlog.write_offset = commitlog.flushed_offset = checkpoint.commitlog_offset
        return RecoveryReport(True, checkpoint.commitlog_offset, checkpoint.commitlog_offset, 0, 0, 0.0)
    start = max(commitlog.min_offset, checkpoint.dispatch_offset if checkpoint else 0)
    end = start
    dispatched = 0
    for record in commitlog.scan(start):
        dispatch(record)
        end = record.physical_offset + record.size
        dispatched += 1
    high_water = commitlog.segments[-1].end_offset
    commitlog.truncate(end)
    # What the crash left in the page cache may not be on disk yet: the next
    # flush syncs every segment from the scan's start before a checkpoint.
    commitlog.flushed_offset = start
    report = RecoveryReport(False, end, start, dispatched, high_water - end, time.monotonic() - started)
    log.warning(
        "recovered after an unclean stop: re-dispatched %d records from offset %d; the log ends at %d (%.2f s)",
        dispatched,
        start,
        end,
        report.seconds,
    )
    return report
