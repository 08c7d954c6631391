"""Ending helper tasks from the task that started them."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancelled(*tasks: asyncio.Future[Any]) -> None:
    """Cancel `tasks` and wait until every one has ended (their own CancelledError is the expected end, not an
    error).

    `with suppress(CancelledError): await task` would also swallow a cancellation of the *caller* that arrives
    while it waits (a request's deadline, a shutdown): the caller would go on as if never cancelled (a slave's
    replica follower, cancelled while it ended its helpers after a broken stream, went on following a dead master
    and held its broker's restart as the promoted master for good). That one propagates here, once the tasks have
    ended. A caller already ending by a cancellation (in a `finally`) waits for every task, then goes on ending.
    Any other error of a task is raised, as awaiting it raises it.
    """
    for task in tasks:
        task.cancel()
    ended = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in ended:
        if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
            raise outcome
