"""New store files have their directory entries fsynced: a power cut cannot forget a file a durable put is in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from libs.store.config import FlushMode
from tests.support.store import Stores, record, stored


def synced_directories(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Watch the OS boundary: the directories fsynced from now on."""
    real = os.fsync
    seen: list[Path] = []

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.is_dir():
            seen.append(path)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


async def test_a_new_commitlog_segment_is_in_its_synced_directory_before_its_put_is_answered(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.open(flush_mode=FlushMode.SYNC_FLUSH)
    store.start()
    synced = synced_directories(monkeypatch)
    results = [r for i in range(80) for r in stored(await store.put(record("T", 0, bytes(1000))))]
    rolled = [r for r in results if r.physical_offset % store.config.segment_size == 0]
    assert len(rolled) == 2  # the first segment and one roll
    assert synced.count(store.config.commitlog_dir.resolve()) == 2


async def test_new_consume_queue_files_and_directories_are_synced_at_the_checkpoint(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.open()
    synced = synced_directories(monkeypatch)
    for i in range(60):  # 50 units per file: a second file
        await store.put(record("T", 0, f"m{i}".encode()))
    await store.flusher.flush(checkpoint=True)
    queue_dir = (store.config.consumequeue_dir / "T" / "0").resolve()
    assert sorted(p.name for p in queue_dir.iterdir()) == ["00000000000000000000", "00000000000000001000"]
    for directory in (queue_dir, queue_dir.parent, queue_dir.parent.parent):
        assert directory in synced, f"{directory} was not fsynced; fsynced: {synced}"
