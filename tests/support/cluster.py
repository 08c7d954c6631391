"""LocalCluster: a whole Petrel cluster on real processes for e2e tests (nameserver, broker, timer, gateway).

With `push=True`, also the push service. With `txcheck=True`, also txcheck's Celery worker
and beat on the real Redis, under a key prefix of the cluster's own (scans every second,
transactions due after one second). With `token=True`, a cluster token as `petrel up` makes
one (`<data_dir>/cluster.token`): a test's own calls to an internal service then send
`internal_headers()`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import redis

from deploy.plan import ProcessSpec
from deploy.supervisor import Supervisor
from libs.cluster_token import TOKEN_FILE_SETTING, ensure_token_file, read_token_file, token_file_of
from libs.http.middleware import INTERNAL_TOKEN_HEADER
from tests.support.serving import free_port
from tests.support.waiting import eventually

SMALL_BROKER = {
    "PETREL_BROKER_SEGMENT_SIZE": str(8 * 1024 * 1024),
    "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
    "PETREL_BROKER_INDEX_MAX_ENTRIES": "100000",
    "PETREL_BROKER_REGISTER_INTERVAL_SECONDS": "0.5",
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


class LocalCluster:
    def __init__(
        self, data_dir: Path, env: dict[str, str], *, txcheck: bool = False, push: bool = False, token: bool = False
    ) -> None:
        self.data_dir = data_dir
        self.txcheck = txcheck
        self.supervisor = Supervisor(data_dir)
        self.token_file = ensure_token_file(token_file_of(data_dir)) if token else None
        token_env = {TOKEN_FILE_SETTING: str(self.token_file)} if self.token_file else {}
        ports = {name: free_port() for name in ("nameserver", "broker", "timer", "push", "gateway")}
        self.redis_prefix = f"petrel-e2e:{uuid.uuid4().hex[:12]}:"
        shared = (
            {
                "PETREL_DATA_DIR": str(data_dir),
                "PETREL_NAMESERVERS": f"127.0.0.1:{ports['nameserver']}",
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
        self.specs = {
            "nameserver": spec("nameserver", "services.nameserver", "nameserver"),
            "broker-a": spec("broker-a", "services.broker", "broker"),
            "timer": spec("timer", "services.timer", "timer"),
        }
        if push:
            self.specs["push"] = spec("push", "services.push", "push")
        self.specs["gateway"] = spec("gateway", "gateway", "gateway", addresses)
        if txcheck:
            for role in ("worker", "beat"):
                self.specs[f"txcheck-{role}"] = ProcessSpec(
                    f"txcheck-{role}", "services.txcheck", 0, shared, args=(role,)
                )

    @property
    def url(self) -> str:
        return self.specs["gateway"].url

    def internal_headers(self) -> dict[str, str]:
        """What a test's call to an internal service carries: the cluster token, if the cluster has one."""
        return {INTERNAL_TOKEN_HEADER: read_token_file(self.token_file)} if self.token_file else {}

    async def start(self) -> None:
        for spec in self.specs.values():
            await asyncio.to_thread(self.supervisor.start, spec)

    async def kill_and_restart(self, name: str, client: httpx.AsyncClient, topic: str) -> None:
        """kill -9 one process, start it again, and wait until the gateway routes `topic` to it."""
        child = next(c for c in self.supervisor.children if c.spec.name == name)
        os.kill(child.process.pid, signal.SIGKILL)
        await asyncio.to_thread(child.process.wait)
        self.supervisor.children.remove(child)
        await asyncio.to_thread(self.supervisor.start, self.specs[name])

        async def routed() -> bool:
            return (await client.get(f"/v1/topics/{topic}")).status_code == 200

        await eventually(routed, f"{name} is routed again after its restart")

    async def kill(self, name: str) -> None:
        """kill -9 of one process (a Celery worker's pool processes die with it)."""
        child = next(c for c in self.supervisor.children if c.spec.name == name)
        os.kill(child.process.pid, signal.SIGKILL)
        await asyncio.to_thread(child.process.wait)
        self.supervisor.children.remove(child)

    async def restart(self, name: str) -> None:
        await asyncio.to_thread(self.supervisor.start, self.specs[name])

    def log(self, name: str) -> str:
        return (self.supervisor.log_dir / f"{name}.log").read_text(errors="replace")


@asynccontextmanager
async def local_cluster(data_dir: Path, **env: str) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    async with started(LocalCluster(data_dir, env)) as running:
        yield running


@asynccontextmanager
async def local_cluster_with_push(data_dir: Path, **env: str) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    """The cluster and the push service."""
    async with started(LocalCluster(data_dir, env, push=True)) as running:
        yield running


@asynccontextmanager
async def local_cluster_with_txcheck(
    data_dir: Path, **env: str
) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    """The cluster and txcheck's Celery worker and beat."""
    async with started(LocalCluster(data_dir, env, txcheck=True)) as running:
        yield running


@asynccontextmanager
async def started(cluster: LocalCluster) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    """The cluster running, and a client of its gateway; stopped after (txcheck's Redis keys removed)."""
    try:
        await cluster.start()
        async with httpx.AsyncClient(base_url=cluster.url, timeout=15) as client:
            yield cluster, client
    finally:
        cluster.supervisor.stop_all()
        if cluster.txcheck:
            _forget_redis_keys(cluster.redis_prefix)


def _forget_redis_keys(prefix: str) -> None:
    client = redis.Redis.from_url(FAST_TXCHECK["PETREL_REDIS_URL"])
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
