"""What a scenario is: a function given `BenchOptions` that starts what it needs, measures, stops it,
and returns `Figure`s (ours beside a reference measured in the same run).

The bottom of `bench`: the scenarios, the recovery run, the harness and its chart import this;
it imports nothing of theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Figure:
    name: str
    ours: float
    reference_name: str
    reference: float
    unit: str
    target_ratio: float | None = None
    higher_is_better: bool = True

    @property
    def ratio(self) -> float | None:
        """ours over the reference (the reverse when lower is better); None with nothing to divide by."""
        numerator, denominator = (self.ours, self.reference) if self.higher_is_better else (self.reference, self.ours)
        return numerator / denominator if denominator else None

    @property
    def verdict(self) -> str:
        if self.target_ratio is None:
            return "info"
        return "meets" if self.ratio is None or self.ratio >= self.target_ratio else "BELOW"


@dataclass(frozen=True, slots=True)
class BenchOptions:
    quick: bool = False
    """Smaller counts, for a smoke run; the figures are then only indicative."""
    rounds: int | None = None
    """Rounds of a scenario that runs in rounds (nemesis); None: its default."""
    seed: int | None = None
    """The seed of a seeded scenario (nemesis); None: a new one, printed."""
    peers: bool = False
    """Also measure the peers a user might pick that this machine may lack or need changed (RabbitMQ's HTTP API)."""
    nemeses: tuple[str, ...] = ()
    """The nemesis run's faults to draw from (bench.nemesis.plan.Nemesis names, e.g. kill_etcd_leader); (): all."""
    colocated: bool = False
    """Also measure a colocated cluster (`petrel up --colocated`) where a scenario can (gateway, sizing)."""


Scenario = Callable[[BenchOptions], list[Figure]]
