"""Calls a test makes to a broker's internal API in-process: puts, groups, leases, settles, half messages."""

from __future__ import annotations

from typing import Any

import httpx

from libs.broker_api.frames import decode_leased
from libs.codec import encode_record, iter_records
from libs.message import MessageRecord, Prop

Received = list[tuple[str, int, MessageRecord]]


async def put(broker: httpx.AsyncClient, *bodies: str, queue_id: int = 0, tag: str = "paid") -> list[str]:
    records = [
        encode_record(
            MessageRecord(
                topic="orders",
                body=body.encode(),
                queue_id=queue_id,
                properties={Prop.UNIQ_KEY: f"ID-{body}", Prop.TAGS: tag},
            )
        )
        for body in bodies
    ]
    answer = await broker.post(
        "/internal/messages", headers={"content-type": "application/octet-stream"}, content=b"".join(records)
    )
    assert answer.status_code == 200, answer.text
    return [f"ID-{body}" for body in bodies]


async def make_group(broker: httpx.AsyncClient, group: str = "billing", **config: Any) -> None:
    answer = await broker.put(f"/internal/groups/{group}", json=config)
    assert answer.status_code == 200, answer.text


async def receive(broker: httpx.AsyncClient, group: str = "billing", **body: Any) -> Received:
    answer = await broker.post(
        f"/internal/groups/{group}/topics/orders/receive",
        json={"max_messages": 32, "invisible_ms": 30_000} | body,
    )
    assert answer.status_code == 200, answer.text
    leases, records = decode_leased(answer.content)
    return [
        (lease.receipt_handle, lease.delivery_attempt, record)
        for lease, record in zip(leases, iter_records(records), strict=True)
    ]


async def settle(
    broker: httpx.AsyncClient, verb: str, *handles: str, group: str = "billing", **extra: Any
) -> list[dict[str, Any]]:
    answer = await broker.post(f"/internal/groups/{group}/{verb}", json={"receipt_handles": list(handles)} | extra)
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    return results


def bodies(received: Received) -> list[str]:
    return sorted(r.body.decode() for _, _, r in received)


def half(message_id: str, body: str = "pay order 7", **properties: str) -> bytes:
    props = {
        Prop.UNIQ_KEY: message_id,
        Prop.PRODUCER_GROUP: "shop",
        Prop.TRANSACTION_PREPARED: "true",
        Prop.TAGS: "paid",
    } | properties
    return encode_record(MessageRecord(topic="orders", body=body.encode(), queue_id=1, properties=props))


async def put_half(broker: httpx.AsyncClient, message_id: str, **properties: str) -> dict[str, Any]:
    answer = await broker.post(
        "/internal/messages",
        headers={"content-type": "application/octet-stream"},
        content=half(message_id, **properties),
    )
    assert answer.status_code == 200, answer.text
    stored: dict[str, Any] = answer.json()["stored"][0]
    return stored


async def topic_records(broker: httpx.AsyncClient, topic: str, queue: int = 0) -> list[MessageRecord]:
    answer = await broker.get(f"/internal/topics/{topic}/queues/{queue}/messages", params={"offset": 0, "max": 100})
    return list(iter_records(answer.content))


async def end(broker: httpx.AsyncClient, message_id: str, verb: str, by: str | None = None) -> httpx.Response:
    body = {"by": by} if by else None
    return await broker.post(f"/internal/transactions/{message_id}/{verb}", json=body)


async def gauge(broker: httpx.AsyncClient, name: str) -> float:
    text = (await broker.get("/metrics")).text
    (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])
