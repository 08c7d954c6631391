"""The timer store's checkpoint: how far delivery is committed and the log durable.

Layout (big-endian, 44 bytes)::

    offset  size  field
         0     8  read_ms     every slot before this time has been fired and committed
         8     8  log_end     TimerLog records below this position are durable
        16     8  pending     entries in slots at or after read_ms, cancelled ones excluded
        24     8  rolled      how many of those are rolled entries
        32     8  timestamp   ms since the epoch, when it was written
        40     4  crc         CRC32 of bytes [0, 40)

Written like libs/store/checkpoint.py: a temporary file, fsynced, renamed over
the old one, then the directory fsynced; a crash leaves the old or the new one.
`pending` and `rolled` are trusted only after a clean shutdown; after a crash
recovery recounts them from the TimerLog.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.store.mapped_file import crc_framed, read_crc_framed, write_atomically

BODY: Final = struct.Struct(">qqqqq")
assert BODY.size == 40  # + the 4-byte CRC: 44 bytes on disk


@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    read_ms: int
    log_end: int
    pending: int
    rolled: int
    timestamp: int

    def write(self, path: Path) -> None:
        body = BODY.pack(self.read_ms, self.log_end, self.pending, self.rolled, self.timestamp)
        write_atomically(path, crc_framed(body))

    @classmethod
    def read(cls, path: Path) -> TimerCheckpoint | None:
        """The checkpoint, or None when there is none or it is damaged."""
        body = read_crc_framed(path, BODY.size)
        return None if body is None else cls(*BODY.unpack(body))
