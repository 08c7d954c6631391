"""A batch stored a run at a time: across segments, with DEDUP copies inside it, and killed in the middle."""

from __future__ import annotations

import errno
import mmap
import os

import pytest

from libs.codec import BLANK_MAGIC, decode_record, peek_frame
from libs.errors import StoreFull
from libs.message import Prop
from tests.support.store import EVER, T0_MS, Stores, pull_all, record, stored

BODY = b"b" * 1000  # about 1.1 KB a record: 57 to a 64 KiB segment
ID = f"{T0_MS:012X}9829373C3E9B000000AA"


def numbered(first: int, count: int, queues: int = 3) -> bytes:
    return b"".join(
        record("T", i % queues, f"{i:04d}".encode() + BODY, keys=[f"k{i}"]) for i in range(first, first + count)
    )


def expected(first: int, count: int, queue_id: int, queues: int = 3) -> list[bytes]:
    return [f"{i:04d}".encode() + BODY for i in range(first, first + count) if i % queues == queue_id]


async def test_a_batch_across_a_segment_end_rolls_between_two_records(stores: Stores) -> None:
    store = stores.open()
    results = stored(await store.put(numbered(0, 100)))

    segment_size = store.config.segment_size
    first_in_second = next(r for r in results if r.physical_offset >= segment_size)
    assert first_in_second.physical_offset == segment_size
    last_in_first = results[results.index(first_in_second) - 1]
    filler_at = last_in_first.physical_offset + last_in_first.size
    assert peek_frame(store.commitlog.segments[0].map, filler_at) == (segment_size - filler_at, BLANK_MAGIC)
    for r in results:
        stamped = decode_record(store.read(r.physical_offset))  # checks the CRC
        assert (stamped.queue_offset, stamped.physical_offset) == (r.queue_offset, r.physical_offset)
        assert stamped.store_timestamp == r.store_timestamp
    for queue_id in range(3):
        assert pull_all(store, "T", queue_id) == expected(0, 100, queue_id)
    assert [m.body for m in store.query_key("T", "k99", *EVER)] == [b"0099" + BODY]


async def test_listeners_hear_every_record_of_a_batch_in_order(stores: Stores) -> None:
    store = stores.open()
    heard: list[tuple[str, int, int, int]] = []
    store.listeners.append(lambda *event: heard.append(event))
    await store.put(numbered(0, 100))
    assert [(queue_id, offset) for _, queue_id, offset, _ in heard] == [(i % 3, i // 3) for i in range(100)]


async def test_a_dedup_copy_later_in_the_same_batch_answers_the_first(stores: Stores) -> None:
    store = stores.open()
    copy = record("T", 0, b"first", msg_id=ID, properties={Prop.DEDUP: "true"})
    again = record("T", 0, b"again", msg_id=ID, properties={Prop.DEDUP: "true"})
    outcome = await store.put_reporting(
        record("T", 0, b"before") + copy + again + record("T", 0, b"after"), dedupe=True
    )

    before, first, duplicate, after = stored(outcome)
    assert (first.duplicate, duplicate.duplicate) == (False, True)
    assert (duplicate.physical_offset, duplicate.queue_offset) == (first.physical_offset, 1)
    assert [before.queue_offset, after.queue_offset] == [0, 2]
    assert pull_all(store, "T", 0) == [b"before", b"first", b"after"]


async def test_a_full_disk_at_a_roll_inside_a_batch_keeps_the_records_before_it(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.open()
    stored(await store.put(numbered(0, 3)))  # the first segment
    real = os.posix_fallocate

    def full(fd: int, offset: int, size: int) -> None:
        if size == store.config.segment_size:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, offset, size)

    monkeypatch.setattr(os, "posix_fallocate", full)
    outcome = await store.put(numbered(3, 97))
    monkeypatch.undo()

    assert isinstance(outcome.failure, StoreFull)
    kept = 3 + len(outcome.stored)
    assert 3 < kept < 100
    assert all(r.physical_offset + r.size <= store.config.segment_size for r in outcome.stored)
    assert len(store.commitlog.segments) == 1
    assert store.commitlog.write_offset == outcome.stored[-1].physical_offset + outcome.stored[-1].size  # no filler
    assert [pull_all(store, "T", q) for q in range(3)] == [expected(0, kept, q) for q in range(3)]


class Killed(BaseException):
    """The process dies here (a BaseException: nothing in the store catches it)."""


async def test_a_process_killed_in_the_middle_of_a_batch_keeps_the_whole_records_before(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.open()
    stored(await store.put(numbered(0, 6)))

    class DyingMap(mmap.mmap):
        """The segment's map: four records are copied into it, then the process dies before the fifth is.

        (The map, not a helper of libs.store.batch_append, is replaced: the compiled module's names cannot be.)
        """

        left = 4

        def __setitem__(self, index: slice, value: bytes | memoryview) -> None:  # type: ignore[override]
            if not self.left:
                raise Killed
            self.left -= 1
            super().__setitem__(index, value)

    segment = store.commitlog.segments[-1]
    dying = DyingMap(segment.fd, segment.size)
    monkeypatch.setattr(segment, "map", dying)
    with pytest.raises(Killed):
        store.append(numbered(6, 10))
    monkeypatch.undo()
    dying.close()
    stores.crash(store)

    store = stores.open()
    assert (stores.report.clean, stores.report.records_dispatched) == (False, 10)
    assert [pull_all(store, "T", q) for q in range(3)] == [expected(0, 10, q) for q in range(3)]
    [after] = stored(await store.put(record("T", 1, b"after")))
    assert after.queue_offset == len(expected(0, 10, 1))
