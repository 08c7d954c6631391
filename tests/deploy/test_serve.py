"""`petrel serve <service>`: one service in the foreground, as a real process; the systemd units that run it.

A served service answers /healthz and stops on SIGTERM with exit 0 (what systemd expects of
a clean stop); `--env-file` values are used, the environment's winning; an unknown service
or a bad setting is one clear line and exit 2, before anything starts.
"""

from __future__ import annotations

import configparser
import os
import shlex
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from deploy.serve import SERVICES, read_env_file
from deploy.settings_reference import services
from tests.support.petrel_up import petrel, petrel_env
from tests.support.serving import free_port
from tests.support.waiting import wait_until

SYSTEMD = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
UNITS = sorted(SYSTEMD.glob("*.service"))
EXAMPLE_ENV_FILES = sorted((SYSTEMD / "env").glob("*.env"))


@contextmanager
def served(tmp_path: Path, *argv: str, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """`petrel serve <argv>` running in its own session, its output in `tmp_path/serve.log`; killed if still up."""
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "deploy", "serve", *argv],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def wait_healthy(process: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 30) -> None:
    wait_until(
        lambda: answers(port) or process.poll() is not None,
        f"petrel serve answering /healthz on :{port}",
        timeout,
        context=log.read_text,
    )
    assert process.poll() is None, f"petrel serve exited with {process.returncode}:\n{log.read_text()}"


def test_serve_nameserver_answers_healthz_and_stops_on_sigterm_with_exit_0(tmp_path: Path) -> None:
    port = free_port()
    env = petrel_env(PETREL_NAMESERVER_PORT=str(port), PETREL_DATA_DIR=str(tmp_path / "data"))

    with served(tmp_path, "nameserver", env=env) as process:
        wait_healthy(process, port, tmp_path / "serve.log")
        process.send_signal(signal.SIGTERM)
        status = process.wait(20)

    log = (tmp_path / "serve.log").read_text()
    assert status == 0, f"exit {status} after SIGTERM:\n{log}"
    assert "Application shutdown complete." in log, log
    assert not answers(port)


def test_a_broker_still_waiting_for_etcd_at_its_start_stops_on_sigterm(tmp_path: Path) -> None:
    """uvicorn waits for an app's start whatever signal comes: a broker waiting for etcd held a stop until its kill."""
    dead_etcd = f"127.0.0.1:{free_port()}"
    env = petrel_env(
        PETREL_BROKER_PORT=str(free_port()),
        PETREL_DATA_DIR=str(tmp_path / "data"),
        PETREL_BROKER_CONTROLLED="true",
        PETREL_ETCD_ENDPOINTS=dead_etcd,
    )
    log = tmp_path / "serve.log"
    with served(tmp_path, "broker", env=env) as process:
        wait_until(lambda: "no lease for broker-a/0 yet" in log.read_text(), "the broker waiting for etcd", 30)
        process.send_signal(signal.SIGTERM)
        try:
            status = process.wait(10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the starting broker did not stop in 10 s after SIGTERM:\n{log.read_text()}")

    text = log.read_text()
    assert status == 0, f"exit {status} after SIGTERM:\n{text}"
    assert "stopped before serving" in text, text
    assert "ERROR" not in text, text  # a stop, not a failed start


def test_serve_takes_its_settings_from_the_env_file(tmp_path: Path) -> None:
    port = free_port()
    env_file = tmp_path / "nameserver.env"
    env_file.write_text(
        "# a comment, then a blank line\n\n"
        f"PETREL_NAMESERVER_PORT={port}\n"
        f"export PETREL_DATA_DIR='{tmp_path / 'data'}'\n"
    )

    with served(tmp_path, "nameserver", "--env-file", str(env_file), env=petrel_env()) as process:
        wait_healthy(process, port, tmp_path / "serve.log")
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0


def test_a_variable_of_the_environment_wins_over_the_env_files(tmp_path: Path) -> None:
    """The file's good port does not replace the environment's bad one: the environment's is refused."""
    env_file = tmp_path / "nameserver.env"
    env_file.write_text(f"PETREL_NAMESERVER_PORT={free_port()}\n")

    result = petrel("serve", "nameserver", "--env-file", str(env_file), env=petrel_env(PETREL_NAMESERVER_PORT="x"))

    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("petrel serve nameserver: PETREL_NAMESERVER_PORT: Input should be a valid integer")


def test_an_unknown_service_is_an_argparse_error() -> None:
    result = petrel("serve", "zookeeper")

    assert result.returncode == 2
    assert "petrel serve: error: argument SERVICE: invalid choice: 'zookeeper'" in result.stderr
    assert "'nameserver', 'broker', 'timer', 'txcheck', 'push', 'gateway'" in result.stderr


@pytest.mark.parametrize(
    ("service", "settings", "error"),
    [
        (
            "nameserver",
            {"PETREL_NAMESERVER_PORT": "abc"},
            "PETREL_NAMESERVER_PORT: Input should be a valid integer, unable to parse string as an integer",
        ),
        ("broker", {"PETREL_MAX_JSON_DEPTH": "0"}, "PETREL_MAX_JSON_DEPTH: Input should be greater than or equal to 1"),
        (
            "timer",
            {"PETREL_TIMER_DELAY_LEVELS": "1s 5s"},
            "PETREL_TIMER_DELAY_LEVELS is not read: the setting is cluster-wide, set PETREL_DELAY_LEVELS instead",
        ),
        (
            "push",
            {"PETREL_INTERNAL_TOKEN_FILE": "/nonexistent/cluster.token"},
            "cannot read the cluster token file /nonexistent/cluster.token (PETREL_INTERNAL_TOKEN_FILE): "
            "No such file or directory",
        ),
        (
            "broker",
            {"PETREL_INTERNAL_TOKEN": "cluster-secret"},
            "PETREL_INTERNAL_TOKEN: the cluster token is 14 bytes long; it must be at least 32: a short one can be "
            "guessed by whoever reaches an internal port (`petrel up` makes one of 43 characters in "
            "<data_dir>/cluster.token)",
        ),
        (
            "gateway",
            {"PETREL_GATEWAY_MAX_LONG_POLLS": "20000"},
            "max_long_polls (20000) must be below max_connections (10000): each waiting receive holds a connection, "
            "and the others need some too",
        ),
    ],
    ids=["own-setting", "cluster-wide-setting", "cluster-only-setting", "token-file", "short-token", "across-settings"],
)
def test_a_bad_setting_is_one_line_naming_it_and_exit_2(service: str, settings: dict[str, str], error: str) -> None:
    result = petrel("serve", service, env=petrel_env(**settings))

    assert result.returncode == 2, result.stderr
    assert result.stderr == f"petrel serve {service}: {error}\n"


def test_an_env_file_that_cannot_be_used_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = petrel("serve", "nameserver", "--env-file", str(tmp_path / "none.env"))
    (tmp_path / "bad.env").write_text("PETREL_LOG_LEVEL=info\nPETREL_NAMESERVER_PORT 9876\n")
    malformed = petrel("serve", "nameserver", "--env-file", str(tmp_path / "bad.env"))

    assert (missing.returncode, missing.stderr) == (
        2,
        f"petrel serve nameserver: --env-file {tmp_path / 'none.env'}: No such file or directory\n",
    )
    assert (malformed.returncode, malformed.stderr) == (
        2,
        f"petrel serve nameserver: --env-file {tmp_path / 'bad.env'}, line 2: not NAME=VALUE: "
        "'PETREL_NAMESERVER_PORT 9876'\n",
    )


def test_env_file_lines_are_names_and_values_comments_and_quotes_aside(tmp_path: Path) -> None:
    path = tmp_path / "settings.env"
    path.write_text(
        "# comment\n\n  PETREL_A = 1 \n"
        'export PETREL_B="two words"\n'
        "PETREL_C='x=y'\n"
        "PETREL_D=\n"
        "PETREL_E=a # not a comment\n"
    )

    assert read_env_file(path) == {
        "PETREL_A": "1",
        "PETREL_B": "two words",
        "PETREL_C": "x=y",
        "PETREL_D": "",
        "PETREL_E": "a # not a comment",
    }


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_each_unit_serves_a_known_service_with_an_env_file_as_the_petrel_user(unit: Path) -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    parser.read_string(unit.read_text(), str(unit))

    assert {"Unit", "Service", "Install"} <= set(parser.sections())
    service = parser["Service"]
    program, command, name, flag, env_file, *rest = shlex.split(service["ExecStart"])
    assert (program, command, flag, rest) == ("/opt/petrel/.venv/bin/petrel", "serve", "--env-file", [])
    assert name in SERVICES
    assert unit.name == (f"petrel-{name}@.service" if "%i" in env_file else f"petrel-{name}.service")
    assert env_file == (f"/etc/petrel/{name}-%i.env" if "%i" in env_file else f"/etc/petrel/{name}.env")
    assert {key: service[key] for key in ("User", "Restart", "RestartSec", "LimitNOFILE")} == {
        "User": "petrel",
        "Restart": "on-failure",
        "RestartSec": "1",
        "LimitNOFILE": "65536",
    }
    assert unit.read_text().startswith(f"# {unit.name}: "), "a comment header naming the unit"


def test_every_service_has_a_unit_and_an_example_env_file() -> None:
    assert sorted(p.name.removeprefix("petrel-").split(".")[0].rstrip("@") for p in UNITS) == sorted(SERVICES)
    examples = {p.stem for p in EXAMPLE_ENV_FILES}
    assert {"nameserver", "broker-a", "broker-a-1", "gateway", "timer", "txcheck", "push"} <= examples


@pytest.mark.parametrize("example", EXAMPLE_ENV_FILES, ids=lambda p: p.name)
def test_an_example_env_file_sets_only_its_services_settings_and_valid_values(
    example: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = example.stem.split("-")[0]
    cls = services()[service]
    prefix = str(cls.model_config.get("env_prefix"))
    known = {f"{prefix}{f}".upper() for f in cls.model_fields} | {f"PETREL_{f}".upper() for f in cls.shared_fields()}
    values = read_env_file(example)

    assert set(values) - known == set(), f"{example.name} sets what {service} does not read"
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    cls()  # valid values: a ValidationError names the one that is not


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix of this test's own in the local Redis; its keys are deleted afterwards."""
    prefix = f"petrel-test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def role_of(pid: int) -> str:
    """The last word of a process's command line: `python -m services.txcheck <role>`."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")[-1].decode()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.e2e
@pytest.mark.parametrize("ending", ["sigterm", "a-member-killed"])
def test_serve_txcheck_runs_its_three_processes_and_they_stop_together(
    tmp_path: Path, redis_prefix: str, ending: str
) -> None:
    port = free_port()
    env = petrel_env(
        PETREL_TXCHECK_PORT=str(port),
        PETREL_DATA_DIR=str(tmp_path / "data"),
        PETREL_NAMESERVERS=f"127.0.0.1:{free_port()}",
        PETREL_TXCHECK_REDIS_KEY_PREFIX=redis_prefix,
        PETREL_TXCHECK_WORKER_CONCURRENCY="1",
    )
    log = tmp_path / "serve.log"
    with served(tmp_path, "txcheck", env=env) as process:
        wait_healthy(process, port, log)
        wait_until(lambda: len(children(process.pid)) == 3, "health app, worker and beat started", 30, log.read_text)
        members = children(process.pid)
        if ending == "sigterm":
            process.send_signal(signal.SIGTERM)
        else:
            os.kill(next(pid for pid in members if role_of(pid) == "worker"), signal.SIGKILL)
        status = process.wait(30)

    assert all(gone(pid) for pid in members), f"a member outlived petrel serve txcheck:\n{log.read_text()}"
    if ending == "sigterm":
        assert status == 0, log.read_text()
    else:
        assert status == 128 + signal.SIGKILL, log.read_text()
        assert "[petrel] txcheck-worker was killed by signal 9; stopping the others" in log.read_text()
