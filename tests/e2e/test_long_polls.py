"""Real processes: 300 receives waiting in the gateway never hold up sends, acks or admin calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from tests.support.cluster import LocalCluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

WAITING = 300
PROMPT = 5.0
"""Generous: a call that had to wait for a poll to end would take the poll's 30 s."""


async def waiting_polls(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    (line,) = [line for line in text.splitlines() if line.startswith("petrel_gateway_long_polls_waiting ")]
    return float(line.split()[1])


async def test_sends_acks_and_admin_calls_are_answered_while_300_receives_wait(
    shared_cluster: LocalCluster, shared_gateway: httpx.AsyncClient, unique: Callable[[str], str]
) -> None:
    client = shared_gateway
    orders, idle, workers, idlers = unique("orders"), unique("idle"), unique("workers"), unique("idlers")
    for topic in (orders, idle):
        assert (await client.put(f"/v1/topics/{topic}")).status_code == 201
    for group in (workers, idlers):
        assert (await client.put(f"/v1/groups/{group}")).status_code == 201
    await client.post(f"/v1/topics/{orders}/messages", json={"body": "before the polls"})
    answer = await client.post(f"/v1/groups/{workers}/topics/{orders}/receive", json={"invisible_seconds": 60})
    (leased,) = answer.json()["messages"]
    already = await waiting_polls(client)

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=shared_cluster.url, timeout=60, limits=limits) as pollers:
        polls = [
            asyncio.create_task(pollers.post(f"/v1/groups/{idlers}/topics/{idle}/receive", json={"wait_seconds": 30}))
            for _ in range(WAITING)
        ]
        try:

            async def all_waiting() -> bool:
                return await waiting_polls(client) >= already + WAITING

            await eventually(all_waiting, f"{WAITING} receives wait in the gateway", timeout=15)
            async with asyncio.timeout(PROMPT):
                sent = await client.post(f"/v1/topics/{orders}/messages", json={"body": "during the polls"})
                acked = await client.post(
                    f"/v1/groups/{workers}/ack", json={"receipt_handles": [leased["receipt_handle"]]}
                )
                group_read = await client.get(f"/v1/groups/{workers}")
                topic_made = await client.put(f"/v1/topics/{unique('audit')}")
            assert sent.status_code == 201, sent.text
            assert acked.json()["results"][0]["ok"], acked.text
            assert group_read.status_code == 200, group_read.text
            assert topic_made.status_code == 201, topic_made.text
            assert not any(p.done() for p in polls), "a poll ended: it was not waiting alongside the calls"
        finally:
            for poll in polls:
                poll.cancel()
            await asyncio.gather(*polls, return_exceptions=True)
