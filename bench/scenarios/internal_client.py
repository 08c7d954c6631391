"""httpx against aiohttp as the internal hot-path client (issue: foundation).

Both send the same 1 KiB binary POST to the same uvicorn server over 32 pooled
keep-alive connections; the faster one is what `libs.http.client` uses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from bench.figures import BenchOptions, Figure
from bench.loopback import served

BODY = b"x" * 1024
CONCURRENCY = 32


def echo_app() -> Callable[..., Awaitable[None]]:
    async def app(scope: dict, receive: Callable, send: Callable) -> None:  # type: ignore[type-arg]
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/octet-stream")]}
        )
        await send({"type": "http.response.body", "body": b"ok"})

    return app


async def _drive(send_one: Callable[[], Awaitable[None]], total: int) -> float:
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await send_one()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return total / (time.perf_counter() - started)


async def _aiohttp_rate(url: str, total: int) -> float:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def send_one() -> None:
            async with session.post(url, data=BODY) as response:
                await response.read()

        await _drive(send_one, total // 10)
        return await _drive(send_one, total)


async def _httpx_rate(url: str, total: int) -> float:
    import httpx

    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(limits=limits) as client:

        async def send_one() -> None:
            response = await client.post(url, content=BODY)
            response.read()

        await _drive(send_one, total // 10)
        return await _drive(send_one, total)


def internal_client(options: BenchOptions) -> list[Figure]:
    import uvloop

    total = 3_000 if options.quick else 20_000
    with served("bench.scenarios.internal_client:echo_app") as port:
        url = f"http://127.0.0.1:{port}/put"
        aiohttp_rate = uvloop.run(_aiohttp_rate(url, total))
        httpx_rate = uvloop.run(_httpx_rate(url, total))
    return [
        Figure(
            "internal client: aiohttp 1 KiB POST, 32 conns",
            aiohttp_rate,
            "httpx AsyncClient, same load",
            httpx_rate,
            "r/s",
        )
    ]
