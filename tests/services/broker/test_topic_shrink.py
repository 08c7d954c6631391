"""A broker never hides messages by taking queues away: fewer queues are refused while a removed one holds any."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from libs.codec import encode_record
from libs.message import MessageRecord, Prop
from services.broker.app import create_app
from tests.support.apps import broker_settings, in_process
from tests.support.serving import ServedApp


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    async for client in in_process(create_app(broker_settings(nameserver))):
        yield client


async def put_topic(broker: httpx.AsyncClient, topic: str, queues: int, **fields: object) -> httpx.Response:
    return await broker.put(f"/internal/topics/{topic}", json={"read_queues": queues, "write_queues": queues, **fields})


async def send(broker: httpx.AsyncClient, topic: str, queue_id: int, body: str) -> httpx.Response:
    record = MessageRecord(topic=topic, body=body.encode(), queue_id=queue_id, properties={Prop.UNIQ_KEY: body})
    return await broker.post(
        "/internal/messages", headers={"content-type": "application/octet-stream"}, content=encode_record(record)
    )


async def test_fewer_queues_are_refused_while_a_removed_one_holds_messages(broker: httpx.AsyncClient) -> None:
    assert (await put_topic(broker, "orders", 8)).status_code == 200
    for queue_id, count in ((1, 1), (5, 2), (7, 1)):
        for index in range(count):
            assert (await send(broker, "orders", queue_id, f"q{queue_id}-{index}")).status_code == 200

    refused = await put_topic(broker, "orders", 4)
    assert refused.status_code == 409, refused.text
    assert refused.json()["type"].endswith("/queues-not-empty")
    assert refused.json()["queues"] == [{"queue_id": 5, "messages": 2}, {"queue_id": 7, "messages": 1}]
    assert "queue 5 holds 2 messages" in refused.json()["detail"]
    topic = (await broker.get("/internal/topics/orders")).json()
    assert (topic["read_queues"], topic["write_queues"]) == (8, 8), "a refused shrink changed the topic"
    assert (await send(broker, "orders", 6, "after the refusal")).status_code == 200, "queue 6 stopped taking writes"

    assert (await put_topic(broker, "orders", 8 + 2)).status_code == 200  # more queues: always
    assert (await put_topic(broker, "orders", 8)).status_code == 200  # queues 8 and 9 are empty


async def test_create_only_is_refused_when_the_topic_exists(broker: httpx.AsyncClient) -> None:
    assert (await put_topic(broker, "orders", 4, create_only=True)).status_code == 200
    again = await put_topic(broker, "orders", 2, create_only=True)
    assert again.status_code == 412, again.text
    assert (await broker.get("/internal/topics/orders")).json()["write_queues"] == 4


async def test_a_send_racing_a_shrink_is_never_hidden(broker: httpx.AsyncClient) -> None:
    """Each round a send into queue 3 and a shrink to 2 queues race: either the shrink is refused (the message
    is there to read) or the send is (queue 3 no longer takes writes); never both taken."""
    for round_ in range(30):
        topic = f"race-{round_}"
        assert (await put_topic(broker, topic, 4)).status_code == 200
        calls = [send(broker, topic, 3, f"r{round_}"), put_topic(broker, topic, 2)]
        if round_ % 2:  # the shrink started first: it is at its first await when the send is checked
            sent, shrunk = reversed(await asyncio.gather(*reversed(calls)))
        else:
            sent, shrunk = await asyncio.gather(*calls)
        assert (sent.status_code, shrunk.status_code) in {(200, 409), (404, 200)}, (sent.text, shrunk.text)
        if sent.status_code == 200:
            topic_now = (await broker.get(f"/internal/topics/{topic}")).json()
            assert topic_now["read_queues"] == 4, "the message sent is in a queue no longer read"
