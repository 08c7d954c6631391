"""Replication's two ends in the store: a master reads its CommitLog in chunks, a slave writes them in place.

A chunk is whole entries of one segment, as they lie on the master's disk: records, the
blank filler that ends a segment, quarantine fillers. A slave writes a chunk at the same
offset it has on the master, so both logs hold the same bytes at the same offsets, then
dispatches its records as recovery does (libs.store.recovery.Redispatch): ConsumeQueue
units at the queue offsets the master stamped, index entries, the store's listeners (a
long poll on the slave wakes). Every record's CRC is checked before anything of the chunk
counts: a chunk damaged on its way is zeroed again and refused, and the slave asks again
from where its log ends.

A slave's log ends where its last whole chunk ends; after a crash, recovery finds that end
as for any store, and replication resumes from it.
"""

from __future__ import annotations

from libs.codec import peek_frame
from libs.errors import CorruptRecord, OffsetOutOfRange, ReplicaDiverged
from libs.store.checkpoint import Checkpoint
from libs.store.commitlog import CommitLog
from libs.store.dispatched_log import DispatchedLog
from libs.store.mapped_file import MappedFile
from libs.store.recovery import Redispatch

MAX_CHUNK_BYTES = 1024 * 1024
"""What a master sends at most in one chunk (a record larger than that goes alone)."""


def read_chunk(commitlog: CommitLog, start: int, max_bytes: int = MAX_CHUNK_BYTES) -> bytes:
    """Whole entries from `start` (an entry's first byte) up to `max_bytes`, within one segment; b"" at the end.

    OffsetOutOfRange when `start` is below the oldest segment (retention deleted it) or past the log's end.
    """
    if start == commitlog.write_offset:
        return b""
    if start > commitlog.write_offset:
        raise OffsetOutOfRange(
            f"CommitLog offset {start} is past the end of the log, {commitlog.write_offset}",
            min_offset=commitlog.min_offset,
            max_offset=commitlog.write_offset,
        )
    segment = commitlog.segment_at(start)
    position = start - segment.start_offset
    end = min(segment.size, commitlog.write_offset - segment.start_offset)
    limit = position + max_bytes
    cut = position
    while cut < end:
        total, _ = peek_frame(segment.map, cut)
        if cut + total > limit and cut > position:
            break
        cut += total
    return bytes(segment.map[position:cut])


class ReplicaWriter:
    """Writes a master's chunks into a slave's log, at the master's offsets, and dispatches their records."""

    def __init__(self, commitlog: CommitLog, redispatch: Redispatch) -> None:
        self.commitlog = commitlog
        self.redispatch = redispatch

    def write(self, offset: int, chunk: bytes) -> int:
        """Write `chunk` where this log ends (`offset` must be that end) and dispatch it; the log's new end."""
        log = self.commitlog
        if not log.segments and offset % log.segment_size == 0:
            log.write_offset = log.flushed_offset = offset  # an empty log begins where the master's does
        if offset != log.write_offset:
            raise ReplicaDiverged(f"the chunk starts at {offset}, this log ends at {log.write_offset}")
        if not chunk:
            return offset
        segment = self._segment_for(offset)
        position = offset - segment.start_offset
        end = offset + len(chunk)
        if position + len(chunk) > segment.size:
            raise CorruptRecord(offset, f"a {len(chunk)}-byte chunk does not fit in its segment at {position}")
        segment.map[position : position + len(chunk)] = chunk
        records = []
        for record in log.scan(offset):
            if record.physical_offset >= end:
                break
            records.append(record)
        if min(log.scanned_to, end) != end or (records and records[-1].physical_offset + records[-1].size > end):
            segment.map[position : position + len(chunk)] = bytes(len(chunk))
            raise CorruptRecord(log.scanned_to, "the chunk from the master does not hold whole, valid records")
        for record in records:
            self.redispatch(record)
        log.write_offset = end
        return end

    def _segment_for(self, offset: int) -> MappedFile:
        """The segment `offset` is in; a new one when the log ends at a segment's end (or is empty)."""
        log = self.commitlog
        if log.segments and offset < log.segments[-1].end_offset:
            return log.segment_at(offset)
        return log.files.create(offset)


def truncate_log(store: DispatchedLog, offset: int) -> int:
    """Forget the log from `offset` on (a returning master's unreplicated tail); the bytes dropped.

    Called on an opened store before it is started (no flush, no put): the CommitLog is cut and
    synced, every ConsumeQueue drops its units past the cut, the index its entries, and the
    checkpoint goes back to the cut, so a crash right after recovers from there.
    """
    log_ = store.commitlog
    if offset >= log_.write_offset:
        return 0
    dropped = log_.write_offset - offset
    # The checkpoint goes back first: killed at any step after it, recovery scans from below the cut over the
    # log as it then is, and the next start cuts again. Cut first, a kill would leave recovery starting past
    # the cut, over zeroed bytes, and the log would go on from there.
    old = Checkpoint.read(store.config.checkpoint_path)
    if old is not None and old.commitlog_offset > offset:
        lowered = Checkpoint(offset, min(old.dispatch_offset, offset), old.timestamp)
        lowered.write(store.config.checkpoint_path)
    log_.truncate(offset)
    log_.files.sync(offset)
    store.index.truncate_after(offset)
    store.queues.write_pending()
    for topic, queue_id in list(store.queues.on_disk()):
        store.queues.get(topic, queue_id).load(store.queues.is_ours, log_.min_offset)
    return dropped
