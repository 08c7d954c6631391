"""`petrel up --fresh` starts over: it says what it deletes, deletes it, and refuses a directory it must not touch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import redis

from deploy.cli import main
from deploy.fresh import CannotStartOver, forget_redis_keys, wipe_data_dir
from libs.settings import cluster_key_prefix

REDIS_URL = "redis://127.0.0.1:6379/0"


def a_cluster_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "brokers" / "broker-a").mkdir(parents=True)
    (data / "cluster.token").write_text("x" * 43)
    (data / "brokers" / "broker-a" / "commitlog").write_bytes(b"records")
    return data


def test_a_clusters_data_dir_is_deleted_after_a_line_saying_so(tmp_path: Path) -> None:
    data = a_cluster_dir(tmp_path)
    said: list[str] = []
    assert wipe_data_dir(data, said.append)
    assert not data.exists()
    assert said == [f"[petrel] --fresh: deleting {data}/ (every topic, message, key, log and the cluster token) ..."]
    assert not wipe_data_dir(data, said.append), "nothing to delete the second time"


def test_a_directory_that_is_no_clusters_is_left_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(CannotStartOver, match=r"no cluster\.token"):
        wipe_data_dir(home)
    assert (home / "notes.txt").read_text() == "mine"


def test_a_data_dir_a_running_petrel_up_uses_is_left_alone(tmp_path: Path) -> None:
    data = a_cluster_dir(tmp_path)
    (data / "run").mkdir()
    (data / "run" / "cluster.json").write_text(json.dumps({"supervisor_pid": os.getppid(), "processes": []}))
    with pytest.raises(CannotStartOver, match=f"pid {os.getppid()}"):
        wipe_data_dir(data)
    assert (data / "cluster.token").exists()


def test_the_clusters_redis_keys_go_and_another_clusters_stay(tmp_path: Path) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    ours, theirs = tmp_path / "data", tmp_path / "other"
    mine = [f"{cluster_key_prefix('txcheck', ours)}scan-notes", f"{cluster_key_prefix('etl', ours)}lock"]
    kept = f"{cluster_key_prefix('txcheck', theirs)}scan-notes"
    try:
        for key in [*mine, kept]:
            client.set(key, "1")
        assert forget_redis_keys(ours, REDIS_URL) == 2
        assert [client.exists(key) for key in [*mine, kept]] == [0, 0, 1]
    finally:
        client.delete(*mine, kept)
        client.close()


def test_up_help_shows_every_ports_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["up", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for default in ("8080", "9876", "10911", "10931", "10941", "10951"):
        assert f"(default: {default})" in shown
    assert "--fresh" in shown
