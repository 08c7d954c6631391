"""TimerLog: the append-only log of the timer wheel's entries (RocketMQ 5's TimerLog).

The log is a directory of segment files, each named by the 20-digit position of
its first byte and preallocated to `segment_bytes` (a multiple of the record
size, so a record never straddles two segments and no blank filler is needed).
A position is a byte offset into the whole log; record n is at n * 56.

Record layout, big-endian, 56 bytes (asserted below)::

    offset  size  field
         0     2  magic        0x544D ("TM"); zero bytes mean "never written": the end of the log
         2     2  flags        bit 0 ROLLED: put in a slot before its real due time, to be rolled
                               bit 1 CANCELLED: set in place by `cancel`; never delivered
                               bits 8-15: refused deliveries so far (see `attempts`)
         4     4  roll_count   how many times the message has been rolled so far
         8     8  due_ms       the message's real due time, ms since the epoch
        16     8  slot_ms      the wheel slot the record was put in (tick * precision), ms
        24     8  phy_offset   the message's CommitLog physical offset
        32     8  prev_pos     the record put before this one in the same slot, -1 ends the chain
        40     4  store_id     which CommitLog (broker or store name id) holds the message
        44     4  size         the message's size in the CommitLog
        48     4  crc          CRC32 of bytes [0, 48)
        52     4  reserved     zero

Chains run newest to oldest (as in RocketMQ: the wheel slot keeps the last
position and each record the one before), so an append touches only the new
record and its slot. `CANCELLED` is the only in-place change: `set_flags`
rewrites the flags and the CRC of an existing record.

Durability: records are written through shared maps, so what `append` wrote
survives the process being killed; `sync` (fdatasync, which releases the GIL;
any thread) makes it survive the machine.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.store.mapped_file import preallocate

log = logging.getLogger(__name__)

MAGIC: Final = 0x544D
ROLLED: Final = 0x1
CANCELLED: Final = 0x2
ATTEMPTS_SHIFT: Final = 8
MAX_ATTEMPTS: Final = 0xFF
BODY: Final = struct.Struct(">HHIqqqqII")
RECORD: Final = struct.Struct(">HHIqqqqIIII")
assert BODY.size == 48
assert RECORD.size == 56
RECORD_SIZE: Final = RECORD.size
DEFAULT_SEGMENT_BYTES: Final = RECORD_SIZE * 1_048_576  # 1 Mi records, 56 MiB


class CorruptTimerLog(Exception):
    """A record that should be there cannot be read (bad magic or CRC)."""


@dataclass(frozen=True, slots=True)
class TimerRecord:
    position: int
    flags: int
    roll_count: int
    due_ms: int
    slot_ms: int
    phy_offset: int
    prev_pos: int
    store_id: int
    size: int

    @property
    def rolled(self) -> bool:
        return bool(self.flags & ROLLED)

    @property
    def cancelled(self) -> bool:
        return bool(self.flags & CANCELLED)

    @property
    def attempts(self) -> int:
        """How many deliveries of the message were refused before this record was written."""
        return self.flags >> ATTEMPTS_SHIFT


def attempts_flags(attempts: int) -> int:
    return min(attempts, MAX_ATTEMPTS) << ATTEMPTS_SHIFT


def encode(r: TimerRecord) -> bytes:
    body = BODY.pack(MAGIC, r.flags, r.roll_count, r.due_ms, r.slot_ms, r.phy_offset, r.prev_pos, r.store_id, r.size)
    return body + struct.pack(">II", zlib.crc32(body), 0)


def decode(position: int, raw: bytes | memoryview) -> TimerRecord | None:
    """The record in `raw`, or None when it is blank or damaged."""
    magic, flags, rolls, due, slot, phy, prev, store, size, crc, _ = RECORD.unpack(raw)
    if magic != MAGIC or zlib.crc32(raw[:48]) != crc:
        return None
    return TimerRecord(position, flags, rolls, due, slot, phy, prev, store, size)


class _Segment:
    def __init__(self, path: Path, start: int, size: int, *, create: bool) -> None:
        self.start = start
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o644)
        try:
            if create:
                preallocate(self.fd, size, f"TimerLog segment {path.name}")
            if os.fstat(self.fd).st_size != size:
                raise CorruptTimerLog(f"{path} is not {size} bytes long")
            self.map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


class TimerLog:
    """Append, read by position, iterate; `end` is the position the next record gets."""

    def __init__(self, directory: Path, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        if segment_bytes <= 0 or segment_bytes % RECORD_SIZE:
            raise ValueError(f"segment_bytes must be a positive multiple of {RECORD_SIZE}")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()  # guards the segment list against a sync from another thread
        self._segments: list[_Segment] = []
        for path in sorted(directory.glob("[0-9]" * 20)):
            start = int(path.name)
            if start != len(self._segments) * segment_bytes:
                raise CorruptTimerLog(f"TimerLog segment {path.name} does not follow the one before it")
            self._segments.append(_Segment(path, start, segment_bytes, create=False))
        self.end = 0

    def recover(self, end: int | None) -> int:
        """Set the end: `end` when known (a clean shutdown), else scan for it and cut a damaged tail.

        Returns the end. Everything from a damaged record on is zeroed, and later
        segments are removed, so the next append continues a clean log.
        """
        if end is None:
            end = 0
            for record in self.scan(0):
                end = record.position + RECORD_SIZE
            self._truncate(end)
        self.end = end
        return end

    def scan(self, start: int) -> Iterator[TimerRecord]:
        """Valid records from `start` up to the first blank or damaged one."""
        position = start
        while position // self.segment_bytes < len(self._segments):
            record = self._decode_at(position)
            if record is None:
                return
            yield record
            position += RECORD_SIZE

    def _truncate(self, end: int) -> None:
        index, offset = divmod(end, self.segment_bytes)
        if index < len(self._segments):
            segment = self._segments[index]
            if any(segment.map[offset : offset + RECORD_SIZE]):
                log.warning(
                    "TimerLog %s: damaged record at position %d (bad magic or CRC); truncating the log there",
                    self.directory,
                    end,
                )
            segment.map[offset:] = bytes(self.segment_bytes - offset)
        with self._lock:
            doomed = self._segments[index + 1 :]
            del self._segments[index + 1 :]
        for segment in doomed:
            segment.close()
            self._path(segment.start).unlink()

    def append(self, record: TimerRecord) -> int:
        """Write `record` at the end (its `position` is ignored) and return where it went."""
        position = self.end
        index, offset = divmod(position, self.segment_bytes)
        if index == len(self._segments):
            segment = _Segment(self._path(position), position, self.segment_bytes, create=True)
            with self._lock:
                self._segments.append(segment)
        self._segments[index].map[offset : offset + RECORD_SIZE] = encode(record)
        self.end = position + RECORD_SIZE
        return position

    def read(self, position: int) -> TimerRecord:
        if position < 0 or position >= self.end or position % RECORD_SIZE:
            raise CorruptTimerLog(f"TimerLog {self.directory}: no record at position {position} (end {self.end})")
        record = self._decode_at(position)
        if record is None:
            raise CorruptTimerLog(f"TimerLog {self.directory}: damaged record at position {position}")
        return record

    def set_flags(self, position: int, flags: int) -> TimerRecord:
        """Rewrite the flags (and CRC) of the record at `position`; returns the new record."""
        old = self.read(position)
        new = TimerRecord(
            position,
            flags,
            old.roll_count,
            old.due_ms,
            old.slot_ms,
            old.phy_offset,
            old.prev_pos,
            old.store_id,
            old.size,
        )
        self._write_at(position, encode(new))
        return new

    def set_prev(self, position: int, prev_pos: int) -> None:
        """Relink a record (recovery, when its chain must be repaired)."""
        old = self.read(position)
        fixed = TimerRecord(
            position,
            old.flags,
            old.roll_count,
            old.due_ms,
            old.slot_ms,
            old.phy_offset,
            prev_pos,
            old.store_id,
            old.size,
        )
        self._write_at(position, encode(fixed))

    def sync(self) -> None:
        """Make every record written so far durable (blocks; safe from any thread)."""
        with self._lock:
            segments = list(self._segments)
        for segment in segments:  # a few segments at most; fdatasync on a clean one is cheap
            os.fdatasync(segment.fd)

    def close(self) -> None:
        with self._lock:
            segments, self._segments = self._segments, []
        for segment in segments:
            segment.close()

    def _decode_at(self, position: int) -> TimerRecord | None:
        index, offset = divmod(position, self.segment_bytes)
        return decode(position, self._segments[index].map[offset : offset + RECORD_SIZE])

    def _write_at(self, position: int, raw: bytes) -> None:
        index, offset = divmod(position, self.segment_bytes)
        self._segments[index].map[offset : offset + RECORD_SIZE] = raw

    def _path(self, start: int) -> Path:
        return self.directory / f"{start:020d}"
