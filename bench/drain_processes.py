"""A drain's consumers spread over several processes, so that no one Python process is what limits the drain.

One process running 8 consumers spent about a third of the CPU the gateway and
broker spent on a message (receive, parse 32 KiB of JSON, ack), on one core.
`drain_in_processes` forks `processes` children after the backlog is filled,
each running its share of the consumers (`consume(progress, consumers)`, the
load's own loop) on an event loop of its own. They count on one set of shared
counters (`SharedProgress`): the clock starts when the warm-up share of all of
them is consumed and stops at the last ack of any, as bench.drain.Progress does
in one process. Each child sends back its Drain and the indexes it saw; the
parent adds them up: a message two processes both got is a duplicate, one no
process got is missing.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

from bench.drain import Drain, Progress

Consume = Callable[["SharedProgress", int], Coroutine[Any, Any, None]]
"""A child's work: run this many consumers, counting on the progress, until it says the drain is done."""


@dataclass(frozen=True, slots=True)
class Shared:
    """Counters every process of one drain updates: messages consumed, and when the window began and ended."""

    consumed: Any
    started_at: Any
    started_count: Any
    ended_at: Any
    ended_count: Any
    done: Event

    @classmethod
    def new(cls, context: Any) -> Shared:
        count, clock = ("q", 0), ("d", 0.0)
        return cls(
            context.Value(*count),
            context.Value(*clock),
            context.Value("q", -1),
            context.Value(*clock),
            context.Value(*count),
            context.Event(),
        )


class SharedProgress(Progress):
    """bench.drain.Progress whose window is counted over every process of the drain."""

    def __init__(self, drain: Drain, warmup: int, shared: Shared) -> None:
        super().__init__(drain, warmup)
        self.shared = shared

    def acked(self, count: int) -> None:
        shared, now = self.shared, time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process
        with shared.consumed.get_lock():
            shared.consumed.value += count
            total = shared.consumed.value
            if shared.started_count.value < 0 and total >= self.warmup:
                shared.started_at.value, shared.started_count.value = now, total
            if total >= self.drain.count and not shared.done.is_set():
                shared.ended_at.value, shared.ended_count.value = now, total
                shared.done.set()
        if shared.done.is_set():
            self.done.set()

    async def wait(self, limit: float) -> None:
        if not await asyncio.to_thread(self.shared.done.wait, limit):
            self.drain.error(f"gave up after {limit:.0f} s with {self.shared.consumed.value:,} consumed")


def drain_in_processes(count: int, warmup: int, consumers: int, processes: int, consume: Consume) -> Drain:
    """Run `consumers` consumers over `processes` forked children (the backlog is already there); the whole Drain."""
    context = multiprocessing.get_context("fork")  # the children share this process's imports: no start-up to pay
    shared = Shared.new(context)
    shares = [consumers // processes + (n < consumers % processes) for n in range(processes)]
    pipes = [context.Pipe(duplex=False) for _ in shares]
    children = [
        context.Process(target=_child, args=(send, share, count, warmup, shared, consume), daemon=True)
        for (_, send), share in zip(pipes, shares, strict=True)
        if share
    ]
    for child in children:
        child.start()
    parts = [receive.recv() for receive, _ in pipes[: len(children)]]
    for child in children:
        child.join()
    return _merged(count, consumers, shared, parts)


def _child(pipe: Connection, consumers: int, count: int, warmup: int, shared: Shared, consume: Consume) -> None:
    import uvloop

    drain = Drain(count=count, consumers=consumers)
    progress = SharedProgress(drain, warmup, shared)
    failed = True
    try:
        uvloop.run(consume(progress, consumers))
        failed = False
    finally:  # the parent is told either way; a failure's traceback goes to stderr
        if failed:
            drain.error("a consumer process failed (its traceback is on the load's stderr)")
        pipe.send((asdict(drain), progress.seen))
        pipe.close()


def _merged(count: int, consumers: int, shared: Shared, parts: list[tuple[dict[str, Any], set[int]]]) -> Drain:
    total = Drain(count=count, consumers=consumers)
    seen: set[int] = set()
    for fields_of, part_seen in parts:
        part = Drain(**fields_of)
        for name in ("receives", "empty_receives", "delivered", "duplicates", "redelivered", "errors"):
            setattr(total, name, getattr(total, name) + getattr(part, name))
        total.first_error = total.first_error or part.first_error
        total.duplicates += len(seen & part_seen)
        seen |= part_seen
    if shared.done.is_set() and shared.started_count.value >= 0:
        total.seconds = shared.ended_at.value - shared.started_at.value
        total.measured = shared.ended_count.value - shared.started_count.value
    total.missing = count - len(seen & set(range(count)))
    return total
