"""A put that reached a broker but got no answer may be stored: it is not sent to another broker."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.gateway_calls import problem_type, pull, send
from tests.support.serving import ServedApp


@pytest.fixture
async def dropping_broker(nameserver: ServedApp, gateway: httpx.AsyncClient) -> AsyncIterator[asyncio.Event]:
    """Broker `broker-c` holding `orders` (made on the others first): it reads each request whole, then drops it.

    As a broker killed after it stored a put and before it answered. The event is set once it took a put.
    """
    assert (await gateway.put("/v1/topics/orders", json={"queues": 1})).status_code in (200, 201)
    took = asyncio.Event()

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            await reader.readexactly(length)
            if head.startswith(b"POST /internal/messages "):
                took.set()
        writer.close()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    body = {
        "cluster": "DefaultCluster",
        "address": f"127.0.0.1:{port}",
        "data_version": 1,
        "topics": [{"name": "orders", "read_queues": 1, "write_queues": 1}],
    }
    async with httpx.AsyncClient() as client:
        (await client.put(f"{nameserver.url}/internal/brokers/broker-c/0", json=body)).raise_for_status()
    async with server:
        yield took


async def test_a_put_dropped_after_it_reached_the_broker_is_not_sent_elsewhere(
    gateway: httpx.AsyncClient, dropping_broker: asyncio.Event
) -> None:
    answers = {}
    for i in range(6):
        answers[f"m{i}"] = await send(gateway, "orders", {"body": f"m{i}", "keys": [f"m{i}"]})
        if dropping_broker.is_set():
            break
    assert dropping_broker.is_set(), "no put went to broker-c"

    *_, (body, dropped) = answers.items()
    assert dropped.status_code == 503, dropped.text
    assert problem_type(dropped) == "broker-unavailable"
    assert dropped.json()["maybe_stored"] is True
    assert "send it again only with the same Idempotency-Key" in dropped.json()["detail"]
    stored = [m["body"] for b in ("broker-a", "broker-b") for m in (await pull(gateway, "orders", 0, b))["messages"]]
    assert body not in stored, "the dropped put was sent again to another broker"
    assert sorted(stored) == sorted(set(answers) - {body}), "every other message is stored once"
