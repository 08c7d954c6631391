"""Waiting for a state another process or thread reaches, with a bound."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 5.0) -> None:
    """Return once `check()` is true; fail naming `what` after `timeout` seconds.

    For state owned by another process or thread, where no event can be awaited.
    """
    try:
        async with asyncio.timeout(timeout):
            while not await check():  # noqa: ASYNC110 - the state lives in another thread or process
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what}") from None
