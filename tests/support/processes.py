"""A cluster's processes started from their specs, and a client of each: the e2e tests that kill and restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from deploy.plan import ProcessSpec
from deploy.supervisor import Supervisor


@contextlib.asynccontextmanager
async def running(
    data_dir: Path, specs: list[ProcessSpec]
) -> AsyncIterator[tuple[Supervisor, list[httpx.AsyncClient]]]:
    """Each spec started in order (each up before the next); one client per spec, in the same order; all stopped
    after."""
    supervisor = Supervisor(data_dir)
    try:
        for spec in specs:
            await asyncio.to_thread(supervisor.start, spec)
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(httpx.AsyncClient(base_url=spec.url, timeout=15)) for spec in specs
            ]
            yield supervisor, clients
    finally:
        supervisor.stop_all()
