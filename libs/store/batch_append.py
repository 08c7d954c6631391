"""BatchAppend: how MessageStore.append stores a batch, a run of records at a time.

The batch's heads are read in one pass (batch_heads.py). Its records are then stored
in runs: as many consecutive records as fit in the CommitLog segment being written
(a record marked DEDUP, under `dedupe`, is looked up first and is a run of its own,
so that it finds the copies stored just before it). One run:

- space is reserved once: the segment rolls before the run (the blank filler ends the
  old one, as for a single record), never inside it;
- the run's bytes are copied once into a staging buffer, where each record is stamped
  (queue offset, CommitLog offset, store timestamp and host, CRC) with precomputed
  structs, then copied into the segment record by record, in order. So the segment
  never holds a record that is not stamped: a copy that still carried the producer's
  CRC would pass recovery's check as a record at queue offset 0. A process killed in
  the middle of a batch leaves whole stamped records followed by at most one torn one,
  the torn tail recovery cuts off (one slice for the run would leave the order in
  which its bytes land to memcpy);
- each queue's units are appended in one write, the index entries in one call
  (IndexFile.put_many), the listeners called once per record, in order.

A failure stores the records before it and reports the rest as not tried (PutOutcome).
All records of a run get one store timestamp.
"""

from __future__ import annotations

import logging
import mmap
import shutil
import time
import zlib
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from libs.codec import (
    BLANK_MIN_SIZE,
    CRC_AT,
    CRC_START,
    QUEUE_OFFSET_AT,
    STAMP_OFFSETS,
    STAMP_STORE,
    STORE_TIMESTAMP_AT,
    U32,
    Readable,
    pack_host,
)
from libs.errors import PetrelError, StoreFull, StoreReadOnly
from libs.store.batch_heads import BatchHeads, Head, read_heads
from libs.store.consume_queue import UNIT, ConsumeQueue
from libs.store.dispatched_log import DispatchedLog
from libs.store.flush import Flusher
from libs.store.lookup import MessageLookup
from libs.store.results import PutOutcome, PutResult

log = logging.getLogger(__name__)

STAMP_END = STORE_TIMESTAMP_AT + STAMP_STORE.size
QueueKey = tuple[str, int]


@dataclass(slots=True)
class _DiskCheck:
    ratio: float = 0.0
    checked_at: float = field(default=-1e9)


class _QueueRun:
    """A queue's part of one run: its next offset, and the units of its records."""

    __slots__ = ("next_offset", "queue", "units")

    def __init__(self, queue: ConsumeQueue) -> None:
        self.queue = queue
        self.next_offset = queue.max_offset
        self.units = bytearray()


class AppendTarget(DispatchedLog, Protocol):
    """The parts of the store (libs.store.message_store.MessageStore) a batch is appended to."""

    @property
    def store_host(self) -> str: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def lookup(self) -> MessageLookup: ...
    @property
    def flusher(self) -> Flusher: ...
    @property
    def listeners(self) -> Sequence[Callable[[str, int, int, int], None]]: ...

    index_failures: int
    """Index writes that failed (their messages stored and queued): counted here."""


class BatchAppend:
    def __init__(self, store: AppendTarget) -> None:
        self.store = store
        self._disk = _DiskCheck()
        self._stamps: dict[int, bytes] = {}

    def append(self, batch: Readable, *, dedupe: bool, read: BatchHeads | None = None) -> PutOutcome:
        """Store every record of the batch (records laid end to end), in order; `read`: the batch's heads, read
        before (read_heads), else read here."""
        stored: list[PutResult] = []
        try:
            self._check_writable()
            if read is None or read.source is not batch:
                read = read_heads(batch)
            heads, first = read.heads, 0
            while first < len(heads):
                end = _run_end(heads, first) if dedupe else len(heads)
                if end == first:  # a DEDUP record: answered by its stored copy, if there is one
                    _, (topic, _), _, message_id, token, _ = heads[first]
                    copy = self.store.lookup.stored_copy(topic, message_id, token)
                    if copy is not None:
                        stored.append(copy)
                        first += 1
                        continue
                    end = first + 1
                self._check_disk()  # after the look-up: a full disk still answers a copy it holds
                first = self._store_run(batch, read, (first, end), stored)
            if read.failure is not None:
                raise read.failure
        except PetrelError as exc:
            return PutOutcome(stored, exc)
        return PutOutcome(stored)

    def _store_run(
        self,
        batch: Readable,
        read: BatchHeads,
        run: tuple[int, int],
        stored: list[PutResult],
    ) -> int:
        """Store the records [first, end) of the batch, as many as fit in the segment; where it stopped."""
        first, end = run
        commitlog = self.store.commitlog
        tables = self.store.queues
        runs: dict[QueueKey, _QueueRun] = {}
        for key in read.queues:  # opened before anything is written: opening a queue reads its files
            runs[key] = _QueueRun(tables.get(*key))
        segment, position = commitlog.reserve(read.heads[first][0])
        at = read.ends[first - 1] if first else 0
        room = segment.size - position - BLANK_MIN_SIZE
        stop = bisect_right(read.ends, at + room, first, end)  # > first: reserve says the first fits
        now = int(self.store.clock() * 1000)
        staging = bytearray(memoryview(batch)[at : read.ends[stop - 1]])
        physical = segment.start_offset + position
        heads = read.heads[first:stop]
        index = self._stamp(staging, heads, runs, (segment.map, position, physical), now, stored)
        commitlog.write_offset = physical + len(staging)
        self._dispatch(runs, index, now, heads, stored[len(stored) - len(heads) :])
        return stop

    def _stamp(
        self,
        staging: bytearray,
        heads: list[Head],
        queues: dict[QueueKey, _QueueRun],
        where: tuple[mmap.mmap, int, int],
        now: int,
        stored: list[PutResult],
    ) -> tuple[list[int], list[int]]:
        """Stamp each record in `staging` and copy it to its place (segment map, position, CommitLog offset of
        the first); their units go to `queues`, their results to `stored`; their index entries are answered."""
        target, position, physical = where
        view = memoryview(staging)
        stamp = self._stamps.get(now)
        if stamp is None:  # a new millisecond: the store fields of its records
            self._stamps = {now: (stamp := STAMP_STORE.pack(now, pack_host(self.store.store_host)))}
        pack_offsets, pack_crc, pack_unit, crc32 = STAMP_OFFSETS.pack_into, U32.pack_into, UNIT.pack, zlib.crc32
        make_result = PutResult._make
        hashes: list[int] = []
        offsets: list[int] = []
        at = 0
        for size, key, code, message_id, _, key_hashes in heads:
            run = queues[key]
            queue_offset = run.next_offset
            run.next_offset = queue_offset + 1
            phy = physical + at
            pack_offsets(staging, at + QUEUE_OFFSET_AT, queue_offset, phy)
            staging[at + STORE_TIMESTAMP_AT : at + STAMP_END] = stamp
            pack_crc(staging, at + CRC_AT, crc32(view[at + CRC_START : at + size]))
            target[position + at : position + at + size] = view[at : at + size]
            run.units += pack_unit(phy, size, code)
            hashes += key_hashes
            offsets += [phy] * len(key_hashes)
            stored.append(make_result((key[0], key[1], queue_offset, phy, size, now, message_id, False, None)))
            at += size
        view.release()
        return hashes, offsets

    def _dispatch(
        self,
        queues: dict[QueueKey, _QueueRun],
        index: tuple[list[int], list[int]],
        now: int,
        heads: list[Head],
        results: list[PutResult],
    ) -> None:
        """The run's units, one write per queue; its index entries; the listeners, once per record."""
        store = self.store
        for run in queues.values():
            if run.units:
                store.queues.extend(run.queue, run.units, run.next_offset - run.queue.max_offset)
        hashes, offsets = index
        if hashes:
            try:
                store.index.put_hashes(hashes, offsets, now)
            except (PetrelError, OSError):
                # The messages are stored and queued: a failed index write must not make
                # their put look failed (the producer would send duplicates).
                store.index_failures += 1
                log.exception(
                    "indexing the messages at %d to %d failed; they are stored but not findable by key",
                    offsets[0],
                    offsets[-1],
                )
        for listener in store.listeners:
            for result, head in zip(results, heads, strict=True):
                listener(result.topic, result.queue_id, result.queue_offset, head[2])

    # ---- refusals ------------------------------------------------------------------------

    def _check_writable(self) -> None:
        failure = self.store.flusher.failure
        if failure is not None:
            raise StoreReadOnly(
                f"a sync of the store under {self.store.config.root} failed ({failure}); it takes no more writes "
                "until the broker is restarted (reads go on): restart the broker once the disk is checked"
            )

    def _check_disk(self) -> None:
        config = self.store.config
        now = time.monotonic()
        if now - self._disk.checked_at > 1.0:
            usage = shutil.disk_usage(config.root)
            self._disk = _DiskCheck(usage.used / usage.total, now)
        if self._disk.ratio >= config.disk_refuse_ratio:
            raise StoreFull(
                f"the disk under {config.root} is {self._disk.ratio:.0%} full; writes are refused above "
                f"{config.disk_refuse_ratio:.0%} (reads go on)"
            )


def _run_end(heads: list[Head], first: int) -> int:
    """Under `dedupe`, where the run from `first` ends: before the next record to look up (`first`: look it up)."""
    for i in range(first, len(heads)):
        _, _, _, message_id, token, _ = heads[i]
        if message_id and token:
            return i
    return len(heads)
