"""QueueScan: one pull's walk along a ConsumeQueue, from an offset to the messages its filter wants.

Units are read in order; a unit whose tag code the filter refuses is passed without
touching the CommitLog, the others' records are read and checked in full. The walk ends
when `max_count` messages (or MAX_PULL_BYTES) are found, at the queue's end, or after
`max_units` units: then the pull answers what it found, with `next_offset` where the
next pull goes on (RocketMQ's nextBeginOffset), so a filter that matches little never
makes one pull read a whole queue.

`step(until)` walks until a time (time.monotonic()) and can be called again: between
two steps the event loop runs other tasks (`MessageStore.pull_in_slices`), and each
step first checks that the queue still holds its position (retention, a deleted topic).
"""

from __future__ import annotations

import time
from typing import Final, Protocol

from libs.codec import MESSAGE_MAGIC, peek_frame, peek_head
from libs.errors import OffsetOutOfRange
from libs.filters import MessageFilter
from libs.message import Prop
from libs.store.commitlog import CommitLog
from libs.store.queue_table import ConsumeQueueTable
from libs.store.results import PullResult

MAX_PULL_BYTES: Final = 8 * 1024 * 1024
MAX_UNITS_SCANNED: Final = 16_000
"""Units one pull reads at most when the caller gives no bound."""
UNITS_READ: Final = 256
"""Units read from the ConsumeQueue file at once."""
CLOCK_EVERY: Final = 16
"""Units between two looks at the clock."""


class QueuedLog(Protocol):
    """What a scan walks (of libs.store.message_store.MessageStore): the ConsumeQueues, and the log their units
    point into."""

    @property
    def queues(self) -> ConsumeQueueTable: ...
    @property
    def commitlog(self) -> CommitLog: ...


class QueueScan:
    def __init__(
        self,
        store: QueuedLog,
        where: tuple[str, int],
        offset: int,
        max_count: int,
        message_filter: MessageFilter | None = None,
        max_units: int = MAX_UNITS_SCANNED,
    ) -> None:
        self.store = store
        self.topic, self.queue_id = where
        queue = store.queues.get(self.topic, self.queue_id)
        if not queue.min_offset <= offset <= queue.max_offset:
            raise OffsetOutOfRange(
                f"offset {offset} of {self.topic}/{self.queue_id} is outside [{queue.min_offset}, {queue.max_offset}]",
                min_offset=queue.min_offset,
                max_offset=queue.max_offset,
            )
        self.offset = offset
        self.position = offset
        self.bound = offset + max(max_units, 0)
        self.max_count = max_count
        self.message_filter = message_filter
        self.records: list[bytes] = []
        self.size = 0
        self.finished = False

    @property
    def scanned(self) -> int:
        return self.position - self.offset

    @property
    def full(self) -> bool:
        return len(self.records) >= self.max_count or self.size >= MAX_PULL_BYTES

    def step(self, until: float | None = None) -> bool:
        """Walk on until the scan is finished or `until` (time.monotonic()) has passed; True once finished."""
        queue = self.store.queues.get(self.topic, self.queue_id)
        if not queue.min_offset <= self.position <= queue.max_offset:
            self.finished = True  # the queue moved on meanwhile: the next pull says where to go on from
            return True
        limit = min(queue.max_offset, self.bound)
        while self.position < limit and not self.full:
            for unit in queue.read(self.position, min(UNITS_READ, limit - self.position)):
                self.position += 1
                self._take(*unit)
                if self.full:
                    break
                if until is not None and self.position % CLOCK_EVERY == 0 and time.monotonic() >= until:
                    return False
        self.finished = True
        return True

    def _take(self, physical: int, size: int, code: int) -> None:
        commitlog, message_filter = self.store.commitlog, self.message_filter
        if physical < commitlog.min_offset:
            return
        if message_filter is not None and not message_filter.matches_code(code):
            return
        raw = commitlog.read(physical, size)
        if peek_frame(raw)[1] != MESSAGE_MAGIC:
            return  # a quarantine filler: `petrel store repair` took a damaged record out
        if message_filter is not None and not _full_match(message_filter, raw):
            return
        self.records.append(raw)
        self.size += size

    def result(self) -> PullResult:
        queue = self.store.queues.get(self.topic, self.queue_id)
        return PullResult(self.records, self.position, queue.min_offset, queue.max_offset)


def _full_match(message_filter: MessageFilter, raw: bytes) -> bool:
    head = peek_head(raw)
    return message_filter.matches(head.properties.get(Prop.TAGS), head.properties)
