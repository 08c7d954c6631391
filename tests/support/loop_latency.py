"""Whether a service's /healthz keeps being answered while another request of the same event loop runs."""

from __future__ import annotations

import asyncio
import gc
import threading
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
    probe waited for, without the time the machine gave to other processes, nor the garbage collector's
    (a full collection of a test process late in the suite once held one probe for most of a walk)."""

    @property
    def turns(self) -> int:
        """How many probes the loop answered while the work ran: a work that never yields gives it one."""
        return len(self.during)

    @property
    def longest_share(self) -> float:
        """The longest the loop itself kept one probe waiting (CPU seconds, so a stall of the whole machine
        does not count), as a share of all the CPU the waits took: near 1 when one slice of the work held
        the loop, small when the work yields all along. A ratio of the work to itself, it is the same on a
        fast and a slow day; /healthz's latency in seconds is the bench's to measure."""
        total = sum(self.busy)
        return max(self.busy, default=0.0) / total if total > 0 else 0.0


async def healthz_while(service: httpx.AsyncClient, work: Awaitable[T]) -> tuple[T, HealthLatencies]:
    """Run `work` (a request to `service`, in-process: the same event loop) and ask /healthz over and over
    meanwhile; the work's outcome and the latencies of the probes asked while it ran.

    An in-process request may run start to end without giving the loop a turn; each probe
    first waits for one, as a request coming in on a socket waits for the loop to read it,
    and that wait counts in its latency.
    """
    collecting = CollectorTime()
    gc.callbacks.append(collecting.phase)
    try:
        task = asyncio.ensure_future(work)
        latencies = HealthLatencies()
        while not task.done():
            started, cpu, collected = time.monotonic(), time.thread_time(), collecting.seconds
            await asyncio.sleep(0)  # a turn of the loop, not a wait for time: the work runs its slice here
            answer = await service.get("/healthz")
            assert answer.status_code == 200, answer.text
            latencies.during.append(time.monotonic() - started)
            latencies.busy.append(time.thread_time() - cpu - (collecting.seconds - collected))
        return await task, latencies
    finally:
        gc.callbacks.remove(collecting.phase)


@dataclass(slots=True)
class CollectorTime:
    """The CPU seconds this thread has spent in the garbage collector since it was made."""

    seconds: float = 0.0
    _started: float = 0.0
    _thread: int = field(default_factory=threading.get_ident)

    def phase(self, phase: str, _info: dict[str, int]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._started
