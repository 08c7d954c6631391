"""Transaction helpers for the `transactions` scenario: a check-back receiver, and sending halves no one ends.

The receiver (`receiver_app`, served in a process of its own) verifies every
check-back's signature with the secret in `BENCH_CHECKBACK_SECRET`, notes when
the first check of each message arrived, and answers COMMIT; `GET /stats` gives
those times back.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

import orjson
from fastapi import FastAPI, Request, Response

from libs import webhooks

SECRET_ENV = "BENCH_CHECKBACK_SECRET"
GROUP = "bench"
SENDERS = 32


def receiver_app() -> FastAPI:
    secret = os.environ[SECRET_ENV]
    first_check: dict[str, int] = {}
    counts = {"checks": 0, "refused": 0}
    app = FastAPI()

    @app.post("/checkback")
    async def checkback(request: Request) -> Response:
        raw = await request.body()
        try:
            webhooks.verify(secret, request.headers, raw)
        except webhooks.VerificationFailed:
            counts["refused"] += 1
            return Response(status_code=401)
        counts["checks"] += 1
        first_check.setdefault(orjson.loads(raw)["message_id"], int(time.time() * 1000))
        return Response(b'{"status": "COMMIT"}', media_type="application/json")

    @app.get("/stats")
    async def stats() -> Response:
        return Response(orjson.dumps(counts | {"first_check_ms": first_check}), media_type="application/json")

    return app


@dataclass(slots=True)
class Halves:
    stored_at: dict[str, int] = field(default_factory=dict)
    """message id -> when the half message was stored (ms)"""
    errors: int = 0
    first_error: str | None = None
    seconds: float = 0.0


async def send_halves(url: str, topic: str, count: int, senders: int = SENDERS) -> Halves:
    """Send `count` half messages (1 KiB bodies) over `senders` connections, and never end them."""
    import aiohttp

    halves = Halves()
    endpoint = f"{url}/v1/topics/{topic}/transactions"
    body = orjson.dumps({"body": "x" * 1024, "tag": "t", "producer_group": GROUP})
    headers = {"content-type": "application/json"}
    remaining = iter(range(count))
    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=senders)) as session:

        async def sender() -> None:
            for _ in remaining:
                async with session.post(endpoint, data=body, headers=headers) as response:
                    answer = await response.read()
                    if response.status != 201:
                        halves.errors += 1
                        halves.first_error = halves.first_error or f"{response.status} {answer[:300]!r}"
                        continue
                result = orjson.loads(answer)
                halves.stored_at[result["message_id"]] = int(result["stored_at"])

        await asyncio.gather(*(sender() for _ in range(senders)))
    halves.seconds = time.perf_counter() - started
    return halves


async def receiver_stats(port: int) -> dict[str, object]:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/stats") as response:
        response.raise_for_status()
        stats: dict[str, object] = orjson.loads(await response.read())
        return stats
