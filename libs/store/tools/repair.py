"""`petrel store repair`: take damaged records out of the middle of a CommitLog, keeping every record after them.

Run with the broker stopped. From the log's first record, the CommitLog is
scanned as recovery scans it; where the scan stops at damage that is not a torn
tail (see libs.store.recovery: records of the log follow it, or it lies below
the checkpoint's durable offset), the damaged bytes, from there to the next
record of the log, are

1. copied to `quarantine/<20-digit CommitLog offset>` (written atomically, fsynced), then
2. overwritten in place by a quarantine filler of the same length (libs.codec), and the
   segment is synced,

so every later record keeps its offset, and the ConsumeQueue units pointing at
them stay right. Readers skip the filler; the next recovery passes over it and
keeps its queue's offsets dense. A torn tail is left to recovery, which cuts it.
Running it again changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from libs.store.checkpoint import Checkpoint
from libs.store.commitlog import CommitLog, segment_name
from libs.store.mapped_file import fsync_directory, write_atomically
from libs.store.tools.shared import StoreToolError, common_size, relative, segment_files, store_config

QUARANTINE_DIR = "quarantine"


@dataclass(frozen=True, slots=True)
class Quarantined:
    segment: str
    """Relative to the store directory."""
    offset: int
    size: int
    reason: str
    kept_in: str
    """The file holding the damaged bytes, relative to the store directory."""

    def line(self) -> str:
        return (
            f"quarantined {self.size} bytes at offset {self.offset} of {self.segment} ({self.reason}); "
            f"the bytes are in {self.kept_in}"
        )


def repair_store(root: Path) -> list[Quarantined]:
    """Quarantine every damaged record of the store in `root` that recovery would refuse to cut."""
    config = store_config(root)
    size = common_size(segment_files(config))
    if size is None:
        return []
    checkpoint = Checkpoint.read(config.checkpoint_path)
    durable = checkpoint.commitlog_offset if checkpoint else 0
    commitlog = CommitLog(config.commitlog_dir, size)
    try:
        commitlog.load()
    except Exception as exc:
        raise StoreToolError(f"the CommitLog cannot be opened: {exc}") from exc
    done: list[Quarantined] = []
    try:
        offset = commitlog.min_offset
        while (damaged := _next_damage(commitlog, offset, durable)) is not None:
            start, end = damaged
            done.append(_quarantine(root, commitlog, start, end))
            offset = end
    finally:
        commitlog.close()
    return done


def _next_damage(commitlog: CommitLog, offset: int, durable: int) -> tuple[int, int] | None:
    """[start, end) of the first damage from `offset` on that is not a torn tail, or None."""
    for _ in commitlog.scan(offset):
        pass
    stop = commitlog.scanned_to
    if not commitlog.segments or stop >= commitlog.segments[-1].end_offset:
        return None
    resume = commitlog.next_valid(stop)
    if resume is None and stop >= durable:
        return None  # a torn tail: recovery cuts it
    segment_end = commitlog.segment_at(stop).end_offset
    return stop, min(resume if resume is not None else durable, segment_end)


def _quarantine(root: Path, commitlog: CommitLog, start: int, end: int) -> Quarantined:
    segment = commitlog.segment_at(start)
    reason = commitlog.damage_at(start)
    directory = root / QUARANTINE_DIR
    if not directory.exists():
        directory.mkdir()
        fsync_directory(root)
    kept = directory / segment_name(start)
    write_atomically(kept, bytes(commitlog.read(start, end - start)))
    commitlog.quarantine(start, end)
    config = store_config(root)
    return Quarantined(relative(config, segment.path), start, end - start, reason, relative(config, kept))
