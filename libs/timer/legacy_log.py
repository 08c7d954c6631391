"""The TimerLog's first format (56-byte records, no message id), read once to copy it into today's (issue 27).

A format-1 log lives in `timerlog/` (segments named by position, as today's): its
records are timer_log.py's without the message id, magic 0x544D ("TM") and a CRC of
bytes [0, 48). Today's log lives in `timerlog2/`. `upgrade` copies every valid
format-1 record, in log order, into `timerlog2.partial/`, syncs it, renames it
`timerlog2/` (the step that commits) and only then removes `timerlog/`; a crash
at any point leaves either the old log whole (the copy is made again) or the new
one whole (what is left of the old one is removed). The copied entries carry no
message id: the broker checks what it can of them (the record's size and that it
is a scheduled one), as it did before. Their positions change, so the wheel is
rebuilt from the copy (TimerStore opens a store it upgraded as after a crash).
"""

from __future__ import annotations

import logging
import shutil
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from libs.store.mapped_file import fsync_directory
from libs.timer.timer_log import HEAD, TimerLog, TimerRecord

log = logging.getLogger(__name__)

LEGACY_DIR: Final = "timerlog"
LOG_DIR: Final = "timerlog2"
PARTIAL_DIR: Final = "timerlog2.partial"
LEGACY_MAGIC: Final = 0x544D
LEGACY_RECORD: Final = struct.Struct(">HHIqqqqIIII")
assert LEGACY_RECORD.size == 56


def has_legacy_log(directory: Path) -> bool:
    return (directory / LEGACY_DIR).exists()


def legacy_records(legacy: Path) -> Iterator[TimerRecord]:
    """The valid records of a format-1 log, in order, up to the first blank or damaged one."""
    position = 0
    for segment in sorted(p for p in legacy.iterdir() if p.name.isdigit()):
        raw = segment.read_bytes()
        if int(segment.name) != position:
            return  # a missing segment: nothing after it is in order
        for offset in range(0, len(raw) - LEGACY_RECORD.size + 1, LEGACY_RECORD.size):
            magic, flags, rolls, due, slot, phy, prev, store, size, crc, _ = LEGACY_RECORD.unpack_from(raw, offset)
            if magic != LEGACY_MAGIC or zlib.crc32(raw[offset : offset + HEAD.size]) != crc:
                return
            yield TimerRecord(position + offset, flags, rolls, due, slot, phy, prev, store, size)
        position += len(raw)


def upgrade(directory: Path, segment_bytes: int) -> int | None:
    """Copy a format-1 log of the store in `directory` into today's format; how many records (None: none to copy)."""
    legacy, target, partial = directory / LEGACY_DIR, directory / LOG_DIR, directory / PARTIAL_DIR
    if partial.exists():
        shutil.rmtree(partial)  # a copy a crash interrupted: made again below
    if not legacy.exists():
        return None
    copied = 0
    if not target.exists():
        copy = TimerLog(partial, segment_bytes=segment_bytes)
        try:
            copy.recover(0)
            for record in legacy_records(legacy):
                copy.append(record)  # its prev_pos is format 1's: the wheel's rebuild relinks every chain
                copied += 1
            copy.sync()
        finally:
            copy.close()
        fsync_directory(partial)
        partial.rename(target)
        fsync_directory(directory)
        log.warning(
            "TimerLog %s is in the first format (no message ids): %d records copied to %s; "
            "their deliveries are checked by size only",
            legacy,
            copied,
            target,
        )
    shutil.rmtree(legacy)
    fsync_directory(directory)
    return copied
