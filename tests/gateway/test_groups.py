"""`/v1/groups`: group admin on every broker, lag, offset resets, dead letters (peek and redrive)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.gateway_calls import ack, nack, problem_type, receive, register_silent_broker, send_many
from tests.support.in_process import InProcessApp
from tests.support.serving import ServedApp


async def test_put_creates_the_group_on_every_broker_then_updates_it(
    gateway: httpx.AsyncClient, brokers: dict[str, InProcessApp]
) -> None:
    created = await gateway.put("/v1/groups/billing", json={"max_retries": 3, "fifo": True})
    assert created.status_code == 201, created.text
    group = created.json()
    assert (group["name"], group["max_retries"], group["fifo"], group["broadcast"]) == ("billing", 3, True, False)
    assert group["retry_policy"] == {"type": "levels", "initial_ms": 1000, "max_ms": 7_200_000}
    assert (group["fifo_suspend_ms"], group["consume_from"], group["subscriptions"]) == (1000, "first", [])

    for served in brokers.values():
        async with served.client() as client:
            stored = await client.get("/internal/groups/billing")
        assert stored.status_code == 200, f"{served.url}: {stored.text}"
        assert stored.json()["max_retries"] == 3

    policy = {"type": "exponential", "initial_ms": 500, "max_ms": 60_000}
    updated = await gateway.put("/v1/groups/billing", json={"retry_policy": policy})
    assert updated.status_code == 200, updated.text
    assert updated.json()["retry_policy"] == policy
    assert (updated.json()["max_retries"], updated.json()["fifo"]) == (3, True), "fields not named were changed"


async def test_put_without_a_body_takes_every_default(gateway: httpx.AsyncClient) -> None:
    created = await gateway.put("/v1/groups/plain")
    assert created.status_code == 201, created.text
    assert (created.json()["max_retries"], created.json()["fifo"]) == (16, False)


async def test_get_list_and_delete(gateway: httpx.AsyncClient) -> None:
    for name in ("beta", "alpha"):
        assert (await gateway.put(f"/v1/groups/{name}")).status_code == 201

    assert (await gateway.get("/v1/groups/alpha")).json()["name"] == "alpha"
    listed = (await gateway.get("/v1/groups")).json()
    assert [g["name"] for g in listed["groups"]] == ["alpha", "beta"]
    assert listed["unavailable"] == []

    assert (await gateway.delete("/v1/groups/alpha")).status_code == 204
    gone = await gateway.get("/v1/groups/alpha")
    assert gone.status_code == 404
    assert problem_type(gone) == "group-not-found"
    assert [g["name"] for g in (await gateway.get("/v1/groups")).json()["groups"]] == ["beta"]


async def test_unknown_groups_are_404(gateway: httpx.AsyncClient) -> None:
    for answer in (
        await gateway.get("/v1/groups/nobody"),
        await gateway.delete("/v1/groups/nobody"),
        await gateway.get("/v1/groups/nobody/lag"),
    ):
        assert answer.status_code == 404, answer.text
        assert problem_type(answer) == "group-not-found"


async def test_a_subscription_is_recorded_by_receive(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/audit")
    await gateway.put("/v1/topics/ledger")
    filtered = {"filter": {"type": "TAG", "expression": "paid || refunded"}}
    assert (await receive(gateway, "audit", "ledger", **filtered)).status_code == 200

    group = (await gateway.get("/v1/groups/audit")).json()
    assert group["subscriptions"] == [{"topic": "ledger", "filter_type": "TAG", "expression": "paid || refunded"}]


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"max_retries": -1}, 422, "validation-failed"),
        ({"max_retries": 10_001}, 422, "validation-failed"),
        ({"fifo_suspend_ms": 3_600_001}, 422, "validation-failed"),
        ({"consume_from": "middle"}, 422, "validation-failed"),
        ({"retry_policy": {"type": "fibonacci"}}, 422, "validation-failed"),
        ({"retry_policy": {"type": "exponential", "initial_ms": 5000, "max_ms": 10}}, 422, "validation-failed"),
        ({"colour": "red"}, 422, "validation-failed"),
    ],
)
async def test_bad_group_settings_are_refused(
    gateway: httpx.AsyncClient, body: dict[str, Any], status: int, kind: str
) -> None:
    answer = await gateway.put("/v1/groups/billing", json=body)
    assert answer.status_code == status, answer.text
    assert problem_type(answer) == kind


async def test_bad_group_names_and_bodies_are_400(gateway: httpx.AsyncClient) -> None:
    bad_name = await gateway.put("/v1/groups/bad%20name")
    assert bad_name.status_code == 400
    assert problem_type(bad_name) == "invalid-request"
    assert "group name 'bad name' is invalid" in bad_name.json()["detail"]

    malformed = await gateway.put(
        "/v1/groups/billing", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 400
    assert problem_type(malformed) == "malformed-body"


async def test_lag_counts_what_is_not_acked_and_what_is_in_flight(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/lagging")
    await send_many(gateway, "orders", 3)
    leased = (await receive(gateway, "lagging", "orders", max_messages=32)).json()["messages"]
    assert len(leased) == 3
    await ack(gateway, "lagging", [leased[0]["receipt_handle"]])

    lag = (await gateway.get("/v1/groups/lagging/lag")).json()
    assert lag["group"] == "lagging"
    assert (lag["total_lag"], lag["total_in_flight"]) == (2, 2)
    ours = [q for q in lag["queues"] if q["topic"] == "orders"]
    assert {q["broker"] for q in ours} <= {"broker-a", "broker-b"}
    assert sum(q["lag"] for q in ours) == 2
    assert all(q["lag"] == q["broker_offset"] - q["consumer_offset"] for q in ours)
    assert sum(q["broker_offset"] for q in ours) == 3

    await ack(gateway, "lagging", [m["receipt_handle"] for m in leased[1:]])
    lag = (await gateway.get("/v1/groups/lagging/lag")).json()
    assert (lag["total_lag"], lag["total_in_flight"]) == (0, 0)


async def test_offsets_reset_rewinds_by_offset_and_by_time(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/replay")
    sent = await send_many(gateway, "orders", 3)
    first = (await receive(gateway, "replay", "orders", max_messages=32)).json()["messages"]
    await ack(gateway, "replay", [m["receipt_handle"] for m in first])
    assert (await receive(gateway, "replay", "orders")).json()["messages"] == []

    reset = await gateway.post("/v1/groups/replay/topics/orders/offsets:reset", json={"offset": 0})
    assert reset.status_code == 200, reset.text
    assert reset.json()["group"] == "replay"
    assert {q["offset"] for q in reset.json()["queues"]} == {0}
    again = (await receive(gateway, "replay", "orders", max_messages=32)).json()["messages"]
    assert sorted(m["message_id"] for m in again) == sorted(sent)
    await ack(gateway, "replay", [m["receipt_handle"] for m in again])

    by_time = await gateway.post(
        "/v1/groups/replay/topics/orders/offsets:reset", json={"timestamp": "2020-01-01T00:00:00Z"}
    )
    assert by_time.status_code == 200, by_time.text
    assert len((await receive(gateway, "replay", "orders", max_messages=32)).json()["messages"]) == 3


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({}, 422, "validation-failed"),
        ({"offset": 0, "timestamp": 0}, 422, "validation-failed"),
        ({"offset": -1}, 422, "validation-failed"),
        ({"timestamp": "yesterday"}, 400, "invalid-request"),
        ({"timestamp": "2026-01-01T00:00:00"}, 400, "invalid-request"),
    ],
)
async def test_bad_offset_resets_are_refused(
    gateway: httpx.AsyncClient, body: dict[str, Any], status: int, kind: str
) -> None:
    await gateway.put("/v1/groups/replay")
    await gateway.put("/v1/topics/orders")
    answer = await gateway.post("/v1/groups/replay/topics/orders/offsets:reset", json=body)
    assert answer.status_code == status, answer.text
    assert problem_type(answer) == kind


async def test_a_message_nacked_past_max_retries_is_a_dead_letter_and_can_be_redriven(
    gateway: httpx.AsyncClient,
) -> None:
    await gateway.put("/v1/groups/strict", json={"max_retries": 0})
    (message_id,) = await send_many(gateway, "orders", 1)
    (leased,) = (await receive(gateway, "strict", "orders")).json()["messages"]
    (result,) = (await nack(gateway, "strict", [leased["receipt_handle"]], reason="bad total")).json()["results"]
    assert result["ok"], result

    peeked = await gateway.get("/v1/groups/strict/dlq")
    assert peeked.status_code == 200, peeked.text
    (dead,) = peeked.json()["messages"]
    assert (dead["message_id"], dead["original_topic"], dead["attempts"]) == (message_id, "orders", 1)
    assert "bad total" in (dead["reason"] or "")
    assert dead["dead_lettered_at"] >= leased["stored_at"]
    assert (await receive(gateway, "strict", "orders")).json()["messages"] == []

    redriven = await gateway.post("/v1/groups/strict/dlq:redrive", json={})
    assert redriven.status_code == 200, redriven.text
    assert (redriven.json()["redriven"], redriven.json()["message_ids"]) == (1, [message_id])
    assert redriven.json()["remaining"] == 0
    back = (await receive(gateway, "strict", "orders", wait_seconds=5)).json()["messages"]
    assert [(m["message_id"], m["topic"]) for m in back] == [(message_id, "orders")]


async def dead_letter_all(gateway: httpx.AsyncClient, group: str, topic: str, count: int) -> list[str]:
    """Send `count` messages and nack each once into the group's DLQ (max_retries 0); their ids."""
    await gateway.put(f"/v1/groups/{group}", json={"max_retries": 0})
    ids = await send_many(gateway, topic, count)
    handles: list[str] = []
    while len(handles) < count:
        leased = (await receive(gateway, group, topic, max_messages=count, wait_seconds=5)).json()["messages"]
        assert leased, f"only {len(handles)} of {count} messages were received"
        handles += [m["receipt_handle"] for m in leased]
    assert all(r["ok"] for r in (await nack(gateway, group, handles)).json()["results"])
    return ids


async def still_dead(gateway: httpx.AsyncClient, group: str) -> list[str]:
    listed = await gateway.get(f"/v1/groups/{group}/dlq")
    assert listed.status_code == 200, listed.text
    return sorted(m["message_id"] for m in listed.json()["messages"])


async def test_the_dlq_lists_what_is_still_dead_after_each_redrive(gateway: httpx.AsyncClient) -> None:
    first, second = await dead_letter_all(gateway, "strict", "orders", 2)
    assert await still_dead(gateway, "strict") == sorted([first, second])

    by_id = await gateway.post("/v1/groups/strict/dlq:redrive", json={"message_ids": [first]})
    assert by_id.status_code == 200, by_id.text
    assert (by_id.json()["message_ids"], by_id.json()["remaining"]) == ([first], 1)
    assert await still_dead(gateway, "strict") == [second], "the message redriven by id is still listed"

    again = (await gateway.post("/v1/groups/strict/dlq:redrive", json={"message_ids": [first]})).json()
    assert (again["redriven"], again["not_found"]) == (0, [first]), "a redriven message was sent twice"

    rest = (await gateway.post("/v1/groups/strict/dlq:redrive", json={})).json()
    assert (rest["message_ids"], rest["remaining"]) == ([second], 0), "redrive all sent the one redriven by id again"
    assert await still_dead(gateway, "strict") == [], "the messages redriven by all are still listed"


async def test_redrive_by_id_names_the_ids_it_did_not_find(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/strict", json={"max_retries": 0})
    redriven = await gateway.post("/v1/groups/strict/dlq:redrive", json={"message_ids": ["0" * 32]})
    assert redriven.status_code == 200, redriven.text
    assert (redriven.json()["redriven"], redriven.json()["not_found"]) == (0, ["0" * 32])


@pytest.mark.parametrize(
    "body",
    [{"max_messages": 0}, {"per_second": 0}, {"message_ids": []}, {"all": True}],
)
async def test_bad_redrives_are_refused(gateway: httpx.AsyncClient, body: dict[str, Any]) -> None:
    answer = await gateway.post("/v1/groups/strict/dlq:redrive", json=body)
    assert answer.status_code == 422, answer.text
    assert problem_type(answer) == "validation-failed"


async def test_a_silent_broker_fails_writes_but_not_reads(gateway: httpx.AsyncClient, nameserver: ServedApp) -> None:
    await gateway.put("/v1/groups/billing")
    address = await register_silent_broker(nameserver, "orders")

    assert (await gateway.get("/v1/groups/billing")).json()["name"] == "billing"
    listed = (await gateway.get("/v1/groups")).json()
    assert ([g["name"] for g in listed["groups"]], listed["unavailable"]) == (["billing"], ["broker-c"])
    assert (await gateway.get("/v1/groups/billing/lag")).json()["unavailable"] == ["broker-c"]
    assert (await gateway.get("/v1/groups/billing/dlq")).json()["unavailable"] == ["broker-c"]

    answer = await gateway.put("/v1/groups/billing", json={"max_retries": 2})
    assert answer.status_code == 503
    assert problem_type(answer) == "broker-unavailable"
    assert answer.json()["brokers"] == ["broker-c"]
    assert f"broker broker-c at {address} did not answer" in answer.json()["detail"]

    unknown = await gateway.get("/v1/groups/nobody")
    assert (unknown.status_code, problem_type(unknown)) == (503, "broker-unavailable"), "404 though one did not answer"
