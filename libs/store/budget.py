"""ScanBudget: how much one request may scan, and how long it holds the event loop at a time.

A filtered pull or receive reads ConsumeQueue units (and, for SQL92, their records) to
find a few messages; a query by key follows an IndexFile chain. Both run on the event
loop, so each is bounded (`max_steps`: units, or chain entries, per request) and sliced:
after `slice_seconds` of work it lets the loop's other tasks run, then goes on.

    spending = budget.start()
    while not done and spending.steps_left:
        spending.spend(do_some_work(spending.steps_left, until=spending.slice_end))
        await spending.turn()   # only if the slice is over
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ScanBudget:
    max_steps: int
    """Units (or chain entries) one request scans at most."""
    slice_seconds: float = 0.005
    """Work done between two turns of the event loop."""

    def start(self) -> Spending:
        return Spending(self, self.max_steps)


@dataclass(slots=True)
class Spending:
    """One request's use of its budget."""

    budget: ScanBudget
    steps_left: int
    slice_end: float = field(default=0.0)
    """time.monotonic() at which the current slice is over."""

    def __post_init__(self) -> None:
        self.slice_end = time.monotonic() + self.budget.slice_seconds

    @property
    def exhausted(self) -> bool:
        return self.steps_left <= 0

    def spend(self, steps: int) -> None:
        self.steps_left -= steps

    async def turn(self) -> None:
        """Let the event loop run its other tasks, if this slice is over."""
        if time.monotonic() >= self.slice_end:
            await asyncio.sleep(0)
            self.slice_end = time.monotonic() + self.budget.slice_seconds
