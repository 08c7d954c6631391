import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from libs.names import is_system_topic
from services.broker.app import create_app
from services.nameserver.app import create_app as nameserver_app
from services.nameserver.settings import NameserverSettings
from tests.support.apps import broker_settings, in_process
from tests.support.serving import ServedApp, free_port, serving
from tests.support.waiting import eventually

TOPIC = {"read_queues": 4, "write_queues": 4}


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    async for client in in_process(create_app(broker_settings(nameserver))):
        yield client


async def route(nameserver: ServedApp, topic: str) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.get(f"{nameserver.url}/internal/routes/{topic}")


async def test_broker_registers_at_start(broker: httpx.AsyncClient, nameserver: ServedApp) -> None:
    async with httpx.AsyncClient() as client:
        clusters = (await client.get(f"{nameserver.url}/internal/clusters")).json()
    assert clusters["clusters"][0]["brokers"][0]["broker_name"] == "broker-a"
    identity = (await broker.get("/internal/broker")).json()
    assert identity["nameservers"] == {nameserver.address: True}
    assert (await broker.get("/readyz")).json()["ready"] is True


async def test_topic_change_reaches_the_nameserver_before_the_answer(
    broker: httpx.AsyncClient, nameserver: ServedApp
) -> None:
    created = await broker.put("/internal/topics/orders", json=TOPIC)
    assert created.status_code == 200
    assert created.json()["created"] is True
    assert (await route(nameserver, "orders")).json()["queues"][0]["write_queues"] == 4

    updated = await broker.put("/internal/topics/orders", json={"read_queues": 8, "write_queues": 8})
    assert updated.json()["created"] is False
    assert (await route(nameserver, "orders")).json()["queues"][0]["write_queues"] == 8

    assert (await broker.delete("/internal/topics/orders")).status_code == 204
    assert (await route(nameserver, "orders")).status_code == 404
    missing = await broker.get("/internal/topics/orders")
    assert missing.status_code == 404
    assert missing.json()["type"] == "https://petrel.dev/problems/topic-not-found"


async def test_topics_survive_a_restart(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver)
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json=TOPIC)
    async for client in in_process(create_app(settings)):
        listed = (await client.get("/internal/topics")).json()["topics"]
        users = [(t["topic"], t["write_queues"]) for t in listed if not is_system_topic(t["topic"])]
        assert users == [("orders", 4)]
    assert (await route(nameserver, "orders")).status_code == 404, "a clean stop unregisters the broker"


async def test_invalid_topic_requests_are_clear_4xx(broker: httpx.AsyncClient) -> None:
    bad_name = await broker.put("/internal/topics/bad$name", json=TOPIC)
    assert bad_name.status_code == 400
    assert bad_name.json()["type"] == "https://petrel.dev/problems/invalid-topic-name"
    zero = await broker.put("/internal/topics/orders", json={"read_queues": 0, "write_queues": 4})
    assert zero.status_code == 422


async def test_a_dead_nameserver_does_not_stop_the_broker(caplog: pytest.LogCaptureFixture) -> None:
    dead = f"127.0.0.1:{free_port()}"
    caplog.set_level(logging.WARNING)
    async for client in in_process(create_app(broker_settings(dead))):
        assert (await client.put("/internal/topics/orders", json=TOPIC)).status_code == 200
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["nameservers"] == f"registered with none of {dead}"
    assert f"registering with nameserver {dead} failed" in caplog.text


async def test_periodic_heartbeat_re_registers_with_a_nameserver_that_forgot_the_broker() -> None:
    port = free_port()
    with serving(nameserver_app(NameserverSettings()), port) as first:
        app = create_app(broker_settings(first.address, register_interval_seconds=0.05))
        async for client in in_process(app):
            await client.put("/internal/topics/orders", json=TOPIC)
            first.stop()
            with serving(nameserver_app(NameserverSettings()), port) as restarted:

                async def routed() -> bool:
                    return (await route(restarted, "orders")).status_code == 200

                await eventually(routed, "the broker registered again with the restarted nameserver")


async def test_a_deleted_topic_created_again_starts_empty(broker: httpx.AsyncClient) -> None:
    from libs.codec import encode_record
    from libs.message import MessageRecord

    await broker.put("/internal/topics/orders", json=TOPIC)
    record = encode_record(MessageRecord(topic="orders", body=b"old", queue_id=0))
    assert (
        await broker.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=record)
    ).status_code == 200
    await broker.delete("/internal/topics/orders")
    await broker.put("/internal/topics/orders", json=TOPIC)

    offsets = (await broker.get("/internal/topics/orders/queues/0/offsets")).json()
    assert (offsets["min_offset"], offsets["max_offset"]) == (0, 0)
