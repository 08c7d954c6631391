from __future__ import annotations

import logging
from pathlib import Path

import pytest

from libs.timer.timer_log import CANCELLED, RECORD_SIZE, ROLLED, CorruptTimerLog, TimerLog, TimerRecord


def record(n: int, prev: int = -1, flags: int = 0) -> TimerRecord:
    return TimerRecord(-1, flags, n % 5, 1_000 + n, 900 + n, 10_000 + n, prev, 7, 64 + n)


def test_append_returns_positions_and_read_gives_the_record_back(tmp_path: Path) -> None:
    log = TimerLog(tmp_path, segment_bytes=RECORD_SIZE * 4)
    positions = [log.append(record(n, flags=ROLLED if n % 2 else 0)) for n in range(10)]
    assert positions == [n * RECORD_SIZE for n in range(10)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{n * RECORD_SIZE * 4:020d}" for n in range(3)]
    got = log.read(positions[7])
    assert (got.position, got.due_ms, got.slot_ms, got.phy_offset, got.store_id, got.size) == (
        7 * RECORD_SIZE,
        1007,
        907,
        10_007,
        7,
        71,
    )
    assert got.rolled
    assert got.roll_count == 2
    assert [r.due_ms for r in log.scan(positions[8])] == [1008, 1009]
    log.close()


def test_reopen_scans_to_the_end_and_appends_after_it(tmp_path: Path) -> None:
    log = TimerLog(tmp_path, segment_bytes=RECORD_SIZE * 4)
    for n in range(6):
        log.append(record(n))
    log.sync()
    log.close()
    log = TimerLog(tmp_path, segment_bytes=RECORD_SIZE * 4)
    assert log.recover(None) == 6 * RECORD_SIZE
    assert log.append(record(6)) == 6 * RECORD_SIZE
    assert [r.due_ms for r in log.scan(0)] == [1000 + n for n in range(7)]
    log.close()


def test_set_flags_rewrites_the_record_with_a_valid_crc(tmp_path: Path) -> None:
    log = TimerLog(tmp_path)
    position = log.append(record(1, prev=0))
    log.set_flags(position, CANCELLED)
    assert log.read(position).cancelled
    log.set_prev(position, -1)
    assert log.read(position).prev_pos == -1
    assert log.read(position).cancelled
    log.close()


def test_a_damaged_tail_is_truncated_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = TimerLog(tmp_path, segment_bytes=RECORD_SIZE * 4)
    for n in range(7):
        log.append(record(n))
    log.close()
    segment = tmp_path / f"{RECORD_SIZE * 4:020d}"
    raw = bytearray(segment.read_bytes())
    raw[RECORD_SIZE + 10] ^= 0xFF  # record 5
    segment.write_bytes(bytes(raw))
    log = TimerLog(tmp_path, segment_bytes=RECORD_SIZE * 4)
    with caplog.at_level(logging.WARNING, logger="libs.timer.timer_log"):
        assert log.recover(None) == 5 * RECORD_SIZE
    assert f"damaged record at position {5 * RECORD_SIZE} (bad magic or CRC); truncating the log there" in caplog.text
    assert [r.due_ms for r in log.scan(0)] == [1000 + n for n in range(5)]
    assert log.append(record(50)) == 5 * RECORD_SIZE
    assert log.read(5 * RECORD_SIZE).due_ms == 1050
    with pytest.raises(CorruptTimerLog, match=f"no record at position {6 * RECORD_SIZE}"):
        log.read(6 * RECORD_SIZE)
    log.close()


def test_a_damaged_tail_in_an_earlier_segment_removes_the_later_ones(tmp_path: Path) -> None:
    log = TimerLog(tmp_path, segment_bytes=RECORD_SIZE * 2)
    for n in range(6):
        log.append(record(n))
    log.close()
    first = tmp_path / f"{0:020d}"
    raw = bytearray(first.read_bytes())
    raw[RECORD_SIZE + 20] ^= 0x01
    first.write_bytes(bytes(raw))
    log = TimerLog(tmp_path, segment_bytes=RECORD_SIZE * 2)
    assert log.recover(None) == RECORD_SIZE
    assert [p.name for p in tmp_path.iterdir()] == [f"{0:020d}"]
    log.close()


def test_segment_size_must_hold_whole_records(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="segment_bytes must be a positive multiple of 72"):
        TimerLog(tmp_path, segment_bytes=100)
