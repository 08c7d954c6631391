"""Waiting for a state another process or thread reaches, with a bound: the suite's only polling loops."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

POLL = 0.02
"""Seconds between two looks at the state."""


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, timeout: float = 5.0, context: Callable[[], str] | None = None
) -> None:
    """Return once `check()` is true; fail naming `what` after `timeout` seconds.

    For state owned by another process or thread, where no event can be awaited;
    `context()` adds what helps to see why (a process's log, say).
    """
    try:
        async with asyncio.timeout(timeout):
            while not await check():  # noqa: ASYNC110 - the state lives in another thread or process
                await asyncio.sleep(POLL)
    except TimeoutError:
        detail = f"\n{context()}" if context is not None else ""
        raise AssertionError(f"not within {timeout} s: {what}{detail}") from None


def wait_until(
    check: Callable[[], bool], what: str, timeout: float = 5.0, context: Callable[[], str] | None = None
) -> None:
    """`eventually` for synchronous tests."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            detail = f"\n{context()}" if context is not None else ""
            raise AssertionError(f"not within {timeout} s: {what}{detail}")
        time.sleep(POLL)
