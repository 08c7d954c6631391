"""A failed chaos or nemesis run keeps its cluster's data for the replay (bench.kept)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bench import kept


def test_a_failed_runs_data_replaces_an_older_copy_and_leaves_sockets_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kept, "KEPT_ROOT", tmp_path / "data" / "bench")
    run = tmp_path / "run"
    (run / "broker-a").mkdir(parents=True)
    (run / "broker-a" / "commitlog").write_bytes(b"records")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(run / "broker-a" / "admin.sock"))
    stale = tmp_path / "data" / "bench" / "nemesis-7" / "from-an-older-run"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")

    where = kept.keep_failed_run(run, "nemesis-7")

    listener.close()
    assert where == tmp_path / "data" / "bench" / "nemesis-7"
    assert (where / "broker-a" / "commitlog").read_bytes() == b"records"
    assert not (where / "broker-a" / "admin.sock").exists()
    assert not (where / "from-an-older-run").exists()
