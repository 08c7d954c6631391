"""MappedFileQueue: a log kept as a row of fixed-size mapped files (RocketMQ's MappedFileQueue).

The one mapped segment file under both logs: the CommitLog (variable-length
records, blank fillers) and the TimerLog (fixed 56-byte records) are each a
MappedFileQueue plus what their records mean; the queue knows nothing of records.

On disk, a directory of files, each `file_size` bytes and named by the 20-digit
log offset of its first byte::

    <directory>/00000000000000000000
    <directory>/00000000001073741824
    ...

Each file starts on a multiple of `file_size`, and each follows the one before
it with no gap (the first may be past zero: the CommitLog's retention deletes
the oldest). A new file is preallocated and its name made durable before
anything is written into it (see MappedFile).

Threads: one writer appends, truncates and deletes; `sync` may run in another
thread. The list of files is only changed, and copied for a sync, under a lock.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Final

from libs.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

NAME_DIGITS: Final = 20
ZERO_CHUNK: Final = bytes(1024 * 1024)


class BrokenFileQueue(Exception):
    """The files on disk do not make one log: a file off its boundary, or one missing between two."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


def file_name(offset: int) -> str:
    return f"{offset:0{NAME_DIGITS}d}"


class MappedFileQueue:
    def __init__(self, directory: Path, file_size: int, what: str) -> None:
        """`what` names a file in messages, e.g. 'CommitLog segment'."""
        self.directory = directory
        self.file_size = file_size
        self.what = what
        self.files: list[MappedFile] = []
        """In offset order; the last is the one being written."""
        self._lock = threading.Lock()

    def load(self) -> None:
        """Map the files in the directory (creating it); BrokenFileQueue when they do not make one log."""
        self.directory.mkdir(parents=True, exist_ok=True)
        names = sorted(p for p in self.directory.iterdir() if p.name.isdigit() and len(p.name) == NAME_DIGITS)
        expected = None
        for path in names:
            start = int(path.name)
            if start % self.file_size:
                raise BrokenFileQueue(start, f"segment {path.name} does not start on a {self.file_size}-byte boundary")
            if expected is not None and start != expected:
                raise BrokenFileQueue(expected, f"segment {file_name(expected)} is missing before {path.name}")
            self._add(MappedFile(path, start, self.file_size, create=False, what=self.what))
            expected = start + self.file_size

    @property
    def start_offset(self) -> int | None:
        """The offset of the first file's first byte; None without files."""
        return self.files[0].start_offset if self.files else None

    @property
    def end_offset(self) -> int | None:
        """The offset just past the last file; None without files."""
        return self.files[-1].end_offset if self.files else None

    def find(self, offset: int) -> MappedFile | None:
        """The file holding `offset`, or None when no file does."""
        if not self.files or not self.files[0].start_offset <= offset < self.files[-1].end_offset:
            return None
        return self.files[(offset - self.files[0].start_offset) // self.file_size]

    def create(self, start: int) -> MappedFile:
        """A new file at the end, starting at `start` (StoreFull when the disk has no room: the queue is unchanged)."""
        end = self.end_offset
        if end is not None and start != end:
            raise ValueError(f"a new {self.what} must start at {end}, not {start}")
        mapped = MappedFile(self.directory / file_name(start), start, self.file_size, create=True, what=self.what)
        self._add(mapped)
        return mapped

    def truncate(self, end: int) -> None:
        """Forget everything from `end` on: delete the files after it, zero the rest of the one it is in."""
        while self.files and self.files[-1].start_offset > end:
            with self._lock:
                doomed = self.files.pop()
            log.warning("deleting %s %s past the end of the log", self.what, doomed.path.name)
            doomed.close()
            doomed.path.unlink()
        if self.files and end < self.files[-1].end_offset:
            last = self.files[-1]
            _zero_from(last, end - last.start_offset)

    def delete_first(self) -> Path:
        """Delete the oldest file; its path."""
        with self._lock:
            oldest = self.files.pop(0)
        oldest.close()
        oldest.path.unlink()
        return oldest.path

    def sync(self, start: int = 0, upto: int | None = None) -> None:
        """Make what was written into the files holding [start, upto) durable (all from `start` when None).

        Blocks (fdatasync, which releases the GIL); call it from a worker thread.
        """
        with self._lock:
            files = list(self.files)
        for mapped in files:
            if mapped.end_offset > start and (upto is None or mapped.start_offset < upto):
                mapped.sync()

    def close(self) -> None:
        with self._lock:
            files, self.files = self.files, []
        for mapped in files:
            mapped.close()

    def _add(self, mapped: MappedFile) -> None:
        with self._lock:
            self.files.append(mapped)


def _zero_from(mapped: MappedFile, position: int) -> None:
    # Bytes past the end may hold a torn record or, after an earlier truncation,
    # older records that must never come back: zero every chunk that is not zero
    # (only those: zeroing a clean page would dirty it for nothing).
    start = position
    while start < mapped.size:
        stop = min(mapped.size, (start // len(ZERO_CHUNK) + 1) * len(ZERO_CHUNK))
        if mapped.map[start:stop] != ZERO_CHUNK[: stop - start]:
            mapped.map[start:stop] = ZERO_CHUNK[: stop - start]
        start = stop
