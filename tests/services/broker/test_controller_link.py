"""A broker's link to the controller: its role, its master's lease, and the new role after a failover."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from asgi_lifespan import LifespanManager

from libs.controller_api import BrokerReport
from libs.store.epochs import EpochFile
from libs.store.message_store import MessageStore
from services.broker.controller_link import ControllerLink
from services.nameserver.app import create_app
from services.nameserver.settings import NameserverSettings
from tests.support.clock import FakeClock
from tests.support.store import make_store
from tests.support.waiting import eventually

LEASE = 2.0


@pytest.fixture
async def controller(tmp_path: Path, clock: FakeClock) -> AsyncIterator[httpx.AsyncBaseTransport]:
    app = create_app(NameserverSettings(data_dir=tmp_path / "ns", controller=True, controller_scan_ms=10), clock=clock)
    async with LifespanManager(app) as manager:
        yield httpx.ASGITransport(app=manager.app)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    opened = make_store(tmp_path / "broker")
    yield opened
    await opened.close()


def link(
    store: MessageStore, transport: httpx.AsyncBaseTransport, clock: FakeClock, broker_id: int = 0
) -> ControllerLink:
    return ControllerLink(
        "127.0.0.1:9876",
        "broker-a",
        broker_id,
        f"127.0.0.1:{10911 + broker_id}",
        store,
        EpochFile(store.config.root),
        None,
        heartbeat=0.5,
        lease=LEASE,
        clock=clock,
        transport=transport,
    )


async def test_a_master_acknowledges_writes_only_within_its_lease_from_the_last_answered_report(
    store: MessageStore, controller: httpx.AsyncBaseTransport, clock: FakeClock
) -> None:
    master = link(store, controller, clock)
    assignment = await master.assignment_at_start()
    clock.advance(LEASE - 0.5)  # the start took a while: recovery, the epoch file
    master.take(assignment)
    assert master.is_master
    assert master.holds_lease()
    clock.advance(0.5)
    assert not master.holds_lease(), "no report answered for the lease since the one that made it master: fenced"
    await master.report()
    assert master.holds_lease()
    await master.close()


async def test_after_a_failover_the_old_master_is_told_its_role_changed_and_its_epoch_cannot_change_the_set(
    store: MessageStore, controller: httpx.AsyncBaseTransport, clock: FakeClock
) -> None:
    master = link(store, controller, clock)
    master.take(await master.assignment_at_start())
    async with httpx.AsyncClient(transport=controller, base_url="http://127.0.0.1:9876") as client:
        slave = BrokerReport(address="127.0.0.1:10912", log_end=0, epoch=1).model_dump()
        assert (await client.put("/internal/controller/broker-a/1", json=slave)).status_code == 200
        assert await master.change_in_sync([1])
        clock.advance(4.0)  # the master is silent past the controller's timeout; the slave reports
        assert (await client.put("/internal/controller/broker-a/1", json=slave)).status_code == 200
        view = await client.get("/internal/controller")
    await _scan_done(controller, clock)
    assignment = await master.report()
    assert (assignment.master_id, assignment.epoch) == (1, 2)
    why = master.role_changed(assignment)
    assert why is not None
    assert "broker 1" in why
    assert not master.holds_lease()
    assert not await master.change_in_sync([]), "epoch 1 is over: the controller refuses"
    assert view.status_code == 200
    await master.close()


async def _scan_done(transport: httpx.AsyncBaseTransport, clock: FakeClock) -> None:
    """Until the controller's scan (its own task, every 10 ms) has promoted broker 1."""
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9876") as client:

        async def promoted() -> bool:
            view = (await client.get("/internal/controller")).json()
            return bool(view["broker_names"][0]["assignment"]["master_id"] == 1)

        await eventually(promoted, "the controller promotes broker 1")
