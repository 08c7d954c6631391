"""LocalCluster: a whole Petrel cluster on real processes for e2e tests (nameserver, broker, timer, gateway).

With `push=True`, also the push service. With `txcheck=True`, also txcheck's Celery worker
and beat on the real Redis, under a key prefix of the cluster's own (scans every second,
transactions due after one second). With `token=True`, a cluster token as `petrel up` makes
one (`<data_dir>/cluster.token`): a test's own calls to an internal service then send
`internal_headers()`. With `colocated=True`, the gateway and broker-a are one process,
`petrel serve gateway --colocated`, named "gateway+broker-a" (as `petrel up --colocated`
names it); "broker-a" and "gateway" name it too, so a test written for separate
processes kills, restarts and reads the log of the one that holds both.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import redis

from deploy.plan import ProcessSpec
from deploy.supervisor import Child, Supervisor
from libs.cluster_token import (
    INTERNAL_TOKEN_HEADER,
    TOKEN_FILE_SETTING,
    ensure_token_file,
    read_token_file,
    token_file_of,
)
from tests.support.controller import controller_view, in_sync_ids, leading, master_id
from tests.support.etcd import EtcdCluster, etcd_cluster
from tests.support.serving import free_port
from tests.support.waiting import eventually

SMALL_BROKER = {
    "PETREL_BROKER_SEGMENT_SIZE": str(8 * 1024 * 1024),
    "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
    "PETREL_BROKER_INDEX_MAX_ENTRIES": "100000",
    "PETREL_BROKER_REGISTER_INTERVAL_SECONDS": "0.5",
}
REPLICATED_BROKER = {"PETREL_BROKER_ROLE": "SYNC_MASTER", "PETREL_BROKER_CONTROLLED": "true"}
REPLICATED_NAMESERVER = {
    "PETREL_NAMESERVER_CONTROLLER": "true",
    "PETREL_NAMESERVER_CONTROLLER_MASTER_TIMEOUT_SECONDS": "2",
}
FAST_TXCHECK = {
    "PETREL_REDIS_URL": "redis://127.0.0.1:6379/0",
    "PETREL_TXCHECK_SCAN_INTERVAL_SECONDS": "1",
    "PETREL_TXCHECK_TRANSACTION_TIMEOUT_MS": "1000",
    "PETREL_TXCHECK_VISIBILITY_TIMEOUT_SECONDS": "3",
    "PETREL_TXCHECK_WORKER_CONCURRENCY": "4",
    "PETREL_TXCHECK_CHECKBACK_TIMEOUT_SECONDS": "2",
    "PETREL_TXCHECK_CHECK_RETRY_BACKOFF_MAX_SECONDS": "2",
}
SMALL_TIMER = {
    "PETREL_TIMER_WINDOW_DAYS": "0.01",
    "PETREL_TIMER_TIMER_LOG_SEGMENT_BYTES": str(56 * 4096),
    "PETREL_TIMER_BROKER_REFRESH_SECONDS": "0.2",
}

FAST_RETRY_LEVELS = {"PETREL_DELAY_LEVELS": "100ms 100ms 200ms 200ms 300ms 300ms"}
"""A group's retries start at level 3: 200 ms, 200 ms, 300 ms ... here (the defaults: 10 s, 30 s, 1 min ...)."""
QUICK_CIRCUIT = {"PETREL_PUSH_CIRCUIT_FAILURES": "3", "PETREL_PUSH_CIRCUIT_OPEN_SECONDS": "1"}
"""The push circuit opens after 3 troubles in a row and probes after 1 s (the defaults: 10, 5 s)."""


PROMOTION_WAIT_SECONDS = 10.0
"""How long a killed master stays down waiting for its slave's promotion before it is started again (a chaos run's
restart): a failover takes the lease's 2 s and one election."""


class LocalCluster:
    def __init__(
        self,
        data_dir: Path,
        env: dict[str, str],
        *,
        txcheck: bool = False,
        push: bool = False,
        token: bool = False,
        replicated: bool = False,
        nameservers: int = 1,
        etcd_members: int = 1,
        colocated: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.colocated = colocated
        self.txcheck = txcheck
        self.replicated = replicated
        """broker-a has a slave, broker-a@1, and the nameserver's controller fails over between them"""
        self._killed_master: str | None = None
        self._etcd = contextlib.ExitStack()
        self.etcd: EtcdCluster | None = None
        """Replicated: the etcd (`etcd_members` members) the controllers keep their state in (started with the
        cluster)."""
        self.etcd_members = etcd_members
        self.supervisor = Supervisor(data_dir)
        self.token_file = ensure_token_file(token_file_of(data_dir)) if token else None
        token_env = {TOKEN_FILE_SETTING: str(self.token_file)} if self.token_file else {}
        ports = {name: free_port() for name in ("nameserver", "broker", "slave", "timer", "push", "gateway")}
        self.nameserver_names = ["nameserver"] + [f"nameserver-{n}" for n in range(2, nameservers + 1)]
        """"nameserver", "nameserver-2", ...: each runs a controller when replicated"""
        ports |= {name: free_port() for name in self.nameserver_names[1:]}
        self.redis_prefix = f"petrel-e2e:{uuid.uuid4().hex[:12]}:"
        shared = (
            {
                "PETREL_DATA_DIR": str(data_dir),
                "PETREL_NAMESERVERS": ",".join(f"127.0.0.1:{ports[n]}" for n in self.nameserver_names),
                "PETREL_TXCHECK_REDIS_KEY_PREFIX": self.redis_prefix,
            }
            | SMALL_BROKER
            | SMALL_TIMER
            | (FAST_TXCHECK if txcheck else {})
            | token_env
            | env
        )

        def spec(name: str, module: str, service: str, extra: dict[str, str] | None = None) -> ProcessSpec:
            port = ports[service]
            return ProcessSpec(
                name, module, port, shared | {f"PETREL_{service.upper()}_PORT": str(port)} | (extra or {})
            )

        addresses = {
            "PETREL_GATEWAY_TIMER_ADDRESS": f"127.0.0.1:{ports['timer']}",
            "PETREL_GATEWAY_PUSH_ADDRESS": f"127.0.0.1:{ports['push']}",
        }
        nameserver_env = REPLICATED_NAMESERVER if replicated else {}
        self.specs = {
            name: ProcessSpec(
                name,
                "services.nameserver",
                ports[name],
                shared | {"PETREL_NAMESERVER_PORT": str(ports[name])} | nameserver_env,
            )
            for name in self.nameserver_names
        }
        self.specs["broker-a"] = spec("broker-a", "services.broker", "broker", self._replicated_broker(ports, 0))
        if replicated:
            self.specs["broker-a@1"] = ProcessSpec(
                "broker-a@1",
                "services.broker",
                ports["slave"],
                shared | {"PETREL_BROKER_PORT": str(ports["slave"])} | self._replicated_broker(ports, 1),
            )
        self.specs["timer"] = spec("timer", "services.timer", "timer")
        if push:
            self.specs["push"] = spec("push", "services.push", "push")
        self.specs["gateway"] = spec("gateway", "gateway", "gateway", addresses)
        self.gateway_url = self.specs["gateway"].url
        self.aliases: dict[str, str] = {}
        """names of separate processes -> the colocated one that holds them"""
        if colocated:
            self._colocate()
        if txcheck:
            for role in ("worker", "beat"):
                self.specs[f"txcheck-{role}"] = ProcessSpec(
                    f"txcheck-{role}", "services.txcheck", 0, shared, args=(role,)
                )

    @property
    def url(self) -> str:
        return self.gateway_url

    def _colocate(self) -> None:
        """broker-a and the gateway as one process, in broker-a's place in the start order."""
        broker, gateway = self.specs["broker-a"], self.specs.pop("gateway")
        name = f"gateway+{broker.name}"
        colocated = ProcessSpec(
            name,
            "deploy",
            gateway.port,
            broker.env | gateway.env,
            args=("serve", "gateway", "--colocated"),
            other_ports=(broker.port,),
        )
        self.specs = {
            name if key == broker.name else key: colocated if key == broker.name else spec
            for key, spec in self.specs.items()
        }
        self.aliases = {broker.name: name, gateway.name: name}

    def name_of(self, name: str) -> str:
        """The process that plays `name` ("broker-a" or "gateway" of a colocated cluster: the one that holds both)."""
        return self.aliases.get(name, name)

    def _replicated_broker(self, ports: dict[str, int], broker_id: int) -> dict[str, str]:
        if not self.replicated:
            return {}
        return REPLICATED_BROKER | {"PETREL_BROKER_BROKER_ID": str(broker_id)}

    async def controller_view(self) -> dict[str, Any]:
        """`GET /internal/controller` of the first nameserver that answers it (any reads it from etcd)."""
        urls = {name: self.specs[name].url for name in self.nameserver_names}
        return await controller_view(urls, self.internal_headers())

    async def controller_leader(self) -> str | None:
        """The nameserver process whose controller leads now (None: no leader in etcd)."""
        return leading(await self.controller_view(), {n: self.specs[n].port for n in self.nameserver_names})

    async def master(self) -> str:
        """The process that is broker-a's master now, as the controller says."""
        if not self.replicated:
            return "broker-a"
        leader_id = master_id(await self.controller_view())
        return "broker-a" if leader_id == 0 else f"broker-a@{leader_id}"

    async def promoted_after(self, killed: str, timeout: float = 30.0) -> None:
        """Until the controller has made another broker the master (the killed one's lease and timeout passed)."""

        async def other_master() -> bool:
            return await self.master() != killed

        await eventually(other_master, f"a slave of {killed} is promoted", timeout=timeout)

    def internal_headers(self) -> dict[str, str]:
        """What a test's call to an internal service carries: the cluster token, if the cluster has one."""
        return {INTERNAL_TOKEN_HEADER: read_token_file(self.token_file)} if self.token_file else {}

    async def start(self) -> None:
        if self.replicated and self.etcd is None:
            members = etcd_cluster(self.data_dir / "etcd", self.etcd_members)
            self.etcd = await asyncio.to_thread(self._etcd.enter_context, members)
            endpoints = {"PETREL_ETCD_ENDPOINTS": ",".join(self.etcd.endpoints), "PETREL_ETCD_PREFIX": "/petrel-e2e/"}
            for spec in self.specs.values():
                spec.env.update(endpoints)
        await asyncio.to_thread(self.start_now)
        if self.replicated:
            await self.slave_electable()

    async def slave_electable(self, timeout: float = 30.0) -> None:
        """Until etcd records broker-a's slave in its in-sync set: before, a master that dies leaves no one the
        controller may promote (a slave counts on the master at once, in etcd a write later)."""

        async def recorded() -> bool:
            return len(in_sync_ids(await self.controller_view())) == 2

        await eventually(recorded, "broker-a's slave in etcd's in-sync set", timeout=timeout)

    def start_now(self, *names: str) -> None:
        """Start the processes named (every one when none is), in the cluster's order, each up before the next; one
        already running is left as it is."""
        running = {c.spec.name for c in self.supervisor.children if c.process.poll() is None}
        names = tuple(self.name_of(name) for name in names)
        for name, spec in self.specs.items():
            if (not names or name in names) and name not in running:
                self.supervisor.start(spec)

    def stop(self) -> None:
        """Every process stopped; txcheck's Redis keys removed."""
        self.supervisor.stop_all()
        self._etcd.close()
        if self.txcheck:
            _forget_redis_keys(self.redis_prefix)

    async def kill_and_restart(self, name: str, client: httpx.AsyncClient, topic: str) -> None:
        """kill -9 one process, start it again, and wait until the gateway routes `topic` to it."""
        name = self.name_of(name)
        child = self._child(name)
        os.kill(child.process.pid, signal.SIGKILL)
        await asyncio.to_thread(child.process.wait)
        self.supervisor.children.remove(child)
        await asyncio.to_thread(self.supervisor.start, self.specs[name])

        async def routed() -> bool:
            return (await client.get(f"/v1/topics/{topic}")).status_code == 200

        await eventually(routed, f"{name} is routed again after its restart")

    async def kill(self, name: str) -> None:
        """kill -9 of one process (a Celery worker's pool processes die with it). Replicated, "broker-a" is
        whichever broker is the master now: killing it is a failover."""
        if self.replicated and name == "broker-a":
            name = self._killed_master = await self.master()
        await self.kill_process(self.name_of(name))

    async def kill_process(self, name: str) -> None:
        """kill -9 of the process of that name, whatever its role."""
        child = self._child(self.name_of(name))
        os.kill(child.process.pid, signal.SIGKILL)
        await asyncio.to_thread(child.process.wait)
        self.supervisor.children.remove(child)

    async def start_process(self, name: str) -> None:
        """Start the process of that name again (it answers its health check when this returns)."""
        await asyncio.to_thread(self.supervisor.start, self.specs[self.name_of(name)])

    async def restart(self, name: str) -> None:
        """Start a killed process again; a killed master once its slave has taken over (it returns as a slave), or
        after PROMOTION_WAIT_SECONDS without a promotion, as systemd would: a slave that had not yet been recorded
        in the in-sync set in etcd when the master died is never promoted (no unclean election), and nothing is
        answered until the master is back."""
        if self.replicated and name == "broker-a" and self._killed_master is not None:
            name, self._killed_master = self._killed_master, None
            with contextlib.suppress(AssertionError):
                await self.promoted_after(name, timeout=PROMOTION_WAIT_SECONDS)
        await asyncio.to_thread(self.supervisor.start, self.specs[self.name_of(name)])

    def pause(self, name: str) -> None:
        """SIGSTOP of one process: it holds its sockets and answers nothing until `resume`."""
        os.kill(self._child(name).process.pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.kill(self._child(name).process.pid, signal.SIGCONT)

    def _child(self, name: str) -> Child:
        return next(c for c in self.supervisor.children if c.spec.name == self.name_of(name))

    def log(self, name: str) -> str:
        return (self.supervisor.log_dir / f"{self.name_of(name)}.log").read_text(errors="replace")


@asynccontextmanager
async def local_cluster(data_dir: Path, **env: str) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    async with started(LocalCluster(data_dir, env)) as running:
        yield running


@asynccontextmanager
async def colocated_cluster(data_dir: Path, **env: str) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    """As `local_cluster`, but for broker-a and the gateway: one process (`petrel serve gateway --colocated`)."""
    async with started(LocalCluster(data_dir, env, colocated=True)) as running:
        yield running


@asynccontextmanager
async def local_cluster_with_push(data_dir: Path, **env: str) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    """The cluster and the push service."""
    async with started(LocalCluster(data_dir, env, push=True)) as running:
        yield running


@asynccontextmanager
async def local_cluster_with_txcheck(
    data_dir: Path, *, replicated: bool = False, **env: str
) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    """The cluster and txcheck's Celery worker and beat; `replicated`: broker-a with a slave, under a controller."""
    async with started(LocalCluster(data_dir, env, txcheck=True, replicated=replicated)) as running:
        yield running


@asynccontextmanager
async def replicated_cluster(data_dir: Path, **env: str) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    """broker-a a SYNC_MASTER with a slave, two nameservers each running the controller, three etcd members: the
    layout in which any one process may fail (the nemesis run's)."""
    cluster = LocalCluster(data_dir, env, replicated=True, nameservers=2, etcd_members=3)
    async with started(cluster) as running:
        yield running


@asynccontextmanager
async def started(cluster: LocalCluster) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    """The cluster running, and a client of its gateway; stopped after (txcheck's Redis keys removed)."""
    try:
        await cluster.start()
        async with httpx.AsyncClient(base_url=cluster.url, timeout=15) as client:
            yield cluster, client
    finally:
        cluster.stop()


def _forget_redis_keys(prefix: str) -> None:
    client = redis.Redis.from_url(FAST_TXCHECK["PETREL_REDIS_URL"])
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
