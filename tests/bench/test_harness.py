"""The benchmark harness's table, JSON and chart, and the median of several runs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.chart import write_chart
from bench.figures import BenchOptions, Figure
from bench.harness import render, render_runs, run, series_of
from bench.progress import measuring
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
    for name in ("chaos", "consumers", "datapath", "etl", "gateway", "storage", "timers", "transactions"):
        assert name in listed


def test_several_runs_report_the_median_of_ours_and_of_the_reference_and_each_runs_ratio() -> None:
    runs = [
        [Figure("sends", 100, "noop", 400, "msg/s", 0.8), Figure("p99", 4, "target", 5, "ms", 1.0, False)],
        [Figure("sends", 300, "noop", 200, "msg/s", 0.8), Figure("p99", 9, "target", 5, "ms", 1.0, False)],
        [Figure("sends", 200, "noop", 300, "msg/s", 0.8), Figure("p99", 6, "target", 5, "ms", 1.0, False)],
    ]

    sends, p99 = series_of(runs)

    assert (sends.median.ours, sends.median.reference, sends.median.target_ratio) == (200, 300, 0.8)
    assert sends.ratios == [0.25, 1.5, 200 / 300]
    assert (p99.median.ours, p99.median.reference, p99.median.higher_is_better) == (6, 5, False)
    assert "sends" in render_runs([sends, p99])


def test_a_figure_one_run_left_out_is_the_median_of_the_runs_that_have_it() -> None:
    runs = [
        [Figure("sends", 100, "noop", 400, "msg/s"), Figure("nats", 10, "js", 20, "msg/s")],
        [Figure("sends", 300, "noop", 200, "msg/s")],
        [Figure("sends", 200, "noop", 300, "msg/s"), Figure("nats", 30, "js", 20, "msg/s")],
    ]

    sends, nats = series_of(runs)

    assert nats.median.ours == 20
    assert nats.ratios == [0.5, None, 1.5]
    assert len(sends.runs) == 3


def test_two_figures_of_one_name_in_a_run_stay_two() -> None:
    run = [Figure("sends", 1, "a", 1, "msg/s"), Figure("sends", 5, "b", 1, "msg/s")]

    first, second = series_of([run, run])

    assert (first.median.ours, second.median.ours) == (1, 5)


def test_runs_write_the_medians_and_each_run_as_json_with_a_chart_beside_and_say_each_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = iter([100.0, 300.0, 200.0])

    def fake(options: BenchOptions) -> list[Figure]:
        with measuring("sends"):
            return [Figure("sends", next(values), "noop", 400, "msg/s", 0.5)]

    medians = run({"fake": fake}, ["fake"], BenchOptions(quick=True), tmp_path, runs=3)

    assert [(f.name, f.ours) for f in medians] == [("sends", 200.0)]
    (written,) = tmp_path.glob("bench-*.json")
    payload = json.loads(written.read_text())
    assert payload["runs"] == 3
    assert payload["figures"][0]["ours"] == 200.0
    assert payload["figures"][0]["verdict"] == "meets"
    assert [r["ours"] for r in payload["per_run"][0]] == [100.0, 300.0, 200.0]
    assert written.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    said = capsys.readouterr().out
    assert "fake (run 2 of 3): started" in said
    assert "fake: sends: ended after" in said
    assert "fake (run 3 of 3): ended after" in said


def test_the_chart_is_a_png_even_with_figures_that_have_no_ratio_or_no_target(tmp_path: Path) -> None:
    figures = [
        Figure("sends", 4_300, "noop", 11_100, "msg/s", 0.8),
        Figure("p99", 22, "target", 5, "ms", 1.0, higher_is_better=False),
        Figure("internal client", 16_700, "httpx", 1_100, "req/s"),
        Figure("lost", 0, "none", 0, "msg"),
    ]

    chart = write_chart(figures, tmp_path / "bench.png", "test", [[0.3, 0.4], [0.2, None], [15.2], [None]])

    assert chart.read_bytes().startswith(b"\x89PNG")


def test_runs_must_be_at_least_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["bench", "--runs", "0"])

    assert exited.value.code == 2
    assert "at least 1, not 0" in capsys.readouterr().err
