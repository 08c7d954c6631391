"""TimerLog: the append-only log of the timer wheel's entries (RocketMQ 5's TimerLog).

The log is a directory of segment files, a MappedFileQueue as the CommitLog's
segments are (libs.store.mapped_file_queue): each named by the 20-digit
position of its first byte and preallocated to `segment_bytes` (a multiple of
the record size, so a record never straddles two segments and no blank filler
is needed). A position is a byte offset into the whole log; record n is at n * 72.

Record layout, big-endian, 72 bytes (asserted below)::

    offset  size  field
         0     2  magic        0x544E ("TN"); zero bytes mean "never written": the end of the log
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
        48    16  message_id   the message's id (libs.message.packed_message_id), zeros when not known:
                               the broker checks that the record at phy_offset is this message
                               before it delivers it (after a failover another may sit there)
        64     4  crc          CRC32 of bytes [0, 64)
        68     4  reserved     zero

Format 1 (56-byte records, magic 0x544D "TM", no message id) was kept in the
directory `timerlog`; TimerStore copies such a log into this format when it opens
it (libs.timer.legacy_log), its entries without ids.

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
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from libs.message import MESSAGE_ID_BYTES, packed_message_id, unpacked_message_id
from libs.store.mapped_file import MappedFile
from libs.store.mapped_file_queue import BrokenFileQueue, MappedFileQueue

log = logging.getLogger(__name__)

MAGIC: Final = 0x544E
ROLLED: Final = 0x1
CANCELLED: Final = 0x2
ATTEMPTS_SHIFT: Final = 8
MAX_ATTEMPTS: Final = 0xFF
HEAD: Final = struct.Struct(">HHIqqqqII")
"""The fields before the message id (format 1's whole body)."""
BODY: Final = struct.Struct(f">HHIqqqqII{MESSAGE_ID_BYTES}s")
RECORD: Final = struct.Struct(f">HHIqqqqII{MESSAGE_ID_BYTES}sII")
assert HEAD.size == 48
assert BODY.size == 64
assert RECORD.size == 72
RECORD_SIZE: Final = RECORD.size
DEFAULT_SEGMENT_BYTES: Final = RECORD_SIZE * 1_048_576  # 1 Mi records, 72 MiB


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
    message_id: str | None = None

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
    body = BODY.pack(
        MAGIC,
        r.flags,
        r.roll_count,
        r.due_ms,
        r.slot_ms,
        r.phy_offset,
        r.prev_pos,
        r.store_id,
        r.size,
        packed_message_id(r.message_id),
    )
    return body + struct.pack(">II", zlib.crc32(body), 0)


def decode(position: int, raw: bytes | memoryview) -> TimerRecord | None:
    """The record in `raw`, or None when it is blank or damaged."""
    magic, flags, rolls, due, slot, phy, prev, store, size, message_id, crc, _ = RECORD.unpack(raw)
    if magic != MAGIC or zlib.crc32(raw[: BODY.size]) != crc:
        return None
    return TimerRecord(position, flags, rolls, due, slot, phy, prev, store, size, unpacked_message_id(message_id))


class TimerLog:
    """Append, read by position, iterate; `end` is the position the next record gets."""

    def __init__(self, directory: Path, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        if segment_bytes <= 0 or segment_bytes % RECORD_SIZE:
            raise ValueError(f"segment_bytes must be a positive multiple of {RECORD_SIZE}")
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.files = MappedFileQueue(directory, segment_bytes, "TimerLog segment")
        try:
            self.files.load()
            if self.files.start_offset not in (None, 0):
                raise BrokenFileQueue(0, f"segment {0:020d} is missing before the first one")
        except (BrokenFileQueue, ValueError) as exc:
            self.files.close()
            raise CorruptTimerLog(f"TimerLog {directory}: {exc}") from exc
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
        for segment in list(self.files.files):
            offset = max(start - segment.start_offset, 0)
            while offset < segment.size:
                record = decode(segment.start_offset + offset, segment.map[offset : offset + RECORD_SIZE])
                if record is None:
                    return
                yield record
                offset += RECORD_SIZE

    def _truncate(self, end: int) -> None:
        segment = self.files.find(end)
        if segment is not None and any(
            segment.map[end - segment.start_offset : end - segment.start_offset + RECORD_SIZE]
        ):
            log.warning(
                "TimerLog %s: damaged record at position %d (bad magic or CRC); truncating the log there",
                self.directory,
                end,
            )
        self.files.truncate(end)

    def append(self, record: TimerRecord) -> int:
        """Write `record` at the end (its `position` is ignored) and return where it went."""
        position = self.end
        segment = self.files.find(position) or self.files.create(position)
        offset = position - segment.start_offset
        segment.map[offset : offset + RECORD_SIZE] = encode(record)
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
        new = replace(self.read(position), flags=flags)
        self._write_at(position, encode(new))
        return new

    def set_prev(self, position: int, prev_pos: int) -> None:
        """Relink a record (recovery, when its chain must be repaired)."""
        self._write_at(position, encode(replace(self.read(position), prev_pos=prev_pos)))

    def sync(self) -> None:
        """Make every record written so far durable (blocks; safe from any thread)."""
        self.files.sync()  # a few segments at most; fdatasync on a clean one is cheap

    def close(self) -> None:
        self.files.close()

    def _decode_at(self, position: int) -> TimerRecord | None:
        segment = self._segment(position)
        offset = position - segment.start_offset
        return decode(position, segment.map[offset : offset + RECORD_SIZE])

    def _write_at(self, position: int, raw: bytes) -> None:
        segment = self._segment(position)
        offset = position - segment.start_offset
        segment.map[offset : offset + RECORD_SIZE] = raw

    def _segment(self, position: int) -> MappedFile:
        segment = self.files.find(position)
        if segment is None:
            raise CorruptTimerLog(f"TimerLog {self.directory}: no segment holds position {position}")
        return segment
