"""A cluster's processes started from their specs, and a client of each: the e2e tests that kill and restart."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from deploy.plan import ProcessSpec
from deploy.supervisor import Supervisor, log_tail


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


def where_they_are(supervisor: Supervisor, lines: int = 25) -> str:
    """What each process of the cluster was doing when a wait failed: the end of its log and, if it lives, the
    stacks of its threads (py-spy dump, when it can attach). For the rare failure seen only in CI."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent))
    parts = []
    for child in supervisor.children:
        code = child.process.poll()
        state = f"exited {code}" if code is not None else f"pid {child.process.pid}"
        parts.append(f"--- {child.spec.name} ({state}): {child.log_path}\n{log_tail(child.log_path, lines)}")
        if code is None and spy is not None:
            try:
                dump = subprocess.run(
                    [spy, "dump", "--pid", str(child.process.pid)],
                    check=False,
                    capture_output=True,
                    text=True,
                    timeout=20,
                )
                parts.append(dump.stdout.strip() or dump.stderr.strip())
            except (OSError, subprocess.TimeoutExpired) as exc:
                parts.append(f"(py-spy dump failed: {exc})")
    return "\n".join(parts)
