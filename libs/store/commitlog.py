"""CommitLog: every message of every topic, appended to one log of fixed-size segments.

Segments are named by the 20-digit CommitLog offset of their first byte and are
contiguous. A record never straddles two segments: when the next record would
not leave room for a blank filler, the rest of the segment is filled with one
(see libs.codec) and writing moves on to the next segment.

One writer (the broker's event loop thread) appends; a flusher thread syncs.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.codec import (
    BLANK_MIN_SIZE,
    CRC_START,
    LENGTH_MAGIC,
    RecordHead,
    encode_blank,
    peek_head,
    record_size,
)
from libs.errors import CorruptRecord, InvalidMessage, OffsetOutOfRange
from libs.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

STAMPED: Final = struct.Struct(">qq")  # queue_offset, physical_offset at byte 20
STORE_TIMESTAMP: Final = struct.Struct(">q")  # at byte 68
CRC: Final = struct.Struct(">I")
ZERO_CHUNK: Final = bytes(1024 * 1024)


@dataclass(frozen=True, slots=True)
class ScannedRecord:
    """A valid record met by a recovery scan, with what dispatch needs."""

    physical_offset: int
    size: int
    head: RecordHead
    queue_offset: int
    store_timestamp: int


def segment_name(offset: int) -> str:
    return f"{offset:020d}"


class CommitLog:
    def __init__(self, directory: Path, segment_size: int) -> None:
        if segment_size < 4096:
            raise ValueError(f"a CommitLog segment must be at least 4096 bytes, not {segment_size}")
        self.directory = directory
        self.segment_size = segment_size
        self.segments: list[MappedFile] = []
        self.write_offset = 0
        self.flushed_offset = 0

    # ---- opening -------------------------------------------------------------------------

    def load(self) -> None:
        """Open the existing segments (in offset order); the write position is set by recovery."""
        self.directory.mkdir(parents=True, exist_ok=True)
        names = sorted(p for p in self.directory.iterdir() if p.name.isdigit() and len(p.name) == 20)
        expected = None
        for path in names:
            start = int(path.name)
            if start % self.segment_size:
                raise CorruptRecord(start, f"segment {path.name} does not start on a {self.segment_size}-byte boundary")
            if expected is not None and start != expected:
                raise CorruptRecord(expected, f"segment {segment_name(expected)} is missing before {path.name}")
            self.segments.append(MappedFile(path, start, self.segment_size, create=False))
            expected = start + self.segment_size
        if self.segments:
            self.write_offset = self.flushed_offset = self.segments[0].start_offset

    @property
    def min_offset(self) -> int:
        return self.segments[0].start_offset if self.segments else self.write_offset

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
        segment = MappedFile(self.directory / segment_name(start), start, self.segment_size, create=True)
        self.segments.append(segment)
        return segment

    # ---- reading -------------------------------------------------------------------------

    def segment_at(self, offset: int) -> MappedFile:
        if not self.segments or not self.min_offset <= offset < self.segments[-1].end_offset:
            raise OffsetOutOfRange(
                f"CommitLog offset {offset} is outside [{self.min_offset}, {self.write_offset})",
                min_offset=self.min_offset,
                max_offset=self.write_offset,
            )
        return self.segments[(offset - self.segments[0].start_offset) // self.segment_size]

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

    # ---- flushing ------------------------------------------------------------------------

    def sync(self, upto: int) -> None:
        """Make everything below `upto` durable (from a worker thread)."""
        for segment in list(self.segments):
            if segment.end_offset > self.flushed_offset and segment.start_offset < upto:
                segment.sync()
        self.flushed_offset = max(self.flushed_offset, upto)

    # ---- recovery ------------------------------------------------------------------------

    def scan(self, start: int) -> Iterator[ScannedRecord]:
        """Valid records from `start` on; stops at the first torn, zeroed or corrupt one."""
        offset = start
        while self.segments and offset < self.segments[-1].end_offset:
            segment = self.segment_at(offset)
            position = offset - segment.start_offset
            record = _valid_record_at(segment, position)
            if record is None:
                return
            size, blank = record
            if blank:
                offset = segment.end_offset
                continue
            queue_offset, _ = STAMPED.unpack_from(segment.map, position + 20)
            stored = STORE_TIMESTAMP.unpack_from(segment.map, position + 68)[0]
            try:
                head = peek_head(segment.map, position)
            except CorruptRecord:
                return  # framed and CRC-valid, yet its fields do not add up: the log ends before it
            yield ScannedRecord(offset, size, head, queue_offset, stored)
            offset += size

    def truncate(self, end: int) -> None:
        """Forget everything from `end` on: zero the rest of its segment, delete later segments."""
        while self.segments and self.segments[-1].start_offset > end:
            doomed = self.segments.pop()
            log.warning("recovery: deleting CommitLog segment %s past the end of the log", doomed.path.name)
            doomed.close()
            doomed.path.unlink()
        if self.segments and end < self.segments[-1].end_offset:
            segment = self.segments[-1]
            _zero_from(segment, end - segment.start_offset)
        self.write_offset = end
        self.flushed_offset = min(self.flushed_offset, end)

    # ---- retention -----------------------------------------------------------------------

    def delete_oldest(self) -> Path | None:
        """Delete the oldest segment unless it is the one being written; its path, or None."""
        if len(self.segments) < 2 or self.segments[0].end_offset > self.flushed_offset:
            return None
        oldest = self.segments.pop(0)
        oldest.close()
        oldest.path.unlink()
        return oldest.path

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
        self.segments.clear()


def _valid_record_at(segment: MappedFile, position: int) -> tuple[int, bool] | None:
    if segment.size - position < LENGTH_MAGIC.size:
        return None
    try:
        total, blank = record_size(segment.map, position)
    except CorruptRecord:
        return None
    if blank:
        return (total, True) if position + total == segment.size else None
    stored = CRC.unpack_from(segment.map, position + 8)[0]
    actual = zlib.crc32(segment.view[position + CRC_START : position + total])
    return (total, False) if actual == stored else None


def _zero_from(segment: MappedFile, position: int) -> None:
    # Bytes past the end may hold a torn record or, after an earlier truncation,
    # older records that must never come back: zero every chunk that is not zero.
    start = position
    while start < segment.size:
        stop = min(segment.size, (start // len(ZERO_CHUNK) + 1) * len(ZERO_CHUNK))
        if segment.map[start:stop] != ZERO_CHUNK[: stop - start]:
            segment.map[start:stop] = ZERO_CHUNK[: stop - start]
        start = stop
