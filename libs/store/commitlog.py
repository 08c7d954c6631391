"""CommitLog: every message of every topic, appended to one log of fixed-size segments.

The segments are a MappedFileQueue (libs.store.mapped_file_queue): named by the
20-digit CommitLog offset of their first byte, contiguous. A record never
straddles two segments: when the next record would not leave room for a blank
filler, the rest of the segment is filled with one (see libs.codec) and writing
moves on to the next segment.

One writer (the broker's event loop thread) appends; a flusher thread syncs.

Damage is told from a torn tail by what follows it (`next_valid`): after a torn
tail nothing of this log follows, while after a damaged record in the middle
(a flipped bit on disk) the next record is still there, CRC-valid and stamped
with its own offset. Recovery truncates only the former; a record `petrel store
repair` took out is a quarantine filler (libs.codec) that keeps every offset.
"""

from __future__ import annotations

import enum
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.codec import (
    BLANK_MAGIC,
    BLANK_MIN_SIZE,
    FRAME_SIZE,
    MAGIC_AT,
    MESSAGE_MAGIC,
    QUARANTINE_MAGIC,
    U32,
    RecordHead,
    computed_crc,
    crc_matches,
    encode_blank,
    encode_quarantined,
    peek_frame,
    peek_head,
    peek_offsets,
    peek_store_timestamp,
    record_size,
    stored_crc,
)
from libs.errors import CorruptRecord, InvalidMessage, OffsetOutOfRange
from libs.store.mapped_file import MappedFile
from libs.store.mapped_file_queue import BrokenFileQueue, MappedFileQueue, file_name


@dataclass(frozen=True, slots=True)
class ScannedRecord:
    """A valid record met by a recovery scan, with what dispatch needs."""

    physical_offset: int
    size: int
    head: RecordHead | None
    """None for a quarantine filler: a damaged record `petrel store repair` took out."""
    queue_offset: int
    store_timestamp: int


class Found(enum.Enum):
    MESSAGE = "message"
    BLANK = "blank filler"
    QUARANTINED = "quarantine filler"


segment_name = file_name
SEGMENT: Final = "CommitLog segment"
"""What the log's MappedFileQueue calls its files, in its messages."""


class CommitLog:
    def __init__(self, directory: Path, segment_size: int) -> None:
        if segment_size < 4096:
            raise ValueError(f"a CommitLog segment must be at least 4096 bytes, not {segment_size}")
        self.directory = directory
        self.segment_size = segment_size
        self.files = MappedFileQueue(directory, segment_size, SEGMENT)
        self.write_offset = 0
        self.flushed_offset = 0
        self.scanned_to = 0
        """Where the last `scan` stopped: the end of the log, or the first record it could not read."""

    # ---- opening -------------------------------------------------------------------------

    def load(self) -> None:
        """Open the existing segments (in offset order); the write position is set by recovery."""
        try:
            self.files.load()
        except BrokenFileQueue as exc:
            raise CorruptRecord(exc.offset, exc.reason) from exc
        if self.segments:
            self.write_offset = self.flushed_offset = self.segments[0].start_offset

    @property
    def segments(self) -> list[MappedFile]:
        """The mapped segments in offset order; the last is the one being written."""
        return self.files.files

    @property
    def min_offset(self) -> int:
        start = self.files.start_offset
        return self.write_offset if start is None else start

    # ---- writing -------------------------------------------------------------------------

    def reserve(self, size: int) -> tuple[MappedFile, int]:
        """Where a record of `size` bytes goes: (segment, position in it). Rolls when needed."""
        if size + BLANK_MIN_SIZE > self.segment_size:
            raise InvalidMessage(f"a {size}-byte record does not fit in a {self.segment_size}-byte CommitLog segment")
        segment = self.segments[-1] if self.segments else self._new_segment(self.write_offset)
        position = self.write_offset - segment.start_offset
        if position + size + BLANK_MIN_SIZE > segment.size:
            following = self._new_segment(segment.end_offset)  # StoreFull here leaves the log as it was
            segment.map[position : segment.size] = encode_blank(segment.size - position)
            self.write_offset = following.start_offset
            segment, position = following, 0
        return segment, position

    def _new_segment(self, start: int) -> MappedFile:
        return self.files.create(start)

    # ---- reading -------------------------------------------------------------------------

    def segment_at(self, offset: int) -> MappedFile:
        segment = self.files.find(offset)
        if segment is None:
            raise OffsetOutOfRange(
                f"CommitLog offset {offset} is outside [{self.min_offset}, {self.write_offset})",
                min_offset=self.min_offset,
                max_offset=self.write_offset,
            )
        return segment

    def read(self, offset: int, size: int) -> bytes:
        segment = self.segment_at(offset)
        position = offset - segment.start_offset
        return segment.map[position : position + size]

    def read_record(self, offset: int) -> bytes:
        if offset >= self.write_offset:
            raise OffsetOutOfRange(f"no record at CommitLog offset {offset}; the log ends at {self.write_offset}")
        segment = self.segment_at(offset)
        position = offset - segment.start_offset
        total, blank = record_size(segment.map, position)
        if blank:
            raise CorruptRecord(offset, "a blank filler, not a message, is at this offset")
        return segment.map[position : position + total]

    def stored_at(self, offset: int) -> int:
        """The store timestamp (ms) stamped into the record at `offset`."""
        segment = self.segment_at(offset)
        return peek_store_timestamp(segment.map, offset - segment.start_offset)

    # ---- flushing ------------------------------------------------------------------------

    def sync(self, upto: int) -> None:
        """Make everything below `upto` durable (from a worker thread)."""
        self.files.sync(self.flushed_offset, upto)
        self.flushed_offset = max(self.flushed_offset, upto)

    # ---- recovery ------------------------------------------------------------------------

    def scan(self, start: int) -> Iterator[ScannedRecord]:
        """Valid records (and quarantine fillers) from `start` on; stops at the first torn, zeroed or corrupt one."""
        offset = self.scanned_to = start
        while self.segments and offset < self.segments[-1].end_offset:
            segment = self.segment_at(offset)
            position = offset - segment.start_offset
            record = _valid_record_at(segment, position)
            if record is None:
                return
            size, found = record
            if found is Found.BLANK:
                offset = self.scanned_to = segment.end_offset
                continue
            if found is Found.QUARANTINED:
                yield ScannedRecord(offset, size, None, -1, 0)
                offset = self.scanned_to = offset + size
                continue
            queue_offset, _ = peek_offsets(segment.map, position)
            stored = peek_store_timestamp(segment.map, position)
            try:
                head = peek_head(segment.map, position)
            except CorruptRecord:
                return  # framed and CRC-valid, yet its fields do not add up: the log ends before it
            yield ScannedRecord(offset, size, head, queue_offset, stored)
            offset = self.scanned_to = offset + size

    def next_valid(self, offset: int) -> int | None:
        """Where this log surely goes on after unreadable bytes at `offset`; None when nothing does (a torn tail)."""
        segment = self.segment_at(offset)
        found = next_record_in(segment.map, segment.start_offset, offset - segment.start_offset + 1)
        if found is not None:
            return segment.start_offset + found
        for later in self.segments:
            if later.start_offset > offset and surely_ours(later.map, later.start_offset, 0):
                return later.start_offset
        return None

    def damage_at(self, offset: int) -> str:
        segment = self.segment_at(offset)
        return describe_damage(segment.map, segment.start_offset, offset - segment.start_offset)

    def quarantine(self, start: int, end: int) -> bytes:
        """Replace the bytes [start, end) of one segment by a quarantine filler and sync; the bytes that were there."""
        segment = self.segment_at(start)
        position = start - segment.start_offset
        if end > segment.end_offset:
            raise ValueError(f"[{start}, {end}) is not inside segment {segment.path.name}")
        damaged = segment.map[position : end - segment.start_offset]
        segment.map[position : end - segment.start_offset] = encode_quarantined(end - start)
        segment.sync()
        return damaged

    def truncate(self, end: int) -> None:
        """Forget everything from `end` on: zero the rest of its segment, delete later segments."""
        self.files.truncate(end)
        self.write_offset = end
        self.flushed_offset = min(self.flushed_offset, end)

    # ---- retention -----------------------------------------------------------------------

    def delete_oldest(self) -> Path | None:
        """Delete the oldest segment unless it is the one being written; its path, or None."""
        if len(self.segments) < 2 or self.segments[0].end_offset > self.flushed_offset:
            return None
        return self.files.delete_first()

    def close(self) -> None:
        self.files.close()


def _valid_record_at(segment: MappedFile, position: int) -> tuple[int, Found] | None:
    if segment.size - position < FRAME_SIZE:
        return None
    total, magic = peek_frame(segment.map, position)
    if magic == QUARANTINE_MAGIC:
        return (total, Found.QUARANTINED) if BLANK_MIN_SIZE <= total <= segment.size - position else None
    try:
        total, blank = record_size(segment.map, position)
    except CorruptRecord:
        return None
    if blank:
        return (total, Found.BLANK) if position + total == segment.size else None
    return (total, Found.MESSAGE) if crc_matches(segment.map, position, total) else None


def surely_ours(buf: mmap.mmap, start_offset: int, position: int) -> bool:
    """A record this log wrote at `position`: CRC-valid and stamped with its own offset, or a closing blank filler."""
    try:
        total, blank = record_size(buf, position)
    except CorruptRecord:
        return False
    if blank:
        return position + total == len(buf)
    if not crc_matches(buf, position, total):
        return False
    return peek_offsets(buf, position)[1] == start_offset + position


def next_record_in(buf: mmap.mmap, start_offset: int, position: int) -> int | None:
    """The first position at or after `position` of a segment where a record of this log surely starts."""
    found = [_first_with(buf, start_offset, position, magic) for magic in (MESSAGE_MAGIC, BLANK_MAGIC)]
    return min((at for at in found if at is not None), default=None)


def _first_with(buf: mmap.mmap, start_offset: int, position: int, magic: int) -> int | None:
    needle = U32.pack(magic)
    at = buf.find(needle, position + MAGIC_AT)
    while at >= 0:
        if surely_ours(buf, start_offset, at - MAGIC_AT):
            return at - MAGIC_AT
        at = buf.find(needle, at + 1)
    return None


def describe_damage(buf: mmap.mmap, start_offset: int, position: int) -> str:
    """What is wrong with the record at `position` (a segment's map), for an operator."""
    if len(buf) - position < FRAME_SIZE:
        return f"only {len(buf) - position} bytes left at the segment's end, and no blank filler"
    if peek_frame(buf, position) == (0, 0):
        return "zeros where a record should start"
    try:
        total, blank = record_size(buf, position)
        if blank:
            raise CorruptRecord(position, f"a blank filler of {total} bytes that does not reach the segment's end")
        stored, actual = stored_crc(buf, position), computed_crc(buf, position, total)
        if actual != stored:
            raise CorruptRecord(position, f"CRC mismatch: stored 0x{stored:08x}, computed 0x{actual:08x}")
        stamped = peek_offsets(buf, position)[1]
        if stamped != start_offset + position:
            raise CorruptRecord(position, f"the record says it is at offset {stamped}")
        peek_head(buf, position)
    except CorruptRecord as exc:
        return exc.reason
    return "a record that cannot be read"
