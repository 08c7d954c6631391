"""Hundreds of waiting receives and pulls never make a send, an ack or an admin call wait for a connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import GatewaySettings
from tests.support.apps import in_process
from tests.support.gateway_calls import problem_type, received
from tests.support.serving import ServedApp
from tests.support.waiting import eventually

WAITING_RECEIVES = 250
WAITING_PULLS = 50
PROMPT = 15.0
"""For the four calls together. An answer that had to wait for a long poll to end would take the poll's 30 s; 5 s
was passed on a machine loaded 2.5x beyond its cores, with the 300 polls' tasks on the same event loop."""


@pytest.fixture
def gateway_overrides() -> dict[str, Any]:
    """The gateway's calls to the brokers may take up to PROMPT: what is tested is that none waits behind the polls
    for a connection (a poll's 30 s), not how fast a loaded machine answers (the default 5 s ran out for an ack with
    the whole suite at 0.75 CPU)."""
    return {"broker_timeout_seconds": PROMPT}


def held_connections(brokers: dict[str, ServedApp]) -> int:
    return sum(len(b.server.server_state.connections) for b in brokers.values())


async def open_long_polls(gateway: httpx.AsyncClient, broker: str) -> list[asyncio.Task[httpx.Response]]:
    receives = [
        asyncio.create_task(
            gateway.post("/v1/groups/idlers/topics/idle/receive", json={"wait_seconds": 30}, timeout=60)
        )
        for _ in range(WAITING_RECEIVES)
    ]
    params: dict[str, str | int] = {"offset": 0, "wait_ms": 30_000, "broker": broker}
    pulls = [
        asyncio.create_task(gateway.get("/v1/topics/idle/queues/0/messages", params=params, timeout=60))
        for _ in range(WAITING_PULLS)
    ]
    return receives + pulls


async def test_sends_acks_and_admin_calls_are_answered_while_300_long_polls_wait(
    gateway: httpx.AsyncClient, brokers: dict[str, ServedApp]
) -> None:
    for topic in ("orders", "idle"):
        assert (await gateway.put(f"/v1/topics/{topic}")).status_code in (200, 201)
    for group in ("workers", "idlers"):
        await gateway.put(f"/v1/groups/{group}")
    await gateway.post("/v1/topics/orders/messages", json={"body": "before the polls"})
    (leased,) = await received(gateway, "workers", "orders", invisible_seconds=60)
    baseline = held_connections(brokers)

    polls = await open_long_polls(gateway, "broker-a")
    try:
        await eventually(
            lambda: _at_least(held_connections(brokers) - baseline, 250), "the long polls are held by the brokers"
        )
        async with asyncio.timeout(PROMPT):
            sent = await gateway.post("/v1/topics/orders/messages", json={"body": "during the polls"})
            acked = await gateway.post("/v1/groups/workers/ack", json={"receipt_handles": [leased["receipt_handle"]]})
            group_read = await gateway.get("/v1/groups/workers")
            topic_made = await gateway.put("/v1/topics/audit")
        assert sent.status_code == 201, sent.text
        assert acked.status_code == 200, acked.text
        assert acked.json()["results"][0]["ok"], acked.text
        assert group_read.status_code == 200, group_read.text
        assert topic_made.status_code == 201, topic_made.text
        assert ended_early(polls) == [], "long polls ended early: they were not waiting alongside the calls"
    finally:
        for poll in polls:
            poll.cancel()
        await asyncio.gather(*polls, return_exceptions=True)


def ended_early(polls: list[asyncio.Task[httpx.Response]]) -> list[str]:
    """What each poll that is no longer waiting ended with (an answer, or an error)."""
    ended = [p for p in polls if p.done() and not p.cancelled()]
    return [
        repr(p.exception()) if p.exception() else f"{p.result().status_code} {p.result().text[:200]}" for p in ended
    ]


async def _at_least(value: int, bound: int) -> bool:
    return value >= bound


@pytest.fixture
async def small_gateway(nameserver: ServedApp, brokers: dict[str, ServedApp]) -> AsyncIterator[httpx.AsyncClient]:
    settings = GatewaySettings(nameservers=[nameserver.address], max_long_polls=2)
    async for client in in_process(create_app(settings)):
        yield client


async def test_a_long_poll_past_the_gateways_bound_is_refused_at_once(
    small_gateway: httpx.AsyncClient, brokers: dict[str, ServedApp]
) -> None:
    await small_gateway.put("/v1/topics/idle")
    await small_gateway.put("/v1/groups/idlers")
    body = {"wait_seconds": 30}
    baseline = held_connections(brokers)
    polls = [
        asyncio.create_task(small_gateway.post("/v1/groups/idlers/topics/idle/receive", json=body, timeout=60))
        for _ in range(2)
    ]
    try:
        # each waiting receive holds a /ready on both brokers
        await eventually(lambda: _at_least(held_connections(brokers) - baseline, 4), "the two polls wait")
        async with asyncio.timeout(PROMPT):
            refused = await small_gateway.post("/v1/groups/idlers/topics/idle/receive", json=body)
        assert refused.status_code == 429, refused.text
        assert problem_type(refused) == "too-many-long-polls"
        pulled = await small_gateway.get(
            "/v1/topics/idle/queues/0/messages", params={"wait_ms": 30_000, "broker": "broker-a"}
        )
        assert pulled.status_code == 429, pulled.text
        assert problem_type(pulled) == "too-many-long-polls"
        not_waiting = await small_gateway.post("/v1/groups/idlers/topics/idle/receive", json={"wait_seconds": 0})
        assert not_waiting.status_code == 200, not_waiting.text
        assert not_waiting.json()["messages"] == []
        assert ended_early(polls) == [], "the two waiting polls ended early"
    finally:
        for poll in polls:
            poll.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
