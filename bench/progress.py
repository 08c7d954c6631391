"""What `petrel bench` says while it runs: a line when a scenario or a measurement starts and when it ends.

A full run takes twenty minutes and more; each line carries the seconds since
the run began (and, at the end of a step, the step's own), printed at once. The
harness opens a scenario's stage (`scenario_stage`); the code that runs a load
wraps it in `measuring`, which with `--profile` also records a flame graph of
every Petrel process while the load runs (bench.flamegraphs), under the stage's
profile directory.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from bench.flamegraphs import recorded


@dataclass(frozen=True, slots=True)
class Stage:
    scenario: str
    run_started: float
    """time.monotonic() when the run began"""
    profiles: Path | None
    """where this scenario's flame graphs go; None: not profiled"""


_STAGE: ContextVar[Stage | None] = ContextVar("bench_stage", default=None)


def say(run_started: float, text: str) -> None:
    print(f"[{time.monotonic() - run_started:7.1f} s] {text}", flush=True)


@contextlib.contextmanager
def _step(run_started: float, what: str) -> Iterator[None]:
    say(run_started, f"{what}: started")
    began = time.monotonic()
    outcome = "failed"
    try:
        yield
        outcome = "ended"
    finally:
        say(run_started, f"{what}: {outcome} after {time.monotonic() - began:.1f} s")


@contextlib.contextmanager
def scenario_stage(scenario: str, run_started: float, profiles: Path | None, label: str = "") -> Iterator[None]:
    """A scenario runs: its start and end are said, and its measurements know its name (`label` is added to
    the lines, e.g. which run of several)."""
    with _step(run_started, f"{scenario}{label}"):
        token = _STAGE.set(Stage(scenario, run_started, profiles))
        try:
            yield
        finally:
            _STAGE.reset(token)


@contextlib.contextmanager
def measuring(what: str) -> Iterator[None]:
    """One measurement: said when it starts and ends; profiled when the run asks for it."""
    stage = _STAGE.get() or Stage("", time.monotonic(), None)
    with _step(stage.run_started, f"  {stage.scenario}: {what}" if stage.scenario else f"  {what}"):
        if stage.profiles is None:
            yield
            return
        with recorded(stage.profiles, stage.scenario, what) as paths:
            yield
        if paths:
            say(stage.run_started, f"  {sum(p.exists() for p in paths)} flame graphs under {stage.profiles}")
