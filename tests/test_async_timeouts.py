"""An async test past its timeout is stopped, also while its event loop is busy running callbacks
(tests.support.async_timeouts).

The inner test waits forever while the loop runs one callback after another: pytest-timeout's SIGALRM alone almost
always lands inside a callback, where asyncio catches and logs it, and that test would never end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]

INNER_CONFTEST = """
pytest_plugins = ["tests.support.async_timeouts"]
"""

INNER_TESTS = """
import asyncio
import time

import pytest


@pytest.mark.timeout(1)
async def test_waits_forever_while_the_loop_runs_callbacks():
    loop = asyncio.get_running_loop()

    def busy():
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            pass
        loop.call_soon(busy)

    loop.call_soon(busy)
    await asyncio.Event().wait()


async def test_an_async_test_within_its_timeout_passes():
    await asyncio.sleep(0)
"""


def test_an_async_test_past_its_timeout_fails_while_its_loop_is_busy_with_callbacks(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_busy_loop=INNER_TESTS)
    inner = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "asyncio_mode=auto", "-o", "timeout=30", timeout=50
    )

    inner.stdout.fnmatch_lines(["*Timeout: the test ran past its 1 s and was cancelled where it waited*"])
    inner.assert_outcomes(failed=1, passed=1)
