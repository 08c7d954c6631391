"""Timer entries carry their message's id; a store written before they did (56-byte records) still opens (issue 27)."""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from libs.timer import MessageRef
from libs.timer.timer_checkpoint import TimerCheckpoint
from libs.timer.timer_log import ATTEMPTS_SHIFT, CANCELLED
from tests.support.timer_store import SMALL, T0, StoreFactory

ROOT = Path(__file__).resolve().parents[3]

MESSAGE_ID = "0191A2B3C4D5E6F708192A3B00000007"


def first_format_record(flags: int, due_ms: int, phy_offset: int, size: int) -> bytes:
    """A record as the first TimerLog format wrote it: 56 bytes, magic "TM", no message id."""
    body = struct.pack(">HHIqqqqII", 0x544D, flags, 0, due_ms, due_ms, phy_offset, -1, 2, size)
    return body + struct.pack(">II", zlib.crc32(body), 0)


def write_first_format_store(directory: Path) -> None:
    """A store shut down cleanly by the first format: a checkpoint at T0 and three records, one cancelled."""
    (directory / "timerlog").mkdir(parents=True)
    records = [
        first_format_record(3 << ATTEMPTS_SHIFT, T0 + 500, 1000, 120),
        first_format_record(CANCELLED, T0 + 600, 2000, 130),
        first_format_record(0, T0 + 700, 3000, 140),
    ]
    (directory / "timerlog" / f"{0:020d}").write_bytes(b"".join(records) + bytes(56 * 61))
    TimerCheckpoint(read_ms=T0, log_end=3 * 56, pending=2, rolled=0, timestamp=T0).write(directory / "checkpoint")


def test_an_entry_comes_due_with_its_message_id_across_a_restart(open_store: StoreFactory) -> None:
    store = open_store()
    store.enqueue(T0 + 500, MessageRef(1, 4096, 200, MESSAGE_ID), T0)
    store.close()
    store = open_store()
    (entry,) = store.due(T0 + 600)
    assert entry.ref == MessageRef(1, 4096, 200, MESSAGE_ID)
    store.close()


def test_a_store_of_the_first_format_still_loads_its_entries(tmp_path: Path, open_store: StoreFactory) -> None:
    write_first_format_store(tmp_path / "timer")
    store = open_store()
    assert store.stats().pending == 2
    assert not (tmp_path / "timer" / "timerlog").exists(), "the first-format log was not replaced by its copy"
    due = store.due(T0 + 1000)
    assert [(e.ref, e.attempts) for e in due] == [(MessageRef(2, 1000, 120), 3), (MessageRef(2, 3000, 140), 0)]
    store.enqueue(T0 + 1500, MessageRef(2, 5000, 150, MESSAGE_ID), T0 + 1000)
    store.checkpoint()
    store.close()
    store = open_store()
    assert [e.ref for e in store.due(T0 + 2000)] == [MessageRef(2, 5000, 150, MESSAGE_ID)]
    store.close()


def test_an_upgrade_a_crash_interrupted_is_made_again(tmp_path: Path, open_store: StoreFactory) -> None:
    write_first_format_store(tmp_path / "timer")
    partial = tmp_path / "timer" / "timerlog2.partial"
    partial.mkdir()
    (partial / f"{0:020d}").write_bytes(b"half a copy")
    store = open_store()
    assert [e.ref.phy_offset for e in store.due(T0 + 1000)] == [1000, 3000]
    assert not partial.exists()
    store.close()


@pytest.mark.parametrize(
    "killed_at",
    [
        "legacy_log.fsync_directory",  # the copy written, not yet renamed into place
        "legacy_log.shutil.rmtree",  # renamed into place, the first-format log not yet removed
    ],
)
def test_an_upgrade_killed_midway_opens_with_each_entry_once(
    tmp_path: Path, open_store: StoreFactory, killed_at: str
) -> None:
    write_first_format_store(tmp_path / "timer")
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from libs.timer import TimerStore, legacy_log
        {killed_at} = lambda *_: os.kill(os.getpid(), signal.SIGKILL)
        TimerStore(Path({str(tmp_path / "timer")!r}), now_ms={T0}, **{SMALL!r})
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, check=False)
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()
    assert (tmp_path / "timer" / "timerlog").exists()
    store = open_store()
    assert store.stats().pending == 2
    assert [e.ref.phy_offset for e in store.due(T0 + 1000)] == [1000, 3000]
    assert not (tmp_path / "timer" / "timerlog").exists()
    store.close()
