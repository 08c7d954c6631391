"""Retention: which CommitLog segments go, and when, without taking a pending scheduled message along.

Time: a segment goes once it was last written more than `file_reserved_hours`
ago (at `delete_when_hour`). Disk pressure (`disk_max_used_ratio`): the oldest
segment goes, however young, one a tick.

Scheduled messages wait in the CommitLog (SCHEDULE_TOPIC_XXXX, the timer
topic) for as long as their delay, which may be longer than the retention. The
timer service, which knows what is still pending, sets `needed_offset` (the
lowest CommitLog offset it still needs) and re-puts ("rolls", seed 003 Q&A 1)
every pending message below `roll_below()`: those whose segment is past half its
retention, and under disk pressure those in the oldest segment. So:

- time-based deletion never deletes a segment holding a needed offset;
- disk pressure asks for the roll and waits up to `scheduled_roll_grace_seconds`
  (the roll itself needs room: with the disk full it cannot happen); then the
  segment goes, and every scheduled message in it from the needed offset on that
  no later record carries on (rolled or delivered, found by its message id) is
  logged and handed to `loss_listeners` (the broker's `delay_lost` event and metric).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from typing import Protocol

from libs.codec import decode_record
from libs.message import MessageRecord, Prop
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC
from libs.store.dispatched_log import DispatchedLog

log = logging.getLogger(__name__)


class RetainedStore(DispatchedLog, Protocol):
    """What retention reads and deletes (of libs.store.message_store.MessageStore): the log's segments, and
    below them the ConsumeQueues' and the index's files; `query_id` finds a scheduled message's later copies."""

    @property
    def clock(self) -> Callable[[], float]: ...
    def query_id(self, message_id: str, begin: int, end: int) -> list[MessageRecord]: ...


class Retention:
    def __init__(self, store: RetainedStore) -> None:
        self.store = store
        self.needed_offset: int | None = None
        """The lowest CommitLog offset a pending scheduled message is at, as last reported; None: none is."""
        self.needed_before_report: Callable[[], int | None] | None = None
        """Until the first report (`report_needed`): a conservative needed offset, asked at each deletion."""
        self._reported = False
        self.loss_listeners: list[Callable[[MessageRecord], None]] = []
        self._roll_wanted: tuple[int, float] | None = None
        """Under disk pressure: (the offset below which scheduled messages should be rolled, since when)."""

    def report_needed(self, offset: int | None) -> None:
        """The owner of the scheduled messages says which is the lowest offset it still needs."""
        self.needed_offset = offset
        self._reported = True

    def _needed(self) -> int | None:
        if not self._reported and self.needed_before_report is not None:
            return self.needed_before_report()
        return self.needed_offset

    def tick(self) -> int:
        config = self.store.config
        usage = shutil.disk_usage(config.root)
        if usage.used / usage.total > config.disk_max_used_ratio:
            return self.delete_expired(force=True)
        self._roll_wanted = None
        if config.delete_when_hour in (-1, time.localtime(self.store.clock()).tm_hour):
            return self.delete_expired()
        return 0

    def delete_expired(self, *, force: bool = False) -> int:
        """Delete segments past `file_reserved_hours` (or the oldest, when forced); how many.

        A segment holding a needed offset is kept, unless forced and its grace is over.
        """
        commitlog = self.store.commitlog
        deadline = self.store.clock() - self.store.config.file_reserved_hours * 3600
        needed = self._needed()
        deleted = 0
        while len(commitlog.segments) > 1:
            oldest = commitlog.segments[0]
            holds_needed = needed is not None and oldest.end_offset > needed
            if not force and (holds_needed or oldest.path.stat().st_mtime >= deadline):
                break
            if force and holds_needed and not self._grace_over(oldest.end_offset):
                break
            lost = self._without_copy(oldest.start_offset, oldest.end_offset, needed) if holds_needed else []
            if commitlog.delete_oldest() is None:
                break
            self._report_lost(lost)
            deleted += 1
            force = False
        if deleted:
            self._forget_below(commitlog.min_offset)
        return deleted

    def roll_below(self) -> int:
        """Pending scheduled messages below this offset should be rolled (re-put at the log's end)."""
        deadline = self.store.clock() - self.store.config.file_reserved_hours * 1800
        aged = self.store.commitlog.min_offset
        for segment in self.store.commitlog.segments[:-1]:  # never the segment being written
            if segment.path.stat().st_mtime >= deadline:
                break
            aged = segment.end_offset
        wanted = self._roll_wanted[0] if self._roll_wanted is not None else 0
        return max(aged, wanted)

    def _forget_below(self, minimum: int) -> None:
        """Every queue's minimum past `minimum`: those with files, and those whose units are all still in memory
        (between checkpoints a queue's units are written only past a backlog)."""
        queues = self.store.queues
        queues.commitlog_min = minimum
        for topic, queue_id in {*queues.on_disk(), *((q.topic, q.queue_id) for q in queues.opened())}:
            queues.get(topic, queue_id).delete_files_below(minimum)
        self.store.index.delete_files_before(minimum)

    def _grace_over(self, segment_end: int) -> bool:
        """Ask for the roll of what is below `segment_end`; True once the grace is over."""
        now = self.store.clock()
        if self._roll_wanted is None or self._roll_wanted[0] != segment_end:
            self._roll_wanted = (segment_end, now)
            log.warning("disk pressure: waiting for the scheduled messages below %d to be rolled", segment_end)
        return now - self._roll_wanted[1] >= self.store.config.scheduled_roll_grace_seconds

    def _without_copy(self, start: int, end: int, needed: int | None) -> list[MessageRecord]:
        """Scheduled records in [max(start, needed), end) that no later record carries on."""
        lost = []
        for scanned in self.store.commitlog.scan(max(start, needed or 0)):
            if scanned.physical_offset >= end:
                break
            if scanned.head is None or scanned.head.topic not in (SCHEDULE_TOPIC, TIMER_TOPIC):
                continue
            record = decode_record(self.store.commitlog.read_record(scanned.physical_offset))
            copies = self.store.query_id(record.message_id, 0, 2**62) if record.message_id else []
            if not any(copy.physical_offset >= end for copy in copies):
                lost.append(record)
        return lost

    def _report_lost(self, lost: list[MessageRecord]) -> None:
        self._roll_wanted = None
        for record in lost:
            log.error(
                "disk pressure deleted the pending scheduled message %s (for %s, due %s) at %d: it is lost",
                record.message_id,
                record.properties.get(Prop.REAL_TOPIC),
                record.properties.get(Prop.TIMER_DELIVER_MS),
                record.physical_offset,
            )
            for listener in self.loss_listeners:
                listener(record)
