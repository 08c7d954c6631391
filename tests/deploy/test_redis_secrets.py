"""`petrel up` with a Redis that asks for a password: tried before anything starts, its password never shown."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.plan import UpOptions
from deploy.redis_server import redis_refusal
from deploy.up import up
from tests.support.redis_servers import RedisServer, make_tls_files, started
from tests.support.serving import free_port


@pytest.fixture(scope="module")
def password_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with started(tmp_path_factory.mktemp("redis-password")) as server:
        yield server


@pytest.fixture
def up_here() -> Iterator[None]:
    """up() takes Ctrl-C and SIGTERM for the cluster's shutdown: given back afterwards."""
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def test_a_redis_url_is_tried_with_its_password(password_redis: RedisServer) -> None:
    assert redis_refusal(password_redis.url) is None
    wrong = redis_refusal(password_redis.url_with_password("a-wrong-password"))
    assert wrong == (
        f"Redis at redis://:***@127.0.0.1:{password_redis.port}/0 refused the credentials (the password in "
        "PETREL_REDIS_URL): invalid username-password pair or user is disabled."
    )
    missing = redis_refusal(f"redis://127.0.0.1:{password_redis.port}/0")
    assert missing is not None
    assert "refused the credentials" in missing
    port = free_port()
    gone = redis_refusal(f"redis://:pw@127.0.0.1:{port}/0")
    assert gone is not None
    assert gone.startswith(f"Redis at redis://:***@127.0.0.1:{port}/0 did not answer: ")


def test_a_tls_redis_is_verified_against_the_urls_ca(tmp_path: Path) -> None:
    with started(tmp_path, make_tls_files(tmp_path / "certs")) as server:
        assert redis_refusal(server.url) is None
        unverified = redis_refusal(server.url.split("?")[0])  # the system's CAs do not know the test's CA
        assert unverified is not None
        assert "certificate verify failed" in unverified
        plain = redis_refusal(server.url.replace("rediss://", "redis://").split("?")[0])
        assert plain is not None
        assert plain.startswith(f"Redis at redis://:***@127.0.0.1:{server.port}/0 ")


def test_petrel_up_refuses_a_wrong_redis_password_before_starting_anything(
    password_redis: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    up_here: None,
) -> None:
    monkeypatch.setenv("PETREL_REDIS_URL", password_redis.url_with_password("a-wrong-password"))
    assert up(UpOptions(data_dir=tmp_path), None) == 1
    out, err = capsys.readouterr()
    assert f"could not start the cluster: Redis at redis://:***@127.0.0.1:{password_redis.port}/0 refused" in err
    assert "a-wrong-password" not in out + err
    assert not (tmp_path / "logs").exists(), "a process was started"
