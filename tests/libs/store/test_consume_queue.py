"""ConsumeQueue: 20-byte units per (topic, queue), in memory then in files, across file boundaries."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from libs.store.consume_queue import ConsumeQueue, FileHandles
from tests.support.store import Stores, bodies, record

PER_FILE = 50


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def unit(n: int) -> tuple[int, int, int]:
    """The unit this module's tests give queue offset n: (physical offset, size, tag code)."""
    return (n * 100, 100, n % 7)


@pytest.fixture
def handles() -> Iterator[FileHandles]:
    opened = FileHandles(8)
    yield opened
    opened.close()


def make_queue(tmp_path: Path, handles: FileHandles) -> ConsumeQueue:
    return ConsumeQueue(tmp_path / "T" / "0", "T", 0, PER_FILE, handles)


def filled(tmp_path: Path, handles: FileHandles, count: int) -> ConsumeQueue:
    queue = make_queue(tmp_path, handles)
    for n in range(count):
        queue.append(n, *unit(n))
    return queue


def reloaded(tmp_path: Path, handles: FileHandles) -> ConsumeQueue:
    queue = make_queue(tmp_path, handles)
    queue.load(lambda topic, queue_id, phy, size, offset: True, 0)
    return queue


def test_units_read_back_in_memory_before_they_are_written(tmp_path: Path, handles: FileHandles) -> None:
    queue = filled(tmp_path, handles, 120)
    assert queue.read(0, 3) == [unit(0), unit(1), unit(2)]
    assert queue.read(48, 4) == [unit(n) for n in range(48, 52)]
    assert queue.read(118, 10) == [unit(118), unit(119)]  # clipped to the end
    assert not queue.directory.exists()


def test_written_units_land_in_files_named_by_their_byte_offset(tmp_path: Path, handles: FileHandles) -> None:
    queue = filled(tmp_path, handles, 120)
    queue.write_pending()
    names = sorted(p.name for p in queue.directory.iterdir())
    assert names == ["00000000000000000000", "00000000000000001000", "00000000000000002000"]
    assert [(queue.directory / n).stat().st_size for n in names] == [1000, 1000, 400]
    assert queue.read(0, 120) == [unit(n) for n in range(120)]
    assert queue.read(45, 10) == [unit(n) for n in range(45, 55)]


def test_a_read_spans_written_and_pending_units(tmp_path: Path, handles: FileHandles) -> None:
    queue = filled(tmp_path, handles, 70)
    queue.write_pending()
    for n in range(70, 130):
        queue.append(n, *unit(n))
    assert queue.read(60, 50) == [unit(n) for n in range(60, 110)]
    queue.write_pending()
    assert queue.read(0, 200) == [unit(n) for n in range(130)]


def test_a_reloaded_queue_has_its_written_units(tmp_path: Path, handles: FileHandles) -> None:
    filled(tmp_path, handles, 120).write_pending()
    queue = reloaded(tmp_path, handles)
    assert (queue.min_offset, queue.max_offset) == (0, 120)
    assert queue.read(0, 200) == [unit(n) for n in range(120)]
    queue.append(120, *unit(120))
    assert queue.read(119, 5) == [unit(119), unit(120)]


def test_truncate_drops_units_from_an_offset_in_files_and_in_memory(tmp_path: Path, handles: FileHandles) -> None:
    queue = filled(tmp_path, handles, 120)
    queue.write_pending()
    for n in range(120, 130):
        queue.append(n, *unit(n))
    queue.truncate(70)
    assert queue.max_offset == 70
    assert sorted(p.name for p in queue.directory.iterdir()) == ["00000000000000000000", "00000000000000001000"]
    assert queue.read(60, 100) == [unit(n) for n in range(60, 70)]
    assert reloaded(tmp_path, handles).max_offset == 70


def test_truncate_within_unwritten_units(tmp_path: Path, handles: FileHandles) -> None:
    queue = filled(tmp_path, handles, 60)
    queue.write_pending()
    for n in range(60, 80):
        queue.append(n, *unit(n))
    queue.truncate(65)
    queue.write_pending()
    assert reloaded(tmp_path, handles).read(0, 100) == [unit(n) for n in range(65)]


def test_appending_at_an_earlier_offset_replaces_the_tail(tmp_path: Path, handles: FileHandles) -> None:
    queue = filled(tmp_path, handles, 60)
    queue.write_pending()
    queue.append(55, 1, 2, 3)  # recovery dispatching again what the queue already had
    assert queue.max_offset == 56
    assert queue.read(54, 10) == [unit(54), (1, 2, 3)]


def test_appending_past_the_end_is_refused(tmp_path: Path, handles: FileHandles) -> None:
    queue = filled(tmp_path, handles, 3)
    with pytest.raises(ValueError, match=r"^T/0: unit 5 would leave a gap after 3$"):
        queue.append(5, *unit(5))


def test_load_drops_tail_units_whose_records_are_not_the_queues(tmp_path: Path, handles: FileHandles) -> None:
    filled(tmp_path, handles, 60).write_pending()
    queue = make_queue(tmp_path, handles)
    queue.load(lambda topic, queue_id, phy, size, offset: offset < 57, 0)
    assert queue.max_offset == 57
    assert reloaded(tmp_path, handles).max_offset == 57


def test_load_starts_the_queue_at_the_first_unit_still_in_the_commitlog(tmp_path: Path, handles: FileHandles) -> None:
    filled(tmp_path, handles, 60).write_pending()
    queue = make_queue(tmp_path, handles)
    queue.load(lambda topic, queue_id, phy, size, offset: True, 1234)
    assert (queue.min_offset, queue.max_offset) == (13, 60)  # unit 13 is at physical offset 1300


def test_retention_deletes_whole_files_below_the_commitlog_minimum(tmp_path: Path, handles: FileHandles) -> None:
    queue = filled(tmp_path, handles, 160)
    queue.write_pending()
    assert queue.delete_files_below(11_000) == 2  # units 0-99 point below 11,000; 100-109 do not
    assert sorted(p.name for p in queue.directory.iterdir()) == ["00000000000000002000", "00000000000000003000"]
    assert (queue.min_offset, queue.max_offset) == (110, 160)
    assert queue.read(110, 2) == [unit(110), unit(111)]


def test_retention_never_deletes_the_last_file(tmp_path: Path, handles: FileHandles) -> None:
    queue = filled(tmp_path, handles, 30)
    queue.write_pending()
    assert queue.delete_files_below(1_000_000) == 0
    assert (queue.min_offset, queue.max_offset) == (30, 30)


def test_file_handles_keep_at_most_their_limit_open(tmp_path: Path) -> None:
    before = open_fds()
    handles = FileHandles(3)
    paths = [tmp_path / f"f{i}" for i in range(10)]
    try:
        fds = [handles.get(p, create=True) for p in paths]
        assert (len(handles), open_fds() - before) == (3, 3)
        assert handles.get(paths[9]) == fds[9]  # still open: the same descriptor
        handles.forget(paths[9])
        assert (len(handles), open_fds() - before) == (2, 2)
    finally:
        handles.close()
    assert (len(handles), open_fds() - before) == (0, 0)


async def test_ten_thousand_queues_work_within_the_open_file_limit(stores: Stores) -> None:
    before = open_fds()
    store = stores.open(max_open_cq_files=64, segment_size=1024 * 1024)
    queues = [(f"topic{t}", q) for t in range(100) for q in range(100)]
    for topic, queue_id in queues:
        store.append(record(topic, queue_id, f"{topic}/{queue_id}".encode()))
    store.queues.write_pending()
    for topic, queue_id in queues[::7]:
        store.append(record(topic, queue_id, b"second"))
    store.queues.write_pending()
    assert len(store.queues.handles) <= 64
    seconds = set(queues[::7])
    for topic, queue_id in queues:
        pulled = store.pull(topic, queue_id, 0, 1)
        assert bodies(pulled) == [f"{topic}/{queue_id}".encode()]
        assert pulled.max_offset == (2 if (topic, queue_id) in seconds else 1)
    assert len(store.queues.handles) <= 64
    mapped = len(store.commitlog.segments) + len(store.index.files)
    assert open_fds() - before <= 64 + 2 * mapped  # a map holds a descriptor of its own
    stores.crash(store)  # a clean close would fdatasync 10,000 files: minutes on a slow disk
