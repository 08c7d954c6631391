"""`GET /v1/overview`: brokers, rates, the busiest topics and the groups furthest behind, in one answer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.gateway_calls import received, send_many
from tests.support.in_process import InProcessApp
from tests.support.waiting import eventually


@pytest.fixture
def broker_overrides() -> dict[str, Any]:
    return {"lag_sample_seconds": 0.05}


async def overview(gateway: httpx.AsyncClient) -> dict[str, Any]:
    answer = await gateway.get("/v1/overview")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_the_overview_names_the_busiest_topic_and_the_group_furthest_behind(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/payments", json={"queues": 4})
    await gateway.put("/v1/groups/billing")
    assert await received(gateway, "billing", "payments", max_messages=1, wait_seconds=0) == []
    await send_many(gateway, "payments", 8)

    async def sending_and_seen() -> bool:  # the rate is over the last sampling interval: keep sending
        await send_many(gateway, "payments", 1)
        found = await overview(gateway)
        behind = [g["lag"] for g in found["groups_behind"] if g["group"] == "billing"]
        return found["send_rate"] > 0 and behind != [] and behind[0] >= 8  # a sample after the 8 sends

    await eventually(sending_and_seen, "a send rate and billing behind", 10)
    found = await overview(gateway)
    assert (found["topics"], found["groups"]) == (1, 1)
    (busiest,) = found["busiest_topics"]
    assert busiest["topic"] == "payments"
    assert busiest["messages"] >= 9
    (billing,) = found["groups_behind"]
    assert billing["lag"] >= 8
    assert [t["topic"] for t in billing["topics"]] == ["payments"]
    brokers = found["brokers"]
    assert sorted(b["name"] for b in brokers) == ["broker-a", "broker-b"]
    assert all(b["alive"] and b["role"] == "master" for b in brokers)
    assert all(b["disk"]["total_bytes"] >= b["disk"]["used_bytes"] > 0 for b in brokers)
    assert sum(b["disk"]["store_bytes"] for b in brokers) > 0


async def test_a_broker_that_does_not_answer_is_shown_not_alive(
    gateway: httpx.AsyncClient, brokers: dict[str, InProcessApp], in_process_apps: dict[str, Any]
) -> None:
    in_process_apps.pop(brokers["broker-b"].address)  # broker-b's address now refuses connections
    found = await overview(gateway)
    states = {b["name"]: b["alive"] for b in found["brokers"]}
    assert states == {"broker-a": True, "broker-b": False}
