"""A whole Petrel cluster on loopback for a scenario, started by the launcher (`python -m deploy up`).

Every port is a free one and the data directory a temporary one, deleted after;
`PETREL_*` settings given here reach the services through the launcher's
environment. The launcher's own output goes to a log whose tail is shown when
the cluster does not come up. With `replicas`, each broker name has that many
slaves (`petrel up --replicas`, SYNC_MASTER unless `async_replication`), on the
ports after the master's. With `PETREL_AUTH=required`, `api_key` makes a
key in the cluster's metadata database with `petrel keys create`, as an
operator would, and waits until the gateway lets it in. `up_args`, and
`BENCH_UP_ARGS` for every cluster of a run (`BENCH_UP_ARGS=--colocated petrel
bench datapath`), are more options for `petrel up`. `BENCH_CLUSTER_CODE=DIR` runs
the clusters from another checkout (the baseline commit's, say) while this harness
measures them: its figures beside today's, in the same run. `clusters_up()` names
the clusters up at the moment (what `petrel bench --profile` records).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.loadgen import JSON_BODY, auth_headers
from bench.loopback import free_port_run
from libs.cluster_token import INTERNAL_TOKEN_HEADER, read_token_file, token_file_of

SHARED_REDIS = "redis://127.0.0.1:6379/0"
UP_ARGS_ENV = "BENCH_UP_ARGS"
"""More `petrel up` options for every cluster a scenario starts, e.g. BENCH_UP_ARGS=--colocated"""
CODE_ENV = "BENCH_CLUSTER_CODE"
"""A checkout whose code the clusters run (default: this one), e.g. a worktree of the baseline commit."""
_UP: list[Cluster] = []


@dataclass(frozen=True, slots=True)
class Cluster:
    url: str
    """The gateway's base URL."""
    data_dir: Path
    """Its data, and `run/cluster.json` with every process's pid (for py-spy while a scenario runs)."""

    def processes(self) -> list[dict[str, Any]]:
        """The launcher's list of the cluster's processes: name (`gateway`, `broker-0`, ...), pid, url, log, running."""
        processes: list[dict[str, Any]] = json.loads((self.data_dir / "run" / "cluster.json").read_text())["processes"]
        return processes

    def running_pids(self) -> dict[str, int]:
        """Every running process of the cluster, by name: its pid."""
        return {p["name"]: int(p["pid"]) for p in self.processes() if p["running"]}

    def url_of(self, name: str) -> str:
        """The base URL of the process `name` (`broker-a`, its slave `broker-a@1`, ...)."""
        for entry in self.processes():
            if entry["name"] == name:
                return str(entry["url"])
        raise LookupError(f"no process {name!r} in {self.data_dir / 'run' / 'cluster.json'}")

    def internal_headers(self) -> dict[str, str]:
        """What a call to an internal service carries: the cluster token `petrel up` made."""
        return {INTERNAL_TOKEN_HEADER: read_token_file(token_file_of(self.data_dir))}


def clusters_up() -> tuple[Cluster, ...]:
    """The clusters `petrel_cluster` has up now, oldest first."""
    return tuple(_UP)


@contextlib.contextmanager
def petrel_cluster(
    env: dict[str, str] | None = None,
    timeout: float = 90.0,
    replicas: int = 0,
    async_replication: bool = False,
    colocated: bool = False,
    up_args: tuple[str, ...] = (),
) -> Iterator[Cluster]:
    """`petrel up` on free ports (`colocated`: with --colocated, the gateway and broker-a in one process)."""
    data_dir = Path(tempfile.mkdtemp(prefix="petrel-bench-cluster-"))
    log_path = data_dir / "launcher.log"
    launcher: subprocess.Popen[bytes] | None = None
    try:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            command, gateway_port = _up_command(data_dir, replicas, async_replication, colocated, up_args)
            with log_path.open("wb") as log:
                launcher = subprocess.Popen(
                    command,
                    env=os.environ | (env or {}) | cluster_code_env(),
                    cwd=cluster_code_dir(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            url = f"http://127.0.0.1:{gateway_port}"
            try:
                _wait_ready(url, launcher, log_path, timeout)
                break
            except RuntimeError:
                if attempt == PORT_ATTEMPTS or PORTS_TAKEN not in log_path.read_bytes():
                    raise
        cluster = Cluster(url, data_dir)
        _UP.append(cluster)
        try:
            yield cluster
        finally:
            _UP.remove(cluster)
    finally:
        if launcher is not None:
            _stop(launcher)
        shutil.rmtree(data_dir, ignore_errors=True)


PORT_ATTEMPTS = 3
"""Free ports are picked before `petrel up` binds them: another process (a test beside this one) may take one in
between, and `petrel up` then stops before starting anything. New ports are picked, at most this many times."""

PORTS_TAKEN = b"ports already in use"
"""What `petrel up` says then (deploy.supervisor), before it starts anything."""


def _up_command(
    data_dir: Path, replicas: int, async_replication: bool, colocated: bool, up_args: tuple[str, ...]
) -> tuple[list[str], int]:
    """`petrel up`'s command line on ports free now, and the gateway's port."""
    broker_port = free_port_run(1 + replicas)
    ports = _other_ports(range(broker_port, broker_port + 1 + replicas))
    command = [sys.executable, "-m", "deploy", "up", "--data-dir", str(data_dir), "--redis-url", SHARED_REDIS]
    command += ["--broker-port", str(broker_port)]
    for option, port in ports.items():
        command += [option, str(port)]
    if colocated:
        command.append("--colocated")
    if replicas:
        command += ["--replicas", str(replicas)] + (["--async-replication"] if async_replication else [])
        command += ["--etcd-port", str(_etcd_port(range(broker_port, broker_port + 1 + replicas), ports))]
    return command + extra_up_args(up_args), ports["--gateway-port"]


def cluster_code_dir() -> str | None:
    """The checkout a cluster runs from (BENCH_CLUSTER_CODE), or None: this one."""
    code = os.environ.get(CODE_ENV)
    return str(Path(code).resolve()) if code else None


def cluster_code_env() -> dict[str, str]:
    """PYTHONPATH for a cluster run from BENCH_CLUSTER_CODE's checkout (its modules first), else nothing."""
    code = cluster_code_dir()
    return {"PYTHONPATH": code} if code else {}


def extra_up_args(up_args: tuple[str, ...] = ()) -> list[str]:
    """The `petrel up` options a scenario adds to a cluster, then those of BENCH_UP_ARGS (for every cluster)."""
    return [*up_args, *shlex.split(os.environ.get(UP_ARGS_ENV, ""))]


def _other_ports(brokers: range) -> dict[str, int]:
    """A free port for each of `petrel up`'s other services (two for the nameservers: with replicas it runs two),
    none among the brokers' (the launcher refuses a timer port among them)."""
    taken = set(brokers)
    ports: dict[str, int] = {}
    for option in ("--gateway-port", "--nameserver-port", "--timer-port", "--txcheck-port", "--push-port"):
        count = 2 if option == "--nameserver-port" else 1
        port = free_port_run(count)
        while taken & set(range(port, port + count)):
            port = free_port_run(count)
        ports[option] = port
        taken |= set(range(port, port + count))
    return ports


def _etcd_port(brokers: range, others: dict[str, int]) -> int:
    """The first of six consecutive free ports for the private etcd's three members (client and peer each)."""
    taken = set(brokers) | {port + n for port in others.values() for n in range(2)}
    while True:
        first = free_port_run(6)
        if not taken & set(range(first, first + 6)):
            return first


def _wait_ready(url: str, launcher: subprocess.Popen[bytes], log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if launcher.poll() is not None:
            raise RuntimeError(f"the cluster did not start (exit {launcher.returncode}):\n{_tail(log_path)}")
        if b"Petrel is up." in log_path.read_bytes() and _answers(f"{url}/readyz"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the cluster was not ready after {timeout:.0f} s:\n{_tail(log_path)}")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _stop(launcher: subprocess.Popen[bytes]) -> None:
    if launcher.poll() is None:
        launcher.send_signal(signal.SIGTERM)
    try:
        launcher.wait(60)
    except subprocess.TimeoutExpired:
        launcher.kill()
        launcher.wait()


class Refused(RuntimeError):
    """A setup request answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def request_json(method: str, url: str, body: object = None, api_key: str | None = None) -> object:
    """One JSON request with the standard library (setup steps only, never measured); no body when None."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=JSON_BODY | auth_headers(api_key))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise Refused(exc.code, f"{method} {url} answered {exc.code}: {exc.read()[:500]!r}") from exc


def api_key(cluster: Cluster, name: str, allow: list[str], rate: float) -> str:
    """A new key (ptk_...) made by `petrel keys create` in the cluster's data dir, `rate` calls a second."""
    command = [sys.executable, "-m", "deploy", "keys", "--data-dir", str(cluster.data_dir), "create", "--name", name]
    command += [arg for grant in allow for arg in ("--allow", grant)] + ["--rate", str(rate)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"petrel keys create failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def until_admitted(method: str, url: str, body: object, key: str, timeout: float = 30.0) -> object:
    """`request_json` with `key`, again while the gateway answers 401: it reads new keys every few seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return request_json(method, url, body, key)
        except Refused as exc:
            if exc.status != 401 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)
