"""The clock step nemesis's means (bench.nemesis.clock): libfaketime moves a real Python process's wall clock while it
runs, and leaves its monotonic clock, and so its timeouts, alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench.nemesis import clock

CHILD = """
import asyncio, sys, time
for line in sys.stdin:
    began = time.monotonic()
    try:
        asyncio.run(asyncio.wait_for(asyncio.sleep(30), 0.2))
    except TimeoutError:
        pass
    print(time.time(), time.monotonic() - began, flush=True)
"""


def test_a_step_moves_the_wall_clock_of_a_running_process_and_not_its_timeouts(tmp_path: Path) -> None:
    env = os.environ | clock.clock_env(tmp_path, "child")
    with subprocess.Popen(
        [sys.executable, "-c", CHILD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:

        def ask() -> tuple[float, float]:
            assert child.stdin is not None
            assert child.stdout is not None
            child.stdin.write("now?\n")
            child.stdin.flush()
            wall, timed_out_after = child.stdout.readline().split()
            return float(wall) - time.time(), float(timed_out_after)

        true_offset, _ = ask()
        clock.set_offset(tmp_path, "child", 3600)
        ahead, timeout_ahead = ask()
        clock.set_offset(tmp_path, "child", -3600)
        behind, timeout_behind = ask()
        clock.set_offset(tmp_path, "child", 0)
        back, _ = ask()
        assert child.stdin is not None
        child.stdin.close()

    assert abs(true_offset) < 5
    assert 3590 < ahead < 3610
    assert -3610 < behind < -3590
    assert abs(back) < 5
    assert 0.15 < timeout_ahead < 2, "a monotonic timeout moved with the wall clock"
    assert 0.15 < timeout_behind < 2, "a monotonic timeout moved with the wall clock"
