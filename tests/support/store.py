"""The storage engine's tests' tools: small stores on real files, records, crashes, aged segments."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from libs.codec import decode_record, encode_record
from libs.message import KEY_SEPARATOR, MessageRecord, Prop
from libs.store.config import StoreConfig
from libs.store.message_store import MessageStore, PullResult, PutOutcome, PutResult
from libs.store.recovery import RecoveryReport
from tests.support.clock import FakeClock

T0 = 1_700_000_000.0
"""The fake clock's start, in seconds (2023-11-14)."""
T0_MS = int(T0 * 1000)
EVER = (0, 2**62)
"""A time range (ms) holding every message."""

SMALL: dict[str, Any] = {
    "segment_size": 64 * 1024,
    "index_slot_count": 1024,
    "index_max_entries": 100_000,
    "cq_units_per_file": 50,
    "flush_interval_ms": 60_000,
    "sync_flush_timeout_ms": 5_000,
}
"""Sizes that make segments and ConsumeQueue files roll after a few dozen messages."""


def make_config(root: Path, **overrides: Any) -> StoreConfig:
    return StoreConfig(root=root, **(SMALL | overrides))


def make_store(root: Path, clock: FakeClock | None = None, **overrides: Any) -> MessageStore:
    """An opened (not started) store on `root` with small sizes; `clock` (one fake moved by hand) is its wall clock
    and its monotonic clock alike."""
    clock = clock or FakeClock()
    store = MessageStore(make_config(root, **overrides), clock=clock, monotonic=clock)
    store.open()
    return store


def record(
    topic: str = "T",
    queue_id: int = 0,
    body: bytes = b"body",
    *,
    tag: str | None = None,
    keys: Iterable[str] = (),
    msg_id: str | None = None,
    properties: dict[str, str] | None = None,
) -> bytes:
    """One encoded record as a producer's gateway would send it."""
    props = dict(properties or {})
    if tag is not None:
        props[Prop.TAGS] = tag
    if keys:
        props[Prop.KEYS] = KEY_SEPARATOR.join(keys)
    if msg_id is not None:
        props[Prop.UNIQ_KEY] = msg_id
    return encode_record(MessageRecord(topic=topic, body=body, queue_id=queue_id, properties=props))


def bodies(result: PullResult) -> list[bytes]:
    return [decode_record(raw).body for raw in result.records]


def stored(outcome: PutOutcome) -> list[PutResult]:
    """The results of a put that must have stored everything."""
    assert outcome.failure is None, outcome.failure
    return outcome.stored


def pull_all(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    """Bodies of every message of the queue, from its minimum offset on."""
    low, high = store.queue_offsets(topic, queue_id)
    return bodies(store.pull(topic, queue_id, low, high - low + 1))


def crash(store: MessageStore) -> None:
    """What kill -9 leaves: files as the page cache has them, nothing flushed, no checkpoint, the abort file.

    ConsumeQueue units still in memory are lost; CommitLog and index bytes written
    through the maps are in the files already.
    """
    for task in store.flusher._tasks:
        task.cancel()
    store.index.close()  # syncs, which changes nothing a reader sees
    store.queues.close()
    store.commitlog.close()


def segment_files(config: StoreConfig) -> list[str]:
    return sorted(p.name for p in config.commitlog_dir.iterdir())


def write_at(config: StoreConfig, offset: int, data: bytes) -> None:
    """Overwrite CommitLog bytes at `offset` in the segment file (as a torn write or bad disk would)."""
    start = offset - offset % config.segment_size
    fd = os.open(config.commitlog_dir / f"{start:020d}", os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset - start)
    finally:
        os.close(fd)


class Stores:
    """Opens stores on one directory, one at a time, and closes whatever a test left open."""

    def __init__(self, root: Path, clock: FakeClock) -> None:
        self.root = root
        self.clock = clock
        self.reports: list[RecoveryReport] = []
        self._open: list[MessageStore] = []

    def config(self, **overrides: Any) -> StoreConfig:
        return make_config(self.root, **overrides)

    def open(self, **overrides: Any) -> MessageStore:
        store = MessageStore(self.config(**overrides), clock=self.clock, monotonic=self.clock)
        self.reports.append(store.open())
        self._open.append(store)
        return store

    @property
    def report(self) -> RecoveryReport:
        """What the last open recovered."""
        return self.reports[-1]

    async def close(self, store: MessageStore) -> None:
        self._open.remove(store)
        await store.close()

    def crash(self, store: MessageStore) -> None:
        self._open.remove(store)
        crash(store)

    async def restart(self, store: MessageStore, **overrides: Any) -> MessageStore:
        await self.close(store)
        return self.open(**overrides)

    async def close_all(self) -> None:
        while self._open:
            await self.close(self._open[-1])


RETENTION_BODY = b"r" * 1000  # about 1.1 KB a record: 57 to a 64 KiB segment


async def fill(store: MessageStore, count: int) -> list[bytes]:
    sent = [f"{i:05d}".encode() + RETENTION_BODY for i in range(count)]
    for i, body in enumerate(sent):
        await store.put(record("T", 0, body, keys=[f"k{i}"]))
    await store.flusher.flush()
    return sent


def age(store: MessageStore, segments: int, clock: FakeClock) -> None:
    """Make the oldest `segments` segments older than the retention time."""
    old = clock() - store.config.file_reserved_hours * 3600 - 60
    for segment in store.commitlog.segments[:segments]:
        os.utime(segment.path, (old, old))


def failing_disk(monkeypatch: pytest.MonkeyPatch, fail: list[OSError]) -> list[int]:
    """The disk answers the next fdatasync calls with the errors in `fail` (an injected disk fault); the fds synced."""
    real = os.fdatasync
    synced: list[int] = []

    def fdatasync(fd: int) -> None:
        synced.append(fd)
        if fail:
            raise fail.pop(0)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return synced
