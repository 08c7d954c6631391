from __future__ import annotations

from pathlib import Path

import pytest

from libs.timer.timer_wheel import CorruptTimerWheel, TimerWheel


def test_slot_for_is_the_tick_modulo_the_slot_count(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "w", precision_ms=200, window_ms=2_000)
    assert wheel.slot_count == 10
    assert wheel.slot_for(0) == 0
    assert wheel.slot_for(199) == 0
    assert wheel.slot_for(200) == 1
    assert wheel.slot_for(2_000 + 450) == 2
    wheel.close()


def test_a_slot_from_a_window_ago_reads_as_empty(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "w", precision_ms=100, window_ms=1_000)
    wheel.put(13, 56, 112, 2)
    assert wheel.get(13).count == 2
    assert (wheel.get(3).count, wheel.get(3).last_pos) == (0, -1)
    assert wheel.get(23).count == 0
    wheel.close()


def test_reopening_with_another_geometry_is_refused(tmp_path: Path) -> None:
    TimerWheel(tmp_path / "w", precision_ms=100, window_ms=1_000).close()
    with pytest.raises(CorruptTimerWheel, match="holds a wheel of 10 slots of 100 ms"):
        TimerWheel(tmp_path / "w", precision_ms=500, window_ms=5_000)


@pytest.mark.parametrize(("precision", "window"), [(300, 3_000), (100, 150)])
def test_bad_geometry_is_refused(tmp_path: Path, precision: int, window: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        TimerWheel(tmp_path / "w", precision_ms=precision, window_ms=window)
