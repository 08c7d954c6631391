"""Noticing that the client of a held request (a long poll) went away, so the wait ends with it.

A server keeps running a handler after its client disconnected. A long poll
would then wait out its full time for nobody, and, worse, be woken by a
message and lease it to a closed connection (delivered again only when the
lease runs out). `client_gone` gives the handler a future that is done once the
client disconnects; waits end on it, and nothing is taken for a client gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from starlette.requests import Request

from libs.tasks import cancelled

T = TypeVar("T")


@contextlib.asynccontextmanager
async def client_gone(request: Request) -> AsyncIterator[asyncio.Future[None]]:
    """A future done when the client disconnects, watched while the block runs (after the body was read)."""
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                if not gone.done():
                    gone.set_result(None)
                return

    watcher = asyncio.create_task(watch())
    try:
        yield gone
    finally:
        try:
            await cancelled(watcher)
        finally:
            if not gone.done():
                gone.cancel()


async def unless_gone(gone: asyncio.Future[None], work: Awaitable[T]) -> T | None:
    """The work's result; None (the work cancelled) when the client went away first."""
    task = asyncio.ensure_future(work)
    waits: set[asyncio.Future[Any]] = {task, gone}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    if task.done():
        return task.result()
    await cancelled(task)
    return None
