"""Retention and a full disk: old segments go, queues follow, and a full disk refuses writes cleanly."""

from __future__ import annotations

import errno
import os
import shutil
import time
from typing import NamedTuple

import pytest

from libs.errors import OffsetOutOfRange, StoreFull
from tests.support.clock import FakeClock
from tests.support.store import EVER, RETENTION_BODY, Stores, age, bodies, fill, pull_all, record, stored


async def test_segments_past_the_retention_time_are_deleted_and_queues_follow(stores: Stores, clock: FakeClock) -> None:
    store = stores.open(file_reserved_hours=1.0)
    sent = await fill(store, 300)
    assert len(store.commitlog.segments) == 6
    age(store, 2, clock)
    assert store.delete_expired() == 2
    assert len(list(store.config.commitlog_dir.iterdir())) == 4
    assert store.commitlog.min_offset == 2 * 65536
    first_kept = 2 * 57  # the first message of the third segment
    assert store.queue_offsets("T", 0) == (first_kept, 300)
    assert pull_all(store, "T", 0) == sent[first_kept:]
    with pytest.raises(OffsetOutOfRange) as raised:
        store.pull("T", 0, first_kept - 1, 1)
    assert raised.value.detail == f"offset {first_kept - 1} of T/0 is outside [{first_kept}, 300]"
    assert store.query_key("T", "k0", *EVER) == []
    assert store.query_key("T", f"k{first_kept - 1}", *EVER) == []
    assert [m.body for m in store.query_key("T", f"k{first_kept}", *EVER)] == [sent[first_kept]]


async def test_whole_queue_files_below_the_log_are_deleted(stores: Stores, clock: FakeClock) -> None:
    store = stores.open(file_reserved_hours=1.0)
    await fill(store, 300)
    age(store, 3, clock)
    store.delete_expired()
    low, _ = store.queue_offsets("T", 0)
    names = sorted(p.name for p in (store.config.consumequeue_dir / "T" / "0").iterdir())
    assert int(names[0]) // 20 == low - low % 50  # the file holding the first unit left is the first file


async def test_young_segments_are_kept(stores: Stores) -> None:
    store = stores.open(file_reserved_hours=1.0)
    await fill(store, 200)
    assert store.delete_expired() == 0
    assert store.commitlog.min_offset == 0


async def test_the_segment_being_written_is_never_deleted(stores: Stores, clock: FakeClock) -> None:
    store = stores.open(file_reserved_hours=1.0)
    await fill(store, 100)
    age(store, 2, clock)
    assert store.delete_expired() == 1
    assert len(store.commitlog.segments) == 1
    assert store.delete_expired(force=True) == 0
    [result] = stored(await store.put(record("T", 0, b"still writable")))
    assert result.queue_offset == 100


async def test_a_segment_not_yet_flushed_is_never_deleted(stores: Stores, clock: FakeClock) -> None:
    store = stores.open(file_reserved_hours=1.0)
    for _ in range(100):
        await store.put(record("T", 0, RETENTION_BODY))
    age(store, 2, clock)
    assert store.delete_expired(force=True) == 0
    assert store.queue_offsets("T", 0) == (0, 100)


async def test_force_deletes_the_oldest_segment_even_if_young(stores: Stores) -> None:
    store = stores.open()
    sent = await fill(store, 200)
    assert store.delete_expired(force=True) == 1
    assert store.commitlog.min_offset == 65536
    low, high = store.queue_offsets("T", 0)
    assert pull_all(store, "T", 0) == sent[low:high]
    assert low > 0


async def test_a_queue_whose_units_are_still_in_memory_follows_the_log_too(stores: Stores) -> None:
    # Between checkpoints a queue's units go to its files only past a backlog: a queue with a few has no file yet,
    # and its minimum must move past a deleted segment all the same (a pull there would read a deleted segment).
    store = stores.open()
    await store.flusher.flush()  # the first round is a checkpoint; later ones at the same instant are not
    for _ in range(5):
        await store.put(record("U", 0, RETENTION_BODY))
    sent = await fill(store, 200)
    assert not (store.config.consumequeue_dir / "U").exists()
    assert store.delete_expired(force=True) == 1
    assert store.queue_offsets("U", 0) == (5, 5)
    assert pull_all(store, "U", 0) == []
    low, high = store.queue_offsets("T", 0)
    assert pull_all(store, "T", 0) == sent[low:high]


async def test_deleted_segments_stay_deleted_and_queue_minimums_stay_after_a_restart(
    stores: Stores, clock: FakeClock
) -> None:
    store = stores.open(file_reserved_hours=1.0)
    sent = await fill(store, 300)
    age(store, 2, clock)
    store.delete_expired()
    low, _ = store.queue_offsets("T", 0)
    store = await stores.restart(store, file_reserved_hours=1.0)
    assert store.queue_offsets("T", 0) == (low, 300)
    assert pull_all(store, "T", 0) == sent[low:]
    [result] = stored(await store.put(record("T", 0, b"next")))
    assert result.queue_offset == 300


async def test_the_retention_tick_deletes_at_the_configured_hour(stores: Stores, clock: FakeClock) -> None:
    hour = time.localtime(clock()).tm_hour
    store = stores.open(file_reserved_hours=1.0, delete_when_hour=(hour + 1) % 24, disk_max_used_ratio=1.0)
    await fill(store, 200)
    age(store, 2, clock)
    assert store.retention_tick() == 0  # not the hour
    store = await stores.restart(store, file_reserved_hours=1.0, delete_when_hour=hour, disk_max_used_ratio=1.0)
    await store.flusher.flush()
    assert store.retention_tick() == 2


async def test_a_delete_hour_of_minus_one_deletes_at_any_hour(stores: Stores, clock: FakeClock) -> None:
    store = stores.open(file_reserved_hours=1.0, delete_when_hour=-1, disk_max_used_ratio=1.0)
    await fill(store, 200)
    age(store, 2, clock)
    assert store.retention_tick() == 2


async def test_the_retention_tick_deletes_early_when_the_disk_is_filling(stores: Stores) -> None:
    store = stores.open(disk_max_used_ratio=0.0, delete_when_hour=25)
    await fill(store, 200)
    assert store.retention_tick() == 1  # one segment a tick, however young
    assert store.commitlog.min_offset == 65536


# --- a full disk ---------------------------------------------------------------------------------


class Usage(NamedTuple):
    total: int
    used: int
    free: int


def disk_at(monkeypatch: pytest.MonkeyPatch, percent: int) -> None:
    """Fake the file system's answer to statvfs: `percent` of 1000 blocks used."""
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(1000, percent * 10, 1000 - percent * 10))


async def test_a_nearly_full_disk_refuses_puts_and_reads_go_on(stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    store = stores.open()
    await store.put(record("T", 0, b"before"))
    store = await stores.restart(store)
    disk_at(monkeypatch, 96)
    outcome = await store.put(record("T", 0, b"refused"))
    assert outcome.stored == []
    assert isinstance(outcome.failure, StoreFull)
    assert outcome.failure.detail == (
        f"the disk under {store.config.root} is 96% full; writes are refused above 95% (reads go on)"
    )
    assert pull_all(store, "T", 0) == [b"before"]


def no_space_for(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make posix_fallocate of a `size`-byte file fail as on a full disk."""
    real = os.posix_fallocate

    def fallocate(fd: int, offset: int, length: int) -> None:
        if length == size:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)


async def test_no_room_for_the_first_segment_is_store_full(stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    store = stores.open()
    no_space_for(65536, monkeypatch)
    outcome = await store.put(record("T", 0, b"nowhere to go"))
    assert outcome.stored == []
    assert isinstance(outcome.failure, StoreFull)
    assert outcome.failure.detail == (
        "no room for a new 65536-byte CommitLog segment 00000000000000000000: No space left on device"
    )
    assert list(store.config.commitlog_dir.iterdir()) == []
    assert store.queue_offsets("T", 0) == (0, 0)
    monkeypatch.undo()
    [result] = stored(await store.put(record("T", 0, b"room again")))
    assert (result.queue_offset, result.physical_offset) == (0, 0)


async def test_a_full_disk_at_a_segment_roll_is_store_full_and_writing_resumes_with_room(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.open()
    sent: list[bytes] = []
    size = len(record("T", 0, RETENTION_BODY))
    while store.commitlog.write_offset + size + 8 <= 65536:  # until the next one needs a new segment
        sent.append(f"{len(sent):05d}".encode() + RETENTION_BODY[5:])
        await store.put(record("T", 0, sent[-1]))
    assert len(store.commitlog.segments) == 1
    no_space_for(65536, monkeypatch)
    outcome = await store.put(record("T", 0, RETENTION_BODY))
    assert (outcome.stored, type(outcome.failure)) == ([], StoreFull)
    assert pull_all(store, "T", 0) == sent
    monkeypatch.undo()
    [result] = stored(await store.put(record("T", 0, RETENTION_BODY)))
    assert (result.queue_offset, result.physical_offset) == (len(sent), 65536)
    assert pull_all(store, "T", 0) == [*sent, RETENTION_BODY]


async def test_a_put_that_meets_a_full_disk_is_stored_exactly_when_its_outcome_says_so(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.open(index_max_entries=2)
    await store.put(record("T", 0, b"one", msg_id="ID1"))
    await store.put(record("T", 0, b"two", msg_id="ID2"))  # the index file is full now
    index_file_size = store.index.files[0].path.stat().st_size
    no_space_for(index_file_size, monkeypatch)
    outcome = await store.put(record("T", 0, b"three", msg_id="ID3"))
    if not outcome.stored:
        assert isinstance(outcome.failure, StoreFull)
    pulled = bodies(store.pull("T", 0, 0, 10))
    assert pulled[2:] == [b"three"] * len(outcome.stored), f"answered {outcome}, but the queue holds {pulled}"
