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

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.store.mapped_file import crc_framed, read_crc_framed, write_atomically

BODY: Final = struct.Struct(">qqq")
LAYOUT: Final = struct.Struct(">qqqI")
"""The file as it is on disk: BODY, then the CRC32 of BODY."""
assert BODY.size == 24
assert LAYOUT.size == 28


@dataclass(frozen=True, slots=True)
class Checkpoint:
    commitlog_offset: int
    dispatch_offset: int
    timestamp: int

    def write(self, path: Path) -> None:
        write_atomically(path, crc_framed(BODY.pack(self.commitlog_offset, self.dispatch_offset, self.timestamp)))

    @classmethod
    def read(cls, path: Path) -> Checkpoint | None:
        """The checkpoint, or None when there is none or it is damaged (recovery then scans more)."""
        body = read_crc_framed(path, BODY.size)
        return None if body is None else cls(*BODY.unpack(body))
