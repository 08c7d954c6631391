"""LocalCluster: a whole Petrel cluster on real processes for e2e tests (nameserver, broker, timer, gateway)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from deploy.plan import ProcessSpec
from deploy.supervisor import Supervisor
from tests.support.serving import free_port
from tests.support.waiting import eventually

SMALL_BROKER = {
    "PETREL_BROKER_SEGMENT_SIZE": str(8 * 1024 * 1024),
    "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
    "PETREL_BROKER_INDEX_MAX_ENTRIES": "100000",
    "PETREL_BROKER_REGISTER_INTERVAL_SECONDS": "0.5",
}
SMALL_TIMER = {
    "PETREL_TIMER_WINDOW_DAYS": "0.01",
    "PETREL_TIMER_TIMER_LOG_SEGMENT_BYTES": str(56 * 4096),
    "PETREL_TIMER_BROKER_REFRESH_SECONDS": "0.2",
}


class LocalCluster:
    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.supervisor = Supervisor(data_dir)
        ports = {name: free_port() for name in ("nameserver", "broker", "timer", "gateway")}
        shared = (
            {
                "PETREL_DATA_DIR": str(data_dir),
                "PETREL_NAMESERVERS": f"127.0.0.1:{ports['nameserver']}",
            }
            | SMALL_BROKER
            | SMALL_TIMER
            | env
        )

        def spec(name: str, module: str, service: str, extra: dict[str, str] | None = None) -> ProcessSpec:
            port = ports[service]
            return ProcessSpec(
                name, module, port, shared | {f"PETREL_{service.upper()}_PORT": str(port)} | (extra or {})
            )

        timer_address = f"127.0.0.1:{ports['timer']}"
        self.specs = {
            "nameserver": spec("nameserver", "services.nameserver", "nameserver"),
            "broker-a": spec("broker-a", "services.broker", "broker"),
            "timer": spec("timer", "services.timer", "timer"),
            "gateway": spec("gateway", "gateway", "gateway", {"PETREL_GATEWAY_TIMER_ADDRESS": timer_address}),
        }

    @property
    def url(self) -> str:
        return self.specs["gateway"].url

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


@asynccontextmanager
async def local_cluster(data_dir: Path, **env: str) -> AsyncIterator[tuple[LocalCluster, httpx.AsyncClient]]:
    cluster = LocalCluster(data_dir, env)
    try:
        await cluster.start()
        async with httpx.AsyncClient(base_url=cluster.url, timeout=15) as client:
            yield cluster, client
    finally:
        cluster.supervisor.stop_all()
