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
