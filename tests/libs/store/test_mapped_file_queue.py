"""MappedFileQueue: the row of mapped segment files under both the CommitLog and the TimerLog."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from libs.store.mapped_file_queue import BrokenFileQueue, MappedFileQueue, file_name
from libs.timer.timer_log import RECORD_SIZE, CorruptTimerLog, TimerLog

SIZE = 4096


@pytest.fixture
def files(tmp_path: Path) -> Iterator[MappedFileQueue]:
    queue = MappedFileQueue(tmp_path / "log", SIZE, "test segment")
    queue.load()
    yield queue
    queue.close()


def test_files_are_created_end_to_end_and_found_by_offset(files: MappedFileQueue) -> None:
    first, second = files.create(0), files.create(SIZE)
    assert (files.start_offset, files.end_offset) == (0, 2 * SIZE)
    assert [files.find(o) for o in (0, SIZE - 1, SIZE, 2 * SIZE - 1)] == [first, first, second, second]
    assert files.find(2 * SIZE) is None
    assert sorted(p.name for p in files.directory.iterdir()) == [file_name(0), file_name(SIZE)]


def test_a_new_file_must_follow_the_last(files: MappedFileQueue) -> None:
    files.create(0)
    with pytest.raises(ValueError, match=r"^a new test segment must start at 4096, not 8192$"):
        files.create(2 * SIZE)


def test_truncate_deletes_the_files_after_the_end_and_zeroes_the_rest_of_its_own(files: MappedFileQueue) -> None:
    for start in (0, SIZE, 2 * SIZE):
        files.create(start).map[:] = b"\x07" * SIZE
    files.truncate(SIZE + 100)
    assert [f.start_offset for f in files.files] == [0, SIZE]
    assert files.files[1].map[:100] == b"\x07" * 100, "bytes before the end were touched"
    assert files.files[1].map[100:] == bytes(SIZE - 100)
    assert not (files.directory / file_name(2 * SIZE)).exists()


def test_reloaded_files_keep_what_was_written(tmp_path: Path, files: MappedFileQueue) -> None:
    files.create(0)
    files.create(SIZE).map[:5] = b"hello"
    files.sync()
    files.close()
    again = MappedFileQueue(files.directory, SIZE, "test segment")
    again.load()
    found = again.find(SIZE)
    assert found is not None
    assert found.map[:5] == b"hello"
    assert again.delete_first() == files.directory / file_name(0)
    assert again.start_offset == SIZE
    again.close()


def test_a_gap_between_files_names_the_missing_one(tmp_path: Path) -> None:
    for start in (0, 2 * SIZE):
        (tmp_path / file_name(start)).write_bytes(bytes(SIZE))
    queue = MappedFileQueue(tmp_path, SIZE, "test segment")
    with pytest.raises(BrokenFileQueue) as raised:
        queue.load()
    queue.close()
    assert (raised.value.offset, raised.value.reason) == (
        SIZE,
        f"segment {file_name(SIZE)} is missing before {file_name(2 * SIZE)}",
    )


def test_a_timer_log_with_a_missing_segment_is_corrupt(tmp_path: Path) -> None:
    size = RECORD_SIZE * 4
    (tmp_path / file_name(size)).write_bytes(bytes(size))
    with pytest.raises(CorruptTimerLog, match=r"segment 00000000000000000000 is missing before the first one$"):
        TimerLog(tmp_path, segment_bytes=size)


def test_a_timer_log_segment_of_the_wrong_size_is_corrupt(tmp_path: Path) -> None:
    (tmp_path / file_name(0)).write_bytes(bytes(100))
    with pytest.raises(CorruptTimerLog, match=rf"is 100 bytes; a segment is {RECORD_SIZE * 4}$"):
        TimerLog(tmp_path, segment_bytes=RECORD_SIZE * 4)
