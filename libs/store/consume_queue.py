"""ConsumeQueue: the per-(topic, queue) index of a topic's messages in the CommitLog.

One unit per message, 20 bytes, big-endian::

    offset  size  field
         0     8  physical_offset   CommitLog offset of the record
         8     4  size              the record's total size
        12     8  tags_code         libs.message.tags_code(tag); for delay queues, the due time in ms

Unit `n` of a queue is its message at queue offset `n` (dense). Files hold
`units_per_file` units (300,000 by default) and are named by the 20-digit byte
offset of their first unit, under `consumequeue/<topic>/<queue_id>/`.

New units are kept in memory and written with pwrite at each flush; made
durable (fdatasync) at each checkpoint, together with the directory entries of
files and directories made since the last one. After a crash, units past the
checkpoint are rebuilt from the CommitLog, and `load` drops any tail unit whose
record is gone or is not this queue's (see `_record_is_ours`).
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Final

UNIT: Final = struct.Struct(">qiq")
assert UNIT.size == 20

Unit = tuple[int, int, int]
"""(physical_offset, size, tags_code)"""

RecordCheck = Callable[[str, int, int, int, int], bool]
"""(topic, queue_id, physical_offset, size, queue_offset) -> the record there is that queue's message."""


class FileHandles:
    """An LRU of open file descriptors, so that 10,000 queues need not mean 10,000 open files."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: OrderedDict[Path, int] = OrderedDict()

    def get(self, path: Path, *, create: bool = False) -> int:
        fd = self._open.get(path)
        if fd is not None:
            self._open.move_to_end(path)
            return fd
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        self._open[path] = fd
        while len(self._open) > self.limit:
            _, old = self._open.popitem(last=False)
            os.close(old)
        return fd

    def forget(self, path: Path) -> None:
        fd = self._open.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def __len__(self) -> int:
        return len(self._open)


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, units_per_file: int, handles: FileHandles) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self.handles = handles
        self.min_offset = 0
        self.max_offset = 0
        """The next queue offset: one past the last unit."""
        self.written = 0
        """Units below this are in the files; the rest are in `pending`."""
        self.pending = bytearray()
        self.dirty_files: set[Path] = set()
        """Files, and directories with a new entry, to sync at the next checkpoint."""
        self._directory_made = False

    def _file(self, unit: int) -> Path:
        start = unit - unit % self.units_per_file
        return self.directory / f"{start * UNIT.size:020d}"

    def file_starts(self) -> list[int]:
        if not self.directory.exists():
            return []
        return sorted(int(p.name) // UNIT.size for p in self.directory.iterdir() if p.name.isdigit())

    def load(self, is_ours: RecordCheck, commitlog_min: int) -> None:
        starts = self.file_starts()
        if not starts:
            return
        last = self._file(starts[-1])
        self.max_offset = self.written = starts[-1] + os.path.getsize(last) // UNIT.size
        self.min_offset = starts[0]
        while self.max_offset > self.min_offset:
            phy, size, _ = self.read(self.max_offset - 1, 1)[0]
            if is_ours(self.topic, self.queue_id, phy, size, self.max_offset - 1):
                break
            self.truncate(self.max_offset - 1)
        self.min_offset = self._first_unit_at_or_after(commitlog_min)

    def _first_unit_at_or_after(self, commitlog_min: int) -> int:
        low, high = self.min_offset, self.max_offset
        while low < high:
            mid = (low + high) // 2
            if self.read(mid, 1)[0][0] < commitlog_min:
                low = mid + 1
            else:
                high = mid
        return low

    def append(self, queue_offset: int, physical_offset: int, size: int, tags_code: int) -> None:
        if queue_offset != self.max_offset:
            if queue_offset > self.max_offset:
                raise ValueError(
                    f"{self.topic}/{self.queue_id}: unit {queue_offset} would leave a gap after {self.max_offset}"
                )
            self.truncate(queue_offset)  # recovery re-dispatching what the queue already had
        self.pending += UNIT.pack(physical_offset, size, tags_code)
        self.max_offset += 1

    def extend(self, units: bytes | bytearray, count: int) -> None:
        """Append `count` packed units (UNIT each) for the next queue offsets: a batch's records of this queue."""
        self.pending += units
        self.max_offset += count

    def read(self, offset: int, count: int) -> list[Unit]:
        """Units [offset, offset + count) clipped to the queue's end."""
        end = min(offset + count, self.max_offset)
        units: list[Unit] = []
        position = offset
        while position < min(end, self.written):
            file_end = min(end, self.written, position - position % self.units_per_file + self.units_per_file)
            fd = self.handles.get(self._file(position))
            raw = os.pread(fd, (file_end - position) * UNIT.size, (position % self.units_per_file) * UNIT.size)
            units.extend(UNIT.iter_unpack(raw))
            position = file_end
        if position < end:
            start = (position - self.written) * UNIT.size
            units.extend(UNIT.iter_unpack(self.pending[start : start + (end - position) * UNIT.size]))
        return units

    def write_pending(self) -> None:
        """Write the in-memory units to their files (page cache); fdatasync comes at checkpoint."""
        data = bytes(self.pending)
        position = self.written
        taken = 0
        while taken < len(data):
            in_file = self.units_per_file - position % self.units_per_file
            chunk = data[taken : taken + in_file * UNIT.size]
            path = self._file(position)
            if not self._directory_made:
                self._make_directory()
            if position % self.units_per_file == 0:
                self.dirty_files.add(self.directory)  # the file is new: its name must be durable too
            written = os.pwrite(
                self.handles.get(path, create=True), chunk, (position % self.units_per_file) * UNIT.size
            )
            if written != len(chunk):  # a full disk may take part of a write: try the whole chunk again later
                raise OSError(errno.ENOSPC, f"wrote {written} of {len(chunk)} bytes to {path}")
            self.dirty_files.add(path)
            taken += len(chunk)
            position += len(chunk) // UNIT.size
        self.written = position
        self.pending.clear()

    def _make_directory(self) -> None:
        made = [d for d in (self.directory.parent.parent, self.directory.parent, self.directory) if not d.exists()]
        self.directory.mkdir(parents=True, exist_ok=True)
        self.dirty_files.update(d.parent for d in made)
        self._directory_made = True

    def truncate(self, offset: int) -> None:
        """Drop the units from `offset` on."""
        if offset >= self.written:
            del self.pending[(offset - self.written) * UNIT.size :]
        else:
            self.pending.clear()
            for start in self.file_starts():
                if start >= offset:
                    path = self._file(start)
                    self.handles.forget(path)
                    path.unlink()
                elif start + self.units_per_file > offset:
                    os.truncate(self._file(start), (offset - start) * UNIT.size)
            self.written = offset
        self.max_offset = offset

    def delete_files_below(self, commitlog_min: int) -> int:
        """Retention: delete whole files whose every unit points below the CommitLog's minimum."""
        deleted = 0
        starts = self.file_starts()
        for start, following in itertools.zip_longest(starts, starts[1:]):
            if following is None or following > self.written:
                break
            last_phy, _, _ = self.read(following - 1, 1)[0]
            if last_phy >= commitlog_min:
                break
            path = self._file(start)
            self.handles.forget(path)
            path.unlink()
            deleted += 1
        remaining = self.file_starts()
        if remaining:
            self.min_offset = max(self.min_offset, remaining[0])
        self.min_offset = self._first_unit_at_or_after(commitlog_min)
        return deleted
