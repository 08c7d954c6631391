"""`GET /v1/groups/{group}/lag/history`: the brokers' samples of a group's lag, added up per interval."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.support.gateway_calls import ack, problem_type, receive, send_many
from tests.support.in_process import InProcessApp
from tests.support.waiting import eventually


@pytest.fixture
def broker_overrides() -> dict[str, Any]:
    return {"lag_sample_seconds": 0.05, "lag_history_seconds": 60}


async def history(gateway: httpx.AsyncClient, group: str, **params: str) -> dict[str, Any]:
    answer = await gateway.get(f"/v1/groups/{group}/lag/history", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def lags(found: dict[str, Any], topic: str) -> list[int]:
    return [p["lag"] for s in found["series"] if s["topic"] == topic for p in s["samples"]]


async def test_the_history_shows_a_group_falling_behind_and_catching_up(
    gateway: httpx.AsyncClient, brokers: dict[str, InProcessApp]
) -> None:
    await gateway.put("/v1/topics/invoices", json={"queues": 2})
    await gateway.put("/v1/groups/billing")
    assert (await receive(gateway, "billing", "invoices", max_messages=1, wait_seconds=0)).status_code == 200
    await send_many(gateway, "invoices", 6)

    async def behind() -> bool:
        # The latest interval is still open (a broker yet to sample in it may change its sum);
        # the ones before it are final.
        return 6 in lags(await history(gateway, "billing"), "invoices")[:-1]

    await eventually(behind, "a closed interval with the 6 sent and not received")
    gauges = 0
    for broker in brokers.values():
        async with broker.client() as client:
            metrics = (await client.get("/metrics")).text
        gauges += sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in metrics.splitlines()
            if line.startswith('petrel_group_lag{group="billing",topic="invoices"}')
        )
    assert gauges == 6, "Prometheus's petrel_group_lag, over the brokers, is the lag too"
    leased = (await receive(gateway, "billing", "invoices", max_messages=32)).json()["messages"]
    assert len(leased) == 6
    await ack(gateway, "billing", [m["receipt_handle"] for m in leased])

    async def caught_up() -> bool:
        seen = lags(await history(gateway, "billing"), "invoices")
        return 6 in seen and seen[-1] == 0

    await eventually(caught_up, "a sample after the acks with no lag")
    found = await history(gateway, "billing", topic="invoices")
    assert found["group"] == "billing"
    assert found["interval_seconds"] == 0.05
    assert [s["topic"] for s in found["series"]] == ["invoices"]
    seen = lags(found, "invoices")
    assert seen.index(6) < len(seen) - 1, "the catch-up comes after the lag"
    times = [datetime.fromisoformat(p["at"]) for p in found["series"][0]["samples"]]
    assert times == sorted(times)


async def test_an_unknown_groups_history_is_404(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.get("/v1/groups/nobody/lag/history")
    assert answer.status_code == 404
    assert problem_type(answer) == "group-not-found"
