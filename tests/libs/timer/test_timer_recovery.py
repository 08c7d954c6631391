from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from libs.timer import Action, TimerStore
from libs.timer.timer_log import RECORD_SIZE
from tests.support.timer_store import T0, StoreFactory, ref

ROOT = Path(__file__).resolve().parents[3]


def drain(store: TimerStore, now_ms: int, until_ms: int) -> dict[int, int]:
    """Fire everything up to until_ms, rolling as a timer service would; phy_offset -> times delivered."""
    seen: dict[int, int] = {}
    while now_ms < until_ms:
        now_ms += 1_000
        for entry in store.due(now_ms):
            if entry.action is Action.ROLL:
                store.enqueue(entry.due_ms, entry.ref, now_ms, roll_count=entry.roll_count + 1)
            else:
                assert entry.due_ms <= now_ms
                seen[entry.ref.phy_offset] = seen.get(entry.ref.phy_offset, 0) + 1
        store.checkpoint()
    return seen


def test_nothing_enqueued_is_lost_when_the_process_is_killed(tmp_path: Path) -> None:
    n = 3_000
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from libs.timer import MessageRef, TimerStore
        store = TimerStore(Path({str(tmp_path)!r}), now_ms={T0}, precision_ms=100, window_ms=10_000,
                           max_delay_ms=60_000, segment_bytes=56 * 1024)
        for i in range({n}):
            store.enqueue({T0} + (i * 37) % 30_000, MessageRef(1, i * 1000, 10), {T0})
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, check=False)
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()
    assert (tmp_path / "abort").exists()
    store = TimerStore(
        tmp_path, now_ms=0, precision_ms=100, window_ms=10_000, max_delay_ms=60_000, segment_bytes=56 * 1024
    )
    assert store.stats().pending == n
    seen = drain(store, T0, T0 + 40_000)
    assert seen == {i * 1000: 1 for i in range(n)}
    store.close()


def test_a_damaged_record_at_the_log_tail_is_cut_at_recovery(
    open_store: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store()
    for n in range(10):
        store.enqueue(T0 + 500, ref(n), T0)
    store.abandon()
    segment = tmp_path / "timer" / "timerlog2" / f"{0:020d}"
    raw = bytearray(segment.read_bytes())
    raw[9 * RECORD_SIZE + 30] ^= 0xFF
    segment.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="libs.timer.timer_log"):
        store = open_store()
    assert f"damaged record at position {9 * RECORD_SIZE}" in caplog.text
    assert store.stats().pending == 9
    assert [e.ref for e in store.due(T0 + 1_000)] == [ref(n) for n in range(9)]
    store.close()


def test_a_wheel_that_lost_its_slots_is_rebuilt_from_the_log(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    for n in range(20):
        store.enqueue(T0 + 100 * (n % 4), ref(n), T0)
    store.abandon()
    wheel = tmp_path / "timer" / "timerwheel"
    raw = wheel.read_bytes()
    wheel.write_bytes(raw[:16] + bytes(len(raw) - 16))  # the wheel's pages never reached the disk
    store = open_store()
    order = [e.ref.phy_offset // 1000 for e in store.due(T0 + 1_000)]
    assert order == [n for k in range(4) for n in range(k, 20, 4)]
    store.close()


def test_a_record_whose_slot_was_never_updated_is_relinked(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    first = store.enqueue(T0 + 300, ref(1), T0)
    tick = (T0 + 300) // 100
    store.enqueue(T0 + 300, ref(2), T0)
    store.wheel.put(tick, first, first, 1)  # killed between the append and the slot update
    store.enqueue(T0 + 300, ref(3), T0)  # linked to the first: the second is off the chain
    store.abandon()
    store = open_store()
    assert [e.ref for e in store.due(T0 + 1_000)] == [ref(1), ref(2), ref(3)]
    store.close()


def test_a_missing_checkpoint_with_a_non_empty_log_is_refused(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    store.enqueue(T0 + 300, ref(1), T0)
    store.abandon()
    (tmp_path / "timer" / "checkpoint").unlink()
    with pytest.raises(Exception, match="checkpoint is missing or damaged but the TimerLog is not empty"):
        open_store()
