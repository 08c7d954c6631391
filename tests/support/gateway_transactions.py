"""Calls a test makes to a gateway's transactions: register a producer group, begin, end, what is visible."""

from __future__ import annotations

from typing import Any

import httpx

from libs.codec import iter_records
from libs.message import MessageRecord
from libs.names import TRANS_HALF_TOPIC
from tests.support.serving import ServedApp


async def register(gateway: httpx.AsyncClient, group: str = "shop", **fields: Any) -> httpx.Response:
    body = {"checkback_url": "http://127.0.0.1:9/checkback"} | fields
    return await gateway.put(f"/v1/producer-groups/{group}", json=body)


async def begin(gateway: httpx.AsyncClient, topic: str = "orders", **fields: Any) -> dict[str, Any]:
    """Register group `shop` and send a half message to `topic`; the answer."""
    assert (await register(gateway)).status_code in (200, 201)
    body = {"body": "pay order 7", "producer_group": "shop"} | fields
    answer = await gateway.post(f"/v1/topics/{topic}/transactions", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


async def end(gateway: httpx.AsyncClient, transaction_id: str, verb: str, **body: Any) -> httpx.Response:
    return await gateway.post(f"/v1/transactions/{transaction_id}/{verb}", json=body or None)


async def pull(gateway: httpx.AsyncClient, topic: str, broker: str, queue_id: int) -> list[dict[str, Any]]:
    answer = await gateway.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"broker": broker})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["messages"])


async def visible(gateway: httpx.AsyncClient, topic: str) -> list[str]:
    """The ids of every message a consumer can pull from the topic, on every broker."""
    described = (await gateway.get(f"/v1/topics/{topic}")).json()
    return [
        m["message_id"]
        for b in described["brokers"]
        for q in b["queues"]
        for m in await pull(gateway, topic, b["broker"], q["queue_id"])
    ]


async def half_copies(broker: ServedApp) -> list[MessageRecord]:
    async with httpx.AsyncClient() as client:
        path = f"{broker.url}/internal/topics/{TRANS_HALF_TOPIC}/queues/0/messages"
        answer = await client.get(path, params={"offset": 0, "max": 100})
    assert answer.status_code == 200, answer.text
    return list(iter_records(answer.content))
