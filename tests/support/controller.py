"""The controller on a real etcd, for tests: controllers as nameservers run them, brokers' keys as brokers write them.

`replica(client, name, id, ...)` puts a broker's report on a lease of its own (revoke it: that
run is dead); `state(client, name)` reads the broker name's state; `running(controller)` runs a
controller's campaign in a task for the block.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from libs.controller_api import MasterClaim, ReplicaReport, ReplicationState, master_key, replica_key, state_key
from libs.etcd import EtcdClient, Lease
from libs.events.writer import EventWriter
from services.nameserver.controller import Controller
from tests.support.waiting import eventually

TTL = 30
"""Seconds of the leases of test replicas: they die when revoked, not while a slow test runs."""


def controller(client: EtcdClient, folder: Path, address: str = "127.0.0.1:9876", timeout: float = 0.5) -> Controller:
    return Controller(
        client,
        address,
        master_timeout=timeout,
        scan_interval=0.05,
        state_dir=folder,
        events=EventWriter(folder / "export", "nameserver", enabled=False),
    )


@contextlib.asynccontextmanager
async def running(made: Controller) -> AsyncIterator[Controller]:
    task = asyncio.create_task(made.run())
    try:
        yield made
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def scanned(made: Controller, count: int = 3) -> None:
    """Until the controller has read etcd and decided `count` more times (it leads)."""
    target = made.scans + count

    async def enough() -> bool:
        return made.scans >= target

    await eventually(enough, f"{count} scans of the controller", 10)


async def replica(
    client: EtcdClient, name: str, broker_id: int, *, log_end: int = 0, epoch: int = 0, run: str | None = None
) -> Lease:
    """Broker `broker_id` of `name` reports itself, on a lease of its own (answered)."""
    lease = await client.grant(TTL)
    report = ReplicaReport(
        address=f"127.0.0.1:{10911 + broker_id}", log_end=log_end, epoch=epoch, run=run or f"run-{broker_id}"
    )
    await client.put(replica_key(name, broker_id), report.model_dump_json(), lease=lease.id)
    return lease


async def claim_master(client: EtcdClient, name: str, lease: Lease, found: ReplicationState) -> None:
    """The granted master takes the role: its master key on its lease."""
    claim = MasterClaim(broker_id=found.master_id, run=found.master_run, epoch=found.epoch)
    await client.put(master_key(name), claim.model_dump_json(), lease=lease.id)


async def state(client: EtcdClient, name: str) -> ReplicationState | None:
    kv = await client.get(state_key(name))
    return None if kv is None else ReplicationState.model_validate_json(kv.value)


async def put_state(client: EtcdClient, name: str, value: ReplicationState) -> None:
    await client.put(state_key(name), value.model_dump_json())


async def granted(client: EtcdClient, name: str, epoch: int, timeout: float = 10.0) -> ReplicationState:
    """The state once it is at `epoch` or past it."""

    async def reached() -> bool:
        found = await state(client, name)
        return found is not None and found.epoch >= epoch

    await eventually(reached, f"{name}'s state at epoch {epoch}", timeout)
    found = await state(client, name)
    assert found is not None
    return found


async def controller_view(nameservers: dict[str, str], headers: dict[str, str], timeout: float = 5) -> dict[str, Any]:
    """`GET /internal/controller` of the first of `nameservers` (process name: URL) that answers it (any reads it
    from etcd)."""
    failures: list[str] = []
    for name, url in nameservers.items():
        try:
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout) as client:
                answer = await client.get("/internal/controller")
            if answer.status_code == 200:
                view: dict[str, Any] = answer.json()
                return view
            failures.append(f"{name}: {answer.status_code}")
        except httpx.HTTPError as exc:
            failures.append(f"{name}: {type(exc).__name__}")
    raise RuntimeError(f"no nameserver answered the controller's view: {failures}")


def leading(view: dict[str, Any], ports: dict[str, int]) -> str | None:
    """Of the nameservers (process name: port), the one the view names as the controller's leader."""
    leader = view.get("leader")
    return next((name for name, port in ports.items() if leader and leader.endswith(f":{port}")), None)


def in_sync_ids(view: dict[str, Any]) -> list[int]:
    """The first broker name's in-sync set as etcd records it (empty before any assignment): those the controller
    may promote."""
    assignment = view["broker_names"][0]["assignment"] if view["broker_names"] else None
    return list(assignment["in_sync"]) if assignment else []


def master_id(view: dict[str, Any]) -> int:
    """The id of the first broker name's master in the view (0 before any assignment)."""
    assignment = view["broker_names"][0]["assignment"] if view["broker_names"] else None
    return int(assignment["master_id"]) if assignment else 0
