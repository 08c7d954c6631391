"""StoreConfig: every knob of the storage engine, with RocketMQ's defaults."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class FlushMode(enum.StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    """A put is answered once in the page cache; a background flush syncs every interval."""
    SYNC_FLUSH = "SYNC_FLUSH"
    """A put is answered once its bytes are on disk (group commit: one fdatasync for all waiting)."""


@dataclass(frozen=True, slots=True)
class StoreConfig:
    root: Path
    segment_size: int = 1024 * 1024 * 1024
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    flush_interval_ms: int = 500
    sync_flush_timeout_ms: int = 5_000
    checkpoint_interval_ms: int = 5_000
    cq_units_per_file: int = 300_000
    max_open_cq_files: int = 512
    index_slot_count: int = 5_000_000
    index_max_entries: int = 20_000_000
    file_reserved_hours: float = 72.0
    delete_when_hour: int = 4
    """The local hour in which expired segments go (RocketMQ's deleteWhen); -1: at any hour."""
    disk_max_used_ratio: float = 0.75
    """Past this share of the disk in use, the oldest segments are deleted early."""
    disk_refuse_ratio: float = 0.95
    """Past this share, puts are refused (StoreFull) so the disk never fills under the store."""
    scheduled_roll_grace_seconds: float = 60.0
    """Under disk pressure, how long a segment holding pending scheduled messages waits for
    them to be rolled (re-put) before it is deleted anyway, each of them reported lost."""

    @property
    def commitlog_dir(self) -> Path:
        return self.root / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.root / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def checkpoint_path(self) -> Path:
        return self.root / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.root / "abort"
