"""Ending a helper task from the task that started it."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended (its own CancelledError is the expected end, not an error).

    `with suppress(CancelledError): await task` would also swallow a cancellation of the *caller* that arrives
    while it waits (a request's deadline, a shutdown): the caller would go on as if never cancelled. That one
    propagates here. Any other error of the task is raised, as awaiting it raises it.
    """
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
