"""The benchmark harness: scenarios measure ours beside a reference, in the same run.

A scenario is a function that starts what it needs, measures, stops it, and
returns `Figure`s. The harness prints one table (ours, the reference, their
ratio, the target ratio an issue names) and writes the figures as JSON.
Speed is only ever judged here, never by timed tests.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path


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


Scenario = Callable[["BenchOptions"], list[Figure]]


@dataclass(frozen=True, slots=True)
class BenchOptions:
    quick: bool = False
    """Smaller counts, for a smoke run; the figures are then only indicative."""


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    def register(fn: Scenario) -> Scenario:
        SCENARIOS[name] = fn
        return fn

    return register


def _amount(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def _ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def render(figures: list[Figure]) -> str:
    header = f"{'figure':44} {'ours':>16} {'reference':>16} {'ratio':>7} {'target':>7}  verdict  reference is"
    lines = [header, "-" * len(header)]
    for f in figures:
        target = f"{f.target_ratio:.2f}x" if f.target_ratio is not None else "-"
        lines.append(
            f"{f.name:44} {_amount(f.ours):>10} {f.unit:<5} {_amount(f.reference):>10} {f.unit:<5} "
            f"{_ratio(f.ratio):>7} {target:>7}  {f.verdict:7}  {f.reference_name}"
        )
    return "\n".join(lines)


def run(names: list[str], options: BenchOptions, results_dir: Path) -> list[Figure]:
    from bench import scenarios  # noqa: F401  (registers the scenarios)

    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(sorted(SCENARIOS))}")
    figures: list[Figure] = []
    for name in names or sorted(SCENARIOS):
        print(f"running {name} ...", flush=True)
        figures.extend(SCENARIOS[name](options))
    print(render(figures))
    results_dir.mkdir(parents=True, exist_ok=True)
    out = results_dir / f"bench-{time.strftime('%Y%m%dT%H%M%S')}.json"
    payload = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "quick": options.quick,
        "figures": [asdict(f) | {"ratio": f.ratio, "verdict": f.verdict} for f in figures],
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"results written to {out}")
    return figures
