"""The benchmark harness: it runs the scenarios it is given, each measuring ours beside a reference.

A scenario (bench.figures) is a function that starts what it needs, measures, stops
it, and returns `Figure`s. `petrel bench` hands the harness every scenario by name
(bench.scenarios.SCENARIOS, which the harness never imports: it sits below them). The
harness prints one table (ours, the reference, their ratio, the target ratio an issue
names) and writes the figures as JSON, with a chart of the ratios beside it
(bench.chart). With several runs, every scenario runs that many times and each figure
is reported as the median of its runs' values of ours and of the reference (the ratio
is the medians'; each run's is printed too). Progress is said as it goes
(bench.progress). Speed is only ever judged here, never by timed tests.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench.chart import write_chart
from bench.figures import BenchOptions, Figure, Scenario
from bench.progress import scenario_stage


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


@dataclass(frozen=True, slots=True)
class Series:
    """One figure as each run measured it (None where a run left it out), and the median of the runs."""

    runs: tuple[Figure | None, ...]

    @property
    def median(self) -> Figure:
        measured = [f for f in self.runs if f is not None]
        ours = statistics.median(f.ours for f in measured)
        return replace(measured[0], ours=ours, reference=statistics.median(f.reference for f in measured))

    @property
    def ratios(self) -> list[float | None]:
        return [None if f is None else f.ratio for f in self.runs]


def series_of(runs: Sequence[Sequence[Figure]]) -> list[Series]:
    """Each figure across the runs, in the order they were first measured. A figure is known by its name and
    which of that name it was in its run (two scenarios may report the same figure)."""
    by_key: dict[tuple[str, int], list[Figure | None]] = {}
    for n, figures in enumerate(runs):
        seen: Counter[str] = Counter()
        for figure in figures:
            seen[figure.name] += 1
            by_key.setdefault((figure.name, seen[figure.name]), [None] * len(runs))[n] = figure
    return [Series(tuple(measured)) for measured in by_key.values()]


def render_runs(series: Sequence[Series]) -> str:
    """Each figure's ratio run by run."""
    lines = ["ratio in each run:"]
    for one in series:
        lines.append(f"  {one.median.name:44} " + " ".join(f"{_ratio(r):>7}" for r in one.ratios))
    return "\n".join(lines)


def run(
    scenarios: Mapping[str, Scenario],
    names: list[str],
    options: BenchOptions,
    results_dir: Path,
    runs: int = 1,
    profile: bool = False,
) -> list[Figure]:
    """Run the `scenarios` named `names` (all when empty) `runs` times; print and write the medians (and the chart)."""
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(sorted(scenarios))}")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    started = time.monotonic()
    measured: list[list[Figure]] = []
    for n in range(1, runs + 1):
        profiles = (results_dir / "profiles" / stamp / (f"run{n}" if runs > 1 else "")) if profile else None
        label = f" (run {n} of {runs})" if runs > 1 else ""
        figures: list[Figure] = []
        for name in names or sorted(scenarios):
            with scenario_stage(name, started, profiles, label):
                figures.extend(scenarios[name](options))
        if runs > 1:
            print(f"run {n} of {runs}:\n{render(figures)}", flush=True)
        measured.append(figures)
    series = series_of(measured)
    medians = [one.median for one in series]
    print(("median of the runs:\n" if runs > 1 else "") + render(medians))
    if runs > 1:
        print(render_runs(series))
    _write(results_dir / f"bench-{stamp}", options, series, _title(names, options, runs))
    return medians


def _title(names: list[str], options: BenchOptions, runs: int) -> str:
    """The chart's: the command that made it, and when."""
    quick = " --quick" if options.quick else ""
    several = f" --runs {runs} (medians; dots: each run)" if runs > 1 else ""
    return f"petrel bench {' '.join(names) or '(all)'}{quick}{several}, {time.strftime('%Y-%m-%d %H:%M')}"


def _write(stem: Path, options: BenchOptions, series: list[Series], title: str) -> None:
    """The JSON (the medians, and each run's figures) and the chart beside it."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    medians = [one.median for one in series]
    payload = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "quick": options.quick,
        "runs": len(series[0].runs) if series else 0,
        "figures": [_as_json(f) for f in medians],
        "per_run": [[None if f is None else _as_json(f) for f in one.runs] for one in series],
    }
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    print(f"results written to {stem.with_suffix('.json')}")
    if medians:
        several = payload["runs"] != 1
        chart = write_chart(medians, stem.with_suffix(".png"), title, [one.ratios for one in series] if several else [])
        print(f"chart written to {chart}")


def _as_json(figure: Figure) -> dict[str, object]:
    return asdict(figure) | {"ratio": figure.ratio, "verdict": figure.verdict}
