"""A drain: consumers take a pre-filled backlog of numbered messages; how fast, and whether each came once.

Both sides of the consumer-group comparison (bench.consumeload for Petrel,
bench.redis_reference for Redis Streams) fill the same number of 1 KiB
messages whose bodies start with their index, then count with a `Progress`:
the clock starts once the warm-up share has been consumed and stops when the
last distinct message is acked, so neither connection set-up nor the tail of
idle consumers is measured. A message whose index was already seen is a
duplicate (a delivery while its lease, or Redis' pending entry, still held).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from typing import Any

from bench.progress import measuring

BODY_BYTES = 1024
INDEX_DIGITS = 16


def body_of(index: int) -> str:
    """1 KiB of text that starts with the message's index."""
    head = f"{index:0{INDEX_DIGITS}d}"
    return head + "x" * (BODY_BYTES - len(head))


def index_of(body: str | bytes) -> int:
    return int(body[:INDEX_DIGITS])


@dataclass(slots=True)
class Drain:
    """What one drain measured, printed by the load process as one JSON line."""

    count: int
    consumers: int
    measured: int = 0
    """Messages consumed between the end of the warm-up and the last ack."""
    seconds: float = 0.0
    receives: int = 0
    empty_receives: int = 0
    delivered: int = 0
    """Every message answered by a receive, duplicates included."""
    duplicates: int = 0
    redelivered: int = 0
    """Deliveries that said they were not the first attempt (Petrel's delivery_attempt > 1)."""
    missing: int = 0
    errors: int = 0
    first_error: str | None = None

    @property
    def per_second(self) -> float:
        return self.measured / self.seconds if self.seconds else 0.0

    def error(self, what: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or what[:300]


class Progress:
    """Counts distinct consumed messages; times the window from `warmup` consumed to all `count` consumed."""

    def __init__(self, drain: Drain, warmup: int) -> None:
        self.drain = drain
        self.warmup = warmup
        self.seen: set[int] = set()
        self.consumed = 0
        self.done = asyncio.Event()
        self._start: tuple[float, int] | None = None

    def delivered(self, indexes: list[int]) -> int:
        """Messages a receive answered; how many of them are new (the others are counted as duplicates)."""
        self.drain.receives += 1
        self.drain.delivered += len(indexes)
        if not indexes:
            self.drain.empty_receives += 1
        fresh = 0
        for index in indexes:
            if index in self.seen:
                self.drain.duplicates += 1
            else:
                fresh += 1
                self.seen.add(index)
        return fresh

    def acked(self, count: int) -> None:
        """`count` new messages acked (see `delivered`)."""
        self.consumed += count
        now = time.perf_counter()
        if self._start is None and self.consumed >= self.warmup:
            self._start = (now, self.consumed)
        if self.consumed >= self.drain.count and not self.done.is_set() and self._start is not None:
            self.drain.seconds = now - self._start[0]
            self.drain.measured = self.consumed - self._start[1]
            self.done.set()

    async def wait(self, limit: float) -> None:
        """Until every message is consumed or `limit` seconds pass; then count the missing ones."""
        try:
            await asyncio.wait_for(self.done.wait(), limit)
        except TimeoutError:
            self.drain.error(f"gave up after {limit:.0f} s with {self.consumed:,} of {self.drain.count:,} consumed")
        self.drain.missing = self.drain.count - len(self.seen & set(range(self.drain.count)))


async def run_consumers(
    consumers: int, consume: Callable[[int], Coroutine[Any, Any, None]], progress: Progress, limit: float
) -> None:
    """`consumers` tasks of `consume(n)` (each loops until cancelled) until the drain is done; then cancel them."""
    tasks = [asyncio.create_task(consume(n)) for n in range(consumers)]
    try:
        await progress.wait(limit)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def print_drain(drain: Drain) -> None:
    print(json.dumps(asdict(drain)), flush=True)


def run_drain(command: list[str], limit: float, what: str) -> Drain:
    """Run a drain load process (the measurement `what`); its Drain (failures are reported, the figures still
    count)."""
    with measuring(what):
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit + 60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:5])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    drain = Drain(**json.loads(done.stdout.strip().splitlines()[-1]))
    if drain.errors:
        print(f"  WARNING {command[2]}: {drain.errors} errors; first: {drain.first_error}", flush=True)
    return drain
