"""`petrel bench --profile`: where each flame graph goes, which processes are recorded, and a failure is a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import flamegraphs
from bench.cluster import Cluster
from bench.flamegraphs import profile_path, targets
from bench.progress import measuring, scenario_stage


def cluster_with(data_dir: Path, processes: dict[str, int], stopped: tuple[str, ...] = ()) -> Cluster:
    """A cluster as the launcher describes it in run/cluster.json (no process is started)."""
    entries = [{"name": n, "pid": p, "url": None, "log": "", "running": n not in stopped} for n, p in processes.items()]
    (data_dir / "run").mkdir(parents=True)
    (data_dir / "run" / "cluster.json").write_text(json.dumps({"supervisor_pid": 1, "processes": entries}))
    return Cluster("http://127.0.0.1:1", data_dir)


def test_a_flame_graph_is_named_by_scenario_measurement_and_process(tmp_path: Path) -> None:
    path = profile_path(tmp_path, "datapath", "SYNC_FLUSH single sends", "broker-0")

    assert path == tmp_path / "datapath-sync-flush-single-sends-broker-0.svg"


def test_a_measurement_repeated_in_a_scenario_gets_a_file_of_its_own(tmp_path: Path) -> None:
    profile_path(tmp_path, "push", "send-to-receive", "gateway").write_text("<svg/>")

    assert profile_path(tmp_path, "push", "send-to-receive", "gateway").name == "push-send-to-receive-gateway-2.svg"


def test_every_running_process_of_one_cluster_is_recorded_under_its_own_name(tmp_path: Path) -> None:
    cluster = cluster_with(tmp_path / "a", {"broker-0": 11, "gateway": 12, "timer": 13}, stopped=("timer",))

    assert targets((cluster,)) == {"broker-0": 11, "gateway": 12}


def test_with_two_clusters_up_the_processes_are_numbered_by_cluster(tmp_path: Path) -> None:
    off = cluster_with(tmp_path / "off", {"gateway": 21})
    on = cluster_with(tmp_path / "on", {"gateway": 31})

    assert targets((off, on)) == {"c1-gateway": 21, "c2-gateway": 31}


def test_a_profile_that_cannot_be_recorded_is_a_warning_and_the_measurement_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = cluster_with(tmp_path / "cluster", {"gateway": 41})
    monkeypatch.setattr(flamegraphs, "clusters_up", lambda: (cluster,))
    monkeypatch.setattr(flamegraphs, "PY_SPY", str(tmp_path / "no-py-spy-here"))
    measured = False

    with scenario_stage("gateway", 0.0, tmp_path / "profiles"), measuring("single sends"):
        measured = True

    assert measured
    assert "WARNING no profile of gateway:" in capsys.readouterr().out


def test_without_a_cluster_up_nothing_is_recorded(tmp_path: Path) -> None:
    with flamegraphs.recorded(tmp_path / "profiles", "storage", "appends") as paths:
        assert paths == []
