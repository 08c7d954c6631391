"""`GET /v1/messages/{id}/trace`: where a message is, and per group what happened to it, from the brokers' state."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.gateway_calls import ack, nack, problem_type, receive, received, send_many


async def trace(gateway: httpx.AsyncClient, message_id: str) -> dict[str, Any]:
    answer = await gateway.get(f"/v1/messages/{message_id}/trace")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def group(found: dict[str, Any], name: str) -> dict[str, Any]:
    (one,) = [g for g in found["groups"] if g["group"] == name]
    return dict(one)


async def test_a_nacked_then_acked_message_shows_each_step(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/orders", json={"queues": 4})
    await gateway.put("/v1/groups/billing")
    await gateway.put("/v1/groups/audit")
    assert await received(gateway, "audit", "orders", max_messages=1, wait_seconds=0) == []  # subscribed
    (message_id,) = await send_many(gateway, "orders", 1, keys=["order-7"])
    (first,) = await received(gateway, "billing", "orders")

    leased = await trace(gateway, message_id)
    assert (leased["message_id"], leased["topic"], leased["key"]) == (message_id, "orders", "order-7")
    assert (leased["stored"]["queue"], leased["stored"]["queue_offset"]) == (first["queue_id"], first["queue_offset"])
    assert (group(leased, "billing")["state"], group(leased, "billing")["leases_in_flight"]) == ("in_flight", 1)
    assert group(leased, "audit")["state"] == "waiting", "a group that has not received it yet"

    await nack(gateway, "billing", [first["receipt_handle"]], delay_ms=0, reason="try again")
    retrying = group(await trace(gateway, message_id), "billing")
    assert retrying["state"] == "retrying"
    assert [r["level"] for r in retrying["retries"]] == [1]

    (second,) = await received(gateway, "billing", "orders", wait_seconds=5)
    await ack(gateway, "billing", [second["receipt_handle"]])
    found = await trace(gateway, message_id)
    billing = group(found, "billing")
    assert (billing["state"], billing["attempts"], billing["leases_in_flight"]) == ("acked", 2, 0)
    assert billing["dead_letter"] is None
    steps = [(s["what"], s["group"]) for s in found["steps"]]
    assert steps[0] == ("stored", None)
    assert ("retry", "billing") in steps
    assert steps.index(("retry", "billing")) < steps.index(("acked", "billing"))
    assert (found["scheduled"], found["transaction"]) == (None, None)


async def test_a_retry_waiting_out_its_delay_is_retrying_not_a_scheduled_send(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/slow")
    (message_id,) = await send_many(gateway, "orders", 1)
    (leased,) = await received(gateway, "slow", "orders")
    await nack(gateway, "slow", [leased["receipt_handle"]], delay_ms=60_000)  # its retry copy waits in the timer

    found = await trace(gateway, message_id)
    slow = group(found, "slow")
    assert (slow["state"], [r["level"] for r in slow["retries"]]) == ("retrying", [1])
    assert found["scheduled"] is None, "the retry's delay is not the send's scheduling"


async def test_a_dead_lettered_then_redriven_message(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/strict", json={"max_retries": 0})
    (message_id,) = await send_many(gateway, "orders", 1)
    (leased,) = (await receive(gateway, "strict", "orders")).json()["messages"]
    await nack(gateway, "strict", [leased["receipt_handle"]], reason="bad total")

    dead = group(await trace(gateway, message_id), "strict")
    assert dead["state"] == "dead_lettered"
    assert dead["dead_letter"]["topic"] == "%DLQ%strict"
    assert "bad total" in (dead["dead_letter"]["reason"] or "")

    assert (await gateway.post("/v1/groups/strict/dlq:redrive", json={})).status_code == 200
    assert group(await trace(gateway, message_id), "strict")["state"] == "redriven"


async def test_a_scheduled_message_is_traced_before_it_is_due(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.post("/v1/topics/orders/messages", json={"body": "later", "delay_ms": 3_600_000})
    assert answer.status_code == 201, answer.text
    found = await trace(gateway, answer.json()["message_id"])
    assert found["topic"] == "orders"
    assert found["scheduled"]["state"] == "pending"


async def test_an_unknown_message_is_404(gateway: httpx.AsyncClient) -> None:
    (message_id,) = await send_many(gateway, "orders", 1)
    unknown = message_id[:-4] + ("0000" if not message_id.endswith("0000") else "1111")
    answer = await gateway.get(f"/v1/messages/{unknown}/trace")
    assert answer.status_code == 404
    assert problem_type(answer) == "message-not-found"


async def test_an_id_that_is_not_a_message_id_is_404_as_a_find_by_id_is(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.get("/v1/messages/not-an-id/trace")
    assert answer.status_code == 404
    assert problem_type(answer) == "message-not-found"
