"""MappedFile: one preallocated, memory-mapped file of a log (a CommitLog or TimerLog segment).

Writes and reads go through the map; durability comes from `fdatasync` on the
file descriptor (which, unlike `mmap.flush`, releases the GIL, so appends go on
while a sync runs). The file is preallocated with `posix_fallocate`, so a full
disk is found when a segment is created — a clean StoreFull — and never as a
SIGBUS on a write into a sparse hole. A new file's directory entry is fsynced
before anything is written into it: fdatasync on the file alone does not make
its name durable. The files of one log are a MappedFileQueue (mapped_file_queue.py).
"""

from __future__ import annotations

import errno
import mmap
import os
import zlib
from pathlib import Path

from libs.errors import StoreFull


class MappedFile:
    def __init__(self, path: Path, start_offset: int, size: int, *, create: bool, what: str = "segment") -> None:
        self.path = path
        self.start_offset = start_offset
        self.size = size
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o644)
        try:
            if create:
                preallocate(self.fd, size, f"{what} {path.name}")
            actual = os.fstat(self.fd).st_size
            if actual != size:
                raise ValueError(f"{path} is {actual} bytes; a segment is {size}")
            self.map = mmap.mmap(self.fd, size)
            if create:
                fsync_directory(path.parent)  # else a power cut may forget the file, and what it holds
        except BaseException:
            os.close(self.fd)
            if create:
                path.unlink(missing_ok=True)
            raise
        self.view = memoryview(self.map)

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size

    def sync(self) -> None:
        """Make everything written so far durable (blocks; call from a worker thread)."""
        os.fdatasync(self.fd)

    def close(self) -> None:
        self.view.release()
        self.map.close()
        os.close(self.fd)


def preallocate(fd: int, size: int, what: str) -> None:
    """Reserve every block of a new file now, so that writes through a map never meet a full disk."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise StoreFull(f"no room for a new {size}-byte {what}: {exc.strerror}") from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, size)  # a filesystem without fallocate: a sparse file is the best there is


def fsync_directory(directory: Path) -> None:
    """Make a file's creation, rename or removal in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old file or the new one, never a mix."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)
    fsync_directory(path.parent)


def read_crc_framed(path: Path, size: int) -> bytes | None:
    """The body of a file written as body + CRC32 (see `crc_framed`); None when missing, short or damaged."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) != size + 4 or zlib.crc32(raw[:size]).to_bytes(4, "big") != raw[size:]:
        return None
    return raw[:size]


def crc_framed(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "big")
