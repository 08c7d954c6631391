"""A slave broker copies its master's CommitLog over one stream, serves reads of it, and takes no writes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from libs.codec import iter_records
from services.broker.app import create_app
from services.broker.settings import BrokerSettings
from tests.support.apps import broker_settings, in_process
from tests.support.replication import BINARY, copied_to, pulled, put, slave_settings
from tests.support.serving import ServedApp, serving


@pytest.fixture
def master_settings(nameserver: ServedApp) -> BrokerSettings:
    return broker_settings(nameserver)


@pytest.fixture
def master(master_settings: BrokerSettings) -> Iterator[ServedApp]:
    with serving(create_app(master_settings), master_settings.port) as served:
        yield served


@pytest.fixture
async def orders(master: ServedApp) -> None:
    async with httpx.AsyncClient(base_url=master.url) as client:
        answer = await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
        assert answer.status_code == 200, answer.text


@pytest.mark.usefixtures("orders")
async def test_a_slave_copies_what_its_master_stores_and_serves_it(nameserver: ServedApp, master: ServedApp) -> None:
    async with httpx.AsyncClient(base_url=master.url) as to_master:
        await put(to_master, 0, 100)
        async for slave in in_process(create_app(slave_settings(nameserver, master))):
            assert await copied_to(slave, 100) == [f"m{n}" for n in range(100)]
            await put(to_master, 100, 50)  # while the slave follows
            assert (await copied_to(slave, 150))[100:] == [f"m{n}" for n in range(100, 150)]

            by_key = await slave.get("/internal/messages", params={"topic": "orders", "key": "k120"})
            assert [r.body for r in iter_records(by_key.content)] == [b"m120"]
            status = (await slave.get("/internal/replication")).json()
            master_status = (await to_master.get("/internal/replication")).json()
            assert status["role"] == "SLAVE"
            assert status["master"] == master.address
            assert status["commitlog_end"] == master_status["commitlog_end"]
            assert master_status["slaves_streaming"] == 1


@pytest.mark.usefixtures("orders")
async def test_a_slave_refuses_writes_and_names_its_master(nameserver: ServedApp, master: ServedApp) -> None:
    async for slave in in_process(create_app(slave_settings(nameserver, master))):
        answer = await slave.post("/internal/messages", headers=BINARY, content=b"")
        assert answer.status_code == 409
        assert answer.json()["type"].endswith("/not-master")
        assert answer.json()["master"] == master.address
        receive = await slave.post("/internal/groups/g/topics/orders/receive", json={"max_messages": 1})
        assert receive.status_code == 409


@pytest.mark.usefixtures("orders")
async def test_a_restarted_slave_resumes_from_its_end_and_holds_each_message_once(
    nameserver: ServedApp, master: ServedApp
) -> None:
    settings = slave_settings(nameserver, master)
    async with httpx.AsyncClient(base_url=master.url) as to_master:
        await put(to_master, 0, 40)
        async for slave in in_process(create_app(settings)):
            await copied_to(slave, 40)
        await put(to_master, 40, 40)  # while the slave is down
        async for slave in in_process(create_app(settings)):
            assert await copied_to(slave, 80) == [f"m{n}" for n in range(80)]
            assert await pulled(slave, 80, wait_ms=0) == []


@pytest.mark.usefixtures("orders")
async def test_a_slave_follows_its_master_through_the_masters_restart(
    nameserver: ServedApp, master_settings: BrokerSettings, master: ServedApp
) -> None:
    running = in_process(create_app(slave_settings(nameserver, master)))
    slave = await anext(running)
    async with httpx.AsyncClient(base_url=master.url) as to_master:
        await put(to_master, 0, 10)
    await copied_to(slave, 10)
    await asyncio.to_thread(master.stop)  # the slave goes on meanwhile, as on its own host
    with serving(create_app(master_settings), master_settings.port) as again:
        async with httpx.AsyncClient(base_url=again.url) as to_master:
            await put(to_master, 10, 10)
        assert await copied_to(slave, 20) == [f"m{n}" for n in range(20)]
        await running.aclose()  # type: ignore[attr-defined]  # while its master is up: a stop mid-connect would leave anyio's attempt behind
