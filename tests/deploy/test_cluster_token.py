"""`petrel up` and the cluster token: one private file in the data dir, its path (never the token) to every child."""

from __future__ import annotations

import signal
import stat
from pathlib import Path

import pytest

from deploy.plan import UpOptions, plan_cluster
from deploy.up import up
from libs.cluster_token import ClusterTokenError, ensure_token_file, read_token_file, token_file_of


def up_and_restore_signals(options: UpOptions) -> int:
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        return up(options, "redis://127.0.0.1:6379/0")
    finally:
        for signum, handler in handlers.items():  # up() takes Ctrl-C for the cluster's shutdown
            signal.signal(signum, handler)


def test_the_token_file_is_made_once_private_and_reused_on_restart(tmp_path: Path) -> None:
    path = token_file_of(tmp_path / "data")
    assert path == tmp_path / "data" / "cluster.token"

    ensure_token_file(path)
    first = read_token_file(path)
    ensure_token_file(path)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) == 43, "32 random bytes, URL-safe base64"
    assert read_token_file(path) == first, "a restart made a new token"
    assert [p.name for p in path.parent.iterdir()] == ["cluster.token"], "a scratch file was left"
    other = token_file_of(tmp_path / "other")
    ensure_token_file(other)
    assert read_token_file(other) != first


def test_the_plan_gives_every_child_the_files_path_and_never_the_token(tmp_path: Path) -> None:
    options = UpOptions(data_dir=tmp_path / "data", brokers=2)
    token = read_token_file(ensure_token_file(options.token_file))

    specs = plan_cluster(options, "redis://127.0.0.1:6379/0")

    assert {s.name: s.env["PETREL_INTERNAL_TOKEN_FILE"] for s in specs} == {
        s.name: str(tmp_path / "data" / "cluster.token") for s in specs
    }
    for spec in specs:
        assert "PETREL_INTERNAL_TOKEN" not in spec.env, spec.name
        assert not any(token in value for value in [*spec.env.values(), *spec.args]), spec.name


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660], ids=oct)
def test_up_refuses_a_token_file_open_to_others_and_starts_nothing(
    tmp_path: Path, mode: int, capsys: pytest.CaptureFixture[str]
) -> None:
    path = token_file_of(tmp_path)
    path.write_text("a-token-someone-else-can-read\n")
    path.chmod(mode)

    assert up_and_restore_signals(UpOptions(data_dir=tmp_path)) == 1

    error = capsys.readouterr().err
    assert f"the cluster token file {path} (PETREL_INTERNAL_TOKEN_FILE) is open to its group or others" in error
    assert f"(mode {mode:04o}); make it private: chmod 600 {path}" in error
    assert not (tmp_path / "logs").exists(), "a process was started"
    assert path.read_text() == "a-token-someone-else-can-read\n", "the operator's file was replaced"


def test_up_refuses_an_empty_token_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = token_file_of(tmp_path)
    path.touch(mode=0o600)

    assert up_and_restore_signals(UpOptions(data_dir=tmp_path)) == 1

    assert f"the cluster token file {path} (PETREL_INTERNAL_TOKEN_FILE) is empty" in capsys.readouterr().err
    assert not (tmp_path / "logs").exists(), "a process was started"


def test_a_token_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    with pytest.raises(
        ClusterTokenError,
        match=r"cannot read the cluster token file .*missing \(PETREL_INTERNAL_TOKEN_FILE\): No such file",
    ):
        read_token_file(tmp_path / "missing")
    (tmp_path / "a-dir").mkdir(mode=0o700)
    with pytest.raises(ClusterTokenError, match="is not a regular file"):
        read_token_file(tmp_path / "a-dir")
