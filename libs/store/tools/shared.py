"""What the offline store tools (`petrel store check|dump`) share: read-only access, and problems.

The tools never open a MessageStore: that would create the abort file and run
recovery, which truncates and rewrites. Here CommitLog segments are mapped with
ACCESS_READ and ConsumeQueue files are read with plain reads, so a tool may look
at a running broker's store, or at a copy of a damaged one, and change nothing.

A store directory (see libs.store.config.StoreConfig)::

    commitlog/<20-digit CommitLog offset of the first byte>    segments, all of one size
    consumequeue/<topic>/<queue id>/<20-digit byte offset>     20-byte units (libs.store.consume_queue)
    index/<yyyyMMddHHmmssSSS>                                  key index files (libs.store.index_file)
    checkpoint                                                 28 bytes (libs.store.checkpoint)
    quarantine/<20-digit CommitLog offset>                     damaged bytes a repair took out (libs.store.tools.repair)
    abort                                                      while the store is open, or after a crash

The segment size is not recorded anywhere: it is the size of the segment files.
"""

from __future__ import annotations

import contextlib
import enum
import mmap
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from libs.store.checkpoint import Checkpoint
from libs.store.config import StoreConfig
from libs.store.consume_queue import UNIT, Unit

NAME_DIGITS: Final = 20


class StoreToolError(Exception):
    """What stops a tool before it starts: not a store directory, no such queue."""


@dataclass(frozen=True, slots=True)
class SegmentFile:
    path: Path
    start: int
    """The CommitLog offset in the file's name."""
    size: int


@dataclass(frozen=True, slots=True)
class QueueFile:
    path: Path
    start: int
    """The byte offset in the file's name: the first unit's index times 20."""
    size: int

    @property
    def first_unit(self) -> int:
        return self.start // UNIT.size


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"


class Kind(enum.StrEnum):
    SEGMENT_SIZE = "segment-size"
    SEGMENT_NAME = "segment-name"
    SEGMENT_MISSING = "segment-missing"
    SEGMENT_PAST_END = "segment-past-end"
    BAD_MAGIC = "bad-magic"
    BAD_LENGTH = "bad-length"
    BAD_BLANK = "bad-blank"
    CRC_MISMATCH = "crc-mismatch"
    WRONG_OFFSET = "wrong-physical-offset"
    BAD_FRAMING = "bad-framing"
    QUEUE_OFFSET_GAP = "queue-offset-gap"
    GARBAGE = "garbage-after-end"
    CQ_FILE = "consumequeue-file"
    CQ_UNIT = "consumequeue-unit"
    CQ_COUNT = "consumequeue-count"
    CHECKPOINT = "checkpoint"
    INDEX = "index-file"


@dataclass(frozen=True, slots=True)
class Problem:
    kind: Kind
    path: str
    """Relative to the store directory."""
    offset: int | None
    detail: str
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        if self.offset is None:
            where = ""
        else:
            where = f" unit {self.offset}" if self.path.startswith("consumequeue/") else f" offset {self.offset}"
        return f"{self.path}{where}: {self.detail}"

    def line(self) -> str:
        return f"{self.severity.upper()} {self}"


class Findings:
    """The problems found so far, up to `limit` (0: no limit)."""

    def __init__(self, config: StoreConfig, limit: int) -> None:
        self.config = config
        self.limit = limit
        self.problems: list[Problem] = []

    @property
    def full(self) -> bool:
        return 0 < self.limit <= len(self.problems)

    def add(self, kind: Kind, path: Path | str, offset: int | None, detail: str, *, warning: str = "") -> None:
        """Record a problem; `warning`, saying why it is not an error, makes it a warning."""
        if self.full:
            return
        name = path if isinstance(path, str) else relative(self.config, path)
        severity = Severity.WARNING if warning else Severity.ERROR
        self.problems.append(Problem(kind, name, offset, f"{detail}; {warning}" if warning else detail, severity))


@dataclass(frozen=True, slots=True)
class CheckReport:
    root: Path
    clean_stop: bool
    redispatch_from: int | None
    segment_size: int | None
    segments: int
    records: int
    blanks: int
    log_min: int
    log_end: int
    queues: int
    units: int
    index_files: int
    checkpoint: Checkpoint | None
    problems: tuple[Problem, ...]
    max_problems: int
    quarantined: int = 0
    """Quarantine fillers: records a repair took out."""

    @property
    def errors(self) -> int:
        return sum(p.severity is Severity.ERROR for p in self.problems)

    @property
    def warnings(self) -> int:
        return len(self.problems) - self.errors

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary_lines(self) -> list[str]:
        if self.clean_stop:
            state = "closed cleanly"
        else:
            state = f"NOT closed cleanly: recovery will run at the next start, from offset {self.redispatch_from}"
        if self.segment_size is None:
            log = "commitlog: no segments"
        else:
            quarantined = f", {_count(self.quarantined, 'quarantined record')}" if self.quarantined else ""
            log = (
                f"commitlog: {_count(self.segments, 'segment')} of {self.segment_size} bytes, "
                f"{_count(self.records, 'record')}, {_count(self.blanks, 'blank filler')}{quarantined}; "
                f"the log runs from offset {self.log_min} to {self.log_end}"
            )
        cp = self.checkpoint
        checkpoint = "none" if cp is None else f"commitlog offset {cp.commitlog_offset}, dispatch {cp.dispatch_offset}"
        verdict = f"{_count(self.errors, 'error')}, {_count(self.warnings, 'warning')}" if self.problems else "clean"
        if self.max_problems and len(self.problems) >= self.max_problems:
            verdict += f" (stopped at --max-problems {self.max_problems})"
        return [
            f"store {self.root}: {state}",
            log,
            f"consumequeue: {_count(self.queues, 'queue')}, {_count(self.units, 'unit')}",
            f"checkpoint: {checkpoint}",
            f"index files: {self.index_files}",
            f"result: {verdict}",
        ]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def store_config(root: Path) -> StoreConfig:
    """The paths of the store in `root`; StoreToolError when it has no CommitLog directory."""
    config = StoreConfig(root=root)
    if not config.commitlog_dir.is_dir():
        raise StoreToolError(f"{root} is not a store directory: it has no commitlog/ directory")
    return config


def relative(config: StoreConfig, path: Path) -> str:
    return path.relative_to(config.root).as_posix()


def _numbered(directory: Path) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    named = [p for p in directory.iterdir() if p.is_file() and p.name.isdigit() and len(p.name) == NAME_DIGITS]
    return sorted((int(p.name), p) for p in named)


def segment_files(config: StoreConfig) -> list[SegmentFile]:
    """The CommitLog segments in offset order."""
    return [SegmentFile(path, start, path.stat().st_size) for start, path in _numbered(config.commitlog_dir)]


def common_size(segments: list[SegmentFile]) -> int | None:
    """The segment size: the size most segments have (the larger on a tie, as a damaged file is short)."""
    counts = Counter(s.size for s in segments)
    if not counts:
        return None
    return max(counts, key=lambda size: (counts[size], size))


def queue_dirs(config: StoreConfig) -> list[tuple[str, int, Path]]:
    """Every (topic, queue id, directory) under consumequeue/, sorted."""
    root = config.consumequeue_dir
    if not root.is_dir():
        return []
    found = [
        (topic_dir.name, int(queue_dir.name), queue_dir)
        for topic_dir in root.iterdir()
        if topic_dir.is_dir()
        for queue_dir in topic_dir.iterdir()
        if queue_dir.is_dir() and queue_dir.name.isdigit()
    ]
    return sorted(found)


def queue_files(directory: Path) -> list[QueueFile]:
    return [QueueFile(path, start, path.stat().st_size) for start, path in _numbered(directory)]


def read_units(path: Path) -> list[Unit]:
    """The whole units of a ConsumeQueue file (a partial unit at the end is left out)."""
    raw = path.read_bytes()
    return list(UNIT.iter_unpack(raw[: len(raw) - len(raw) % UNIT.size]))


class SegmentMaps:
    """Read-only maps of CommitLog segments, made on first use and all closed on exit."""

    def __init__(self) -> None:
        self._maps: dict[Path, tuple[mmap.mmap | None, memoryview]] = {}

    def view(self, segment: SegmentFile) -> memoryview:
        opened = self._maps.get(segment.path)
        if opened is None:
            opened = _map_read_only(segment.path)
            self._maps[segment.path] = opened
        return opened[1]

    def close(self) -> None:
        for mapping, view in self._maps.values():
            view.release()
            if mapping is not None:
                with contextlib.suppress(BufferError):  # a view still held (say by a traceback) unmaps it later
                    mapping.close()
        self._maps.clear()

    def __enter__(self) -> SegmentMaps:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _map_read_only(path: Path) -> tuple[mmap.mmap | None, memoryview]:
    fd = os.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size == 0:
            return None, memoryview(b"")  # an empty file cannot be mapped
        mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    return mapping, memoryview(mapping)
