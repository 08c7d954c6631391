"""MessageStore: the storage engine as the broker uses it.

put -> CommitLog append, then dispatch (ConsumeQueue unit, IndexFile keys,
listeners such as long polling), all in the caller's thread, a run of a batch's
records at a time; under SYNC_FLUSH `put` returns only when the group commit has
the bytes on disk.
pull -> ConsumeQueue units, tag codes matched without touching the CommitLog,
then the records themselves (with the filter's full check): queue_scan.py, bounded
per pull, and in slices that let the event loop run (`pull_in_slices`).

MessageStore is the one face of the engine; parts of it live beside it:
the append of a batch (batch_append.py, reading its heads in batch_heads.py),
look-ups by key and message id, and append's DEDUP look-up (lookup.py), deletion
of old segments (retention.py), the answers PutResult, PutOutcome, PullResult
(results.py). Recovery re-dispatches one record at a time (`_dispatch`). Each part is
given the store typed as a Protocol of just what it uses (AppendTarget, IndexedLog,
QueuedLog, RetainedStore, and DispatchedLog, which the first and last extend): none imports this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from libs.codec import QUARANTINE_MAGIC, Readable, RecordHead, peek_frame, peek_head, peek_offsets
from libs.errors import CorruptRecord, FlushTimeout, OffsetOutOfRange, PetrelError
from libs.filters import MessageFilter
from libs.message import KEY_SEPARATOR, MessageRecord, Prop, tags_code
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC
from libs.store.batch_append import BatchAppend
from libs.store.batch_heads import BatchHeads
from libs.store.budget import ScanBudget
from libs.store.commitlog import CommitLog
from libs.store.config import FlushMode, StoreConfig
from libs.store.consume_queue import UNIT
from libs.store.flush import Flusher
from libs.store.index_service import IndexService
from libs.store.lookup import MessageLookup
from libs.store.mapped_file import fsync_directory
from libs.store.queue_scan import MAX_PULL_BYTES, MAX_UNITS_SCANNED, QueueScan
from libs.store.queue_table import ConsumeQueueTable
from libs.store.recovery import RecoveryReport, Redispatch, recover
from libs.store.replica import ReplicaWriter
from libs.store.results import KeyQueryResult, PullResult, PutOutcome, PutResult, refused_after_append
from libs.store.retention import Retention

__all__ = [
    "MAX_PULL_BYTES",
    "MAX_UNITS_SCANNED",
    "DispatchListener",
    "KeyQueryResult",
    "MessageStore",
    "PullResult",
    "PutOutcome",
    "PutResult",
    "unit_code",
]
"""The store's answers (results.py) are exported from here too, with the store that gives them."""

log = logging.getLogger(__name__)

DispatchListener = Callable[[str, int, int, int], None]
"""(topic, queue_id, queue_offset, tags_code), called after each message is dispatched."""


class MessageStore:
    def __init__(
        self,
        config: StoreConfig,
        store_host: str = "127.0.0.1:0",
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        """`clock`: the wall clock of born and stored times, retention and checkpoints' stamps; `monotonic` times
        intervals (the flusher's checkpoints), so a wall-clock step neither stops nor bunches them."""
        self.config = config
        self.store_host = store_host
        self.clock = clock
        self.commitlog = CommitLog(config.commitlog_dir, config.segment_size)
        self.index = IndexService(config.index_dir, config.index_slot_count, config.index_max_entries, clock=clock)
        self.queues = ConsumeQueueTable(
            config.consumequeue_dir, config.cq_units_per_file, config.max_open_cq_files, self._is_ours
        )
        self.listeners: list[DispatchListener] = []
        self.flusher = Flusher(config, self.commitlog, self.queues, self.index.flush, clock, monotonic)
        self._recovering = False
        self.index_failures = 0
        self.retention = Retention(self)
        self.lookup = MessageLookup(self)
        self.appender = BatchAppend(self)
        self._replica: ReplicaWriter | None = None
        self.replication_wait: Callable[[int], Awaitable[None]] | None = None
        """A SYNC_MASTER's: each put waits on it with its log end, after its own flush (services.broker.in_sync)."""

    # ---- lifecycle -----------------------------------------------------------------------

    def open(self) -> RecoveryReport:
        self.config.root.mkdir(parents=True, exist_ok=True)
        self.index.load()
        self._recovering = True
        try:
            report = recover(
                self.config, self.commitlog, Redispatch(self.queues, self._dispatch, self.index.truncate_after)
            )
        finally:
            self._recovering = False
        self.queues.commitlog_min = self.commitlog.min_offset
        if not report.clean:
            self.index.truncate_after(report.commitlog_end)
            # Re-dispatched units go to their files first, so that the tail check
            # below sees them, and drops only units whose records are gone.
            self.queues.write_pending()
            for queue in self.queues.opened():
                queue.load(self._is_ours, self.commitlog.min_offset)
        self.config.abort_path.touch()
        fsync_directory(self.config.root)
        return report

    def start(self) -> None:
        self.flusher.start()

    async def close(self) -> None:
        await self.flusher.stop()
        self.index.close()
        self.queues.close()
        self.commitlog.close()
        if self.flusher.failure is None:
            self.config.abort_path.unlink(missing_ok=True)
        # else: what was written after the last checkpoint may not be on disk; the next start must validate it

    # ---- writing -------------------------------------------------------------------------

    async def put(self, batch: Readable) -> PutOutcome:
        """Store the batch; under SYNC_FLUSH, once on disk (FlushTimeout when the disk does not confirm in time)."""
        outcome = await self.put_reporting(batch)
        if outcome.not_durable is not None:
            raise outcome.not_durable
        return outcome

    async def put_reporting(
        self, batch: Readable, *, dedupe: bool = False, heads: BatchHeads | None = None
    ) -> PutOutcome:
        """As `put`, but a flush timeout comes back in `not_durable`: the records ARE stored, never to be sent again.

        `dedupe`: a record marked DEDUP is answered with the copy stored before, if any (see lookup.py).
        `heads`: read_heads(batch), when the caller read them already (a broker checks each record's topic first).
        """
        outcome = self.append(batch, dedupe=dedupe, heads=heads)
        if not outcome.stored:
            return outcome
        end = self.commitlog.write_offset
        not_durable = None
        if self.config.flush_mode is FlushMode.SYNC_FLUSH:
            try:
                await self.flusher.wait_durable(end)
            except FlushTimeout as exc:
                not_durable = exc
        if self.replication_wait is not None:
            # A flush timeout waits too: its answer says "stored", which a master that lost its lease or its
            # slaves may not say. Refused now, the records are appended all the same: the refusal says so.
            try:
                await self.replication_wait(end)
            except PetrelError as exc:
                raise refused_after_append(exc, outcome) from None
        return outcome if not_durable is None else replace(outcome, not_durable=not_durable)

    def append(self, batch: Readable, *, dedupe: bool = False, heads: BatchHeads | None = None) -> PutOutcome:
        """Store every record of the batch (records laid end to end), in order (see batch_append.py)."""
        return self.appender.append(batch, dedupe=dedupe, read=heads)

    def replicate(self, offset: int, chunk: bytes) -> int:
        """A slave's write: the master's `chunk` of its CommitLog at `offset`, dispatched; the log's new end."""
        if self._replica is None:
            self._replica = ReplicaWriter(
                self.commitlog, Redispatch(self.queues, self._dispatch, self.index.truncate_after)
            )
        return self._replica.write(offset, chunk)

    def _dispatch(self, head: RecordHead, queue_offset: int, physical: int, size: int, stored_at: int) -> None:
        """One record dispatched again by recovery (recovery.Redispatch): its unit, index keys and listeners."""
        code = unit_code(head)
        self.queues.append(head.topic, head.queue_id, queue_offset, physical, size, code)
        keys = [k for k in head.properties.get(Prop.KEYS, "").split(KEY_SEPARATOR) if k]
        try:
            self.index.put_keys(head.topic, keys, head.properties.get(Prop.UNIQ_KEY), physical, stored_at)
        except (PetrelError, OSError):
            # The message is stored and queued: a failed index write must not make
            # its put look failed (the producer would send a duplicate).
            self.index_failures += 1
            log.exception("indexing the message at %d failed; it is stored but not findable by key", physical)
        for listener in self.listeners:
            listener(head.topic, head.queue_id, queue_offset, code)

    @property
    def read_only(self) -> bool:
        return self.flusher.failure is not None

    # ---- reading -------------------------------------------------------------------------

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        queue = self.queues.get(topic, queue_id)
        return queue.min_offset, queue.max_offset

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        message_filter: MessageFilter | None = None,
        max_units: int = MAX_UNITS_SCANNED,
    ) -> PullResult:
        """Up to `max_count` messages the filter wants from `offset` on, reading at most `max_units` units."""
        scan = QueueScan(self, (topic, queue_id), offset, max_count, message_filter, max_units)
        scan.step()
        return scan.result()

    async def pull_in_slices(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        message_filter: MessageFilter | None,
        budget: ScanBudget,
    ) -> PullResult:
        """As `pull`, reading at most `budget.max_steps` units, and letting the event loop run between slices."""
        spending = budget.start()
        scan = QueueScan(self, (topic, queue_id), offset, max_count, message_filter, budget.max_steps)
        while not scan.step(spending.slice_end):
            await spending.turn()
        return scan.result()

    def units(self, topic: str, queue_id: int, offset: int, max_count: int) -> tuple[bytes, PullResult]:
        """ConsumeQueue units from `offset` (20 bytes each, see consume_queue), without reading records."""
        queue = self.queues.get(topic, queue_id)
        if not queue.min_offset <= offset <= queue.max_offset:
            raise OffsetOutOfRange(
                f"offset {offset} of {topic}/{queue_id} is outside [{queue.min_offset}, {queue.max_offset}]",
                min_offset=queue.min_offset,
                max_offset=queue.max_offset,
            )
        units = queue.read(offset, max_count)
        raw = b"".join(UNIT.pack(*unit) for unit in units)
        return raw, PullResult([], offset + len(units), queue.min_offset, queue.max_offset)

    def read(self, physical_offset: int) -> bytes:
        return self.commitlog.read_record(physical_offset)

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after `timestamp_ms`."""
        queue = self.queues.get(topic, queue_id)
        low, high = queue.min_offset, queue.max_offset
        while low < high:
            mid = (low + high) // 2
            physical, _, _ = queue.read(mid, 1)[0]
            if self.commitlog.stored_at(physical) < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        return low

    def _is_ours(self, topic: str, queue_id: int, physical: int, size: int, queue_offset: int) -> bool:
        """Is the record at `physical` this queue's message at `queue_offset`? (tail check at open)"""
        if self._recovering:
            return True
        if not self.commitlog.min_offset <= physical or physical + size > self.commitlog.write_offset:
            return False
        segment = self.commitlog.segment_at(physical)
        position = physical - segment.start_offset
        if peek_frame(segment.map, position) == (size, QUARANTINE_MAGIC):
            return True  # a unit of a record a repair quarantined
        try:
            head = peek_head(segment.map, position)
        except CorruptRecord:
            return False
        stamped_queue_offset, stamped_physical = peek_offsets(segment.map, position)
        return (
            head.total_size == size
            and head.topic == topic
            and head.queue_id == queue_id
            and stamped_queue_offset == queue_offset
            and stamped_physical == physical
        )

    async def delete_topic(self, topic: str) -> None:
        """Delete the topic's ConsumeQueues: a topic created again with the name starts empty.

        A checkpoint comes first, so that recovery after a later crash never
        re-dispatches the deleted topic's messages into queues that are gone.
        """
        await self.flusher.flush(checkpoint=True)
        self.queues.delete_topic(topic)

    # ---- look-ups by key and message id (see lookup.py) ----------------------------------

    def query_key(self, topic: str, key: str, begin: int, end: int, limit: int = 32) -> list[MessageRecord]:
        return self.lookup.query_key(topic, key, begin, end, limit)

    async def query_key_in_slices(
        self, topic: str, key: str, begin: int, end: int, limit: int, budget: ScanBudget
    ) -> KeyQueryResult:
        """As `query_key`, bounded by `budget`, letting the event loop run between slices."""
        return await self.lookup.query_key_in_slices(topic, key, begin, end, limit, budget)

    def query_id(
        self, message_id: str, begin: int, end: int, limit: int = 32, where: Callable[[str], bool] | None = None
    ) -> list[MessageRecord]:
        """Records with this id, newest first; with `where`, only those of a topic it accepts."""
        return self.lookup.query_id(message_id, begin, end, limit, where)

    # ---- retention (see retention.py) -----------------------------------------------------

    def retention_tick(self) -> int:
        """Run by the broker every few seconds: delete what retention says is due; how many segments."""
        return self.retention.tick()

    def delete_expired(self, *, force: bool = False) -> int:
        return self.retention.delete_expired(force=force)


def unit_code(head: RecordHead) -> int:
    """The third field of a message's ConsumeQueue unit: its tag's hash code, or its due time."""
    if head.topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        due = head.properties.get(Prop.TIMER_DELIVER_MS)
        if due is not None and due.isascii() and due.isdigit():
            return int(due)
    return tags_code(head.properties.get(Prop.TAGS))
