"""SYNC_MASTER: a put is answered once every in-sync slave has it; a slave that stops confirming leaves the set."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from libs.broker_api.replication import BrokerRole
from services.broker.app import create_app
from services.broker.settings import BrokerSettings
from tests.support.apps import broker_settings, in_process
from tests.support.replication import copied_to, pulled, put, slave_settings
from tests.support.serving import ServedApp, serving

JOIN_WAIT_MS = 10_000


@pytest.fixture
def master_settings(nameserver: ServedApp) -> BrokerSettings:
    return broker_settings(nameserver, role=BrokerRole.SYNC_MASTER, sync_replication_timeout_ms=500)


@pytest.fixture
def master(master_settings: BrokerSettings) -> Iterator[ServedApp]:
    with serving(create_app(master_settings), master_settings.port) as served:
        yield served


@pytest.fixture
async def to_master(master: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=master.url) as client:
        answer = await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
        assert answer.status_code == 200, answer.text
        yield client


async def in_sync(to_master: httpx.AsyncClient, slave_id: int = 1) -> dict[str, object]:
    """The master's replication status once slave `slave_id` is in its in-sync set (or the wait ran out)."""
    answer = await to_master.get("/internal/replication", params={"in_sync": slave_id, "wait_ms": JOIN_WAIT_MS})
    assert answer.status_code == 200, answer.text
    status: dict[str, object] = answer.json()
    return status


async def test_a_put_is_answered_once_the_in_sync_slave_has_it(
    nameserver: ServedApp, master: ServedApp, to_master: httpx.AsyncClient
) -> None:
    async for slave in in_process(create_app(slave_settings(nameserver, master))):
        assert (await in_sync(to_master))["in_sync"] == [1]
        for n in range(20):
            await put(to_master, n, 1)
            assert await pulled(slave, n, wait_ms=0) == [f"m{n}"]  # there already when the put was answered
        metrics = (await to_master.get("/metrics")).text
        assert "petrel_replication_in_sync_slaves 1.0" in metrics
        assert "petrel_replication_fenced 0.0" in metrics


async def test_a_slave_that_stops_confirming_leaves_the_set_and_rejoins_once_caught_up(
    nameserver: ServedApp, master: ServedApp, to_master: httpx.AsyncClient
) -> None:
    settings = slave_settings(nameserver, master)
    async for slave in in_process(create_app(settings)):
        assert (await in_sync(to_master))["in_sync"] == [1]
        await put(to_master, 0, 5)
        assert await pulled(slave, 0, wait_ms=0) == [f"m{n}" for n in range(5)]

    await put(to_master, 5, 5)  # the slave is gone: answered once it is dropped (500 ms), not never
    status = (await to_master.get("/internal/replication")).json()
    assert status["in_sync"] == []
    assert [(s["slave_id"], s["in_sync"], s["lag_bytes"] > 0) for s in status["slaves"]] == [(1, False, True)]
    assert status["slaves"][0]["lag_ms"] >= 500  # m5 waited the 500 ms before it was answered

    async for slave in in_process(create_app(settings)):
        assert (await in_sync(to_master))["in_sync"] == [1]
        assert await copied_to(slave, 10) == [f"m{n}" for n in range(10)]
        await put(to_master, 10, 1)
        assert await pulled(slave, 10, wait_ms=0) == ["m10"]
