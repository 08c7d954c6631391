"""Recovery: bring the CommitLog, ConsumeQueues and IndexFile back to one consistent state.

- Clean stop (no `abort` file, a valid checkpoint): the log ends where the
  checkpoint says; nothing is scanned.
- Crash (an `abort` file, or no valid checkpoint): every record from the
  checkpoint's dispatch offset on is validated (magic, length, CRC) and
  dispatched again to its ConsumeQueue and the index (whose entries from that
  offset on are dropped first, see `Redispatch.begin`); the log ends before the
  first record that fails, and everything from there is zeroed or deleted.
  ConsumeQueue tails whose records are gone are dropped when a queue is opened.
- But only a torn tail is cut. When the record the scan stopped at is followed
  by a record of this log (see CommitLog.next_valid), or lies below the offset
  the checkpoint says was durable, it is damage in the middle of the log (a
  flipped bit): recovery raises `DamagedLog`, naming the segment, the offset and
  the repair command, and changes nothing. `petrel store repair` (libs.store.tools.repair)
  puts a quarantine filler in its place, which the next scan passes over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from libs.codec import MIN_RECORD_SIZE, RecordHead
from libs.store.checkpoint import Checkpoint
from libs.store.commitlog import CommitLog, ScannedRecord
from libs.store.config import StoreConfig
from libs.store.consume_queue import ConsumeQueue
from libs.store.queue_table import ConsumeQueueTable

Dispatch = Callable[[RecordHead, int, int, int, int], None]
"""(head, queue_offset, physical_offset, size, store_timestamp): a record's unit, index keys and listeners."""

log = logging.getLogger(__name__)


class DamagedLog(Exception):
    """A damaged record with good records after it: the store is not opened (a plain Exception: stops a start)."""

    def __init__(self, root: Path, segment: Path, offset: int, reason: str, resume: int | None, durable: int) -> None:
        after = (
            f"and records of the log follow it from offset {resume}"
            if resume is not None
            else f"below offset {durable}, which the checkpoint says was durable"
        )
        super().__init__(
            f"CommitLog segment {segment} has a damaged record at offset {offset} ({reason}), {after}: "
            f"not starting, so as not to delete them. With the broker stopped, run `petrel store repair {root}` "
            f"to move the damaged bytes to {root / 'quarantine'} and keep every record after them "
            f"(`petrel store check {root}` lists the damage)."
        )
        self.segment = segment
        self.offset = offset
        self.resume = resume


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    clean: bool
    commitlog_end: int
    scanned_from: int
    records_dispatched: int
    bytes_after_end: int
    """Bytes of the last segment past the end of the log, zeroed where they were not already."""
    seconds: float


def recover(config: StoreConfig, commitlog: CommitLog, dispatch: Redispatch) -> RecoveryReport:
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
    dispatch.begin(start)
    for record in commitlog.scan(start):
        dispatch(record)
        end = record.physical_offset + record.size
        dispatched += 1
    refuse_damage_mid_log(config, commitlog, checkpoint)
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


def refuse_damage_mid_log(config: StoreConfig, commitlog: CommitLog, checkpoint: Checkpoint | None) -> None:
    """Raise DamagedLog unless where the scan stopped is the end of the log or a torn tail."""
    stop = commitlog.scanned_to
    if stop >= commitlog.segments[-1].end_offset:
        return
    durable = checkpoint.commitlog_offset if checkpoint else 0
    resume = commitlog.next_valid(stop)
    if resume is None and stop >= durable:
        return
    segment = commitlog.segment_at(stop)
    raise DamagedLog(config.root, segment.path, stop, commitlog.damage_at(stop), resume, durable)


class Redispatch:
    """What recovery hands each scanned record: dispatched again, its queue kept dense over quarantined records."""

    def __init__(self, queues: ConsumeQueueTable, dispatch: Dispatch, unindex: Callable[[int], None]) -> None:
        self.queues = queues
        self.dispatch = dispatch
        self.unindex = unindex
        """Forgets the index entries at or past a CommitLog offset (IndexService.truncate_after)."""
        self.holes: list[tuple[int, int]] = []
        """(offset, size) of the quarantine fillers passed."""

    def begin(self, start: int) -> None:
        """Before the scan from `start`: the index forgets its entries from there on, and the scan puts them again.

        A run of a batch's index entries is written together (IndexFile.put_many: entries,
        header, slots), so a process killed in between may leave entries that no slot
        points to, of messages below the index's last offset, which `put_keys` would pass
        over as indexed already. From the checkpoint on, nothing indexed is kept unchecked.
        """
        self.unindex(start)

    def __call__(self, record: ScannedRecord) -> None:
        if record.head is None:
            self.holes.append((record.physical_offset, record.size))
            return
        queue = self.queues.get(record.head.topic, record.head.queue_id)
        if record.queue_offset > queue.max_offset and not self._fill_gap(queue, record.queue_offset):
            log.warning(
                "recovery: skipping the record at %d of %s/%d: its queue offset %d is past the queue's end %d "
                "(its topic was deleted)",
                record.physical_offset,
                record.head.topic,
                record.head.queue_id,
                record.queue_offset,
                queue.max_offset,
            )
            return
        self.dispatch(record.head, record.queue_offset, record.physical_offset, record.size, record.store_timestamp)

    def _fill_gap(self, queue: ConsumeQueue, queue_offset: int) -> bool:
        """Units for the queue's records a repair quarantined, pointing at the filler (readers pass over it)."""
        last = queue.read(queue.max_offset - 1, 1)[0][0] if queue.max_offset > queue.min_offset else -1
        holes = [hole for hole in self.holes if hole[0] > last]
        if sum(size for _, size in holes) < (queue_offset - queue.max_offset) * MIN_RECORD_SIZE:
            return False  # the quarantined bytes cannot have held that many records (say, a deleted topic's)
        physical, size = holes[-1]
        first = queue.max_offset
        for missing in range(first, queue_offset):
            self.queues.append(queue.topic, queue.queue_id, missing, physical, size, 0)
        log.warning(
            "recovery: %s/%d offsets %d to %d were quarantined", queue.topic, queue.queue_id, first, queue_offset - 1
        )
        return True
