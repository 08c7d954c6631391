"""CommitLog: contiguous segments, blank fillers, the recovery scan and truncation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from libs.codec import decode_record, record_size, stamp_record
from libs.errors import CorruptRecord, InvalidMessage, OffsetOutOfRange
from libs.store.commitlog import CommitLog, segment_name
from tests.support.store import T0_MS, record

SEGMENT = 4096


@pytest.fixture
def commitlog(tmp_path: Path) -> Iterator[CommitLog]:
    log = CommitLog(tmp_path / "commitlog", SEGMENT)
    log.load()
    yield log
    log.close()


def append(log: CommitLog, raw: bytes, queue_offset: int = 0) -> int:
    """Append as the store does: reserve, copy, stamp, advance."""
    segment, position = log.reserve(len(raw))
    segment.map[position : position + len(raw)] = raw
    physical = segment.start_offset + position
    stamp_record(
        segment.map,
        position,
        queue_offset=queue_offset,
        physical_offset=physical,
        store_timestamp=T0_MS,
        store_host="127.0.0.1:0",
    )
    log.write_offset = physical + len(raw)
    return physical


def reopen(log: CommitLog) -> CommitLog:
    log.close()
    again = CommitLog(log.directory, log.segment_size)
    again.load()
    return again


def test_a_segment_smaller_than_a_page_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^a CommitLog segment must be at least 4096 bytes, not 1000$"):
        CommitLog(tmp_path, 1000)


def test_a_record_reads_back_stamped_with_where_it_is(commitlog: CommitLog) -> None:
    append(commitlog, record("T", 0, b"zero"))
    at = append(commitlog, record("T", 1, b"one"), queue_offset=7)
    kept = decode_record(commitlog.read_record(at))
    assert (kept.body, kept.queue_id, kept.queue_offset, kept.physical_offset) == (b"one", 1, 7, at)


def test_a_full_segment_ends_in_a_blank_filler_and_the_next_starts_at_its_name(commitlog: CommitLog) -> None:
    raw = record("T", 0, b"x" * 900)
    offsets = [append(commitlog, raw) for _ in range(5)]
    assert offsets[4] == SEGMENT  # four fit in the first 4096 bytes; the fifth starts the second segment
    assert sorted(p.name for p in commitlog.directory.iterdir()) == [segment_name(0), segment_name(SEGMENT)]
    assert segment_name(SEGMENT) == "00000000000000004096"
    filler_at = offsets[3] + len(raw)
    assert record_size(commitlog.segments[0].map, filler_at) == (SEGMENT - filler_at, True)
    with pytest.raises(CorruptRecord) as raised:
        commitlog.read_record(filler_at)
    assert raised.value.offset == filler_at
    assert decode_record(commitlog.read_record(offsets[4])).body == b"x" * 900


def test_a_record_that_cannot_fit_a_segment_is_invalid(commitlog: CommitLog) -> None:
    with pytest.raises(InvalidMessage, match=r"^a 4090-byte record does not fit in a 4096-byte CommitLog segment$"):
        commitlog.reserve(4090)
    assert commitlog.segments == []


def test_reads_outside_the_log_are_out_of_range(commitlog: CommitLog) -> None:
    end = append(commitlog, record()) + len(record())
    with pytest.raises(OffsetOutOfRange, match=rf"^no record at CommitLog offset {end}; the log ends at {end}$"):
        commitlog.read_record(end)
    with pytest.raises(OffsetOutOfRange) as raised:
        commitlog.read(SEGMENT, 10)
    assert raised.value.detail == f"CommitLog offset {SEGMENT} is outside [0, {end})"


def test_a_reloaded_log_scans_its_records_in_order_across_segments(commitlog: CommitLog) -> None:
    raws = [record("T", i % 2, f"{i}".encode() * 300) for i in range(12)]
    offsets = [append(commitlog, raw, queue_offset=i) for i, raw in enumerate(raws)]
    log = reopen(commitlog)
    try:
        scanned = list(log.scan(0))
        assert [s.physical_offset for s in scanned] == offsets
        assert [s.queue_offset for s in scanned] == list(range(12))
        heads = [s.head for s in scanned if s.head is not None]
        assert [(h.topic, h.queue_id, s.size) for h, s in zip(heads, scanned, strict=True)] == [
            ("T", i % 2, len(raws[i])) for i in range(12)
        ]
        assert {s.store_timestamp for s in scanned} == {T0_MS}
        assert [s.physical_offset for s in log.scan(offsets[5])] == offsets[5:]
    finally:
        log.close()


def test_the_scan_stops_at_a_record_whose_crc_is_wrong(commitlog: CommitLog) -> None:
    offsets = [append(commitlog, record(body=b"b" * 100)) for _ in range(4)]
    commitlog.segments[0].map[offsets[2] + 200] ^= 0xFF
    assert [s.physical_offset for s in commitlog.scan(0)] == offsets[:2]


def test_the_scan_stops_at_a_torn_record(commitlog: CommitLog) -> None:
    raw = record(body=b"b" * 300)
    offsets = [append(commitlog, raw) for _ in range(2)]
    end = commitlog.write_offset
    commitlog.segments[0].map[end : end + 100] = raw[:100]  # only the head of a third made it
    assert [s.physical_offset for s in commitlog.scan(0)] == offsets


def test_truncate_zeroes_the_tail_and_deletes_later_segments(commitlog: CommitLog) -> None:
    raw = record(body=b"x" * 900)
    offsets = [append(commitlog, raw) for _ in range(10)]  # three segments
    cut = offsets[2]
    commitlog.truncate(cut)
    assert commitlog.write_offset == cut
    assert [p.name for p in sorted(commitlog.directory.iterdir())] == [segment_name(0)]
    assert commitlog.segments[0].map[cut:SEGMENT] == bytes(SEGMENT - cut)
    assert [s.physical_offset for s in commitlog.scan(0)] == offsets[:2]
    assert append(commitlog, record(body=b"again")) == cut


def test_sync_makes_the_log_durable_up_to_the_offset(commitlog: CommitLog) -> None:
    for _ in range(6):
        append(commitlog, record(body=b"x" * 900))
    commitlog.sync(commitlog.write_offset)
    assert commitlog.flushed_offset == commitlog.write_offset
    commitlog.sync(10)
    assert commitlog.flushed_offset == commitlog.write_offset  # never goes back


def test_the_oldest_segment_is_deleted_only_once_flushed_and_never_the_last(commitlog: CommitLog) -> None:
    for _ in range(6):
        append(commitlog, record(body=b"x" * 900))
    assert commitlog.delete_oldest() is None  # not flushed yet
    commitlog.sync(commitlog.write_offset)
    assert commitlog.delete_oldest() == commitlog.directory / segment_name(0)
    assert commitlog.min_offset == SEGMENT
    assert commitlog.delete_oldest() is None  # the last one is being written
    with pytest.raises(OffsetOutOfRange):
        commitlog.read_record(0)


def test_a_gap_between_segments_is_corruption_named_by_the_missing_one(tmp_path: Path) -> None:
    directory = tmp_path / "commitlog"
    directory.mkdir()
    for start in (0, 2 * SEGMENT):
        (directory / segment_name(start)).write_bytes(bytes(SEGMENT))
    log = CommitLog(directory, SEGMENT)
    with pytest.raises(CorruptRecord) as raised:
        log.load()
    log.close()
    assert raised.value.detail == (
        "record at offset 4096: segment 00000000000000004096 is missing before 00000000000000008192"
    )


def test_a_segment_off_the_segment_grid_is_corruption(tmp_path: Path) -> None:
    directory = tmp_path / "commitlog"
    directory.mkdir()
    (directory / segment_name(100)).write_bytes(bytes(SEGMENT))
    with pytest.raises(CorruptRecord) as raised:
        CommitLog(directory, SEGMENT).load()
    assert raised.value.detail == (
        "record at offset 100: segment 00000000000000000100 does not start on a 4096-byte boundary"
    )


def test_a_segment_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "commitlog"
    directory.mkdir()
    (directory / segment_name(0)).write_bytes(bytes(100))
    with pytest.raises(ValueError, match=r"is 100 bytes; a segment is 4096$"):
        CommitLog(directory, SEGMENT).load()
