"""Every cluster of a run can be started with more `petrel up` options, to measure another topology."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cluster import CODE_ENV, UP_ARGS_ENV, cluster_code_dir, cluster_code_env, extra_up_args


def test_bench_up_args_reach_every_cluster_after_the_scenarios_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UP_ARGS_ENV, "--colocated --gateway-workers 2")

    assert extra_up_args(("--replicas", "1")) == ["--replicas", "1", "--colocated", "--gateway-workers", "2"]


def test_without_bench_up_args_a_cluster_is_started_as_the_scenario_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UP_ARGS_ENV, raising=False)

    assert extra_up_args() == []


def test_bench_cluster_code_runs_the_cluster_from_another_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The baseline's figures beside today's in one run: the cluster's processes import the other checkout's code."""
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "__init__.py").write_text("")
    monkeypatch.setenv(CODE_ENV, str(tmp_path))

    imported = subprocess.run(
        [sys.executable, "-c", "import libs; print(libs.__file__)"],
        env=os.environ | cluster_code_env(),
        cwd=cluster_code_dir(),
        capture_output=True,
        text=True,
        check=True,
    )

    assert Path(imported.stdout.strip()) == tmp_path / "libs" / "__init__.py"


def test_without_bench_cluster_code_the_cluster_runs_this_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CODE_ENV, raising=False)

    assert (cluster_code_env(), cluster_code_dir()) == ({}, None)


def test_a_port_taken_between_its_pick_and_petrel_up_is_picked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process (a test beside this one) binds a picked port first: the cluster starts on other ports."""
    import socket

    from bench import cluster, loopback

    real_pick = loopback.free_port_run
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        picks = iter([taken.getsockname()[1]])
        monkeypatch.setattr(cluster, "free_port_run", lambda count: next(picks, None) or real_pick(count))

        with cluster.petrel_cluster(up_args=("--no-etl",)) as up:
            assert up.running_pids()["broker-a"] > 0
            assert up.url_of("broker-a") != f"http://127.0.0.1:{taken.getsockname()[1]}"
