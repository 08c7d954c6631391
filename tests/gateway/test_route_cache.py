"""RouteCache under a burst: requests that miss the cache at once share one nameserver call."""

from __future__ import annotations

import asyncio

import httpx

from libs.broker_api.nameservers import NameserverClient
from libs.broker_api.route_cache import RouteCache
from libs.http.client import InternalClient
from tests.support.serving import ServedApp

TOPIC = {"read_queues": 2, "write_queues": 2}


async def route_calls(nameserver: ServedApp) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{nameserver.url}/metrics")).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("petrel_http_requests_total") and 'route="/internal/routes/{topic}"' in line
    )


async def test_a_burst_of_misses_asks_the_nameserver_once(nameserver: ServedApp, brokers: dict[str, ServedApp]) -> None:
    async with InternalClient() as client:
        await client.json("PUT", f"http://{brokers['broker-a'].address}/internal/topics/orders", body=TOPIC)
        routes = RouteCache(NameserverClient(client, [nameserver.address]), refresh_seconds=30)
        before = await route_calls(nameserver)

        found = await asyncio.gather(*(routes.get("orders") for _ in range(300)))

        assert {r.topic for r in found} == {"orders"}
        assert await route_calls(nameserver) - before == 1


async def test_a_caller_that_leaves_does_not_cancel_the_others_fetch(
    nameserver: ServedApp, brokers: dict[str, ServedApp]
) -> None:
    async with InternalClient() as client:
        await client.json("PUT", f"http://{brokers['broker-a'].address}/internal/topics/orders", body=TOPIC)
        routes = RouteCache(NameserverClient(client, [nameserver.address]), refresh_seconds=30)
        leaving = asyncio.create_task(routes.get("orders"))
        staying = asyncio.create_task(routes.get("orders"))
        await asyncio.sleep(0)
        leaving.cancel()
        assert (await staying).topic == "orders"
