"""TimerWheel: a memory-mapped ring of slots, one per tick of `precision_ms` (RocketMQ 5's TimerWheel).

A slot holds the ends of a chain of TimerLog records due in the same tick. The
ring covers `slot_count` ticks (the window, default 7 days); tick t lives in slot
t % slot_count, and a slot also keeps its absolute time so that a slot left over
from a tick one window earlier reads as empty rather than as this tick's.

File layout, big-endian (sizes asserted below)::

    header, 16 bytes
         0  magic         4s  b"PTWL"
         4  precision_ms  I   the geometry, so that a file opened with other settings
         8  slot_count    I   is refused instead of misread
        12  reserved      I   zero
    slot i at 16 + 32 * i
         0  slot_ms       q   the slot's tick * precision_ms (ms since the epoch)
         8  first_pos     q   the oldest record of the chain (TimerLog position)
        16  last_pos      q   the newest record; records link back through prev_pos
        24  count         I   records in the chain (cancelled ones included)
        28  reserved      I   zero

A slot with count 0, or whose slot_ms is not the tick asked for, is empty.
Like the TimerLog it is written through a shared map (survives kill -9) and
made durable by `sync` (fdatasync). The default geometry (100 ms, 7 days) is
6,048,000 slots: a 194 MB preallocated file, paged in only where it is used.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.store.mapped_file import preallocate

HEADER: Final = struct.Struct(">4sIII")
SLOT: Final = struct.Struct(">qqqII")
assert HEADER.size == 16
assert SLOT.size == 32
MAGIC: Final = b"PTWL"
PRECISIONS: Final = (100, 200, 500, 1000)
DAY_MS: Final = 86_400_000


class CorruptTimerWheel(Exception):
    """The wheel file does not match the geometry asked for."""


@dataclass(frozen=True, slots=True)
class Slot:
    slot_ms: int
    first_pos: int
    last_pos: int
    count: int


class TimerWheel:
    def __init__(self, path: Path, *, precision_ms: int = 100, window_ms: int = 7 * DAY_MS) -> None:
        if precision_ms not in PRECISIONS:
            raise ValueError(f"precision_ms must be one of {PRECISIONS}, not {precision_ms}")
        if window_ms <= 0 or window_ms % precision_ms:
            raise ValueError(f"window_ms must be a positive multiple of precision_ms ({precision_ms})")
        self.path = path
        self.precision_ms = precision_ms
        self.slot_count = window_ms // precision_ms
        size = HEADER.size + SLOT.size * self.slot_count
        create = not path.exists()
        self.created = create  # a new wheel is all zeros already: nothing to clear
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if create:
                preallocate(self._fd, size, f"TimerWheel {path.name}")
            self._map = mmap.mmap(self._fd, size)
            if create:
                self._map[: HEADER.size] = HEADER.pack(MAGIC, precision_ms, self.slot_count, 0)
            self._check_header(size)
        except BaseException:
            os.close(self._fd)
            raise

    def _check_header(self, size: int) -> None:
        magic, precision, slots, _ = HEADER.unpack(self._map[: HEADER.size])
        if (magic, precision, slots) != (MAGIC, self.precision_ms, self.slot_count) or len(self._map) != size:
            raise CorruptTimerWheel(
                f"{self.path} holds a wheel of {slots} slots of {precision} ms (magic {magic!r}); "
                f"asked for {self.slot_count} slots of {self.precision_ms} ms"
            )

    def slot_for(self, due_ms: int) -> int:
        return (due_ms // self.precision_ms) % self.slot_count

    def get(self, tick: int) -> Slot:
        """The slot of `tick` (= ms // precision_ms); an empty Slot when it holds another tick's chain."""
        slot_ms, first, last, count, _ = SLOT.unpack_from(self._map, self._offset(tick))
        if count == 0 or slot_ms != tick * self.precision_ms:
            return Slot(tick * self.precision_ms, -1, -1, 0)
        return Slot(slot_ms, first, last, count)

    def put(self, tick: int, first_pos: int, last_pos: int, count: int) -> None:
        SLOT.pack_into(self._map, self._offset(tick), tick * self.precision_ms, first_pos, last_pos, count, 0)

    def clear(self) -> None:
        """Empty every slot (before a rebuild from the TimerLog)."""
        chunk = bytes(1 << 20)
        position = HEADER.size
        while position < len(self._map):
            n = min(len(chunk), len(self._map) - position)
            self._map[position : position + n] = chunk[:n]
            position += n

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)

    def _offset(self, tick: int) -> int:
        return HEADER.size + SLOT.size * (tick % self.slot_count)
