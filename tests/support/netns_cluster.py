"""The nemesis run's cluster (issue 27) on test hosts made of network namespaces: a replicated Petrel cluster whose
processes can be killed, stopped, and cut from one another host by host (tests.support.netns).

Layout: one host per process a partition must tell apart.

    host  runs                                                        listens on
    e1    etcd member m0                                              :2379 (client), :2380 (peer)
    e2    etcd member m1                                              same
    e3    etcd member m2                                              same
    n1    nameserver "nameserver", running the controller             :9876
    n2    nameserver "nameserver-2", running the controller           :9877
    b1    broker-a id 0, "broker-a" (the first master), SYNC_MASTER    :10911
    b2    broker-a id 1, "broker-a@1", SYNC_MASTER under the controller :10911
    gw    the gateway, the timer, and the gateway's own Redis          :8080, :10931, :6379

Every service listens on all its host's addresses and is called by its cluster address
(10.201.0.x) by the others, and over the management link by the run. The two nameservers
listen on different ports because the controller's leader key names its leader by its
configured host:port (here 0.0.0.0:<port>): the port says which one leads. Processes and
logs carry LocalCluster's names (`<data_dir>/logs/<name>.log`), and share one data dir as
there, so the nemesis run and its checker see the same cluster either way.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from deploy import etcd_server
from libs.cluster_token import (
    INTERNAL_TOKEN_HEADER,
    TOKEN_FILE_SETTING,
    ensure_token_file,
    read_token_file,
    token_file_of,
)
from tests.support.cluster import REPLICATED_BROKER, REPLICATED_NAMESERVER, SMALL_BROKER, SMALL_TIMER
from tests.support.controller import controller_view, leading, master_id
from tests.support.etcd import etcd_binary
from tests.support.netns import HostProcess, Hosts, built_hosts, serving
from tests.support.waiting import eventually, wait_until

ETCD_HOSTS = ("e1", "e2", "e3")
NAMESERVER_HOSTS = {"nameserver": ("n1", 9876), "nameserver-2": ("n2", 9877)}
BROKER_HOSTS = {"broker-a": "b1", "broker-a@1": "b2"}
GATEWAY_HOST = "gw"
HOSTS = (*ETCD_HOSTS, "n1", "n2", "b1", "b2", GATEWAY_HOST)
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380
BROKER_PORT, TIMER_PORT, GATEWAY_PORT, REDIS_PORT = 10911, 10931, 8080, 6379
ETCD_PREFIX = "/petrel-e2e/"


@dataclass(slots=True)
class Service:
    """One process of the cluster: where it runs, how it starts, and where the run asks whether it is up."""

    name: str
    host: str
    argv: list[str]
    env: dict[str, str]
    port: int
    health_path: str = "/healthz"
    process: HostProcess | None = None


@dataclass(slots=True)
class NetnsEtcdMember:
    """An etcd member on its host (what bench.nemesis.faults.EtcdMember asks)."""

    name: str
    service: Service
    cluster: NetnsCluster = field(repr=False)

    def kill(self) -> None:
        self.cluster.kill_now(self.service.name)

    def start(self) -> None:
        self.cluster.launch(self.service.name)


@dataclass(slots=True)
class NetnsEtcd:
    members: list[NetnsEtcdMember]

    def wait_healthy(self, members: list[NetnsEtcdMember] | None = None, timeout: float = 30.0) -> None:
        for member in members or self.members:
            url = member.cluster.url(member.service.name)
            wait_until(functools.partial(_etcd_healthy, url), f"etcd {member.name} healthy", timeout)

    def leader(self) -> NetnsEtcdMember:
        """The member raft has made leader now (asked of the members that answer)."""
        by_id: dict[str, NetnsEtcdMember] = {}
        leaders: set[str] = set()
        for member in self.members:
            try:
                with httpx.Client(trust_env=False, timeout=2) as client:
                    url = f"{member.cluster.url(member.service.name)}/v3/maintenance/status"
                    status = client.post(url, json={}).json()
            except (httpx.HTTPError, ValueError):
                continue  # killed, or cut off
            by_id[status["header"]["member_id"]] = member
            leaders.add(status.get("leader"))
        assert len(leaders) == 1, f"the members disagree on their leader: {leaders}"
        return by_id[leaders.pop()]


def _etcd_healthy(url: str) -> bool:
    try:
        with httpx.Client(trust_env=False, timeout=0.5) as client:
            return bool(client.get(f"{url}/health").json().get("health") == "true")
    except (httpx.HTTPError, ValueError):
        return False


class NetnsCluster:
    """The cluster on `hosts` (built with HOSTS): `start` starts it; the nemesis run drives it (bench.nemesis)."""

    def __init__(self, data_dir: Path, hosts: Hosts) -> None:
        self.data_dir = data_dir
        self.hosts = hosts
        self.nameserver_names = list(NAMESERVER_HOSTS)
        self.token_file = ensure_token_file(token_file_of(data_dir))
        self.services = self._services()
        self.etcd = NetnsEtcd(
            [NetnsEtcdMember(f"m{i}", self.services[f"etcd-m{i}"], self) for i in range(len(ETCD_HOSTS))]
        )

    def _services(self) -> dict[str, Service]:
        ip = {name: self.hosts[name].cluster_ip for name in HOSTS}
        shared = (
            {
                "PETREL_DATA_DIR": str(self.data_dir),
                "PETREL_NAMESERVERS": ",".join(f"{ip[h]}:{p}" for h, p in NAMESERVER_HOSTS.values()),
                "PETREL_ETCD_ENDPOINTS": ",".join(f"http://{ip[h]}:{ETCD_CLIENT_PORT}" for h in ETCD_HOSTS),
                "PETREL_ETCD_PREFIX": ETCD_PREFIX,
                TOKEN_FILE_SETTING: str(self.token_file),
            }
            | SMALL_BROKER
            | SMALL_TIMER
        )
        services = {f"etcd-m{i}": self._etcd_member(i, ip) for i in range(len(ETCD_HOSTS))}
        for name, (host, port) in NAMESERVER_HOSTS.items():
            env = (
                shared
                | REPLICATED_NAMESERVER
                | {"PETREL_NAMESERVER_HOST": "0.0.0.0", "PETREL_NAMESERVER_PORT": str(port)}
            )
            services[name] = Service(name, host, _python("services.nameserver"), env, port)
        for broker_id, (name, host) in enumerate(BROKER_HOSTS.items()):
            env = (
                shared
                | REPLICATED_BROKER
                | {
                    "PETREL_BROKER_BROKER_ID": str(broker_id),
                    "PETREL_BROKER_HOST": "0.0.0.0",
                    "PETREL_BROKER_PORT": str(BROKER_PORT),
                    "PETREL_BROKER_ADVERTISED_ADDRESS": f"{ip[host]}:{BROKER_PORT}",
                }
            )
            services[name] = Service(name, host, _python("services.broker"), env, BROKER_PORT)
        redis = ["redis-server", "--port", str(REDIS_PORT), "--bind", "0.0.0.0", "--protected-mode", "no"]
        services["redis"] = Service(
            "redis", GATEWAY_HOST, [*redis, "--save", "", "--appendonly", "no"], {}, REDIS_PORT, ""
        )
        timer = {"PETREL_TIMER_HOST": "0.0.0.0", "PETREL_TIMER_PORT": str(TIMER_PORT)}
        services["timer"] = Service("timer", GATEWAY_HOST, _python("services.timer"), shared | timer, TIMER_PORT)
        gateway = {
            "PETREL_GATEWAY_HOST": "0.0.0.0",
            "PETREL_GATEWAY_PORT": str(GATEWAY_PORT),
            "PETREL_GATEWAY_TIMER_ADDRESS": f"{ip[GATEWAY_HOST]}:{TIMER_PORT}",
            "PETREL_GATEWAY_PUSH_ADDRESS": f"{ip[GATEWAY_HOST]}:10951",
            "PETREL_REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/0",
            "PETREL_AUTH": "off",
            "PETREL_GATEWAY_INSECURE_NO_AUTH": "true",  # on a network of namespaces only the run reaches
        }
        services["gateway"] = Service("gateway", GATEWAY_HOST, _python("gateway"), shared | gateway, GATEWAY_PORT)
        return services

    def _etcd_member(self, i: int, ip: dict[str, str]) -> Service:
        members = [
            etcd_server.EtcdMember(
                f"m{n}",
                self.data_dir / "etcd" / f"m{n}",
                f"http://{ip[host]}:{ETCD_CLIENT_PORT}",
                f"http://{ip[host]}:{ETCD_PEER_PORT}",
            )
            for n, host in enumerate(ETCD_HOSTS)
        ]
        token = f"petrel-nemesis-{os.getpid()}"
        argv = etcd_server.member_command(members[i], members, token, binary=etcd_binary())
        listen = f"--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}"  # the run asks over the management link
        argv = [listen if a.startswith("--listen-client-urls=") else a for a in argv]
        return Service(f"etcd-m{i}", ETCD_HOSTS[i], argv, etcd_server.member_env({}), ETCD_CLIENT_PORT, "/health")

    def url(self, name: str | None = None) -> str:
        """The service's base URL over its host's management link (the gateway's when no name is given)."""
        service = self.services[name or "gateway"]
        return f"http://{self.hosts[service.host].management_ip}:{service.port}"

    def host_of(self, name: str) -> str:
        return self.services[name].host

    def broker_hosts(self) -> list[str]:
        return list(BROKER_HOSTS.values())

    def cut_between(self, a: str, b: str) -> None:
        self.hosts.cut_between(a, b)

    def heal_between(self, a: str, b: str) -> None:
        self.hosts.heal_between(a, b)

    def internal_headers(self) -> dict[str, str]:
        return {INTERNAL_TOKEN_HEADER: read_token_file(self.token_file)}

    # --- processes ---

    def launch(self, name: str) -> HostProcess:
        """Start the service (not waiting for it)."""
        service = self.services[name]
        service.process = self.hosts.run(service.host, service.argv, service.env, name=name)
        return service.process

    async def start_process(self, name: str) -> None:
        """Start the service and wait until it answers."""
        self.launch(name)
        await self.serving(name)

    async def serving(self, name: str, timeout: float = 60.0) -> None:
        service = self.services[name]
        assert service.process is not None, f"{name} was never started"
        if service.health_path:
            await serving(service.process, self.url(name), timeout, path=service.health_path)
            return
        address = (self.hosts[service.host].management_ip, service.port)
        await asyncio.to_thread(wait_until, functools.partial(_connects, address), f"{name} accepts", timeout)

    async def start(self) -> None:
        """Every service: the etcd members together, the nameservers together, then broker id 0 with the timer, the
        gateway and its Redis, then broker id 1 (a new broker name's first master is its lowest live id)."""
        for name in (m.service.name for m in self.etcd.members):
            self.launch(name)
        await asyncio.to_thread(self.etcd.wait_healthy)
        for names in (self.nameserver_names, ["broker-a", "redis", "timer", "gateway"], ["broker-a@1"]):
            await asyncio.gather(*(self.start_process(name) for name in names))

    def kill_now(self, name: str) -> None:
        """kill -9 of the service, waited for."""
        process = self.services[name].process
        assert process is not None, f"{name} was never started"
        assert process.process.poll() is None, f"{name} is not running"
        process.process.send_signal(signal.SIGKILL)
        process.process.wait()

    async def kill_process(self, name: str) -> None:
        await asyncio.to_thread(self.kill_now, name)

    def pause(self, name: str) -> None:
        self._signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)

    def _signal(self, name: str, how: signal.Signals) -> None:
        process = self.services[name].process
        assert process is not None, f"{name} was never started"
        os.kill(process.process.pid, how)

    def log(self, name: str) -> str:
        return (self.hosts.log_dir / f"{name}.log").read_text(errors="replace")

    # --- the controller, as the run asks it ---

    async def controller_view(self) -> dict[str, Any]:
        """`GET /internal/controller` of the first nameserver that answers it."""
        urls = {name: self.url(name) for name in self.nameserver_names}
        return await controller_view(urls, self.internal_headers(), timeout=3)

    async def controller_leader(self) -> str | None:
        return leading(await self.controller_view(), {n: port for n, (_, port) in NAMESERVER_HOSTS.items()})

    async def master(self) -> str:
        return list(BROKER_HOSTS)[master_id(await self.controller_view())]

    async def promoted_after(self, killed: str, timeout: float = 30.0) -> None:
        async def other_master() -> bool:
            return await self.master() != killed

        await eventually(other_master, f"a slave of {killed} is promoted", timeout=timeout)


def _python(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def _connects(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=0.5):
            return True
    except OSError:
        return False


@asynccontextmanager
async def netns_replicated_cluster(
    data_dir: Path, prepare: Callable[[NetnsCluster], None] | None = None
) -> AsyncIterator[tuple[NetnsCluster, httpx.AsyncClient]]:
    """The cluster on fresh test hosts, running, and a client of its gateway; everything deleted after.
    `prepare` may change its services' commands and environments before they start. NetnsUnavailable (saying
    why) where network namespaces cannot be made."""
    with built_hosts(data_dir / "logs", *HOSTS) as hosts:
        cluster = NetnsCluster(data_dir, hosts)
        if prepare is not None:
            prepare(cluster)
        began = time.monotonic()
        await cluster.start()
        print(f"  nemesis: cluster on {len(HOSTS)} netns hosts up in {time.monotonic() - began:.1f} s", flush=True)
        async with httpx.AsyncClient(base_url=cluster.url(), timeout=15) as client:
            yield cluster, client
