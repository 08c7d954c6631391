"""The broker's memory stays bounded under a month of traffic: lease timers, broadcast clients that went away."""

from __future__ import annotations

import httpx

from services.broker.app import create_app
from services.broker.consume.pop import COMPACT_TIMERS_FROM
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import gauge, make_group, put, receive, settle
from tests.support.serving import ServedApp
from tests.support.waiting import eventually

LEASED = 3 * COMPACT_TIMERS_FROM


async def test_timers_of_acked_leases_do_not_pile_up(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver)
    async for broker in in_process(create_app(settings)):
        await broker.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        await make_group(broker)
        await put(broker, *(f"m{i}" for i in range(LEASED)))
        acked = 0
        while acked < LEASED:
            leased = await receive(broker, invisible_ms=3_600_000)  # each lease's timer is due in an hour
            assert leased, f"only {acked} of {LEASED} messages came"
            results = await settle(broker, "ack", *(handle for handle, _, _ in leased))
            assert all(r["ok"] for r in results)
            acked += len(leased)

        assert await gauge(broker, "petrel_broker_lease_timers") <= COMPACT_TIMERS_FROM, (
            f"{LEASED} leases were acked, their hour-long timers still held"
        )


async def lag_clients(broker: httpx.AsyncClient) -> set[str]:
    answer = await broker.get("/internal/groups/billing/lag")
    assert answer.status_code == 200, answer.text
    return {q["client_id"] for q in answer.json()["queues"]}


async def test_a_broadcast_client_gone_longer_than_its_idle_time_is_dropped(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver, lease_scan_ms=10, broadcast_client_idle_seconds=0.3)
    async for broker in in_process(create_app(settings)):
        await broker.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        await make_group(broker, broadcast=True)
        await put(broker, "a", "b")
        assert len(await receive(broker, client_id="gone")) == 2
        assert len(await receive(broker, client_id="staying")) == 2
        assert await lag_clients(broker) == {"gone", "staying"}

        async def gone_dropped(broker: httpx.AsyncClient = broker) -> bool:
            await receive(broker, client_id="staying")  # this one keeps receiving
            return await lag_clients(broker) == {"staying"}

        await eventually(gone_dropped, "the client not seen for its idle time is dropped")
        assert await gauge(broker, "petrel_broker_broadcast_clients") == 1
    async for broker in in_process(create_app(settings)):  # its offsets are gone from disk too
        assert "gone" not in await lag_clients(broker)
