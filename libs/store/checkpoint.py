"""The `checkpoint` file: how far the CommitLog and its dispatch are durable.

Layout (big-endian, 28 bytes)::

    offset  size  field
         0     8  commitlog_offset   every record below is durable; a record boundary
         8     8  dispatch_offset    ConsumeQueue and IndexFile entries of every record below are durable
        16     8  timestamp          ms since the epoch, when it was written
        24     4  crc                CRC32 of bytes [0, 24)

Written to a temporary file, fsynced, then renamed over the old one, so a crash
leaves either the old checkpoint or the new one, never half of each.

The `abort` file exists while a store is open: finding it at start means the
last run did not stop cleanly, and recovery must scan past the checkpoint.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.store.mapped_file import fsync_directory

LAYOUT: Final = struct.Struct(">qqqI")
assert LAYOUT.size == 28


@dataclass(frozen=True, slots=True)
class Checkpoint:
    commitlog_offset: int
    dispatch_offset: int
    timestamp: int

    def write(self, path: Path) -> None:
        body = struct.pack(">qqq", self.commitlog_offset, self.dispatch_offset, self.timestamp)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, body + struct.pack(">I", zlib.crc32(body)))
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(path)
        fsync_directory(path.parent)

    @classmethod
    def read(cls, path: Path) -> Checkpoint | None:
        """The checkpoint, or None when there is none or it is damaged (recovery then scans more)."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) != LAYOUT.size:
            return None
        commitlog, dispatch, timestamp, crc = LAYOUT.unpack(raw)
        if zlib.crc32(raw[:24]) != crc:
            return None
        return cls(commitlog, dispatch, timestamp)
