"""Every cluster of a run can be started with more `petrel up` options, to measure another topology."""

from __future__ import annotations

import pytest

from bench.cluster import UP_ARGS_ENV, extra_up_args


def test_bench_up_args_reach_every_cluster_after_the_scenarios_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UP_ARGS_ENV, "--colocated --gateway-workers 2")

    assert extra_up_args(("--replicas", "1")) == ["--replicas", "1", "--colocated", "--gateway-workers", "2"]


def test_without_bench_up_args_a_cluster_is_started_as_the_scenario_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UP_ARGS_ENV, raising=False)

    assert extra_up_args() == []
