"""A slave broker copies its master's CommitLog over one stream, serves reads of it, and takes no writes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from libs.broker_api.replication import BrokerRole
from libs.codec import encode_record, iter_records
from libs.message import MessageRecord, Prop
from services.broker.app import create_app
from services.broker.settings import BrokerSettings
from tests.support.apps import broker_settings, in_process
from tests.support.serving import ServedApp, serving

BINARY = {"content-type": "application/octet-stream"}
WAIT_MS = 10_000
"""How long a pull on the slave may wait for what the master stored: a bound, not a pace."""


@pytest.fixture
def master_settings(nameserver: ServedApp) -> BrokerSettings:
    return broker_settings(nameserver)


@pytest.fixture
def master(master_settings: BrokerSettings) -> Iterator[ServedApp]:
    with serving(create_app(master_settings), master_settings.port) as served:
        yield served


def slave_settings(nameserver: ServedApp, master: ServedApp) -> BrokerSettings:
    return broker_settings(nameserver, broker_id=1, role=BrokerRole.SLAVE, master_address=master.address)


async def put(broker: httpx.AsyncClient, first: int, count: int, queue_id: int = 0) -> None:
    records = [
        encode_record(
            MessageRecord(
                topic="orders",
                body=f"m{n}".encode(),
                queue_id=queue_id,
                properties={Prop.UNIQ_KEY: f"ID-{n}", Prop.KEYS: f"k{n}"},
            )
        )
        for n in range(first, first + count)
    ]
    answer = await broker.post("/internal/messages", headers=BINARY, content=b"".join(records))
    assert answer.status_code == 200, answer.text


async def pulled(broker: httpx.AsyncClient, offset: int, wait_ms: int = WAIT_MS, max_count: int = 32) -> list[str]:
    """Bodies from `offset` on, waiting up to `wait_ms` for the first to be there."""
    answer = await broker.get(
        "/internal/topics/orders/queues/0/messages", params={"offset": offset, "max": max_count, "wait_ms": wait_ms}
    )
    assert answer.status_code == 200, answer.text
    return [r.body.decode() for r in iter_records(answer.content)]


async def copied_to(slave: httpx.AsyncClient, count: int) -> list[str]:
    """Every body of orders/0 on the slave once its `count`-th message is there (each pull at the queue's end
    waits for the next message the slave copies)."""
    bodies: list[str] = []
    while len(bodies) < count:
        arrived = await pulled(slave, len(bodies))
        assert arrived, f"the slave has {len(bodies)} of {count} messages and nothing came in {WAIT_MS} ms"
        bodies += arrived
    return bodies


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
