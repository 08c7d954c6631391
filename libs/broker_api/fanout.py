"""Calls to several brokers at once: what to raise when all failed, and how to stop the ones still running."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from libs.errors import NotFound


def failure_of_all(failures: Iterable[BaseException]) -> BaseException:
    """What to answer when every broker failed: a NotFound only if all said so, else why one did not answer."""
    listed = list(failures)
    return next((e for e in listed if not isinstance(e, NotFound)), listed[0])


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel what is still running and wait for it, so no failure goes unretrieved."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
