"""Real etcd processes for tests: one member or a cluster of three on loopback, each on free ports with its own data.

`etcd_cluster(folder, members=3)` starts the members, waits until each says it is healthy
(GET /health: it has a leader), yields an `EtcdCluster`, and stops them after. A member can
be killed (SIGKILL), stopped and started again on its data, for tests of a member's loss.
The members run with petrel up's raft timers (deploy.etcd_server: heartbeat 50 ms, election
500 ms, pre-vote): a lost leader is replaced within about a second.

etcd is Debian's `etcd-server` (`make test` installs it as root when it is missing); without
it the tests that need it fail and say so, they never skip. The members' command lines are
`petrel up`'s (deploy.etcd_server).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy import etcd_server
from libs.etcd import EtcdSettings
from tests.support.redis_servers import TlsFiles
from tests.support.serving import free_port
from tests.support.waiting import wait_until

ROOT_PASSWORD = "root-pw-for-tests"


def etcd_binary() -> str:
    try:
        return etcd_server.etcd_binary()
    except etcd_server.EtcdNotAvailable as exc:
        pytest.fail(str(exc), pytrace=False)


@dataclass
class EtcdMember:
    name: str
    command: list[str]
    client_url: str
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (again, on its data dir: the cluster flags count only the first time)."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=etcd_server.member_env(dict(os.environ))
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: gone at once, as in a crash."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        self._end(signal.SIGTERM)

    def _end(self, how: signal.Signals) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(how)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@dataclass
class EtcdCluster:
    members: list[EtcdMember]
    tls: TlsFiles | None = None
    _verify: Any = field(default=True, repr=False)

    @property
    def endpoints(self) -> list[str]:
        return [member.client_url for member in self.members]

    def settings(self, prefix: str, **fields: Any) -> EtcdSettings:
        """Settings naming every member (the first first), with this cluster's TLS files, and `fields` on top."""
        tls = {"ca_file": self.tls.ca, "cert_file": self.tls.certificate, "key_file": self.tls.key} if self.tls else {}
        return EtcdSettings(endpoints=self.endpoints, prefix=prefix, **(tls | fields))

    def post(self, path: str, body: dict[str, Any], token: str | None = None) -> Any:
        """One call to the first member that runs, outside the client under test (to set a cluster up)."""
        member = next(member for member in self.members if member.running)
        headers = {"authorization": token} if token else {}
        with httpx.Client(trust_env=False, verify=self._verify, timeout=5) as client:
            reply = client.post(f"{member.client_url}{path}", json=body, headers=headers)
        assert reply.status_code == 200, f"{path}: {reply.status_code} {reply.text}"
        return reply.json()

    def healthy(self, member: EtcdMember) -> bool:
        try:
            with httpx.Client(trust_env=False, verify=self._verify, timeout=0.5) as client:
                return bool(client.get(f"{member.client_url}/health").json().get("health") == "true")
        except (httpx.HTTPError, ValueError):
            return False

    def wait_healthy(self, members: list[EtcdMember] | None = None, timeout: float = 30.0) -> None:
        for member in members or self.members:
            wait_until(functools.partial(self.healthy, member), f"etcd {member.name} healthy", timeout, self.logs)

    def leader(self) -> EtcdMember:
        """The member raft has made leader now (asked of the running members)."""
        statuses = {
            self.post_to(m, "/v3/maintenance/status")["header"]["member_id"]: m for m in self.members if m.running
        }
        leader_ids = {self.post_to(m, "/v3/maintenance/status").get("leader") for m in statuses.values()}
        assert len(leader_ids) == 1, f"the members disagree on their leader: {leader_ids}"
        return statuses[leader_ids.pop()]

    def post_to(self, member: EtcdMember, path: str) -> Any:
        with httpx.Client(trust_env=False, verify=self._verify, timeout=5) as client:
            return client.post(f"{member.client_url}{path}", json={}).json()

    def logs(self) -> str:
        return "\n".join(f"--- {m.name}\n{m.log.read_text(errors='replace')[-3000:]}" for m in self.members)

    def stop(self) -> None:
        for member in self.members:
            member.stop()


@contextlib.contextmanager
def etcd_cluster(
    folder: Path, members: int = 1, *, tls: TlsFiles | None = None, auth_token_ttl: int | None = None
) -> Iterator[EtcdCluster]:
    """`members` etcd members on loopback, healthy, under `folder` (data dirs and logs); stopped after.

    `tls`: clients speak https and must show a certificate the CA signed (the server's own serves in tests);
    `auth_token_ttl`: seconds an idle auth token lives (etcd's default is 300)."""
    binary = etcd_binary()
    folder.mkdir(parents=True, exist_ok=True)
    scheme = "https" if tls else "http"
    planned = [
        etcd_server.EtcdMember(
            f"m{i}", folder / f"m{i}", f"{scheme}://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        )
        for i in range(members)
    ]
    token = f"petrel-test-{secrets.token_hex(4)}"
    cluster = EtcdCluster([])
    extra: list[str] = []
    if tls:
        context = ssl.create_default_context(cafile=str(tls.ca))
        context.load_cert_chain(tls.certificate, tls.key)
        cluster = EtcdCluster([], tls, context)
        extra += [
            f"--cert-file={tls.certificate}",
            f"--key-file={tls.key}",
            f"--trusted-ca-file={tls.ca}",
            "--client-cert-auth",
        ]
    if auth_token_ttl is not None:
        extra.append(f"--auth-token-ttl={auth_token_ttl}")
    for plan in planned:
        command = etcd_server.member_command(plan, planned, token, binary=binary, extra=tuple(extra))
        cluster.members.append(EtcdMember(plan.name, command, plan.client_url, folder / f"{plan.name}.log"))
    try:
        for member in cluster.members:
            member.start()
        cluster.wait_healthy()
        yield cluster
    finally:
        cluster.stop()


def enable_auth(cluster: EtcdCluster) -> None:
    """Turn etcd's auth on, with a root user (ROOT_PASSWORD): from then on every call needs credentials."""
    cluster.post("/v3/auth/user/add", {"name": "root", "password": ROOT_PASSWORD})
    cluster.post("/v3/auth/user/grant", {"user": "root", "role": "root"})
    cluster.post("/v3/auth/enable", {})


def root_token(cluster: EtcdCluster) -> str:
    return str(cluster.post("/v3/auth/authenticate", {"name": "root", "password": ROOT_PASSWORD})["token"])
