"""The Killer: kill -9 of cluster processes at seeded random moments, each restarted after a short outage.

The schedule is drawn from the run's seed alone (`schedule`), so a failing run can
be repeated: every target is killed at least once, the rest are drawn at random.
Each kill is recorded in the Ledger (when it died, when it answered again) so that
duplicates can be explained by it.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Protocol

from bench.chaos.ledger import BROKER, GATEWAY, TIMER, TXCHECK, Kill, Ledger

TARGETS = (BROKER, TIMER, TXCHECK, GATEWAY)


class Processes(Protocol):
    """What the Killer needs of a cluster (tests.support.cluster.LocalCluster is one)."""

    async def kill(self, name: str) -> None: ...

    async def restart(self, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class PlannedKill:
    at_s: float
    """seconds after the load started"""
    process: str
    down_s: float
    """how long it stays dead before its restart begins"""


def schedule(seed: int, duration_s: float, kills: int, among: tuple[str, ...] = TARGETS) -> list[PlannedKill]:
    """`among`: the processes to kill (colocated, the broker is the gateway too: TARGETS but the gateway)."""
    rng = random.Random(f"{seed}:killer")
    targets = list(among)
    rng.shuffle(targets)
    targets += [rng.choice(among) for _ in range(max(0, kills - len(targets)))]
    moments = sorted(rng.uniform(0.1 * duration_s, 0.9 * duration_s) for _ in targets)
    return [PlannedKill(at, target, rng.uniform(0.0, 1.5)) for at, target in zip(moments, targets, strict=True)]


class Killer:
    def __init__(self, processes: Processes, ledger: Ledger, plan: list[PlannedKill]) -> None:
        self.processes, self.ledger, self.plan = processes, ledger, plan
        self.failure: str | None = None
        """why a kill or a restart failed (a process that does not come back is a finding)"""

    async def run(self) -> None:
        """Carry out the plan, one kill after another (a kill that comes late waits for the previous restart)."""
        started = asyncio.get_running_loop().time()
        for planned in self.plan:
            delay = started + planned.at_s - asyncio.get_running_loop().time()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                await self._kill_and_restart(planned)
            except Exception as exc:  # noqa: BLE001 - reported as the run's finding, never hidden
                self.failure = f"kill -9 and restart of {planned.process} failed: {type(exc).__name__}: {exc}"
                return

    async def _kill_and_restart(self, planned: PlannedKill) -> None:
        await self.processes.kill(planned.process)
        killed_at = time.time()
        await asyncio.sleep(planned.down_s)
        await self.processes.restart(planned.process)
        self.ledger.killed(Kill(planned.process, killed_at, time.time()))
