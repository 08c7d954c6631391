"""How long a service's /healthz takes to answer while another request of the same event loop runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

T = TypeVar("T")


@dataclass(slots=True)
class HealthLatencies:
    during: list[float] = field(default_factory=list)
    """Seconds each /healthz took, of those asked while the other request ran."""
    busy: list[float] = field(default_factory=list)
    """Of each of those, the CPU seconds the event loop's thread spent before the answer: the work the
    probe waited for, without the time the machine gave to other processes."""

    @property
    def worst(self) -> float:
        """The longest the loop itself kept a probe waiting; a stall of the whole machine (CI runs the
        suite beside Spark on 2 cores) lengthens `during` but not this."""
        return max(self.busy, default=0.0)

    @property
    def typical(self) -> float:
        """The 90th percentile: what the loop gives a request while the work runs, a stall of the machine aside
        (the suite's other worker, a collection); a loop blocked by the work shows in every probe of it."""
        ordered = sorted(self.during)
        return ordered[int(len(ordered) * 0.9)] if ordered else 0.0


async def healthz_while(service: httpx.AsyncClient, work: Awaitable[T]) -> tuple[T, HealthLatencies]:
    """Run `work` (a request to `service`, in-process: the same event loop) and ask /healthz over and over
    meanwhile; the work's outcome and the latencies of the probes asked while it ran.

    An in-process request may run start to end without giving the loop a turn; each probe
    first waits for one, as a request coming in on a socket waits for the loop to read it,
    and that wait counts in its latency.
    """
    task = asyncio.ensure_future(work)
    latencies = HealthLatencies()
    while not task.done():
        started, cpu = time.monotonic(), time.thread_time()
        await asyncio.sleep(0)  # a turn of the loop, not a wait for time: the work runs its slice here
        answer = await service.get("/healthz")
        assert answer.status_code == 200, answer.text
        latencies.during.append(time.monotonic() - started)
        latencies.busy.append(time.thread_time() - cpu)
    return await task, latencies
