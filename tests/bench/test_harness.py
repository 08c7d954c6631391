"""The benchmark harness's table and JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from bench.harness import Figure, render
from deploy import cli


def test_a_figure_with_nothing_to_compare_shows_no_ratio_and_stays_valid_json() -> None:
    figure = Figure("chaos: lost (must be 0)", 0, "-", 0, "msg")

    assert figure.ratio is None
    assert " -       -  info" in render([figure])
    json.dumps(asdict(figure) | {"ratio": figure.ratio}, allow_nan=False)  # strict JSON: no Infinity


def test_a_lower_is_better_figure_is_compared_the_other_way() -> None:
    figure = Figure("latency p99", 2, "target", 4, "ms", target_ratio=1.0, higher_is_better=False)

    assert figure.ratio == 2.0
    assert figure.verdict == "meets"


def test_petrel_bench_help_lists_the_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["bench", "--help"])

    assert exited.value.code == 0
    listed = capsys.readouterr().out
    for name in ("chaos", "consumers", "etl", "gateway", "storage", "timers", "transactions"):
        assert name in listed
