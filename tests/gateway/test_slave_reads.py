"""With its master gone, a broker name's reads (pulls, by id, by key) are answered by its slave."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp

from libs.broker_api.replication import BrokerRole
from tests.support.replication import in_sync_slave
from tests.support.serving import ServedApp


@pytest.fixture
def broker_overrides() -> dict[str, Any]:
    return {"role": BrokerRole.SYNC_MASTER}  # a send is answered once the slave has it


@pytest.fixture
def gateway_overrides() -> dict[str, Any]:
    return {"route_refresh_seconds": 0.01}  # the route without the master, at the next read


async def test_reads_of_a_broker_whose_master_is_gone_are_answered_by_its_slave(
    gateway: httpx.AsyncClient, nameserver: ServedApp, brokers: dict[str, Any], in_process_apps: dict[str, ASGIApp]
) -> None:
    master = brokers["broker-a"]
    async with in_sync_slave(nameserver, master, in_process_apps):
        assert (await gateway.put("/v1/topics/orders", json={"queues": 1})).status_code == 201
        sent = []
        for n in range(3):
            answer = await gateway.post(
                "/v1/topics/orders/messages", params={"broker": "broker-a"}, json={"body": f"m{n}", "keys": ["k"]}
            )
            assert answer.status_code == 201, answer.text
            sent.append(answer.json())
        on_a = [s for s in sent if s["broker"] == "broker-a"]
        assert on_a, "no send went to broker-a"

        await asyncio.to_thread(master.stop)  # unregisters: the nameservers list only the slave of broker-a

        pulled = await gateway.get("/v1/topics/orders/queues/0/messages", params={"broker": "broker-a"})
        assert pulled.status_code == 200, pulled.text
        assert [m["message_id"] for m in pulled.json()["messages"]] == [s["message_id"] for s in on_a]
        by_id = await gateway.get(f"/v1/messages/{on_a[0]['message_id']}")
        assert by_id.status_code == 200, by_id.text
        by_key = await gateway.get("/v1/topics/orders/messages", params={"key": "k"})
        assert by_key.status_code == 200, by_key.text
        assert {m["message_id"] for m in by_key.json()["messages"]} >= {s["message_id"] for s in on_a}
        for _ in range(4):  # sends pass over the broker with no master
            later = await gateway.post("/v1/topics/orders/messages", json={"body": "x"})
            assert later.status_code == 201, later.text
            assert later.json()["broker"] == "broker-b"
