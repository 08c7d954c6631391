"""`PUT /v1/topics/{topic}` changes only what it names and never hides a message; `If-None-Match: *` creates only."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx

from tests.support.gateway_calls import problem_type, pull


async def describe(gateway: httpx.AsyncClient, topic: str) -> tuple[str, int]:
    body = (await gateway.get(f"/v1/topics/{topic}")).json()
    return body["message_type"], body["queues"]


async def test_a_put_changes_only_the_fields_it_names(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.put("/v1/topics/orders", json={"queues": 4, "message_type": "FIFO"})).status_code == 201
    nothing: tuple[dict[str, object] | None, ...] = (None, {})
    for body in nothing:
        again = await gateway.put("/v1/topics/orders", json=body)
        assert again.status_code == 200, again.text
        assert await describe(gateway, "orders") == ("FIFO", 8), f"PUT {body} changed what it did not name"
    assert (await gateway.put("/v1/topics/orders", json={"queues": 6})).status_code == 200
    assert await describe(gateway, "orders") == ("FIFO", 12)
    assert (await gateway.put("/v1/topics/orders", json={"message_type": "NORMAL"})).status_code == 200
    assert await describe(gateway, "orders") == ("NORMAL", 12)
    # Explicit defaults are changes like any other.
    assert (await gateway.put("/v1/topics/orders", json={"queues": 8, "message_type": "NORMAL"})).status_code == 200
    assert await describe(gateway, "orders") == ("NORMAL", 16)


async def test_two_puts_at_once_of_different_fields_both_hold(gateway: httpx.AsyncClient) -> None:
    """Each broker merges the fields named under its topics' lock: a gateway that read the topic first and
    wrote it whole would undo the other change (two operators, or two gateways, at once)."""
    assert (await gateway.put("/v1/topics/orders", json={"queues": 2})).status_code == 201
    for queues, message_type in ((3, "FIFO"), (5, "NORMAL"), (7, "FIFO")):
        answers = await asyncio.gather(
            gateway.put("/v1/topics/orders", json={"queues": queues}),
            gateway.put("/v1/topics/orders", json={"message_type": message_type}),
        )
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        assert await describe(gateway, "orders") == (message_type, 2 * queues)


async def test_fewer_queues_are_a_409_naming_each_queue_that_holds_messages(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.put("/v1/topics/orders", json={"queues": 8})).status_code == 201
    where = Counter[tuple[str, int]]()
    for index in range(24):
        sent = await gateway.post("/v1/topics/orders/messages", json={"body": f"m{index}"})
        assert sent.status_code == 201, sent.text
        where[(sent.json()["broker"], sent.json()["queue_id"])] += 1
    held = sorted((broker, queue_id, n) for (broker, queue_id), n in where.items() if queue_id >= 4)
    assert held, "no message went to queues 4-7"

    refused = await gateway.put("/v1/topics/orders", json={"queues": 4})
    assert refused.status_code == 409, refused.text
    assert problem_type(refused) == "queues-not-empty"
    assert refused.headers["content-type"] == "application/problem+json"
    named = sorted((q["broker"], q["queue_id"], q["messages"]) for q in refused.json()["queues"])
    assert named == held
    broker, queue_id, count = held[0]
    assert f"{broker} queue {queue_id} holds {count}" in refused.json()["detail"]
    assert "retention" in refused.json()["detail"]
    assert "delete the topic" in refused.json()["detail"]
    assert await describe(gateway, "orders") == ("NORMAL", 16), "a refused shrink changed the topic"
    assert len((await pull(gateway, "orders", queue_id, broker))["messages"]) == count

    highest = max(q for _, q, _ in held)
    assert (await gateway.put("/v1/topics/orders", json={"queues": highest + 1})).status_code == 200
    assert await describe(gateway, "orders") == ("NORMAL", 2 * (highest + 1))  # only empty queues went


async def test_if_none_match_star_creates_only(gateway: httpx.AsyncClient) -> None:
    create_only = {"if-none-match": "*"}
    created = await gateway.put("/v1/topics/orders", json={"queues": 2}, headers=create_only)
    assert created.status_code == 201, created.text
    again = await gateway.put("/v1/topics/orders", json={"queues": 6}, headers=create_only)
    assert again.status_code == 412, again.text
    assert problem_type(again) == "already-exists"
    assert await describe(gateway, "orders") == ("NORMAL", 4)
    odd = await gateway.put("/v1/topics/audit", headers={"if-none-match": '"v1"'})
    assert odd.status_code == 400, odd.text


async def test_a_broker_that_lacks_the_topic_gets_it_as_the_others_hold_it(
    gateway: httpx.AsyncClient, brokers: dict[str, Any]
) -> None:
    """A broker added since the topic was created: a PUT of one field creates the topic there with the other
    brokers' queues and type, not the defaults."""
    async with brokers["broker-a"].client() as broker_a:
        held = {"read_queues": 3, "write_queues": 3, "message_type": "FIFO"}
        assert (await broker_a.put("/internal/topics/orders", json=held)).status_code == 200
    assert (await gateway.put("/v1/topics/orders", json={"message_type": "FIFO"})).status_code == 201

    for name in ("broker-a", "broker-b"):
        async with brokers[name].client() as broker:
            topic = (await broker.get("/internal/topics/orders")).json()
        assert (topic["write_queues"], topic["message_type"]) == (3, "FIFO"), f"{name}: {topic}"
