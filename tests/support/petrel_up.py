"""`petrel up` as a real subprocess on free ports, driven the way a curl user would, with its cluster token.

`petrel up` gives every service the cluster token (`<data_dir>/cluster.token`):
a test that calls an internal service directly sends `internal_headers()`. Other
`petrel` commands (`petrel keys ...`) run to their end with `petrel(...)`, as an
operator runs them in a terminal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.loopback import free_port_run
from libs.cluster_token import INTERNAL_TOKEN_HEADER, read_token_file, token_file_of
from tests.support.serving import free_port
from tests.support.waiting import wait_until

PORT_FLAGS = ("--gateway-port", "--nameserver-port", "--broker-port", "--timer-port", "--txcheck-port", "--push-port")


def petrel_env(**settings: str) -> dict[str, str]:
    """The test's environment without its PETREL_* settings, plus `settings`."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PETREL_")} | settings


def petrel(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`petrel <argv>` run to its end; stdout and stderr kept apart, as a terminal's pipes are."""
    command = [sys.executable, "-m", "deploy", *argv]
    return subprocess.run(
        command, env=env or petrel_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass
class UpCluster:
    process: subprocess.Popen[str]
    data_dir: Path
    ports: dict[str, int]
    """`petrel up`'s port flags without the dashes and `-port`: gateway, nameserver, broker (the first), ..."""
    output: Path

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    @property
    def gateway(self) -> str:
        return self.url("gateway")

    @property
    def nameserver(self) -> str:
        return self.url("nameserver")

    @property
    def token_file(self) -> Path:
        return token_file_of(self.data_dir)

    def internal_headers(self) -> dict[str, str]:
        """What a call to an internal service carries: the cluster token `petrel up` made."""
        return {INTERNAL_TOKEN_HEADER: read_token_file(self.token_file)}

    def state(self) -> dict[str, object]:
        return json.loads((self.data_dir / "run" / "cluster.json").read_text())  # type: ignore[no-any-return]

    def pid_of(self, name: str) -> int:
        processes = self.state()["processes"]
        assert isinstance(processes, list)
        return int(next(p["pid"] for p in processes if p["name"] == name))

    def running(self, name: str) -> bool:
        """Whether cluster.json says the process `name` runs (the supervisor notes a death within half a second)."""
        processes = self.state()["processes"]
        assert isinstance(processes, list)
        return bool(next(p["running"] for p in processes if p["name"] == name))

    def all_pids(self) -> list[int]:
        processes = self.state()["processes"]
        assert isinstance(processes, list)
        return [int(p["pid"]) for p in processes]


DIES_WITH_THIS_PROCESS = (
    "import os, sys\n"
    "from deploy.supervisor import die_with_parent\n"
    "die_with_parent()\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit('petrel up: the test that started it is gone')\n"
    "from deploy.cli import main\n"
    "main(sys.argv[2:])\n"
)
"""`python -m deploy` that gets SIGTERM when the test's process dies (PR_SET_PDEATHSIG, as `petrel up` gives its
own children): a worker killed before its `finally` (a timeout, xdist stopping it) had left `petrel up` and its
whole cluster running for good, using the cores the next tests and benches measure on. Run with this process's
pid first (a parent gone before the prctl is seen too), then `petrel`'s arguments."""


@contextmanager
def petrel_up(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[UpCluster]:
    """`petrel up <args>` on free ports (two consecutive ones for brokers and for nameservers, six for a private
    etcd's members) and `tmp_path/data`; stopped after."""
    data_dir = tmp_path / "data"
    ports = {flag: free_port() for flag in PORT_FLAGS}
    ports["--broker-port"] = free_port_run(2)
    ports["--nameserver-port"] = free_port_run(2)  # with --replicas: two nameservers
    ports["--etcd-port"] = free_port_run(6)  # with --replicas: three etcd members' client and peer ports
    argv = [sys.executable, "-c", DIES_WITH_THIS_PROCESS, str(os.getpid()), "up", *args, "--data-dir", str(data_dir)]
    for flag, port in ports.items():
        argv += [flag, str(port)]
    output = tmp_path / "petrel-up.out"
    with output.open("w") as out:
        process = subprocess.Popen(argv, env=os.environ | (env or {}), stdout=out, stderr=subprocess.STDOUT, text=True)
    named = {flag.removeprefix("--").removesuffix("-port"): port for flag, port in ports.items()}
    cluster = UpCluster(process, data_dir, named, output)
    try:
        wait_until(
            lambda: "Ctrl-C stops every process." in output.read_text() or process.poll() is not None, "cluster up", 90
        )
        assert process.poll() is None, f"petrel up exited:\n{output.read_text()}"
        yield cluster
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
