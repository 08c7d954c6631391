"""The gateway measures delivery times on the clock it is given (create_app's `clock`), not on the wall."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from tests.support.clock import FakeClock

GATEWAY_NOW = datetime(2035, 1, 1, tzinfo=UTC).timestamp()


@pytest.fixture
def gateway_clock() -> FakeClock:
    return FakeClock(GATEWAY_NOW)


async def send(gateway: httpx.AsyncClient, deliver_at: str) -> httpx.Response:
    await gateway.put("/v1/topics/clocked")
    return await gateway.post("/v1/topics/clocked/messages", json={"body": "x", "deliver_at": deliver_at})


async def test_a_deliver_at_before_the_gateways_now_is_delivered_at_once_with_a_warning(
    gateway: httpx.AsyncClient,
) -> None:
    answer = await send(gateway, "2034-12-31T00:00:00Z")  # years ahead of the wall clock

    assert answer.status_code == 201, answer.text
    assert answer.json()["warning"] == "deliver_at is in the past: the message is delivered now"
    assert answer.json()["stored_at"] < GATEWAY_NOW * 1000, "the broker stores it on its own (wall) clock"


async def test_the_scheduling_limit_counts_from_the_gateways_now(gateway: httpx.AsyncClient) -> None:
    answer = await send(gateway, "2035-02-15T00:00:00Z")

    assert answer.status_code == 400, answer.text
    assert "45.0 days away; the limit is 30 days" in answer.json()["detail"]
