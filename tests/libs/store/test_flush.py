"""Flush: SYNC_FLUSH answers only durable puts (group commit), ASYNC_FLUSH syncs in the background."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from libs.errors import FlushTimeout, StoreReadOnly
from libs.store.checkpoint import Checkpoint
from libs.store.config import FlushMode
from libs.store.message_store import MessageStore
from tests.support.clock import FakeClock
from tests.support.store import Stores, failing_disk, make_config, pull_all, record, stored


def flush_done(store: MessageStore) -> asyncio.Event:
    """Set once a background flush round has finished (the flusher runs on a real timer)."""
    done = asyncio.Event()
    real_flush = store.flusher.flush

    async def flush(*, checkpoint: bool = False) -> None:
        await real_flush(checkpoint=checkpoint)
        done.set()

    store.flusher.flush = flush  # type: ignore[method-assign]
    return done


def started(stores: Stores, **overrides: object) -> MessageStore:
    store = stores.open(**overrides)
    store.start()
    return store


async def test_a_sync_flush_put_returns_once_its_bytes_are_synced(stores: Stores) -> None:
    store = started(stores, flush_mode=FlushMode.SYNC_FLUSH)
    synced: list[int] = []
    real_sync = store.commitlog.files.sync

    def recording_sync(start: int = 0, upto: int | None = None) -> None:
        real_sync(start, upto)
        synced.append(-1 if upto is None else upto)

    store.commitlog.files.sync = recording_sync  # type: ignore[method-assign]
    [result] = stored(await store.put(record("T", 0, b"durable")))
    end = result.physical_offset + result.size
    assert synced, "a SYNC_FLUSH put was answered without a sync"
    assert synced[-1] >= end, f"the last sync reached {synced[-1]}, the put ends at {end}"
    assert store.commitlog.flushed_offset >= end


async def test_concurrent_sync_flush_puts_share_few_syncs(stores: Stores) -> None:
    store = started(stores, flush_mode=FlushMode.SYNC_FLUSH)
    outcomes = await asyncio.gather(*(store.put(record("T", i % 4, f"m{i}".encode())) for i in range(64)))
    assert all(outcome.failure is None for outcome in outcomes)
    assert store.commitlog.flushed_offset == store.commitlog.write_offset
    assert 1 <= store.flusher.syncs <= 4, f"{store.flusher.syncs} syncs for 64 puts"
    assert pull_all(store, "T", 3) == [f"m{i}".encode() for i in range(3, 64, 4)]


async def test_a_put_that_stores_nothing_does_not_wait_for_the_disk(stores: Stores) -> None:
    store = started(stores, flush_mode=FlushMode.SYNC_FLUSH)
    outcome = await store.put(record("T", 0, b"x" * 70_000))
    assert (outcome.stored, type(outcome.failure).__name__) == ([], "InvalidMessage")
    assert store.flusher.syncs == 0


def blocking_sync(store: MessageStore) -> threading.Event:
    """Make the CommitLog's sync hang until released (a disk that stops answering).

    The segments' sync (a plain MappedFileQueue) is replaced, not CommitLog.sync: a compiled class's methods cannot be.
    """
    release = threading.Event()
    real_sync = store.commitlog.files.sync

    def hanging(start: int = 0, upto: int | None = None) -> None:
        release.wait(10)
        real_sync(start, upto)

    store.commitlog.files.sync = hanging  # type: ignore[method-assign]
    return release


async def test_a_sync_flush_put_times_out_when_the_disk_does_not_answer(stores: Stores) -> None:
    store = started(stores, flush_mode=FlushMode.SYNC_FLUSH, sync_flush_timeout_ms=50)
    release = blocking_sync(store)
    try:
        with pytest.raises(FlushTimeout) as raised:
            await store.put(record("T", 0, b"in limbo"))
        assert raised.value.detail == (
            "the disk did not confirm the write within 50 ms; the message is stored but not known to be durable"
        )
        assert pull_all(store, "T", 0) == [b"in limbo"]
    finally:
        release.set()
    await stores.close(store)
    store = stores.open()
    assert pull_all(store, "T", 0) == [b"in limbo"]


async def test_after_a_failed_sync_the_store_takes_no_more_writes_until_restarted(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = started(stores, flush_mode=FlushMode.SYNC_FLUSH)
    [kept] = stored(await store.put(record("T", 0, b"durable")))
    failing_disk(monkeypatch, [OSError(errno.EIO, "Input/output error")])
    with pytest.raises(FlushTimeout) as raised:
        await store.put(record("T", 0, b"in doubt"))
    assert raised.value.detail == (
        "the disk refused the write: [Errno 5] Input/output error; the message is stored but not durable, "
        "and the store takes no more writes until the broker is restarted"
    )
    # The next fdatasync would succeed (the kernel reports an error once): it must not be believed.
    outcome = await store.put(record("T", 0, b"refused"))
    assert isinstance(outcome.failure, StoreReadOnly)
    assert outcome.stored == []
    assert outcome.failure.status == 503
    assert "until the broker is restarted" in outcome.failure.detail
    assert store.read_only
    assert store.commitlog.flushed_offset == kept.physical_offset + kept.size  # never claimed past the failure
    assert pull_all(store, "T", 0) == [b"durable", b"in doubt"]  # reads go on

    await stores.close(store)
    assert store.config.abort_path.exists()  # the next start validates what follows the checkpoint
    monkeypatch.undo()
    store = stores.open(flush_mode=FlushMode.SYNC_FLUSH)
    assert not stores.report.clean
    store.start()
    [after] = stored(await store.put(record("T", 0, b"after the restart")))
    assert after.queue_offset == 2


async def test_a_failed_checkpoint_sync_also_stops_writes_and_keeps_the_old_checkpoint(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.open()
    await store.put(record("T", 0, b"a"))
    await store.flusher.flush(checkpoint=True)
    before = Checkpoint.read(store.config.checkpoint_path)
    await store.put(record("T", 0, b"b"))
    failing_disk(monkeypatch, [OSError(errno.EIO, "Input/output error")] * 2)
    with pytest.raises(OSError, match="Input/output error"):
        await store.flusher.flush(checkpoint=True)
    await store.flusher.flush(checkpoint=True)  # the disk answers again: still nothing is called durable
    assert Checkpoint.read(store.config.checkpoint_path) == before
    assert type(store.append(record("T", 0, b"c")).failure).__name__ == "StoreReadOnly"


async def test_async_flush_puts_are_synced_in_the_background(stores: Stores) -> None:
    store = started(stores, flush_interval_ms=10, checkpoint_interval_ms=0)
    flushed = flush_done(store)
    [result] = stored(await store.put(record("T", 0, b"soon durable")))
    end = result.physical_offset + result.size
    assert store.commitlog.flushed_offset < end  # answered from the page cache
    await asyncio.wait_for(flushed.wait(), 5)
    assert store.commitlog.flushed_offset == end
    assert Checkpoint.read(store.config.checkpoint_path) == Checkpoint(end, end, int(stores.clock() * 1000))


async def test_the_periodic_flush_writes_queue_units_to_their_files(stores: Stores) -> None:
    store = started(stores, flush_interval_ms=10)
    flushed = flush_done(store)
    await store.put(record("T", 0, b"a") + record("T", 0, b"b"))
    await asyncio.wait_for(flushed.wait(), 5)
    assert (store.config.consumequeue_dir / "T" / "0" / "00000000000000000000").stat().st_size == 40


async def test_close_flushes_and_checkpoints_everything(stores: Stores) -> None:
    store = stores.open()
    await store.put(record("T", 0, b"a") * 3)
    end = store.commitlog.write_offset
    await stores.close(store)
    assert Checkpoint.read(store.config.checkpoint_path) == Checkpoint(end, end, int(stores.clock() * 1000))


async def test_puts_are_answered_while_a_checkpoint_waits_on_a_slow_disk(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every fsync of a checkpoint round (queue files, index, the checkpoint file and its directory) runs off
    the event loop: a disk that takes its time holds the round, never the puts and answers."""
    store = stores.open()
    await store.put(record("T", 0, b"a"))
    loop, entered = asyncio.get_running_loop(), asyncio.Event()
    release, on_the_loop = threading.Event(), []
    loop_thread, real_fsync = threading.get_ident(), os.fsync

    def slow_fsync(fd: int) -> None:
        if threading.get_ident() == loop_thread:
            on_the_loop.append(fd)  # here a slow disk would hold every put and answer of the broker
        else:
            loop.call_soon_threadsafe(entered.set)
            release.wait(10)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    checkpoint = asyncio.create_task(store.flusher.flush(checkpoint=True))
    try:
        await asyncio.wait_for(entered.wait(), 5)
        answered = await asyncio.wait_for(store.put(record("T", 0, b"b")), 5)
        assert [r.queue_offset for r in stored(answered)] == [1]
    finally:
        release.set()
    await checkpoint
    assert Checkpoint.read(store.config.checkpoint_path) is not None
    assert on_the_loop == []


async def test_checkpoints_keep_their_interval_through_a_wall_clock_step(tmp_path: Path) -> None:
    # The flusher times checkpoints on the monotonic clock: a wall clock stepped an hour back must not stop them
    # for an hour, nor one stepped forward write them any more often.
    wall, monotonic = FakeClock(), FakeClock(1_000.0)
    store = MessageStore(make_config(tmp_path / "store"), clock=wall, monotonic=monotonic)
    store.open()
    interval = store.config.checkpoint_interval_ms / 1000
    try:
        await store.flusher.flush()
        first = Checkpoint.read(store.config.checkpoint_path)
        assert first is not None

        wall.advance(-3600)
        monotonic.advance(interval)
        await store.put(record("T", 0, b"after the step back"))
        await store.flusher.flush()
        second = Checkpoint.read(store.config.checkpoint_path)
        assert second is not None
        assert second.dispatch_offset == store.commitlog.write_offset > first.dispatch_offset

        wall.advance(7200)
        await store.put(record("T", 0, b"after the step forward"))
        await store.flusher.flush()
        assert Checkpoint.read(store.config.checkpoint_path) == second, "a wall-clock step brought a checkpoint early"
    finally:
        await store.close()
